import Logging
import NIOCore
import NIOPosix
import SQLiteNIO

/// A second, read-only SQLite connection on a thread of its own, for the few reads that visit
/// many rows (the outbox gauges `/metrics` and `/healthz` read: 170–360 ms with a million
/// deliveries due). In WAL mode a reader neither waits for the writer nor holds it up; on the
/// writer's connection those reads stalled every accept, claim and result behind them.
final class SQLiteReader: Sendable {
    let connection: SQLiteConnection
    private let threadPool: NIOThreadPool

    private init(connection: SQLiteConnection, threadPool: NIOThreadPool) {
        self.connection = connection
        self.threadPool = threadPool
    }

    /// Opens the reading connection on `path` (a file; none for `:memory:`).
    static func open(path: String, logger: Logger) async throws -> SQLiteReader {
        let threadPool = NIOThreadPool(numberOfThreads: 1)
        threadPool.start()
        do {
            let connection = try await SQLiteConnection.open(
                storage: .file(path: path), threadPool: threadPool, logger: logger,
                on: MultiThreadedEventLoopGroup.singleton.any())
            for pragma in ["PRAGMA query_only=ON", "PRAGMA busy_timeout=5000", "PRAGMA cache_size=-8192"] {
                _ = try await connection.query(pragma)
            }
            return SQLiteReader(connection: connection, threadPool: threadPool)
        } catch {
            try? await threadPool.shutdownGracefully()
            throw error
        }
    }

    func close() async {
        try? await connection.close().get()
        try? await threadPool.shutdownGracefully()
    }
}
