public import Foundation

/// Durations as configuration and the API write them: `90` or `90s`, `30m`, `48h`, `2d`, and
/// sums such as `1h30m`; decimals allowed (`1.5h`).
public enum HeraldDuration {
    /// Seconds in each unit.
    static let units: [Character: Double] = ["s": 1, "m": 60, "h": 3600, "d": 86_400]

    /// The seconds `text` names, or nil when it is not a duration (empty, an unknown unit, a
    /// number without a unit after the first part, or not finite).
    public static func seconds(_ text: String) -> TimeInterval? {
        if let plain = Double(text) { return plain.isFinite ? plain : nil }
        var total = 0.0
        var number = ""
        for character in text {
            if character.isASCII && (character.isNumber || character == ".") {
                number.append(character)
            } else if let unit = units[character], let value = Double(number) {
                total += value * unit
                number = ""
            } else {
                return nil
            }
        }
        guard number.isEmpty, !text.isEmpty, total.isFinite else { return nil }
        return total
    }
}
