import Logging
import NIOCore
import NIOPosix
import SQLiteNIO

/// Copies the SQLite WAL into the database on a connection and thread of its own, so the writer
/// never does it inside a commit. A checkpoint writes every page a commit touched a second time
/// and fsyncs both files; inline, that was a fifth of a million-device import (17 of the writer's
/// 63% busy, plus ~5 s waiting on fsync). Here it overlaps the writer's next transaction.
///
/// Every `interval`, a PASSIVE checkpoint copies what the writer has committed (it never blocks
/// the writer). When the writer keeps ahead and the WAL passes `restartPages`, a RESTART
/// checkpoint waits for the writer's transaction to end, copies the little that is left and
/// makes the next commit start the WAL from its beginning: the file stays bounded (the writer's
/// `journal_size_limit` truncates it). The writer keeps a far larger `wal_autocheckpoint` as a
/// backstop should this one stop.
final class SQLiteCheckpointer: Sendable {
    private let connection: SQLiteConnection
    private let threadPool: NIOThreadPool
    private let loop: Task<Void, Never>

    /// WAL pages (4 KiB) past which a checkpoint that has not caught up restarts the WAL.
    static let restartPages = 16_384
    static let interval = Duration.milliseconds(100)

    private init(connection: SQLiteConnection, threadPool: NIOThreadPool, logger: Logger) {
        self.connection = connection
        self.threadPool = threadPool
        loop = Task {
            var failures = 0
            while !Task.isCancelled {
                try? await Task.sleep(for: Self.interval)
                do {
                    try await Self.checkpoint(connection, logger: logger)
                    failures = 0
                } catch {
                    failures += 1
                    // Busy (another process's checkpoint, a long transaction) is normal now and then.
                    if failures == 50 {
                        logger.warning(
                            "WAL checkpoints keep failing; the writer checkpoints itself at its limit",
                            metadata: ["herald.error": "\(String(describing: error))"])
                    }
                }
            }
        }
    }

    /// Opens the checkpointing connection on `path` (a file; none for `:memory:`).
    static func start(path: String, logger: Logger) async throws -> SQLiteCheckpointer {
        let threadPool = NIOThreadPool(numberOfThreads: 1)
        threadPool.start()
        do {
            let connection = try await SQLiteConnection.open(
                storage: .file(path: path), threadPool: threadPool, logger: logger, on: MultiThreadedEventLoopGroup.singleton.any())
            // A RESTART waits this long for the writer's transaction to end before it gives up.
            _ = try await connection.query("PRAGMA busy_timeout=2000")
            return SQLiteCheckpointer(connection: connection, threadPool: threadPool, logger: logger)
        } catch {
            try? await threadPool.shutdownGracefully()
            throw error
        }
    }

    private static func checkpoint(_ connection: SQLiteConnection, logger: Logger) async throws {
        let passive = try await connection.query("PRAGMA wal_checkpoint(PASSIVE)")
        guard let row = passive.first, let log = row.column("log")?.integer, let done = row.column("checkpointed")?.integer,
            log > Self.restartPages, done < log
        else { return }
        let restart = try await connection.query("PRAGMA wal_checkpoint(RESTART)")
        logger.debug(
            "WAL restarted", metadata: ["herald.wal_pages": "\(log)", "herald.busy": "\(restart.first?.column("busy")?.integer ?? -1)"])
    }

    /// Stops checkpointing and closes the connection (the writer's close checkpoints the rest).
    func stop() async {
        loop.cancel()
        await loop.value
        try? await connection.close()
        try? await threadPool.shutdownGracefully()
    }
}
