import Synchronization

/// A lock for async code: one holder at a time, across suspension points. The store uses it so
/// that a transaction's statements never interleave with another caller's on the single SQLite
/// connection. Waiters are served first come, first served, except that a `background` waiter
/// (the batches of opens and receipts devices report, which no API caller waits on in a hurry)
/// lets the others go first — a send's accept, a claim, the results of a wave — up to
/// `maximumPassed` times, so it is never starved.
final class AsyncSerialLock: Sendable {
    private struct Waiter {
        var continuation: CheckedContinuation<Void, Never>
        var background: Bool
        /// How often another waiter that came later was served first.
        var passed = 0
    }

    private struct State {
        var isLocked = false
        var waiters: [Waiter] = []
    }

    private let state = Mutex(State())
    /// How often a background waiter lets a later one go first, at most.
    static let maximumPassed = 4

    /// Callers waiting for the lock (tests).
    var waiting: Int { state.withLock { $0.waiters.count } }

    /// The lock's use so far by foreground (`[0]`) and background (`[1]`) holders.
    private let tallies = [Tally(), Tally()]

    private final class Tally: Sendable {
        let holds = Atomic<Int>(0)
        let waitedNanoseconds = Atomic<Int>(0)
        let heldNanoseconds = Atomic<Int>(0)
    }

    /// The lock's use so far by foreground holders and by background ones.
    var use: (foreground: HeraldStore.WriterUse, background: HeraldStore.WriterUse) {
        let uses = tallies.map { tally in
            HeraldStore.WriterUse(
                holds: tally.holds.load(ordering: .relaxed),
                waitedSeconds: Double(tally.waitedNanoseconds.load(ordering: .relaxed)) / 1e9,
                heldSeconds: Double(tally.heldNanoseconds.load(ordering: .relaxed)) / 1e9)
        }
        return (uses[0], uses[1])
    }

    func withLock<Result: Sendable>(background: Bool = false, _ body: () async throws -> Result) async throws
        -> Result
    {
        let asked = ContinuousClock.now
        await acquire(background: background)
        let taken = ContinuousClock.now
        defer {
            release()
            let tally = tallies[background ? 1 : 0]
            tally.holds.add(1, ordering: .relaxed)
            tally.waitedNanoseconds.add(Self.nanoseconds(taken - asked), ordering: .relaxed)
            tally.heldNanoseconds.add(Self.nanoseconds(ContinuousClock.now - taken), ordering: .relaxed)
        }
        return try await body()
    }

    private static func nanoseconds(_ duration: Duration) -> Int {
        let (seconds, attoseconds) = duration.components
        return Int(seconds) &* 1_000_000_000 &+ Int(attoseconds / 1_000_000_000)
    }

    private func acquire(background: Bool) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let acquired = state.withLock { state -> Bool in
                if !state.isLocked {
                    state.isLocked = true
                    return true
                }
                state.waiters.append(Waiter(continuation: continuation, background: background))
                return false
            }
            if acquired { continuation.resume() }
        }
    }

    private func release() {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard !state.waiters.isEmpty else {
                state.isLocked = false
                return nil
            }
            // The first waiter, unless it is a background one that may still let a later,
            // foreground waiter go first.
            var chosen = 0
            if state.waiters[0].background, state.waiters[0].passed < Self.maximumPassed,
                let foreground = state.waiters.firstIndex(where: { !$0.background })
            {
                chosen = foreground
                for index in 0..<foreground { state.waiters[index].passed += 1 }
            }
            return state.waiters.remove(at: chosen).continuation
        }
        next?.resume()
    }
}
