package import Foundation

/// A small JSON writer for bodies built once per device (FCM messages): bytes appended directly,
/// strings escaped per RFC 8259, object keys of a `JSONValue` written in sorted order so the same
/// value always gives the same bytes. Many times cheaper than `JSONSerialization` on Linux, which
/// bridges every dictionary through `NSDictionary`.
package struct JSONWriter: Sendable {
    package private(set) var bytes: [UInt8] = []

    package init(capacity: Int = 256) {
        bytes.reserveCapacity(capacity)
    }

    /// Appends text as it is (punctuation and keys known to need no escaping).
    package mutating func raw(_ text: StaticString) {
        text.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }

    /// Appends a quoted, escaped string.
    package mutating func string(_ text: String) {
        bytes.append(UInt8(ascii: "\""))
        var text = text
        text.withUTF8 { utf8 in
            var start = 0
            for index in 0..<utf8.count {
                let byte = utf8[index]
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start..<index]))
                start = index + 1
                bytes.append(UInt8(ascii: "\\"))
                switch byte {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"): bytes.append(byte)
                case 0x0A: bytes.append(UInt8(ascii: "n"))
                case 0x0D: bytes.append(UInt8(ascii: "r"))
                case 0x09: bytes.append(UInt8(ascii: "t"))
                case 0x08: bytes.append(UInt8(ascii: "b"))
                case 0x0C: bytes.append(UInt8(ascii: "f"))
                default:
                    let hex: [UInt8] = Array("0123456789abcdef".utf8)
                    bytes.append(contentsOf: [
                        UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hex[Int(byte >> 4)],
                        hex[Int(byte & 0xF)],
                    ])
                }
            }
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start..<utf8.count]))
        }
        bytes.append(UInt8(ascii: "\""))
    }

    /// Appends a whole number in decimal.
    package mutating func integer(_ value: Int64) {
        var rest = value.magnitude
        if rest < 10 && value >= 0 { return bytes.append(UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: rest)) }
        // Digits written backwards into a stack buffer and appended once: an append per digit and
        // a reverse cost several times more (this runs for every id of every bulk row and line).
        // Int64's magnitude has at most 19 digits; with the sign, 20.
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            var index = digits.count
            repeat {
                index -= 1
                digits[index] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: rest % 10)
                rest /= 10
            } while rest > 0
            if value < 0 {
                index -= 1
                digits[index] = UInt8(ascii: "-")
            }
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: digits[index...]))
        }
    }

    /// Appends a UUID as a quoted string, upper-case like `uuidString`, without making the string.
    package mutating func uuid(_ id: UUID) {
        let hex: StaticString = "0123456789ABCDEF"
        bytes.append(UInt8(ascii: "\""))
        withUnsafeBytes(of: id.uuid) { raw in
            hex.withUTF8Buffer { digits in
                for index in 0..<16 {
                    if index == 4 || index == 6 || index == 8 || index == 10 { bytes.append(UInt8(ascii: "-")) }
                    let byte = raw[index]
                    bytes.append(digits[Int(byte >> 4)])
                    bytes.append(digits[Int(byte & 0x0F)])
                }
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    /// Appends a number in the shortest form that reads back as the same `Double` (`null` for
    /// one that is not finite).
    package mutating func number(_ value: Double) {
        guard value.isFinite else { return raw("null") }
        bytes.append(contentsOf: String(value).utf8)
    }

    /// Appends `true` or `false`.
    package mutating func bool(_ flag: Bool) {
        flag ? raw("true") : raw("false")
    }

    /// Appends `"key":` .
    package mutating func key(_ key: String) {
        string(key)
        bytes.append(UInt8(ascii: ":"))
    }

    /// Appends `{"key":"value",…}` with the members in the order given; `nil` values are left out.
    package mutating func stringObject(_ members: some Sequence<(String, String?)>) {
        bytes.append(UInt8(ascii: "{"))
        var first = true
        for (key, value) in members {
            guard let value else { continue }
            if !first { bytes.append(UInt8(ascii: ",")) }
            first = false
            self.key(key)
            string(value)
        }
        bytes.append(UInt8(ascii: "}"))
    }

    /// Appends any JSON value; object keys sorted. Non-finite doubles, which JSON cannot carry, become `null`.
    package mutating func value(_ value: JSONValue) {
        switch value {
        case .null: raw("null")
        case .bool(let flag): bool(flag)
        case .int(let number): integer(Int64(number))
        case .double(let number):
            if number.isFinite { bytes.append(contentsOf: "\(number)".utf8) } else { raw("null") }
        case .string(let text): string(text)
        case .array(let items):
            bytes.append(UInt8(ascii: "["))
            for (index, item) in items.enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                self.value(item)
            }
            bytes.append(UInt8(ascii: "]"))
        case .object(let members):
            bytes.append(UInt8(ascii: "{"))
            for (index, key) in members.keys.sorted().enumerated() {
                if index > 0 { bytes.append(UInt8(ascii: ",")) }
                self.key(key)
                self.value(members[key]!)
            }
            bytes.append(UInt8(ascii: "}"))
        }
    }

    /// One value as a string of JSON.
    package static func encode(_ value: JSONValue) -> String {
        var writer = JSONWriter(capacity: 64)
        writer.value(value)
        return String(decoding: writer.bytes, as: UTF8.self)
    }
}
