package import Foundation
package import HeraldPayload

/// One web push message before encryption: the device's stored subscription (its token), the
/// plaintext JSON the service worker receives, and the RFC 8030 headers.
package struct WebPushMessage: Sendable, Hashable {
    /// The device's token: `endpoint p256dh auth`.
    package var token: String
    /// The JSON the service worker's `push` event reads (at most 3,993 bytes).
    package var payload: Data
    /// Seconds the push service keeps it for an offline browser (`TTL`, required).
    package var ttl: Int
    /// `very-low`, `low`, `normal` or `high`.
    package var urgency: String
    /// The collapse identity: an undelivered message with the same one is replaced (sent as
    /// `Topic`, made to fit 32 URL-safe characters by the client).
    package var topic: String?

    package init(token: String, payload: Data, ttl: Int, urgency: String, topic: String?) {
        self.token = token
        self.payload = payload
        self.ttl = ttl
        self.urgency = urgency
        self.topic = topic
    }
}

/// Renders `NotificationContent` as the JSON a service worker's `push` event reads:
/// `{"title", "body", "image", "tag", "deep_link", "<payload key>": {data}, "herald": {stamp}}`.
/// `tag` is the collapse identity, so a resend replaces the notification the browser shows.
package enum WebPushRenderer {
    /// Seconds a message is kept when the notification has no expiration (FCM's and Mozilla's longest).
    package static let defaultTTL = 28 * 86_400

    package static func message(
        _ content: NotificationContent, token: String, now: Date, payloadKey: String, stamp: HeraldStamp,
        collapseID: String
    ) -> WebPushMessage {
        var object: [String: JSONValue] = [:]
        if let title = content.title { object["title"] = .string(title) }
        if let body = content.body { object["body"] = .string(body) }
        if let image = content.image { object["image"] = .string(image) }
        object["tag"] = .string(collapseID)
        var data = content.data ?? [:]
        if let link = data["deep_link"]?.stringValue { object["deep_link"] = .string(link) }
        if let thread = content.threadID { data["thread_id"] = .string(thread) }
        if let category = content.category { data["category"] = .string(category) }
        if !data.isEmpty { object[payloadKey] = .object(data) }
        var json = JSONWriter.encode(.object(object))
        // The stamp as an object, last: a service worker reads `herald.n` and `herald.d`.
        json.removeLast()
        json +=
            (object.isEmpty ? "" : ",") + #""\#(HeraldStamp.key)":"# + String(decoding: stamp.json(), as: UTF8.self)
            + "}"
        let ttl = content.expiration.map { max(0, $0 - Int(now.timeIntervalSince1970)) } ?? defaultTTL
        let urgency: String
        switch content.priority {
        case .immediate: urgency = "high"
        case .considerPower: urgency = content.title != nil || content.body != nil ? "normal" : "low"
        default: urgency = "low"
        }
        return WebPushMessage(token: token, payload: Data(json.utf8), ttl: ttl, urgency: urgency, topic: collapseID)
    }

    /// Refuses content whose plaintext would pass the 3,993 bytes a message can carry, with the
    /// longest stamp of notification `notificationID` (and its action tokens) and its collapse
    /// identity (the content's, else the notification's id).
    package static func check(
        _ content: NotificationContent, payloadKey: String, notificationID: String, stampLength: Int, field: String
    ) throws(RenderingError) {
        let stamp = HeraldStamp(notificationID: "", deliveryID: 0)
        let message = WebPushRenderer.message(
            content, token: "", now: Date(), payloadKey: payloadKey, stamp: stamp,
            collapseID: content.collapseID ?? notificationID)
        let size = message.payload.count - stamp.json().count + stampLength
        guard size <= WebPushEncryptionLimit.plaintext else {
            throw RenderingError(
                .payloadTooLarge, field: field,
                message: "the web push message is \(size) bytes; at most \(WebPushEncryptionLimit.plaintext) fit")
        }
    }
}

/// The providers besides APNs an app sends through: their limits are checked when a notification
/// is composed, so what one of them would refuse is a 4xx at the API.
package struct PushPlatforms: OptionSet, Sendable, Hashable {
    package let rawValue: UInt8
    package init(rawValue: UInt8) { self.rawValue = rawValue }
    package static let fcm = PushPlatforms(rawValue: 1)
    package static let webpush = PushPlatforms(rawValue: 2)
}

/// The plaintext a web push message may carry: a 4,096-byte body less the aes128gcm header
/// (86), the padding delimiter (1) and the tag (16).
package enum WebPushEncryptionLimit {
    package static let plaintext = 3_993
}
