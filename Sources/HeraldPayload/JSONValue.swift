import Foundation

/// Any JSON value: the type of custom payload data an app puts beside `aps` or under its
/// payload key. Codable both ways; numbers keep integers exact.
public enum JSONValue: Sendable, Hashable, Codable {
    case null
    case bool(Bool)
    case int(Int)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int.self) {
            self = .int(value)
        } else if let value = try? container.decode(Double.self) {
            self = .double(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .int(let value): try container.encode(value)
        case .double(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    /// The value as a string when it is one.
    public var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    /// The value as a dictionary when it is an object.
    public var objectValue: [String: JSONValue]? {
        if case .object(let value) = self { return value }
        return nil
    }

    /// How many objects and arrays nest at the deepest point: 0 for a scalar, 1 for `{"a":1}`.
    /// Walks without recursion, so any depth is measured safely.
    public var depth: Int {
        var deepest = 0
        var pending: [(JSONValue, Int)] = [(self, 0)]
        while let (value, level) = pending.popLast() {
            switch value {
            case .object(let members):
                deepest = max(deepest, level + 1)
                pending.append(contentsOf: members.values.map { ($0, level + 1) })
            case .array(let items):
                deepest = max(deepest, level + 1)
                pending.append(contentsOf: items.map { ($0, level + 1) })
            default: break
            }
        }
        return deepest
    }

    /// The member `key` of an object, `nil` for anything else.
    public subscript(key: String) -> JSONValue? {
        objectValue?[key]
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByFloatLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int) { self = .int(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(nilLiteral: ()) { self = .null }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}

extension JSONValue {
    /// A value from Foundation's untyped JSON (a notification's `userInfo`, `JSONSerialization`
    /// output): strings, numbers (booleans kept apart from 0 and 1), arrays, dictionaries and
    /// `NSNull`; nil for anything else (a date, data).
    public init?(any value: Any?) {
        switch value {
        case nil, is NSNull: self = .null
        case let string as String: self = .string(string)
        case let number as NSNumber:
            switch String(cString: number.objCType) {
            case "c", "B": self = .bool(number.boolValue)
            case "f", "d": self = .double(number.doubleValue)
            default: self = .int(number.intValue)
            }
        case let array as [Any]:
            var items: [JSONValue] = []
            for item in array {
                guard let converted = JSONValue(any: item) else { return nil }
                items.append(converted)
            }
            self = .array(items)
        case let object as [AnyHashable: Any]:
            var members: [String: JSONValue] = [:]
            for (key, item) in object {
                guard let key = key.base as? String, let converted = JSONValue(any: item) else { return nil }
                members[key] = converted
            }
            self = .object(members)
        default: return nil
        }
    }

    /// The value as Foundation's untyped JSON (a local notification's `userInfo`): the inverse
    /// of `init(any:)`.
    public var anyValue: Any {
        switch self {
        case .null: NSNull()
        case .bool(let value): value
        case .int(let value): value
        case .double(let value): value
        case .string(let value): value
        case .array(let items): items.map(\.anyValue)
        case .object(let members): members.mapValues(\.anyValue)
        }
    }
}
