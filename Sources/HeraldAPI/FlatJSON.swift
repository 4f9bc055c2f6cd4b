import HeraldPayload

/// The hot routes' fast path: a JSON object of plain members — strings without escapes, whole
/// numbers without sign, exponent or leading zero, `true`, `false`, `null` — read straight from the
/// bytes (JSONDecoder costs several microseconds a body on Linux; an open or a receipt is a few
/// dozen bytes). Anything else — a nested value, an escape, a repeated key, bad UTF-8, broken JSON
/// — makes `members` nil, and the caller decodes the body with JSONDecoder, which accepts or
/// refuses it with the field named, exactly as without this path.
enum FlatJSON {
    /// A member's value; strings and keys are ranges of the bytes read.
    enum Value {
        case string(Range<Int>)
        case integer(Int64)
        case bool(Bool)
        case null
    }

    /// The members of the object in `bytes`, in order; nil for anything but a flat object
    /// without repeated keys.
    static func members(_ bytes: UnsafeRawBufferPointer) -> [(key: Range<Int>, value: Value)]? {
        var members: [(key: Range<Int>, value: Value)] = []
        guard
            visit(
                bytes,
                { key, value in
                    members.append((key, value))
                    return true
                })
        else { return nil }
        // A repeated key: which one JSONDecoder keeps is its business.
        for (index, member) in members.enumerated() {
            for other in members[..<index] where other.key.count == member.key.count {
                if bytes[other.key].elementsEqual(bytes[member.key]) { return nil }
            }
        }
        return members
    }

    /// Hands each member of the flat object in `bytes` to `member`, in order, without keeping
    /// them (repeated keys are the caller's to notice); false when `bytes` is not such an object
    /// or `member` answered false.
    static func visit(_ bytes: UnsafeRawBufferPointer, _ member: (Range<Int>, Value) -> Bool) -> Bool {
        var reader = JSONByteReader(bytes: bytes)
        reader.skipWhitespace()
        guard reader.take(UInt8(ascii: "{")) else { return false }
        reader.skipWhitespace()
        if !reader.take(UInt8(ascii: "}")) {
            repeat {
                reader.skipWhitespace()
                guard let key = reader.string() else { return false }
                reader.skipWhitespace()
                guard reader.take(UInt8(ascii: ":")) else { return false }
                reader.skipWhitespace()
                guard let value = reader.scalar(), member(key, value) else { return false }
                reader.skipWhitespace()
            } while reader.take(UInt8(ascii: ","))
            guard reader.take(UInt8(ascii: "}")) else { return false }
        }
        reader.skipWhitespace()
        return reader.isAtEnd
    }

    /// Whether the key at `range` is `name`.
    static func key(_ range: Range<Int>, in bytes: UnsafeRawBufferPointer, is name: StaticString) -> Bool {
        name.utf8CodeUnitCount == range.count
            && bytes[range].elementsEqual(UnsafeRawBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
    }

    /// The text of a string's range; nil when it is not valid UTF-8.
    static func text(_ range: Range<Int>, in bytes: UnsafeRawBufferPointer) -> String? {
        String(validating: UnsafeRawBufferPointer(rebasing: bytes[range]), as: UTF8.self)
    }
}

/// `FlatJSON`'s cursor over the bytes: each read answers nil for what it does not take.
private struct JSONByteReader {
    let bytes: UnsafeRawBufferPointer
    var index = 0

    var isAtEnd: Bool { index == bytes.count }

    mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0a, 0x0d: index += 1
            default: return
            }
        }
    }

    mutating func take(_ byte: UInt8) -> Bool {
        guard index < bytes.count, bytes[index] == byte else { return false }
        index += 1
        return true
    }

    /// Takes `word` (`null`, `true`, `false`) when it comes next.
    mutating func take(word: StaticString) -> Bool {
        let count = word.utf8CodeUnitCount
        guard index + count <= bytes.count,
            bytes[index..<(index + count)].elementsEqual(UnsafeRawBufferPointer(start: word.utf8Start, count: count))
        else { return false }
        index += count
        return true
    }

    /// The range of a string's contents; nil for anything but a plain string (no escapes,
    /// no control characters).
    mutating func string() -> Range<Int>? {
        guard take(UInt8(ascii: "\"")) else { return nil }
        let start = index
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                index += 1
                return start..<(index - 1)
            }
            if byte == UInt8(ascii: "\\") || byte < 0x20 { return nil }
            index += 1
        }
        return nil
    }

    /// A whole number of 1 to 18 digits, no sign, no leading zero, no fraction or exponent after.
    mutating func integer() -> Int64? {
        let start = index
        var value: Int64 = 0
        while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) {
            guard index - start < 18 else { return nil }
            value = value * 10 + Int64(bytes[index] - UInt8(ascii: "0"))
            index += 1
        }
        let digits = index - start
        guard digits > 0, digits == 1 || bytes[start] != UInt8(ascii: "0") else { return nil }
        if index < bytes.count, [UInt8(ascii: "."), UInt8(ascii: "e"), UInt8(ascii: "E")].contains(bytes[index]) {
            return nil
        }
        return value
    }

    /// A string, a whole number, `true`, `false` or `null`.
    mutating func scalar() -> FlatJSON.Value? {
        guard index < bytes.count else { return nil }
        switch bytes[index] {
        case UInt8(ascii: "\""): return string().map { .string($0) }
        case UInt8(ascii: "n"): return take(word: "null") ? .null : nil
        case UInt8(ascii: "t"): return take(word: "true") ? .bool(true) : nil
        case UInt8(ascii: "f"): return take(word: "false") ? .bool(false) : nil
        default: return integer().map { .integer($0) }
        }
    }
}

/// A body the hot routes read with `FlatJSON` first (`HeraldAPI.decode` takes that path for it).
protocol FlatDecodable: Decodable {
    /// The body read from a flat object; nil when it must go through JSONDecoder.
    init?(flat bytes: UnsafeRawBufferPointer)
}

extension FlatJSON {
    /// A member's text for an optional string field: nil for `null`; no answer at all (the outer
    /// nil) for another kind of value or bad UTF-8.
    static func optionalText(_ value: Value, in bytes: UnsafeRawBufferPointer) -> String?? {
        switch value {
        case .null: return .some(nil)
        case .string(let range): return text(range, in: bytes).map { .some($0) }
        case .integer, .bool: return nil
        }
    }

    /// A report's `delivery_id` as `JSONValue` decoding reads it: a number, a string, or nil for
    /// `null`; no answer (the outer nil) for a value only JSONDecoder should judge.
    static func deliveryID(_ value: Value, in bytes: UnsafeRawBufferPointer) -> JSONValue?? {
        switch value {
        case .null: return .some(nil)
        case .integer(let number): return .some(.int(Int(number)))
        case .string(let range): return text(range, in: bytes).map { .some(.string($0)) }
        case .bool: return nil
        }
    }
}
