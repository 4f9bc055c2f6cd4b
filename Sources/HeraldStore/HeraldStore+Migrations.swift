import Foundation
import Logging
import SQLKit

/// The schema, as versioned migrations applied at open (written for SQLite; `translate` makes
/// them PostgreSQL's).
extension HeraldStore {
    /// The schema's migrations, from `Resources/migrations.sql` (compiled into the binary).
    static let migrations: [(version: Int, statements: [String])] = parseMigrations(
        String(decoding: PackageResources.migrations_sql, as: UTF8.self))

    /// Reads migrations as `migrations.sql` writes them: `-- migration: N` starts migration N;
    /// a statement runs up to a line holding only `;`; comment lines between statements are
    /// documentation, but a statement may begin with the `-- PostgreSQL only` or `-- SQLite
    /// only` marker. The file is the binary's own: a malformed one stops the start.
    static func parseMigrations(_ text: String) -> [(version: Int, statements: [String])] {
        var migrations: [(version: Int, statements: [String])] = []
        var statement: [Substring] = []
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if statement.isEmpty {
                if line.hasPrefix("-- migration: "), let version = Int(line.dropFirst("-- migration: ".count)) {
                    migrations.append((version, []))
                    continue
                }
                let marker = line == postgresOnlyMarker.dropLast() || line == sqliteOnlyMarker.dropLast()
                if line.trimmingCharacters(in: .whitespaces).isEmpty || (line.hasPrefix("--") && !marker) { continue }
            }
            if line == ";" {
                precondition(!migrations.isEmpty, "migrations.sql: a statement before the first migration")
                migrations[migrations.count - 1].statements.append(statement.joined(separator: "\n"))
                statement = []
            } else {
                statement.append(line)
            }
        }
        precondition(statement.isEmpty, "migrations.sql: the last statement has no closing ;")
        return migrations
    }

    /// The first line of a migration statement for PostgreSQL alone (SQLite skips it).
    static let postgresOnlyMarker = "-- PostgreSQL only\n"
    /// The first line of a migration statement for SQLite alone (PostgreSQL skips it).
    static let sqliteOnlyMarker = "-- SQLite only\n"

    /// Applies the migrations this database has not seen, each in its own transaction. On
    /// PostgreSQL, nodes starting together migrate one at a time (an advisory lock held by the
    /// migrating session).
    func migrate(through version: Int = .max) async throws {
        try await exclusive { session in
            switch session.raw {
            case .sqlite:
                for pragma in Self.sqlitePragmas {
                    try await session.sql.raw(SQLQueryString(pragma)).run()
                }
            case .postgres:
                try await session.sql.raw("SELECT pg_advisory_lock(\(unsafeRaw: Self.migrationLock))").run()
            }
            do {
                try await applyMigrations(session, through: version)
            } catch {
                if dialect == .postgres {
                    try? await session.sql.raw("SELECT pg_advisory_unlock(\(unsafeRaw: Self.migrationLock))").run()
                }
                throw error
            }
            if dialect == .postgres {
                try await session.sql.raw("SELECT pg_advisory_unlock(\(unsafeRaw: Self.migrationLock))").run()
            }
        }
    }

    /// The SQLite connection's settings: WAL; fsync at checkpoints (a notification's acceptance
    /// syncs the WAL at its commit: `transaction(durable:)`); a 32 MiB page cache (the default
    /// 2 MiB re-reads index pages of a large devices table from the OS on every batch);
    /// statement journals in memory (multi-row upserts write one per statement); the WAL
    /// truncated back to 64 MiB. `SQLiteCheckpointer` checkpoints on its own connection; the
    /// writer's own checkpoint at 32,768 pages (128 MiB) is only a backstop.
    static let sqlitePragmas = [
        "PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL", "PRAGMA busy_timeout=5000",
        "PRAGMA cache_size=-32768", "PRAGMA temp_store=MEMORY", "PRAGMA journal_size_limit=67108864",
        "PRAGMA wal_autocheckpoint=32768",
    ]

    /// Advisory lock keys (PostgreSQL): one per kind of singleton work.
    static let migrationLock = "724865726101"
    static let rescueLock = "724865726102"
    static let retentionLock = "724865726103"

    private func applyMigrations(_ session: Session, through version: Int) async throws {
        try await session.sql.raw(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)"
        ).run()
        let applied = Set(
            try await session.sql.raw("SELECT version FROM schema_migrations").all().map {
                try $0.decode(column: "version", as: Int.self)
            })
        for migration in Self.migrations where !applied.contains(migration.version) && migration.version <= version {
            try await inTransaction(session) { session in
                for statement in migration.statements {
                    let statement = Self.translate(statement, to: dialect)
                    if statement.isEmpty { continue }
                    try await session.sql.raw(SQLQueryString(statement)).run()
                }
                try await session.sql.raw(
                    "INSERT INTO schema_migrations (version, applied_at) VALUES (\(bind: migration.version), \(bind: nowMilliseconds))"
                ).run()
            }
            logger.info("Database migrated", metadata: ["herald.migration": "\(migration.version)"])
        }
    }

    /// A migration statement as `dialect` writes it: the migrations are written for SQLite; on
    /// PostgreSQL integers are 64-bit and row ids come from an identity column. A
    /// `postgresOnly` statement is empty (skipped) on SQLite, a `sqliteOnly` one on PostgreSQL.
    static func translate(_ statement: String, to dialect: Dialect) -> String {
        if statement.hasPrefix(postgresOnlyMarker) {
            return dialect == .postgres ? String(statement.dropFirst(postgresOnlyMarker.count)) : ""
        }
        if statement.hasPrefix(sqliteOnlyMarker) {
            return dialect == .sqlite ? String(statement.dropFirst(sqliteOnlyMarker.count)) : ""
        }
        guard dialect == .postgres else { return statement }
        return
            statement
            .replacingOccurrences(
                of: "INTEGER PRIMARY KEY AUTOINCREMENT", with: "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"
            )
            .replacingOccurrences(of: " INTEGER", with: " BIGINT")
    }
}

extension HeraldStore {
    /// The schema the migrations built, one line per table, index, trigger and column, sorted:
    /// what the schema snapshot test compares with the checked-in one. SQLite: `sqlite_master`'s
    /// definitions; PostgreSQL: columns with their types and collations, index and trigger
    /// definitions, from the catalog (but the deliveries' day partitions, which depend on the date).
    package func schemaSnapshot() async throws -> [String] {
        try await exclusive { session in
            switch dialect {
            case .sqlite:
                let rows = try await session.query(
                    "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' AND sql IS NOT NULL", [])
                return rows.map { row in
                    let definition = (row[2].text ?? "").split(whereSeparator: \.isWhitespace).joined(separator: " ")
                    return "\(row[0].text ?? "") \(row[1].text ?? ""): \(definition)"
                }.sorted()
            case .postgres:
                let columns = try await session.query(
                    """
                    SELECT table_name, column_name, data_type, COALESCE(collation_name, ''), is_nullable, COALESCE(column_default, '')
                    FROM information_schema.columns WHERE table_schema = current_schema()
                    """, [])
                let indexes = try await session.query(
                    "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()", [])
                let triggers = try await session.query(
                    """
                    SELECT tgname, pg_get_triggerdef(t.oid) FROM pg_trigger t
                    JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
                    WHERE NOT t.tgisinternal AND n.nspname = current_schema()
                    """, [])
                let text = { (row: [Session.Value], index: Int) in row[index].text ?? "" }
                let lines =
                    columns.map {
                        "column \(text($0, 0)).\(text($0, 1)): \(text($0, 2)) \(text($0, 3)) null=\(text($0, 4)) default=\(text($0, 5))"
                    }
                    + indexes.map { "index \(text($0, 0)): \(text($0, 1))" }
                    + triggers.map { "trigger \(text($0, 0)): \(text($0, 1))" }
                // The deliveries' day partitions are made by the upkeep for the days around now.
                return lines.filter { !Self.namesDayPartition($0) }.sorted()
            }
        }
    }

    /// Whether a snapshot line names a day partition (`deliveries_20261127`).
    private static func namesDayPartition(_ line: String) -> Bool {
        guard let range = line.range(of: "deliveries_") else { return false }
        let digits = line[range.upperBound...].prefix(8)
        return digits.count == 8 && digits.allSatisfy(\.isASCII) && digits.allSatisfy(\.isNumber)
    }
}
