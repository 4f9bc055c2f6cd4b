package import Foundation
package import HeraldCore
package import Logging
import NIOCore
import NIOPosix
import PostgresKit
import PostgresNIO
import SQLKit
import SQLiteKit
import SQLiteNIO
import Synchronization

/// Herald's durable state behind SQLKit: devices, notifications and their deliveries (the
/// outbox). SQLite (WAL, one writer; every operation runs alone on the one connection,
/// transactions included) or PostgreSQL (a pool of connections shared by any number of
/// `herald serve` processes). Bulk work happens in multi-row statements; the few statements the
/// two databases write differently are chosen by `dialect`.
package final class HeraldStore: Sendable {
    /// The database the store runs on.
    package enum Dialect: String, Sendable { case sqlite, postgres }

    enum Backend: Sendable {
        case sqlite(SQLiteConnection)
        case postgres(PostgresClient, Task<Void, Never>)
    }

    let backend: Backend
    package let dialect: Dialect
    let clock: HeraldClock
    let logger: Logger
    /// This process's node id: the owner of the claims it makes (a new one per open).
    private let ownNodeID = UUID().uuidString.lowercased()
    /// The node whose claims this task's writes are made under: this process's own, except
    /// while `OutboxRepository.recordAnswers(of:_:)` writes the answers a stopped process
    /// journaled under the claims it held.
    package var nodeID: String { Self.writingFor ?? ownNodeID }
    @TaskLocal static var writingFor: String?
    private let lock = AsyncSerialLock()
    /// SQLite: where the writer's holders run (`exclusive`), on the one thread that runs the
    /// writer connection's statements.
    private let writer: SerialTaskExecutor?
    /// When this node last wrote its heartbeat (store clock, ms): a claim renews it only when
    /// it is a second old, so claims at hundreds per second do not each write the nodes table.
    let lastHeartbeat = Atomic<Int64>(0)
    /// SQLite: when a claim last looked for broadcast pages and found none (store clock, ms; 0:
    /// look at the next claim). Claims then skip the broadcast queries for a second, unless this
    /// process accepts a broadcast or gives pages back meanwhile: a single send's claim makes no
    /// trip for broadcasts that are not there.
    let noBroadcastsSince = Atomic<Int64>(0)
    /// SQLite: the earliest due time (store clock, ms) of the pages of deferred deliveries this
    /// process wrote and has not yet found due (`Int64.max`: none): from then on claims look for
    /// pages again at once, not after the quiet second.
    let deferredPageDue = Atomic<Int64>(.max)
    /// PostgreSQL: timers this node claimed and could not hand back (the database failed the
    /// write and the release): handed back before its next claim, not left `firing` while the
    /// node lives (the others only rescue the claims of dead nodes).
    let unreleasedTimerClaims = Mutex<[Int64]>([])
    /// The apps this node's dispatcher sends for; nil: every app. Due work of other apps is
    /// left where it is, for a node (or the next deploy) that has their configuration.
    private let servedApps = Mutex<Set<String>?>(nil)

    /// Limits this node's claims to `apps` (nil: every app).
    package func serve(apps: Set<String>?) { servedApps.withLock { $0 = apps } }

    /// Whether this node's claims take `app`'s due work.
    func serves(_ app: String) -> Bool { servedApps.withLock { $0?.contains(app) ?? true } }
    /// Milliseconds on the monotonic clock (what `noBroadcastsSince` holds; never 0).
    static var uptimeMilliseconds: Int64 { Int64(DispatchTime.now().uptimeNanoseconds / 1_000_000) + 1 }
    /// PostgreSQL: days the partition upkeep could not make a partition for, already reported
    /// (each is reported once per process, not at every upkeep).
    let skippedPartitions = Mutex<Set<String>>([])
    /// Whether the schema has `platform_hours` (false only for a store a test holds at an older
    /// schema version).
    let keepsPlatformHours = Atomic<Bool>(true)
    /// The migration that adds `platform_hours`.
    static let platformHoursMigration = 24
    /// Whether deferrals shared by many deliveries are kept as pages (`HeraldStore+DeferredPages`);
    /// not in a database left at an older schema (the tests of upgrades).
    let keepsDeferredPages = Atomic<Bool>(true)
    static let deferredPagesMigration = 27
    var deferredPages: Bool { keepsDeferredPages.load(ordering: .relaxed) }
    /// Whether the schema has `notification_builds` (false only for a store a test holds at an
    /// older schema version).
    let keepsNotificationBuilds = Atomic<Bool>(true)
    /// The migration that adds `notification_builds`.
    static let notificationBuildsMigration = 28
    /// Whether the schema has `type_builds` (as `keepsNotificationBuilds`).
    let keepsTypeBuilds = Atomic<Bool>(true)
    static let typeBuildsMigration = 29

    /// A page of deferred deliveries due at `due` was written: claims look for pages from then.
    func noteDeferredPage(due: Int64) {
        var earliest = deferredPageDue.load(ordering: .relaxed)
        while due < earliest {
            let (exchanged, original) = deferredPageDue.compareExchange(
                expected: earliest, desired: due, ordering: .relaxed)
            if exchanged { break }
            earliest = original
        }
    }
    /// SQLite on a file: the WAL's checkpoints, off the writer's path.
    private let checkpointer = Checkpointer()
    /// Rows per multi-row statement (SQLite allows 32,766 bound values).
    static let batchSize = 500

    /// SQLite on a file: the fsync that makes a durable transaction's commit durable.
    private let walSync: SQLiteWALSync?
    /// SQLite: accepts and opens that arrive together share a transaction (`SQLiteCommitGroup`).
    let commitGroup = SQLiteCommitGroup()
    /// SQLite: accepts and opens that shared their transaction with others.
    package var groupedWrites: Int { commitGroup.grouped.load(ordering: .relaxed) }
    /// Opens reported together, written by set-based statements (`TrackRepository.reportOpen`);
    /// under load a batch gathers for 50 ms (about 50 opens at 1,000/s: each batch costs a read,
    /// a transaction of four statements and an fsync whatever its size; an open's answer is not
    /// waited on by anyone).
    let openBatcher = WriteBatcher<
        TrackRepository.OpenReport, [TrackRepository.DeliveryKey: TrackRepository.DeliveryReference],
        TrackRepository.ReportedOpen?
    >(
        linger: .milliseconds(50), maximumBatch: HeraldStore.batchSize)
    /// Receipts reported together (`TrackRepository.recordReceipts`): a call's receipts stay
    /// together, calls arriving within 25 ms of each other under load share a transaction.
    let receiptBatcher = WriteBatcher<
        TrackRepository.ReceiptCall, [TrackRepository.DeliveryKey: TrackRepository.ReceiptDelivery],
        [TrackRepository.ReceiptOutcome]
    >(
        linger: .milliseconds(25), maximumBatch: 64)
    /// Open batches written, and the opens in them.
    package var openBatches: (batches: Int, opens: Int) {
        (openBatcher.batches.load(ordering: .relaxed), openBatcher.items.load(ordering: .relaxed))
    }

    /// Returns once every commit made before the call is on disk (SQLite on a file; elsewhere
    /// commits are durable already, or there is no disk).
    func syncCommits() async throws {
        try await walSync?.sync()
    }

    /// How SQLite's one writer was used so far: by the API's and the outbox's writes and the
    /// WAL's restarts (`foreground`), and by the batches devices' reports make (`background`,
    /// which let the others go first). Nil on PostgreSQL, whose writes do not queue for one connection.
    package var writerUse: (foreground: WriterUse, background: WriterUse)? {
        dialect == .sqlite ? lock.use : nil
    }

    /// Holds of SQLite's writer of one kind, and how long they waited for it and held it in all.
    package struct WriterUse: Sendable, Equatable {
        package var holds: Int
        package var waitedSeconds: Double
        package var heldSeconds: Double
    }

    /// SQLite on a file: how many times the WAL was synced for durable transactions.
    package var walSyncs: Int { walSync?.syncs.load(ordering: .relaxed) ?? 0 }

    private init(
        backend: Backend, clock: HeraldClock, logger: Logger, walSync: SQLiteWALSync? = nil,
        writerThread: NIOThreadPool? = nil
    ) {
        self.backend = backend
        self.walSync = walSync
        writer = writerThread.map(SerialTaskExecutor.init(threadPool:))
        switch backend {
        case .sqlite: dialect = .sqlite
        case .postgres: dialect = .postgres
        }
        self.clock = clock
        self.logger = logger
    }

    /// Opens the database named by `url` and migrates it: `sqlite://PATH` (relative or absolute),
    /// `sqlite://:memory:` for tests, or `postgres://USER:PASSWORD@HOST:PORT/DATABASE` (see
    /// `PostgresURL` for its options).
    ///
    /// `walRestartPages` (SQLite): WAL pages past which the checkpointer starts the WAL over
    /// (tests make it small). `schemaVersion`: migrate no further than this version (the tests
    /// of upgrades make a database as an older Herald left it).
    package static func open(
        url: String, clock: HeraldClock = .system, logger: Logger = Logger(label: "herald.store"),
        walRestartPages: Int = SQLiteCheckpointer.restartPages, schemaVersion: Int = .max
    ) async throws -> HeraldStore {
        let store: HeraldStore
        if url.hasPrefix("sqlite://") {
            let path = String(url.dropFirst("sqlite://".count))
            guard !path.isEmpty else { throw StoreError(.invalidURL, "database.url \"\(url)\" names no file") }
            let writerThread = NIOThreadPool(numberOfThreads: 1)
            writerThread.start()
            let connection: SQLiteConnection
            do {
                connection = try await SQLiteConnection.open(
                    storage: path == ":memory:" ? .memory : .file(path: path), threadPool: writerThread,
                    logger: logger,
                    on: MultiThreadedEventLoopGroup.singleton.any())
            } catch {
                try? await writerThread.shutdownGracefully()
                throw error
            }
            store = HeraldStore(
                backend: .sqlite(connection), clock: clock, logger: logger,
                walSync: path == ":memory:" ? nil : SQLiteWALSync(databasePath: path), writerThread: writerThread)
        } else if url.hasPrefix("postgres://") || url.hasPrefix("postgresql://") {
            let configuration = try PostgresURL(url).configuration()
            let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
            // The pool leases connections only while run() runs: start it before the first lease.
            let (started, signal) = AsyncStream<Void>.makeStream()
            let run = Task {
                signal.finish()
                await client.run()
            }
            for await _ in started {}
            await Task.yield()
            store = HeraldStore(backend: .postgres(client, run), clock: clock, logger: logger)
        } else {
            throw StoreError(
                .invalidURL,
                "database.url must start with sqlite:// or postgres:// (got \"\(PostgresURL.redacted(url))\")")
        }
        do {
            // An unreachable PostgreSQL is waited for (PostgresClient retries), and said so.
            let waiting =
                store.dialect == .postgres
                ? Task { [target = (try? PostgresURL(url).description) ?? "PostgreSQL"] in
                    var waited = 0
                    while true {
                        try await Task.sleep(for: .seconds(waited == 0 ? 5 : 30))
                        waited += waited == 0 ? 5 : 30
                        logger.warning(
                            "Waiting for the database: no connection yet; retrying",
                            metadata: ["herald.database": "\(target)", "herald.waited_s": "\(waited)"])
                    }
                } : nil
            defer { waiting?.cancel() }
            try await store.migrate(through: schemaVersion)
            if schemaVersion < Self.platformHoursMigration { store.keepsPlatformHours.store(false, ordering: .relaxed) }
            if schemaVersion < Self.notificationBuildsMigration {
                store.keepsNotificationBuilds.store(false, ordering: .relaxed)
            }
            if schemaVersion < Self.typeBuildsMigration { store.keepsTypeBuilds.store(false, ordering: .relaxed) }
            if schemaVersion < Self.deferredPagesMigration {
                store.keepsDeferredPages.store(false, ordering: .relaxed)
            } else if store.dialect == .sqlite {
                // Pages of deferred deliveries a former process wrote are looked for when due.
                let due = try await store.exclusive { session in
                    try await session.query("SELECT MIN(due_at) FROM broadcast_pages WHERE claimed_by IS NULL")
                        .first?.first?.integer
                }
                if let due { store.noteDeferredPage(due: due) }
            }
            // Today's deliveries partition and the next days' exist before the first accept.
            let upkeep =
                schemaVersion < 11
                ? HeraldStore.PartitionUpkeep() : try await store.maintainPartitions(before: Date?.none)
            if !upkeep.created.isEmpty {
                logger.info(
                    "Deliveries partitions created",
                    metadata: ["herald.partitions": "\(upkeep.created.joined(separator: ","))"])
            }
            if case .sqlite = store.backend, let path = url.sqliteFilePath {
                let lock = store.lock
                await store.checkpointer.set(
                    try await SQLiteCheckpointer.start(path: path, restartPages: walRestartPages, logger: logger) {
                        body in
                        try await lock.withLock { try await body() }
                    })
                for use in ReadingUse.allCases {
                    await store.checkpointer.setReader(
                        try await SQLiteReader.open(path: path, logger: logger), for: use)
                }
            }
        } catch {
            await store.close()
            throw error
        }
        return store
    }

    package func close() async {
        switch backend {
        case .sqlite(let connection):
            await checkpointer.take()?.stop()
            for reader in await checkpointer.takeReaders() { await reader.close() }
            // The future's close runs when the closing task is cancelled too (the async one
            // gives up on cancellation and leaves the handle open, which traps in debug builds).
            try? await connection.close().get()
            await walSync?.shutdown()
            try? await writer?.threadPool.shutdownGracefully()
        case .postgres(_, let run):
            run.cancel()
            await run.value
        }
    }

    /// Runs `body` with a connection of its own: the one SQLite connection, held alone, or a
    /// pooled PostgreSQL connection. `background`: on SQLite, the other waiters that are not
    /// background go first (`AsyncSerialLock`).
    func exclusive<Result: Sendable>(background: Bool = false, _ body: (Session) async throws -> Result)
        async throws -> Result
    {
        switch backend {
        case .sqlite(let connection):
            // On an executor of its own, not the cooperative pool: see `SerialTaskExecutor`.
            return try await withTaskExecutorPreference(writer) {
                try await lock.withLock(background: background) {
                    try await body(Session(sql: connection.sql(queryLogLevel: nil), raw: .sqlite(connection)))
                }
            }
        case .postgres(let client, _):
            do {
                return try await client.withConnection { connection in
                    try await body(Session(sql: connection.sql(queryLogLevel: nil), raw: .postgres(connection)))
                }
            } catch let error as PSQLError where PostgresURL.isUnstorableText(error) {
                throw StoreError(.unstorableText, "a text value holds a character PostgreSQL cannot store (NUL)")
            }
        }
    }

    /// Runs read-only `body` where it holds nobody up: on SQLite files the reading connection
    /// (WAL: it sees the last commit and neither waits for the writer nor blocks it), elsewhere
    /// like `exclusive`.
    func reading<Result: Sendable>(_ use: ReadingUse = .general, _ body: (Session) async throws -> Result) async throws
        -> Result
    {
        if case .sqlite = backend, let reader = await checkpointer.reader(use) {
            return try await body(
                Session(sql: reader.connection.sql(queryLogLevel: nil), raw: .sqlite(reader.connection)))
        }
        return try await exclusive(body)
    }

    /// Runs `body` inside one transaction on a connection of its own. A transaction that lost a
    /// race with another (PostgreSQL: serialization failure, deadlock, or a unique key another
    /// transaction just took; a check the body found changed, `StoreError.Code.raceLost`) is
    /// run again, up to three times.
    ///
    /// `background`: writes no caller is in a hurry for (see `exclusive`).
    ///
    /// `durable`: on a SQLite file, returns only once the commit is on disk: the WAL is synced
    /// after the writer is let go (`SQLiteWALSync`, one fsync shared by the commits that wait
    /// together; the connection's `synchronous=NORMAL` syncs only at checkpoints, so a power cut
    /// could lose the last commits of other transactions). PostgreSQL commits are durable.
    func transaction<Result: Sendable>(
        durable: Bool = false, background: Bool = false, _ body: (Session) async throws -> Result
    ) async throws -> Result {
        var attempt = 0
        while true {
            attempt += 1
            do {
                let result = try await exclusive(background: background) { session in
                    try await inTransaction(session, body)
                }
                if durable, let walSync { try await walSync.sync() }
                return result
            } catch  where attempt < 3 && Self.lostRace(error) {
                logger.debug("Transaction lost a race; running it again", metadata: ["herald.attempt": "\(attempt)"])
            }
        }
    }

    /// Whether `error` is a race another transaction won (PostgreSQL's, or a check a write found
    /// changed: `StoreError.Code.raceLost`), which running again resolves.
    private static func lostRace(_ error: any Error) -> Bool {
        if let error = error as? PSQLError { return PostgresURL.isRaceLost(error) }
        return (error as? StoreError)?.code == .raceLost
    }

    /// Runs `body` inside one transaction on a session already held (BEGIN IMMEDIATE on SQLite:
    /// the write lock up front), committing, or rolling back when it throws.
    func inTransaction<Result: Sendable>(_ session: Session, _ body: (Session) async throws -> Result) async throws
        -> Result
    {
        // SQLite's through its connection's own calls: SQLKit's would pass each through an event loop.
        func run(_ statement: String) async throws {
            if case .sqlite = session.raw {
                _ = try await session.query(statement)
            } else {
                try await session.sql.raw(SQLQueryString(statement)).run()
            }
        }
        try await run(dialect == .sqlite ? "BEGIN IMMEDIATE" : "BEGIN")
        do {
            let result = try await body(session)
            try await run("COMMIT")
            return result
        } catch {
            try? await run("ROLLBACK")
            throw error
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

    /// Writes the heartbeat row: throws when the database does not take writes (read-only
    /// file, full disk, lost lock, a PostgreSQL in recovery), which `/healthz` reports.
    package func checkWritable() async throws {
        let now = nowMilliseconds
        try await exclusive { session in
            try await session.sql.raw(
                "INSERT INTO heartbeat (id, at) VALUES (1, \(bind: now)) ON CONFLICT (id) DO UPDATE SET at = excluded.at"
            ).run()
        }
    }

    /// Makes this SQLite connection refuse writes (`PRAGMA query_only`), or take them again: how
    /// the tests make the database unwritable for `/healthz`. Not available on PostgreSQL.
    package func setQueryOnly(_ on: Bool) async throws {
        guard dialect == .sqlite else { throw StoreError(.unsupported, "setQueryOnly is for SQLite") }
        try await exclusive { session in
            try await session.sql.raw(SQLQueryString(on ? "PRAGMA query_only = ON" : "PRAGMA query_only = OFF")).run()
        }
    }

    /// Runs `body` while this store's writer is held (SQLite: its one connection; PostgreSQL: a
    /// pooled connection): how the tests show what does or does not wait for the writer.
    package func withWriterHeld(_ body: () async throws -> Void) async throws {
        try await exclusive { _ in try await body() }
    }

    // MARK: Counters

    /// Adds to a persistent counter (e.g. deliveries resent after a crash).
    func addToCounter(_ name: String, _ amount: Int, _ session: Session) async throws {
        try await session.sql.raw(
            "INSERT INTO counters (name, value) VALUES (\(bind: name), \(bind: amount)) ON CONFLICT (name) DO UPDATE SET value = counters.value + excluded.value"
        ).run()
    }

    /// A persistent counter's value.
    package func counter(_ name: String) async throws -> Int {
        try await exclusive { session in
            try await session.sql.raw("SELECT value FROM counters WHERE name = \(bind: name)").first()?
                .decode(column: "value", as: Int.self) ?? 0
        }
    }
}

/// Holds the checkpointer and the reading connection started after migrations, until `close`
/// takes them.
private actor Checkpointer {
    private var running: SQLiteCheckpointer?
    private var readers: [ReadingUse: SQLiteReader] = [:]
    func set(_ checkpointer: SQLiteCheckpointer) { running = checkpointer }
    func setReader(_ reader: SQLiteReader, for use: ReadingUse) { readers[use] = reader }
    func reader(_ use: ReadingUse) -> SQLiteReader? { readers[use] }
    func take() -> SQLiteCheckpointer? {
        defer { running = nil }
        return running
    }
    func takeReaders() -> [SQLiteReader] {
        defer { readers = [:] }
        return Array(readers.values)
    }
}

/// What a SQLite reading connection serves: each use has its own, so a due wave's reads
/// (`timers`) never hold up the gauges' or the dispatcher's, and the deliveries devices' reports
/// look up (`reports`, thousands a second in a campaign) neither wait behind a gauge's scan nor
/// hold up the dispatcher's page reads.
enum ReadingUse: CaseIterable, Sendable {
    case general
    case timers
    case reports
}

extension String {
    /// The file of a `sqlite://` URL; nil for `:memory:`.
    package var sqliteFilePath: String? {
        let path = String(dropFirst("sqlite://".count))
        return path == ":memory:" ? nil : path
    }
}

extension HeraldStore {
    /// The store's clock reading.
    package var now: Date { clock.now() }
}
