import ArgumentParser
import Foundation
import HeraldCore
import HeraldStore
import Logging
import Synchronization

/// `herald migrate`: a stopped SQLite store moved into an empty PostgreSQL database.
struct MigrateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate",
        abstract: "Move a stopped SQLite store into an empty PostgreSQL database, resumably, and verify it.",
        discussion: """
            Every table Herald keeps is copied in batches (devices, users and preferences, badges, enrolments \
            and their pending steps, events, scheduled and queued deliveries, broadcasts, webhooks not yet \
            delivered, app secrets so action tokens already sent keep working, analytics counters); each batch \
            is written with its progress in one PostgreSQL transaction, so running the command again after an \
            interruption resumes where it stopped. --verify compares each table's row count and checksum. \
            Stop Herald first; afterwards point database.url at PostgreSQL and start it: it continues the \
            SQLite store's work. The SQLite file is only read (and migrated to this Herald's schema).
            """)

    @Option(help: "The SQLite store: sqlite://FILE.") var from: String
    @Option(help: "The PostgreSQL database: postgres://USER:PASSWORD@HOST:PORT/DB (empty, or a migration to resume).")
    var to: String
    @Flag(help: "Afterwards, compare every table's row count and checksum on both sides.") var verify = false
    @Option(name: .customLong("batch-size"), help: "Rows per batch (one transaction each).") var batchSize = 1_000

    func validate() throws {
        guard from.hasPrefix("sqlite://"), from.count > "sqlite://".count else {
            throw ValidationError("--from must be sqlite://FILE")
        }
        guard to.hasPrefix("postgres://") || to.hasPrefix("postgresql://") else {
            throw ValidationError("--to must be postgres://USER:PASSWORD@HOST:PORT/DB")
        }
        guard (1...10_000).contains(batchSize) else { throw ValidationError("--batch-size must be 1–10000") }
    }

    func run() async throws {
        bootstrapLogging(defaultLevel: .warning)
        let logger = Logger(label: "herald.migrate")
        guard let path = from.sqliteFilePath, FileManager.default.fileExists(atPath: path) else {
            printError("herald migrate: no SQLite store at \(from)")
            throw ExitCode(2)
        }
        let live = try await SQLiteBackup.liveNodes(database: path, now: Date(), logger: logger)
        guard live.isEmpty else {
            printError(
                "herald migrate: a Herald is serving from \(path) (a heartbeat in the last \(Int(NodeRepository.nodeDeadAfter)) s): stop it first"
            )
            throw ExitCode(2)
        }
        let started = ContinuousClock.now
        let source: HeraldStore
        let target: HeraldStore
        do {
            source = try await HeraldStore.open(url: from, logger: logger)
        } catch {
            printError("herald migrate: cannot open \(path): \(error)")
            throw ExitCode(2)
        }
        do {
            target = try await HeraldStore.open(url: to, logger: logger)
        } catch {
            await source.close()
            printError("herald migrate: cannot open the PostgreSQL database: \(error)")
            throw ExitCode(2)
        }
        do {
            try await migrate(source: source, target: target, started: started)
        } catch {
            await source.close()
            await target.close()
            throw error
        }
        await source.close()
        await target.close()
    }

    private func migrate(source: HeraldStore, target: HeraldStore, started: ContinuousClock.Instant) async throws {
        let migration = try StoreMigration(source: source, target: target, batchSize: batchSize)
        let state = try await migration.state()
        if !state.started {
            let occupied = try await migration.occupiedTargetTables()
            guard occupied.isEmpty else {
                printError(
                    "herald migrate: the PostgreSQL database is not empty (rows in \(occupied.joined(separator: ", "))) and holds no migration to resume: give an empty database"
                )
                throw ExitCode(2)
            }
        }
        printError(
            state.finished
                ? "herald migrate: already migrated; nothing to copy"
                : state.started ? "herald migrate: resuming the migration" : "herald migrate: copying \(from) …")
        let reporter = ProgressReporter()
        let tables = try await migration.run { reporter.report($0) }
        var summary: [String: Any] = [
            "tables": Dictionary(uniqueKeysWithValues: tables.map { ($0.table, $0.copied) }),
            "rows": tables.reduce(0) { $0 + $1.copied },
        ]
        if verify {
            printError("herald migrate: verifying (row counts and checksums per table) …")
            let results = try await migration.verify()
            let mismatched = results.filter { !$0.matches }
            for result in mismatched {
                printError(
                    "herald migrate: \(result.table) differs: SQLite \(result.sourceRows) rows, PostgreSQL \(result.targetRows) rows\(result.sourceRows == result.targetRows ? ", checksums differ" : "")"
                )
            }
            summary["verified"] = mismatched.isEmpty
            if mismatched.isEmpty { printError("herald migrate: every table matches (\(results.count) tables)") }
        }
        summary["seconds"] = (ContinuousClock.now - started).seconds
        let data = (try? JSONSerialization.data(withJSONObject: summary, options: [.sortedKeys])) ?? Data()
        printOutput(String(decoding: data, as: UTF8.self))
        if summary["verified"] as? Bool == false { throw ExitCode(1) }
        printError("herald migrate: done; point database.url at the PostgreSQL database and start herald serve")
    }
}

/// Progress on standard error: each table's count as it grows (at most every half second, and
/// when it finishes), one line per table.
private final class ProgressReporter: Sendable {
    private let last = Mutex<(table: String, at: ContinuousClock.Instant)?>(nil)

    func report(_ progress: StoreMigration.TableProgress) {
        let now = ContinuousClock.now
        let due = last.withLock { last -> Bool in
            if !progress.done, let previous = last, previous.table == progress.table,
                now - previous.at < .milliseconds(500)
            {
                return false
            }
            last = (progress.table, now)
            return true
        }
        guard due else { return }
        let percent = progress.total > 0 ? min(100, progress.copied * 100 / progress.total) : 100
        printError(
            "  \(progress.table): \(progress.copied) of \(progress.total) rows (\(percent)%)\(progress.done ? ", done" : "")"
        )
    }
}
