package import HeraldCore
import HeraldStore
import Synchronization

/// Deliveries the API claimed for this node as it accepted them (`NotificationRepository.acceptNotification`
/// with `directUpTo`), waiting for the dispatcher: a single-device send goes from the 202 to the
/// provider without a claim transaction of its own. Open only while the dispatcher runs, and
/// only for as many as it has room for; what is left when it stops is given back to the queue.
package final class DirectClaims: Sendable {
    private struct State {
        var open = false
        var room = 0
        var capacity = 0
        var waiting: [ClaimedDelivery] = []
    }

    private let state = Mutex(State())

    /// Deliveries one notification may claim at acceptance.
    static let perNotification = 64

    package init() {}

    /// How many deliveries the API may claim for the next notification (0: accept it queued).
    package var room: Int {
        min(Self.perNotification, bulkRoom?.room ?? 0)
    }

    /// How many deliveries the timer loop may claim for a batch of due steps (no
    /// per-notification cap: a step's notification goes to thousands of users), and the
    /// dispatcher's capacity (`outbox.max_in_flight`); nil while the dispatcher takes no work.
    package var bulkRoom: (room: Int, capacity: Int)? {
        state.withLock { state in
            state.open ? (max(0, state.room - state.waiting.count), state.capacity) : nil
        }
    }

    /// Handed over by the API after its commit; returns them if the dispatcher has stopped
    /// meanwhile (the caller gives them back to the queue).
    package func add(_ claimed: [ClaimedDelivery]) -> [ClaimedDelivery] {
        guard !claimed.isEmpty else { return [] }
        return state.withLock { state in
            guard state.open else { return claimed }
            state.waiting += claimed
            return []
        }
    }

    /// The dispatcher's room for new work (it opens the door on its first call).
    func setRoom(_ room: Int, capacity: Int) {
        state.withLock { state in
            state.open = true
            state.room = room
            state.capacity = capacity
        }
    }

    /// Up to `limit` waiting deliveries, oldest first.
    package func take(_ limit: Int) -> [ClaimedDelivery] {
        state.withLock { state in
            let taken = Array(state.waiting.prefix(limit))
            state.waiting.removeFirst(taken.count)
            return taken
        }
    }

    /// Back at the front, for the next batch (its batch could not be prepared).
    func putBack(_ claimed: [ClaimedDelivery]) {
        state.withLock { $0.waiting.insert(contentsOf: claimed, at: 0) }
    }

    /// The API stops claiming (until the dispatcher's next `setRoom`); what waits stays for
    /// the dispatcher's `close`.
    func stopAccepting() {
        state.withLock { $0.open = false }
    }

    /// Closed: the API stops claiming; returns what was still waiting (to give back).
    func close() -> [ClaimedDelivery] {
        state.withLock { state in
            state.open = false
            defer { state.waiting = [] }
            return state.waiting
        }
    }
}
