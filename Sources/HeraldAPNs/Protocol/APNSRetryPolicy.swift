package import Foundation

/// When to send a notification again after an answer that allows it: exponential backoff with
/// full jitter for 5xx, a longer per-token delay for 429, an immediate resend on a new
/// connection. Pure: the random source is passed in so tests are exact.
package struct APNSRetryPolicy: Sendable, Hashable {
    /// Answers (not transport losses) a notification may get before its last one is final.
    package var maximumAttempts: Int
    /// First backoff after a 5xx; doubles per attempt.
    package var baseDelay: TimeInterval
    /// No backoff is longer than this.
    package var maximumDelay: TimeInterval
    /// First delay after 429 `TooManyRequests` for a token; doubles per attempt.
    package var tooManyRequestsDelay: TimeInterval
    /// Resends after unanswered losses (GOAWAY, REFUSED_STREAM, dropped connection) before giving up.
    package var maximumResends: Int
    /// When set, transient failures are retried until this many seconds have passed since the
    /// notification was submitted (the counts above still cap it): a burst of 5xx or a GOAWAY
    /// storm is waited out instead of failing notifications after a fixed number of tries.
    package var retryDeadline: TimeInterval?
    /// Under a retry deadline no single wait is longer than this share of it, so a notification
    /// gets about this many tries however slow the backoff base (429's 5 s doubling would give
    /// only 5 tries in 60 s, and 15% failures then lose about one notification in 20,000).
    package static let triesPerDeadline = 8.0

    package init(
        maximumAttempts: Int = 5,
        baseDelay: TimeInterval = 1,
        maximumDelay: TimeInterval = 60,
        tooManyRequestsDelay: TimeInterval = 5,
        maximumResends: Int = 10,
        retryDeadline: TimeInterval? = nil
    ) {
        self.retryDeadline = retryDeadline
        self.maximumAttempts = maximumAttempts
        self.baseDelay = baseDelay
        self.maximumDelay = maximumDelay
        self.tooManyRequestsDelay = tooManyRequestsDelay
        self.maximumResends = maximumResends
    }

    /// What to do next.
    package enum Decision: Equatable, Sendable {
        /// Send again after this many seconds (0: at once).
        case retry(after: TimeInterval)
        /// The answer is final.
        case giveUp
    }

    /// The decision after the `attempt`-th answer (1-based) classified as `disposition`,
    /// `elapsed` seconds after the notification was submitted. `random` must return a value in `0..<1`.
    package func decide(
        after disposition: APNSDisposition, attempt: Int, elapsed: TimeInterval = 0, random: () -> Double
    ) -> Decision {
        guard disposition.isRetryable, attempt < maximumAttempts else { return .giveUp }
        if let retryDeadline, elapsed >= retryDeadline { return .giveUp }
        let delay: TimeInterval
        switch disposition {
        case .resendOnNewConnection:
            delay = 0
        case .retryTokenLater:
            delay = backoff(base: tooManyRequestsDelay, attempt: attempt, random: random)
        case .retryWithBackoff:
            delay = backoff(base: baseDelay, attempt: attempt, random: random)
        default:
            return .giveUp
        }
        // The last try goes at the deadline rather than not at all.
        return .retry(after: retryDeadline.map { min(delay, max(0, $0 - elapsed)) } ?? delay)
    }

    /// Whether a notification that went unanswered `resends` times, `elapsed` seconds after it
    /// was submitted, may be sent again.
    package func mayResend(resends: Int, elapsed: TimeInterval) -> Bool {
        if let retryDeadline { return elapsed < retryDeadline }
        return resends <= maximumResends
    }

    /// Exponential backoff with "equal jitter": half the step is fixed, half random, so a retry
    /// never comes sooner than half the step and a burst of failures spreads out.
    package func backoff(base: TimeInterval, attempt: Int, random: () -> Double) -> TimeInterval {
        let exponent = Double(max(0, min(attempt - 1, 30)))
        let cap = min(maximumDelay, retryDeadline.map { $0 / Self.triesPerDeadline } ?? .infinity)
        let step = min(cap, base * pow(2, exponent))
        return step / 2 + step / 2 * random()
    }
}
