package import Foundation
package import HeraldPayload

/// A notification as a caller describes it, before anything is checked: what the send API's
/// body says about content (not recipients or keys), and what timers, triggers, jobs, badges,
/// test sends and the dashboard's composer ask for. `NotificationComposer` turns it into what
/// the outbox stores, or a `CompositionError` naming the field.
package struct NotificationDraft: Sendable, Hashable {
    package struct Alert: Sendable, Hashable {
        package var title: String?
        package var subtitle: String?
        package var body: String?

        package init(title: String? = nil, subtitle: String? = nil, body: String? = nil) {
            self.title = title
            self.subtitle = subtitle
            self.body = body
        }
    }

    package var alert: Alert?
    /// Custom data, a JSON object: it goes under the app's payload key (for a typed send it
    /// also fills the type's placeholders).
    package var data: JSONValue?
    package var pushType: String?
    package var priority: Int?
    package var collapseID: String?
    package var threadID: String?
    package var category: String?
    package var badge: Int?
    package var sound: String?
    package var contentAvailable: Bool?
    package var mutableContent: Bool?
    package var interruptionLevel: String?
    package var relevanceScore: Double?
    package var expiration: Int?
    /// RFC 3339; nil or a past time: now.
    package var deliverAt: String?
    /// A catalog type, by name or external id.
    package var type: String?
    /// FCM's `android.notification.channel_id`.
    package var androidChannelID: String?
    /// FCM's `notification.image`, an http(s) URL.
    package var androidImage: String?

    package init(
        alert: Alert? = nil, data: JSONValue? = nil, pushType: String? = nil, priority: Int? = nil,
        collapseID: String? = nil,
        threadID: String? = nil, category: String? = nil, badge: Int? = nil, sound: String? = nil,
        contentAvailable: Bool? = nil,
        mutableContent: Bool? = nil, interruptionLevel: String? = nil, relevanceScore: Double? = nil,
        expiration: Int? = nil,
        deliverAt: String? = nil, type: String? = nil, androidChannelID: String? = nil, androidImage: String? = nil
    ) {
        self.alert = alert
        self.data = data
        self.pushType = pushType
        self.priority = priority
        self.collapseID = collapseID
        self.threadID = threadID
        self.category = category
        self.badge = badge
        self.sound = sound
        self.contentAvailable = contentAvailable
        self.mutableContent = mutableContent
        self.interruptionLevel = interruptionLevel
        self.relevanceScore = relevanceScore
        self.expiration = expiration
        self.deliverAt = deliverAt
        self.type = type
        self.androidChannelID = androidChannelID
        self.androidImage = androidImage
    }

    /// How far ahead `deliverAt` may be: a year (a typo such as 2206 is refused, not kept for ever).
    package static let maximumScheduleAhead: TimeInterval = 366 * 86400
    /// How deeply `data` (and a user's attributes) may nest objects and arrays.
    package static let maximumDataDepth = 16
}

/// Limits on a send's recipients and keys (the draft's own are the composer's).
package enum SendLimits {
    /// User or device ids one send may name.
    package static let maximumRecipientIDs = 10_000
    /// The longest cancel key, in bytes.
    package static let maximumCancelKey = 128
    /// The longest idempotency key, in bytes.
    package static let maximumIdempotencyKey = 256

    /// 1 to `maximumCancelKey` bytes.
    package static func isValidCancelKey(_ key: String) -> Bool {
        !key.isEmpty && key.utf8.count <= maximumCancelKey
    }
}

/// Why a draft cannot become a notification: the field at fault (in the API's snake_case) and
/// a message a person can act on.
package struct CompositionError: Error, Sendable, Hashable, CustomStringConvertible {
    package enum Code: Sendable, Hashable {
        /// A required field is absent.
        case missing
        /// A field's value is refused.
        case invalid
        /// The rendered payload is larger than a provider accepts.
        case payloadTooLarge
    }

    package var code: Code
    package var field: String
    package var message: String

    package init(_ code: Code, field: String, message: String) {
        self.code = code
        self.field = field
        self.message = message
    }

    package static func invalid(_ field: String, _ message: String) -> CompositionError {
        CompositionError(.invalid, field: field, message: message)
    }

    package init(rendering error: RenderingError) {
        self.init(
            error.code == .payloadTooLarge ? .payloadTooLarge : .invalid, field: error.field, message: error.message)
    }

    package var description: String { "\(field): \(message)" }
}

/// What the outbox stores for a composed notification.
package struct ComposedNotification: Sendable {
    package var content: StoredNotificationContent
    /// When its deliveries fall due: now, or `deliverAt`.
    package var dueAt: Date
    /// A plain notification's APNs payload, rendered once to check its size (with room for each
    /// delivery's stamp) and kept to send as it is; nil for a typed one (rendered per device).
    package var apnsPayload: APNSPayloadTemplate?
    /// Claimed before bulk sends.
    package var urgent: Bool
}
