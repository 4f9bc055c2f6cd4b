/// A strict, allocation-free check that bytes are one JSON object (RFC 8259): what the simulator
/// needs to accept or refuse a payload, without building a dictionary per request.
package enum JSONSyntax {
    /// Whether `bytes` are exactly one JSON object, surrounded by optional whitespace.
    package static func isObject(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var reader = Reader(bytes: bytes)
        reader.skipWhitespace()
        guard reader.peek == UInt8(ascii: "{"), reader.value(depth: 0) else { return false }
        reader.skipWhitespace()
        return reader.isAtEnd
    }

    private struct Reader {
        let bytes: UnsafeRawBufferPointer
        var index = 0
        static let maximumDepth = 64

        var isAtEnd: Bool { index >= bytes.count }
        var peek: UInt8? { index < bytes.count ? bytes[index] : nil }

        mutating func skipWhitespace() {
            while index < bytes.count {
                switch bytes[index] {
                case 0x20, 0x09, 0x0a, 0x0d: index += 1
                default: return
                }
            }
        }

        mutating func expect(_ literal: StaticString) -> Bool {
            let count = literal.utf8CodeUnitCount
            guard index + count <= bytes.count else { return false }
            let start = literal.utf8Start
            for offset in 0..<count where bytes[index + offset] != start[offset] { return false }
            index += count
            return true
        }

        mutating func value(depth: Int) -> Bool {
            guard depth < Self.maximumDepth, let byte = peek else { return false }
            switch byte {
            case UInt8(ascii: "{"): return object(depth: depth + 1)
            case UInt8(ascii: "["): return array(depth: depth + 1)
            case UInt8(ascii: "\""): return string()
            case UInt8(ascii: "t"): return expect("true")
            case UInt8(ascii: "f"): return expect("false")
            case UInt8(ascii: "n"): return expect("null")
            default: return number()
            }
        }

        mutating func object(depth: Int) -> Bool {
            index += 1
            skipWhitespace()
            if peek == UInt8(ascii: "}") {
                index += 1
                return true
            }
            while true {
                skipWhitespace()
                guard peek == UInt8(ascii: "\""), string() else { return false }
                skipWhitespace()
                guard peek == UInt8(ascii: ":") else { return false }
                index += 1
                skipWhitespace()
                guard value(depth: depth) else { return false }
                skipWhitespace()
                switch peek {
                case UInt8(ascii: ",")?: index += 1
                case UInt8(ascii: "}")?:
                    index += 1
                    return true
                default: return false
                }
            }
        }

        mutating func array(depth: Int) -> Bool {
            index += 1
            skipWhitespace()
            if peek == UInt8(ascii: "]") {
                index += 1
                return true
            }
            while true {
                skipWhitespace()
                guard value(depth: depth) else { return false }
                skipWhitespace()
                switch peek {
                case UInt8(ascii: ",")?: index += 1
                case UInt8(ascii: "]")?:
                    index += 1
                    return true
                default: return false
                }
            }
        }

        mutating func string() -> Bool {
            index += 1
            while index < bytes.count {
                let byte = bytes[index]
                switch byte {
                case UInt8(ascii: "\""):
                    index += 1
                    return true
                case UInt8(ascii: "\\"):
                    index += 1
                    guard let escaped = peek else { return false }
                    switch escaped {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"),
                        UInt8(ascii: "f"), UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                        index += 1
                    case UInt8(ascii: "u"):
                        guard index + 4 < bytes.count else { return false }
                        for offset in 1...4 where !bytes[index + offset].isHexDigitByte { return false }
                        index += 5
                    default:
                        return false
                    }
                case 0x00..<0x20:
                    return false
                default:
                    index += 1
                }
            }
            return false
        }

        mutating func number() -> Bool {
            let start = index
            if peek == UInt8(ascii: "-") { index += 1 }
            guard let first = peek, first.isDigit else { return false }
            if first == UInt8(ascii: "0") {
                index += 1
            } else {
                while let digit = peek, digit.isDigit { index += 1 }
            }
            if peek == UInt8(ascii: ".") {
                index += 1
                guard let digit = peek, digit.isDigit else { return false }
                while let digit = peek, digit.isDigit { index += 1 }
            }
            if peek == UInt8(ascii: "e") || peek == UInt8(ascii: "E") {
                index += 1
                if peek == UInt8(ascii: "+") || peek == UInt8(ascii: "-") { index += 1 }
                guard let digit = peek, digit.isDigit else { return false }
                while let digit = peek, digit.isDigit { index += 1 }
            }
            return index > start
        }
    }
}

extension UInt8 {
    fileprivate var isDigit: Bool { self >= 0x30 && self <= 0x39 }
    fileprivate var isHexDigitByte: Bool {
        isDigit || (self >= 0x61 && self <= 0x66) || (self >= 0x41 && self <= 0x46)
    }
}
