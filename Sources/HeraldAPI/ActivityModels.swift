import Foundation
import HeraldCore
import HeraldEngine
import HeraldPayload
import HeraldStore

/// `{"token", "attributes_type"?}`: a push-to-start or update token a device reports.
struct ActivityTokenBody: Decodable {
    var token: String?
    var attributesType: String?

    enum CodingKeys: String, CodingKey {
        case token
        case attributesType = "attributes_type"
    }

    /// The token, checked: hex of the raw token bytes, as ActivityKit hands it over.
    func validToken() throws(APIError) -> String {
        guard let token, !token.isEmpty else { throw APIError.invalid("token", "token is required") }
        guard token.utf8.count <= 400, (try? APNSNotification.validateDeviceToken(token)) != nil else {
            throw APIError.invalid("token", "token is hex of the raw token bytes (an even number of 0-9, a-f)")
        }
        return token.lowercased()
    }
}

/// The names Live Activities use, checked.
enum ActivityNames {
    /// An activity id (the app's): 1–128 letters, digits, `-`, `_`, `.` or `:`.
    static func activityID(_ text: String?, field: String = "activity_id") throws(APIError) -> String {
        guard let text, (1...128).contains(text.utf8.count),
            text.unicodeScalars.allSatisfy({ $0.isASCIIIdentifier || "-_.:".unicodeScalars.contains($0) })
        else {
            throw APIError.invalid(field, "\(field) is 1 to 128 letters, digits, -, _, . or :")
        }
        return text
    }

    /// An attributes type (the app's `ActivityAttributes` type name): 1–128 letters, digits, `_` or `.`.
    static func attributesType(_ text: String?, field: String = "attributes_type") throws(APIError) -> String {
        guard let text, (1...128).contains(text.utf8.count),
            text.unicodeScalars.allSatisfy({ $0.isASCIIIdentifier || $0 == "." })
        else {
            throw APIError.invalid(
                field, "\(field) is the ActivityAttributes type's name: 1 to 128 letters, digits, _ or .")
        }
        return text
    }
}

extension Unicode.Scalar {
    /// `A-Z`, `a-z`, `0-9` or `_`.
    fileprivate var isASCIIIdentifier: Bool {
        (value >= 0x41 && value <= 0x5A) || (value >= 0x61 && value <= 0x7A) || (value >= 0x30 && value <= 0x39)
            || value == 0x5F
    }
}

/// The fields a start, an update and an end share.
struct ActivityPushFields: Decodable {
    struct Alert: Decodable {
        var title: String?
        var body: String?
        var sound: String?
    }

    var contentState: JSONValue?
    var alert: Alert?
    var staleAt: String?
    var dismissAt: String?
    var relevanceScore: Double?
    var priority: JSONValue?
    var timestamp: JSONValue?
    var keepChannel: Bool?
    /// A catalog activity type whose copy makes the alert, per device locale.
    var type: String?
    /// The type's placeholders' values.
    var data: JSONValue?

    enum CodingKeys: String, CodingKey {
        case contentState = "content_state"
        case type, data
        case alert
        case staleAt = "stale_at"
        case dismissAt = "dismiss_at"
        case relevanceScore = "relevance_score"
        case priority, timestamp
        case keepChannel = "keep_channel"
    }

    /// The content state: a JSON object of at most 4 KB encoded (ActivityKit's limit).
    func state(required: Bool) throws(APIError) -> [String: JSONValue]? {
        guard let contentState else {
            if required { throw APIError.invalid("content_state", "content_state is required") }
            return nil
        }
        guard let object = contentState.objectValue else {
            throw APIError.invalid("content_state", "content_state is a JSON object (the activity's ContentState)")
        }
        let size = LiveActivityPush.encodedSize(object)
        guard size <= LiveActivityPush.contentStateLimit else {
            throw APIError.invalid(
                "content_state", "content_state is \(size) bytes encoded; ActivityKit takes at most 4096")
        }
        return object
    }

    /// The alert: a title is required (ActivityKit drops an alert without one, and its sound).
    func validAlert() throws(APIError) -> LiveActivityAlert? {
        guard let alert else { return nil }
        guard let title = alert.title, !title.isEmpty else {
            throw APIError.invalid("alert.title", "an activity's alert needs a title: ActivityKit ignores one without")
        }
        return LiveActivityAlert(title: title, body: alert.body, sound: alert.sound)
    }

    /// The alert: the request's own, or one from the catalog activity type `type` (with
    /// `data` for its placeholders), localized per device; not both.
    func alerts(catalog: Catalog?) throws(APIError) -> (alert: LiveActivityAlert?, copy: ActivityAlertCopy?) {
        guard let type else {
            if data != nil { throw APIError.invalid("data", "data fills the placeholders of a type: give type too") }
            return (try validAlert(), nil)
        }
        guard let catalog, let activity = catalog.activity(type) else {
            let known = catalog?.activities.map(\.name).sorted() ?? []
            throw APIError.invalid(
                "type",
                known.isEmpty
                    ? "the app's catalog declares no activity types (activities:)"
                    : "no activity type \"\(type.prefix(64))\" in the catalog; it has \(known.joined(separator: ", "))")
        }
        if alert != nil {
            throw APIError.invalid("alert", "give alert or type (whose copy makes the alert), not both")
        }
        var values: [String: String] = [:]
        if let data {
            guard let object = data.objectValue else {
                throw APIError.invalid("data", "data is a JSON object of the type's placeholders")
            }
            for (key, value) in object {
                switch value {
                case .string(let text): values[key] = text
                case .int(let number): values[key] = String(number)
                case .double(let number): values[key] = String(number)
                case .bool(let flag): values[key] = String(flag)
                case .null: break
                case .array, .object:
                    throw APIError.invalid("data.\(key)", "data.\(key) is a string, number or boolean")
                }
            }
        }
        let used = Set(
            activity.copy.values.flatMap { copy in
                [copy.title, copy.body].compactMap { $0 }.flatMap { Placeholders.names(in: $0) }
            })
        for name in activity.placeholders.sorted() where used.contains(name) && values[name] == nil {
            throw APIError.invalid("data.\(name)", "data.\(name) is required by activity type \(activity.name)'s copy")
        }
        let copy = ActivityAlertCopy(activity: activity, defaultLocale: catalog.app.defaultLocale, data: values)
        return (copy.alert(locale: nil), copy)
    }

    static func seconds(_ text: String?, _ field: String) throws(APIError) -> Int64? {
        guard let text else { return nil }
        guard let date = HeraldTime.parse(text), let seconds = Int64(exactly: date.timeIntervalSince1970.rounded(.down))
        else { throw APIError.invalid(field, "\(field) is an RFC 3339 time such as 2026-11-29T18:00:00Z") }
        return seconds
    }

    func validRelevance() throws(APIError) -> Double? {
        guard let relevanceScore else { return nil }
        guard relevanceScore.isFinite else { throw APIError.invalid("relevance_score", "relevance_score is a number") }
        return relevanceScore
    }
}

/// `POST /v1/apps/{app}/activities`.
struct ActivityStartBody: Decodable {
    struct Audience: Decodable {
        var userIDs: [String]?
        var deviceIDs: [String]?
        enum CodingKeys: String, CodingKey {
            case userIDs = "user_ids"
            case deviceIDs = "device_ids"
        }
    }

    var activityID: String?
    var attributesType: String?
    var attributes: JSONValue?
    var to: Audience?
    var channel: String?
    var fields: ActivityPushFields

    enum CodingKeys: String, CodingKey {
        case activityID = "activity_id"
        case attributesType = "attributes_type"
        case attributes, to, channel
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        activityID = try container.decodeIfPresent(String.self, forKey: .activityID)
        attributesType = try container.decodeIfPresent(String.self, forKey: .attributesType)
        attributes = try container.decodeIfPresent(JSONValue.self, forKey: .attributes)
        to = try container.decodeIfPresent(Audience.self, forKey: .to)
        channel = try container.decodeIfPresent(String.self, forKey: .channel)
        fields = try ActivityPushFields(from: decoder)
    }

    /// Recipients in one start at most.
    static let maximumRecipients = 10_000

    func validated(catalog: Catalog?) throws(APIError) -> ActivityService.Start {
        let id = try ActivityNames.activityID(activityID)
        let (alert, copy) = try fields.alerts(catalog: catalog)
        if let copy, let attributesType, attributesType != copy.activity.attributesType {
            throw APIError.invalid(
                "attributes_type",
                "activity type \(copy.activity.name) is \(copy.activity.attributesType), not \(attributesType.prefix(128))"
            )
        }
        let type = try ActivityNames.attributesType(attributesType ?? copy?.activity.attributesType)
        var attributeFields: [String: JSONValue] = [:]
        if let attributes {
            guard let object = attributes.objectValue else {
                throw APIError.invalid("attributes", "attributes is a JSON object (the activity's attributes)")
            }
            attributeFields = object
        }
        guard let to, (to.userIDs?.isEmpty == false) != (to.deviceIDs?.isEmpty == false) else {
            throw APIError.invalid("to", "to is {\"user_ids\": [...]} or {\"device_ids\": [...]}")
        }
        let users = to.userIDs ?? []
        let devices = to.deviceIDs ?? []
        guard users.count + devices.count <= Self.maximumRecipients else {
            throw APIError.invalid("to", "to names at most \(Self.maximumRecipients) users or devices")
        }
        for (index, user) in users.enumerated() where user.isEmpty || user.utf8.count > 256 {
            throw APIError.invalid("to.user_ids[\(index)]", "a user id is 1 to 256 bytes")
        }
        for (index, device) in devices.enumerated() where device.isEmpty || device.utf8.count > 256 {
            throw APIError.invalid("to.device_ids[\(index)]", "a device id is 1 to 256 bytes")
        }
        if let channel, channel.isEmpty || channel.utf8.count > 256 {
            throw APIError.invalid("channel", "channel is a broadcast channel id (1 to 256 bytes)")
        }
        if fields.dismissAt != nil {
            throw APIError.invalid("dismiss_at", "dismiss_at goes with an end, not a start")
        }
        if fields.priority != nil || fields.timestamp != nil {
            throw APIError.invalid(
                fields.priority != nil ? "priority" : "timestamp",
                "a start goes at priority 10 with the time it is sent")
        }
        guard let alert else {
            throw APIError.invalid(
                "alert", "a start needs an alert with a title (or a type whose copy makes one): the device shows it")
        }
        return ActivityService.Start(
            activityID: id, attributesType: type, attributes: attributeFields,
            contentState: try fields.state(required: true) ?? [:], userIDs: users, deviceIDs: devices,
            alert: alert, staleAt: try ActivityPushFields.seconds(fields.staleAt, "stale_at"),
            relevanceScore: try fields.validRelevance(), channel: channel, copy: copy)
    }
}

/// `POST …/activities/{id}/update` and `…/end`.
struct ActivityChangeBody: Decodable {
    var fields: ActivityPushFields

    init(from decoder: any Decoder) throws {
        fields = try ActivityPushFields(from: decoder)
    }

    func validated(_ event: LiveActivityEvent, catalog: Catalog?) throws(APIError) -> ActivityService.Change {
        if event == .update, fields.dismissAt != nil {
            throw APIError.invalid("dismiss_at", "dismiss_at goes with an end only (Apple's dismissal-date)")
        }
        if event == .update, fields.keepChannel != nil {
            throw APIError.invalid("keep_channel", "keep_channel goes with an end only")
        }
        var priority: Int?
        if let value = fields.priority {
            guard case .int(let number) = value, number == 5 || number == 10 else {
                throw APIError.invalid("priority", "priority is 5 or 10")
            }
            priority = number
        }
        var timestamp: Int64?
        if let value = fields.timestamp {
            guard case .int(let number) = value, number > 0 else {
                throw APIError.invalid("timestamp", "timestamp is Unix seconds, after the activity's last push")
            }
            timestamp = Int64(number)
        }
        let (alert, copy) = try fields.alerts(catalog: catalog)
        return ActivityService.Change(
            event: event, contentState: try fields.state(required: event == .update), alert: alert,
            staleAt: try ActivityPushFields.seconds(fields.staleAt, "stale_at"),
            dismissAt: try ActivityPushFields.seconds(fields.dismissAt, "dismiss_at"),
            relevanceScore: try fields.validRelevance(), priority: priority, timestamp: timestamp,
            keepChannel: fields.keepChannel ?? false, copy: copy)
    }
}

/// `POST /v1/apps/{app}/channels` `{"event_key", "storage": "none" | "latest", "environment"}`.
struct ChannelBody: Decodable {
    var eventKey: String?
    var storage: String?
    var environment: String?

    enum CodingKeys: String, CodingKey {
        case eventKey = "event_key"
        case storage, environment
    }

    func validated(defaultEnvironment: String) throws(APIError) -> (eventKey: String, storage: Int, environment: String)
    {
        guard let eventKey, (1...256).contains(eventKey.utf8.count) else {
            throw APIError.invalid("event_key", "event_key is 1 to 256 bytes: the event the channel stands for")
        }
        let policy: Int
        switch storage ?? "none" {
        case "none": policy = 0
        case "latest": policy = 1
        default: throw APIError.invalid("storage", "storage is none (no message kept) or latest (the last, 8 hours)")
        }
        let environment = environment ?? defaultEnvironment
        guard environment == "production" || environment == "sandbox" else {
            throw APIError.invalid("environment", "environment is production or sandbox")
        }
        return (eventKey, policy, environment)
    }
}

/// A channel as the API shows it.
struct ChannelView: Encodable {
    var channel: ActivityRepository.Channel

    enum CodingKeys: String, CodingKey {
        case channelID = "channel_id"
        case eventKey = "event_key"
        case storage, environment
        case createdAt = "created_at"
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(channel.id, forKey: .channelID)
        try container.encode(channel.eventKey, forKey: .eventKey)
        try container.encode(channel.storage == 0 ? "none" : "latest", forKey: .storage)
        try container.encode(channel.environment, forKey: .environment)
        try container.encode(HeraldTime.format(channel.createdAt), forKey: .createdAt)
    }
}

/// What a start, update or end did.
struct ActivityOutcomeView: Encodable {
    var activityID: String
    var status: String
    var timestamp: Int64
    var devices: [Device]

    struct Device: Encodable {
        var deviceID: String
        var status: String
        var reason: String?
        var priority: Int
        enum CodingKeys: String, CodingKey {
            case deviceID = "device_id"
            case status, reason, priority
        }
    }

    enum CodingKeys: String, CodingKey {
        case activityID = "activity_id"
        case status, timestamp, devices
    }

    init(_ outcome: ActivityService.Outcome) {
        activityID = outcome.activity.id
        status = outcome.activity.status
        timestamp = outcome.timestamp
        devices = outcome.devices.map {
            Device(deviceID: $0.deviceID, status: $0.status, reason: $0.reason, priority: $0.priority)
        }
    }
}

/// `GET …/activities/{id}`: the activity, its devices and its last pushes with their traces.
struct ActivityView: Encodable {
    var activity: ActivityRepository.Activity
    var devices: [ActivityRepository.ActivityDevice]
    var pushes: [ActivityRepository.Push]
    var now: Date

    enum CodingKeys: String, CodingKey {
        case activityID = "activity_id"
        case attributesType = "attributes_type"
        case attributes
        case contentState = "content_state"
        case status
        case staleAt = "stale_at"
        case dismissalAt = "dismissal_at"
        case lastTimestamp = "last_timestamp"
        case channel
        case createdAt = "created_at"
        case updatedAt = "updated_at"
        case devices, pushes
    }

    enum DeviceKeys: String, CodingKey {
        case deviceID = "device_id"
        case token, status, reason
        case updatedAt = "updated_at"
    }

    enum PushKeys: String, CodingKey {
        case deviceID = "device_id"
        case event, timestamp, priority, status, reason, trace, at
    }

    /// `dismissed` once an ended activity's dismissal date has passed.
    var status: String {
        if activity.status == "ended", let dismissal = activity.dismissalAt,
            Double(dismissal) <= now.timeIntervalSince1970
        {
            return "dismissed"
        }
        return activity.status
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        func json(_ text: String?) -> JSONValue? {
            text.flatMap { try? JSONDecoder().decode(JSONValue.self, from: Data($0.utf8)) }
        }
        func time(_ seconds: Int64?) -> String? {
            seconds.map { HeraldTime.format(Date(timeIntervalSince1970: Double($0))) }
        }
        try container.encode(activity.id, forKey: .activityID)
        try container.encode(activity.attributesType, forKey: .attributesType)
        try container.encode(json(activity.attributes), forKey: .attributes)
        try container.encode(json(activity.contentState), forKey: .contentState)
        try container.encode(status, forKey: .status)
        try container.encode(time(activity.staleAt), forKey: .staleAt)
        try container.encode(time(activity.dismissalAt), forKey: .dismissalAt)
        try container.encode(activity.lastTimestamp, forKey: .lastTimestamp)
        try container.encode(activity.channelID, forKey: .channel)
        try container.encode(HeraldTime.format(activity.createdAt), forKey: .createdAt)
        try container.encode(HeraldTime.format(activity.updatedAt), forKey: .updatedAt)
        var list = container.nestedUnkeyedContainer(forKey: .devices)
        for device in devices {
            var item = list.nestedContainer(keyedBy: DeviceKeys.self)
            try item.encode(device.deviceID, forKey: .deviceID)
            try item.encode(device.token.map(DeviceTokenText.redacted), forKey: .token)
            try item.encode(device.status, forKey: .status)
            try item.encode(device.reason, forKey: .reason)
            try item.encode(HeraldTime.format(device.updatedAt), forKey: .updatedAt)
        }
        var pushList = container.nestedUnkeyedContainer(forKey: .pushes)
        for push in pushes {
            var item = pushList.nestedContainer(keyedBy: PushKeys.self)
            try item.encode(push.deviceID, forKey: .deviceID)
            try item.encode(push.event.rawValue, forKey: .event)
            try item.encode(push.timestamp, forKey: .timestamp)
            try item.encode(push.priority, forKey: .priority)
            try item.encode(push.status, forKey: .status)
            try item.encode(push.reason, forKey: .reason)
            try item.encode(DecisionTrace.entries(push.trace), forKey: .trace)
            try item.encode(HeraldTime.format(push.createdAt), forKey: .at)
        }
    }
}
