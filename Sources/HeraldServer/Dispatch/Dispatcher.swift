import Foundation
import HeraldAPNs
import HeraldCore
import HeraldStore
import Logging
import ServiceLifecycle
import Synchronization

/// Drains the outbox: claims due deliveries in batches, sends them through each app's APNs
/// client, and writes the results in batches. Runs as a `Service` beside the HTTP server; on
/// graceful shutdown it finishes the batch in hand and stops.
package struct Dispatcher: Service {
    let runtime: HeraldRuntime
    /// Deliveries claimed per batch.
    package var batchSize: Int
    /// How long to sleep when nothing is due (the API wakes it sooner).
    package var idleInterval: Duration
    /// Retries of unanswered deliveries through the outbox, after the client's own, before failing.
    package var maximumOutboxAttempts: Int

    package init(runtime: HeraldRuntime, batchSize: Int = 5_000, idleInterval: Duration = .milliseconds(200), maximumOutboxAttempts: Int = 20) {
        self.runtime = runtime
        self.batchSize = batchSize
        self.idleInterval = idleInterval
        self.maximumOutboxAttempts = maximumOutboxAttempts
    }

    package func run() async throws {
        let logger = runtime.logger
        let requeued = try await runtime.store.requeueUnfinished()
        if requeued > 0 {
            logger.warning(
                "Deliveries claimed before a crash were queued again (at-least-once; some may arrive twice)",
                metadata: ["herald.requeued": "\(requeued)"])
        }
        let stopping = Atomic<Bool>(false)
        try await withGracefulShutdownHandler {
            // Pipelined: the next batch is claimed while the current one is on the wire, and its
            // results are written while the next is sent.
            var claimed = try await runtime.store.claimDueDeliveries(limit: batchSize)
            while !stopping.load(ordering: .relaxed) && !Task.isCancelled {
                if claimed.isEmpty {
                    await runtime.wake.wait(timeout: idleInterval)
                    claimed = try await runtime.store.claimDueDeliveries(limit: batchSize)
                    continue
                }
                async let next = runtime.store.claimDueDeliveries(limit: batchSize)
                try await deliver(claimed)
                claimed = try await next
            }
            // A batch claimed ahead goes back unsent.
            try await runtime.store.unclaim(claimed.map(\.id))
        } onGracefulShutdown: {
            stopping.store(true, ordering: .relaxed)
            runtime.wake.signal()
        }
        logger.info("Dispatcher stopped")
    }

    /// Claims, sends and records one batch; returns how many deliveries it handled.
    @discardableResult
    package func runOnce() async throws -> Int {
        let claimed = try await runtime.store.claimDueDeliveries(limit: batchSize)
        try await deliver(claimed)
        return claimed.count
    }

    /// Sends claimed deliveries and records their results.
    private func deliver(_ claimed: [ClaimedDelivery]) async throws {
        guard !claimed.isEmpty else { return }
        let contents = try await runtime.store.notificationContents(Array(Set(claimed.map(\.notificationID))))
        var decoded: [UUID: StoredNotificationContent] = [:]
        for (id, data) in contents {
            decoded[id] = try? JSONDecoder().decode(StoredNotificationContent.self, from: data)
        }
        let started = ContinuousClock.now
        let results = await send(claimed, contents: decoded)
        runtime.metrics.apnsBatch(seconds: (ContinuousClock.now - started).seconds)
        try await runtime.store.recordResults(results)
    }

    private func send(_ claimed: [ClaimedDelivery], contents: [UUID: StoredNotificationContent]) async -> [DeliveryResult] {
        let collected = ResultCollector(capacity: claimed.count)
        // Group by client; deliveries that cannot be sent are answered at once.
        var batches: [ObjectIdentifier: (APNSClient, [(ClaimedDelivery, APNSNotification)])] = [:]
        // One payload buffer per notification, shared by all its deliveries.
        var payloads: [UUID: Data] = [:]
        for delivery in claimed {
            guard delivery.platform == "apns" else {
                collected.append(self.result(delivery, .failed(reason: "FCMNotConfigured"), attempts: 0))
                continue
            }
            guard let app = runtime.apps[delivery.appID], let content = contents[delivery.notificationID] else {
                collected.append(self.result(delivery, .failed(reason: "AppNotConfigured"), attempts: 0))
                continue
            }
            switch app.apnsClient(environment: delivery.environment) {
            case .unavailable(let reason):
                collected.append(self.result(delivery, .failed(reason: reason.rawValue), attempts: 0))
            case .client(let client):
                let topic = app.configuration.apns?.topic ?? ""
                let notification = APNSNotification(
                    deviceToken: delivery.token, pushType: APNSPushType(rawValue: content.pushType), bundleID: topic,
                    priority: APNSPriority(rawValue: content.priority), expiration: content.expiration,
                    collapseID: content.collapseID,
                    apnsID: .apnsID(notification: delivery.notificationID, delivery: delivery.id),
                    payload: payloads[delivery.notificationID] ?? {
                        let data = Data(content.payload.utf8)
                        payloads[delivery.notificationID] = data
                        return data
                    }())
                batches[ObjectIdentifier(client), default: (client, [])].1.append((delivery, notification))
            }
        }
        await withTaskGroup(of: Void.self) { group in
            for (client, items) in batches.values {
                group.addTask {
                    // Every delivery has its own apns-id: answers are matched by it.
                    let lookup = Dictionary(items.map { ($0.1.apnsID, $0.0) }, uniquingKeysWith: { first, _ in first })
                    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                        let remaining = Atomic<Int>(items.count)
                        client.submit(items.map(\.1)) { result in
                            if let delivery = lookup[result.apnsID] {
                                let mapped = self.result(delivery, self.outcome(for: result, delivery: delivery), attempts: result.attempts)
                                collected.append(mapped, latency: result.latency)
                            }
                            if remaining.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 {
                                continuation.resume()
                            }
                        }
                    }
                }
            }
        }
        let results = collected.results
        runtime.metrics.apnsRequests(latencies: collected.latencies)
        for result in results {
            switch result.outcome {
            case .sent: runtime.metrics.delivery(app: result.appID, status: "sent", reason: nil)
            case .failed(let reason), .tokenDead(let reason, _):
                runtime.metrics.delivery(app: result.appID, status: "failed", reason: reason)
            case .retry(let reason, _): runtime.metrics.delivery(app: result.appID, status: "retry", reason: reason)
            }
        }
        return results
    }

    private func result(_ delivery: ClaimedDelivery, _ outcome: DeliveryResult.Outcome, attempts: Int) -> DeliveryResult {
        DeliveryResult(
            deliveryID: delivery.id, notificationID: delivery.notificationID, appID: delivery.appID,
            deviceID: delivery.deviceID, outcome: outcome, attempts: attempts)
    }

    private func outcome(for result: APNSResult, delivery: ClaimedDelivery) -> DeliveryResult.Outcome {
        let reason = result.reasonKey
        switch result.disposition {
        case .delivered: return .sent
        case .tokenDead: return .tokenDead(reason: reason, since: result.timestamp)
        case .configurationError, .badRequest: return .failed(reason: reason)
        case .retryTokenLater, .retryWithBackoff, .resendOnNewConnection:
            // The client's own retries are spent: the outbox tries again later, then gives up.
            let total = delivery.attempts + result.attempts
            guard total < maximumOutboxAttempts else { return .failed(reason: reason) }
            let delay = result.reason == .clientShutdown ? 0 : min(300, 5 * pow(2, Double(min(total, 6))))
            return .retry(reason: reason, dueAt: runtime.store.now.addingTimeInterval(delay))
        }
    }
}

/// Results arriving from the APNs clients' event loops.
final class ResultCollector: Sendable {
    private let storage: Mutex<(results: [DeliveryResult], latencies: [Double])>

    init(capacity: Int) {
        var initial: [DeliveryResult] = []
        initial.reserveCapacity(capacity)
        storage = Mutex((initial, []))
    }

    func append(_ result: DeliveryResult, latency: Double? = nil) {
        storage.withLock { storage in
            storage.results.append(result)
            if let latency { storage.latencies.append(latency) }
        }
    }

    var results: [DeliveryResult] { storage.withLock { $0.results } }
    var latencies: [Double] { storage.withLock { $0.latencies } }
}
