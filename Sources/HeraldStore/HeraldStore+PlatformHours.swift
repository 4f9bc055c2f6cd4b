package import Foundation
import HeraldCore
import Synchronization

/// Deliveries answered and received per app, platform and hour (`platform_hours`): what the
/// Overview's received rate per app and platform reads, so a bad certificate environment, a
/// build that drops receipts or a provider incident shows within minutes without reading
/// deliveries.
package struct PlatformHour: Hashable, Sendable {
    package var app: String
    package var platform: String
    /// Hours since 1970 (UTC).
    package var hour: Int64

    package init(app: String, platform: String, hour: Int64) {
        self.app = app
        self.platform = platform
        self.hour = hour
    }

    /// The hour of `date`.
    package static func hour(of date: Date) -> Int64 {
        Int64(exactly: (date.timeIntervalSince1970 / 3_600).rounded(.down)) ?? 0
    }

    /// The hour of a Unix time in milliseconds.
    package static func hour(ofMilliseconds milliseconds: Int64) -> Int64 {
        milliseconds >= 0 ? milliseconds / 3_600_000 : (milliseconds + 1) / 3_600_000 - 1
    }
}

/// What an hour of one app's platform counted.
package struct PlatformHourCounts: Sendable, Equatable {
    /// Deliveries its provider accepted in that hour.
    package var accepted: Int64 = 0
    /// Deliveries that failed in that hour.
    package var failed: Int64 = 0
    /// Deliveries accepted in that hour whose device reported them received (first receipts).
    package var received: Int64 = 0

    package init(accepted: Int64 = 0, failed: Int64 = 0, received: Int64 = 0) {
        self.accepted = accepted
        self.failed = failed
        self.received = received
    }

    package static func + (lhs: PlatformHourCounts, rhs: PlatformHourCounts) -> PlatformHourCounts {
        PlatformHourCounts(
            accepted: lhs.accepted + rhs.accepted, failed: lhs.failed + rhs.failed,
            received: lhs.received + rhs.received)
    }

    package static func += (lhs: inout PlatformHourCounts, rhs: PlatformHourCounts) { lhs = lhs + rhs }
}

extension StoreRepository {
    /// Adds `counts` to their hours, in the caller's transaction. SQLite adds to each
    /// (app, platform, hour) row in place; PostgreSQL inserts the counts as rows of their own
    /// (summed when read, folded by the retention pass), so nodes writing results at once never
    /// wait on a shared row.
    func addToPlatformHours(_ counts: [PlatformHour: PlatformHourCounts], _ session: Session) async throws {
        let nonzero = counts.filter { $0.value != PlatformHourCounts() && !$0.key.platform.isEmpty }
        guard !nonzero.isEmpty, database.keepsPlatformHours.load(ordering: .relaxed) else { return }
        var rows = BulkRows(
            [
                ("app_id", .text), ("platform", .text), ("hour", .integer), ("accepted", .integer),
                ("failed", .integer), ("received", .integer),
            ], capacity: nonzero.count)
        for (key, count) in nonzero.sorted(by: {
            ($0.key.app, $0.key.platform, $0.key.hour) < ($1.key.app, $1.key.platform, $1.key.hour)
        }) {
            for cell: BulkRows.Cell in [
                .text(key.app), .text(key.platform), .integer(key.hour), .integer(count.accepted),
                .integer(count.failed), .integer(count.received),
            ] { rows.append(cell) }
        }
        let upsert =
            dialect == .sqlite
            ? """
             WHERE true ON CONFLICT (app_id, platform, hour) DO UPDATE SET accepted = platform_hours.accepted + excluded.accepted,
                failed = platform_hours.failed + excluded.failed, received = platform_hours.received + excluded.received
            """ : ""
        _ = try await session.query([], rows: rows) { source in
            """
            INSERT INTO platform_hours (app_id, platform, hour, accepted, failed, received)
            SELECT r.app_id, r.platform, r.hour, r.accepted, r.failed, r.received FROM \(source)\(upsert)
            """
        }
    }
}

extension TrackRepository {
    /// The hours of `appIDs` from `since` (hours since 1970) on, per app and platform.
    package func platformHours(appIDs: [String], since: Int64) async throws -> [PlatformHour: PlatformHourCounts] {
        guard !appIDs.isEmpty else { return [:] }
        return try await reading { session in
            var counts: [PlatformHour: PlatformHourCounts] = [:]
            for row in try await session.query(
                """
                SELECT app_id, platform, hour, sum(accepted), sum(failed), sum(received) FROM platform_hours
                WHERE hour >= $1 AND app_id IN (\(SQLText.placeholders(appIDs.count, from: 2)))
                GROUP BY app_id, platform, hour
                """, [.integer(since)] + appIDs.map { .text($0) })
            {
                guard row.count == 6, let app = row[0].text, let platform = row[1].text, let hour = row[2].integer
                else { continue }
                counts[PlatformHour(app: app, platform: platform, hour: hour)] = PlatformHourCounts(
                    accepted: row[3].integer ?? 0, failed: row[4].integer ?? 0, received: row[5].integer ?? 0)
            }
            return counts
        }
    }
}

/// What written results add per app and platform. A batch holds a few (app, platform) pairs:
/// a short list searched in order costs less than hashing two strings per result.
struct PlatformTally {
    private var pairs: [(app: String, platform: String, counts: PlatformHourCounts)] = []

    /// Adds `count` rows written with `status` (sent: accepted; failed: failed; others nothing).
    mutating func add(app: String, platform: String, _ status: DeliveryStatus, _ count: Int) {
        guard count > 0 else { return }
        switch status {
        case .sent: add(app: app, platform: platform, PlatformHourCounts(accepted: Int64(count)))
        case .failed: add(app: app, platform: platform, PlatformHourCounts(failed: Int64(count)))
        default: break
        }
    }

    mutating func add(app: String, platform: String, _ counts: PlatformHourCounts) {
        guard !platform.isEmpty else { return }
        if let index = pairs.firstIndex(where: { $0.platform == platform && $0.app == app }) {
            pairs[index].counts += counts
        } else {
            pairs.append((app, platform, counts))
        }
    }

    /// Adds each result's accepted or failed.
    mutating func add(_ results: [DeliveryResult]) {
        for result in results {
            if let counts = result.platformHourCounts { add(app: result.appID, platform: result.platform, counts) }
        }
    }

    mutating func merge(_ other: PlatformTally) {
        for pair in other.pairs { add(app: pair.app, platform: pair.platform, pair.counts) }
    }

    /// The tally as `hour`'s counts.
    func hours(at hour: Int64) -> [PlatformHour: PlatformHourCounts] {
        var hours: [PlatformHour: PlatformHourCounts] = [:]
        for pair in pairs {
            hours[PlatformHour(app: pair.app, platform: pair.platform, hour: hour), default: .init()] += pair.counts
        }
        return hours
    }

    /// `[[app, platform, count], …]` (PostgreSQL's `json_agg` of a statement's rows) as pairs.
    static func pairs(fromJSON text: String?) -> [(app: String, platform: String, count: Int)] {
        guard let text, let rows = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [[Any]] else {
            return []
        }
        return rows.compactMap { row in
            guard row.count == 3, let app = row[0] as? String, let platform = row[1] as? String,
                let count = (row[2] as? NSNumber)?.int64Value, let exact = Int(exactly: count)
            else { return nil }
            return (app, platform, exact)
        }
    }
}

extension DeliveryResult {
    /// What the result adds to its platform's hour once written: accepted or failed.
    var platformHourCounts: PlatformHourCounts? {
        answered.map { $0 == .sent ? PlatformHourCounts(accepted: 1) : PlatformHourCounts(failed: 1) }
    }

    /// What the provider's answer made of the delivery, when it was answered: sent (accepted)
    /// or failed; nil for a retry, a deferral or a suppression (not answered yet, or not sent).
    var answered: DeliveryStatus? {
        switch outcome {
        case .sent: .sent
        case .failed, .tokenDead: .failed
        case .retry, .deferred, .suppressed: nil
        }
    }
}
