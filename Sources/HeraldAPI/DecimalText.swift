/// Whole numbers read from untrusted text: ASCII digits only (no sign, exponent, `inf` or hex),
/// at most `maximumDigits` of them, so the value always fits and nothing converts from a Double.
package enum DecimalText {
    package static func int64(_ text: some StringProtocol, maximumDigits: Int = 18) -> Int64? {
        let digits = text.utf8
        guard !digits.isEmpty, digits.count <= min(maximumDigits, 18) else { return nil }
        var value: Int64 = 0
        for byte in digits {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            value = value * 10 + Int64(byte - UInt8(ascii: "0"))
        }
        return value
    }
}
