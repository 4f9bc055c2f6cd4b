import Foundation
import HTTPTypes
import HeraldEngine
import Hummingbird
import NIOCore
import Synchronization
import Testing

/// A test's stand-in for an app's backend: a live HTTP server on loopback that checks each
/// webhook call's Standard Webhooks signature with `secret`, records it, and answers what the
/// test decides.
final class WebhookReceiver: Sendable {
    struct Call: Sendable {
        var id: String
        var timestamp: String
        var signature: String
        var idempotencyKey: String?
        var body: [String: Any] { (try? JSONSerialization.jsonObject(with: bytes)) as? [String: Any] ?? [:] }
        var data: [String: Any] { body["data"] as? [String: Any] ?? [:] }
        var bytes: Data
        var verified: Bool
    }

    /// What to answer: status, whether to add `webhook-delivery: abort`, body.
    struct Answer: Sendable {
        var status: Int = 200
        var abort = false
        var body = #"{"ok":true}"#
    }

    static let secretText = "whsec_" + Data((0..<32).map { UInt8($0) }).base64EncodedString()
    static var secret: Data { HeraldConfiguration.WebhookConfiguration.secret(secretText)! }

    private let state = Mutex<(calls: [Call], answer: @Sendable (Call) -> Answer)>(([], { _ in Answer() }))

    var calls: [Call] { state.withLock { $0.calls } }

    /// Decides the answers from now on.
    func answer(_ decide: @escaping @Sendable (Call) -> Answer) {
        state.withLock { $0.answer = decide }
    }

    private func handle(_ request: Request) async throws -> Response {
        let bytes = Data(try await request.body.collect(upTo: 1 << 20).readableBytesView)
        func header(_ name: String) -> String? { request.headers.first { $0.name.canonicalName == name }?.value }
        let call = Call(
            id: header("webhook-id") ?? "", timestamp: header("webhook-timestamp") ?? "",
            signature: header("webhook-signature") ?? "",
            idempotencyKey: header("idempotency-key"), bytes: bytes,
            verified: WebhookSignature.verify(
                id: header("webhook-id") ?? "", timestamp: header("webhook-timestamp") ?? "", body: bytes,
                header: header("webhook-signature") ?? "",
                secret: Self.secret, now: Date()))
        let answer = state.withLock { state in
            state.calls.append(call)
            return state.answer(call)
        }
        var headers: HTTPFields = [.contentType: "application/json"]
        if answer.abort { headers[HTTPField.Name("webhook-delivery")!] = "abort" }
        return Response(
            status: HTTPResponse.Status(code: answer.status), headers: headers,
            body: ResponseBody(byteBuffer: ByteBuffer(string: answer.body)))
    }

    /// Runs a receiver for the duration of `body`, which gets its URL.
    static func with(_ body: @escaping @Sendable (WebhookReceiver, String) async throws -> Void) async throws {
        let receiver = WebhookReceiver()
        let router = Router()
        router.post("/herald") { request, _ in try await receiver.handle(request) }
        let port = Mutex<Int?>(nil)
        let application = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in port.withLock { $0 = channel.localAddress?.port } })
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await application.runService() }
            var bound: Int?
            for _ in 0..<500 {
                bound = port.withLock { $0 }
                if bound != nil { break }
                try await Task.sleep(for: .milliseconds(10))
            }
            let url = "http://127.0.0.1:\(try #require(bound))/herald"
            do {
                try await body(receiver, url)
            } catch {
                group.cancelAll()
                throw error
            }
            group.cancelAll()
        }
    }
}
