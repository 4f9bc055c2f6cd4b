package import Foundation
package import HeraldCore
package import Logging
import NIOCore
import NIOPosix
import SQLiteKit
import SQLiteNIO
import SQLKit

/// Herald's durable state behind SQLKit: devices, notifications and their deliveries (the
/// outbox). SQLite (WAL, one writer) by default; every operation runs alone on the connection,
/// transactions included, and bulk work happens in multi-row statements.
package final class HeraldStore: Sendable {
    let database: any SQLDatabase
    /// The connection itself, for hot reads that skip SQLKit's Codable row decoding.
    let connection: SQLiteConnection
    let clock: HeraldClock
    let logger: Logger
    /// This process's node id: the owner of the claims it makes (a new one per open).
    package let nodeID = UUID().uuidString.lowercased()
    private let lock = AsyncSerialLock()
    /// Rows per multi-row statement (SQLite allows 32,766 bound values).
    static let batchSize = 500

    private init(connection: SQLiteConnection, clock: HeraldClock, logger: Logger) {
        self.connection = connection
        // No query text or bound values in any log at any level: they hold tokens and user data.
        self.database = connection.sql(queryLogLevel: nil)
        self.clock = clock
        self.logger = logger
    }

    /// Opens the database named by `url` and migrates it: `sqlite://PATH` (relative or absolute),
    /// `sqlite://:memory:` for tests.
    package static func open(
        url: String, clock: HeraldClock = .system, logger: Logger = Logger(label: "herald.store")
    ) async throws -> HeraldStore {
        let storage: SQLiteConnection.Storage
        if url.hasPrefix("sqlite://") {
            let path = String(url.dropFirst("sqlite://".count))
            guard !path.isEmpty else { throw StoreError(.invalidURL, "database.url \"\(url)\" names no file") }
            storage = path == ":memory:" ? .memory : .file(path: path)
        } else if url.hasPrefix("postgres://") || url.hasPrefix("postgresql://") {
            throw StoreError(.unsupported, "PostgreSQL is not supported yet; use sqlite://FILE")
        } else {
            throw StoreError(.invalidURL, "database.url must start with sqlite:// (got \"\(url)\")")
        }
        let connection = try await SQLiteConnection.open(
            storage: storage, threadPool: NIOThreadPool.singleton, logger: logger,
            on: MultiThreadedEventLoopGroup.singleton.any())
        let store = HeraldStore(connection: connection, clock: clock, logger: logger)
        try await store.migrate()
        return store
    }

    package func close() async {
        try? await connection.close()
    }

    /// Runs `body` alone on the connection.
    func exclusive<Result: Sendable>(_ body: () async throws -> Result) async throws -> Result {
        try await lock.withLock(body)
    }

    /// Runs `body` alone on the connection inside one transaction.
    func transaction<Result: Sendable>(_ body: () async throws -> Result) async throws -> Result {
        try await lock.withLock {
            try await database.raw("BEGIN IMMEDIATE").run()
            do {
                let result = try await body()
                try await database.raw("COMMIT").run()
                return result
            } catch {
                try? await database.raw("ROLLBACK").run()
                throw error
            }
        }
    }

    var nowMilliseconds: Int64 { Self.milliseconds(clock.now()) }

    /// A time as stored (Unix milliseconds), clamped to years 1970…9999 so that no date — one
    /// computed from a peer's `Retry-After` or timestamp included — can trap the conversion.
    static func milliseconds(_ date: Date, rounding: FloatingPointRoundingRule = .toNearestOrAwayFromZero) -> Int64 {
        let value = (date.timeIntervalSince1970 * 1000).rounded(rounding)
        guard value.isFinite else { return value > 0 ? maximumMilliseconds : 0 }
        return Int64(min(max(value, 0), Double(maximumMilliseconds)))
    }

    /// 9999-12-31T23:59:59Z in milliseconds.
    static let maximumMilliseconds: Int64 = 253_402_300_799_000

    // MARK: Migrations

    static let migrations: [(version: Int, statements: [String])] = [
        (
            1,
            [
                """
                CREATE TABLE devices (
                    app_id TEXT NOT NULL,
                    device_id TEXT NOT NULL,
                    user_id TEXT NOT NULL,
                    platform TEXT NOT NULL,
                    token TEXT NOT NULL,
                    environment TEXT NOT NULL,
                    name TEXT, model TEXT, locale TEXT, time_zone TEXT, app_version TEXT, authorization_status TEXT,
                    active INTEGER NOT NULL DEFAULT 1,
                    inactive_reason TEXT,
                    inactive_since BIGINT,
                    created_at BIGINT NOT NULL,
                    updated_at BIGINT NOT NULL,
                    PRIMARY KEY (app_id, device_id)
                )
                """,
                "CREATE UNIQUE INDEX devices_token ON devices (app_id, platform, token)",
                "CREATE INDEX devices_user ON devices (app_id, user_id)",
                """
                CREATE TABLE notifications (
                    id TEXT PRIMARY KEY,
                    app_id TEXT NOT NULL,
                    idempotency_key TEXT,
                    content TEXT NOT NULL,
                    recipients INTEGER NOT NULL DEFAULT 0,
                    created_at BIGINT NOT NULL
                )
                """,
                "CREATE UNIQUE INDEX notifications_idempotency ON notifications (app_id, idempotency_key)",
                """
                CREATE TABLE deliveries (
                    id INTEGER PRIMARY KEY AUTOINCREMENT,
                    notification_id TEXT NOT NULL,
                    app_id TEXT NOT NULL,
                    device_id TEXT NOT NULL,
                    status TEXT NOT NULL,
                    due_at BIGINT NOT NULL,
                    attempts INTEGER NOT NULL DEFAULT 0,
                    reason TEXT,
                    created_at BIGINT NOT NULL,
                    updated_at BIGINT NOT NULL
                )
                """,
                "CREATE INDEX deliveries_due ON deliveries (status, due_at)",
                "CREATE INDEX deliveries_notification ON deliveries (notification_id)",
                """
                CREATE TABLE counters (
                    name TEXT PRIMARY KEY,
                    value BIGINT NOT NULL
                )
                """,
            ]
        ),
        (
            2,
            [
                // Per-notification counters, kept in the same transactions as the deliveries, so
                // status reads are O(1) however many recipients a notification has.
                "ALTER TABLE notifications ADD COLUMN sent_count INTEGER NOT NULL DEFAULT 0",
                "ALTER TABLE notifications ADD COLUMN failed_count INTEGER NOT NULL DEFAULT 0",
                "ALTER TABLE notifications ADD COLUMN deferred_count INTEGER NOT NULL DEFAULT 0",
                "ALTER TABLE notifications ADD COLUMN suppressed_count INTEGER NOT NULL DEFAULT 0",
            ]
        ),
        (
            3,
            [
                """
                CREATE TABLE users (
                    app_id TEXT NOT NULL,
                    user_id TEXT NOT NULL,
                    time_zone TEXT,
                    locale TEXT,
                    attributes TEXT NOT NULL DEFAULT '{}',
                    preferences TEXT NOT NULL DEFAULT '{}',
                    created_at BIGINT NOT NULL,
                    updated_at BIGINT NOT NULL,
                    PRIMARY KEY (app_id, user_id)
                )
                """
            ]
        ),
        (
            4,
            [
                // The policy engine's decision trace per delivery (JSON array of steps), and what
                // each user received when: pacing and grouping look at the last hour of it.
                "ALTER TABLE deliveries ADD COLUMN trace TEXT",
                """
                CREATE TABLE user_sends (
                    app_id TEXT NOT NULL,
                    user_id TEXT NOT NULL,
                    notification_id TEXT NOT NULL,
                    sent_at BIGINT NOT NULL,
                    PRIMARY KEY (app_id, user_id, notification_id)
                )
                """,
                "CREATE INDEX user_sends_recent ON user_sends (app_id, user_id, sent_at)",
            ]
        ),
        (
            5,
            [
                // The outbox index holds only rows still to be answered: a delivery leaves it when it
                // is sent, failed or suppressed, so the index stays the size of the queue, not of
                // the history (queries must name statuses as literals to use it).
                "DROP INDEX deliveries_due",
                "CREATE INDEX deliveries_due ON deliveries (status, due_at) WHERE status IN ('queued', 'deferred', 'sending')",
            ]
        ),
        (
            6,
            [
                // One row /healthz writes: proof that the database takes writes.
                "CREATE TABLE heartbeat (id INTEGER PRIMARY KEY CHECK (id = 1), at BIGINT NOT NULL)"
            ]
        ),
        (
            7,
            [
                // Issue #11: the user a delivery was planned for (a device that changed hands is
                // not sent another user's notification), and owned, fenced claims: the node that
                // claimed a row and the claim's number, which every result write must match.
                "ALTER TABLE deliveries ADD COLUMN user_id TEXT",
                "ALTER TABLE deliveries ADD COLUMN claimed_by TEXT",
                "ALTER TABLE deliveries ADD COLUMN claim INTEGER NOT NULL DEFAULT 0",
                // Every process with an outbox loop, and when it last said it was alive.
                "CREATE TABLE nodes (id TEXT PRIMARY KEY, started_at BIGINT NOT NULL, heartbeat_at BIGINT NOT NULL)",
            ]
        ),
    ]

    /// Writes the heartbeat row: throws when the database does not take writes (read-only
    /// file, full disk, lost lock), which `/healthz` reports.
    package func checkWritable() async throws {
        let now = nowMilliseconds
        try await exclusive {
            try await database.raw("INSERT INTO heartbeat (id, at) VALUES (1, \(bind: now)) ON CONFLICT (id) DO UPDATE SET at = excluded.at").run()
        }
    }

    /// Makes this connection refuse writes (`PRAGMA query_only`), or take them again: how the
    /// tests make the database unwritable for `/healthz`.
    package func setQueryOnly(_ on: Bool) async throws {
        try await exclusive {
            try await database.raw(SQLQueryString(on ? "PRAGMA query_only = ON" : "PRAGMA query_only = OFF")).run()
        }
    }

    /// Applies the migrations this database has not seen, each in its own transaction.
    func migrate() async throws {
        try await exclusive {
            for pragma in ["PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL", "PRAGMA busy_timeout=5000"] {
                try await database.raw(SQLQueryString(pragma)).run()
            }
            try await database.raw("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)").run()
        }
        let applied = Set(
            try await exclusive {
                try await database.raw("SELECT version FROM schema_migrations").all().map {
                    try $0.decode(column: "version", as: Int.self)
                }
            })
        for migration in Self.migrations where !applied.contains(migration.version) {
            try await transaction {
                for statement in migration.statements {
                    try await database.raw(SQLQueryString(statement)).run()
                }
                try await database.raw(
                    "INSERT INTO schema_migrations (version, applied_at) VALUES (\(bind: migration.version), \(bind: nowMilliseconds))"
                ).run()
            }
            logger.info("Database migrated", metadata: ["herald.migration": "\(migration.version)"])
        }
    }

    // MARK: Counters

    /// Adds to a persistent counter (e.g. deliveries resent after a crash).
    func addToCounter(_ name: String, _ amount: Int) async throws {
        try await database.raw(
            "INSERT INTO counters (name, value) VALUES (\(bind: name), \(bind: amount)) ON CONFLICT (name) DO UPDATE SET value = counters.value + excluded.value"
        ).run()
    }

    /// A persistent counter's value.
    package func counter(_ name: String) async throws -> Int {
        try await exclusive {
            try await database.raw("SELECT value FROM counters WHERE name = \(bind: name)").first()?
                .decode(column: "value", as: Int.self) ?? 0
        }
    }
}

extension HeraldStore {
    /// The store's clock reading.
    package var now: Date { clock.now() }
}
