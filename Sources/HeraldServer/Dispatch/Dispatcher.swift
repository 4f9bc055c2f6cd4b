import Foundation
import HeraldAPNs
import HeraldCore
import HeraldFCM
import HeraldPayload
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

    /// Runs the policy engine on deliveries of typed notifications, sends what may go now and
    /// records every result (sent, failed, deferred, suppressed) in one batch.
    private func deliver(_ claimed: [ClaimedDelivery]) async throws {
        guard !claimed.isEmpty else { return }
        let contents = try await runtime.store.notificationContents(Array(Set(claimed.map(\.notificationID))))
        var decoded: [UUID: StoredNotificationContent] = [:]
        for (id, data) in contents {
            decoded[id] = try? JSONDecoder().decode(StoredNotificationContent.self, from: data)
        }
        var sendable = claimed
        var held: [DeliveryResult] = []
        var planned: [Int64: PlannedDelivery] = [:]
        if claimed.contains(where: { decoded[$0.notificationID]?.typed != nil }) {
            (held, planned) = try await applyPolicy(claimed.filter { decoded[$0.notificationID]?.typed != nil }, contents: decoded)
            let heldIDs = Set(held.map(\.deliveryID))
            sendable.removeAll { heldIDs.contains($0.id) }
        }
        let started = ContinuousClock.now
        let results = await send(sendable, contents: decoded, planned: planned)
        runtime.metrics.apnsBatch(seconds: (ContinuousClock.now - started).seconds)
        for result in held {
            switch result.outcome {
            case .deferred(let reason, _): runtime.metrics.delivery(app: result.appID, status: "deferred", reason: reason)
            case .suppressed(let reason): runtime.metrics.delivery(app: result.appID, status: "suppressed", reason: reason)
            case .failed(let reason): runtime.metrics.delivery(app: result.appID, status: "failed", reason: reason)
            default: break
            }
        }
        try await runtime.store.recordResults(held + results)
    }

    /// The policy step (issue #4): per delivery of a typed notification, renders the copy in the
    /// device's locale and asks the engine whether it goes now, later or not at all. Users are
    /// taken in claim order, and sends decided in this batch count for the next decisions, so
    /// pacing and grouping hold within a batch as across batches.
    private func applyPolicy(
        _ deliveries: [ClaimedDelivery], contents: [UUID: StoredNotificationContent]
    ) async throws -> (held: [DeliveryResult], planned: [Int64: PlannedDelivery]) {
        var held: [DeliveryResult] = []
        var planned: [Int64: PlannedDelivery] = [:]
        let now = runtime.store.now
        let engine = PolicyEngine(clock: HeraldClock { now })
        for (appID, appDeliveries) in Dictionary(grouping: deliveries, by: \.appID) {
            guard let app = runtime.apps[appID], let catalog = app.catalog, let policyApp = app.policyApp else {
                for delivery in appDeliveries {
                    held.append(result(delivery, .failed(reason: "CatalogNotConfigured"), attempts: 0))
                }
                continue
            }
            let userIDs = Array(Set(appDeliveries.map(\.userID)))
            let users = try await runtime.store.users(appID: appID, ids: userIDs)
            var history = try await runtime.store.recentSends(appID: appID, userIDs: userIDs, since: now.addingTimeInterval(-3600))
            var policyUsers: [String: PolicyUser] = [:]
            for delivery in appDeliveries.sorted(by: { $0.id < $1.id }) {
                guard let typed = contents[delivery.notificationID]?.typed, let content = contents[delivery.notificationID],
                    let type = catalog.type(typed.type)
                else {
                    held.append(result(delivery, .failed(reason: "TypeNotInCatalog"), attempts: 0))
                    continue
                }
                let user = users[delivery.userID]
                let policyUser = policyUsers[delivery.userID] ?? {
                    let preferences = user.flatMap { try? JSONDecoder().decode(UserPreferences.self, from: $0.preferences) }
                        ?? UserPreferences()
                    var policyUser = preferences.policyUser(
                        timeZone: user?.timeZone ?? delivery.timeZone, defaultQuietHours: catalog.app.quietHours)
                    // Preferences may name a type by its external id (PN-01); the engine uses names.
                    policyUser.typeEnabled = Dictionary(
                        policyUser.typeEnabled.map { (catalog.type($0.key)?.name ?? $0.key, $0.value) },
                        uniquingKeysWith: { _, last in last })
                    policyUsers[delivery.userID] = policyUser
                    return policyUser
                }()
                let pushType = APNSPushType(rawValue: content.pushType)
                let silent = pushType == .background && typed.title == nil && typed.body == nil
                let copy = silent
                    ? nil : type.render(locale: delivery.locale ?? user?.locale, defaultLocale: catalog.app.defaultLocale, data: typed.data)
                let subtitle = typed.subtitle ?? copy?.subtitle
                let payloadKey = app.configuration.payloadKey
                let recent = (history[delivery.userID] ?? []).filter { $0.0 != delivery.notificationID }.map(\.1)
                var policyContent = typed.policyContent(copy: copy)
                policyContent.collapseID = content.collapseID
                let decision = engine.decide(
                    type: type.policyType(app: catalog.app), user: policyUser, app: policyApp,
                    content: policyContent, recent: recent, payloadLimit: pushType.payloadLimit,
                    payloadSize: { (try? typed.apnsPayload($0, subtitle: subtitle, payloadKey: payloadKey).count) ?? .max })
                let trace = DecisionTrace.appending(decision.trace, at: now, to: delivery.trace)
                switch decision.outcome {
                case .send:
                    var typed = typed
                    var trace = trace
                    // Every data value, at any depth (the deep link included), is scanned too.
                    if let custom = typed.custom {
                        let (scrubbed, found) = PIIDetector.scrubbed(custom, detectors: policyApp.piiDetectors)
                        if !found.isEmpty {
                            typed.custom = scrubbed
                            trace = DecisionTrace.appending(
                                [PolicyStep(rule: "pii", message: "data values left out: \(found.sorted().joined(separator: ", ")) found")],
                                at: now, to: trace)
                        }
                    }
                    guard let payload = try? typed.apnsPayload(decision.content, subtitle: subtitle, payloadKey: payloadKey) else {
                        held.append(result(delivery, .failed(reason: "PayloadNotEncodable"), attempts: 0, trace: trace))
                        continue
                    }
                    planned[delivery.id] = PlannedDelivery(
                        payload: payload, collapseID: decision.content.collapseID, trace: trace, userID: delivery.userID)
                    if !(history[delivery.userID] ?? []).contains(where: { $0.0 == delivery.notificationID }) {
                        history[delivery.userID, default: []].append((delivery.notificationID, now))
                    }
                case .deferred(let until):
                    let reason = decision.trace.last?.rule ?? "deferred"
                    held.append(result(delivery, .deferred(reason: reason, until: until), attempts: 0, trace: trace))
                case .suppressed(let reason):
                    held.append(result(delivery, .suppressed(reason: reason), attempts: 0, trace: trace))
                }
            }
        }
        return (held, planned)
    }

    private func send(
        _ claimed: [ClaimedDelivery], contents: [UUID: StoredNotificationContent], planned: [Int64: PlannedDelivery]
    ) async -> [DeliveryResult] {
        let collected = ResultCollector(capacity: claimed.count)
        // Group by client; deliveries that cannot be sent are answered at once.
        var batches: [ObjectIdentifier: (APNSClient, [(ClaimedDelivery, APNSNotification)])] = [:]
        // One payload buffer per notification, shared by all its deliveries.
        var payloads: [UUID: Data] = [:]
        var fcmBatches: [ObjectIdentifier: (FCMClient, [(ClaimedDelivery, FCMMessage)])] = [:]
        var fcmTemplates: [UUID: FCMMessage] = [:]
        for delivery in claimed {
            guard let app = runtime.apps[delivery.appID], let content = contents[delivery.notificationID] else {
                collected.append(self.result(delivery, .failed(reason: "AppNotConfigured"), attempts: 0))
                continue
            }
            guard delivery.platform == "apns" else {
                guard let client = app.fcmClient else {
                    collected.append(self.result(delivery, .failed(reason: "FCMNotConfigured"), attempts: 0, planned: planned[delivery.id]))
                    continue
                }
                var message: FCMMessage
                if let plan = planned[delivery.id] {
                    message = Self.fcmMessage(
                        token: delivery.token, content: content, payload: plan.payload, collapseID: plan.collapseID,
                        payloadKey: app.configuration.payloadKey, now: runtime.store.now)
                } else {
                    // Like the APNs payload: decoded once per notification, only the token differs.
                    message = fcmTemplates[delivery.notificationID] ?? {
                        let template = Self.fcmMessage(
                            token: "", content: content, payload: nil, collapseID: content.collapseID,
                            payloadKey: app.configuration.payloadKey, now: runtime.store.now)
                        fcmTemplates[delivery.notificationID] = template
                        return template
                    }()
                    message.token = delivery.token
                }
                fcmBatches[ObjectIdentifier(client), default: (client, [])].1.append((delivery, message))
                continue
            }
            switch app.apnsClient(environment: delivery.environment) {
            case .unavailable(let reason):
                collected.append(self.result(delivery, .failed(reason: reason.rawValue), attempts: 0, planned: planned[delivery.id]))
            case .client(let client):
                let topic = app.configuration.apns?.topic ?? ""
                let notification = APNSNotification(
                    deviceToken: delivery.token, pushType: APNSPushType(rawValue: content.pushType), bundleID: topic,
                    priority: APNSPriority(rawValue: content.priority), expiration: content.expiration,
                    collapseID: planned[delivery.id].map(\.collapseID) ?? content.collapseID,
                    apnsID: .apnsID(notification: delivery.notificationID, delivery: delivery.id),
                    payload: planned[delivery.id]?.payload ?? payloads[delivery.notificationID] ?? {
                        let data = Data(content.payload.utf8)
                        payloads[delivery.notificationID] = data
                        return data
                    }())
                batches[ObjectIdentifier(client), default: (client, [])].1.append((delivery, notification))
            }
        }
        await withTaskGroup(of: Void.self) { group in
            for (client, items) in fcmBatches.values {
                group.addTask {
                    let answers = await client.send(items.map(\.1))
                    // A notification FCM accepted for one token is a known-good payload: an
                    // INVALID_ARGUMENT for another token of it blames that token (protocols.md §12).
                    let knownGood = Set(zip(items, answers).filter { $0.1.isDelivered }.map { $0.0.0.notificationID })
                    for ((delivery, _), answer) in zip(items, answers) {
                        collected.append(
                            self.result(
                                delivery,
                                self.outcome(
                                    for: answer, delivery: delivery, payloadKnownGood: knownGood.contains(delivery.notificationID)),
                                attempts: answer.attempts, planned: planned[delivery.id]))
                    }
                }
            }
            for (client, items) in batches.values {
                group.addTask {
                    // Every delivery has its own apns-id: answers are matched by it.
                    let lookup = Dictionary(items.map { ($0.1.apnsID, $0.0) }, uniquingKeysWith: { first, _ in first })
                    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                        let remaining = Atomic<Int>(items.count)
                        client.submit(items.map(\.1)) { result in
                            if let delivery = lookup[result.apnsID] {
                                let mapped = self.result(
                                    delivery, self.outcome(for: result, delivery: delivery), attempts: result.attempts,
                                    planned: planned[delivery.id])
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
            case .deferred, .suppressed: break
            }
        }
        return results
    }

    private func result(
        _ delivery: ClaimedDelivery, _ outcome: DeliveryResult.Outcome, attempts: Int, trace: String? = nil,
        planned: PlannedDelivery? = nil
    ) -> DeliveryResult {
        var pacedUserID: String?
        if case .sent = outcome { pacedUserID = planned?.userID }
        return DeliveryResult(
            deliveryID: delivery.id, notificationID: delivery.notificationID, appID: delivery.appID,
            deviceID: delivery.deviceID, outcome: outcome, attempts: attempts, trace: trace ?? planned?.trace,
            pacedUserID: pacedUserID)
    }

    private func outcome(for result: FCMResult, delivery: ClaimedDelivery, payloadKnownGood: Bool) -> DeliveryResult.Outcome {
        let reason = result.reason ?? "FCMError"
        switch result.disposition {
        case .delivered: return .sent
        case .tokenDead: return .tokenDead(reason: reason, since: nil)
        case .badRequest where reason == "INVALID_ARGUMENT" && payloadKnownGood:
            // The same notification went through for other tokens: this token is the invalid argument.
            return .tokenDead(reason: reason, since: nil)
        case .badRequest, .configurationError: return .failed(reason: reason)
        case .retryLater:
            return outboxRetry(reason: reason, delivery: delivery, attempts: result.attempts) { total in
                max(result.retryAfter ?? 0, min(300, 10 * pow(2, Double(min(total, 5)))))
            }
        }
    }

    /// The client's own retries are spent: the outbox tries again after `delay(total attempts)`,
    /// and gives up (failed) once the delivery has had `maximumOutboxAttempts` answers.
    private func outboxRetry(
        reason: String, delivery: ClaimedDelivery, attempts: Int, delay: (Int) -> TimeInterval
    ) -> DeliveryResult.Outcome {
        let total = delivery.attempts + attempts
        guard total < maximumOutboxAttempts else { return .failed(reason: reason) }
        return .retry(reason: reason, dueAt: runtime.store.now.addingTimeInterval(delay(total)))
    }

    /// The FCM message for a delivery, from the APNs payload Herald rendered (per device for a
    /// typed notification): alert → `notification`, the payload-key object → `data`, collapse
    /// id → `collapse_key`, expiration → `ttl`, deep link → `click_action`, type → analytics label.
    static func fcmMessage(
        token: String, content: StoredNotificationContent, payload: Data?, collapseID: String?, payloadKey: String, now: Date
    ) -> FCMMessage {
        let object = (try? JSONDecoder().decode(JSONValue.self, from: payload ?? Data(content.payload.utf8)))?.objectValue ?? [:]
        let aps = object["aps"]?.objectValue ?? [:]
        var title: String?
        var body: String?
        if let alert = aps["alert"] {
            if case .string(let text) = alert { body = text }
            title = alert.objectValue?["title"]?.stringValue
            body = body ?? alert.objectValue?["body"]?.stringValue
        }
        var data = object[payloadKey]?.objectValue ?? [:]
        if let thread = aps["thread-id"]?.stringValue { data["thread_id"] = .string(thread) }
        if let category = aps["category"]?.stringValue { data["category"] = .string(category) }
        let ttl = content.expiration.map { max(0, $0 - Int(now.timeIntervalSince1970)) }
        return FCMMessage(
            token: token, title: title, body: body, image: content.android?.image, data: data,
            highPriority: APNSPushType(rawValue: content.pushType) != .background && (title != nil || body != nil),
            timeToLive: ttl, collapseKey: collapseID, channelID: content.android?.channelID, tag: collapseID,
            clickAction: data["deep_link"]?.stringValue, analyticsLabel: content.typed?.type)
    }

    private func outcome(for result: APNSResult, delivery: ClaimedDelivery) -> DeliveryResult.Outcome {
        let reason = result.reasonKey
        switch result.disposition {
        case .delivered: return .sent
        case .tokenDead: return .tokenDead(reason: reason, since: result.timestamp)
        case .configurationError, .badRequest: return .failed(reason: reason)
        case .retryTokenLater, .retryWithBackoff, .resendOnNewConnection:
            return outboxRetry(reason: reason, delivery: delivery, attempts: result.attempts) { total in
                result.reason == .clientShutdown ? 0 : min(300, 5 * pow(2, Double(min(total, 6))))
            }
        }
    }
}

/// A typed delivery the policy engine let through: its own payload and the trace to store.
struct PlannedDelivery: Sendable {
    var payload: Data
    /// The collapse id after the PII guard (nil when it was left out).
    var collapseID: String?
    var trace: String?
    var userID: String
}

/// The decision trace as stored per delivery: a JSON array of `{rule, message, at}`, appended to
/// each time the engine looks at the delivery again (a deferred one comes back).
enum DecisionTrace {
    struct Entry: Codable, Sendable, Hashable {
        var rule: String
        var message: String
        var at: String
    }

    static func appending(_ steps: [PolicyStep], at date: Date, to stored: String?) -> String? {
        guard !steps.isEmpty else { return stored }
        var entries = entries(stored)
        let at = HeraldTime.format(date)
        entries += steps.map { Entry(rule: $0.rule, message: $0.message, at: at) }
        return (try? JSONEncoder().encode(entries)).map { String(decoding: $0, as: UTF8.self) }
    }

    static func entries(_ stored: String?) -> [Entry] {
        stored.flatMap { try? JSONDecoder().decode([Entry].self, from: Data($0.utf8)) } ?? []
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
