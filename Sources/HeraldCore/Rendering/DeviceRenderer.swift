package import Foundation
import HeraldPayload

/// A notification rendered for one device: the APNs request or the FCM message, stamped.
package enum DeviceMessage: Sendable, Hashable {
    case apns(APNSNotification)
    case fcm(FCMMessage)
}

/// The app settings a device's message depends on.
package struct RenderingApp: Sendable, Hashable {
    /// The key the app's data goes under in an APNs payload.
    package var payloadKey: String
    /// The app's bundle id (the APNs topic without the push type's suffix).
    package var topic: String

    package init(payloadKey: String, topic: String) {
        self.payloadKey = payloadKey
        self.topic = topic
    }
}

/// Renders a stored notification for one device: the one place a delivery's APNs request or
/// FCM message is made, for the send step, test sends and the dashboard's preview alike.
///
/// What every device of a notification shares is rendered once per variant (a notification as
/// stored is variant 0; the planner numbers each distinct locale and decision of a typed one)
/// and kept: a device then costs its stamp and its token. Variants are numbered per renderer,
/// so one renderer serves one batch.
package struct DeviceRenderer {
    /// A notification's content as one group of its devices gets it.
    package struct Variant: Hashable, Sendable {
        package var notificationID: UUID
        package var index: Int

        package init(notificationID: UUID, index: Int = 0) {
            self.notificationID = notificationID
            self.index = index
        }
    }

    /// One delivery's address: who gets it, through which provider, stamped with which ids.
    package struct Target: Sendable {
        package var notificationID: UUID
        package var deliveryID: Int64
        /// `apns` or `fcm`.
        package var platform: String
        package var token: String

        package init(notificationID: UUID, deliveryID: Int64, platform: String, token: String) {
            self.notificationID = notificationID
            self.deliveryID = deliveryID
            self.platform = platform
            self.token = token
        }

        package init(_ delivery: ClaimedDelivery) {
            self.init(
                notificationID: delivery.notificationID, deliveryID: delivery.id, platform: delivery.platform,
                token: delivery.token)
        }
    }

    /// `ttl` of FCM messages counts from here.
    package let now: Date
    private var apnsTemplates: [Variant: APNSPayloadTemplate]
    private var fcmTemplates: [Variant: FCMMessage] = [:]
    /// The last notification's id as text: the devices of one notification share one string
    /// (collapse id, stamp) instead of one allocation each.
    private var lastIDText: (id: UUID, text: String)?

    /// `rendered`: APNs payloads already made of notifications as stored (variant 0).
    package init(now: Date, rendered: [UUID: APNSPayloadTemplate] = [:]) {
        self.now = now
        apnsTemplates = Dictionary(
            uniqueKeysWithValues: rendered.map { (Variant(notificationID: $0.key), $0.value) })
    }

    /// `content` (the variant's) for one device, stamped with its ids and `actionTokens`.
    /// `template`: the variant's APNs payload when the caller made it already (the planner
    /// measures it).
    package mutating func render(
        _ content: NotificationContent, variant: Variant, template: APNSPayloadTemplate? = nil, to target: Target,
        app: RenderingApp, actionTokens: [String: String]? = nil
    ) throws(RenderingError) -> DeviceMessage {
        if target.platform == "fcm" {
            return .fcm(fcm(content, variant: variant, to: target, actionTokens: actionTokens))
        }
        return .apns(
            try apns(content, variant: variant, template: template, to: target, app: app, actionTokens: actionTokens))
    }

    /// `render` for an FCM registration token.
    package mutating func fcm(
        _ content: NotificationContent, variant: Variant, to target: Target, actionTokens: [String: String]? = nil
    ) -> FCMMessage {
        var message =
            fcmTemplates[variant]
            ?? {
                var content = content
                content.collapseID = collapseID(content, target, actionTokens)
                var message = FCMRenderer.message(content, now: now)
                // An alert without a collapse id of its own is tagged with its notification's id:
                // a resend replaces it on the device. Not `collapse_key`: FCM keeps at most four
                // distinct keys per offline device, so a unique key per notification would drop
                // notifications a device should have got.
                if content.collapseID == nil, message.hasNotification {
                    message.tag = text(of: target.notificationID)
                }
                fcmTemplates[variant] = message
                return message
            }()
        message.token = target.token
        FCMRenderer.stamp(
            &message,
            HeraldStamp(
                notificationID: text(of: target.notificationID), deliveryID: target.deliveryID,
                actionTokens: actionTokens))
        return message
    }

    /// The web push message for a subscription (the device's token), stamped; its collapse
    /// identity is the content's, else the notification's id, so a resend replaces the first.
    package mutating func webpush(
        _ content: NotificationContent, variant: Variant, to target: Target, app: RenderingApp,
        actionTokens: [String: String]? = nil
    ) -> WebPushMessage {
        let id = text(of: target.notificationID)
        return WebPushRenderer.message(
            content, token: target.token, now: now, payloadKey: app.payloadKey,
            stamp: HeraldStamp(notificationID: id, deliveryID: target.deliveryID, actionTokens: actionTokens),
            collapseID: collapseID(content, target, actionTokens) ?? id)
    }

    /// `render` for an APNs device token.
    package mutating func apns(
        _ content: NotificationContent, variant: Variant, template: APNSPayloadTemplate? = nil, to target: Target,
        app: RenderingApp, actionTokens: [String: String]? = nil
    ) throws(RenderingError) -> APNSNotification {
        let shared: APNSPayloadTemplate
        if let template {
            shared = template
        } else if let kept = apnsTemplates[variant] {
            shared = kept
        } else {
            shared = try APNSRenderer.template(
                content, payloadKey: app.payloadKey, notificationID: target.notificationID)
            apnsTemplates[variant] = shared
        }
        return APNSNotification(
            deviceToken: target.token, pushType: content.pushType, bundleID: app.topic, priority: content.priority,
            expiration: content.expiration, collapseID: apnsCollapseID(content, target, actionTokens),
            apnsID: .apnsID(notification: target.notificationID, delivery: target.deliveryID),
            payload: shared.payload(deliveryID: target.deliveryID, actionTokens: actionTokens))
    }

    /// The collapse id a delivery carries: the content's own, else the notification's id (unique,
    /// so it collapses nothing else) for a card with actions — its replacement when it is resolved
    /// on another device must collapse onto it.
    private mutating func collapseID(
        _ content: NotificationContent, _ target: Target, _ actionTokens: [String: String]?
    ) -> String? {
        if content.collapseID == nil, actionTokens != nil { return text(of: target.notificationID) }
        return content.collapseID
    }

    /// The APNs collapse id: as `collapseID`, and the notification's id for every alert without
    /// one, so that a resend after an unknown outcome (an answer lost in a crash) replaces the
    /// first on the device instead of showing twice. Background pushes are never shown: none.
    private mutating func apnsCollapseID(
        _ content: NotificationContent, _ target: Target, _ actionTokens: [String: String]?
    ) -> String? {
        if let id = collapseID(content, target, actionTokens) { return id }
        return content.pushType == .alert ? text(of: target.notificationID) : nil
    }

    /// `id` as lowercase text, made once for consecutive devices of one notification.
    private mutating func text(of id: UUID) -> String {
        if let last = lastIDText, last.id == id { return last.text }
        let text = id.uuidString.lowercased()
        lastIDText = (id, text)
        return text
    }
}
