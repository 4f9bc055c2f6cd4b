package import Foundation

/// The final answer for one notification: what APNs said (or why it never could), after retries.
package struct APNSResult: Sendable, Hashable {
    /// The `apns-id` we generated and sent.
    package var apnsID: UUID
    package var deviceToken: String
    /// The HTTP status of the last answer; `nil` when APNs never answered.
    package var status: Int?
    /// The reason of the last answer, or Herald's own reason when there was none; `nil` on success.
    package var reason: APNSReason?
    package var disposition: APNSDisposition
    /// For 410: when APNs last confirmed the token invalid.
    package var timestamp: Date?
    /// Answers received (including the last one).
    package var attempts: Int

    package var isAccepted: Bool { disposition == .delivered }

    /// The reason as a counter key: `"Unregistered"`, or `"HTTP <status>"` when none was given.
    package var reasonKey: String {
        if let reason { return reason.rawValue }
        if let status { return "HTTP \(status)" }
        return "Unknown"
    }
}
