package import Foundation
package import HeraldPayload

/// Renders `NotificationContent` as an FCM HTTP v1 message (protocols.md §11): alert text →
/// `notification`, the app's data → `data` (with `thread_id` and `category`), collapse id →
/// `collapse_key` and `tag`, expiration → `ttl`, `deep_link` → `click_action`. Pure; the
/// message is made once per notification and only the token changes per device.
package enum FCMRenderer {
    /// The message for `token` (empty for a template), with `ttl` counted from `now`.
    package static func message(_ content: NotificationContent, token: String = "", now: Date) -> FCMMessage {
        var data = content.data ?? [:]
        if let thread = content.threadID { data["thread_id"] = .string(thread) }
        if let category = content.category { data["category"] = .string(category) }
        let visible = content.title != nil || content.body != nil
        return FCMMessage(
            token: token, title: content.title, body: content.body, image: content.image, data: data,
            highPriority: visible && content.priority == .immediate,
            timeToLive: content.expiration.map { max(0, $0 - Int(now.timeIntervalSince1970)) },
            collapseKey: content.collapseID, channelID: content.androidChannelID, tag: content.collapseID,
            clickAction: data["deep_link"]?.stringValue, analyticsLabel: content.analyticsLabel)
    }

    /// Puts a delivery's stamp into its message: the data value `herald`, as JSON.
    package static func stamp(_ message: inout FCMMessage, _ stamp: HeraldStamp) {
        message.data[HeraldStamp.key] = .string(String(decoding: stamp.json(), as: UTF8.self))
    }

    /// Refuses a message over FCM's 4096 bytes (data keys and values, title and body counted),
    /// with `stampLength` bytes of a delivery's `herald` stamp still to come.
    package static func check(_ message: FCMMessage, field: String, stampLength: Int = 0) throws(RenderingError) {
        let size = payloadSize(message) + (stampLength > 0 ? HeraldStamp.key.utf8.count + stampLength : 0)
        guard size <= FCMMessage.sizeLimit else {
            throw RenderingError(
                .payloadTooLarge, field: field,
                message: "the FCM message is \(size) bytes; FCM allows \(FCMMessage.sizeLimit)")
        }
    }

    /// What FCM counts against its limit.
    package static func payloadSize(_ message: FCMMessage) -> Int {
        message.stringData.reduce(0) { $0 + $1.key.utf8.count + $1.value.utf8.count }
            + (message.title?.utf8.count ?? 0) + (message.body?.utf8.count ?? 0)
    }
}
