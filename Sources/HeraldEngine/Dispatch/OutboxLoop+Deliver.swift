import Crypto
import Foundation
import HeraldCore
import HeraldPayload
import HeraldStore
import Synchronization
import Tracing

/// A claimed batch, planned: what may be sent now and what the policy step already decided.
struct PreparedBatch: Sendable {
    var claimed: [ClaimedDelivery]
    var sendable: [ClaimedDelivery]
    var held: [DeliveryResult]
    var contents: [UUID: StoredNotificationContent]
    var planned: [Int64: PlannedDelivery]
    /// APNs payloads the API rendered already (fresh plain notifications of this process).
    var apnsPayloads: [UUID: APNSPayloadTemplate] = [:]
}

extension OutboxLoop {
    /// Reads the batch's notification contents and runs the policy step on typed ones. A store
    /// error hands the batch back to the queue. `claimedAt`: when the claim began (for traces).
    func prepare(_ claimed: [ClaimedDelivery], claimedAt: DefaultTracerClock.Instant? = nil) async throws
        -> PreparedBatch
    {
        var batch = PreparedBatch(claimed: claimed, sendable: claimed, held: [], contents: [:], planned: [:])
        do {
            // Fresh notifications from this process's API are held decoded; the others are read.
            let ids = Set(claimed.map(\.notificationID))
            (batch.contents, batch.apnsPayloads) = runtime.recentContents.held(ids)
            let missing = ids.subtracting(batch.contents.keys)
            if !missing.isEmpty {
                for (id, data) in try await runtime.store.notifications.notificationContents(Array(missing)) {
                    batch.contents[id] = try? JSONDecoder().decode(StoredNotificationContent.self, from: data)
                }
            }
            runtime.traces?.claimed(claimed, contents: batch.contents, claimedAt: claimedAt ?? DefaultTracerClock.now)
            // Too old to matter: past the notification's expiration, or queued longer than outbox.max_age.
            let now = runtime.store.now
            let expired = claimed.filter { delivery in
                let stored = batch.contents[delivery.notificationID]
                let expiration = stored?.content.expiration
                // Queued since it was due: a send scheduled days ahead is not old when it falls due.
                let queuedSince = max(delivery.createdAt, stored?.deliverAt ?? delivery.createdAt)
                return now.timeIntervalSince(queuedSince) > configuration.maximumAge
                    || expiration.map { $0 > 0 && Double($0) < now.timeIntervalSince1970 } ?? false
            }
            if !expired.isEmpty {
                batch.held = expired.map { DeliveryResult($0, .failed(reason: "Expired"), attempts: 0) }
                let ids = Set(expired.map(\.id))
                batch.sendable.removeAll { ids.contains($0.id) }
            }
            let typed = batch.sendable.filter { batch.contents[$0.notificationID]?.typed != nil }
            if !typed.isEmpty {
                let (held, planned) = try await DeliveryPlanner(runtime: runtime).plan(typed, contents: batch.contents)
                batch.held += held
                batch.planned = planned
                let heldIDs = Set(held.map(\.deliveryID))
                batch.sendable.removeAll { heldIDs.contains($0.id) }
            }
            runtime.traces?.planned(batch.held, sendable: batch.sendable)
        } catch {
            runtime.traces?.abandoned(claimed)
            try? await runtime.store.nodes.unclaim(claimed)
            throw error
        }
        return batch
    }

    /// Sends what the provider pauses let through. A paused provider's deliveries
    /// go back to the queue until its next try, not counted as attempts; when that try is due a
    /// few of them are sent first and their answers decide whether the rest go now. After the
    /// send, answers that blame the configuration pause the provider and keep its deliveries queued.
    func deliver(_ batch: PreparedBatch, tracker: BatchTracker, recorder: DeliveryRecorder) async {
        // Whatever path it takes, the batch gives up its turn (the next batch may submit).
        defer { tracker.turn.release() }
        settle(batch.held, tracker: tracker, recorder: recorder)
        let pauses = runtime.pauses
        var open: [ClaimedDelivery] = []
        var probes: [ClaimedDelivery] = []
        var waiting: [ProviderKey: [ClaimedDelivery]] = [:]
        var probed: [ProviderKey: ProviderPause] = [:]
        var paused: [DeliveryResult] = []
        for (key, group) in Dictionary(grouping: batch.sendable, by: \.provider) {
            switch pauses.gate(key, now: runtime.store.now) {
            case .open:
                open += group
            case .closed(let until):
                paused += group.map { DeliveryResult($0, .retry(reason: Self.pausedReason, dueAt: until), attempts: 0) }
            case .probe(let pause):
                probes += group.prefix(ProviderPauses.probeSize)
                waiting[key] = Array(group.dropFirst(ProviderPauses.probeSize))
                probed[key] = pause
                await runtime.providers.enable(app: key.app, platform: key.platform)
            }
        }
        settle(paused, tracker: tracker, recorder: recorder)
        if !probes.isEmpty {
            await send(probes.sorted { $0.id < $1.id }, batch: batch, tracker: tracker, recorder: recorder)
            judge(tracker: tracker, recorder: recorder, probed: probed)
            var held: [DeliveryResult] = []
            for (key, rest) in waiting {
                let until: Date
                switch pauses.gate(key, now: runtime.store.now) {
                case .open:
                    open += rest
                    continue
                case .closed(let date): until = date
                case .probe(let pause): until = pause.retryAt
                }
                held += rest.map { DeliveryResult($0, .retry(reason: Self.pausedReason, dueAt: until), attempts: 0) }
            }
            settle(held, tracker: tracker, recorder: recorder)
        }
        if !open.isEmpty {
            await send(open, batch: batch, tracker: tracker, recorder: recorder)
            judge(tracker: tracker, recorder: recorder, probed: [:])
        }
    }

    /// Results decided without a provider: recorded, and no longer waited for.
    private func settle(_ results: [DeliveryResult], tracker: BatchTracker, recorder: DeliveryRecorder) {
        guard !results.isEmpty else { return }
        tracker.settle(results.map(\.deliveryID))
        runtime.traces?.recording(results)
        recorder.add(results)
    }

    /// Renders each delivery for its provider (once per notification where nothing per device
    /// differs) and sends each provider's share in one call; answers go to the recorder as
    /// they arrive, except those the batch's judgement must see first.
    private func send(
        _ deliveries: [ClaimedDelivery], batch: PreparedBatch, tracker: BatchTracker, recorder: DeliveryRecorder
    ) async {
        var apns: [ObjectIdentifier: (any PushProvider<APNSNotification>, [ProviderRequest<APNSNotification>])] = [:]
        var fcm: [ObjectIdentifier: (any PushProvider<FCMMessage>, [ProviderRequest<FCMMessage>])] = [:]
        var webpush: [ObjectIdentifier: (any PushProvider<WebPushMessage>, [ProviderRequest<WebPushMessage>])] = [:]
        let providers = runtime.providers
        var unsendable: [DeliveryResult] = []
        let now = runtime.store.now
        var renderer = DeviceRenderer(now: now, rendered: batch.apnsPayloads)
        // The action-token keys of the apps whose deliveries carry actions (read once each).
        var actionKeys: [String: SymmetricKey] = [:]
        for appID in Set(deliveries.filter { !(batch.planned[$0.id]?.actions.isEmpty ?? true) }.map(\.appID)) {
            if let app = runtime.apps[appID] { actionKeys[appID] = try? await runtime.actionKey(app) }
        }
        for delivery in deliveries {
            let plan = batch.planned[delivery.id]
            // One signed token per action of the type, in this delivery's stamp.
            var tokens: [String: String]?
            if let actions = plan?.actions, !actions.isEmpty {
                guard let key = actionKeys[delivery.appID] else {
                    unsendable.append(
                        outcome(unanswered: delivery, reason: "ActionKeyUnavailable", attempts: 0, now: false))
                    continue
                }
                let lifetime = now.addingTimeInterval(ActionToken.lifetime)
                let expiresAt =
                    plan?.content.expiration.flatMap {
                        $0 > 0 ? min(Date(timeIntervalSince1970: Double($0)), lifetime) : nil
                    } ?? lifetime
                tokens = Dictionary(
                    actions.map {
                        (
                            $0,
                            ActionToken(deliveryID: delivery.id, action: $0, expiresAt: expiresAt).signed(
                                appID: delivery.appID, key: key)
                        )
                    },
                    uniquingKeysWith: { first, _ in first })
            }
            guard let app = runtime.apps[delivery.appID], let stored = batch.contents[delivery.notificationID] else {
                unsendable.append(
                    DeliveryResult(delivery, .failed(reason: "AppNotConfigured"), attempts: 0, trace: plan?.trace))
                continue
            }
            let content = plan?.content ?? stored.content
            let variant = DeviceRenderer.Variant(notificationID: delivery.notificationID, index: plan?.variant ?? 0)
            let target = DeviceRenderer.Target(delivery)
            let test = stored.typed?.test == true
            if delivery.platform == "webpush" {
                guard
                    let provider = provider(
                        providers.webpush(app: delivery.appID), for: delivery, trace: plan?.trace,
                        unsendable: &unsendable)
                else { continue }
                let message = renderer.webpush(
                    content, variant: variant, to: target, app: app.rendering, actionTokens: tokens)
                webpush[provider.id, default: (provider, [])].1.append(
                    ProviderRequest(deliveryID: delivery.id, notificationID: delivery.notificationID, message: message))
                continue
            }
            if delivery.platform == "fcm" {
                guard
                    let provider = provider(
                        providers.fcm(app: delivery.appID), for: delivery, trace: plan?.trace, unsendable: &unsendable)
                else { continue }
                let message = renderer.fcm(content, variant: variant, to: target, actionTokens: tokens)
                if test {
                    runtime.testSends.record(
                        notification: delivery.notificationID, delivery: delivery.id, .init(.fcm(message)))
                }
                fcm[provider.id, default: (provider, [])].1.append(
                    ProviderRequest(deliveryID: delivery.id, notificationID: delivery.notificationID, message: message))
                continue
            }
            switch providers.apns(app: delivery.appID, environment: delivery.environment) {
            case .stopping:
                // The server is stopping: queued again, unsent, for the next start.
                unsendable.append(outcome(unanswered: delivery, reason: "Shutdown", attempts: 0, now: true))
            case .unavailable(let reason):
                unsendable.append(DeliveryResult(delivery, .failed(reason: reason), attempts: 0, trace: plan?.trace))
            case .provider(let provider):
                guard
                    let notification = try? renderer.apns(
                        content, variant: variant, template: plan?.apnsPayload, to: target, app: app.rendering,
                        actionTokens: tokens)
                else {
                    unsendable.append(
                        DeliveryResult(
                            delivery, .failed(reason: "PayloadNotEncodable"), attempts: 0, trace: plan?.trace))
                    continue
                }
                if test {
                    runtime.testSends.record(
                        notification: delivery.notificationID, delivery: delivery.id, .init(.apns(notification)))
                }
                apns[provider.id, default: (provider, [])].1.append(
                    ProviderRequest(
                        deliveryID: delivery.id, notificationID: delivery.notificationID, message: notification))
            }
        }
        settle(unsendable, tracker: tracker, recorder: recorder)
        // In claim order: after the batch before this one was handed over, and the next one
        // after this one's providers all have it.
        await tracker.turn.wait()
        let handedOver = Atomic<Int>(apns.count + fcm.count + webpush.count)
        let submitted: @Sendable () -> Void = {
            if handedOver.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 { tracker.turn.release() }
        }
        let started = ContinuousClock.now
        await withDiscardingTaskGroup { group in
            for (provider, requests) in apns.values {
                runtime.traces?.sending(requests, provider: "apns")
                group.addTask {
                    await provider.send(requests, submitted: submitted) {
                        answer($0, batch: batch, tracker: tracker, recorder: recorder, platform: "apns")
                    }
                }
            }
            for (provider, requests) in fcm.values {
                runtime.traces?.sending(requests, provider: "fcm")
                group.addTask {
                    await provider.send(requests, submitted: submitted) {
                        answer($0, batch: batch, tracker: tracker, recorder: recorder, platform: "fcm")
                    }
                }
            }
            for (provider, requests) in webpush.values {
                runtime.traces?.sending(requests, provider: "webpush")
                group.addTask {
                    await provider.send(requests, submitted: submitted) {
                        answer($0, batch: batch, tracker: tracker, recorder: recorder, platform: "webpush")
                    }
                }
            }
        }
        let seconds = (ContinuousClock.now - started).seconds
        if !apns.isEmpty { runtime.metrics.apnsBatch(seconds: seconds) }
        if !apns.isEmpty || !fcm.isEmpty || !webpush.isEmpty {
            runtime.metrics.outboxStage("provider", seconds: seconds)
        }
    }

    /// The provider a lookup found; or nil, with the delivery settled in `unsendable`: failed
    /// with the reason there is none, or handed back unsent while the server stops.
    private func provider<Message>(
        _ lookup: ProviderLookup<Message>, for delivery: ClaimedDelivery, trace: String?,
        unsendable: inout [DeliveryResult]
    ) -> (any PushProvider<Message>)? {
        switch lookup {
        case .provider(let found): return found
        case .unavailable(let reason):
            unsendable.append(DeliveryResult(delivery, .failed(reason: reason), attempts: 0, trace: trace))
        case .stopping:
            unsendable.append(outcome(unanswered: delivery, reason: "Shutdown", attempts: 0, now: true))
        }
        return nil
    }

    /// One answer, on a client's event loop: taken once by the batch; recorded at once unless
    /// it blames (or may blame) the configuration.
    private func answer(
        _ answer: ProviderAnswer, batch: PreparedBatch, tracker: BatchTracker, recorder: DeliveryRecorder,
        platform: String
    ) {
        let hold = answer.suspect || answer.disposition == .providerPaused
        runtime.traces?.answered(answer)
        let trace = batch.planned[answer.deliveryID]?.trace
        guard let delivery = tracker.take(answer, hold: hold, trace: trace) else { return }
        if !hold {
            recorder.add(result(answer, delivery: delivery, trace: trace), latency: answer.latency, platform: platform)
        }
    }

    /// The outcome of a provider's answer for a delivery: a retry follows the outbox's schedule
    /// (and the provider's Retry-After) until the delivery's attempts are spent.
    func result(_ answer: ProviderAnswer, delivery: ClaimedDelivery, trace: String?) -> DeliveryResult {
        let reason = answer.reason ?? "Unknown"
        let outcome: DeliveryResult.Outcome
        switch answer.disposition {
        case .delivered: outcome = .sent
        case .tokenDead(let since): outcome = .tokenDead(reason: reason, since: since)
        case .failed, .providerPaused: outcome = .failed(reason: reason)
        case .unsent: outcome = .retry(reason: reason, dueAt: runtime.store.now)
        case .retry(let after):
            outcome = retryOutcome(delivery, reason: reason, attempts: answer.attempts, providerAsked: after)
        }
        return DeliveryResult(delivery, outcome, attempts: answer.attempts, trace: trace)
    }

    /// The reason a delivery held back by a provider pause shows while queued.
    static let pausedReason = "ProviderPaused"

    /// Answers in one batch of one provider from which "bad token" in the majority pauses it.
    static let suspectBatchMinimum = 50
}

extension ClaimedDelivery {
    var provider: ProviderKey { ProviderKey(app: appID, platform: platform) }
}
