package import AsyncHTTPClient
package import Foundation
import NIOCore
import NIOHTTP1

/// Calls an app's webhook: one POST per try, signed per Standard Webhooks
/// (`WebhookSignature`), with `Idempotency-Key` when the message has one; the answer's status,
/// body (at most 64 KB) and `webhook-delivery: abort` come back. Never throws: a failure is an
/// attempt without a status.
package struct WebhookSender: Sendable {
    /// Waits after a failed try, published (the receiver can plan for them): 5 s, 5 min,
    /// 30 min, 2 h, 5 h, 10 h, 10 h; a message whose eighth try fails has failed.
    package static let schedule: [TimeInterval] = [5, 300, 1_800, 7_200, 18_000, 36_000, 36_000]
    /// How long a queued try waits for its answer.
    package static let retryTimeout: TimeInterval = 15
    static let maximumAnswerBytes = 64 * 1024

    /// One try.
    package struct Attempt: Sendable {
        package var status: Int?
        package var body: String?
        /// The receiver answered `webhook-delivery: abort`: no more tries.
        package var abort: Bool
        package var error: String?
        package var milliseconds: Int64
        package var delivered: Bool { status.map { (200..<300).contains($0) } ?? false }
    }

    let client: HTTPClient

    package init(client: HTTPClient = WebhookSender.sharedClient) {
        self.client = client
    }

    /// The process's webhook client: pooled, and it follows no redirect (a receiver's `302` to an
    /// internal address is not fetched; it counts as a failed try). Made once, kept for the
    /// process's life like `HTTPClient.shared`.
    package static let sharedClient = HTTPClient(
        eventLoopGroup: HTTPClient.defaultEventLoopGroup,
        configuration: HTTPClient.Configuration(redirectConfiguration: .disallow))

    /// What of a receiver's answer goes back to the device that committed the action: a JSON
    /// document of at most `maximumDeviceResultBytes`, else nothing (the audit keeps the answer).
    package static func deviceResult(_ body: String?) -> String? {
        guard let body, !body.isEmpty, body.utf8.count <= maximumDeviceResultBytes,
            (try? JSONSerialization.jsonObject(with: Data(body.utf8), options: [.fragmentsAllowed])) != nil
        else { return nil }
        return body
    }

    /// The largest answer passed on to a device.
    package static let maximumDeviceResultBytes = 4 * 1024

    /// The wait after `attempts` failed tries; nil when none is left.
    package static func retryDelay(afterAttempts attempts: Int) -> TimeInterval? {
        (1...schedule.count).contains(attempts) ? schedule[attempts - 1] : nil
    }

    /// POSTs `body` to `webhook` as message `messageID`, waiting at most `timeout` seconds.
    package func send(
        _ webhook: HeraldConfiguration.WebhookConfiguration, messageID: String, body: Data, idempotencyKey: String?,
        timeout: TimeInterval
    ) async -> Attempt {
        let started = ContinuousClock.now
        func elapsed() -> Int64 {
            let duration = ContinuousClock.now - started
            return duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
        }
        var request = HTTPClientRequest(url: webhook.url)
        request.method = .POST
        // The receiver compares the timestamp with its own clock: the wall clock, whatever
        // clock the server's schedules run on.
        let timestamp = Int(Date().timeIntervalSince1970)
        request.headers.add(name: "content-type", value: "application/json")
        request.headers.add(name: "user-agent", value: "Herald-Webhooks/1")
        request.headers.add(name: "webhook-id", value: messageID)
        request.headers.add(name: "webhook-timestamp", value: String(timestamp))
        request.headers.add(
            name: "webhook-signature",
            value: WebhookSignature.header(id: messageID, timestamp: timestamp, body: body, secrets: webhook.secrets))
        if let idempotencyKey { request.headers.add(name: "idempotency-key", value: idempotencyKey) }
        request.body = .bytes(ByteBuffer(bytes: body))
        do {
            let response = try await client.execute(request, timeout: .milliseconds(Int64(timeout * 1000)))
            let answer = try await response.body.collect(upTo: Self.maximumAnswerBytes)
            let abort = response.headers["webhook-delivery"].contains { $0.lowercased() == "abort" }
            return Attempt(
                status: Int(response.status.code), body: String(buffer: answer), abort: abort, error: nil,
                milliseconds: elapsed())
        } catch {
            return Attempt(
                status: nil, body: nil, abort: false, error: String(String(describing: error).prefix(300)),
                milliseconds: elapsed())
        }
    }
}
