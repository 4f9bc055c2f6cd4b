import Synchronization

/// How many passes the server's background loops have finished: the timer loop's passes, the
/// outbox loop's idle turns (a claim that found nothing) and the webhook loop's passes. A test
/// waits on them to know the server has looked at the moment it set up and found nothing more to
/// do, instead of sleeping for a guess.
package final class LoopPasses: Sendable {
    package struct Snapshot: Sendable, Equatable, CustomStringConvertible {
        package var timer: Int
        package var outboxIdle: Int
        package var webhook: Int

        package var description: String { "timer \(timer), outbox idle \(outboxIdle), webhook \(webhook)" }
    }

    private let timer = Atomic<Int>(0)
    private let outboxIdle = Atomic<Int>(0)
    private let webhook = Atomic<Int>(0)

    package init() {}

    package var snapshot: Snapshot {
        Snapshot(
            timer: timer.load(ordering: .acquiring), outboxIdle: outboxIdle.load(ordering: .acquiring),
            webhook: webhook.load(ordering: .acquiring))
    }

    package func timerPassed() { timer.add(1, ordering: .releasing) }
    func outboxWentIdle() { outboxIdle.add(1, ordering: .releasing) }
    func webhookPassed() { webhook.add(1, ordering: .releasing) }
}
