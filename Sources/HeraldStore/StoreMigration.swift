import Foundation
import PostgresNIO

/// Moves a stopped SQLite store into an empty PostgreSQL database (`herald migrate`): every table
/// Herald keeps, in batches of rows, each batch written with its progress in one PostgreSQL
/// transaction, so an interrupted run resumes after the last batch written, and nothing is copied
/// twice. Runtime state (node heartbeats) is not copied; the identity sequences are moved past
/// every id the SQLite store used or reserved.
package struct StoreMigration: Sendable {
    /// One table's progress, as the callback and the summary report it.
    package struct TableProgress: Sendable {
        package var table: String
        package var copied: Int
        package var total: Int
        package var done: Bool
    }

    /// A table's rows on both sides: counts and an order-independent checksum of every value.
    package struct Verification: Sendable, Equatable {
        package var table: String
        package var sourceRows: Int
        package var targetRows: Int
        package var sourceChecksum: UInt64
        package var targetChecksum: UInt64
        package var matches: Bool { sourceRows == targetRows && sourceChecksum == targetChecksum }
    }

    /// Tables never copied: the migrations' own record (the target has its own), node liveness,
    /// SQLite's internals.
    static let skipped: Set<String> = ["schema_migrations", "nodes", "heartbeat", "sqlite_sequence", progressTable]
    /// Tables PostgreSQL's triggers fill as devices and notifications are written: copied after
    /// the others, replacing what the triggers counted while the rows arrived.
    static let derived = ["deferred_totals", "permission_stats", "type_stats"]
    /// Tables whose `id` is an identity column on PostgreSQL.
    static let identities = ["deliveries", "broadcast_pages", "timers", "webhook_messages", "activity_pushes"]
    /// Where the target keeps the migration's progress (kept afterwards as its record).
    static let progressTable = "herald_migration"

    let source: HeraldStore
    let target: HeraldStore
    let batchSize: Int

    /// `source` must be a SQLite store and `target` a PostgreSQL one, both opened (and so
    /// migrated to this build's schema).
    package init(source: HeraldStore, target: HeraldStore, batchSize: Int = 1_000) throws(StoreError) {
        guard source.dialect == .sqlite, target.dialect == .postgres else {
            throw StoreError(.unsupported, "herald migrate moves a sqlite:// store into a postgres:// database")
        }
        self.source = source
        self.target = target
        self.batchSize = max(1, batchSize)
    }

    /// The tables to copy, in order (derived ones last), with their columns in the target's order.
    func plan() async throws -> [(table: String, columns: [String])] {
        let sourceTables = try await source.exclusive { session in
            try await session.query("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
                .compactMap { $0.first?.text }
        }.filter { !Self.skipped.contains($0) }
        var plan: [(String, [String])] = []
        for table in sourceTables.filter({ !Self.derived.contains($0) }) + Self.derived
        where sourceTables.contains(table) {
            let sourceColumns = try await source.exclusive { session in
                try await session.query("SELECT name FROM pragma_table_info($1)", [.text(table)]).compactMap {
                    $0.first?.text
                }
            }
            let targetColumns = try await target.exclusive { session in
                try await session.query(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
                    [.text(table)]
                ).compactMap { $0.first?.text }
            }
            guard Set(sourceColumns) == Set(targetColumns) else {
                throw StoreError(
                    .unsupported,
                    "table \(table) differs: SQLite has \(sourceColumns.sorted()), PostgreSQL \(targetColumns.sorted()); open both with this Herald first"
                )
            }
            plan.append((table, targetColumns))
        }
        return plan
    }

    /// Whether the target holds a migration's progress (a run to resume or one finished), and
    /// whether every table of the plan is done.
    package func state() async throws -> (started: Bool, finished: Bool) {
        let progress = try await target.exclusive { session -> [[Session.Value]] in
            let exists = try await session.query("SELECT to_regclass($1) IS NOT NULL", [.text(Self.progressTable)])
            guard exists.first?.first == .integer(1) else { return [] }
            return try await session.query("SELECT table_name, done FROM \(Self.progressTable)")
        }
        guard !progress.isEmpty else { return (false, false) }
        let done = Set(progress.filter { $0.last == .integer(1) }.compactMap { $0.first?.text })
        return (true, Set(try await plan().map(\.table)).isSubset(of: done))
    }

    /// The target's tables that already hold rows, when no migration was started there: a
    /// database in use, which a migration must not write into.
    package func occupiedTargetTables() async throws -> [String] {
        var occupied: [String] = []
        for (table, _) in try await plan() {
            let any = try await target.exclusive { session in
                try await session.query("SELECT EXISTS (SELECT 1 FROM \(table))")
            }
            if any.first?.first == .integer(1) { occupied.append(table) }
        }
        return occupied
    }

    /// Copies every table, resuming after the batches a previous run wrote; `progress` hears each
    /// batch once it is committed (an error it throws stops the run there, as an interruption
    /// would). Returns each table's final count.
    @discardableResult
    package func run(progress: @Sendable (TableProgress) throws -> Void = { _ in }) async throws -> [TableProgress] {
        try await target.exclusive { session in
            _ = try await session.query(
                "CREATE TABLE IF NOT EXISTS \(Self.progressTable) (table_name TEXT PRIMARY KEY, last_rowid BIGINT NOT NULL, copied BIGINT NOT NULL, done BIGINT NOT NULL, updated_at BIGINT NOT NULL)"
            )
        }
        var finished: [TableProgress] = []
        for (table, columns) in try await plan() {
            finished.append(try await copy(table, columns: columns, progress: progress))
        }
        try await advanceIdentities()
        return finished
    }

    private func copy(_ table: String, columns: [String], progress: @Sendable (TableProgress) throws -> Void)
        async throws
        -> TableProgress
    {
        let total = Int(
            try await source.exclusive { session in try await session.query("SELECT COUNT(*) FROM \(table)") }
                .first?.first?.integer ?? 0)
        let saved = try await target.exclusive { session in
            try await session.query(
                "SELECT last_rowid, copied, done FROM \(Self.progressTable) WHERE table_name = $1", [.text(table)]
            ).first
        }
        var lastRowID = saved?[0].integer ?? 0
        var copied = Int(saved?[1].integer ?? 0)
        if saved?[2].integer == 1 {
            let state = TableProgress(table: table, copied: copied, total: total, done: true)
            try progress(state)
            return state
        }
        let list = columns.joined(separator: ", ")
        let width = columns.count
        while true {
            let rows = try await source.exclusive { session in
                try await session.query(
                    "SELECT rowid, \(list) FROM \(table) WHERE rowid > $1 ORDER BY rowid LIMIT $2",
                    [.integer(lastRowID), .integer(Int64(batchSize))])
            }
            let isFirst = lastRowID == 0 && copied == 0
            let last = rows.last?.first?.integer ?? lastRowID
            let done = rows.count < batchSize
            copied += rows.count
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            try await target.transaction { session in
                if isFirst && Self.derived.contains(table) {
                    _ = try await session.query("DELETE FROM \(table)")
                }
                if !rows.isEmpty {
                    var binds: [Session.Value] = []
                    binds.reserveCapacity(rows.count * width)
                    var tuples: [String] = []
                    tuples.reserveCapacity(rows.count)
                    for row in rows {
                        let start = binds.count
                        binds.append(contentsOf: row.dropFirst())
                        tuples.append("(" + (1...width).map { "$\(start + $0)" }.joined(separator: ", ") + ")")
                    }
                    _ = try await session.query(
                        "INSERT INTO \(table) (\(list)) VALUES \(tuples.joined(separator: ", "))", binds)
                }
                _ = try await session.query(
                    "INSERT INTO \(Self.progressTable) (table_name, last_rowid, copied, done, updated_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (table_name) DO UPDATE SET last_rowid = excluded.last_rowid, copied = excluded.copied, done = excluded.done, updated_at = excluded.updated_at",
                    [.text(table), .integer(last), .integer(Int64(copied)), .integer(done ? 1 : 0), .integer(now)])
            }
            lastRowID = last
            try progress(TableProgress(table: table, copied: copied, total: total, done: done))
            if done { return TableProgress(table: table, copied: copied, total: total, done: true) }
        }
    }

    /// Moves each identity sequence past the largest id the SQLite store used or reserved (its
    /// AUTOINCREMENT counter: a broadcast page reserves delivery ids before it writes them).
    private func advanceIdentities() async throws {
        let counters = try await source.exclusive { session in
            try await session.query("SELECT name, seq FROM sqlite_sequence")
        }
        for table in Self.identities {
            let reserved = counters.first { $0.first?.text == table }?.last?.integer ?? 0
            try await target.exclusive { session in
                _ = try await session.query(
                    "SELECT setval(pg_get_serial_sequence($1, 'id'), GREATEST((SELECT COALESCE(MAX(id), 0) FROM \(table)), $2, 1))",
                    [.text(table), .integer(reserved)])
            }
        }
    }

    /// Counts and checksums every copied table on both sides.
    package func verify(progress: @Sendable (String) -> Void = { _ in }) async throws -> [Verification] {
        var results: [Verification] = []
        for (table, columns) in try await plan() {
            progress(table)
            let list = columns.joined(separator: ", ")
            var sourceRows = 0
            var sourceSum: UInt64 = 0
            var lastRowID: Int64 = 0
            while true {
                let rows = try await source.exclusive { session in
                    try await session.query(
                        "SELECT rowid, \(list) FROM \(table) WHERE rowid > $1 ORDER BY rowid LIMIT 5000",
                        [.integer(lastRowID)])
                }
                for row in rows { sourceSum &+= Self.hash(row.dropFirst()) }
                sourceRows += rows.count
                guard let last = rows.last?.first?.integer, rows.count == 5000 else { break }
                lastRowID = last
            }
            let (targetRows, targetSum) = try await target.exclusive { session -> (Int, UInt64) in
                guard case .postgres(let connection) = session.raw else { return (0, 0) }
                var count = 0
                var sum: UInt64 = 0
                for try await row in try await connection.query(
                    PostgresQuery(unsafeSQL: "SELECT \(list) FROM \(table)"), logger: Session.silent)
                {
                    sum &+= Self.hash(try row.map(Session.value(of:)))
                    count += 1
                }
                return (count, sum)
            }
            results.append(
                Verification(
                    table: table, sourceRows: sourceRows, targetRows: targetRows, sourceChecksum: sourceSum,
                    targetChecksum: targetSum))
        }
        return results
    }

    /// FNV-1a over a row's values, each tagged with its kind and length, so no two rows that
    /// differ hash alike by concatenation.
    static func hash<Row: Collection>(_ row: Row) -> UInt64 where Row.Element == Session.Value {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        func mix(_ byte: UInt8) {
            hash ^= UInt64(byte)
            hash = hash &* 0x100_0000_01b3
        }
        for value in row {
            switch value {
            case .null: mix(0)
            case .integer(let number):
                mix(1)
                withUnsafeBytes(of: number.littleEndian) { for byte in $0 { mix(byte) } }
            case .text(let text):
                mix(2)
                let utf8 = text.utf8
                withUnsafeBytes(of: UInt64(utf8.count).littleEndian) { for byte in $0 { mix(byte) } }
                for byte in utf8 { mix(byte) }
            }
        }
        return hash
    }
}
