package import Foundation
package import HeraldCore
import Synchronization

/// The contents of the notifications this process accepted last, by id: the dispatcher plans
/// a fresh notification without reading back and decoding what the API just wrote (a trip to
/// the database on every single-device send). Contents never change once stored, so a copy is
/// as good as the row; what is not here (older, or accepted by another node) is read. The APNs
/// payload the API rendered to check a plain notification's size is kept too, so it is not
/// rendered a second time to be sent.
package final class RecentContents: Sendable {
    private struct State {
        var contents: [UUID: StoredNotificationContent] = [:]
        var apnsPayloads: [UUID: Data] = [:]
        var order: [UUID] = []
        var next = 0
    }

    private let capacity: Int
    private let state = Mutex(State())

    package init(capacity: Int = 512) {
        self.capacity = capacity
    }

    /// Keeps `content` (and its APNs payload, when rendered already) for `id`, forgetting the
    /// oldest beyond `capacity`.
    package func insert(_ id: UUID, _ content: StoredNotificationContent, apnsPayload: Data? = nil) {
        state.withLock { state in
            if state.order.count < capacity {
                state.order.append(id)
            } else {
                let oldest = state.order[state.next]
                state.contents[oldest] = nil
                state.apnsPayloads[oldest] = nil
                state.order[state.next] = id
                state.next = (state.next + 1) % capacity
            }
            state.contents[id] = content
            state.apnsPayloads[id] = apnsPayload
        }
    }

    /// The APNs payloads held of `ids` (plain notifications: the same bytes for every device).
    package func apnsPayloads(_ ids: some Sequence<UUID>) -> [UUID: Data] {
        state.withLock { state in
            var found: [UUID: Data] = [:]
            for id in ids { if let payload = state.apnsPayloads[id] { found[id] = payload } }
            return found
        }
    }

    /// The contents held of `ids`.
    package func contents(_ ids: some Sequence<UUID>) -> [UUID: StoredNotificationContent] {
        state.withLock { state in
            var found: [UUID: StoredNotificationContent] = [:]
            for id in ids { if let content = state.contents[id] { found[id] = content } }
            return found
        }
    }
}
