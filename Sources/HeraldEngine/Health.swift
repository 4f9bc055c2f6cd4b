import Foundation
import HeraldCore
import HeraldStore
import Synchronization

/// One health computation at a time, its answer reused while younger than the caller's
/// `maximumAge`: callers that arrive while one runs wait for it instead of starting their own.
/// A fresh answer is read under a lock, with no hop to another executor (a probe flood costs
/// the request and nothing more).
package final class HealthCache: Sendable {
    private struct State {
        var last: (report: HealthReport, at: ContinuousClock.Instant)?
        var computing = false
        var waiters: [CheckedContinuation<HealthReport, Never>] = []
        var computations = 0
    }

    private enum Step {
        case cached(HealthReport)
        case wait
        case compute
    }

    private let state = Mutex(State())

    /// How many times a report was computed (the tests count them).
    package var computations: Int { state.withLock { $0.computations } }

    /// The last report when it is younger than `maximumAge`, without waiting or computing.
    package func fresh(maximumAge: Duration) -> HealthReport? {
        state.withLock { state in
            guard let last = state.last, ContinuousClock.now - last.at < maximumAge else { return nil }
            return last.report
        }
    }

    package func report(maximumAge: Duration, compute: @Sendable () async -> HealthReport) async -> HealthReport {
        let step = state.withLock { state -> Step in
            if let last = state.last, ContinuousClock.now - last.at < maximumAge { return .cached(last.report) }
            if state.computing { return .wait }
            state.computing = true
            state.computations += 1
            return .compute
        }
        switch step {
        case .cached(let report):
            return report
        case .wait:
            return await withCheckedContinuation { waiter in
                // The computation may have ended between the two locks: then its answer now.
                let ready = state.withLock { state -> HealthReport? in
                    if !state.computing, let last = state.last { return last.report }
                    state.waiters.append(waiter)
                    return nil
                }
                if let ready { waiter.resume(returning: ready) }
            }
        case .compute:
            let report = await compute()
            let waiting = state.withLock { state -> [CheckedContinuation<HealthReport, Never>] in
                state.last = (report, ContinuousClock.now)
                state.computing = false
                defer { state.waiters = [] }
                return state.waiters
            }
            for waiter in waiting { waiter.resume(returning: report) }
            return report
        }
    }
}

/// The body of `/healthz`.
package struct HealthReport: Codable, Sendable {
    package struct Dispatcher: Codable, Sendable {
        package var lastBatchAt: String?
        package var due: Int
        enum CodingKeys: String, CodingKey {
            case lastBatchAt = "last_batch_at"
            case due
        }
    }

    package struct PausedProvider: Codable, Sendable {
        package var app: String?
        package var platform: String
        package var reason: String
        package var since: String
        package var retryAt: String
        enum CodingKeys: String, CodingKey {
            case app, platform, reason, since
            case retryAt = "retry_at"
        }
    }

    /// `ok` or `unhealthy` (HTTP 503).
    package var status: String
    /// What is wrong, in words, when unhealthy.
    package var problems: [String]
    /// `writable` or `unwritable`.
    package var database: String
    package var dispatcher: Dispatcher
    package var providersPaused: [PausedProvider]

    enum CodingKeys: String, CodingKey {
        case status, problems, database, dispatcher
        case providersPaused = "providers_paused"
    }
}
