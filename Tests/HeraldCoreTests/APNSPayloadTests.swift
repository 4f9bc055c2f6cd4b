import Foundation
import HeraldCore
import HeraldPayload
import Testing

@Suite("APNs payload model")
struct APNSPayloadTests {
    private func object(_ payload: APNSPayload) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: payload.jsonData()) as? [String: Any])
    }

    @Test("every aps key is encoded under Apple's name")
    func everyKey() throws {
        var aps = APS(
            alert: APSAlert(
                title: "T", subtitle: "S", body: "B", launchImage: "L", titleLocKey: "TK", titleLocArgs: ["a"],
                subtitleLocKey: "SK", subtitleLocArgs: ["b"], locKey: "K", locArgs: ["c", "d"]),
            badge: 3, sound: .critical(name: "alarm.caf", volume: 0.5), threadID: "library-42", category: "ENTRY",
            contentAvailable: true, mutableContent: true, targetContentID: "window-1",
            interruptionLevel: .timeSensitive, relevanceScore: 0.75, filterCriteria: "work")
        aps.staleDate = 1_900_000_000
        aps.contentState = ["score": 3]
        aps.timestamp = 1_800_000_000
        aps.event = "update"
        aps.dismissalDate = 1_900_000_100
        aps.attributesType = "MatchAttributes"
        aps.attributes = ["team": "A"]
        aps.inputPushToken = true
        aps.inputPushChannel = "Y2hhbm5lbA=="
        let json = try object(APNSPayload(aps: aps, custom: ["lucid": ["type": "thought", "id": 7]]))
        let encoded = try #require(json["aps"] as? [String: Any])
        #expect(
            Set(encoded.keys) == [
                "alert", "badge", "sound", "thread-id", "category", "content-available", "mutable-content",
                "target-content-id", "interruption-level", "relevance-score", "filter-criteria", "stale-date",
                "content-state", "timestamp", "event", "dismissal-date", "attributes-type", "attributes",
                "input-push-token", "input-push-channel",
            ])
        let alert = try #require(encoded["alert"] as? [String: Any])
        #expect(alert["title-loc-key"] as? String == "TK")
        #expect(alert["loc-args"] as? [String] == ["c", "d"])
        #expect(alert["launch-image"] as? String == "L")
        let sound = try #require(encoded["sound"] as? [String: Any])
        #expect(sound["critical"] as? Int == 1)
        #expect(sound["volume"] as? Double == 0.5)
        #expect(encoded["content-available"] as? Int == 1)
        #expect(encoded["interruption-level"] as? String == "time-sensitive")
        let custom = try #require(json["lucid"] as? [String: Any])
        #expect(custom["type"] as? String == "thought")
    }

    @Test("unset keys are left out and a custom key named aps cannot replace aps")
    func minimal() throws {
        let payload = APNSPayload(aps: APS(contentAvailable: true), custom: ["aps": "spoof", "k": true])
        let json = try object(payload)
        #expect(json["aps"] as? [String: Int] == ["content-available": 1])
        #expect(json["k"] as? Bool == true)
        let text = String(decoding: try payload.jsonData(), as: UTF8.self)
        #expect(text == #"{"aps":{"content-available":1},"k":true}"#)
    }

    @Test("a plain alert is a string and slashes are not escaped")
    func plainAlert() throws {
        let payload = APNSPayload(aps: APS(alert: .plain("see syncwell://connection/garmin"), sound: .default))
        let text = String(decoding: try payload.jsonData(), as: UTF8.self)
        #expect(text == #"{"aps":{"alert":"see syncwell://connection/garmin","sound":"default"}}"#)
    }
}

@Suite("APNs notification rules")
struct APNSNotificationTests {
    let token = String(repeating: "ab", count: 32)

    private func notification(
        pushType: APNSPushType = .alert, priority: APNSPriority? = nil, collapseID: String? = nil, size: Int = 20,
        token: String? = nil
    ) -> APNSNotification {
        APNSNotification(
            deviceToken: token ?? self.token, pushType: pushType, bundleID: "com.example.app", priority: priority,
            collapseID: collapseID, payload: Data(repeating: UInt8(ascii: "a"), count: size))
    }

    @Test("topics carry the push type's suffix")
    func topics() {
        #expect(notification().topic == "com.example.app")
        #expect(notification(pushType: .voip).topic == "com.example.app.voip")
        #expect(notification(pushType: .liveActivity).topic == "com.example.app.push-type.liveactivity")
        #expect(notification(pushType: .complication).topic == "com.example.app.complication")
        #expect(notification(pushType: .fileProvider).topic == "com.example.app.pushkit.fileprovider")
        #expect(notification(pushType: .location).topic == "com.example.app.location-query")
        #expect(notification(pushType: .pushToTalk).topic == "com.example.app.voip-ptt")
        #expect(notification(pushType: .widgets).topic == "com.example.app.push-type.widgets")
    }

    @Test("background pushes default to priority 5 and refuse 10")
    func backgroundPriority() throws {
        #expect(notification(pushType: .background).priority == .considerPower)
        #expect(throws: APNSValidationError.self) {
            try notification(pushType: .background, priority: .immediate).validate()
        }
        try notification(pushType: .alert).validate()
    }

    @Test("collapse id over 64 bytes is refused before sending")
    func collapseID() throws {
        try notification(collapseID: String(repeating: "c", count: 64)).validate()
        do {
            try notification(collapseID: String(repeating: "é", count: 33)).validate()
            Issue.record("66 bytes passed")
        } catch {
            #expect(error.code == .badCollapseID)
            #expect(error.field == "collapse_id")
        }
    }

    @Test("payload limits: 4096 bytes, 5120 for VoIP, never empty")
    func payloadLimits() throws {
        try notification(size: 4096).validate()
        #expect(
            throws: APNSValidationError(
                code: .payloadTooLarge, field: "payload",
                message: "payload is 4097 bytes; alert pushes allow at most 4096")
        ) {
            try notification(size: 4097).validate()
        }
        try notification(pushType: .voip, size: 5120).validate()
        #expect(throws: APNSValidationError.self) { try notification(pushType: .voip, size: 5121).validate() }
        #expect(throws: APNSValidationError.self) { try notification(size: 0).validate() }
    }

    @Test("tokens are hex of whole bytes, any length, case-folded")
    func tokens() throws {
        try notification(token: "ABCDEF0123").validate()
        #expect(notification(token: "ABCDEF").deviceToken == "abcdef")
        #expect(throws: APNSValidationError.self) { try notification(token: "abc").validate() }
        #expect(throws: APNSValidationError.self) { try notification(token: "zz").validate() }
        // An even number of bytes, one of them not hex (é is two UTF-8 bytes).
        #expect(throws: APNSValidationError.self) { try notification(token: "ab\u{e9}").validate() }
        #expect(throws: APNSValidationError.self) { try notification(token: "").validate() }
    }

    @Test("unknown push types and priorities are refused")
    func openSets() {
        #expect(throws: APNSValidationError.self) {
            try notification(pushType: APNSPushType(rawValue: "telepathy")).validate()
        }
        #expect(throws: APNSValidationError.self) { try notification(priority: APNSPriority(rawValue: 7)).validate() }
    }
}

@Suite("Identifiers")
struct IdentifierTests {
    @Test("random UUIDs are version 4, RFC 4122 variant, and distinct")
    func randomUUIDs() {
        var seen = Set<UUID>()
        for _ in 0..<10_000 {
            let uuid = UUID.random()
            let text = uuid.uuidString
            #expect(Array(text)[14] == "4")
            #expect("89AB".contains(Array(text)[19]))
            seen.insert(uuid)
        }
        #expect(seen.count == 10_000)
    }

    @Test("time-ordered UUIDs are version 7: their first 48 bits the milliseconds, sorted as text by time, distinct")
    func timeOrderedUUIDs() {
        let start = Date(timeIntervalSince1970: 1_796_000_000.123)
        var texts: [(milliseconds: UInt64, text: String)] = []
        var seen = Set<UUID>()
        for step in 0..<5_000 {
            let date = start.addingTimeInterval(Double(step / 2) / 1000)
            let uuid = UUID.timeOrdered(at: date)
            let text = uuid.uuidString.lowercased()
            #expect(Array(text)[14] == "7")
            #expect("89ab".contains(Array(text)[19]))
            let hex = text.replacingOccurrences(of: "-", with: "").prefix(12)
            // The whole milliseconds of the date (1,796,000,000,123 + step / 2, give or take a
            // rounding of the double).
            let milliseconds = UInt64((date.timeIntervalSince1970 * 1000).rounded(.down))
            #expect(UInt64(hex, radix: 16) == milliseconds, "\(text)")
            #expect((1_796_000_000_122...1_796_000_000_123 + UInt64(step / 2)).contains(milliseconds))
            texts.append((milliseconds, text))
            seen.insert(uuid)
        }
        #expect(seen.count == 5_000)
        // Ids of later milliseconds sort after earlier ones (within one millisecond, in any order).
        for (earlier, later) in zip(texts, texts.dropFirst()) where earlier.milliseconds < later.milliseconds {
            #expect(earlier.text < later.text)
        }
        #expect(Set(texts.map(\.milliseconds)).count > 1_900)
        #expect(UUID.timeOrdered(at: Date(timeIntervalSince1970: -5)).uuidString.hasPrefix("00000000-0000-7"))
    }
}
