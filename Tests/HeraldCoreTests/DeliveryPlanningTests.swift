import Foundation
import HeraldCore
import HeraldPayload
import Testing

/// The policy step without a store or a clock: deliveries, users and their history in, what
/// goes, what waits and what is counted out.
@Suite struct DeliveryPlanningTests {
    /// 23:00 in Paris (22:00 UTC), inside SyncWell's quiet hours.
    static let night = Date(timeIntervalSince1970: 1_795_039_200)
    /// 13:00 in Paris.
    static let day = Date(timeIntervalSince1970: 1_795_003_200)

    /// SyncWell's catalog: a sync error users may switch off (by its id PN-02), a transactional
    /// receipt, an approval card with two actions; quiet hours 22:00–07:00, pacing of 2 an hour.
    static var app: PlanningApp {
        var catalog = CompositionTests.catalog
        catalog.app.quietHours = QuietHours(start: LocalTime(hour: 22), end: LocalTime(hour: 7))
        catalog.app.pacingLimit = 2
        return PlanningApp(catalog: catalog, policy: catalog.app.policyApp, payloadKey: "syncwell")
    }

    static func stored(_ type: String, data: [String: JSONValue] = [:], test: Bool = false) throws
        -> StoredNotificationContent
    {
        var stored = try NotificationComposer.compose(
            NotificationDraft(data: .object(data), type: type), payloadKey: "syncwell", catalog: app.catalog,
            platforms: .fcm, now: day
        ).content
        if test { stored.typed?.test = true }
        return stored
    }

    static let syncFailed: [String: JSONValue] = ["Source": "Strava", "source_id": "strava"]

    static func delivery(
        _ id: Int64, _ notification: UUID, user: String = "u1", locale: String? = nil, platform: String = "apns",
        trace: String? = nil, broadcast: BroadcastSlot? = nil
    ) -> ClaimedDelivery {
        ClaimedDelivery(
            id: id, notificationID: notification, appID: "syncwell", deviceID: "d\(id)", platform: platform,
            token: String(repeating: "ab", count: 32), environment: "production", attempts: 0, userID: user,
            locale: locale, timeZone: "Europe/Paris", trace: trace, claim: 7, broadcast: broadcast)
    }

    static let paris = PlanningUser(timeZone: "Europe/Paris")

    @Test("in the day a typed send goes, rendered in each device's locale; devices of one locale share a variant")
    func localesShareVariants() throws {
        let id = UUID()
        let plan = DeliveryPlanning.plan(
            [
                Self.delivery(1, id, user: "u1", locale: "fr"), Self.delivery(2, id, user: "u2", locale: "fr"),
                Self.delivery(3, id, user: "u3", locale: "en"),
            ],
            contents: [id: try Self.stored("sync_failed", data: Self.syncFailed)], users: [:], history: [:],
            app: Self.app, now: Self.day)
        #expect(plan.held.isEmpty)
        #expect(plan.planned[1]?.content.title == "Synchro en pause")
        #expect(plan.planned[3]?.content.title == "Sync paused")
        #expect(plan.planned[1]?.variant == plan.planned[2]?.variant)
        #expect(plan.planned[1]?.variant != plan.planned[3]?.variant)
        #expect(plan.planned[1]?.apnsPayload != nil)
        #expect(Set(plan.paced.map(\.userID)) == ["u1", "u2", "u3"])
    }

    @Test("at night a normal type waits for the end of quiet hours; a transactional one goes")
    func quietHours() throws {
        let (sync, receipt) = (UUID(), UUID())
        let plan = DeliveryPlanning.plan(
            [Self.delivery(1, sync), Self.delivery(2, receipt)],
            contents: [
                sync: try Self.stored("sync_failed", data: Self.syncFailed), receipt: try Self.stored("receipt"),
            ],
            users: ["u1": Self.paris], history: [:], app: Self.app, now: Self.night)
        #expect(plan.planned[2] != nil)
        let held = try #require(plan.held.first)
        #expect(held.deliveryID == 1)
        guard case .deferred(let reason, let until) = held.outcome else {
            Issue.record("not deferred: \(held.outcome)")
            return
        }
        #expect(reason == "quiet_hours")
        // 07:00 in Paris the next morning is 06:00 UTC, eight hours after 22:00 UTC.
        #expect(until == Self.night.addingTimeInterval(8 * 3600))
        #expect(DecisionTrace.entries(held.trace).map(\.rule).contains("quiet_hours"))
    }

    @Test(
        "a deferred delivery sent when its quiet hours end: its result names no trace (the stored one stays), one that adds a step names the whole trace; traces are encoded with sorted keys"
    )
    func unchangedTraceIsNotWrittenAgain() throws {
        let id = UUID()
        let quiet = try #require(
            DecisionTrace.appending(
                [PolicyStep(rule: "quiet_hours", message: "until 07:00")], at: Self.night, to: nil))
        #expect(quiet.hasPrefix(#"[{"at":"#) && quiet.contains(#""message":"until 07:00","rule":"quiet_hours"}"#))
        let deferred = Self.delivery(1, id, trace: quiet)
        // In the day: the policy step lets it through and adds nothing to its trace.
        let plan = DeliveryPlanning.plan(
            [deferred], contents: [id: try Self.stored("sync_failed", data: Self.syncFailed)],
            users: ["u1": Self.paris], history: [:], app: Self.app, now: Self.day)
        let planned = try #require(plan.planned[1])
        #expect(planned.trace == quiet)
        #expect(DeliveryResult(deferred, .sent, attempts: 1, trace: planned.trace).trace == nil)
        // Deferred again: the step is added, so the result carries the whole trace.
        let again = try #require(
            DecisionTrace.appending([PolicyStep(rule: "quiet_hours", message: "still")], at: Self.day, to: quiet))
        let result = DeliveryResult(
            deferred, .deferred(reason: "quiet_hours", until: Self.day), attempts: 0, trace: again)
        #expect(result.trace == again && DecisionTrace.entries(result.trace).count == 2)
        // A broadcast's delivery keeps what its slot does not hold.
        let slot = BroadcastSlot(page: 3, lane: 1, dueAt: 0, acceptedAt: 0, userID: "u1")
        let paged = Self.delivery(2, id, trace: quiet, broadcast: slot)
        #expect(DeliveryResult(paged, .sent, attempts: 1, trace: quiet).trace == quiet)
    }

    @Test("pacing counts the history and each send decided in the batch, and only those are recorded")
    func pacing() throws {
        let ids = [UUID(), UUID(), UUID()]
        var contents: [UUID: StoredNotificationContent] = [:]
        for id in ids { contents[id] = try Self.stored("sync_failed", data: Self.syncFailed) }
        let earlier = UUID()
        let plan = DeliveryPlanning.plan(
            ids.enumerated().map { Self.delivery(Int64($0.offset + 1), $0.element) }, contents: contents,
            users: ["u1": Self.paris], history: ["u1": [(earlier, Self.day.addingTimeInterval(-600))]], app: Self.app,
            now: Self.day)
        #expect(plan.planned.keys.sorted() == [1])
        #expect(plan.paced.map(\.notificationID) == [ids[0]])
        #expect(plan.held.count == 2)
        #expect(plan.held.allSatisfy { if case .deferred("pacing", _) = $0.outcome { true } else { false } })
    }

    @Test("a type the user switched off by its external id is suppressed; a test send is not counted for pacing")
    func preferencesAndTests() throws {
        let (sync, test) = (UUID(), UUID())
        let off = PlanningUser(timeZone: "Europe/Paris", preferences: UserPreferences(types: ["PN-02": false]))
        let plan = DeliveryPlanning.plan(
            [Self.delivery(1, sync), Self.delivery(2, test)],
            contents: [
                sync: try Self.stored("sync_failed", data: Self.syncFailed),
                test: try Self.stored("receipt", test: true),
            ],
            users: ["u1": off], history: [:], app: Self.app, now: Self.night)
        #expect(plan.held.map(\.deliveryID) == [1])
        #expect(plan.held.first?.outcome == .suppressed(reason: "preference"))
        #expect(plan.planned[2] != nil)
        #expect(DecisionTrace.entries(plan.planned[2]?.trace).first?.rule == "test")
        #expect(plan.paced.isEmpty)
    }

    @Test(
        "an e-mail address in the data is left out and the trace says so, a UUID whose last group is all digits is kept; a type not in the catalog fails"
    )
    func piiAndUnknownType() throws {
        let (sync, gone) = (UUID(), UUID())
        var unknown = try Self.stored("receipt")
        unknown.typed?.type = "removed"
        let plan = DeliveryPlanning.plan(
            [Self.delivery(1, sync), Self.delivery(2, gone)],
            contents: [
                sync: try Self.stored(
                    "sync_failed",
                    data: Self.syncFailed.merging([
                        "contact": "ana@example.com", "entry_id": "0b1c2d3e-4f50-4a6b-8c7d-123456789012",
                    ]) { $1 }),
                gone: unknown,
            ],
            users: [:], history: [:], app: Self.app, now: Self.day)
        let planned = try #require(plan.planned[1])
        #expect(planned.content.data?["contact"] == nil)
        #expect(planned.content.data?["source_id"] == .string("strava"))
        #expect(planned.content.data?["entry_id"] == .string("0b1c2d3e-4f50-4a6b-8c7d-123456789012"))
        #expect(
            DecisionTrace.entries(planned.trace).contains {
                $0.rule == "pii" && $0.message == "data values left out: email found"
            })
        #expect(plan.held.map(\.outcome) == [.failed(reason: "TypeNotInCatalog")])
    }
}

/// One render function for every device: the stamp, the apns-id, the collapse rule and the
/// sharing of what a variant's devices have in common.
@Suite struct DeviceRendererTests {
    static let app = RenderingApp(payloadKey: "syncwell", topic: "app.syncwell")
    static let content = NotificationContent(
        pushType: .alert, priority: nil, title: "Sync paused", body: "Strava needs you", data: ["k": "v"])

    static func target(_ id: Int64, platform: String = "apns", notification: UUID) -> DeviceRenderer.Target {
        DeviceRenderer.Target(
            notificationID: notification, deliveryID: id, platform: platform, token: "AB" + String(id))
    }

    @Test("an APNs delivery carries its stamp and its derived apns-id; devices of a variant share the payload")
    func apns() throws {
        let id = UUID()
        var renderer = DeviceRenderer(now: Date(timeIntervalSince1970: 1_795_000_000))
        let variant = DeviceRenderer.Variant(notificationID: id)
        guard
            case .apns(let first) = try renderer.render(
                Self.content, variant: variant, to: Self.target(41, notification: id), app: Self.app)
        else { throw RendererTestError.wrongPlatform }
        #expect(first.deviceToken == "ab41")
        #expect(first.topic == "app.syncwell")
        #expect(first.apnsID == .apnsID(notification: id, delivery: 41))
        #expect(first.collapseID == id.uuidString.lowercased(), "an alert collapses onto its notification by default")
        let payload = try JSONDecoder().decode(JSONValue.self, from: first.payload)
        let stamp = try #require(payload.objectValue?["syncwell"]?.objectValue.flatMap(HeraldStamp.init(appData:)))
        #expect(stamp.deliveryID == 41)
        #expect(stamp.notificationID == id.uuidString.lowercased())
        // The variant's payload is made once: other content under the same variant is not rendered again.
        var other = Self.content
        other.title = "Changed"
        let second = try renderer.apns(other, variant: variant, to: Self.target(42, notification: id), app: Self.app)
        #expect(String(decoding: second.payload, as: UTF8.self).contains("Sync paused"))
        #expect(String(decoding: second.payload, as: UTF8.self).contains("\"d\":42"))
    }

    @Test("a card with action tokens collapses onto its notification on both providers")
    func collapseRule() throws {
        let id = UUID()
        var renderer = DeviceRenderer(now: Date(timeIntervalSince1970: 1_795_000_000))
        let tokens = ["APPROVE": "t1", "REJECT": "t2"]
        let apns = try renderer.apns(
            Self.content, variant: .init(notificationID: id), to: Self.target(1, notification: id), app: Self.app,
            actionTokens: tokens)
        #expect(apns.collapseID == id.uuidString.lowercased())
        let fcm = renderer.fcm(
            Self.content, variant: .init(notificationID: id), to: Self.target(2, platform: "fcm", notification: id),
            actionTokens: tokens)
        #expect(fcm.collapseKey == id.uuidString.lowercased())
        #expect(fcm.token == "AB2")
        let stamp = try #require(HeraldStamp(appData: fcm.data))
        #expect(stamp.actionTokens == tokens)
        #expect(stamp.deliveryID == 2)
    }

    @Test(
        "every alert carries a collapse identity: its own collapse id, else the notification's id (APNs apns-collapse-id, FCM tag, never a collapse_key); background and data-only pushes carry none"
    )
    func defaultCollapseIdentity() throws {
        let id = UUID()
        let lower = id.uuidString.lowercased()
        var renderer = DeviceRenderer(now: Date(timeIntervalSince1970: 1_795_000_000))
        // A resend of delivery 7 after an unknown outcome: the same apns-id and collapse id.
        let first = try renderer.apns(
            Self.content, variant: .init(notificationID: id), to: Self.target(7, notification: id), app: Self.app)
        var again = DeviceRenderer(now: Date(timeIntervalSince1970: 1_795_000_060))
        let resent = try again.apns(
            Self.content, variant: .init(notificationID: id), to: Self.target(7, notification: id), app: Self.app)
        #expect(first.collapseID == lower && resent.collapseID == lower)
        #expect(first.apnsID == resent.apnsID)
        let fcm = renderer.fcm(
            Self.content, variant: .init(notificationID: id), to: Self.target(8, platform: "fcm", notification: id))
        #expect(fcm.tag == lower)
        #expect(fcm.collapseKey == nil, "one collapse_key per notification would crowd out FCM's four per device")
        let body = String(decoding: try fcm.requestBody(), as: UTF8.self)
        #expect(body.contains(#""tag":"\#(lower)""#) && !body.contains("collapse_key"), "\(body)")

        // The request's own collapse id wins, on both providers.
        var own = Self.content
        own.collapseID = "score"
        let other = UUID()
        #expect(
            try renderer.apns(
                own, variant: .init(notificationID: other), to: Self.target(9, notification: other), app: Self.app
            ).collapseID == "score")
        let ownFCM = renderer.fcm(
            own, variant: .init(notificationID: other), to: Self.target(10, platform: "fcm", notification: other))
        #expect(ownFCM.tag == "score" && ownFCM.collapseKey == "score")

        // A background push is never shown: nothing to collapse.
        let background = NotificationContent(
            pushType: .background, priority: nil, contentAvailable: true, data: ["k": "v"])
        let silent = UUID()
        #expect(
            try renderer.apns(
                background, variant: .init(notificationID: silent), to: Self.target(11, notification: silent),
                app: Self.app
            ).collapseID == nil)
        let data = renderer.fcm(
            background, variant: .init(notificationID: silent),
            to: Self.target(12, platform: "fcm", notification: silent))
        #expect(data.tag == nil && data.collapseKey == nil)
    }

    @Test("render picks the provider by the device's platform")
    func platform() throws {
        let id = UUID()
        var renderer = DeviceRenderer(now: Date(timeIntervalSince1970: 1_795_000_000))
        let message = try renderer.render(
            Self.content, variant: .init(notificationID: id), to: Self.target(3, platform: "fcm", notification: id),
            app: Self.app)
        guard case .fcm(let fcm) = message else { throw RendererTestError.wrongPlatform }
        #expect(fcm.title == "Sync paused")
        #expect(fcm.data["k"] == .string("v"))
    }
}

enum RendererTestError: Error {
    case wrongPlatform
}
