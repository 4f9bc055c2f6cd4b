import Foundation
import HeraldCore
import HeraldPayload
import Testing

/// The neutral content and the two renderers: each provider's message is made from
/// `NotificationContent`, never from the other's wire format.
@Suite("Rendering")
struct RenderingTests {
    /// A SyncWell-like alert with everything a provider can carry.
    let content = NotificationContent(
        pushType: .alert, title: "Sync failed", subtitle: "Garmin", body: "Tap to retry \"now\"", badge: 2,
        sound: "default",
        threadID: "sync-errors", category: "SYNC_ERROR", mutableContent: true, interruptionLevel: .timeSensitive,
        relevanceScore: 0.5, collapseID: "sync-1", expiration: 1_000_600,
        data: [
            "type": .string("PN-02"), "deep_link": .string("syncwell://sync/1"), "count": .int(3),
            "nested": .object(["a": .bool(true)]),
        ],
        androidChannelID: "sync_errors", image: "https://example.com/i.png", analyticsLabel: "PN-02")

    private func object(_ data: Data) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    @Test("APNs: alert, aps fields and the app's data under its payload key")
    func apns() throws {
        let payload = try object(APNSRenderer.payload(content, payloadKey: "syncwell"))
        let aps = try #require(payload["aps"] as? [String: Any])
        #expect(
            aps["alert"] as? [String: String] == [
                "title": "Sync failed", "subtitle": "Garmin", "body": "Tap to retry \"now\"",
            ])
        #expect(aps["badge"] as? Int == 2 && aps["sound"] as? String == "default")
        #expect(aps["thread-id"] as? String == "sync-errors" && aps["category"] as? String == "SYNC_ERROR")
        #expect(aps["mutable-content"] as? Int == 1 && aps["content-available"] == nil)
        #expect(aps["interruption-level"] as? String == "time-sensitive" && aps["relevance-score"] as? Double == 0.5)
        let data = try #require(payload["syncwell"] as? [String: Any])
        #expect(data["deep_link"] as? String == "syncwell://sync/1" && data["count"] as? Int == 3)
        #expect(Set(payload.keys) == ["aps", "syncwell"])
        // FCM-only fields stay out of the APNs payload.
        #expect(
            !String(decoding: try APNSRenderer.payload(content, payloadKey: "syncwell"), as: UTF8.self).contains(
                "sync_errors"))

        let request = APNSRenderer.notification(
            content, payload: Data("{}".utf8), deviceToken: "ab", bundleID: "com.syncwell", apnsID: UUID())
        #expect(request.collapseID == "sync-1" && request.expiration == 1_000_600 && request.priority == .immediate)
        #expect(request.topic == "com.syncwell")
    }

    @Test("FCM: notification, data with thread and category, click action, ttl, collapse key, channel")
    func fcm() throws {
        let message = FCMRenderer.message(content, token: "tok", now: Date(timeIntervalSince1970: 1_000_000))
        #expect(
            message.title == "Sync failed" && message.body == "Tap to retry \"now\""
                && message.image == "https://example.com/i.png")
        #expect(
            message.stringData == [
                "type": "PN-02", "deep_link": "syncwell://sync/1", "count": "3", "nested": #"{"a":true}"#,
                "thread_id": "sync-errors", "category": "SYNC_ERROR",
            ])
        #expect(message.clickAction == "syncwell://sync/1" && message.timeToLive == 600)
        #expect(message.collapseKey == "sync-1" && message.tag == "sync-1" && message.channelID == "sync_errors")
        #expect(message.highPriority && message.analyticsLabel == "PN-02" && message.token == "tok")
        // What only APNs knows stays out of the FCM request.
        let body = String(decoding: try message.requestBody(), as: UTF8.self)
        #expect(!body.contains("\"aps\"") && !body.contains("Garmin") && !body.contains("time-sensitive"))
    }

    @Test("FCM priority: HIGH only for visible, urgent content; silent and priority 5 go NORMAL")
    func fcmPriority() {
        let now = Date()
        #expect(FCMRenderer.message(NotificationContent(title: "Hi"), now: now).highPriority)
        #expect(!FCMRenderer.message(NotificationContent(priority: .considerPower, title: "Hi"), now: now).highPriority)
        let silent = NotificationContent(pushType: .background, contentAvailable: true, data: ["sync": .bool(true)])
        #expect(silent.priority == .considerPower)
        #expect(!FCMRenderer.message(silent, now: now).highPriority)
        #expect(FCMRenderer.message(silent, now: now).title == nil)
    }

    @Test("size limits name the field: APNs 4096 (5120 VoIP), FCM 4096")
    func sizeLimits() throws {
        let big = NotificationContent(body: String(repeating: "x", count: 4_100))
        #expect(throws: RenderingError.self) { try APNSRenderer.payload(big, payloadKey: "k") }
        do {
            _ = try APNSRenderer.payload(big, payloadKey: "k")
        } catch {
            #expect(error.code == .payloadTooLarge && error.field == "alert.body" && error.message.contains("4096"))
        }
        var voip = big
        voip.pushType = .voip
        #expect((try? APNSRenderer.payload(voip, payloadKey: "k")) != nil)
        let message = FCMRenderer.message(big, now: Date())
        #expect(throws: RenderingError.self) { try FCMRenderer.check(message, field: "alert.body") }
        #expect(
            (try? FCMRenderer.check(FCMRenderer.message(NotificationContent(body: "ok"), now: Date()), field: "x"))
                != nil)
    }

    @Test("stored content round-trips, and a row written before the neutral content reads back the same")
    func storedContent() throws {
        let stored = StoredNotificationContent(
            content: content, typed: TypedContent(type: "PN-02", data: ["n": "3"], title: "T"))
        let decoded = try JSONDecoder().decode(StoredNotificationContent.self, from: JSONEncoder().encode(stored))
        #expect(decoded == stored)

        // The shape an earlier server stored: the rendered APNs payload and a few headers.
        let legacy = #"""
            {"push_type":"alert","priority":10,"collapse_id":"c1","expiration":99,
             "payload":"{\"aps\":{\"alert\":{\"body\":\"B\",\"title\":\"T\"},\"badge\":1,\"content-available\":1,\"thread-id\":\"th\",\"relevance-score\":1},\"app\":{\"k\":\"v\"}}",
             "android":{"channel_id":"ch","image":"https://i"},"typed":{"type":"PN-01","data":{},"badge":1,"content_available":true,"mutable_content":false}}
            """#
        let old = try JSONDecoder().decode(StoredNotificationContent.self, from: Data(legacy.utf8))
        #expect(
            old.content.title == "T" && old.content.body == "B" && old.content.badge == 1
                && old.content.threadID == "th")
        #expect(old.content.contentAvailable && !old.content.mutableContent && old.content.relevanceScore == 1)
        #expect(old.content.collapseID == "c1" && old.content.expiration == 99 && old.content.priority == .immediate)
        #expect(
            old.content.data == ["k": .string("v")] && old.content.androidChannelID == "ch"
                && old.content.image == "https://i")
        #expect(old.typed?.type == "PN-01" && old.content.analyticsLabel == "PN-01")
    }

    @Test("a typed delivery: the device's copy and the policy's changes, explicit text first, summary in the data")
    func deviceContent() {
        let stored = StoredNotificationContent(
            content: NotificationContent(
                title: "Default", body: "Default body", threadID: "t", data: ["type": .string("X")]),
            typed: TypedContent(type: "X", data: [:], title: "Explicit"))
        let copy = CatalogCopy(title: "Titre", subtitle: "Sous-titre", body: "Corps")
        var decided = stored.policyContent(copy: copy)
        #expect(decided.title == "Explicit" && decided.body == "Corps" && decided.threadID == "t")
        decided.summary = "5 more"
        decided.threadID = "group"
        let device = stored.deviceContent(copy: copy, decided: decided)
        #expect(
            device.title == "Explicit" && device.body == "Corps" && device.subtitle == "Sous-titre"
                && device.threadID == "group")
        #expect(device.data == ["type": .string("X"), "group_summary": .string("5 more")])
    }
}
