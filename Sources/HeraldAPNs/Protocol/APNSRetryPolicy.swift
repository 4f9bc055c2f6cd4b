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

    package init(
        maximumAttempts: Int = 5,
        baseDelay: TimeInterval = 1,
        maximumDelay: TimeInterval = 60,
        tooManyRequestsDelay: TimeInterval = 5,
        maximumResends: Int = 10
    ) {
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

    /// The decision after the `attempt`-th answer (1-based) classified as `disposition`.
    /// `random` must return a value in `0..<1`.
    package func decide(
        after disposition: APNSDisposition, attempt: Int, random: () -> Double
    ) -> Decision {
        guard disposition.isRetryable, attempt < maximumAttempts else { return .giveUp }
        switch disposition {
        case .resendOnNewConnection:
            return .retry(after: 0)
        case .retryTokenLater:
            return .retry(after: backoff(base: tooManyRequestsDelay, attempt: attempt, random: random))
        case .retryWithBackoff:
            return .retry(after: backoff(base: baseDelay, attempt: attempt, random: random))
        default:
            return .giveUp
        }
    }

    /// Exponential backoff with "equal jitter": half the step is fixed, half random, so a retry
    /// never comes sooner than half the step and a burst of failures spreads out.
    package func backoff(base: TimeInterval, attempt: Int, random: () -> Double) -> TimeInterval {
        let exponent = Double(max(0, min(attempt - 1, 30)))
        let step = min(maximumDelay, base * pow(2, exponent))
        return step / 2 + step / 2 * random()
    }
}
