import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The few calls this service makes to Herald's HTTP API, with the app's server key.
public struct HeraldClient: Sendable {
    /// Herald's base URL, e.g. `http://127.0.0.1:8080`.
    public var baseURL: URL
    /// The app's id in Herald (`apps[].id`).
    public var app: String
    /// The app's server key (`apps[].keys.server`): never logged.
    public var serverKey: String
    /// How long one call may take.
    public var timeout: TimeInterval

    public init(baseURL: URL, app: String, serverKey: String, timeout: TimeInterval = 5) {
        self.baseURL = baseURL
        self.app = app
        self.serverKey = serverKey
        self.timeout = timeout
    }

    /// Herald answered something else than 2xx.
    public struct Failure: Error, CustomStringConvertible {
        public var status: Int
        public var body: String
        public var description: String { "Herald answered \(status): \(body.prefix(300))" }
    }

    /// Sends a catalog type to a user's devices (`POST …/notifications`); returns the
    /// notification's id. The idempotency key makes a repeat (a retry after a lost answer)
    /// return the first notification instead of sending twice.
    public func send(type: String, to userID: String, data: [String: String], idempotencyKey: String, cancelKey: String?) async throws -> String {
        struct Body: Encodable {
            struct To: Encodable { var user_ids: [String] }
            var to: To
            var type: String
            var data: [String: String]
            var idempotency_key: String
            var cancel_key: String?
        }
        struct Accepted: Decodable { var id: String }
        let body = Body(to: .init(user_ids: [userID]), type: type, data: data, idempotency_key: idempotencyKey, cancel_key: cancelKey)
        return try JSONDecoder().decode(Accepted.self, from: try await call("notifications", body)).id
    }

    /// Cancels what is not sent yet of the notifications with `cancelKey` (`POST …/cancel`).
    @discardableResult
    public func cancel(_ cancelKey: String) async throws -> Int {
        struct Body: Encodable { var cancel_key: String }
        struct Cancelled: Decodable { var cancelled: Int }
        return try JSONDecoder().decode(Cancelled.self, from: try await call("cancel", Body(cancel_key: cancelKey))).cancelled
    }

    private func call(_ path: String, _ body: some Encodable) async throws -> Data {
        var request = URLRequest(url: baseURL.appendingPathComponent("v1/apps/\(app)/\(path)"), timeoutInterval: timeout)
        request.httpMethod = "POST"
        request.setValue("Bearer \(serverKey)", forHTTPHeaderField: "Authorization")
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        request.httpBody = try JSONEncoder().encode(body)
        let (data, response) = try await URLSession.shared.data(for: request)
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        guard (200..<300).contains(status) else { throw Failure(status: status, body: String(decoding: data, as: UTF8.self)) }
        return data
    }
}
