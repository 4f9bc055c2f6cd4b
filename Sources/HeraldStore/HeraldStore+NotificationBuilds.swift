import Foundation
import HeraldCore
import Synchronization

/// A notification's deliveries per build (the device's platform and app version):
/// `notification_builds`, one row per (notification, platform, app version) with its sent,
/// failed, received and opened and when the first and last were sent. The funnel per build and
/// "accepted, not received" read these few rows rather than every delivery of the days asked.
///
/// Each event is counted under the build the device had when it happened: a result under the
/// build read with its claim, a receipt under the build the receipt carried, an open under the
/// device's build at the open. Every writer adds to these rows after it updated the same
/// notifications' counters in its transaction, so on PostgreSQL a writer adding to a
/// notification's builds already holds that notification's row lock: no two writers take these
/// rows in opposite orders. The same counts summed per type, day and build (`type_builds`, rows
/// every notification of a type and day shares) are added in the statement after, in key order,
/// once per transaction and after every notification row it updates: a writer holding one of
/// them never waits for a notification another writer holds.
///
/// `BuildTally` is what one transaction adds. A batch of results holds a few (notification,
/// build) keys: a short list searched in order costs less than hashing a key per result (as
/// `PlatformTally` does).
struct BuildTally {
    struct Counts {
        var sent: Int64 = 0
        var failed: Int64 = 0
        var received: Int64 = 0
        var opened: Int64 = 0
        /// When the sent ones were written (their rows' `updated_at`).
        var sentAt: Int64?
    }

    /// (notification, platform, app version: "" when the device reported none) and its counts.
    private(set) var counts: [(notification: UUID, platform: String, version: String, counts: Counts)] = []

    var isEmpty: Bool { counts.isEmpty }

    /// Applies `change` to the counts of (notification, platform, version), added if new.
    private mutating func update(
        _ notification: UUID, _ platform: String, _ version: String?, _ change: (inout Counts) -> Void
    ) {
        let version = version ?? ""
        if let index = counts.firstIndex(where: {
            $0.notification == notification && $0.platform == platform && $0.version == version
        }) {
            change(&counts[index].counts)
        } else {
            var added = Counts()
            change(&added)
            counts.append((notification, platform, version, added))
        }
    }

    /// `count` results written with `status` at `at` (sent or failed; others add nothing).
    mutating func add(
        notification: UUID, platform: String, version: String?, _ status: DeliveryStatus, _ count: Int, at: Int64
    ) {
        guard count > 0, status == .sent || status == .failed else { return }
        update(notification, platform, version) { counts in
            if status == .sent {
                counts.sent += Int64(count)
                counts.sentAt = at
            } else {
                counts.failed += Int64(count)
            }
        }
    }

    /// Each result's sent or failed, written at `at`.
    mutating func add(_ results: [DeliveryResult], at: Int64) {
        for result in results {
            guard let status = result.answered else { continue }
            add(
                notification: result.notificationID, platform: result.platform, version: result.appVersion, status, 1,
                at: at)
        }
    }

    mutating func addReceived(notification: UUID, platform: String, version: String?) {
        update(notification, platform, version) { $0.received += 1 }
    }

    /// A delivery's first open, under its device's build now (an answered delivery's only: a
    /// delivery opened before its answer was written, or cancelled, is not in the funnel).
    mutating func addOpened(_ delivery: TrackRepository.DeliveryReference) {
        guard delivery.status == .sent || delivery.status == .failed else { return }
        update(delivery.notificationID, delivery.platform, delivery.appVersion) { $0.opened += 1 }
    }

    /// `[[notification, platform, version, count], …]` (PostgreSQL's `json_agg` of a
    /// statement's rows).
    static func rows(fromJSON text: String?) -> [(notification: UUID, platform: String, version: String, count: Int)] {
        guard let text, let rows = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [[Any]] else {
            return []
        }
        return rows.compactMap { row in
            guard row.count == 4, let notification = (row[0] as? String).flatMap(UUID.init(uuidString:)),
                let platform = row[1] as? String, let version = row[2] as? String,
                let count = (row[3] as? NSNumber)?.int64Value, let exact = Int(exactly: count)
            else { return nil }
            return (notification, platform, version, exact)
        }
    }

    mutating func merge(_ other: BuildTally) {
        for entry in other.counts {
            update(entry.notification, entry.platform, entry.version) { kept in
                kept.sent += entry.counts.sent
                kept.failed += entry.counts.failed
                kept.received += entry.counts.received
                kept.opened += entry.counts.opened
                if let at = entry.counts.sentAt { kept.sentAt = max(kept.sentAt ?? at, at) }
            }
        }
    }
}

extension StoreRepository {
    /// Adds `tally` to its rows, in the caller's transaction, in key order.
    func addToNotificationBuilds(_ tally: BuildTally, _ session: Session) async throws {
        guard !tally.isEmpty, database.keepsNotificationBuilds.load(ordering: .relaxed) else { return }
        var rows = BulkRows(
            [
                ("notification_id", .text), ("platform", .text), ("app_version", .text), ("sent", .integer),
                ("failed", .integer), ("received", .integer), ("opened", .integer), ("sent_at", .integer),
            ], capacity: tally.counts.count)
        let keyed = tally.counts.map { (notification: $0.notification.uuidString, entry: $0) }
        for (notification, entry) in keyed.sorted(by: {
            ($0.notification, $0.entry.platform, $0.entry.version) < (
                $1.notification, $1.entry.platform, $1.entry.version
            )
        }) {
            let counts = entry.counts
            for cell: BulkRows.Cell in [
                .text(notification), .text(entry.platform), .text(entry.version), .integer(counts.sent),
                .integer(counts.failed), .integer(counts.received), .integer(counts.opened),
                .integer(counts.sentAt ?? -1),
            ] { rows.append(cell) }
        }
        _ = try await session.query([], rows: rows) { source in
            """
            INSERT INTO notification_builds (notification_id, platform, app_version, sent, failed, received, opened, first_sent_at, last_sent_at)
            SELECT r.notification_id, r.platform, r.app_version, r.sent, r.failed, r.received, r.opened,
                NULLIF(r.sent_at, -1), NULLIF(r.sent_at, -1)
            FROM \(source) WHERE true
            ON CONFLICT (notification_id, platform, app_version) DO UPDATE SET
                sent = notification_builds.sent + excluded.sent, failed = notification_builds.failed + excluded.failed,
                received = notification_builds.received + excluded.received,
                opened = notification_builds.opened + excluded.opened,
                first_sent_at = CASE WHEN excluded.first_sent_at IS NULL
                    OR (notification_builds.first_sent_at IS NOT NULL AND notification_builds.first_sent_at <= excluded.first_sent_at)
                    THEN notification_builds.first_sent_at ELSE excluded.first_sent_at END,
                last_sent_at = CASE WHEN excluded.last_sent_at IS NULL
                    OR (notification_builds.last_sent_at IS NOT NULL AND notification_builds.last_sent_at >= excluded.last_sent_at)
                    THEN notification_builds.last_sent_at ELSE excluded.last_sent_at END
            """
        }
        guard database.keepsTypeBuilds.load(ordering: .relaxed) else { return }
        // The same counts summed per type, day and build of the notifications that have a type,
        // in key order (PostgreSQL: rows shared by every notification of a type and day are
        // locked in one order by every writer).
        _ = try await session.query([], rows: rows) { source in
            """
            INSERT INTO type_builds (app_id, type, day, platform, app_version, sent, failed, received, opened)
            SELECT n.app_id, n.type, n.day, r.platform, r.app_version, sum(r.sent), sum(r.failed), sum(r.received),
                sum(r.opened)
            FROM \(source) JOIN notifications n ON n.id = r.notification_id
            WHERE n.type IS NOT NULL AND n.day IS NOT NULL
            GROUP BY n.app_id, n.type, n.day, r.platform, r.app_version
            ORDER BY n.app_id, n.type, n.day, r.platform, r.app_version
            ON CONFLICT (app_id, type, day, platform, app_version) DO UPDATE SET
                sent = type_builds.sent + excluded.sent, failed = type_builds.failed + excluded.failed,
                received = type_builds.received + excluded.received, opened = type_builds.opened + excluded.opened
            """
        }
    }
}

extension TrackRepository {
    /// A build: the device's platform and app version (nil when it reported none).
    struct Build: Hashable {
        var platform: String
        var version: String?
    }

    /// One notification's deliveries to one build, as `notification_builds` holds them: what
    /// "accepted, not received" reads of it.
    struct NotificationBuild {
        var type: String
        var day: Int64
        var notification: String
        var build: Build
        var sent: Int64
        var received: Int64
        var firstSentAt: Int64?
    }

    /// The binds and WHERE terms that select an app's rows of `type_builds` (as `t`) of `days`
    /// (of `type`).
    static func typeBuildsScope(appID: String, days: ClosedRange<Int64>, type: String?) -> ([Session.Value], String) {
        var binds: [Session.Value] = [.text(appID), .integer(days.lowerBound), .integer(days.upperBound)]
        var terms = "t.app_id = $1 AND t.day >= $2 AND t.day <= $3"
        if let type {
            binds.append(.text(type))
            terms += " AND t.type = $4"
        }
        return (binds, terms)
    }

    /// One build's rows of an app's typed notifications of `days` (of `type`) last sent at or
    /// after `since` whose sent and received differ, through their partial index
    /// (`notification_builds_unreceived`), the build's rows first (`CROSS JOIN` keeps SQLite
    /// from starting at the notifications).
    func recentlySent(
        _ build: Build, appID: String, days: ClosedRange<Int64>, type: String?, since: Int64, _ session: Session
    ) async throws -> [NotificationBuild] {
        var binds: [Session.Value] = [
            .text(appID), .integer(days.lowerBound), .integer(days.upperBound), .text(build.platform),
            .text(build.version ?? ""), .integer(since),
        ]
        var terms = "n.app_id = $1 AND n.type IS NOT NULL AND n.day >= $2 AND n.day <= $3"
        if let type {
            binds.append(.text(type))
            terms += " AND n.type = $7"
        }
        return try await session.query(
            """
            SELECT n.type, n.day, b.notification_id, b.sent, b.received, b.first_sent_at
            FROM notification_builds b CROSS JOIN notifications n
            WHERE b.platform = $4 AND b.app_version = $5 AND b.last_sent_at >= $6 AND b.sent <> b.received
                AND n.id = b.notification_id AND \(terms)
            """, binds
        ).compactMap { row in
            guard row.count == 6, let type = row[0].text, let day = row[1].integer, let notification = row[2].text
            else { return nil }
            return NotificationBuild(
                type: type, day: day, notification: notification, build: build, sent: row[3].integer ?? 0,
                received: row[4].integer ?? 0, firstSentAt: row[5].integer)
        }
    }

    /// Whether devices of `build` of an app have reported a receipt (one look-up in the
    /// receipts' build index).
    func reportsReceipts(_ build: Build, appID: String, _ session: Session) async throws -> Bool {
        var binds: [Session.Value] = [.text(appID), .text(build.platform)]
        if let version = build.version { binds.append(.text(version)) }
        return try await !session.query(
            """
            SELECT 1 FROM receipts WHERE app_id = $1 AND platform = $2
                AND app_version \(build.version == nil ? "IS NULL" : "= $3") LIMIT 1
            """, binds
        ).isEmpty
    }

    /// A type's day and build: where "accepted, not received" is counted.
    struct TypeDayBuild: Hashable {
        var type: String
        var day: Int64
        var build: Build
    }

    /// Deliveries of `days` (of `type`) accepted before `before` and not received, per type, day
    /// and build, for the builds that report receipts. The sums' sent less received counts every
    /// notification as if it had been sent entirely before `before`; those last sent at or after
    /// it (the last day's, not the month's) are taken back out, and the one whose sending spans
    /// `before` adds its deliveries sent before it without a receipt. A build whose count would
    /// be negative (receipts reported from a build newer than the one sent to) counts none.
    func unreceived(appID: String, days: ClosedRange<Int64>, type: String?, before: Int64, _ session: Session)
        async throws -> [TypeDayBuild: Int64]
    {
        let (binds, terms) = Self.typeBuildsScope(appID: appID, days: days, type: type)
        var missing: [TypeDayBuild: Int64] = [:]
        var builds: [Build] = []
        for row in try await session.query(
            """
            SELECT type, day, platform, app_version, sent - received FROM type_builds t
            WHERE \(terms) AND sent <> received ORDER BY platform, app_version
            """, binds)
        {
            guard row.count == 5, let type = row[0].text, let day = row[1].integer, let platform = row[2].text,
                let version = row[3].text, let count = row[4].integer
            else { continue }
            let build = Build(platform: platform, version: version.isEmpty ? nil : version)
            if builds.last != build { builds.append(build) }
            missing[TypeDayBuild(type: type, day: day, build: build), default: 0] += count
        }
        for build in builds {
            guard try await reportsReceipts(build, appID: appID, session) else {
                missing = missing.filter { $0.key.build != build }
                continue
            }
            for recent in try await recentlySent(build, appID: appID, days: days, type: type, since: before, session) {
                let key = TypeDayBuild(type: recent.type, day: recent.day, build: build)
                missing[key, default: 0] -= recent.sent - recent.received
                missing[key, default: 0] += try await unreceivedBefore(before, recent, appID: appID, session)
            }
        }
        return missing.filter { $0.value > 0 }
    }

    /// The deliveries of a notification last sent at or after `before` (`recentlySent`) that were
    /// sent before it to devices of that build (now) without a receipt: none when it was first
    /// sent at or after `before`, else its deliveries read (its sending spans the window's edge).
    func unreceivedBefore(_ before: Int64, _ recent: NotificationBuild, appID: String, _ session: Session)
        async throws -> Int64
    {
        guard let first = recent.firstSentAt, first < before else { return 0 }
        let build = recent.build
        var binds: [Session.Value] = [
            .text(recent.notification), .text(appID), .integer(before), .text(build.platform),
        ]
        if let version = build.version { binds.append(.text(version)) }
        let versionTerm = build.version == nil ? "v.app_version IS NULL" : "v.app_version = $5"
        return try await session.query(
            """
            SELECT count(*) FROM deliveries d JOIN devices v ON v.app_id = d.app_id AND v.device_id = d.device_id
            WHERE d.notification_id = $1 AND d.app_id = $2 AND d.status = 'sent' AND d.updated_at < $3
                AND v.platform = $4 AND \(versionTerm)
                AND NOT EXISTS (SELECT 1 FROM receipts r WHERE r.app_id = d.app_id AND r.delivery_id = d.id)
            """, binds
        ).first?.first?.integer ?? 0
    }
}
