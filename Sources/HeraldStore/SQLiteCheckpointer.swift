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
/// the writer). Under steady writes the writer commits while it copies, and SQLite starts the
/// WAL over only when a transaction begins with every frame copied, which then never happens:
/// the WAL grew to the writer's `wal_autocheckpoint` (128 MiB at 500 API sends/s in 6 s) and
/// the writer checkpointed it inside a commit, stalling API calls for 50–120 ms. So when the WAL
/// passes `restartPages`, one more PASSIVE checkpoint runs while the store holds its writer
/// lock (`pauseWriter`): no commit lands meanwhile, it copies what the last one left (1–5 ms),
/// and the next commit starts the WAL from its beginning (the writer's `journal_size_limit`
/// truncates the file). The writer's `wal_autocheckpoint` stays as a backstop should this stop.
package final class SQLiteCheckpointer: Sendable {
    private let connection: SQLiteConnection
    private let threadPool: NIOThreadPool
    private let loop: Task<Void, Never>

    /// WAL pages (4 KiB) past which a checkpoint finishes with the writer paused, so that the
    /// WAL starts over (64 MiB, the writer's `journal_size_limit`).
    package static let restartPages = 16_384
    static let interval = Duration.milliseconds(100)

    /// Runs its argument while the store's writer is held (no transaction runs meanwhile).
    typealias PauseWriter = @Sendable (@Sendable () async throws -> Void) async throws -> Void

    private init(
        connection: SQLiteConnection, threadPool: NIOThreadPool, restartPages: Int, logger: Logger,
        pauseWriter: @escaping PauseWriter
    ) {
        self.connection = connection
        self.threadPool = threadPool
        loop = Task {
            var failures = 0
            while !Task.isCancelled {
                try? await Task.sleep(for: Self.interval)
                do {
                    try await Self.checkpoint(
                        connection, restartPages: restartPages, logger: logger, pauseWriter: pauseWriter)
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
    static func start(
        path: String, restartPages: Int = restartPages, logger: Logger, pauseWriter: @escaping PauseWriter
    ) async throws -> SQLiteCheckpointer {
        let threadPool = NIOThreadPool(numberOfThreads: 1)
        threadPool.start()
        do {
            let connection = try await SQLiteConnection.open(
                storage: .file(path: path), threadPool: threadPool, logger: logger,
                on: MultiThreadedEventLoopGroup.singleton.any())
            // Another process's checkpoint holds the checkpoint lock this long at most.
            _ = try await connection.query("PRAGMA busy_timeout=2000")
            return SQLiteCheckpointer(
                connection: connection, threadPool: threadPool, restartPages: restartPages, logger: logger,
                pauseWriter: pauseWriter)
        } catch {
            try? await threadPool.shutdownGracefully()
            throw error
        }
    }

    private static func checkpoint(
        _ connection: SQLiteConnection, restartPages: Int, logger: Logger, pauseWriter: PauseWriter
    ) async throws {
        let passive = try await connection.query("PRAGMA wal_checkpoint(PASSIVE)")
        // A checkpoint copies the frames there were when it began; the writer's commits meanwhile
        // keep the WAL from ever being all copied when the next transaction begins, which is
        // when SQLite would start it over. So a long WAL is finished with the writer paused.
        guard let log = passive.first?.column("log")?.integer, log > restartPages else { return }
        let started = ContinuousClock.now
        try await pauseWriter {
            _ = try await connection.query("PRAGMA wal_checkpoint(PASSIVE)")
        }
        logger.debug(
            "WAL checkpointed with the writer paused; the next commit starts it over",
            metadata: [
                "herald.wal_pages": "\(log)",
                "herald.paused_ms": "\(Int((ContinuousClock.now - started) / .milliseconds(1)))",
            ])
    }

    /// Stops checkpointing and closes the connection (the writer's close checkpoints the rest).
    func stop() async {
        loop.cancel()
        await loop.value
        try? await connection.close().get()
        try? await threadPool.shutdownGracefully()
    }
}
