import Foundation
package import HeraldPayload

/// A notification as the API, the catalog and `herald send` describe it, before any provider's
/// wire format: what the person sees, how it groups, what data the app gets. `APNSRenderer` and
/// `FCMRenderer` turn it into each provider's message; neither is derived from the other.
///
/// Push type and priority use APNs' vocabulary because it is the richer one; FCM reads them as
/// "is this visible" and "is this urgent".
package struct NotificationContent: Sendable, Hashable {
    package var pushType: APNSPushType
    package var priority: APNSPriority
    package var title: String?
    package var subtitle: String?
    package var body: String?
    package var badge: Int?
    /// A sound name (`"default"` for the system sound).
    package var sound: String?
    /// Groups notifications on the device (APNs `thread-id`, FCM data `thread_id`).
    package var threadID: String?
    /// The actions category (APNs `category`, FCM data `category`).
    package var category: String?
    package var contentAvailable: Bool
    package var mutableContent: Bool
    package var interruptionLevel: APSInterruptionLevel?
    package var relevanceScore: Double?
    /// Replaces an earlier notification with the same id (APNs `apns-collapse-id`, FCM
    /// `collapse_key` and `tag`); at most 64 bytes.
    package var collapseID: String?
    /// UNIX seconds after which the notification is worthless (APNs `apns-expiration`, FCM `ttl`).
    package var expiration: Int?
    /// The app's data: under the app's payload key on APNs, FCM's `data` (values sent as
    /// strings). A `deep_link` string in it is also FCM's `click_action`.
    package var data: [String: JSONValue]?
    /// FCM only: `android.notification.channel_id`.
    package var androidChannelID: String?
    /// FCM only: `notification.image`.
    package var image: String?
    /// FCM only: `fcm_options.analytics_label` (the catalog type).
    package var analyticsLabel: String?

    package init(
        pushType: APNSPushType = .alert, priority: APNSPriority? = nil, title: String? = nil, subtitle: String? = nil,
        body: String? = nil, badge: Int? = nil, sound: String? = nil, threadID: String? = nil, category: String? = nil,
        contentAvailable: Bool = false, mutableContent: Bool = false, interruptionLevel: APSInterruptionLevel? = nil,
        relevanceScore: Double? = nil, collapseID: String? = nil, expiration: Int? = nil,
        data: [String: JSONValue]? = nil,
        androidChannelID: String? = nil, image: String? = nil, analyticsLabel: String? = nil
    ) {
        self.pushType = pushType
        self.priority = priority ?? Self.defaultPriority(for: pushType)
        self.title = title
        self.subtitle = subtitle
        self.body = body
        self.badge = badge
        self.sound = sound
        self.threadID = threadID
        self.category = category
        self.contentAvailable = contentAvailable
        self.mutableContent = mutableContent
        self.interruptionLevel = interruptionLevel
        self.relevanceScore = relevanceScore
        self.collapseID = collapseID
        self.expiration = expiration
        self.data = data
        self.androidChannelID = androidChannelID
        self.image = image
        self.analyticsLabel = analyticsLabel
    }

    /// Whether there is alert text to show.
    package var hasAlert: Bool { title != nil || subtitle != nil || body != nil }

    /// The push type when none is given: background for a silent push (content-available with
    /// nothing to show), alert otherwise.
    package static func defaultPushType(contentAvailable: Bool, visible: Bool) -> APNSPushType {
        contentAvailable && !visible ? .background : .alert
    }

    /// The priority when none is given: 5 for background pushes (APNs refuses 10), 10 otherwise.
    package static func defaultPriority(for pushType: APNSPushType) -> APNSPriority {
        pushType == .background ? .considerPower : .immediate
    }
}

extension NotificationContent: Codable {
    enum CodingKeys: String, CodingKey {
        case pushType = "push_type"
        case priority, title, subtitle, body, badge, sound, category, expiration, data, image
        case threadID = "thread_id"
        case contentAvailable = "content_available"
        case mutableContent = "mutable_content"
        case interruptionLevel = "interruption_level"
        case relevanceScore = "relevance_score"
        case collapseID = "collapse_id"
        case androidChannelID = "android_channel_id"
        case analyticsLabel = "analytics_label"
    }

    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let pushType = APNSPushType(rawValue: try container.decode(String.self, forKey: .pushType))
        self.init(
            pushType: pushType,
            priority: try container.decodeIfPresent(Int.self, forKey: .priority).map(APNSPriority.init(rawValue:)),
            title: try container.decodeIfPresent(String.self, forKey: .title),
            subtitle: try container.decodeIfPresent(String.self, forKey: .subtitle),
            body: try container.decodeIfPresent(String.self, forKey: .body),
            badge: try container.decodeIfPresent(Int.self, forKey: .badge),
            sound: try container.decodeIfPresent(String.self, forKey: .sound),
            threadID: try container.decodeIfPresent(String.self, forKey: .threadID),
            category: try container.decodeIfPresent(String.self, forKey: .category),
            contentAvailable: try container.decodeIfPresent(Bool.self, forKey: .contentAvailable) ?? false,
            mutableContent: try container.decodeIfPresent(Bool.self, forKey: .mutableContent) ?? false,
            interruptionLevel: try container.decodeIfPresent(String.self, forKey: .interruptionLevel).map(
                APSInterruptionLevel.init(rawValue:)),
            relevanceScore: try container.decodeIfPresent(Double.self, forKey: .relevanceScore),
            collapseID: try container.decodeIfPresent(String.self, forKey: .collapseID),
            expiration: try container.decodeIfPresent(Int.self, forKey: .expiration),
            data: try container.decodeIfPresent([String: JSONValue].self, forKey: .data),
            androidChannelID: try container.decodeIfPresent(String.self, forKey: .androidChannelID),
            image: try container.decodeIfPresent(String.self, forKey: .image),
            analyticsLabel: try container.decodeIfPresent(String.self, forKey: .analyticsLabel))
    }

    package func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(pushType.rawValue, forKey: .pushType)
        try container.encode(priority.rawValue, forKey: .priority)
        try container.encodeIfPresent(title, forKey: .title)
        try container.encodeIfPresent(subtitle, forKey: .subtitle)
        try container.encodeIfPresent(body, forKey: .body)
        try container.encodeIfPresent(badge, forKey: .badge)
        try container.encodeIfPresent(sound, forKey: .sound)
        try container.encodeIfPresent(threadID, forKey: .threadID)
        try container.encodeIfPresent(category, forKey: .category)
        if contentAvailable { try container.encode(true, forKey: .contentAvailable) }
        if mutableContent { try container.encode(true, forKey: .mutableContent) }
        try container.encodeIfPresent(interruptionLevel?.rawValue, forKey: .interruptionLevel)
        try container.encodeIfPresent(relevanceScore, forKey: .relevanceScore)
        try container.encodeIfPresent(collapseID, forKey: .collapseID)
        try container.encodeIfPresent(expiration, forKey: .expiration)
        try container.encodeIfPresent(data, forKey: .data)
        try container.encodeIfPresent(androidChannelID, forKey: .androidChannelID)
        try container.encodeIfPresent(image, forKey: .image)
        try container.encodeIfPresent(analyticsLabel, forKey: .analyticsLabel)
    }
}
