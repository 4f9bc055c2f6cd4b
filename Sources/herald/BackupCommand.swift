import ArgumentParser
import Foundation
import HeraldCore
import HeraldStore
import Logging

/// `herald backup`: a consistent copy of a live SQLite store, taken while Herald serves.
struct BackupCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backup",
        abstract: "Copy a SQLite store while Herald runs: one consistent snapshot, synced to disk.",
        discussion: """
            The copy is the database as of one instant (SQLite's VACUUM INTO in one read transaction); \
            Herald keeps accepting and sending meanwhile. The database is database.url of --config (else \
            $HERALD_CONFIG, else herald.yaml), or --database-url, or $HERALD_DATABASE_URL. PostgreSQL stores \
            are backed up with pg_dump (docs/operations.md). Put the copy back with `herald restore`.
            """)

    @Option(help: "The configuration file (for database.url).") var config: String?
    @Option(name: .customLong("database-url"), help: "The store, instead of the configuration's (sqlite://FILE).")
    var databaseURL: String?
    @Option(help: "The backup file to write; it must not exist.") var to: String

    func run() async throws {
        bootstrapLogging(defaultLevel: .warning)
        let path = try sqlitePath(
            command: "herald backup",
            try resolveDatabaseURL(command: "herald backup", config: config, databaseURL: databaseURL))
        let started = ContinuousClock.now
        printError("herald backup: copying \(path) to \(to)…")
        do {
            let summary = try await SQLiteBackup.backup(database: path, to: to, logger: Logger(label: "herald.backup"))
            let seconds = (ContinuousClock.now - started).seconds
            printError("herald backup: wrote \(to) in \(String(format: "%.1f", seconds)) s: " + describe(summary))
            printOutput(json(summary, file: to))
        } catch {
            printError("herald backup: \(error.message)")
            throw ExitCode(error.code == .io ? 1 : 2)
        }
    }
}

/// `herald restore`: a backup put back in place of a stopped server's SQLite store.
struct RestoreCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "restore",
        abstract: "Put a backup back as the SQLite store of a stopped Herald; the current files are kept.",
        discussion: """
            Checks the backup first (SQLite's quick_check, a Herald store, a schema this Herald can open) and \
            refuses while a Herald serves from the database (a heartbeat in the last 20 s). The database's \
            current files are renamed with a .before-restore-TIME suffix, never deleted; the restored file \
            takes their owner and mode. Start `herald serve` afterwards: it applies any newer schema \
            migrations and sends what the backup had not sent yet. --check only checks the backup.
            """)

    @Option(help: "The configuration file (for database.url).") var config: String?
    @Option(name: .customLong("database-url"), help: "The store, instead of the configuration's (sqlite://FILE).")
    var databaseURL: String?
    @Option(help: "The backup file (from herald backup).") var from: String
    @Flag(help: "Only check the backup; change nothing.") var check = false

    func run() async throws {
        bootstrapLogging(defaultLevel: .warning)
        let logger = Logger(label: "herald.restore")
        let summary: SQLiteBackup.Summary
        do {
            summary = try await SQLiteBackup.inspect(file: from, logger: logger)
        } catch {
            printError("herald restore: \(from) cannot be restored: \(error.message)")
            throw ExitCode(2)
        }
        printError("herald restore: \(from) checks out: " + describe(summary))
        if check {
            printOutput(json(summary, file: from))
            return
        }
        let path = try sqlitePath(
            command: "herald restore",
            try resolveDatabaseURL(command: "herald restore", config: config, databaseURL: databaseURL))
        do {
            let live = try await SQLiteBackup.liveNodes(database: path, now: Date(), logger: logger)
            guard live.isEmpty else {
                printError(
                    "herald restore: a Herald is serving from \(path) (node \(live.joined(separator: ", ")) wrote a heartbeat in the last \(Int(NodeRepository.nodeDeadAfter)) s): stop it first (systemctl stop herald), then restore"
                )
                throw ExitCode(2)
            }
            let stamp = Date().formatted(
                .iso8601.year().month().day().dateSeparator(.omitted).time(includingFractionalSeconds: false)
                    .timeSeparator(.omitted))
            let kept = try SQLiteBackup.restore(from: from, to: path, keptSuffix: ".before-restore-\(stamp)")
            for file in kept { printError("herald restore: kept the previous \(file)") }
            printError("herald restore: \(path) is now the backup; start herald serve to continue from it")
            printOutput(json(summary, file: path))
        } catch let error as StoreError {
            printError("herald restore: \(error.message)")
            throw ExitCode(1)
        }
    }
}

/// The file of a `sqlite://` database URL; other stores are refused with the tool to use.
private func sqlitePath(command: String, _ url: String) throws -> String {
    guard url.hasPrefix("sqlite://") else {
        printError(
            "\(command): \(url.hasPrefix("postgres") ? "the store is PostgreSQL: use pg_dump and pg_restore (docs/operations.md)" : "database.url is not sqlite://FILE")"
        )
        throw ExitCode(2)
    }
    guard let path = url.sqliteFilePath, !path.isEmpty else {
        printError("\(command): database.url names no file")
        throw ExitCode(2)
    }
    return path
}

private func describe(_ summary: SQLiteBackup.Summary) -> String {
    let megabytes = Double(summary.bytes) / 1_048_576
    return
        "\(String(format: "%.1f", megabytes)) MiB, schema version \(summary.schemaVersion), \(summary.devices) devices, \(summary.unanswered) deliveries not answered yet"
}

private func json(_ summary: SQLiteBackup.Summary, file: String) -> String {
    let object: [String: Any] = [
        "file": file, "bytes": summary.bytes, "schema_version": summary.schemaVersion, "devices": summary.devices,
        "unanswered_deliveries": summary.unanswered,
    ]
    let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
    return String(decoding: data, as: UTF8.self)
}
