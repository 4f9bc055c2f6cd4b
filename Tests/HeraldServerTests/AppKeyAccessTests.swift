import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

/// The app-key middleware over every documented `/v1/apps/{app}` route, in process: who gets
/// past it is decided before any route runs, the same way for all of them.
@Suite struct AppKeyAccessTests {
    /// The routes a client key may call; every other app route is for server keys.
    static let clientRoutes: Set<String> = [
        "POST /v1/apps/{}/devices", "DELETE /v1/apps/{}/devices/{}", "POST /v1/apps/{}/opened",
        "POST /v1/apps/{}/received",
        "POST /v1/apps/{}/notifications/{}/resolve", "POST /v1/apps/{}/notifications/{}/responses",
        "GET /v1/apps/{}/catalog/categories", "GET /v1/apps/{}/catalog/tracks", "GET /v1/apps/{}/webpush/key",
        "PUT /v1/apps/{}/devices/{}/activity-tokens/start/{}", "PUT /v1/apps/{}/activities/{}/tokens/{}",
    ]

    /// A documented route with its parameters filled in for app `demo`.
    static func uri(_ path: String) -> String {
        path.split(separator: "/", omittingEmptySubsequences: false).map { segment in
            switch segment {
            case "{app}": "demo"
            case _ where segment.hasPrefix("{"): "x"
            default: String(segment)
            }
        }.joined(separator: "/")
    }

    @Test("no key is a 401, another app's key a 401, a client key a 403 on server routes; each route names the field")
    func accessMatrix() async throws {
        try await withServer(clock: nil, testing: .router) { server in
            let routes = try RouteFuzzTests.documentedRoutes().filter { $0.1.hasPrefix("/v1/apps/{app}") }
            #expect(routes.count >= 25)
            var keyless: Set<String> = []
            for (method, path) in routes {
                let shape = "\(method.rawValue) \(OpenAPIRouterTests.shape(path))"
                func status(_ key: String?) async throws -> (HTTPResponse.Status, String) {
                    var headers: HTTPFields = [.contentType: "application/json"]
                    if let key { headers[.authorization] = "Bearer \(key)" }
                    let response = try await server.client.execute(
                        uri: Self.uri(path), method: method, headers: headers, body: ByteBuffer(string: "{}"))
                    return (response.status, String(buffer: response.body))
                }
                let (none, noneBody) = try await status(nil)
                guard none == .unauthorized else {
                    // Only the action-token route takes no key.
                    keyless.insert(shape)
                    continue
                }
                #expect(noneBody.contains(#""field":"authorization""#), "\(shape): \(noneBody)")
                #expect(try await status("silent-server-key-0123456789").0 == .unauthorized, "\(shape)")
                let (client, clientBody) = try await status(ServerHarness.client)
                if Self.clientRoutes.contains(shape) {
                    #expect(client != .forbidden || !clientBody.contains("only register"), "\(shape): \(clientBody)")
                } else {
                    #expect(client == .forbidden, "\(shape) with a client key: \(client)")
                }
                #expect(![.unauthorized, .forbidden].contains(try await status(ServerHarness.server).0), "\(shape)")
            }
            #expect(keyless == ["POST /v1/apps/{}/actions"], "\(keyless.sorted())")
        }
    }
}
