import Foundation
import HeraldCore
import HeraldEngine
import HeraldPayload
import HeraldStore

extension UserPreferences {
    /// Checks values; the first problem names its field. With a catalog, every type must be
    /// one of its user-controllable types (by name or external id).
    func validate(catalog: Catalog? = nil) throws(APIError) {
        if let catalog {
            for key in (types ?? [:]).keys.sorted() {
                guard let type = catalog.type(key) else {
                    throw APIError.invalid(
                        "types.\(key)",
                        "unknown type \"\(key)\"; the catalog has \(catalog.types.map(\.name).joined(separator: ", "))")
                }
                guard type.userControllable else {
                    throw APIError.invalid("types.\(key)", "\(key) is not user-controllable; it cannot be switched off")
                }
            }
        }
        if let quietHours, quietHours.enabled || quietHours.start != nil || quietHours.end != nil {
            for (field, value) in [("start", quietHours.start), ("end", quietHours.end)] {
                if let value, LocalTime(value) == nil {
                    throw APIError.invalid("quiet_hours.\(field)", "quiet_hours.\(field) is a time HH:MM")
                }
            }
        }
        for key in (dndBypass ?? [:]).keys where Stakes(rawValue: key) == nil {
            throw APIError.invalid("dnd_bypass.\(key)", "dnd_bypass keys are low, medium, high or failure")
        }
        if let types, types.count > 1000 { throw APIError.invalid("types", "at most 1000 types") }
    }
}

/// `PUT /v1/apps/{app}/users/{user_id}` body.
struct UserBody: Decodable {
    var timeZone: String?
    var locale: String?
    var attributes: JSONValue?

    enum CodingKeys: String, CodingKey {
        case timeZone = "time_zone"
        case locale, attributes
    }

    func validate() throws(APIError) {
        if let timeZone, TimeZone(identifier: timeZone) == nil {
            throw APIError.invalid("time_zone", "time_zone is an IANA zone such as Europe/Paris")
        }
        if let locale, locale.isEmpty || locale.utf8.count > 35 {
            throw APIError.invalid("locale", "locale is a language tag such as fr-CA")
        }
        if let attributes, attributes.objectValue == nil {
            throw APIError.invalid("attributes", "attributes must be a JSON object")
        }
        if let attributes, attributes.depth > NotificationDraft.maximumDataDepth {
            throw APIError.invalid(
                "attributes",
                "attributes nest objects and arrays more than \(NotificationDraft.maximumDataDepth) levels deep")
        }
    }
}

/// A user as the API shows it.
struct UserView: Encodable {
    var record: UserRecord

    enum CodingKeys: String, CodingKey {
        case userID = "user_id"
        case timeZone = "time_zone"
        case locale, attributes
        case createdAt = "created_at"
        case updatedAt = "updated_at"
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(record.userID, forKey: .userID)
        try container.encodeIfPresent(record.timeZone, forKey: .timeZone)
        try container.encodeIfPresent(record.locale, forKey: .locale)
        try container.encode(
            (try? JSONDecoder().decode(JSONValue.self, from: record.attributes)) ?? JSONValue.object([:]),
            forKey: .attributes)
        try container.encode(record.createdAt, forKey: .createdAt)
        try container.encode(record.updatedAt, forKey: .updatedAt)
    }
}
