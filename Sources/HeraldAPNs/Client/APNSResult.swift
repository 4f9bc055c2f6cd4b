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
    /// Seconds from writing the last attempt to its answer; `nil` when nothing was sent.
    package var latency: TimeInterval?

    package init(
        apnsID: UUID, deviceToken: String, status: Int?, reason: APNSReason?, disposition: APNSDisposition,
        timestamp: Date?, attempts: Int, latency: TimeInterval? = nil
    ) {
        self.apnsID = apnsID
        self.deviceToken = deviceToken
        self.status = status
        self.reason = reason
        self.disposition = disposition
        self.timestamp = timestamp
        self.attempts = attempts
        self.latency = latency
    }

    package var isAccepted: Bool { disposition == .delivered }

    /// The reason as a counter key: `"Unregistered"`, or `"HTTP <status>"` when none was given.
    package var reasonKey: String {
        if let reason { return reason.rawValue }
        if let status { return "HTTP \(status)" }
        return "Unknown"
    }
}
