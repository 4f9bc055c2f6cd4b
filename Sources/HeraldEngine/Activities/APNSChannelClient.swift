import AsyncHTTPClient
package import Foundation
package import HeraldAPNs
import HeraldCore
import NIOCore
import NIOHTTP1
import NIOSSL

/// APNs broadcast channels for one app and environment (iOS 18; protocols.md §9): the
/// channel management API on its own hosts and ports (a pool of its own), and broadcast sends
/// on the push host. Few requests (a channel per event, a publish per update), so the shared
/// HTTP client rather than the push path's connections; HTTP/2 by ALPN, signed with the app's
/// provider token.
package final class APNSChannelClient: Sendable {
    /// What Apple answered.
    package struct Answer: Sendable, Equatable {
        package var status: Int
        package var reason: String?
        /// `apns-channel-id` of a created channel.
        package var channelID: String?
        package var body: String
    }

    let bundleID: String
    let managementURL: String
    let pushURL: String
    private let tokens: APNSProviderTokenManager
    private let client: HTTPClient

    /// Apple's management hosts: the two environments listen on different ports.
    package static func managementURL(_ environment: APNSEnvironment) -> String {
        environment == .sandbox
            ? "https://api-manage-broadcast.sandbox.push.apple.com:2195"
            : "https://api-manage-broadcast.push.apple.com:2196"
    }

    package init(
        key: APNSSigningKey, bundleID: String, environment: APNSEnvironment, pushEndpoint: String?,
        channelEndpoint: String?, caFile: String?
    ) {
        self.bundleID = bundleID
        let push = pushEndpoint ?? "https://\(environment.endpoint.host):\(environment.endpoint.port)"
        pushURL = push
        managementURL = channelEndpoint ?? (pushEndpoint != nil ? push : Self.managementURL(environment))
        tokens = APNSProviderTokenManager(key: key, clock: .system)
        var tls = TLSConfiguration.makeClientConfiguration()
        if let caFile { tls.additionalTrustRoots = [.file(caFile)] }
        var configuration = HTTPClient.Configuration(tlsConfiguration: tls, redirectConfiguration: .disallow)
        configuration.httpVersion = .automatic
        configuration.timeout = .init(connect: .seconds(10), read: .seconds(30))
        client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
    }

    /// Creates a channel: `storage` 0 keeps no message (a higher publish budget), 1 the latest
    /// for up to 8 hours (late joiners get it).
    package func create(storage: Int) async throws -> Answer {
        try await request(
            .POST, managementURL + "/1/apps/\(bundleID)/channels",
            body: #"{"message-storage-policy":\#(storage),"push-type":"LiveActivity"}"#)
    }

    package func delete(channelID: String) async throws -> Answer {
        try await request(
            .DELETE, managementURL + "/1/apps/\(bundleID)/channels", headers: [("apns-channel-id", channelID)])
    }

    /// One broadcast: APNs delivers it to every activity listening on the channel. A channel
    /// that stores no message takes expiration 0 only.
    package func publish(channelID: String, payload: Data, priority: Int, expiration: Int) async throws -> Answer {
        try await request(
            .POST, pushURL + "/4/broadcasts/apps/\(bundleID)",
            headers: [
                ("apns-channel-id", channelID), ("apns-push-type", "liveactivity"), ("apns-priority", String(priority)),
                ("apns-expiration", String(expiration)),
            ], body: String(decoding: payload, as: UTF8.self))
    }

    private func request(
        _ method: HTTPMethod, _ url: String, headers: [(String, String)] = [], body: String? = nil
    ) async throws -> Answer {
        var request = HTTPClientRequest(url: url)
        request.method = method
        request.headers.add(name: "authorization", value: "bearer " + tokens.current().value)
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body {
            request.headers.add(name: "content-type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: body))
        }
        let response = try await client.execute(request, timeout: .seconds(30))
        let bytes = try await response.body.collect(upTo: 64 << 10)
        let text = String(buffer: bytes)
        let reason =
            ((try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any])?["reason"] as? String
        return Answer(
            status: Int(response.status.code), reason: reason,
            channelID: response.headers.first(name: "apns-channel-id"), body: text)
    }

    package func shutdown() async {
        try? await client.shutdown()
    }
}
