import Foundation
import HeraldCore
import HeraldStore
import Synchronization

/// One claimed batch in flight: which deliveries still wait for an answer, the answers held for
/// the batch's provider judgement. An answer is taken once; after the batch's deadline
/// (`BatchDeadlines`) or at shutdown what is still pending is handed back and late answers are
/// ignored.
final class BatchTracker: Sendable {
    struct Held: Sendable {
        var answer: ProviderAnswer
        var delivery: ClaimedDelivery
        var trace: String?
    }

    private struct State {
        var pending: [Int64: ClaimedDelivery]
        /// Answers that blame the configuration, or may (bad token in bulk): judged per provider.
        var held: [ProviderKey: [Held]] = [:]
        var answered: [ProviderKey: Int] = [:]
        var delivered: Set<ProviderKey> = []
    }

    /// Its place among the batches handing requests to the providers.
    let turn: SubmissionTurn
    private let window: InFlightWindow
    private let state: Mutex<State>

    init(_ deliveries: [ClaimedDelivery], window: InFlightWindow, turn: SubmissionTurn = SubmissionTurn()) {
        self.turn = turn
        self.window = window
        let pending = Dictionary(deliveries.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        window.add(pending.count)
        state = Mutex(State(pending: pending))
    }

    /// Takes the answer for a pending delivery: its delivery, or nil when it was already
    /// answered or handed back. `hold` answers are kept for `takeHeld`.
    package func take(_ answer: ProviderAnswer, hold: Bool, trace: String?) -> ClaimedDelivery? {
        state.withLock { state in
            guard let delivery = state.pending.removeValue(forKey: answer.deliveryID) else { return nil }
            window.release(1)
            let provider = delivery.provider
            state.answered[provider, default: 0] += 1
            if answer.disposition == .delivered { state.delivered.insert(provider) }
            if hold { state.held[provider, default: []].append(Held(answer: answer, delivery: delivery, trace: trace)) }
            return delivery
        }
    }

    /// Removes deliveries answered without a provider (policy, pauses, unsendable).
    func settle(_ ids: some Sequence<Int64>) {
        let removed = state.withLock { state in
            ids.reduce(0) { $0 + (state.pending.removeValue(forKey: $1) == nil ? 0 : 1) }
        }
        window.release(removed)
    }

    /// The held answers of one provider with how many answers it gave and whether any was
    /// delivered; removes them.
    func takeHeld(_ provider: ProviderKey) -> (held: [Held], answered: Int, delivered: Bool) {
        state.withLock { state in
            (
                state.held.removeValue(forKey: provider) ?? [], state.answered[provider] ?? 0,
                state.delivered.contains(provider)
            )
        }
    }

    /// Providers with held answers.
    var heldProviders: [ProviderKey] { state.withLock { Array($0.held.keys) } }

    /// Hands back every delivery still waiting (deadline or shutdown).
    func expire() -> [ClaimedDelivery] {
        let rest = state.withLock { state in
            let rest = Array(state.pending.values)
            state.pending = [:]
            return rest
        }
        window.release(rest.count)
        return rest
    }
}

/// Batches hand their requests to the providers in the order they were claimed, though each
/// is sent by a task of its own: a batch waits for the one before it to be submitted (not
/// answered), so one device's notifications, claimed in order, leave in that order.
package final class SubmissionOrder: Sendable {
    private struct State {
        var issued: UInt64 = 0
        /// Every ticket below this one has been submitted.
        var current: UInt64 = 0
        var finishedAhead: Set<UInt64> = []
        var waiting: [UInt64: CheckedContinuation<Void, Never>] = [:]
    }

    private let state = Mutex(State())

    package init() {}

    /// The next batch's place in line.
    func ticket() -> UInt64 {
        state.withLock { state in
            defer { state.issued += 1 }
            return state.issued
        }
    }

    /// Returns once every batch before `ticket` is submitted.
    package func wait(_ ticket: UInt64) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ready = state.withLock { state in
                guard ticket > state.current else { return true }
                state.waiting[ticket] = continuation
                return false
            }
            if ready { continuation.resume() }
        }
    }

    /// `ticket` is submitted (or had nothing to submit): the next in line may go. Called once per ticket.
    func finish(_ ticket: UInt64) {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard ticket >= state.current else { return nil }
            state.finishedAhead.insert(ticket)
            while state.finishedAhead.remove(state.current) != nil { state.current += 1 }
            return state.waiting.removeValue(forKey: state.current)
        }
        next?.resume()
    }
}

/// One batch's place in the `SubmissionOrder`, given up once (after its first submission, or
/// when it ends without one).
package final class SubmissionTurn: Sendable {
    private let order: SubmissionOrder
    private let ticket: UInt64
    private let released = Atomic<Bool>(false)

    package init(_ order: SubmissionOrder) {
        self.order = order
        self.ticket = order.ticket()
    }

    /// A turn of its own (a batch sent alone).
    package convenience init() { self.init(SubmissionOrder()) }

    package func wait() async {
        guard !released.load(ordering: .acquiring) else { return }
        await order.wait(ticket)
    }

    package func release() {
        guard !released.exchange(true, ordering: .acquiringAndReleasing) else { return }
        order.finish(ticket)
    }
}
