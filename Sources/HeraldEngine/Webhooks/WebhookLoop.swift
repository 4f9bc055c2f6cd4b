import Foundation
import HeraldStore
import Logging
import ServiceLifecycle

/// Delivers queued webhook messages: due ones, each user's oldest first (a
/// user's next message waits for the one before it; other users' do not), several at a time,
/// retried on `WebhookSender.schedule` until a 2xx, a `webhook-delivery: abort`, or the last
/// try. A message whose app has no webhook configured any more waits (a configuration error
/// loses nothing).
package struct WebhookLoop: Service {
    let runtime: HeraldRuntime
    /// Messages tried at once.
    static let concurrency = 16
    /// How long a claimed message is this node's.
    static let lease: TimeInterval = 60

    package init(runtime: HeraldRuntime) {
        self.runtime = runtime
    }

    package func run() async throws {
        var failures = 0
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            do {
                if try await runOnce() > 0 { continue }
                failures = 0
            } catch {
                failures += 1
                if StoreBackoff.reports(failures: failures) {
                    runtime.logger.error(
                        "Webhook messages cannot be read; trying again",
                        metadata: ["error": "\(String(describing: error).prefix(300))"])
                }
            }
            runtime.passes.webhookPassed()
            await runtime.webhookWake.wait(timeout: .milliseconds(500))
        }
    }

    /// Tries the messages due now; returns how many.
    @discardableResult
    package func runOnce() async throws -> Int {
        let messages = try await runtime.store.actions.claimWebhooks(limit: Self.concurrency, lease: Self.lease)
        await withDiscardingTaskGroup { group in
            for message in messages { group.addTask { await deliver(message) } }
        }
        return messages.count
    }

    private func deliver(_ message: ActionRepository.WebhookMessage) async {
        let now = runtime.store.now
        guard let webhook = runtime.apps[message.appID]?.configuration.webhook else {
            runtime.logger.warning(
                "A webhook message waits: its app has no webhook configured",
                metadata: ["herald.app": "\(message.appID)", "herald.message": "\(message.messageID)"])
            try? await runtime.store.actions.recordWebhook(
                message, .postponed(at: now.addingTimeInterval(300), error: "no webhook configured"),
                latencyMilliseconds: nil)
            return
        }
        let attempt = await runtime.webhooks.send(
            webhook, messageID: message.messageID, body: Data(message.body.utf8),
            idempotencyKey: message.idempotencyKey, timeout: WebhookSender.retryTimeout)
        let outcome: ActionRepository.WebhookOutcome
        if attempt.delivered {
            outcome = .delivered(status: attempt.status ?? 200, result: WebhookSender.deviceResult(attempt.body))
        } else if attempt.abort {
            outcome = .failed(
                status: attempt.status, error: "the receiver answered webhook-delivery: abort", aborted: true)
        } else if let delay = WebhookSender.retryDelay(afterAttempts: message.attempts + 1) {
            outcome = .retry(at: now.addingTimeInterval(delay), status: attempt.status, error: attempt.error)
        } else {
            outcome = .failed(status: attempt.status, error: attempt.error, aborted: false)
        }
        runtime.metrics.webhook(app: message.appID, outcome: outcome)
        if case .failed(_, _, let aborted) = outcome {
            runtime.logger.warning(
                aborted ? "A webhook message was aborted by its receiver" : "A webhook message failed its last try",
                metadata: [
                    "herald.app": "\(message.appID)", "herald.message": "\(message.messageID)",
                    "herald.event": "\(message.event)",
                    "herald.attempts": "\(message.attempts + 1)",
                    "http.status": "\(attempt.status.map(String.init) ?? "none")",
                ])
        }
        do {
            try await runtime.store.actions.recordWebhook(
                message, outcome, latencyMilliseconds: attempt.delivered ? attempt.milliseconds : nil)
        } catch {
            // Unrecorded: the lease runs out and the message is tried again (the receiver's
            // idempotency key, webhook-id, makes that harmless).
            runtime.logger.error(
                "A webhook try cannot be recorded", metadata: ["error": "\(String(describing: error).prefix(300))"])
        }
    }
}
