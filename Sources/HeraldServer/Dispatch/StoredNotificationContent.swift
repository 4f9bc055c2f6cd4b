import Foundation

/// What the outbox keeps once per notification: the rendered APNs request shared by every
/// recipient device.
package struct StoredNotificationContent: Codable, Sendable, Hashable {
    package var pushType: String
    package var priority: Int
    package var collapseID: String?
    package var expiration: Int?
    /// The APNs payload JSON.
    package var payload: String

    package init(pushType: String, priority: Int, collapseID: String? = nil, expiration: Int? = nil, payload: String) {
        self.pushType = pushType
        self.priority = priority
        self.collapseID = collapseID
        self.expiration = expiration
        self.payload = payload
    }

    enum CodingKeys: String, CodingKey {
        case pushType = "push_type"
        case priority
        case collapseID = "collapse_id"
        case expiration
        case payload
    }
}
