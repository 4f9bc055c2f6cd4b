import Synchronization

/// Group commit for SQLite accepts: the accepts that arrive while one transaction holds the
/// writer run together in the next one, each its own statements, under one BEGIN and COMMIT,
/// and wait for one fsync. Under load the writer spends its time on inserts instead of a
/// transaction's bookkeeping per notification; alone, an accept runs as it did. If the
/// shared transaction fails, each accept runs again in a transaction of its own, so one bad
/// request never fails another.
final class SQLiteCommitGroup: Sendable {
    typealias Body = @Sendable (Session) async throws -> NotificationRepository.Accepted

    private struct Job {
        var body: Body
        var continuation: CheckedContinuation<NotificationRepository.Accepted, any Error>
    }

    private struct State {
        var waiting: [Job] = []
        var running = false
    }

    private let state = Mutex(State())
    /// Accepts that shared their transaction with another (tests and diagnostics).
    let grouped = Atomic<Int>(0)

    /// Accepts per shared transaction at most.
    static let maximumGroup = 64

    /// Runs `body` in the next group transaction of `store` and returns once it is on disk.
    func run(_ store: HeraldStore, _ body: @escaping Body) async throws -> NotificationRepository.Accepted {
        try await withCheckedThrowingContinuation { continuation in
            let lead = state.withLock { state in
                state.waiting.append(Job(body: body, continuation: continuation))
                guard !state.running else { return false }
                state.running = true
                return true
            }
            if lead { Task { await drain(store) } }
        }
    }

    private func drain(_ store: HeraldStore) async {
        while true {
            let jobs = state.withLock { state in
                let jobs = Array(state.waiting.prefix(Self.maximumGroup))
                state.waiting.removeFirst(jobs.count)
                if jobs.isEmpty { state.running = false }
                return jobs
            }
            guard !jobs.isEmpty else { return }
            if jobs.count > 1 { grouped.add(jobs.count, ordering: .relaxed) }
            do {
                let results = try await store.transaction { session in
                    var results: [NotificationRepository.Accepted] = []
                    for job in jobs { results.append(try await job.body(session)) }
                    return results
                }
                // The next group may take the writer while this one waits for its fsync.
                Task {
                    do {
                        try await store.syncCommits()
                        for (job, result) in zip(jobs, results) { job.continuation.resume(returning: result) }
                    } catch {
                        for job in jobs { job.continuation.resume(throwing: error) }
                    }
                }
            } catch {
                for job in jobs {
                    do {
                        job.continuation.resume(returning: try await store.transaction(durable: true, job.body))
                    } catch {
                        job.continuation.resume(throwing: error)
                    }
                }
            }
        }
    }
}
