package import Foundation
import HeraldCore
import Synchronization

/// What the dispatcher sent for the test sends (`POST …/test`) this node's API is waiting on:
/// each delivery's request as it went to its provider. Only watched notifications are kept,
/// and only until their route takes them.
package final class TestSends: Sendable {
    /// One delivery's request: the APNs headers and payload, or FCM's request body.
    package struct Sent: Sendable {
        package var headers: [String: String]
        package var body: Data

        package init(headers: [String: String], body: Data) {
            self.headers = headers
            self.body = body
        }

        /// A device's message as it went: an APNs request's headers (those the client writes,
        /// but for the authorization) and payload, or FCM's request body.
        init(_ message: DeviceMessage) {
            switch message {
            case .apns(let notification): self.init(notification)
            case .fcm(let message): self.init(headers: [:], body: (try? message.requestBody()) ?? Data())
            }
        }

        /// An APNs request's headers (those the client writes, but for the authorization) and payload.
        init(_ notification: APNSNotification) {
            var headers = [
                "apns-push-type": notification.pushType.rawValue, "apns-topic": notification.topic,
                "apns-priority": String(notification.priority.rawValue),
                "apns-id": notification.apnsID.uuidString.lowercased(),
            ]
            headers["apns-expiration"] = notification.expiration.map(String.init)
            headers["apns-collapse-id"] = notification.collapseID
            self.init(headers: headers, body: notification.payload)
        }
    }

    private let watched = Mutex<[UUID: [Int64: Sent]]>([:])

    /// Starts keeping what is sent for `notification` (before it is stored: its deliveries may
    /// go as soon as it lands).
    package func watch(_ notification: UUID) {
        watched.withLock { $0[notification] = [:] }
    }

    /// Kept if its notification is watched.
    func record(notification: UUID, delivery: Int64, _ sent: @autoclosure () -> Sent) {
        watched.withLock { watched in
            guard watched[notification] != nil else { return }
            watched[notification]?[delivery] = sent()
        }
    }

    /// What was sent so far, watching on.
    package func sent(_ notification: UUID) -> [Int64: Sent] {
        watched.withLock { $0[notification] ?? [:] }
    }

    /// Stops watching `notification`.
    package func forget(_ notification: UUID) {
        _ = watched.withLock { $0.removeValue(forKey: notification) }
    }
}
