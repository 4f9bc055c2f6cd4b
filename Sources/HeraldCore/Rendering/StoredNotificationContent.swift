package import Foundation
import HeraldPayload

/// What the outbox keeps once per notification: the neutral content every recipient device
/// shares and — for a notification sent by catalog `type` — what is needed to render it per
/// device (locale) and run the policy engine at delivery time.
package struct StoredNotificationContent: Sendable, Hashable {
    /// For a typed notification: as rendered in the catalog's default locale.
    package var content: NotificationContent
    /// Set when the notification was sent by catalog type.
    package var typed: TypedContent?
    /// When it was scheduled to go (`deliver_at`), if later than its acceptance: its deliveries'
    /// age (`outbox.max_age`) counts from then, not from when it was stored.
    package var deliverAt: Date?
    /// The trace context of the span that accepted it (W3C `traceparent` and `tracestate`, as
    /// the tracer propagates them), when that span was sampled: its deliveries' spans join the
    /// same trace.
    package var traceContext: [String: String]?

    package init(content: NotificationContent, typed: TypedContent? = nil, deliverAt: Date? = nil) {
        self.content = content
        self.typed = typed
        self.deliverAt = deliverAt
    }

    /// The content for one device of a typed notification: the copy in the device's locale
    /// (explicit text first) as the policy engine adjusted it (`decided`), with a group summary
    /// under `group_summary` in the data.
    package func deviceContent(copy: CatalogCopy?, decided: PolicyContent) -> NotificationContent {
        var device = content
        device.title = decided.title
        device.body = decided.body
        device.subtitle = typed?.subtitle ?? copy?.subtitle
        device.threadID = decided.threadID
        device.interruptionLevel = decided.interruptionLevel
        device.collapseID = decided.collapseID
        if let summary = decided.summary {
            device.data = (device.data ?? [:]).merging(["group_summary": .string(summary)]) { $1 }
        }
        return device
    }

    /// A typed notification's copy for a device locale, placeholders filled from its data; none
    /// for a background push without explicit text (a silent sync has nothing to show).
    package func copy(of type: CatalogType, locale: String?, defaultLocale: String) -> CatalogCopy? {
        guard let typed, !(content.pushType == .background && typed.title == nil && typed.body == nil) else {
            return nil
        }
        return type.render(locale: locale, defaultLocale: defaultLocale, data: typed.data)
    }

    /// The policy engine's starting point for a device: the copy in its locale, explicit text first.
    package func policyContent(copy: CatalogCopy?) -> PolicyContent {
        PolicyContent(
            title: typed?.title ?? copy?.title, body: typed?.body ?? copy?.body, threadID: content.threadID,
            collapseID: content.collapseID, interruptionLevel: content.interruptionLevel)
    }
}

extension StoredNotificationContent: Codable {
    enum CodingKeys: String, CodingKey {
        case content, typed
        case deliverAt = "deliver_at_ms"
        case traceContext = "trace_context"
        // Written before the neutral content: the rendered APNs request.
        case pushType = "push_type"
        case priority
        case collapseID = "collapse_id"
        case expiration, payload, android
    }

    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        typed = try container.decodeIfPresent(TypedContent.self, forKey: .typed)
        deliverAt = try container.decodeIfPresent(Int64.self, forKey: .deliverAt).map {
            Date(timeIntervalSince1970: Double($0) / 1000)
        }
        traceContext = try container.decodeIfPresent([String: String].self, forKey: .traceContext)
        if let content = try container.decodeIfPresent(NotificationContent.self, forKey: .content) {
            self.content = content
            return
        }
        // A row queued by an earlier version: its neutral content is read back from the APNs
        // payload it stored, once, so it is delivered after the upgrade as before.
        struct Android: Decodable {
            // swift-format-ignore: AlwaysUseLowerCamelCase
            var channel_id: String?
            var image: String?
        }
        let payload = try container.decode(String.self, forKey: .payload)
        let object = (try? JSONDecoder().decode(JSONValue.self, from: Data(payload.utf8)))?.objectValue ?? [:]
        let aps = object["aps"]?.objectValue ?? [:]
        let alert = aps["alert"]
        let android = try container.decodeIfPresent(Android.self, forKey: .android)
        let sound = aps["sound"]?.stringValue
        let data = object.first { $0.key != "aps" }?.value.objectValue
        func int(_ key: String) -> Int? { if case .int(let value) = aps[key] { value } else { nil } }
        func double(_ key: String) -> Double? {
            switch aps[key] {
            case .double(let value): value
            case .int(let value): Double(value)
            default: nil
            }
        }
        content = NotificationContent(
            pushType: APNSPushType(rawValue: try container.decode(String.self, forKey: .pushType)),
            priority: APNSPriority(rawValue: try container.decode(Int.self, forKey: .priority)),
            title: alert?.objectValue?["title"]?.stringValue, subtitle: alert?.objectValue?["subtitle"]?.stringValue,
            body: alert?.stringValue ?? alert?.objectValue?["body"]?.stringValue, badge: int("badge"), sound: sound,
            threadID: aps["thread-id"]?.stringValue, category: aps["category"]?.stringValue,
            contentAvailable: int("content-available") == 1, mutableContent: int("mutable-content") == 1,
            interruptionLevel: aps["interruption-level"]?.stringValue.map(APSInterruptionLevel.init(rawValue:)),
            relevanceScore: double("relevance-score"),
            collapseID: try container.decodeIfPresent(String.self, forKey: .collapseID),
            expiration: try container.decodeIfPresent(Int.self, forKey: .expiration), data: data,
            androidChannelID: android?.channel_id, image: android?.image, analyticsLabel: typed?.type)
    }

    package func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(content, forKey: .content)
        try container.encodeIfPresent(typed, forKey: .typed)
        try container.encodeIfPresent(
            deliverAt.map { Int64(($0.timeIntervalSince1970 * 1000).rounded()) }, forKey: .deliverAt)
        try container.encodeIfPresent(traceContext, forKey: .traceContext)
    }
}

/// A notification sent by catalog type, before it meets a device: the type, the data its
/// placeholders are filled from and explicit alert text (which wins over the catalog's copy).
/// Every other field is resolved once (request field, else the type's) into the stored content.
package struct TypedContent: Codable, Sendable, Hashable {
    package var type: String
    /// Placeholder values: the request's `data`, every value as text.
    package var data: [String: String]
    package var title: String?
    package var subtitle: String?
    package var body: String?
    /// A test send (`POST …/test`): quiet hours and pacing do not hold it, preferences do; it
    /// is left out of the type's analytics and of the user's pacing count.
    package var test: Bool?

    package init(
        type: String, data: [String: String], title: String? = nil, subtitle: String? = nil, body: String? = nil,
        test: Bool? = nil
    ) {
        self.type = type
        self.data = data
        self.title = title
        self.subtitle = subtitle
        self.body = body
        self.test = test
    }
}
