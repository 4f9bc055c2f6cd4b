package import Foundation
import HeraldPayload

/// Renders `NotificationContent` as an APNs payload (protocols.md §4): the `aps` dictionary
/// plus the app's data under its payload key. Pure; the bytes are shared by every device the
/// content goes to.
package enum APNSRenderer {
    /// The payload JSON (sorted keys), checked against the push type's size limit.
    package static func payload(_ content: NotificationContent, payloadKey: String) throws(RenderingError) -> Data {
        let payload = try encoded(content, payloadKey: payloadKey)
        try check(payload, pushType: content.pushType, field: content.body != nil ? "alert.body" : "data")
        return payload
    }

    /// The payload JSON without the size check (the policy engine measures candidates with it).
    package static func encoded(_ content: NotificationContent, payloadKey: String) throws(RenderingError) -> Data {
        do {
            return try apnsPayload(content, payloadKey: payloadKey).jsonData()
        } catch {
            throw RenderingError(.notEncodable, field: "data", message: "the APNs payload cannot be encoded")
        }
    }

    /// Refuses a payload over the push type's limit (4096 bytes, 5120 for VoIP).
    package static func check(_ payload: Data, pushType: APNSPushType, field: String) throws(RenderingError) {
        guard payload.count <= pushType.payloadLimit else {
            throw RenderingError(
                .payloadTooLarge, field: field,
                message:
                    "the APNs payload is \(payload.count) bytes; \(pushType.rawValue) allows \(pushType.payloadLimit)")
        }
    }

    /// The APNs request for one device token, around a rendered payload.
    package static func notification(
        _ content: NotificationContent, payload: Data, deviceToken: String, bundleID: String, apnsID: UUID
    ) -> APNSNotification {
        APNSNotification(
            deviceToken: deviceToken, pushType: content.pushType, bundleID: bundleID, priority: content.priority,
            expiration: content.expiration, collapseID: content.collapseID, apnsID: apnsID, payload: payload)
    }

    static func apnsPayload(_ content: NotificationContent, payloadKey: String) -> APNSPayload {
        var aps = APS()
        if content.hasAlert {
            aps.alert = APSAlert(title: content.title, subtitle: content.subtitle, body: content.body)
        }
        aps.badge = content.badge
        aps.sound = content.sound.map(APSSound.named)
        aps.threadID = content.threadID
        aps.category = content.category
        aps.contentAvailable = content.contentAvailable
        aps.mutableContent = content.mutableContent
        aps.interruptionLevel = content.interruptionLevel
        aps.relevanceScore = content.relevanceScore
        return APNSPayload(aps: aps, custom: content.data.map { [payloadKey: .object($0)] } ?? [:])
    }
}
