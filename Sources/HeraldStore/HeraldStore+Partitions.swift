package import Foundation
import Synchronization

/// PostgreSQL's deliveries are partitioned by day of creation (migration 11): the upkeep
/// creates the coming days' partitions ahead and drops a past day's partition whole once
/// retention has nothing in it to keep. SQLite has one table; its retention deletes rows.
extension HeraldStore {
    /// What one upkeep did.
    package struct PartitionUpkeep: Sendable, Equatable {
        /// Partitions created ahead (`deliveries_YYYYMMDD`).
        package var created: [String] = []
        /// Partitions dropped, and the delivery rows they held.
        package var dropped: [String] = []
        package var droppedRows = 0
        /// Days that could not get a partition: the DEFAULT partition already holds rows of
        /// them (their rows stay there and are deleted row by row). Each day once per process.
        package var skipped: [String] = []
        package init() {}
    }

    /// Days of partitions made ahead of today (UTC), today included.
    static let partitionDaysAhead = 3
    static let dayMilliseconds: Int64 = 86_400_000

    /// On PostgreSQL: creates the partitions of today and the next days that do not exist yet,
    /// and drops those whose whole day ended before `cutoff` and that hold no delivery still to
    /// send and none answered since `cutoff` (a scheduled or retried delivery keeps its day).
    /// One node at a time (the retention advisory lock; the others do nothing), each change in
    /// its own short transaction under a 1 s `lock_timeout` (creating or dropping a partition
    /// takes the parent's lock for a moment: it gives up rather than queue claims behind it).
    /// Does nothing on SQLite.
    @discardableResult
    package func maintainPartitions(before cutoff: Date?) async throws -> PartitionUpkeep {
        guard dialect == .postgres else { return PartitionUpkeep() }
        let today = nowMilliseconds / Self.dayMilliseconds
        let before = cutoff.map { Self.milliseconds($0, rounding: .down) }
        return try await exclusive { session in
            // A session-level advisory lock (the upkeep runs several transactions).
            guard
                try await session.query("SELECT pg_try_advisory_lock(\(Self.retentionLock))").first?.first
                    == .integer(1)
            else {
                return PartitionUpkeep()
            }
            do {
                let upkeep = try await upkeepPartitions(today: today, before: before, session)
                _ = try await session.query("SELECT pg_advisory_unlock(\(Self.retentionLock))")
                return upkeep
            } catch {
                // The connection goes back to the pool: it must not keep the lock.
                _ = try? await session.query("SELECT pg_advisory_unlock(\(Self.retentionLock))")
                throw error
            }
        }
    }

    private func upkeepPartitions(today: Int64, before: Int64?, _ session: Session) async throws -> PartitionUpkeep {
        var upkeep = PartitionUpkeep()
        let existing = Set(
            try await session.query(Self.partitionsSQL).compactMap { $0.first?.text })
        for day in today..<(today + Int64(Self.partitionDaysAhead)) {
            let name = Self.partitionName(day: day)
            guard !existing.contains(name) else { continue }
            let (low, high) = (day * Self.dayMilliseconds, (day + 1) * Self.dayMilliseconds)
            try await inTransaction(session) { session in
                _ = try await session.query("SET LOCAL lock_timeout = '1s'")
                let taken = try await session.query(
                    "SELECT 1 FROM deliveries_default WHERE created_at >= $1 AND created_at < $2 LIMIT 1",
                    [.integer(low), .integer(high)])
                guard taken.isEmpty else {
                    if skippedPartitions.withLock({ $0.insert(name).inserted }) { upkeep.skipped.append(name) }
                    return
                }
                _ = try await session.query(
                    "CREATE TABLE \(name) PARTITION OF deliveries FOR VALUES FROM (\(low)) TO (\(high))")
                upkeep.created.append(name)
            }
        }
        guard let before else { return upkeep }
        for name in existing.sorted() {
            guard let day = Self.partitionDay(name), (day + 1) * Self.dayMilliseconds <= before else { continue }
            try await inTransaction(session) { session in
                _ = try await session.query("SET LOCAL lock_timeout = '1s'")
                // Still to send (the outbox index answers), or answered within retention; the
                // same pass over the day counts what the drop deletes.
                guard
                    try await session.query("SELECT 1 FROM \(name) WHERE \(OutboxRepository.outboxIndexTerm) LIMIT 1")
                        .isEmpty
                else { return }
                let counts = try await session.query(
                    "SELECT count(*), count(*) FILTER (WHERE updated_at >= $1) FROM \(name)", [.integer(before)]
                ).first
                guard let rows = counts?[0].integer, counts?[1].integer == 0 else { return }
                _ = try await session.query("DROP TABLE \(name)")
                upkeep.dropped.append(name)
                upkeep.droppedRows += Int(rows)
            }
        }
        return upkeep
    }

    /// The deliveries partitions (PostgreSQL), by name, with the rows each holds; empty on SQLite.
    package func deliveryPartitions() async throws -> [String: Int] {
        guard dialect == .postgres else { return [:] }
        return try await exclusive { session in
            var partitions: [String: Int] = [:]
            for row in try await session.query(Self.partitionsSQL) {
                guard let name = row.first?.text else { continue }
                partitions[name] = Int(
                    try await session.query("SELECT count(*) FROM \(name)").first?.first?.integer ?? 0)
            }
            return partitions
        }
    }

    static let partitionsSQL =
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'deliveries'::regclass"

    /// `deliveries_YYYYMMDD` of a day (days since 1970-01-01, UTC).
    static func partitionName(day: Int64) -> String {
        let date = Date(timeIntervalSince1970: Double(day) * 86_400)
        let parts = utcCalendar.dateComponents([.year, .month, .day], from: date)
        return String(format: "deliveries_%04d%02d%02d", parts.year ?? 1970, parts.month ?? 1, parts.day ?? 1)
    }

    /// The day of a `deliveries_YYYYMMDD` partition; nil for other names (the DEFAULT one).
    static func partitionDay(_ name: String) -> Int64? {
        let digits = name.dropFirst("deliveries_".count)
        guard name.hasPrefix("deliveries_"), digits.count == 8, let value = Int(digits) else { return nil }
        let parts = DateComponents(year: value / 10_000, month: value / 100 % 100, day: value % 100)
        guard let date = utcCalendar.date(from: parts) else { return nil }
        return Int64((date.timeIntervalSince1970 / 86_400).rounded(.down))
    }

    private static let utcCalendar: Calendar = {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        return calendar
    }()
}
