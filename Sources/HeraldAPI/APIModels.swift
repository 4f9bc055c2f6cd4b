import Foundation
import HeraldCore
import HeraldEngine
import HeraldPayload
import HeraldStore
import HeraldWebPush

/// `POST /v1/apps/{app}/devices` body and the device JSON the API returns.
package struct DeviceBody: Codable, Sendable, Equatable {
    package var deviceID: String?
    package var userID: String?
    package var platform: String?
    package var token: String?
    package var environment: String?
    package var name: String?
    package var model: String?
    package var locale: String?
    package var timeZone: String?
    package var appVersion: String?
    package var authorizationStatus: String?
    /// A web push subscription's endpoint and keys (`platform: webpush`), as the browser's
    /// `PushSubscription.toJSON()` gives them, instead of `token`.
    package var endpoint: String?
    package var keys: SubscriptionKeys?
    /// The VAPID public key the browser subscribed with (`options.applicationServerKey`,
    /// base64url): messages are signed with it, so a key rotated out keeps working.
    package var applicationServerKey: String?

    package struct SubscriptionKeys: Codable, Sendable, Equatable {
        package var p256dh: String?
        package var auth: String?
    }

    enum CodingKeys: String, CodingKey {
        case deviceID = "device_id"
        case userID = "user_id"
        case platform, token, environment, name, model, locale, endpoint, keys
        case timeZone = "time_zone"
        case appVersion = "app_version"
        case authorizationStatus = "authorization_status"
        case applicationServerKey = "application_server_key"
    }

    package static let platforms: Set<String> = ["apns", "fcm", "webpush"]
    static let authorizationStatuses: Set<String> = [
        "not_determined", "denied", "authorized", "provisional", "ephemeral",
    ]

    /// Checks every field; the first problem names its field. `prefix` (built only for an error) is for import lines.
    /// `serverKeys`: the app's VAPID public keys; a subscription naming another is refused.
    func validated(
        prefix: @autoclosure () -> String = "", endpoints: WebPushEndpointPolicy = WebPushEndpointPolicy(),
        serverKeys: [String] = []
    ) throws(APIError) -> DeviceRecord {
        func named(_ field: String) -> String { prefix() + field }
        func text(_ value: String?, _ field: String, limit: Int = 256) throws(APIError) -> String? {
            guard let value else { return nil }
            guard value.utf8.count <= limit else {
                throw APIError.invalid(named(field), "\(field) is longer than \(limit) bytes")
            }
            return value
        }
        guard let deviceID = try text(deviceID, "device_id"), !deviceID.isEmpty else {
            throw APIError.missing(named("device_id"))
        }
        guard let userID = try text(userID, "user_id"), !userID.isEmpty else {
            throw APIError.missing(named("user_id"))
        }
        let platform = platform ?? "apns"
        guard Self.platforms.contains(platform) else {
            throw APIError.invalid(named("platform"), "platform is apns, fcm or webpush")
        }
        var given = token
        if platform == "webpush" {
            if token != nil {
                throw APIError.invalid(
                    named("token"), "a webpush device gives endpoint and keys {p256dh, auth} instead of token")
            }
            let subscription: WebPushSubscription
            do {
                subscription = try WebPushSubscription.parse(
                    endpoint: endpoint, p256dh: keys?.p256dh, auth: keys?.auth,
                    applicationServerKey: applicationServerKey)
            } catch {
                throw APIError.invalid(named(error.field), error.message)
            }
            if let problem = endpoints.problem(subscription.endpoint) {
                throw APIError.invalid(named("endpoint"), problem)
            }
            if let key = subscription.applicationServerKey, !serverKeys.isEmpty,
                !serverKeys.contains(Base64URL.encode(key))
            {
                throw APIError.invalid(
                    named("application_server_key"),
                    "application_server_key is not one of this app's VAPID keys (GET /v1/apps/{app}/webpush/key)")
            }
            given = subscription.token
        } else if endpoint != nil || keys != nil || applicationServerKey != nil {
            throw APIError.invalid(
                named(endpoint != nil ? "endpoint" : "keys"), "endpoint and keys go with platform webpush")
        }
        guard var token = try text(given, "token", limit: 4096), !token.isEmpty else {
            throw APIError.missing(named("token"))
        }
        if platform == "apns" {
            if token.utf8.contains(where: { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") }) {
                token = token.lowercased()
            }
            do {
                try APNSNotification.validateDeviceToken(token)
            } catch {
                throw APIError.invalid(named("token"), "an APNs token is the hex of the token bytes")
            }
        }
        // Missing: the store keeps the device's environment, or gives a new one the app's.
        let environment = environment ?? ""
        guard environment.isEmpty || environment == "production" || environment == "sandbox" else {
            throw APIError.invalid(named("environment"), "environment is production or sandbox")
        }
        if let authorizationStatus, !Self.authorizationStatuses.contains(authorizationStatus) {
            throw APIError.invalid(
                named("authorization_status"),
                "authorization_status is one of \(Self.authorizationStatuses.sorted().joined(separator: ", "))")
        }
        if let timeZone, TimeZone(identifier: timeZone) == nil {
            throw APIError.invalid(named("time_zone"), "time_zone is an IANA zone such as Europe/Paris")
        }
        return DeviceRecord(
            deviceID: deviceID, userID: userID, platform: platform, token: token, environment: environment,
            name: try text(name, "name"), model: try text(model, "model"),
            locale: try text(locale, "locale", limit: 35),
            timeZone: timeZone, appVersion: try text(appVersion, "app_version", limit: 64),
            authorizationStatus: authorizationStatus)
    }
}

/// A device as the API shows it.
struct DeviceView: Encodable {
    var device: DeviceRecord

    enum CodingKeys: String, CodingKey {
        case deviceID = "device_id"
        case userID = "user_id"
        case platform, token, environment, name, model, locale
        case timeZone = "time_zone"
        case appVersion = "app_version"
        case authorizationStatus = "authorization_status"
        case active
        case inactiveReason = "inactive_reason"
        case inactiveSince = "inactive_since"
        case createdAt = "created_at"
        case updatedAt = "updated_at"
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(device.deviceID, forKey: .deviceID)
        try container.encode(device.userID, forKey: .userID)
        try container.encode(device.platform, forKey: .platform)
        // A web push token holds the subscription's secret: only the endpoint's start is shown.
        try container.encode(
            device.platform == "webpush"
                ? WebPushSubscription(token: device.token)?.display ?? "" : device.token, forKey: .token)
        try container.encode(device.environment, forKey: .environment)
        try container.encodeIfPresent(device.name, forKey: .name)
        try container.encodeIfPresent(device.model, forKey: .model)
        try container.encodeIfPresent(device.locale, forKey: .locale)
        try container.encodeIfPresent(device.timeZone, forKey: .timeZone)
        try container.encodeIfPresent(device.appVersion, forKey: .appVersion)
        try container.encodeIfPresent(device.authorizationStatus, forKey: .authorizationStatus)
        try container.encode(device.active, forKey: .active)
        try container.encodeIfPresent(device.inactiveReason, forKey: .inactiveReason)
        try container.encodeIfPresent(device.inactiveSince, forKey: .inactiveSince)
        try container.encode(device.createdAt, forKey: .createdAt)
        try container.encode(device.updatedAt, forKey: .updatedAt)
    }
}

/// `POST /v1/apps/{app}/notifications` body.
struct NotificationBody: Decodable, Sendable {
    struct Target: Decodable, Sendable {
        var userIDs: [String]?
        var deviceIDs: [String]?
        package var all: Bool?
        enum CodingKeys: String, CodingKey {
            case userIDs = "user_ids"
            case deviceIDs = "device_ids"
            case all
        }
    }

    struct Alert: Decodable, Sendable {
        var title: String?
        var subtitle: String?
        var body: String?
    }

    /// FCM-only settings: the Android notification channel and an image URL.
    struct Android: Decodable, Sendable {
        var channelID: String?
        var image: String?
        enum CodingKeys: String, CodingKey {
            case channelID = "channel_id"
            case image
        }
    }

    package var to: Target?
    var excludeDeviceIDs: [String]?
    var alert: Alert?
    var data: JSONValue?
    var pushType: String?
    var priority: Int?
    var collapseID: String?
    var threadID: String?
    var category: String?
    var badge: Int?
    var sound: String?
    var contentAvailable: Bool?
    var mutableContent: Bool?
    var interruptionLevel: String?
    var relevanceScore: Double?
    var expiration: Int?
    var deliverAt: String?
    var idempotencyKey: String?
    /// What `POST …/cancel` names to cancel the notification's deliveries not yet sent.
    var cancelKey: String?
    /// A catalog type (name or external id): copy, category, thread, collapse id, deep link,
    /// sound and interruption level come from it, rendered per device; the policy engine runs.
    package var type: String?
    var android: Android?

    enum CodingKeys: String, CodingKey {
        case to, alert, data, priority, category, badge, sound, expiration, type, android
        case excludeDeviceIDs = "exclude_device_ids"
        case pushType = "push_type"
        case collapseID = "collapse_id"
        case threadID = "thread_id"
        case contentAvailable = "content_available"
        case mutableContent = "mutable_content"
        case interruptionLevel = "interruption_level"
        case relevanceScore = "relevance_score"
        case deliverAt = "deliver_at"
        case idempotencyKey = "idempotency_key"
        case cancelKey = "cancel_key"
    }

    /// The content part of the request, for `NotificationComposer`.
    var draft: NotificationDraft {
        NotificationDraft(
            alert: alert.map { NotificationDraft.Alert(title: $0.title, subtitle: $0.subtitle, body: $0.body) },
            data: data,
            pushType: pushType, priority: priority, collapseID: collapseID, threadID: threadID, category: category,
            badge: badge,
            sound: sound, contentAvailable: contentAvailable, mutableContent: mutableContent,
            interruptionLevel: interruptionLevel,
            relevanceScore: relevanceScore, expiration: expiration, deliverAt: deliverAt, type: type,
            androidChannelID: android?.channelID,
            androidImage: android?.image)
    }

    /// The recipients and keys checked, with the content as a draft for the composer (which
    /// checks the rest when the send is accepted). The first problem names its field.
    func sendRequest() throws(APIError) -> SendRequest {
        guard let to else { throw APIError.missing("to") }
        let targets = [to.userIDs != nil, to.deviceIDs != nil, to.all == true].filter { $0 }.count
        guard targets == 1 else {
            throw APIError.invalid("to", "to needs exactly one of user_ids, device_ids or all: true")
        }
        let selector: RecipientSelector
        if let ids = to.userIDs {
            guard !ids.isEmpty, ids.count <= SendLimits.maximumRecipientIDs else {
                throw APIError.invalid("to.user_ids", "to.user_ids needs 1 to \(SendLimits.maximumRecipientIDs) ids")
            }
            selector = .users(ids)
        } else if let ids = to.deviceIDs {
            guard !ids.isEmpty, ids.count <= SendLimits.maximumRecipientIDs else {
                throw APIError.invalid(
                    "to.device_ids", "to.device_ids needs 1 to \(SendLimits.maximumRecipientIDs) ids")
            }
            selector = .devices(ids)
        } else {
            selector = .all
        }
        if let excluded = excludeDeviceIDs, excluded.count > SendLimits.maximumRecipientIDs {
            throw APIError.invalid("exclude_device_ids", "at most \(SendLimits.maximumRecipientIDs) ids")
        }
        if let idempotencyKey, idempotencyKey.isEmpty || idempotencyKey.utf8.count > SendLimits.maximumIdempotencyKey {
            throw APIError.invalid(
                "idempotency_key", "idempotency_key is 1 to \(SendLimits.maximumIdempotencyKey) bytes")
        }
        if let cancelKey, !SendLimits.isValidCancelKey(cancelKey) {
            throw APIError.invalid("cancel_key", "cancel_key is 1 to \(SendLimits.maximumCancelKey) bytes")
        }
        return SendRequest(
            recipients: selector, draft: draft, excludeDeviceIDs: excludeDeviceIDs ?? [],
            idempotencyKey: idempotencyKey, cancelKey: cancelKey)
    }
}

/// `POST /v1/apps/{app}/cancel`: cancels the deliveries not yet sent of the notifications
/// with a cancel key, for every user or the users named.
struct CancelBody: Decodable {
    var cancelKey: String?
    var userIDs: [String]?

    enum CodingKeys: String, CodingKey {
        case cancelKey = "cancel_key"
        case userIDs = "user_ids"
    }

    /// The key and the users, checked; the first problem names its field.
    func validated() throws(APIError) -> (key: String, users: [String]?) {
        guard let cancelKey else { throw APIError.missing("cancel_key") }
        guard SendLimits.isValidCancelKey(cancelKey) else {
            throw APIError.invalid("cancel_key", "cancel_key is 1 to \(SendLimits.maximumCancelKey) bytes")
        }
        if let userIDs {
            guard !userIDs.isEmpty, userIDs.count <= SendLimits.maximumRecipientIDs else {
                throw APIError.invalid(
                    "user_ids",
                    "user_ids needs 1 to \(SendLimits.maximumRecipientIDs) ids (leave it out for every user)")
            }
            if let index = userIDs.firstIndex(where: { $0.isEmpty || $0.utf8.count > 256 }) {
                throw APIError.invalid("user_ids[\(index)]", "a user id is 1 to 256 bytes")
            }
        }
        return (cancelKey, userIDs.map { Array(Set($0)).sorted() })
    }
}

/// What a cancel did.
struct CancelView: Encodable {
    /// Deliveries and track steps that will never be sent.
    var cancelled: Int
    var inFlight: Int
    var broadcastsSkipped: Int
    /// Of `cancelled`, track steps not yet fired.
    var steps: Int

    enum CodingKeys: String, CodingKey {
        case cancelled, steps
        case inFlight = "in_flight"
        case broadcastsSkipped = "broadcasts_skipped"
    }
}

/// `POST /v1/dev/clock`: how far to move the clock (`"48h"`, `"2d"`, `"90m"`, `"1h30m"`).
struct ClockBody: Decodable {
    var advance: String?
}

/// The clock after a move.
struct ClockView: Encodable {
    var now: String
    var advancedSeconds: Double

    enum CodingKeys: String, CodingKey {
        case now
        case advancedSeconds = "advanced_seconds"
    }
}
