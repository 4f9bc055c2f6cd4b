import Foundation
import HeraldCore
import HeraldStore
import Logging
import Synchronization

/// Writes delivery results as they arrive: answers are buffered from any thread and written in
/// one transaction at least every `recordInterval` (bounded groups), so one slow token never
/// holds back the results of the others. Counts them in the metrics once per write.
final class DeliveryRecorder: Sendable {
    private struct Buffer {
        var results: [DeliveryResult] = []
        var apnsLatencies: [Double] = []
        var fcmLatencies: [Double] = []
    }

    private let runtime: HeraldRuntime
    private let buffer = Mutex(Buffer())

    init(runtime: HeraldRuntime) {
        self.runtime = runtime
    }

    /// Adds one provider answer's result (called on the clients' event loops).
    func add(_ result: DeliveryResult, latency: Double?, platform: String) {
        buffer.withLock { buffer in
            buffer.results.append(result)
            if let latency {
                if platform == "fcm" {
                    buffer.fcmLatencies.append(latency)
                } else {
                    buffer.apnsLatencies.append(latency)
                }
            }
        }
    }

    /// Adds results decided without a provider (policy, pauses, configuration).
    func add(_ results: [DeliveryResult]) {
        guard !results.isEmpty else { return }
        buffer.withLock { $0.results += results }
    }

    var count: Int { buffer.withLock { $0.results.count } }

    /// Writes everything buffered. On a store error the results go back to the buffer (ahead of
    /// newer ones) and the error is thrown; what was sent stays `sending` until it is written.
    func flush() async throws {
        let taken = buffer.withLock { buffer -> Buffer in
            let taken = buffer
            buffer = Buffer()
            return taken
        }
        guard !taken.results.isEmpty else { return }
        let started = ContinuousClock.now
        do {
            try await runtime.store.outbox.recordResults(taken.results, webhooks: runtime.resultWebhooks)
            runtime.metrics.outboxStore("record", seconds: (ContinuousClock.now - started).seconds)
            runtime.traces?.recorded(taken.results)
            if !runtime.resultWebhooks.failed.isEmpty || !runtime.resultWebhooks.deactivated.isEmpty,
                taken.results.contains(where: runtime.resultWebhooks.wants)
            {
                runtime.webhookWake.signal()
            }
        } catch {
            buffer.withLock { $0.results = taken.results + $0.results }
            throw error
        }
        count(taken)
    }

    /// Counted once per write, by app, status and reason; dead tokens by app for one log line
    /// per app and write, not one per token.
    private func count(_ written: Buffer) {
        runtime.metrics.apnsRequests(latencies: written.apnsLatencies)
        runtime.metrics.fcmRequests(latencies: written.fcmLatencies)
        var counts: [DeliveryCountKey: Int] = [:]
        var dead: [String: [String: Int]] = [:]
        for result in written.results {
            let key: DeliveryCountKey
            switch result.outcome {
            case .sent: key = DeliveryCountKey(app: result.appID, status: "sent", reason: nil)
            case .failed(let reason): key = DeliveryCountKey(app: result.appID, status: "failed", reason: reason)
            case .tokenDead(let reason, _):
                key = DeliveryCountKey(app: result.appID, status: "failed", reason: reason)
                dead[result.appID, default: [:]][reason, default: 0] += 1
            case .retry(let reason, _): key = DeliveryCountKey(app: result.appID, status: "retry", reason: reason)
            case .deferred(let reason, _): key = DeliveryCountKey(app: result.appID, status: "deferred", reason: reason)
            case .suppressed(let reason):
                key = DeliveryCountKey(app: result.appID, status: "suppressed", reason: reason)
            }
            counts[key, default: 0] += 1
        }
        runtime.metrics.deliveries(counts)
        runtime.metrics.batchFinished(at: runtime.store.now)
        for (app, reasons) in dead.sorted(by: { $0.key < $1.key }) {
            runtime.logger.info(
                "Devices deactivated: their tokens are dead",
                metadata: [
                    "herald.app": "\(app)", "herald.devices": "\(reasons.values.reduce(0, +))",
                    "herald.reasons":
                        "\(reasons.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ","))",
                ])
        }
    }
}
