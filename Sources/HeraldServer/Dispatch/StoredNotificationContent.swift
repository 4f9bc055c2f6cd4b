package import Foundation
package import HeraldCore
package import HeraldPayload

/// What the outbox keeps once per notification: the rendered APNs request shared by every
/// recipient device, and — for a notification sent by catalog `type` — what is needed to render
/// it per device (locale) and run the policy engine at delivery time.
package struct StoredNotificationContent: Codable, Sendable, Hashable {
    package var pushType: String
    package var priority: Int
    package var collapseID: String?
    package var expiration: Int?
    /// The APNs payload JSON (for a typed notification: as rendered in the default locale).
    package var payload: String
    /// Set when the notification was sent by catalog type.
    package var typed: TypedContent?
    /// FCM-only settings (channel, image); `nil` for most notifications.
    package var android: AndroidContent?

    package init(
        pushType: String, priority: Int, collapseID: String? = nil, expiration: Int? = nil, payload: String,
        typed: TypedContent? = nil, android: AndroidContent? = nil
    ) {
        self.pushType = pushType
        self.priority = priority
        self.collapseID = collapseID
        self.expiration = expiration
        self.payload = payload
        self.typed = typed
        self.android = android
    }

    enum CodingKeys: String, CodingKey {
        case pushType = "push_type"
        case priority
        case collapseID = "collapse_id"
        case expiration
        case payload
        case typed
        case android
    }
}

/// What only FCM uses: `android.notification.channel_id` and `notification.image`.
package struct AndroidContent: Codable, Sendable, Hashable {
    package var channelID: String?
    package var image: String?

    package init(channelID: String?, image: String?) {
        self.channelID = channelID
        self.image = image
    }

    /// `nil` when there is nothing to say, so stored content stays as it was.
    static func make(channelID: String?, image: String?) -> AndroidContent? {
        channelID == nil && image == nil ? nil : AndroidContent(channelID: channelID, image: image)
    }

    enum CodingKeys: String, CodingKey {
        case channelID = "channel_id", image
    }
}

/// A notification sent by catalog type, before it meets a device: the type, the data its
/// placeholders are filled from, explicit alert text (which wins over the catalog's copy) and
/// every other `aps` field already resolved (request field, else the type's).
package struct TypedContent: Codable, Sendable, Hashable {
    package var type: String
    /// Placeholder values: the request's `data`, every value as text.
    package var data: [String: String]
    package var title: String?
    package var subtitle: String?
    package var body: String?
    package var badge: Int?
    package var sound: String?
    package var threadID: String?
    package var category: String?
    package var contentAvailable: Bool
    package var mutableContent: Bool
    package var interruptionLevel: String?
    package var relevanceScore: Double?
    /// The payload-key object: the request's data plus `type` and `deep_link`.
    package var custom: JSONValue?

    enum CodingKeys: String, CodingKey {
        case type, data, title, subtitle, body, badge, sound, category, custom
        case threadID = "thread_id", contentAvailable = "content_available", mutableContent = "mutable_content"
        case interruptionLevel = "interruption_level", relevanceScore = "relevance_score"
    }

    /// The policy engine's starting point for a device: rendered copy (explicit text first).
    package func policyContent(copy: CatalogCopy?) -> PolicyContent {
        PolicyContent(
            title: title ?? copy?.title, body: body ?? copy?.body, threadID: threadID,
            interruptionLevel: interruptionLevel.map(APSInterruptionLevel.init(rawValue:)))
    }

    /// The APNs payload for a device once the policy engine has adjusted the content; a group
    /// summary goes under the payload key as `group_summary`.
    package func apnsPayload(_ content: PolicyContent, subtitle: String?, payloadKey: String) throws -> Data {
        var aps = APS()
        if content.title != nil || content.body != nil || subtitle != nil {
            aps.alert = APSAlert(title: content.title, subtitle: subtitle, body: content.body)
        }
        aps.badge = badge
        aps.sound = sound.map(APSSound.named)
        aps.threadID = content.threadID
        aps.category = category
        aps.contentAvailable = contentAvailable
        aps.mutableContent = mutableContent
        aps.interruptionLevel = content.interruptionLevel
        aps.relevanceScore = relevanceScore
        var object = custom?.objectValue ?? [:]
        if let summary = content.summary { object["group_summary"] = .string(summary) }
        return try APNSPayload(aps: aps, custom: object.isEmpty ? [:] : [payloadKey: .object(object)]).jsonData()
    }
}
