import Synchronization

/// Wakes the dispatcher early when new work is stored; otherwise it polls.
package final class WakeSignal: Sendable {
    private struct State {
        var pending = false
        var waiter: CheckedContinuation<Void, Never>?
    }

    private let state = Mutex(State())
    /// New work stored in the outbox (not only handed over in memory) since the dispatcher
    /// last asked.
    private let outboxWork = Atomic<Bool>(false)

    package init() {}

    /// Wakes a waiter, or the next one if none waits now. `outbox`: the work is in the outbox
    /// (a claim must find it), not only handed over in memory (`DirectClaims`).
    package func signal(outbox: Bool = true) {
        if outbox { outboxWork.store(true, ordering: .relaxed) }
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter
            }
            state.pending = true
            return nil
        }
        waiter?.resume()
    }

    /// Whether work was stored in the outbox since the last call.
    func takeOutboxWork() -> Bool {
        outboxWork.exchange(false, ordering: .relaxed)
    }

    /// Returns on a signal or after `timeout`, whichever comes first.
    package func wait(timeout: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                do {
                    try await Task.sleep(for: timeout)
                    self.signal()
                } catch {}
            }
            group.addTask { await self.waitForSignal() }
            await group.next()
            group.cancelAll()
        }
    }

    private func waitForSignal() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ready = state.withLock { state -> Bool in
                if state.pending {
                    state.pending = false
                    return true
                }
                if let previous = state.waiter {
                    state.waiter = nil
                    previous.resume()
                }
                state.waiter = continuation
                return false
            }
            if ready { continuation.resume() }
        }
    }
}
