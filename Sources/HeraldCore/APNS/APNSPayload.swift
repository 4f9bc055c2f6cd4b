package import Foundation
package import HeraldPayload

/// A complete APNs payload: the `aps` dictionary plus custom top-level keys (protocols.md §4).
///
/// Custom keys sit beside `aps`; a custom key named `aps` is ignored. Encoding sorts keys so
/// that the same payload always has the same bytes.
package struct APNSPayload: Sendable, Hashable, Encodable {
    package var aps: APS
    /// Custom top-level keys, siblings of `aps` (the app's payload key lives here).
    package var custom: [String: JSONValue]

    package init(aps: APS = APS(), custom: [String: JSONValue] = [:]) {
        self.aps = aps
        self.custom = custom
    }

    package func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: DynamicKey.self)
        try container.encode(aps, forKey: DynamicKey("aps"))
        for (key, value) in custom where key != "aps" {
            try container.encode(value, forKey: DynamicKey(key))
        }
    }

    /// The payload as compact JSON with sorted keys and unescaped slashes.
    package func jsonData() throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(self)
    }
}

/// The `aps` dictionary. Every key Apple documents is here; `nil` keys are left out.
package struct APS: Sendable, Hashable, Encodable {
    package var alert: APSAlert?
    package var badge: Int?
    package var sound: APSSound?
    package var threadID: String?
    package var category: String?
    package var contentAvailable: Bool
    package var mutableContent: Bool
    package var targetContentID: String?
    package var interruptionLevel: APSInterruptionLevel?
    package var relevanceScore: Double?
    package var filterCriteria: String?
    // Live Activity keys.
    package var staleDate: Int?
    package var contentState: JSONValue?
    package var timestamp: Int?
    package var event: String?
    package var dismissalDate: Int?
    package var attributesType: String?
    package var attributes: JSONValue?
    package var inputPushToken: Bool
    package var inputPushChannel: String?

    package init(
        alert: APSAlert? = nil,
        badge: Int? = nil,
        sound: APSSound? = nil,
        threadID: String? = nil,
        category: String? = nil,
        contentAvailable: Bool = false,
        mutableContent: Bool = false,
        targetContentID: String? = nil,
        interruptionLevel: APSInterruptionLevel? = nil,
        relevanceScore: Double? = nil,
        filterCriteria: String? = nil,
        staleDate: Int? = nil,
        contentState: JSONValue? = nil,
        timestamp: Int? = nil,
        event: String? = nil,
        dismissalDate: Int? = nil,
        attributesType: String? = nil,
        attributes: JSONValue? = nil,
        inputPushToken: Bool = false,
        inputPushChannel: String? = nil
    ) {
        self.alert = alert
        self.badge = badge
        self.sound = sound
        self.threadID = threadID
        self.category = category
        self.contentAvailable = contentAvailable
        self.mutableContent = mutableContent
        self.targetContentID = targetContentID
        self.interruptionLevel = interruptionLevel
        self.relevanceScore = relevanceScore
        self.filterCriteria = filterCriteria
        self.staleDate = staleDate
        self.contentState = contentState
        self.timestamp = timestamp
        self.event = event
        self.dismissalDate = dismissalDate
        self.attributesType = attributesType
        self.attributes = attributes
        self.inputPushToken = inputPushToken
        self.inputPushChannel = inputPushChannel
    }

    enum CodingKeys: String, CodingKey {
        case alert, badge, sound, category, timestamp, event, attributes
        case threadID = "thread-id"
        case contentAvailable = "content-available"
        case mutableContent = "mutable-content"
        case targetContentID = "target-content-id"
        case interruptionLevel = "interruption-level"
        case relevanceScore = "relevance-score"
        case filterCriteria = "filter-criteria"
        case staleDate = "stale-date"
        case contentState = "content-state"
        case dismissalDate = "dismissal-date"
        case attributesType = "attributes-type"
        case inputPushToken = "input-push-token"
        case inputPushChannel = "input-push-channel"
    }

    package func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encodeIfPresent(alert, forKey: .alert)
        try container.encodeIfPresent(badge, forKey: .badge)
        try container.encodeIfPresent(sound, forKey: .sound)
        try container.encodeIfPresent(threadID, forKey: .threadID)
        try container.encodeIfPresent(category, forKey: .category)
        if contentAvailable { try container.encode(1, forKey: .contentAvailable) }
        if mutableContent { try container.encode(1, forKey: .mutableContent) }
        try container.encodeIfPresent(targetContentID, forKey: .targetContentID)
        try container.encodeIfPresent(interruptionLevel?.rawValue, forKey: .interruptionLevel)
        try container.encodeIfPresent(relevanceScore, forKey: .relevanceScore)
        try container.encodeIfPresent(filterCriteria, forKey: .filterCriteria)
        try container.encodeIfPresent(staleDate, forKey: .staleDate)
        try container.encodeIfPresent(contentState, forKey: .contentState)
        try container.encodeIfPresent(timestamp, forKey: .timestamp)
        try container.encodeIfPresent(event, forKey: .event)
        try container.encodeIfPresent(dismissalDate, forKey: .dismissalDate)
        try container.encodeIfPresent(attributesType, forKey: .attributesType)
        try container.encodeIfPresent(attributes, forKey: .attributes)
        if inputPushToken { try container.encode(1, forKey: .inputPushToken) }
        try container.encodeIfPresent(inputPushChannel, forKey: .inputPushChannel)
    }
}

/// `aps.alert`: a dictionary with text or localization keys, or a plain body string.
package struct APSAlert: Sendable, Hashable, Encodable {
    package var title: String?
    package var subtitle: String?
    package var body: String?
    package var launchImage: String?
    package var titleLocKey: String?
    package var titleLocArgs: [String]?
    package var subtitleLocKey: String?
    package var subtitleLocArgs: [String]?
    package var locKey: String?
    package var locArgs: [String]?
    /// When set, the alert is encoded as this plain string (body only).
    package var plainBody: String?

    package init(
        title: String? = nil,
        subtitle: String? = nil,
        body: String? = nil,
        launchImage: String? = nil,
        titleLocKey: String? = nil,
        titleLocArgs: [String]? = nil,
        subtitleLocKey: String? = nil,
        subtitleLocArgs: [String]? = nil,
        locKey: String? = nil,
        locArgs: [String]? = nil
    ) {
        self.title = title
        self.subtitle = subtitle
        self.body = body
        self.launchImage = launchImage
        self.titleLocKey = titleLocKey
        self.titleLocArgs = titleLocArgs
        self.subtitleLocKey = subtitleLocKey
        self.subtitleLocArgs = subtitleLocArgs
        self.locKey = locKey
        self.locArgs = locArgs
    }

    /// An alert sent as a plain string: the body only.
    package static func plain(_ body: String) -> APSAlert {
        var alert = APSAlert()
        alert.plainBody = body
        return alert
    }

    enum CodingKeys: String, CodingKey {
        case title, subtitle, body
        case launchImage = "launch-image"
        case titleLocKey = "title-loc-key"
        case titleLocArgs = "title-loc-args"
        case subtitleLocKey = "subtitle-loc-key"
        case subtitleLocArgs = "subtitle-loc-args"
        case locKey = "loc-key"
        case locArgs = "loc-args"
    }

    package func encode(to encoder: any Encoder) throws {
        if let plainBody {
            var container = encoder.singleValueContainer()
            try container.encode(plainBody)
            return
        }
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encodeIfPresent(title, forKey: .title)
        try container.encodeIfPresent(subtitle, forKey: .subtitle)
        try container.encodeIfPresent(body, forKey: .body)
        try container.encodeIfPresent(launchImage, forKey: .launchImage)
        try container.encodeIfPresent(titleLocKey, forKey: .titleLocKey)
        try container.encodeIfPresent(titleLocArgs, forKey: .titleLocArgs)
        try container.encodeIfPresent(subtitleLocKey, forKey: .subtitleLocKey)
        try container.encodeIfPresent(subtitleLocArgs, forKey: .subtitleLocArgs)
        try container.encodeIfPresent(locKey, forKey: .locKey)
        try container.encodeIfPresent(locArgs, forKey: .locArgs)
    }
}

/// `aps.sound`: a sound file name (`"default"` for the system sound) or a critical alert sound.
package enum APSSound: Sendable, Hashable, Encodable {
    case named(String)
    /// A critical alert sound: `{"critical":1,"name":…,"volume":0.0–1.0}`.
    case critical(name: String, volume: Double)

    package static let `default` = APSSound.named("default")

    enum CodingKeys: String, CodingKey { case critical, name, volume }

    package func encode(to encoder: any Encoder) throws {
        switch self {
        case .named(let name):
            var container = encoder.singleValueContainer()
            try container.encode(name)
        case .critical(let name, let volume):
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(1, forKey: .critical)
            try container.encode(name, forKey: .name)
            try container.encode(min(max(volume, 0), 1), forKey: .volume)
        }
    }
}

/// `aps.interruption-level`: `passive`, `active`, `time-sensitive` or `critical`.
package struct APSInterruptionLevel: Sendable, Hashable, RawRepresentable {
    package var rawValue: String
    package init(rawValue: String) { self.rawValue = rawValue }

    package static let passive = APSInterruptionLevel(rawValue: "passive")
    package static let active = APSInterruptionLevel(rawValue: "active")
    package static let timeSensitive = APSInterruptionLevel(rawValue: "time-sensitive")
    package static let critical = APSInterruptionLevel(rawValue: "critical")

    package static let known: [APSInterruptionLevel] = [.passive, .active, .timeSensitive, .critical]
}

struct DynamicKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(_ string: String) { self.stringValue = string }
    init(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}
