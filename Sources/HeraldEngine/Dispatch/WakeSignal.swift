import Synchronization

/// Wakes the dispatcher early when new work is stored; otherwise it polls.
///
/// One task waits at a time. A wait ends on a signal, on its timeout, or when the waiting task
/// is cancelled, so a service that is shutting down never hangs in it.
package final class WakeSignal: Sendable {
    private struct State {
        var pending = false
        var waiter: (id: UInt64, continuation: CheckedContinuation<Void, Never>)?
        /// The wait whose task was cancelled before it registered; it must not register.
        var cancelledBeforeRegistering: UInt64?
        var nextID: UInt64 = 0
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
                return waiter.continuation
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

    /// Returns on a signal, after `timeout`, or when the calling task is cancelled, whichever
    /// comes first. A timeout counts as outbox work: the caller polls the outbox then.
    package func wait(timeout: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                do {
                    try await Task.sleep(for: timeout)
                    self.outboxWork.store(true, ordering: .relaxed)
                } catch {}
            }
            group.addTask { await self.waitForSignal() }
            await group.next()
            group.cancelAll()
        }
    }

    private func waitForSignal() async {
        let id = state.withLock { state -> UInt64 in
            state.nextID &+= 1
            return state.nextID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state -> [CheckedContinuation<Void, Never>] in
                    if state.cancelledBeforeRegistering == id {
                        state.cancelledBeforeRegistering = nil
                        return [continuation]
                    }
                    if state.pending {
                        state.pending = false
                        return [continuation]
                    }
                    let previous = state.waiter
                    state.waiter = (id, continuation)
                    return previous.map { [$0.continuation] } ?? []
                }
                for waiting in resumeNow { waiting.resume() }
            }
        } onCancel: {
            let waiting = state.withLock { state -> CheckedContinuation<Void, Never>? in
                if let waiter = state.waiter, waiter.id == id {
                    state.waiter = nil
                    return waiter.continuation
                }
                state.cancelledBeforeRegistering = id
                return nil
            }
            waiting?.resume()
        }
    }
}

/// A one-way switch shared between tasks.
package final class OneWayFlag: Sendable {
    private let value = Atomic<Bool>(false)
    package init() {}
    package var isSet: Bool { value.load(ordering: .relaxed) }
    package func set() { value.store(true, ordering: .relaxed) }
}
