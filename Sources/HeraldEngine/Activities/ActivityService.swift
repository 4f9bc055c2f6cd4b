import Foundation
import HeraldAPNs
package import HeraldCore
package import HeraldPayload
package import HeraldStore
import Synchronization

/// Live Activities' starts, updates and ends, sent to each device's activity token at once (the
/// node that takes the request sends it: one push per device and event, whatever the number
/// of nodes) and recorded with a decision trace per push. Herald owns the wire rules: the
/// `liveactivity` topic, a timestamp that only moves forward per activity, `dismissal-date`
/// only on `end`, priority 10 within the activity's budget and starts within each device's.
package struct ActivityService: Sendable {
    let store: HeraldStore

    package init(store: HeraldStore) {
        self.store = store
    }

    /// What the caller asks of a start.
    package struct Start: Sendable {
        package var activityID: String
        package var attributesType: String
        package var attributes: [String: JSONValue]
        package var contentState: [String: JSONValue]
        package var userIDs: [String]
        package var deviceIDs: [String]
        package var alert: LiveActivityAlert?
        package var staleAt: Int64?
        package var relevanceScore: Double?
        package var channel: String?
        /// The alert from a catalog activity type, per device locale (`alert` is then its
        /// default locale's).
        package var copy: ActivityAlertCopy?

        package init(
            activityID: String, attributesType: String, attributes: [String: JSONValue],
            contentState: [String: JSONValue], userIDs: [String], deviceIDs: [String], alert: LiveActivityAlert?,
            staleAt: Int64?, relevanceScore: Double?, channel: String?, copy: ActivityAlertCopy? = nil
        ) {
            self.copy = copy
            self.activityID = activityID
            self.attributesType = attributesType
            self.attributes = attributes
            self.contentState = contentState
            self.userIDs = userIDs
            self.deviceIDs = deviceIDs
            self.alert = alert
            self.staleAt = staleAt
            self.relevanceScore = relevanceScore
            self.channel = channel
        }
    }

    /// What the caller asks of an update or an end.
    package struct Change: Sendable {
        package var event: LiveActivityEvent
        package var contentState: [String: JSONValue]?
        package var alert: LiveActivityAlert?
        package var staleAt: Int64?
        package var dismissAt: Int64?
        package var relevanceScore: Double?
        /// 5 or 10; nil: Herald's choice (10 with an alert or for an end, else 5).
        package var priority: Int?
        /// The caller's own timestamp (Unix seconds): refused unless after the last one sent.
        package var timestamp: Int64?
        /// An end of an activity on a channel: keep the channel (else it is deleted).
        package var keepChannel: Bool
        /// The alert from a catalog activity type, per device locale (`alert` is then its
        /// default locale's); its stakes decide the alert's priority.
        package var copy: ActivityAlertCopy?

        package init(
            event: LiveActivityEvent, contentState: [String: JSONValue]?, alert: LiveActivityAlert?, staleAt: Int64?,
            dismissAt: Int64?, relevanceScore: Double?, priority: Int?, timestamp: Int64?, keepChannel: Bool = false,
            copy: ActivityAlertCopy? = nil
        ) {
            self.copy = copy
            self.keepChannel = keepChannel
            self.event = event
            self.contentState = contentState
            self.alert = alert
            self.staleAt = staleAt
            self.dismissAt = dismissAt
            self.relevanceScore = relevanceScore
            self.priority = priority
            self.timestamp = timestamp
        }
    }

    /// Why a start, update or end was not sent at all.
    package enum Refusal: Error, Equatable {
        case exists
        case notFound
        case ended
        case staleTimestamp(last: Int64)
        case payloadTooLarge(bytes: Int)
        case apnsUnavailable(reason: String)
        /// The start names a channel Herald has no record of.
        case unknownChannel
        /// The app has Apple's 10,000 channels in that environment.
        case channelLimit
        /// Apple refused a channel operation.
        case apple(status: Int, reason: String)
    }

    /// One device's push: what was sent (or why not) and what came back.
    package struct DeviceOutcome: Sendable, Equatable {
        package var deviceID: String
        package var status: String
        package var reason: String?
        package var priority: Int
    }

    /// What a start, update or end did.
    package struct Outcome: Sendable {
        package var activity: ActivityRepository.Activity
        package var timestamp: Int64
        package var devices: [DeviceOutcome]
    }

    /// Starts an activity on the devices of `start`'s users (or its devices) that reported a
    /// push-to-start token for its attributes type: one start each at priority 10, asking for
    /// an update token (and subscribing to `channel` when given). A device over its start budget
    /// is skipped, with the reason in its trace.
    package func start(app: AppRuntime, _ start: Start) async throws -> Outcome {
        let now = store.now
        let seconds = Self.seconds(now)
        if let channel = start.channel, try await store.activities.channel(appID: app.id, id: channel) == nil {
            throw Refusal.unknownChannel
        }
        let targets = try await store.activities.startTargets(
            appID: app.id, attributesType: start.attributesType, userIDs: start.userIDs, deviceIDs: start.deviceIDs)
        let push = LiveActivityPush(
            event: .start, timestamp: seconds, contentState: start.contentState, staleDate: start.staleAt,
            relevanceScore: start.relevanceScore, alert: start.alert, attributesType: start.attributesType,
            attributes: start.attributes, inputPushToken: start.channel == nil, inputPushChannel: start.channel)
        var payloads = PayloadsByAlert(push: push)
        try payloads.check(start.copy)
        let activity = ActivityRepository.Activity(
            id: start.activityID, attributesType: start.attributesType,
            attributes: JSONWriter.encode(.object(start.attributes)),
            contentState: JSONWriter.encode(.object(start.contentState)), status: "active", staleAt: start.staleAt,
            dismissalAt: nil, lastTimestamp: seconds, channelID: start.channel, createdAt: now, updatedAt: now)
        guard try await store.activities.createActivity(appID: app.id, activity) else { throw Refusal.exists }
        let budget = app.configuration.liveActivities
        let started = try await store.activities.recentStarts(
            appID: app.id, deviceIDs: targets.map(\.deviceID), since: now.addingTimeInterval(-budget.startWindow))
        var records: [(push: ActivityRepository.Push, effect: ActivityRepository.TokenEffect)] = []
        var sends:
            [(deviceID: String, environment: String, token: String, payload: Data, trace: [DecisionTrace.Entry])] =
                []
        let at = HeraldTime.format(now)
        for target in targets {
            var trace = [DecisionTrace.Entry(rule: "timestamp", message: "\(seconds) (now)", at: at)]
            guard let token = target.token else {
                trace.append(
                    .init(
                        rule: "token",
                        message: "no push-to-start token for \(start.attributesType): the app has not reported one",
                        at: at))
                records.append(
                    (Self.record(target.deviceID, push, 10, "skipped", "NoPushToStartToken", trace, now), .none))
                continue
            }
            let count = started[target.deviceID] ?? 0
            if count >= budget.startsPerDevice {
                trace.append(
                    .init(
                        rule: "start_budget",
                        message:
                            "\(count) starts to this device in the last \(Int(budget.startWindow / 60)) min: the budget is \(budget.startsPerDevice); not sent",
                        at: at))
                records.append(
                    (Self.record(target.deviceID, push, 10, "skipped", "StartBudgetExceeded", trace, now), .none))
                continue
            }
            trace.append(.init(rule: "priority", message: "10: a start", at: at))
            if let channel = start.channel {
                trace.append(
                    .init(rule: "channel", message: "listens on channel \(channel): updates are one publish", at: at))
            }
            let payload = payloads.payload(alert: start.copy.flatMap { $0.alert(locale: target.locale) } ?? start.alert)
            if let copy = start.copy { trace.append(Self.copyEntry(copy, locale: target.locale, at: at)) }
            sends.append((target.deviceID, target.environment, token, payload, trace))
        }
        // A start must reach a device that is briefly offline: kept by APNs for an hour.
        let answers = await send(
            app: app, priority: .immediate, expiration: Int(seconds) + 3_600,
            sends.map { ($0.deviceID, $0.environment, $0.token, $0.payload) })
        for (send, answer) in zip(sends, answers) {
            let effect: ActivityRepository.TokenEffect =
                answer.accepted ? .started : answer.tokenGone ? .startTokenGone : .none
            var trace = send.trace
            if answer.tokenGone {
                trace.append(.init(rule: "token", message: "the push-to-start token is gone: forgotten", at: at))
            }
            records.append(
                (
                    Self.record(
                        send.deviceID, push, 10, answer.accepted ? "sent" : "failed", answer.reason, trace, now),
                    effect
                ))
        }
        try await store.activities.record(appID: app.id, activityID: start.activityID, records)
        return Outcome(
            activity: activity, timestamp: seconds,
            devices: Self.outcomes(records).sorted { $0.deviceID < $1.deviceID })
    }

    /// Sends an update or end to every device of the activity that reported an update token,
    /// with the next timestamp of the activity. Priority: 10 for an end, an alert or when asked,
    /// within the activity's hourly budget (beyond it, 5); else 5. An end stores the activity
    /// as ended: nothing more is sent to it.
    package func change(app: AppRuntime, activityID: String, _ change: Change) async throws -> Outcome {
        let now = store.now
        let seconds = Self.seconds(now)
        // Checked before the timestamp is taken: a push too large to send takes nothing.
        var largest = PayloadsByAlert(
            push: LiveActivityPush(
                event: change.event, timestamp: Int64(Int32.max) * 1_000, contentState: change.contentState,
                staleDate: change.staleAt, dismissalDate: change.dismissAt, relevanceScore: change.relevanceScore,
                alert: change.alert))
        try largest.check(change.copy)
        let advanced = try await store.activities.advance(
            appID: app.id, activityID: activityID, event: change.event, timestamp: change.timestamp, now: seconds,
            contentState: change.contentState.map { JSONWriter.encode(.object($0)) }, staleAt: change.staleAt,
            dismissalAt: change.event == .end ? change.dismissAt : nil)
        let activity: ActivityRepository.Activity
        switch advanced {
        case .advanced(let found): activity = found
        case .notFound: throw Refusal.notFound
        case .ended: throw Refusal.ended
        case .stale(let last): throw Refusal.staleTimestamp(last: last)
        }
        let at = HeraldTime.format(now)
        var common = [
            DecisionTrace.Entry(
                rule: "timestamp",
                message: change.timestamp != nil
                    ? "\(activity.lastTimestamp) (asked; after the last sent)"
                    : "\(activity.lastTimestamp) (after the last sent)", at: at)
        ]
        let priority = try await priority(app: app, activityID: activityID, change, now: now, trace: &common, at: at)
        // An end carries the last state when it brings none: the device shows it until dismissed.
        let state = change.contentState ?? activity.contentState.flatMap(Self.object)
        let push = LiveActivityPush(
            event: change.event, timestamp: activity.lastTimestamp, contentState: state, staleDate: change.staleAt,
            dismissalDate: change.dismissAt, relevanceScore: change.relevanceScore, alert: change.alert)
        var payloads = PayloadsByAlert(push: push)
        try payloads.check(change.copy)
        if let channelID = activity.channelID {
            let record = try await publish(
                app: app, channelID: channelID, push: push, priority: priority, trace: common, now: now,
                deleteAfter: change.event == .end && !change.keepChannel)
            try await store.activities.record(appID: app.id, activityID: activityID, [(record, .none)])
            return Outcome(activity: activity, timestamp: activity.lastTimestamp, devices: [])
        }
        var records: [(push: ActivityRepository.Push, effect: ActivityRepository.TokenEffect)] = []
        var sends: [(deviceID: String, environment: String, token: String, payload: Data)] = []
        var copied: [String: DecisionTrace.Entry] = [:]
        for device in try await store.activities.devices(appID: app.id, activityID: activityID) {
            if device.status == "ended" {
                continue
            }
            guard let token = device.token else {
                let trace =
                    common + [
                        .init(
                            rule: "token", message: "started, but the device has not reported its update token yet",
                            at: at)
                    ]
                records.append(
                    (Self.record(device.deviceID, push, priority, "skipped", "NoUpdateToken", trace, now), .none))
                continue
            }
            let payload = payloads.payload(
                alert: change.copy.flatMap { $0.alert(locale: device.locale) } ?? change.alert)
            if let copy = change.copy { copied[device.deviceID] = Self.copyEntry(copy, locale: device.locale, at: at) }
            sends.append((device.deviceID, device.environment, token, payload))
        }
        let answers = await send(
            app: app, priority: priority == 10 ? .immediate : .considerPower, expiration: nil, sends)
        for (send, answer) in zip(sends, answers) {
            var trace = common
            if let entry = copied[send.deviceID] { trace.append(entry) }
            if answer.tokenGone {
                trace.append(
                    .init(rule: "token", message: "the update token is gone: the activity ended on this device", at: at)
                )
            }
            records.append(
                (
                    Self.record(
                        send.deviceID, push, priority, answer.accepted ? "sent" : "failed", answer.reason, trace, now),
                    answer.tokenGone ? .updateTokenGone(reason: answer.reason ?? "Unregistered") : .none
                ))
        }
        if records.isEmpty {
            // No device to send to: the push is still recorded, so the activity shows it.
            records.append(
                (
                    ActivityRepository.Push(
                        deviceID: nil, event: change.event, timestamp: activity.lastTimestamp, priority: priority,
                        status: "skipped", reason: "NoDevices", trace: DecisionTrace.text(common), createdAt: now),
                    .none
                ))
        }
        try await store.activities.record(appID: app.id, activityID: activityID, records)
        return Outcome(
            activity: activity, timestamp: activity.lastTimestamp,
            devices: Self.outcomes(records.filter { $0.push.deviceID != nil }))
    }

    /// The priority of an update or end, with why in the trace: 10 for an end, and for an alert
    /// or when asked unless the activity spent its priority-10 budget this hour; else 5.
    private func priority(
        app: AppRuntime, activityID: String, _ change: Change, now: Date, trace: inout [DecisionTrace.Entry],
        at: String
    ) async throws -> Int {
        let why: String
        if change.priority == 10 {
            why = "asked"
        } else if change.priority == nil && change.event == .end {
            why = "an end"
        } else if change.priority == nil, let copy = change.copy, copy.activity.stakes == .low {
            trace.append(
                .init(
                    rule: "priority",
                    message: "5: an alert of \(copy.activity.name), a low-stakes activity type (a routine update)",
                    at: at))
            return 5
        } else if change.priority == nil && (change.alert != nil || change.copy != nil) {
            why =
                change.copy.map { "an alert of \($0.activity.name) (\($0.activity.stakes.rawValue) stakes)" }
                ?? "an alert"
        } else {
            trace.append(
                .init(rule: "priority", message: change.priority == 5 ? "5: asked" : "5: a routine update", at: at))
            return 5
        }
        if change.event == .end {
            // An activity ends once: its end cannot burn the device's budget.
            trace.append(.init(rule: "priority", message: "10: \(why)", at: at))
            return 10
        }
        let budget = app.configuration.liveActivities.priorityPushesPerHour
        let spent = try await store.activities.priorityPushes(
            appID: app.id, activityID: activityID, since: now.addingTimeInterval(-3_600))
        guard spent < budget else {
            trace.append(
                .init(
                    rule: "priority",
                    message:
                        "10 \(why), but \(spent) priority-10 pushes in the last hour spent the budget of \(budget): sent at 5",
                    at: at))
            return 5
        }
        trace.append(
            .init(rule: "priority", message: "10: \(why) (\(spent + 1) of \(budget) this hour)", at: at))
        return 10
    }

    /// An update or end of an activity on a channel: one publish, which APNs fans out to every
    /// device listening; recorded as one push (no device). A channel that keeps no message
    /// takes expiration 0; one that keeps the latest, 8 hours (an activity's longest life).
    private func publish(
        app: AppRuntime, channelID: String, push: LiveActivityPush, priority: Int, trace: [DecisionTrace.Entry],
        now: Date, deleteAfter: Bool
    ) async throws -> ActivityRepository.Push {
        let at = HeraldTime.format(now)
        var trace = trace
        var status = "failed"
        var reason: String?
        if let channel = try await store.activities.channel(appID: app.id, id: channelID),
            let client = app.channelClient(environment: channel.environment)
        {
            let expiration = channel.storage == 0 ? 0 : Int(Self.seconds(now)) + 8 * 3_600
            do {
                let answer = try await client.publish(
                    channelID: channelID, payload: push.payload, priority: priority, expiration: expiration)
                status = answer.status == 200 ? "sent" : "failed"
                reason = answer.status == 200 ? nil : answer.reason ?? "HTTP \(answer.status)"
            } catch {
                reason = "Unreachable"
            }
            trace.append(
                .init(
                    rule: "channel",
                    message:
                        "one publish to channel \(channelID) (\(channel.environment)): APNs brings it to every device listening",
                    at: at))
            if deleteAfter, status == "sent" {
                let deleted = try? await client.delete(channelID: channelID)
                if deleted?.status == 204 || deleted?.reason == "ChannelNotRegistered" {
                    _ = try await store.activities.deleteChannel(appID: app.id, id: channelID)
                    trace.append(.init(rule: "channel", message: "the activity ended: channel deleted", at: at))
                } else {
                    trace.append(
                        .init(
                            rule: "channel",
                            message:
                                "the channel could not be deleted (\(deleted?.reason ?? "unreachable")): DELETE it again",
                            at: at))
                }
            }
        } else {
            reason = "ChannelNotRegistered"
            trace.append(.init(rule: "channel", message: "channel \(channelID) is not in Herald's records", at: at))
        }
        return ActivityRepository.Push(
            deviceID: nil, event: push.event, timestamp: push.timestamp, priority: priority, status: status,
            reason: reason, trace: DecisionTrace.text(trace), createdAt: now)
    }

    /// Creates a broadcast channel at Apple for `eventKey` and records it; refused past Apple's
    /// 10,000 per app and environment before Apple is asked.
    package func createChannel(app: AppRuntime, eventKey: String, storage: Int, environment: String) async throws
        -> ActivityRepository.Channel
    {
        guard let client = app.channelClient(environment: environment) else {
            throw Refusal.apnsUnavailable(reason: app.apnsDisabledReason ?? "no credentials")
        }
        guard try await store.activities.channelCount(appID: app.id, environment: environment) < Self.channelLimit
        else { throw Refusal.channelLimit }
        let answer: APNSChannelClient.Answer
        do {
            answer = try await client.create(storage: storage)
        } catch {
            throw Refusal.apple(status: 0, reason: "Unreachable (\(error))")
        }
        guard answer.status == 201, let id = answer.channelID, !id.isEmpty else {
            if answer.reason == "CannotCreateChannelConfig" { throw Refusal.channelLimit }
            throw Refusal.apple(status: answer.status, reason: answer.reason ?? "HTTP \(answer.status)")
        }
        let channel = ActivityRepository.Channel(
            id: id, environment: environment, eventKey: eventKey, storage: storage, createdAt: store.now)
        try await store.activities.recordChannels(appID: app.id, [channel])
        return channel
    }

    /// Deletes a channel at Apple and forgets it (a channel Apple no longer has is forgotten too).
    package func deleteChannel(app: AppRuntime, id: String) async throws {
        guard let channel = try await store.activities.channel(appID: app.id, id: id) else { throw Refusal.notFound }
        guard let client = app.channelClient(environment: channel.environment) else {
            throw Refusal.apnsUnavailable(reason: app.apnsDisabledReason ?? "no credentials")
        }
        let answer: APNSChannelClient.Answer
        do {
            answer = try await client.delete(channelID: id)
        } catch {
            throw Refusal.apple(status: 0, reason: "Unreachable (\(error))")
        }
        guard answer.status == 204 || answer.reason == "ChannelNotRegistered" else {
            throw Refusal.apple(status: answer.status, reason: answer.reason ?? "HTTP \(answer.status)")
        }
        _ = try await store.activities.deleteChannel(appID: app.id, id: id)
    }

    /// Apple's limit of channels per app and environment.
    package static let channelLimit = 10_000

    /// A provider's answer, as a push's record needs it.
    struct Answer {
        var accepted: Bool
        var tokenGone: Bool
        var reason: String?
    }

    /// Sends each token its payload through the app's APNs client of its environment (all
    /// of an environment's in one submission, as the outbox's batches go), and answers in the
    /// order given.
    private func send(
        app: AppRuntime, priority: APNSPriority, expiration: Int?,
        _ sends: [(deviceID: String, environment: String, token: String, payload: Data)]
    ) async -> [Answer] {
        guard !sends.isEmpty else { return [] }
        let topic = app.configuration.apns?.topic ?? ""
        var answers = [Answer](repeating: Answer(accepted: false, tokenGone: false, reason: nil), count: sends.count)
        for (environment, indices) in Dictionary(grouping: sends.indices, by: { sends[$0].environment }) {
            guard case .client(let client) = app.apnsClient(environment: environment) else {
                for index in indices { answers[index].reason = "APNsNotConfigured" }
                continue
            }
            var position: [UUID: Int] = [:]
            let notifications = indices.map { index in
                let id = UUID.random()
                position[id] = index
                return APNSNotification(
                    deviceToken: sends[index].token, pushType: .liveActivity, bundleID: topic, priority: priority,
                    expiration: expiration, apnsID: id, payload: sends[index].payload)
            }
            let results: [APNSResult] = await withCheckedContinuation { continuation in
                let collected = Mutex<[APNSResult]>([])
                let total = notifications.count
                client.submit(notifications) { result in
                    let done = collected.withLock { results -> [APNSResult]? in
                        results.append(result)
                        return results.count == total ? results : nil
                    }
                    if let done { continuation.resume(returning: done) }
                }
            }
            for result in results {
                guard let index = position[result.apnsID] else { continue }
                answers[index] = Answer(
                    accepted: result.isAccepted, tokenGone: result.disposition == .tokenDead,
                    reason: result.isAccepted ? nil : result.reasonKey)
            }
        }
        return answers
    }

    /// The trace entry of a catalog alert: which type's copy, in which locale.
    private static func copyEntry(_ copy: ActivityAlertCopy, locale: String?, at: String) -> DecisionTrace.Entry {
        let chain = Template.localeChain(locale, defaultLocale: copy.defaultLocale)
        let used = chain.first { copy.activity.copy[$0] != nil } ?? copy.defaultLocale
        return DecisionTrace.Entry(
            rule: "copy",
            message: "alert from activity type \(copy.activity.name), locale \(used) (device \(locale ?? "none"))",
            at: at)
    }

    private static func record(
        _ deviceID: String, _ push: LiveActivityPush, _ priority: Int, _ status: String, _ reason: String?,
        _ trace: [DecisionTrace.Entry], _ now: Date
    ) -> ActivityRepository.Push {
        ActivityRepository.Push(
            deviceID: deviceID, event: push.event, timestamp: push.timestamp, priority: priority, status: status,
            reason: reason, trace: DecisionTrace.text(trace), createdAt: now)
    }

    private static func outcomes(
        _ records: [(push: ActivityRepository.Push, effect: ActivityRepository.TokenEffect)]
    ) -> [DeviceOutcome] {
        records.compactMap { record in
            record.push.deviceID.map {
                DeviceOutcome(
                    deviceID: $0, status: record.push.status, reason: record.push.reason,
                    priority: record.push.priority)
            }
        }
    }

    static func object(_ text: String) -> [String: JSONValue]? {
        (try? JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)))?.objectValue
    }

    /// A push's payload per alert (devices in one locale share one), each checked against
    /// APNs' Live Activity limit before anything is sent.
    struct PayloadsByAlert {
        var push: LiveActivityPush
        var encoded: [LiveActivityAlert?: Data] = [:]

        init(push: LiveActivityPush) { self.push = push }

        /// The payload with `alert` (nil: none).
        mutating func payload(alert: LiveActivityAlert?) -> Data {
            if let known = encoded[alert] { return known }
            var changed = push
            changed.alert = alert
            let data = changed.payload
            encoded[alert] = data
            return data
        }

        /// Refuses the push when its own payload or one with any alert `copy` can make is too large.
        mutating func check(_ copy: ActivityAlertCopy?) throws(Refusal) {
            let alerts: [LiveActivityAlert?] = [push.alert] + (copy?.alerts ?? []).map { Optional($0) }
            for alert in alerts {
                let size = payload(alert: alert).count
                guard size <= APNSPushType.liveActivity.payloadLimit else { throw .payloadTooLarge(bytes: size) }
            }
        }
    }

    /// Unix seconds of `date` (0 for a date before 1970 or beyond Int64).
    static func seconds(_ date: Date) -> Int64 {
        Int64(exactly: date.timeIntervalSince1970.rounded(.down)) ?? 0
    }
}
