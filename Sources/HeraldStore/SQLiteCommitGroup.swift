import Synchronization

/// Group commit for SQLite's small durable writes (accepts, opens): those that arrive while one
/// transaction holds the writer run together in the next one, each its own statements, under
/// one BEGIN and COMMIT, and wait for one fsync. Under load the writer spends its time on the
/// statements instead of a transaction's bookkeeping per request; alone, a write runs as it
/// did. If the shared transaction fails, each write runs again in a transaction of its own, so
/// one bad request never fails another.
final class SQLiteCommitGroup: Sendable {
    typealias Body = @Sendable (Session) async throws -> any Sendable

    private struct Job {
        var body: Body
        var continuation: CheckedContinuation<any Sendable, any Error>
    }

    private struct State {
        var waiting: [Job] = []
        var running = false
    }

    private let state = Mutex(State())
    /// Writes that shared their transaction with another (tests and diagnostics).
    let grouped = Atomic<Int>(0)

    /// Writes per shared transaction at most.
    static let maximumGroup = 64

    /// Runs `body` in the next group transaction of `store` and returns once it is on disk.
    /// `linger`: when this write would start a group, how long it waits first for others to
    /// join (for writes whose caller can wait a few milliseconds: at a steady 1,000 opens/s
    /// each open otherwise commits alone, with a thread's wake-ups and an fsync of its own).
    func run<Result: Sendable>(
        _ store: HeraldStore, linger: Duration = .zero, _ body: @escaping @Sendable (Session) async throws -> Result
    ) async throws -> Result {
        let value = try await withCheckedThrowingContinuation { continuation in
            let lead = state.withLock { state in
                state.waiting.append(Job(body: { try await body($0) }, continuation: continuation))
                guard !state.running else { return false }
                state.running = true
                return true
            }
            if lead {
                Task {
                    if linger > .zero { try? await Task.sleep(for: linger) }
                    await drain(store)
                }
            }
        }
        // The job's body made this value: it is a `Result`.
        guard let result = value as? Result else {
            throw StoreError(.corrupt, "a grouped write returned \(type(of: value)), not \(Result.self)")
        }
        return result
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
                    var results: [any Sendable] = []
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
