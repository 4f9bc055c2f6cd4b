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
        runtime.metrics.restartResends(requeued)
        if requeued > 0 {
            logger.warning(
                "Deliveries claimed before a crash were queued again (at-least-once; some may arrive twice)",
                metadata: ["herald.requeued": "\(requeued)"])
        }
        let stopping = Atomic<Bool>(false)
        try await withGracefulShutdownHandler {
            // Pipelined: the next batch is claimed while the current one is on the wire, and its
            // results are written while the next is sent. A store error (disk full, database
            // read-only) never stops the dispatcher: it says so, waits and tries again, and
            // `/healthz` reports the stall.
            var claimed: [ClaimedDelivery] = []
            var failures = 0
            while !stopping.load(ordering: .relaxed) && !Task.isCancelled {
                var failure: (any Error)?
                if claimed.isEmpty {
                    do {
                        claimed = try await runtime.store.claimDueDeliveries(limit: batchSize)
                        if claimed.isEmpty {
                            failures = 0
                            await runtime.wake.wait(timeout: idleInterval)
                            continue
                        }
                    } catch {
                        failure = error
                    }
                } else {
                    async let ahead = Self.attempt { try await runtime.store.claimDueDeliveries(limit: batchSize) }
                    let sent = await Self.attempt { try await deliver(claimed) { stopping.load(ordering: .relaxed) } }
                    claimed = []
                    switch await ahead {
                    case .success(let next): claimed = next
                    case .failure(let error): failure = error
                    }
                    if case .failure(let error) = sent { failure = error }
                }
                guard let failure else {
                    failures = 0
                    continue
                }
                failures += 1
                await waitOutStoreError(failure, failures: failures, "Dispatcher cannot use the database; trying again")
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
        try await deliver(claimed) { true }
        return claimed.count
    }

    /// After the `failures`-th store error in a row: says so (the first and every tenth time)
    /// and waits 1 s doubling to 30 s.
    private func waitOutStoreError(_ error: any Error, failures: Int, _ message: Logger.Message, deliveries: Int? = nil) async {
        let wait = min(30, 0.5 * pow(2, Double(min(failures, 6))))
        if failures == 1 || failures % 10 == 0 {
            var metadata: Logger.Metadata = [
                "error": "\(String(describing: error).prefix(300))", "herald.failures": "\(failures)", "herald.retry_seconds": "\(wait)",
            ]
            if let deliveries { metadata["herald.deliveries"] = "\(deliveries)" }
            runtime.logger.error(message, metadata: metadata)
        }
        try? await Task.sleep(for: .seconds(wait))
    }

    private static func attempt<T: Sendable>(_ body: () async throws -> T) async -> Result<T, any Error> {
        do { return .success(try await body()) } catch { return .failure(error) }
    }

    /// Runs the policy engine on deliveries of typed notifications, sends what may go now and
    /// records every result (sent, failed, deferred, suppressed) in one batch.
    /// A store error before anything is sent hands the batch back to the queue; one while
    /// recording the answers is retried (until `isStopping`), so nothing sent is sent again
    /// while this process runs.
    private func deliver(_ claimed: [ClaimedDelivery], isStopping: () -> Bool) async throws {
        guard !claimed.isEmpty else { return }
        var decoded: [UUID: StoredNotificationContent] = [:]
        var sendable = claimed
        var held: [DeliveryResult] = []
        var planned: [Int64: PlannedDelivery] = [:]
        do {
            let contents = try await runtime.store.notificationContents(Array(Set(claimed.map(\.notificationID))))
            for (id, data) in contents {
                decoded[id] = try? JSONDecoder().decode(StoredNotificationContent.self, from: data)
            }
            if claimed.contains(where: { decoded[$0.notificationID]?.typed != nil }) {
                (held, planned) = try await applyPolicy(claimed.filter { decoded[$0.notificationID]?.typed != nil }, contents: decoded)
                let heldIDs = Set(held.map(\.deliveryID))
                sendable.removeAll { heldIDs.contains($0.id) }
            }
        } catch {
            try? await runtime.store.unclaim(claimed.map(\.id))
            throw error
        }
        let started = ContinuousClock.now
        let results = await sendThroughPauses(sendable, contents: decoded, planned: planned, held: &held)
        if !sendable.isEmpty { runtime.metrics.apnsBatch(seconds: (ContinuousClock.now - started).seconds) }
        let all = held + results
        var recordingFailures = 0
        while true {
            do {
                try await runtime.store.recordResults(all)
                break
            } catch {
                // What was sent stays `sending` if this never succeeds: a restart queues it again.
                recordingFailures += 1
                if isStopping() { throw error }
                await waitOutStoreError(
                    error, failures: recordingFailures, "Dispatcher cannot record a batch's answers; trying again", deliveries: all.count)
            }
        }
        // Counted once per batch, by app, status and reason; dead tokens by app for one log line
        // per app and batch, not one per token.
        var counts: [DeliveryCountKey: Int] = [:]
        var dead: [String: [String: Int]] = [:]
        for result in all {
            let key: DeliveryCountKey
            switch result.outcome {
            case .sent: key = DeliveryCountKey(app: result.appID, status: "sent", reason: nil)
            case .failed(let reason): key = DeliveryCountKey(app: result.appID, status: "failed", reason: reason)
            case .tokenDead(let reason, _):
                key = DeliveryCountKey(app: result.appID, status: "failed", reason: reason)
                dead[result.appID, default: [:]][reason, default: 0] += 1
            case .retry(let reason, _): key = DeliveryCountKey(app: result.appID, status: "retry", reason: reason)
            case .deferred(let reason, _): key = DeliveryCountKey(app: result.appID, status: "deferred", reason: reason)
            case .suppressed(let reason): key = DeliveryCountKey(app: result.appID, status: "suppressed", reason: reason)
            }
            counts[key, default: 0] += 1
        }
        runtime.metrics.deliveries(counts)
        runtime.metrics.batchFinished(at: Date())
        for (app, reasons) in dead.sorted(by: { $0.key < $1.key }) {
            runtime.logger.info(
                "Devices deactivated: their tokens are dead",
                metadata: [
                    "herald.app": "\(app)", "herald.devices": "\(reasons.values.reduce(0, +))",
                    "herald.reasons": "\(reasons.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ","))",
                ])
        }
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
                let pushType = content.content.pushType
                let silent = pushType == .background && typed.title == nil && typed.body == nil
                let copy = silent
                    ? nil : type.render(locale: delivery.locale ?? user?.locale, defaultLocale: catalog.app.defaultLocale, data: typed.data)
                let payloadKey = app.configuration.payloadKey
                let recent = (history[delivery.userID] ?? []).filter { $0.0 != delivery.notificationID }.map(\.1)
                let decision = engine.decide(
                    type: type.policyType(app: catalog.app), user: policyUser, app: policyApp,
                    content: content.policyContent(copy: copy), recent: recent, payloadLimit: pushType.payloadLimit,
                    payloadSize: {
                        (try? APNSRenderer.encoded(content.deviceContent(copy: copy, decided: $0), payloadKey: payloadKey).count) ?? .max
                    })
                let trace = DecisionTrace.appending(decision.trace, at: now, to: delivery.trace)
                switch decision.outcome {
                case .send:
                    var device = content.deviceContent(copy: copy, decided: decision.content)
                    var trace = trace
                    // Every data value, at any depth (the deep link included), is scanned too.
                    if let data = device.data {
                        let (scrubbed, found) = PIIDetector.scrubbed(.object(data), detectors: policyApp.piiDetectors)
                        if !found.isEmpty {
                            device.data = scrubbed.objectValue
                            trace = DecisionTrace.appending(
                                [PolicyStep(rule: "pii", message: "data values left out: \(found.sorted().joined(separator: ", ")) found")],
                                at: now, to: trace)
                        }
                    }
                    guard (try? APNSRenderer.encoded(device, payloadKey: payloadKey)) != nil else {
                        held.append(result(delivery, .failed(reason: "PayloadNotEncodable"), attempts: 0, trace: trace))
                        continue
                    }
                    planned[delivery.id] = PlannedDelivery(content: device, trace: trace, userID: delivery.userID)
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

    /// Sends what the provider pauses let through (issue #10 §2). A paused provider's deliveries
    /// go back to the queue until its next try, not counted as attempts; when that try is due a
    /// few of them are sent first and their answers decide whether the rest go now. After the
    /// send, answers that blame the configuration pause the provider and keep its deliveries queued.
    private func sendThroughPauses(
        _ sendable: [ClaimedDelivery], contents: [UUID: StoredNotificationContent], planned: [Int64: PlannedDelivery],
        held: inout [DeliveryResult]
    ) async -> [DeliveryResult] {
        let pauses = runtime.pauses
        let now = runtime.store.now
        var open: [ClaimedDelivery] = []
        var probes: [ClaimedDelivery] = []
        var waiting: [ProviderKey: [ClaimedDelivery]] = [:]
        var probed: [ProviderKey: ProviderPause] = [:]
        for (key, group) in Dictionary(grouping: sendable, by: \.provider) {
            switch pauses.gate(key, now: now) {
            case .open:
                open += group
            case .closed(let until):
                held += group.map { result($0, .retry(reason: Self.pausedReason, dueAt: until), attempts: 0) }
            case .probe(let pause):
                probes += group.prefix(ProviderPauses.probeSize)
                waiting[key] = Array(group.dropFirst(ProviderPauses.probeSize))
                probed[key] = pause
                await runtime.apps[key.app]?.enable(platform: key.platform)
            }
        }
        var results: [DeliveryResult] = []
        if !probes.isEmpty {
            let answers = await send(probes.sorted { $0.id < $1.id }, contents: contents, planned: planned)
            results += judge(answers, probed: probed)
            for (key, rest) in waiting {
                let until: Date
                switch pauses.gate(key, now: runtime.store.now) {
                case .open:
                    open += rest
                    continue
                case .closed(let date): until = date
                case .probe(let pause): until = pause.retryAt
                }
                held += rest.map { result($0, .retry(reason: Self.pausedReason, dueAt: until), attempts: 0) }
            }
        }
        if !open.isEmpty {
            results += judge(await send(open, contents: contents, planned: planned), probed: [:])
        }
        return results
    }

    /// The reason a delivery held back by a provider pause shows while queued.
    static let pausedReason = "ProviderPaused"

    /// Reads a batch's answers per provider: a refused credential or topic, or "bad token" for
    /// more than half of at least 50 answers, pauses the provider and turns those answers into
    /// retries at its next try; a probe that was not refused resumes it.
    private func judge(_ answers: [(result: DeliveryResult, provider: ProviderKey, signal: ProviderSignal)], probed: [ProviderKey: ProviderPause]) -> [DeliveryResult] {
        // The usual batch: nothing blames the configuration and nothing was probing.
        if probed.isEmpty, !answers.contains(where: { $0.signal == .credential || $0.signal == .suspectToken }) {
            return answers.map(\.result)
        }
        var judged: [DeliveryResult] = []
        judged.reserveCapacity(answers.count)
        let now = runtime.store.now
        for (key, group) in Dictionary(grouping: answers, by: \.provider) {
            let credential = group.filter { $0.signal == .credential }
            let suspects = group.filter { $0.signal == .suspectToken }
            let delivered = group.contains { $0.signal == .delivered }
            let pausing: (kind: ProviderPause.Kind, answers: [(result: DeliveryResult, provider: ProviderKey, signal: ProviderSignal)])?
            if !credential.isEmpty {
                pausing = (.credential, credential)
            } else if suspects.count * 2 > group.count, group.count >= Self.suspectBatchMinimum {
                pausing = (.tokensRejected, suspects)
            } else if let pause = probed[key], pause.kind == .tokensRejected, !delivered, !suspects.isEmpty {
                // Too few answers to judge by count: the probe is judged by whether anything went through.
                pausing = (.tokensRejected, suspects)
            } else {
                pausing = nil
            }
            let provider = key.platform == "fcm" ? "FCM" : "APNs"
            guard let pausing else {
                judged += group.map(\.result)
                if let pause = probed[key] {
                    runtime.pauses.resume(key)
                    runtime.logger.notice(
                        "\(provider) answers again for app \"\(key.app)\": its deliveries are sent",
                        metadata: ["herald.app": "\(key.app)", "herald.pause_reason": "\(pause.reason)"])
                }
                continue
            }
            let reason = Self.mostCommonReason(pausing.answers.map(\.result))
            let (pause, isNew) = runtime.pauses.pause(key, kind: pausing.kind, reason: reason, now: now, tried: probed[key] != nil)
            if isNew || probed[key] != nil {
                let what = pausing.kind == .credential
                    ? "refused the credential or topic (\(reason))"
                    : "called \(pausing.answers.count) of \(group.count) tokens bad (\(reason)): the environment, topic or project is likely wrong"
                runtime.logger.critical(
                    "\(provider) \(what); app \"\(key.app)\" stays queued and is tried again at \(HeraldTime.format(pause.retryAt))",
                    metadata: ["herald.app": "\(key.app)", "herald.platform": "\(key.platform)", "herald.reason": "\(reason)"])
            }
            let held = Set(pausing.answers.map(\.result.deliveryID))
            for answer in group {
                guard held.contains(answer.result.deliveryID) else {
                    judged.append(answer.result)
                    continue
                }
                var retry = answer.result
                retry.outcome = .retry(reason: Self.pausedReason, dueAt: pause.retryAt)
                retry.attempts = 0
                judged.append(retry)
            }
        }
        return judged
    }

    /// Answers in one batch of one provider from which "bad token" in the majority pauses it.
    static let suspectBatchMinimum = 50

    private static func mostCommonReason(_ results: [DeliveryResult]) -> String {
        var counts: [String: Int] = [:]
        for result in results {
            switch result.outcome {
            case .failed(let reason), .tokenDead(let reason, _): counts[reason, default: 0] += 1
            default: break
            }
        }
        return counts.max { ($0.value, $1.key) < ($1.value, $0.key) }?.key ?? "unknown"
    }

    private func send(
        _ claimed: [ClaimedDelivery], contents: [UUID: StoredNotificationContent], planned: [Int64: PlannedDelivery]
    ) async -> [(result: DeliveryResult, provider: ProviderKey, signal: ProviderSignal)] {
        let collected = ResultCollector(capacity: claimed.count)
        // Group by client; deliveries that cannot be sent are answered at once.
        var batches: [ObjectIdentifier: (APNSClient, [(ClaimedDelivery, APNSNotification)])] = [:]
        // Rendered once per notification, shared by all its deliveries; a typed delivery has its own.
        var payloads: [UUID: Data] = [:]
        var fcmBatches: [ObjectIdentifier: (FCMClient, [(ClaimedDelivery, FCMMessage)])] = [:]
        var fcmTemplates: [UUID: FCMMessage] = [:]
        let now = runtime.store.now
        for delivery in claimed {
            guard let app = runtime.apps[delivery.appID], let stored = contents[delivery.notificationID] else {
                collected.append(self.result(delivery, .failed(reason: "AppNotConfigured"), attempts: 0), delivery, .other)
                continue
            }
            let plan = planned[delivery.id]
            let content = plan?.content ?? stored.content
            guard delivery.platform == "apns" else {
                guard let client = app.fcmClient else {
                    collected.append(self.result(delivery, .failed(reason: "FCMNotConfigured"), attempts: 0, planned: plan), delivery, .other)
                    continue
                }
                var message: FCMMessage
                if plan != nil {
                    message = FCMRenderer.message(content, token: delivery.token, now: now)
                } else {
                    message = fcmTemplates[delivery.notificationID] ?? {
                        let template = FCMRenderer.message(content, now: now)
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
                collected.append(self.result(delivery, .failed(reason: reason.rawValue), attempts: 0, planned: plan), delivery, .other)
            case .client(let client):
                let payloadKey = app.configuration.payloadKey
                let rendered = plan != nil
                    ? try? APNSRenderer.encoded(content, payloadKey: payloadKey)
                    : payloads[delivery.notificationID] ?? {
                        let data = try? APNSRenderer.encoded(content, payloadKey: payloadKey)
                        payloads[delivery.notificationID] = data
                        return data
                    }()
                guard let payload = rendered else {
                    collected.append(self.result(delivery, .failed(reason: "PayloadNotEncodable"), attempts: 0, planned: plan), delivery, .other)
                    continue
                }
                let notification = APNSRenderer.notification(
                    content, payload: payload, deviceToken: delivery.token, bundleID: app.configuration.apns?.topic ?? "",
                    apnsID: .apnsID(notification: delivery.notificationID, delivery: delivery.id))
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
                                attempts: answer.attempts, planned: planned[delivery.id]),
                            delivery, Self.signal(answer), fcmLatency: answer.latency)
                    }
                }
            }
            for (client, items) in batches.values {
                group.addTask {
                    // Every delivery has its own apns-id: answers are matched by it.
                    let lookup = Dictionary(items.map { ($0.1.apnsID, ($0.0, $0.1.pushType)) }, uniquingKeysWith: { first, _ in first })
                    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                        let remaining = Atomic<Int>(items.count)
                        client.submit(items.map(\.1)) { result in
                            if let (delivery, pushType) = lookup[result.apnsID] {
                                let mapped = self.result(
                                    delivery, self.outcome(for: result, delivery: delivery), attempts: result.attempts,
                                    planned: planned[delivery.id])
                                collected.append(mapped, delivery, Self.signal(result, pushType: pushType), latency: result.latency)
                            }
                            if remaining.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 {
                                continuation.resume()
                            }
                        }
                    }
                }
            }
        }
        runtime.metrics.apnsRequests(latencies: collected.latencies)
        runtime.metrics.fcmRequests(latencies: collected.fcmLatencies)
        return collected.results
    }

    /// What an APNs answer says about the app's credential and topic (protocols.md §5).
    static func signal(_ result: APNSResult, pushType: APNSPushType) -> ProviderSignal {
        switch result.disposition {
        case .delivered: return .delivered
        case .configurationError:
            return result.reason?.refusesCredential(pushType: pushType) ?? true ? .credential : .other
        case .tokenDead:
            return result.reason == .badDeviceToken || result.reason == .deviceTokenNotForTopic ? .suspectToken : .other
        default: return .other
        }
    }

    /// What an FCM answer says about the app's service account and project (protocols.md §12).
    static func signal(_ result: FCMResult) -> ProviderSignal {
        switch result.disposition {
        case .delivered: return .delivered
        case .configurationError:
            // Can be one token's (its APNs or web push credential at FCM): judged in bulk.
            return FCMClient.perTokenAuthErrors.contains(result.reason ?? "") ? .suspectToken : .credential
        case .tokenDead:
            // 404 without FCM's UNREGISTERED: usually the wrong project, not a dead app install.
            return result.status == 404 && result.reason != "UNREGISTERED" ? .suspectToken : .other
        default: return .other
        }
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

/// A typed delivery the policy engine let through: its own content and the trace to store.
struct PlannedDelivery: Sendable {
    /// In the device's locale, after the policy engine and the PII guard.
    var content: NotificationContent
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

/// Results arriving from the APNs clients' event loops, each with its provider and what the
/// answer says about it.
final class ResultCollector: Sendable {
    typealias Answer = (result: DeliveryResult, provider: ProviderKey, signal: ProviderSignal)
    private let storage: Mutex<(results: [Answer], latencies: [Double], fcmLatencies: [Double])>

    init(capacity: Int) {
        var initial: [Answer] = []
        initial.reserveCapacity(capacity)
        storage = Mutex((initial, [], []))
    }

    func append(
        _ result: DeliveryResult, _ delivery: ClaimedDelivery, _ signal: ProviderSignal, latency: Double? = nil,
        fcmLatency: Double? = nil
    ) {
        storage.withLock { storage in
            storage.results.append((result, delivery.provider, signal))
            if let latency { storage.latencies.append(latency) }
            if let fcmLatency { storage.fcmLatencies.append(fcmLatency) }
        }
    }

    var fcmLatencies: [Double] { storage.withLock { $0.fcmLatencies } }

    var results: [Answer] { storage.withLock { $0.results } }
    var latencies: [Double] { storage.withLock { $0.latencies } }
}

extension ClaimedDelivery {
    var provider: ProviderKey { ProviderKey(app: appID, platform: platform) }
}
