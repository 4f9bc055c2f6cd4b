import Foundation
import HeraldCore
import HeraldPayload
import HeraldStore

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

    enum CodingKeys: String, CodingKey {
        case deviceID = "device_id", userID = "user_id", platform, token, environment, name, model, locale
        case timeZone = "time_zone", appVersion = "app_version", authorizationStatus = "authorization_status"
    }

    static let platforms: Set<String> = ["apns", "fcm"]
    static let authorizationStatuses: Set<String> = ["not_determined", "denied", "authorized", "provisional", "ephemeral"]

    /// Checks every field; the first problem names its field. `prefix` (built only for an error) is for import lines.
    func validated(prefix: @autoclosure () -> String = "") throws(APIError) -> DeviceRecord {
        func named(_ field: String) -> String { prefix() + field }
        func text(_ value: String?, _ field: String, limit: Int = 256) throws(APIError) -> String? {
            guard let value else { return nil }
            guard value.utf8.count <= limit else { throw APIError.invalid(named(field), "\(field) is longer than \(limit) bytes") }
            return value
        }
        guard let deviceID = try text(deviceID, "device_id"), !deviceID.isEmpty else { throw APIError.missing(named("device_id")) }
        guard let userID = try text(userID, "user_id"), !userID.isEmpty else { throw APIError.missing(named("user_id")) }
        let platform = platform ?? "apns"
        guard Self.platforms.contains(platform) else { throw APIError.invalid(named("platform"), "platform is apns or fcm") }
        guard var token = try text(token, "token", limit: 4096), !token.isEmpty else { throw APIError.missing(named("token")) }
        if platform == "apns" {
            if token.utf8.contains(where: { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") }) { token = token.lowercased() }
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
            name: try text(name, "name"), model: try text(model, "model"), locale: try text(locale, "locale", limit: 35),
            timeZone: timeZone, appVersion: try text(appVersion, "app_version", limit: 64),
            authorizationStatus: authorizationStatus)
    }
}

/// A device as the API shows it.
struct DeviceView: Encodable {
    var device: DeviceRecord

    enum CodingKeys: String, CodingKey {
        case deviceID = "device_id", userID = "user_id", platform, token, environment, name, model, locale
        case timeZone = "time_zone", appVersion = "app_version", authorizationStatus = "authorization_status"
        case active, inactiveReason = "inactive_reason", inactiveSince = "inactive_since"
        case createdAt = "created_at", updatedAt = "updated_at"
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(device.deviceID, forKey: .deviceID)
        try container.encode(device.userID, forKey: .userID)
        try container.encode(device.platform, forKey: .platform)
        try container.encode(device.token, forKey: .token)
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
        var all: Bool?
        enum CodingKeys: String, CodingKey { case userIDs = "user_ids", deviceIDs = "device_ids", all }
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
        enum CodingKeys: String, CodingKey { case channelID = "channel_id", image }
    }

    var to: Target?
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
    var type: String?
    var android: Android?

    enum CodingKeys: String, CodingKey {
        case to, alert, data, priority, category, badge, sound, expiration, type, android
        case excludeDeviceIDs = "exclude_device_ids", pushType = "push_type", collapseID = "collapse_id"
        case threadID = "thread_id", contentAvailable = "content_available", mutableContent = "mutable_content"
        case interruptionLevel = "interruption_level", relevanceScore = "relevance_score", deliverAt = "deliver_at"
        case idempotencyKey = "idempotency_key", cancelKey = "cancel_key"
    }

    static let maximumRecipientIDs = 10_000
    /// The longest cancel key, in bytes.
    static let maximumCancelKey = 128
    /// How far ahead `deliver_at` may be: a year (a typo such as 2206 is refused, not kept for ever).
    static let maximumScheduleAhead: TimeInterval = 366 * 86400
    /// How deeply `data` may nest objects and arrays.
    static let maximumDataDepth = 16

    /// Urgent (claimed before bulk): a transactional catalog type, or `"priority": 10` asked
    /// for. An alert's default priority 10 alone does not make a fan-out urgent.
    func lane(catalog: Catalog?) -> DeliveryLane {
        if priority == 10 { return .urgent }
        if let type, catalog?.type(type)?.transactional == true { return .urgent }
        return .normal
    }

    /// Validates and renders the request into what the outbox stores: its recipients, content
    /// and due time, and for a plain notification its APNs payload (rendered to check its size,
    /// with room for each delivery's stamp; sent as it is) as notification `id` (only the API
    /// keeps the payload: the other callers let the id default).
    func prepared(payloadKey: String, catalog: Catalog?, fcm: Bool = false, now: Date, id: UUID = UUID.random()) throws(APIError) -> (
        selector: RecipientSelector, content: StoredNotificationContent, dueAt: Date, apnsPayload: APNSPayloadTemplate?
    ) {
        guard let to else { throw APIError.missing("to") }
        let targets = [to.userIDs != nil, to.deviceIDs != nil, to.all == true].filter { $0 }.count
        guard targets == 1 else {
            throw APIError.invalid("to", "to needs exactly one of user_ids, device_ids or all: true")
        }
        let selector: RecipientSelector
        if let ids = to.userIDs {
            guard !ids.isEmpty, ids.count <= Self.maximumRecipientIDs else {
                throw APIError.invalid("to.user_ids", "to.user_ids needs 1 to \(Self.maximumRecipientIDs) ids")
            }
            selector = .users(ids)
        } else if let ids = to.deviceIDs {
            guard !ids.isEmpty, ids.count <= Self.maximumRecipientIDs else {
                throw APIError.invalid("to.device_ids", "to.device_ids needs 1 to \(Self.maximumRecipientIDs) ids")
            }
            selector = .devices(ids)
        } else {
            selector = .all
        }
        if let excluded = excludeDeviceIDs, excluded.count > Self.maximumRecipientIDs {
            throw APIError.invalid("exclude_device_ids", "at most \(Self.maximumRecipientIDs) ids")
        }
        var catalogType: CatalogType?
        if let type {
            guard let catalog else {
                throw APIError.invalid("type", "this app has no catalog (apps[].catalog); send alert fields instead")
            }
            guard let found = catalog.type(type) else {
                let known = catalog.types.map(\.name).joined(separator: ", ")
                throw APIError.invalid("type", "unknown type \"\(type)\"; the catalog has \(known)")
            }
            catalogType = found
        }
        let visible = alert != nil || badge != nil || sound != nil
        let pushType = self.pushType.map(APNSPushType.init(rawValue:)) ?? catalogType?.pushType
            ?? NotificationContent.defaultPushType(contentAvailable: contentAvailable == true, visible: visible)
        guard pushType.isKnown else {
            throw APIError.invalid("push_type", "push_type is one of \(APNSPushType.known.map(\.rawValue).joined(separator: ", "))")
        }
        guard !pushType.needsOwnToken else {
            // Sent to a device's regular token, APNs answers DeviceTokenNotForTopic: a fleet
            // would look dead. Devices register one token today.
            throw APIError.invalid(
                "push_type",
                "push_type \(pushType.rawValue) needs a token of its own (PushKit, Live Activity …), which devices cannot register yet; use alert or background"
            )
        }
        let priority = self.priority.map(APNSPriority.init(rawValue:)) ?? catalogType?.priority
            ?? NotificationContent.defaultPriority(for: pushType)
        guard priority.isValid else { throw APIError.invalid("priority", "priority is 10, 5 or 1") }
        if pushType == .background && priority == .immediate {
            throw APIError.invalid("priority", "background pushes must use priority 5")
        }
        if let collapseID, collapseID.utf8.count > APNSNotification.collapseIDLimit {
            throw APIError.invalid("collapse_id", "collapse_id is at most 64 bytes")
        }
        var interruption: APSInterruptionLevel?
        if let interruptionLevel {
            interruption = APSInterruptionLevel(rawValue: interruptionLevel)
            guard APSInterruptionLevel.known.contains(interruption!) else {
                throw APIError.invalid("interruption_level", "interruption_level is passive, active, time-sensitive or critical")
            }
        }
        if let relevanceScore, !(0...1).contains(relevanceScore) {
            throw APIError.invalid("relevance_score", "relevance_score is between 0 and 1")
        }
        if let expiration, expiration < 0 { throw APIError.invalid("expiration", "expiration is UNIX seconds ≥ 0") }
        if let badge, badge < 0 { throw APIError.invalid("badge", "badge is 0 or more") }
        if let data, data.objectValue == nil { throw APIError.invalid("data", "data must be a JSON object") }
        if let data, data.depth > Self.maximumDataDepth {
            throw APIError.invalid("data", "data nests objects and arrays more than \(Self.maximumDataDepth) levels deep")
        }
        if let key = data?.objectValue?.keys.sorted().first(where: FCMMessage.isReservedDataKey) {
            throw APIError.invalid("data.\(key)", "data.\(key) is reserved by FCM (from, message_type, google*, gcm*)")
        }
        if data?.objectValue?[HeraldStamp.key] != nil {
            throw APIError.invalid("data.\(HeraldStamp.key)", "data.\(HeraldStamp.key) is where Herald puts each delivery's ids")
        }
        if let idempotencyKey, idempotencyKey.isEmpty || idempotencyKey.utf8.count > 256 {
            throw APIError.invalid("idempotency_key", "idempotency_key is 1 to 256 bytes")
        }
        if let cancelKey, cancelKey.isEmpty || cancelKey.utf8.count > Self.maximumCancelKey {
            throw APIError.invalid("cancel_key", "cancel_key is 1 to \(Self.maximumCancelKey) bytes")
        }
        if let channel = android?.channelID, channel.isEmpty || channel.utf8.count > 256 {
            throw APIError.invalid("android.channel_id", "android.channel_id is 1 to 256 bytes")
        }
        if let image = android?.image {
            guard let url = URL(string: image), url.scheme == "https" || url.scheme == "http", url.host?.isEmpty == false,
                image.utf8.count <= 2048
            else { throw APIError.invalid("android.image", "android.image is an http(s) URL of at most 2048 bytes") }
        }
        var dueAt = now
        if let deliverAt {
            guard let date = HeraldTime.parse(deliverAt) else {
                throw APIError.invalid("deliver_at", "deliver_at is an RFC 3339 time such as 2026-11-23T09:00:00Z")
            }
            guard date <= now.addingTimeInterval(Self.maximumScheduleAhead) else {
                throw APIError.invalid("deliver_at", "deliver_at is at most a year ahead")
            }
            dueAt = max(now, date)
        }
        let content = NotificationContent(
            pushType: pushType, priority: priority, title: alert?.title, subtitle: alert?.subtitle, body: alert?.body,
            badge: badge, sound: sound, threadID: threadID, category: category, contentAvailable: contentAvailable ?? false,
            mutableContent: mutableContent ?? false, interruptionLevel: interruption, relevanceScore: relevanceScore,
            collapseID: collapseID, expiration: expiration, data: data?.objectValue, androidChannelID: android?.channelID,
            image: android?.image)
        // A scheduled send's age (outbox.max_age) counts from when it is due.
        let deliverAt = dueAt > now ? dueAt : nil
        if let catalogType, let catalog {
            var stored = try typedContent(catalogType, catalog: catalog, base: content, payloadKey: payloadKey, fcm: fcm, id: id)
            stored.deliverAt = deliverAt
            return (selector, stored, dueAt, nil)
        }
        let payload = try Self.checkRendering(
            content, payloadKey: payloadKey, fcm: fcm, field: alert?.body != nil ? "alert.body" : "data", id: id)
        return (selector, StoredNotificationContent(content: content, deliverAt: deliverAt), dueAt, payload)
    }

    /// Renders the content for APNs (and FCM when the app has it) and refuses what a provider
    /// would, counting each delivery's stamp: the first problem names `field`. Returns the APNs
    /// payload of notification `id`.
    @discardableResult
    static func checkRendering(
        _ content: NotificationContent, payloadKey: String, fcm: Bool, field: String, id: UUID, actionTokens: [(id: Int, token: Int)] = []
    ) throws(APIError) -> APNSPayloadTemplate {
        do {
            let template = try APNSRenderer.template(content, payloadKey: payloadKey, notificationID: id, actionTokens: actionTokens)
            try APNSRenderer.check(template, pushType: content.pushType, field: field)
            if fcm {
                let stampLength = HeraldStamp.maximumJSONLength(notificationID: template.notificationID, actionTokens: actionTokens)
                try FCMRenderer.check(FCMRenderer.message(content, now: Date()), field: field, stampLength: stampLength)
            }
            return template
        } catch {
            throw APIError(rendering: error)
        }
    }

    /// Keys Herald writes under the payload key when sending by type.
    static let reservedDataKeys: Set<String> = ["type", "deep_link", "group_summary"]

    /// A send by catalog type: resolves every field (request first, then the type), keeps what
    /// the dispatcher needs to render per device, and checks that the default-locale rendering
    /// can fit once the policy engine shortens the body.
    private func typedContent(
        _ type: CatalogType, catalog: Catalog, base: NotificationContent, payloadKey: String, fcm: Bool, id: UUID
    ) throws(APIError) -> StoredNotificationContent {
        let object = data?.objectValue ?? [:]
        for key in object.keys where Self.reservedDataKeys.contains(key) {
            throw APIError.invalid("data.\(key)", "data.\(key) is set by Herald when sending by type")
        }
        var values: [String: String] = [:]
        for (key, value) in object {
            switch value {
            case .string(let text): values[key] = text
            case .int(let number): values[key] = String(number)
            case .double(let number): values[key] = String(number)
            case .bool(let flag): values[key] = String(flag)
            case .null: break
            case .array, .object:
                values[key] = (try? JSONEncoder().encode(value)).map { String(decoding: $0, as: UTF8.self) }
            }
        }
        let resolvedCollapseID = collapseID ?? type.collapseID.flatMap { Placeholders.render($0, data: values) }
        if let resolvedCollapseID, resolvedCollapseID.utf8.count > APNSNotification.collapseIDLimit {
            throw APIError.invalid(collapseID != nil ? "collapse_id" : "data", "the collapse id \"\(resolvedCollapseID.prefix(80))\" is over 64 bytes")
        }
        var custom = object
        custom["type"] = .string(type.name)
        if let link = type.deepLink.flatMap({ Placeholders.render($0, data: values) }) { custom["deep_link"] = .string(link) }
        var content = base
        content.sound = sound ?? type.sound
        content.threadID = threadID ?? type.threadID.flatMap { Placeholders.render($0, data: values) }
        content.category = category ?? type.category
        content.contentAvailable = contentAvailable ?? (base.pushType == .background)
        content.mutableContent = mutableContent ?? type.mutableContent
        content.interruptionLevel = base.interruptionLevel ?? type.interruptionLevel
        content.collapseID = resolvedCollapseID
        content.data = custom
        content.androidChannelID = android?.channelID ?? type.androidChannel ?? catalog.app.androidChannel
        content.analyticsLabel = type.name
        let typed = TypedContent(type: type.name, data: values, title: alert?.title, subtitle: alert?.subtitle, body: alert?.body)
        var stored = StoredNotificationContent(content: content, typed: typed)
        let copy = base.pushType == .background && alert == nil
            ? nil : type.render(locale: nil, defaultLocale: catalog.app.defaultLocale, data: values)
        var decided = stored.policyContent(copy: copy)
        stored.content = stored.deviceContent(copy: copy, decided: decided)
        // The policy engine may shorten the body to "…"; without it the rest must fit.
        decided.body = decided.body.map { _ in "…" }
        try Self.checkRendering(
            stored.deviceContent(copy: copy, decided: decided), payloadKey: payloadKey, fcm: fcm, field: "data", id: id,
            actionTokens: type.actionTokenLengths)
        return stored
    }
}

/// `POST /v1/apps/{app}/cancel`: cancels the deliveries not yet sent of the notifications
/// with a cancel key, for every user or the users named.
struct CancelBody: Decodable {
    var cancelKey: String?
    var userIDs: [String]?

    enum CodingKeys: String, CodingKey {
        case cancelKey = "cancel_key", userIDs = "user_ids"
    }

    /// The key and the users, checked; the first problem names its field.
    func validated() throws(APIError) -> (key: String, users: [String]?) {
        guard let cancelKey else { throw APIError.missing("cancel_key") }
        guard !cancelKey.isEmpty, cancelKey.utf8.count <= NotificationBody.maximumCancelKey else {
            throw APIError.invalid("cancel_key", "cancel_key is 1 to \(NotificationBody.maximumCancelKey) bytes")
        }
        if let userIDs {
            guard !userIDs.isEmpty, userIDs.count <= NotificationBody.maximumRecipientIDs else {
                throw APIError.invalid("user_ids", "user_ids needs 1 to \(NotificationBody.maximumRecipientIDs) ids (leave it out for every user)")
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
        case cancelled, steps, inFlight = "in_flight", broadcastsSkipped = "broadcasts_skipped"
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
