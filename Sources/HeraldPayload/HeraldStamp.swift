import Foundation

/// What Herald puts into every payload it delivers, under the app's payload key as `herald`
/// (`{"n": notification id, "d": delivery id, "a": {action id: action token}}`): the ids an app
/// reports an open with (`POST /v1/apps/{app}/opened`) and, for a type with actions, one signed
/// single-use token per action, which commits that action without opening the app
/// (`POST /v1/apps/{app}/actions`). On FCM the same object is the data value `herald`, as a
/// JSON string (FCM data values are strings).
public struct HeraldStamp: Sendable, Hashable, Codable {
    /// The key under the app's payload key (and FCM's data key).
    public static let key = "herald"

    /// The notification's id (a lowercase UUID), as `POST …/notifications` answered it.
    public var notificationID: String
    /// The delivery's id: this notification on this device.
    public var deliveryID: Int64
    /// Action id → its token, for a type with actions.
    public var actionTokens: [String: String]?

    public init(notificationID: String, deliveryID: Int64, actionTokens: [String: String]? = nil) {
        self.notificationID = notificationID
        self.deliveryID = deliveryID
        self.actionTokens = actionTokens
    }

    enum CodingKeys: String, CodingKey {
        case notificationID = "n"
        case deliveryID = "d"
        case actionTokens = "a"
    }

    /// Reads the stamp out of a delivered payload's app data (the object under the payload key,
    /// or FCM's data, where it is a JSON string); nil when there is none.
    public init?(appData: [String: JSONValue]) {
        let value: JSONValue
        switch appData[Self.key] {
        case .object(let object)?: value = .object(object)
        case .string(let text)?:
            guard let decoded = try? JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)) else { return nil }
            value = decoded
        default: return nil
        }
        guard case .object(let object) = value, case .string(let notification)? = object["n"],
            case .int(let delivery)? = object["d"]
        else {
            return nil
        }
        var tokens: [String: String]?
        if case .object(let actions)? = object["a"] {
            tokens = actions.compactMapValues { if case .string(let token) = $0 { token } else { nil } }
        }
        self.init(notificationID: notification, deliveryID: Int64(delivery), actionTokens: tokens)
    }

    /// The stamp as compact JSON, keys sorted (`a`, `d`, `n`): the bytes put into payloads.
    package func json() -> [UInt8] {
        var writer = JSONWriter(capacity: 64 + (actionTokens?.count ?? 0) * 96)
        writer.raw("{")
        if let actionTokens, !actionTokens.isEmpty {
            writer.raw(#""a":"#)
            writer.stringObject(actionTokens.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
            writer.raw(",")
        }
        writer.raw(#""d":"#)
        writer.value(.int(Int(deliveryID)))
        writer.raw(#","n":"#)
        writer.string(notificationID)
        writer.raw("}")
        return writer.bytes
    }

    /// The longest `json()` of a stamp of a notification with `actionTokens` tokens of these
    /// lengths (action id bytes, token bytes): what a payload's size is checked with before its
    /// deliveries have ids.
    package static func maximumJSONLength(notificationID: String, actionTokens: [(id: Int, token: Int)] = []) -> Int {
        // {"d":<at most 19 digits>,"n":"<id>"}
        var length = 5 + 19 + 5 + notificationID.utf8.count + 2 + 1
        if !actionTokens.isEmpty {
            // "a":{"id":"token",…}, : 7 bytes around the pairs, 5 in each and a comma between two.
            length += 7 + actionTokens.reduce(0) { $0 + $1.id + $1.token + 5 } + actionTokens.count - 1
        }
        return length
    }
}
