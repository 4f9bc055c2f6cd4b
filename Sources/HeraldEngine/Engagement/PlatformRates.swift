package import Foundation
import HeraldCore
package import HeraldStore

/// An app's deliveries per platform over the last hours: accepted, failed and received, and
/// the received rate (received ÷ accepted), in all and for the current hour, so a bad
/// certificate environment, a build that drops receipts or a provider incident shows within
/// minutes. Received counts a delivery in the hour it was accepted.
package struct PlatformRates: Encodable, Sendable {
    package struct Hour: Encodable, Sendable {
        /// The hour's start (RFC 3339, UTC).
        package var hour: String
        package var counts: PlatformHourCounts

        enum CodingKeys: String, CodingKey { case hour }

        package func encode(to encoder: any Encoder) throws {
            try PlatformRates.encode(counts, rate: nil, to: encoder)
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(hour, forKey: .hour)
        }
    }

    package struct Platform: Encodable, Sendable {
        package var platform: String
        /// Every hour of the window.
        package var total = PlatformHourCounts()
        /// The current hour.
        package var current = PlatformHourCounts()
        /// The hours that counted something, oldest first.
        package var hours: [Hour] = []

        /// Received ÷ accepted over the window; nil before anything was accepted or while no
        /// receipt came (an app without receipts is not counted as losing every delivery).
        package var receivedRate: Double? { Self.rate(total, receipts: total.received > 0) }
        /// The same for the current hour (nil while the window has no receipt at all).
        package var currentRate: Double? { Self.rate(current, receipts: total.received > 0) }

        /// Whether the current hour's rate fell below four fifths of the window's, over at
        /// least `PlatformRates.minimumAccepted` deliveries: what the Overview marks.
        package var falling: Bool {
            guard current.accepted >= PlatformRates.minimumAccepted, let now = currentRate, let usual = receivedRate
            else { return false }
            return now < usual * 0.8
        }

        static func rate(_ counts: PlatformHourCounts, receipts: Bool) -> Double? {
            guard receipts, counts.accepted > 0 else { return nil }
            return AnalyticsView.rounded(Double(counts.received) / Double(counts.accepted))
        }

        enum CodingKeys: String, CodingKey {
            case platform, hours
            case currentHour = "current_hour"
        }
        package func encode(to encoder: any Encoder) throws {
            try PlatformRates.encode(total, rate: .some(receivedRate), to: encoder)
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(platform, forKey: .platform)
            try PlatformRates.encode(
                current, rate: .some(currentRate), to: container.superEncoder(forKey: .currentHour))
            try container.encode(hours, forKey: .hours)
        }
    }

    enum CountKeys: String, CodingKey {
        case accepted, failed, received
        case receivedRate = "received_rate"
    }

    /// `accepted`, `failed`, `received` and, when `rate` is given (its value may be nil),
    /// `received_rate`.
    static func encode(_ counts: PlatformHourCounts, rate: Double??, to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CountKeys.self)
        try container.encode(counts.accepted, forKey: .accepted)
        try container.encode(counts.failed, forKey: .failed)
        try container.encode(counts.received, forKey: .received)
        if let rate { try container.encode(rate, forKey: .receivedRate) }
    }

    /// The current hour's deliveries below which its rate is not judged.
    package static let minimumAccepted: Int64 = 100
    /// The window by default and at most, in hours.
    package static let defaultHours = 24
    package static let maximumHours = 24 * 14

    package var hours: Int
    package var platforms: [Platform]

    /// The first hour (hours since 1970) of a window of `hours` ending with the current one.
    package static func firstHour(now: Date, hours: Int) -> Int64 {
        PlatformHour.hour(of: now) - Int64(hours) + 1
    }

    /// `app`'s platforms from `counts` (as `TrackRepository.platformHours` reads them), over
    /// the `hours` hours ending with the current one; platforms in name order.
    package init(app: String, counts: [PlatformHour: PlatformHourCounts], now: Date, hours: Int) {
        self.hours = hours
        let first = Self.firstHour(now: now, hours: hours)
        let current = first + Int64(hours) - 1
        var platforms: [String: Platform] = [:]
        for (key, count) in counts.sorted(by: { $0.key.hour < $1.key.hour })
        where key.app == app && key.hour >= first && key.hour <= current {
            var platform = platforms[key.platform] ?? Platform(platform: key.platform)
            platform.total += count
            if key.hour == current { platform.current += count }
            platform.hours.append(
                Hour(hour: HeraldTime.format(Date(timeIntervalSince1970: Double(key.hour) * 3_600)), counts: count))
            platforms[key.platform] = platform
        }
        self.platforms = platforms.values.sorted { $0.platform < $1.platform }
    }
}
