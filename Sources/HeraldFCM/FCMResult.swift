public import Foundation

/// What to do about an FCM answer (protocols.md §12).
public enum FCMDisposition: String, Sendable, Hashable {
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
public struct FCMResult: Sendable, Hashable {
    public var token: String
    public var status: Int?
    /// FCM's `errorCode` (or the Google `status` when there is none, or a Herald reason such as `Timeout`).
    public var reason: String?
    public var disposition: FCMDisposition
    public var attempts: Int
    /// `projects/{project}/messages/{id}` on success.
    public var messageName: String?
    /// Seconds to wait before trying again (`Retry-After`), when FCM said.
    public var retryAfter: TimeInterval?
    /// Seconds from sending the last attempt to its answer; `nil` when nothing was sent.
    public var latency: TimeInterval?

    public var isDelivered: Bool { disposition == .delivered }
}
