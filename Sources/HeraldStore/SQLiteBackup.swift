package import Foundation
package import Logging
import NIOPosix
import SQLiteNIO

#if canImport(Glibc)
    import Glibc
#endif

/// Consistent copies of a SQLite store made while Herald runs (`herald backup`), and the checks
/// and file moves that put one back (`herald restore`).
package enum SQLiteBackup {
    /// What a store file holds, as the commands report it.
    package struct Summary: Sendable, Equatable {
        package var bytes: Int64
        /// The newest schema migration applied to it.
        package var schemaVersion: Int
        package var devices: Int
        /// Deliveries not answered yet (queued, deferred or being sent, and a broadcast's devices
        /// not answered yet): what a server started on this file goes on to send.
        package var unanswered: Int
    }

    /// The newest schema version this build knows.
    package static var currentSchemaVersion: Int { HeraldStore.migrations.last?.version ?? 0 }

    /// Copies the database at `path` into `destination` with `VACUUM INTO` on a read-only
    /// connection of its own: one read transaction, so the copy is the database as of one
    /// instant whatever Herald writes meanwhile (in WAL mode a reader holds up no writer). The
    /// copy is written beside `destination`, synced and renamed into place, so a file at
    /// `destination` is always a whole copy. `destination` must not exist.
    package static func backup(database path: String, to destination: String, logger: Logger) async throws(StoreError)
        -> Summary
    {
        guard FileManager.default.fileExists(atPath: path) else {
            throw StoreError(.notFound, "no database at \(path)")
        }
        guard !FileManager.default.fileExists(atPath: destination) else {
            throw StoreError(.conflict, "\(destination) exists: give a new file (a backup never overwrites one)")
        }
        let partial = destination + ".partial"
        try? FileManager.default.removeItem(atPath: partial)
        do {
            try await withReadOnlyConnection(path, logger: logger) { connection in
                _ = try await connection.query("PRAGMA busy_timeout=10000")
                _ = try await connection.query("VACUUM INTO ?", [.text(partial)])
            }
            try syncFile(partial)
            guard rename(partial, destination) == 0 else {
                throw StoreError(
                    .io, "could not rename \(partial) to \(destination): \(String(cString: strerror(errno)))")
            }
            try syncFile((destination as NSString).deletingLastPathComponent.nonEmpty ?? ".")
        } catch {
            try? FileManager.default.removeItem(atPath: partial)
            throw storeError(error, "back up \(path)")
        }
        return try await inspect(file: destination, logger: logger, check: false)
    }

    /// Reads what `file` holds. With `check`, SQLite's `quick_check` runs first and the file
    /// must be a Herald store this build can open (not one a newer Herald migrated further).
    package static func inspect(file: String, logger: Logger, check: Bool = true) async throws(StoreError) -> Summary {
        guard FileManager.default.fileExists(atPath: file) else { throw StoreError(.notFound, "no file at \(file)") }
        let bytes = ((try? FileManager.default.attributesOfItem(atPath: file))?[.size] as? NSNumber)?.int64Value ?? 0
        do {
            return try await withReadOnlyConnection(file, logger: logger) { connection in
                if check {
                    let result = try await connection.query("PRAGMA quick_check").first?.column("quick_check")?.string
                    guard result == "ok" else {
                        throw StoreError(.corrupt, "\(file) fails SQLite's check: \(result ?? "no answer")")
                    }
                }
                let tables = try await connection.query("SELECT name FROM sqlite_master WHERE type = 'table'")
                    .compactMap { $0.column("name")?.string }
                guard tables.contains("schema_migrations"), tables.contains("devices"), tables.contains("deliveries")
                else { throw StoreError(.corrupt, "\(file) is not a Herald store (no schema_migrations table)") }
                let version =
                    try await connection.query("SELECT MAX(version) AS v FROM schema_migrations").first?.column("v")?
                    .integer ?? 0
                if check && version > currentSchemaVersion {
                    throw StoreError(
                        .unsupported,
                        "\(file) has schema version \(version), newer than this Herald's \(currentSchemaVersion): restore it with the Herald that made it"
                    )
                }
                let devices = try await count(connection, "SELECT COUNT(*) AS n FROM devices")
                // Rows not answered, and a broadcast's devices not answered: those of its pages
                // handed out but not finished, and those not handed out yet.
                let rows = try await count(
                    connection, "SELECT COUNT(*) AS n FROM deliveries WHERE status IN ('queued', 'deferred', 'sending')"
                )
                let pages = try await count(connection, "SELECT COALESCE(SUM(remaining), 0) AS n FROM broadcast_pages")
                let notHanded = try await count(
                    connection, "SELECT COALESCE(SUM(MAX(expected - handed, 0)), 0) AS n FROM broadcasts")
                let unanswered = rows + pages + notHanded
                return Summary(bytes: bytes, schemaVersion: Int(version), devices: devices, unanswered: unanswered)
            }
        } catch {
            throw storeError(error, "read \(file)")
        }
    }

    /// The nodes that wrote a heartbeat into the database at `path` within
    /// `NodeRepository.nodeDeadAfter` of `now`: a Herald serving from it. Empty when the file
    /// does not exist or has no nodes table.
    package static func liveNodes(database path: String, now: Date, logger: Logger) async throws(StoreError)
        -> [String]
    {
        guard FileManager.default.fileExists(atPath: path) else { return [] }
        do {
            return try await withReadOnlyConnection(path, logger: logger) { connection in
                let tables = try await connection.query("SELECT name FROM sqlite_master WHERE name = 'nodes'")
                guard !tables.isEmpty else { return [] }
                let since = Int64((now.timeIntervalSince1970 - NodeRepository.nodeDeadAfter) * 1000)
                return try await connection.query(
                    "SELECT id FROM nodes WHERE heartbeat_at >= ? ORDER BY id", [.integer(Int(since))]
                ).compactMap { $0.column("id")?.string }
            }
        } catch {
            throw storeError(error, "read \(path)")
        }
    }

    /// Puts the backup `file` at `path`. The files there now (the database and its `-wal` and
    /// `-shm`) are renamed with `keptSuffix` appended, together, so the kept copy opens as it
    /// was; nothing is deleted. The new file takes the old one's owner and mode (or its
    /// folder's owner), so the service's user can still write it when root restores. Returns
    /// the files kept.
    package static func restore(from file: String, to path: String, keptSuffix: String) throws(StoreError) -> [String] {
        let fileManager = FileManager.default
        let owner = ownership(of: fileManager.fileExists(atPath: path) ? path : nil, folderOf: path)
        let incoming = path + ".restoring"
        try? fileManager.removeItem(atPath: incoming)
        do {
            try fileManager.copyItem(atPath: file, toPath: incoming)
            try syncFile(incoming)
        } catch {
            try? fileManager.removeItem(atPath: incoming)
            throw storeError(error, "copy \(file) to \(incoming)")
        }
        if let owner {
            _ = chown(incoming, owner.user, owner.group)
            _ = chmod(incoming, owner.mode)
        }
        var kept: [String] = []
        for suffix in ["", "-wal", "-shm"] where fileManager.fileExists(atPath: path + suffix) {
            let target = path + keptSuffix + suffix
            guard rename(path + suffix, target) == 0 else {
                throw StoreError(.io, "could not rename \(path + suffix): \(String(cString: strerror(errno)))")
            }
            kept.append(target)
        }
        guard rename(incoming, path) == 0 else {
            throw StoreError(.io, "could not rename \(incoming) to \(path): \(String(cString: strerror(errno)))")
        }
        try syncFile((path as NSString).deletingLastPathComponent.nonEmpty ?? ".")
        return kept
    }

    private static func count(_ connection: SQLiteConnection, _ sql: String) async throws -> Int {
        Int(try await connection.query(sql).first?.column("n")?.integer ?? 0)
    }

    /// Runs `body` on a read-only connection to `path` (SQLite never creates the file) on a
    /// thread of its own, closed afterwards.
    private static func withReadOnlyConnection<T: Sendable>(
        _ path: String, logger: Logger, _ body: (SQLiteConnection) async throws -> T
    ) async throws -> T {
        let threadPool = NIOThreadPool(numberOfThreads: 1)
        threadPool.start()
        defer { threadPool.shutdownGracefully { _ in } }
        let connection = try await SQLiteConnection.open(
            storage: .file(path: "file:" + uriPath(path) + "?mode=ro"), threadPool: threadPool, logger: logger,
            on: MultiThreadedEventLoopGroup.singleton.any())
        do {
            let result = try await body(connection)
            try? await connection.close().get()
            return result
        } catch {
            try? await connection.close().get()
            throw error
        }
    }

    /// A path as a `file:` URI's path: the characters a URI gives a meaning to, escaped.
    private static func uriPath(_ path: String) -> String {
        var out = ""
        for byte in path.utf8 {
            switch byte {
            case UInt8(ascii: "%"), UInt8(ascii: "?"), UInt8(ascii: "#"): out += String(format: "%%%02X", byte)
            default: out.unicodeScalars.append(Unicode.Scalar(byte))
            }
        }
        return out
    }

    private static func ownership(of path: String?, folderOf other: String) -> (
        user: uid_t, group: gid_t, mode: mode_t
    )? {
        var status = stat()
        if let path, stat(path, &status) == 0 { return (status.st_uid, status.st_gid, status.st_mode & 0o7777) }
        let folder = (other as NSString).deletingLastPathComponent.nonEmpty ?? "."
        guard stat(folder, &status) == 0 else { return nil }
        return (status.st_uid, status.st_gid, 0o640)
    }

    /// fsyncs a file or a folder (a rename is durable once its folder is synced).
    private static func syncFile(_ path: String) throws(StoreError) {
        let descriptor = open(path, O_RDONLY)
        guard descriptor >= 0 else { throw StoreError(.io, "could not open \(path) to sync it") }
        defer { close(descriptor) }
        guard fsync(descriptor) == 0 else { throw StoreError(.io, "could not sync \(path)") }
    }

    private static func storeError(_ error: any Error, _ doing: String) -> StoreError {
        if let error = error as? StoreError { return error }
        return StoreError(.io, "could not \(doing): \(error)")
    }
}

extension String {
    fileprivate var nonEmpty: String? { isEmpty ? nil : self }
}
