import Synchronization
import Testing

@testable import HeraldEngine

/// The dispatcher's wake-up: a wait ends on a signal, on its timeout, or when its task is
/// cancelled — never later, so a stopping service cannot hang in it.
@Suite struct WakeSignalTests {
    final class Flag: Sendable {
        let value = Atomic<Bool>(false)
    }

    /// Starts `wait(timeout:)` with a timeout no test reaches, and reports when it returned.
    private static func startWaiting(_ wake: WakeSignal) -> (Task<Void, Never>, Flag) {
        let returned = Flag()
        let task = Task {
            await wake.wait(timeout: .seconds(3600))
            returned.value.store(true, ordering: .sequentiallyConsistent)
        }
        return (task, returned)
    }

    /// Polls until the wait returned; a wait that never returns fails the test after a minute
    /// instead of hanging the run.
    private static func returns(_ returned: Flag) async -> Bool {
        for _ in 0..<1200 {
            if returned.value.load(ordering: .sequentiallyConsistent) { return true }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return false
    }

    @Test("a signal sent before the wait ends the next wait at once, and counts as outbox work")
    func signalBeforeWait() async {
        let wake = WakeSignal()
        wake.signal()
        let (_, returned) = Self.startWaiting(wake)
        #expect(await Self.returns(returned))
        #expect(wake.takeOutboxWork())
        #expect(!wake.takeOutboxWork())
    }

    @Test("a signal ends a wait in progress; an in-memory hand-over is not outbox work")
    func signalDuringWait() async {
        let wake = WakeSignal()
        let (_, returned) = Self.startWaiting(wake)
        try? await Task.sleep(for: .milliseconds(20))
        wake.signal(outbox: false)
        #expect(await Self.returns(returned))
        #expect(!wake.takeOutboxWork())
    }

    @Test("cancelling the waiting task ends its wait, whether or not it had begun waiting")
    func cancellation() async {
        for delay in [0, 1, 20] {
            let wake = WakeSignal()
            let (task, returned) = Self.startWaiting(wake)
            if delay > 0 { try? await Task.sleep(for: .milliseconds(delay)) }
            task.cancel()
            #expect(await Self.returns(returned), "cancelled after \(delay) ms")
            #expect(!wake.takeOutboxWork())
        }
    }

    @Test("a timeout ends the wait and counts as outbox work, so the caller polls the outbox")
    func timeout() async {
        let wake = WakeSignal()
        await wake.wait(timeout: .milliseconds(1))
        #expect(wake.takeOutboxWork())
        // The wait that timed out leaves nothing behind: a later signal wakes a later wait.
        let (_, returned) = Self.startWaiting(wake)
        wake.signal()
        #expect(await Self.returns(returned))
    }
}
