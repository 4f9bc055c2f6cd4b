import Foundation
import NIOPosix
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Makes a SQLite commit durable after the fact, off the writer: fsyncs the WAL file (which
/// holds every committed frame) on a thread of its own. The connection runs
/// `synchronous=NORMAL`, so a commit writes its frames without syncing them; a durable
/// transaction (an accepted notification) commits that way, lets the writer go, and waits here
/// before its caller answers. Syncs are shared: one fsync covers every commit that finished
/// before it started, so accepts arriving together wait for one or two fsyncs, not one each,
/// and no transaction waits behind another's fsync while it holds the writer (as it did with
/// `synchronous=FULL` toggled around the accept: two more statements and the fsync, all under
/// the one writer lock).
final class SQLiteWALSync: Sendable {
    private let walPath: String
    private let databasePath: String
    private let threadPool: NIOThreadPool
    private let state = Mutex(State())
    /// fsyncs done (tests read it through `HeraldStore.walSyncs`).
    let syncs = Atomic<Int>(0)

    private struct State {
        /// Tickets handed out: one per commit to make durable.
        var requested: UInt64 = 0
        var running = false
        var waiters: [(ticket: UInt64, continuation: CheckedContinuation<Void, any Error>)] = []
    }

    init(databasePath: String) {
        self.databasePath = databasePath
        walPath = databasePath + "-wal"
        threadPool = NIOThreadPool(numberOfThreads: 1)
        threadPool.start()
    }

    func shutdown() async {
        try? await threadPool.shutdownGracefully()
    }

    /// Returns once everything committed before the call is on disk.
    func sync() async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let start = state.withLock { state in
                state.requested += 1
                state.waiters.append((state.requested, continuation))
                guard !state.running else { return false }
                state.running = true
                return true
            }
            if start { round() }
        }
    }

    /// One fsync for every ticket handed out before it starts; then another while tickets wait.
    private func round() {
        let target = state.withLock { $0.requested }
        Task {
            let result: Result<Void, any Error>
            do {
                try await threadPool.runIfActive { try self.fsyncFiles() }
                result = .success(())
            } catch {
                result = .failure(error)
            }
            let (done, again) = state.withLock { state in
                let done = state.waiters.filter { $0.ticket <= target }
                state.waiters.removeAll { $0.ticket <= target }
                state.running = !state.waiters.isEmpty
                return (done, state.running)
            }
            for waiter in done { waiter.continuation.resume(with: result) }
            if again { round() }
        }
    }

    /// fdatasync of the WAL (any descriptor of the file flushes its data; its size goes with it
    /// when it grew, its timestamps need not, as in SQLite's own sync on Linux). Without a WAL
    /// file (the last connection's close checkpointed and removed it) the committed pages are
    /// in the database file: that one is synced instead.
    private func fsyncFiles() throws {
        var descriptor = open(walPath, O_RDONLY | O_CLOEXEC)
        if descriptor < 0 && errno == ENOENT { descriptor = open(databasePath, O_RDONLY | O_CLOEXEC) }
        guard descriptor >= 0 else { throw StoreError(.io, "cannot open the SQLite WAL to sync it (errno \(errno))") }
        defer { close(descriptor) }
        guard fdatasync(descriptor) == 0 else {
            throw StoreError(.io, "fdatasync of the SQLite WAL failed (errno \(errno))")
        }
        syncs.add(1, ordering: .relaxed)
    }
}
