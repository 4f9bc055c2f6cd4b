package import Foundation

// The schedule vocabulary the server's catalog and HeraldKit share (a track means the same on
// the device as on the server): durations, placeholders and a step's due time.

/// Durations as configuration and the API write them: `90` or `90s`, `30m`, `48h`, `2d`, and
/// sums such as `1h30m`; decimals allowed (`1.5h`).
package enum HeraldDuration {
    /// Seconds in each unit.
    static let units: [Character: Double] = ["s": 1, "m": 60, "h": 3600, "d": 86_400]

    /// The seconds `text` names, or nil when it is not a duration (empty, an unknown unit, a
    /// number without a unit after the first part, or not finite).
    package static func seconds(_ text: String) -> TimeInterval? {
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

    /// `seconds` as the catalog writes a duration, in its largest whole unit (`2d`, `36h`,
    /// `90m`, `45s`); `seconds(text(x)) == x`.
    package static func text(_ seconds: TimeInterval) -> String {
        for (unit, size) in [("d", 86_400.0), ("h", 3600), ("m", 60)]
        where seconds != 0 && seconds.truncatingRemainder(dividingBy: size) == 0 {
            return "\(Int64(seconds / size))\(unit)"
        }
        return seconds == seconds.rounded() && abs(seconds) < 1e15 ? "\(Int64(seconds))s" : "\(seconds)s"
    }
}

/// `{name}` placeholders in catalog copy, deep links and thread ids.
package enum Placeholders {
    /// The names in `template`, in order.
    package static func names(in template: String) -> [String] {
        var names: [String] = []
        var current: String?
        for character in template {
            if character == "{" {
                current = ""
            } else if character == "}", let name = current {
                if !name.isEmpty { names.append(name) }
                current = nil
            } else if current != nil {
                current!.append(character)
            }
        }
        return names
    }

    /// Fills placeholders from `data`; `nil` when one has no value.
    package static func render(_ template: String, data: [String: String]) -> String? {
        var result = template
        for name in names(in: template) {
            guard let value = data[name] else { return nil }
            result = result.replacingOccurrences(of: "{\(name)}", with: value)
        }
        return result
    }

    /// A title: filled from `data`, or with its placeholders removed when one has no value.
    package static func title(_ template: String, data: [String: String]) -> String {
        render(template, data: data) ?? stripped(template)
    }

    /// A body: filled from `data`; when a placeholder has no value, the fallback, or
    /// with its placeholders removed as a last resort.
    package static func body(_ template: String, fallback: String?, data: [String: String]) -> String {
        render(template, data: data) ?? fallback ?? stripped(template)
    }

    /// `template` without its `{placeholders}`.
    static func stripped(_ template: String) -> String {
        var text = template
        for name in names(in: template) { text = text.replacingOccurrences(of: "{\(name)}", with: "") }
        return text.replacingOccurrences(of: "  ", with: " ").trimmingCharacters(in: .whitespaces)
    }
}

/// When a track step is due.
package enum StepTime {
    /// A wall-clock time `HH:MM` (a step's `at`, quiet hours' bounds): hour and minute, or nil.
    package static func clockTime(_ text: String) -> (hour: Int, minute: Int)? {
        let parts = text.split(separator: ":")
        guard parts.count == 2, let hour = Int(parts[0]), let minute = Int(parts[1]), (0..<24).contains(hour),
            (0..<60).contains(minute)
        else { return nil }
        return (hour, minute)
    }

    /// For an anchor, in the user's zone. An absolute step is the anchor plus `after`. A
    /// wall-clock step (`at`: hour and minute) counts whole days on the calendar of `zone` (a day
    /// across a DST change is 23 or 25 hours: "2 days later at 10:00" stays 10:00), adds what is
    /// left of `after`, and takes `at` on the day reached; a time that does not exist that day
    /// (in the hour skipped in spring) moves an hour later, and one that happens twice (autumn) is the first.
    package static func due(anchor: Date, after: TimeInterval, at: (hour: Int, minute: Int)?, zone: TimeZone) -> Date {
        guard let at else { return anchor.addingTimeInterval(after) }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = zone
        let days = Int((after / 86_400).rounded(.down))
        let rest = after - Double(days) * 86_400
        let reached =
            (calendar.date(byAdding: .day, value: days, to: anchor) ?? anchor.addingTimeInterval(Double(days) * 86_400))
            .addingTimeInterval(rest)
        let day = calendar.startOfDay(for: reached)
        return calendar.nextDate(
            after: day.addingTimeInterval(-1), matching: DateComponents(hour: at.hour, minute: at.minute, second: 0),
            matchingPolicy: .nextTimePreservingSmallerComponents, repeatedTimePolicy: .first, direction: .forward)
            ?? reached
    }
}
