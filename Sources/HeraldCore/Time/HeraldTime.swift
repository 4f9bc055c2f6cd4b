package import Foundation

/// RFC 3339 times as the API writes and reads them. `Date.ISO8601FormatStyle` is a value type:
/// no formatter object is shared between threads (swift-corelibs-foundation's
/// `ISO8601DateFormatter` is not safe to share).
package enum HeraldTime {
    private static let withFraction = Date.ISO8601FormatStyle(includingFractionalSeconds: true)
    private static let plain = Date.ISO8601FormatStyle()

    /// `2026-11-23T09:00:00.000Z`: UTC, with milliseconds.
    package static func format(_ date: Date) -> String { withFraction.format(date) }

    /// Parses an RFC 3339 time with or without fractional seconds.
    package static func parse(_ text: String) -> Date? {
        (try? withFraction.parse(text)) ?? (try? plain.parse(text))
    }
}
