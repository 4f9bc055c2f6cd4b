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
    /// What is held of one notification.
    private struct Entry {
        var content: StoredNotificationContent
        var apnsPayload: APNSPayloadTemplate?
    }

    private struct State {
        var entries: [UUID: Entry] = [:]
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
    package func insert(_ id: UUID, _ content: StoredNotificationContent, apnsPayload: APNSPayloadTemplate? = nil) {
        state.withLock { state in
            if state.order.count < capacity {
                state.order.append(id)
            } else {
                state.entries[state.order[state.next]] = nil
                state.order[state.next] = id
                state.next = (state.next + 1) % capacity
            }
            state.entries[id] = Entry(content: content, apnsPayload: apnsPayload)
        }
    }

    /// The contents held of `ids`, and the APNs payloads held of them (plain notifications: the
    /// same bytes for every device but its stamp).
    package func held(_ ids: some Sequence<UUID>) -> (
        contents: [UUID: StoredNotificationContent], apnsPayloads: [UUID: APNSPayloadTemplate]
    ) {
        state.withLock { state in
            var contents: [UUID: StoredNotificationContent] = [:]
            var payloads: [UUID: APNSPayloadTemplate] = [:]
            for id in ids {
                guard let entry = state.entries[id] else { continue }
                contents[id] = entry.content
                payloads[id] = entry.apnsPayload
            }
            return (contents, payloads)
        }
    }
}
