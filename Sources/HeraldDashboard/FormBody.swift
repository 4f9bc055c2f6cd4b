import HeraldEngine

/// `application/x-www-form-urlencoded` parsed by a total function: fields split on `&`, name and
/// value on the first `=`, `+` read as a space, `%XX` decoded; a `%` without two hex digits, or
/// bytes that are not UTF-8 once decoded, make the whole body invalid. Nothing here traps, and no
/// untrusted text is handed to a Foundation URL setter (those call `fatalError` on bad input).
enum FormBody {
    /// What is wrong with a body that does not parse.
    struct Invalid: Error, Equatable {
        var message: String
    }

    /// The fields of `bytes`; the first of a repeated name wins.
    static func parse(_ bytes: some Collection<UInt8>) -> Result<[String: String], Invalid> {
        var fields: [String: String] = [:]
        var name: [UInt8] = []
        var value: [UInt8] = []
        var inValue = false
        func finish() -> Invalid? {
            defer {
                name.removeAll(keepingCapacity: true)
                value.removeAll(keepingCapacity: true)
                inValue = false
            }
            if name.isEmpty && value.isEmpty && !inValue { return nil }
            guard let decodedName = decode(name) else {
                return Invalid(message: "a field name is not valid percent-encoded UTF-8")
            }
            guard let decodedValue = decode(value) else {
                return Invalid(
                    message: "the value of \(String(decodedName.prefix(64))) is not valid percent-encoded UTF-8")
            }
            if fields[decodedName] == nil { fields[decodedName] = decodedValue }
            return nil
        }
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "&"):
                if let invalid = finish() { return .failure(invalid) }
            case UInt8(ascii: "=") where !inValue:
                inValue = true
            default:
                if inValue { value.append(byte) } else { name.append(byte) }
            }
        }
        if let invalid = finish() { return .failure(invalid) }
        return .success(fields)
    }

    /// Percent- and plus-decodes `raw`; nil when an escape is broken or the result is not UTF-8.
    static func decode(_ raw: [UInt8]) -> String? {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(raw.count)
        var index = 0
        while index < raw.count {
            let byte = raw[index]
            if byte == UInt8(ascii: "%") {
                guard index + 2 < raw.count, let high = hex(raw[index + 1]), let low = hex(raw[index + 2]) else {
                    return nil
                }
                bytes.append(high << 4 | low)
                index += 3
            } else {
                bytes.append(byte == UInt8(ascii: "+") ? UInt8(ascii: " ") : byte)
                index += 1
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    static func hex(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
