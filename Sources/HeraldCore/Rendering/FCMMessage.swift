package import Foundation
package import HeraldPayload

/// A Herald notification as FCM HTTP v1 sees it (protocols.md §11), for one registration token.
package struct FCMMessage: Sendable, Hashable {
    package var token: String
    package var title: String?
    package var body: String?
    package var image: String?
    /// Custom data; every value goes out as a string (nested values JSON-encoded).
    package var data: [String: JSONValue]
    /// Alerts go `HIGH`, silent (data-only) messages `NORMAL`.
    package var highPriority: Bool
    /// Seconds the message may wait for the device (`android.ttl`); `nil` = FCM's default.
    package var timeToLive: Int?
    /// FCM's longest `ttl`: 28 days. Longer expirations (fine for APNs) are sent as 28 days.
    package static let maximumTimeToLive = 28 * 86400
    package var collapseKey: String?
    package var channelID: String?
    package var tag: String?
    /// Where a tap leads (`android.notification.click_action`): the deep link.
    package var clickAction: String?
    /// `fcm_options.analytics_label`: the notification type.
    package var analyticsLabel: String?

    package init(
        token: String, title: String? = nil, body: String? = nil, image: String? = nil, data: [String: JSONValue] = [:],
        highPriority: Bool? = nil, timeToLive: Int? = nil, collapseKey: String? = nil, channelID: String? = nil,
        tag: String? = nil, clickAction: String? = nil, analyticsLabel: String? = nil
    ) {
        self.token = token
        self.title = title
        self.body = body
        self.image = image
        self.data = data
        self.highPriority = highPriority ?? (title != nil || body != nil)
        self.timeToLive = timeToLive
        self.collapseKey = collapseKey
        self.channelID = channelID
        self.tag = tag
        self.clickAction = clickAction
        self.analyticsLabel = analyticsLabel
    }

    /// FCM's limit for a message to a token.
    package static let sizeLimit = 4096
    /// Data keys FCM refuses (`from`, `message_type`, anything starting `google` or `gcm`).
    package static func isReservedDataKey(_ key: String) -> Bool {
        let lowered = key.lowercased()
        return lowered == "from" || lowered == "message_type" || lowered.hasPrefix("google") || lowered.hasPrefix("gcm")
    }

    /// Every data value as FCM wants it: strings as they are, anything else as JSON (keys sorted).
    package var stringData: [String: String] {
        var result: [String: String] = [:]
        for (key, value) in data {
            switch value {
            case .string(let text): result[key] = text
            case .null: continue
            default: result[key] = JSONWriter.encode(value)
            }
        }
        return result
    }

    /// Whether the message shows a notification (else it is data only).
    package var hasNotification: Bool { title != nil || body != nil || image != nil }

    /// The request body: `{"message":{…}}`, keys in sorted order. Written byte by byte: this runs
    /// once per device, and `JSONSerialization` cost ~150 µs of CPU a message.
    package func requestBody() throws -> Data {
        var json = JSONWriter(capacity: 256 + token.utf8.count + (title?.utf8.count ?? 0) + (body?.utf8.count ?? 0))
        json.raw(#"{"message":{"android":{"#)
        if let collapseKey {
            json.raw(#""collapse_key":"#)
            json.string(collapseKey)
            json.raw(",")
        }
        if hasNotification, channelID != nil || tag != nil || clickAction != nil {
            json.raw(#""notification":"#)
            json.stringObject([("channel_id", channelID), ("click_action", clickAction), ("tag", tag)])
            json.raw(",")
        }
        json.raw(highPriority ? #""priority":"HIGH""# : #""priority":"NORMAL""#)
        if let timeToLive {
            json.raw(#","ttl":"#)
            json.string("\(min(max(0, timeToLive), Self.maximumTimeToLive))s")
        }
        json.raw("}")
        let strings = stringData
        if !strings.isEmpty {
            json.raw(#","data":"#)
            json.stringObject(strings.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
        }
        if let analyticsLabel {
            json.raw(#","fcm_options":{"analytics_label":"#)
            json.string(Self.analyticsLabel(analyticsLabel))
            json.raw("}")
        }
        if hasNotification {
            json.raw(#","notification":"#)
            json.stringObject([("body", body), ("image", image), ("title", title)])
        }
        json.raw(#","token":"#)
        json.string(token)
        json.raw("}}")
        return Data(json.bytes)
    }

    /// FCM labels are `[a-zA-Z0-9-_.~%]{1,50}`.
    static func analyticsLabel(_ text: String) -> String {
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~%")
        return String(text.map { allowed.contains($0) ? $0 : "_" }.prefix(50))
    }
}
