package import Foundation

/// What to do about an FCM answer (protocols.md §12).
package enum FCMDisposition: String, Sendable, Hashable {
    case delivered
    /// `UNREGISTERED`, `SENDER_ID_MISMATCH`: the token is unusable; stop sending to it.
    case tokenDead
    /// `INVALID_ARGUMENT` and other 4xx: no retry.
    case badRequest
    /// `THIRD_PARTY_AUTH_ERROR`, 401/403 after a fresh access token: fix the credentials.
    case configurationError
    /// `QUOTA_EXCEEDED`, `UNAVAILABLE`, `INTERNAL`, no answer: retried with backoff; final when the budget is spent.
    case retryLater
}

/// The outcome of one FCM send, after the client's retries.
package struct FCMResult: Sendable, Hashable {
    package var token: String
    package var status: Int?
    /// FCM's `errorCode` (or the Google `status` when there is none, or a Herald reason such as `Timeout`).
    package var reason: String?
    package var disposition: FCMDisposition
    package var attempts: Int
    /// `projects/{project}/messages/{id}` on success.
    package var messageName: String?
    /// Seconds to wait before trying again (`Retry-After`), when FCM said.
    package var retryAfter: TimeInterval?
    /// Seconds from sending the last attempt to its answer; `nil` when nothing was sent.
    package var latency: TimeInterval?

    package var isDelivered: Bool { disposition == .delivered }
}
