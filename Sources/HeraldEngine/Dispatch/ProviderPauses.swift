package import Foundation
import Synchronization

/// One app's provider: its APNs or its FCM credential.
package struct ProviderKey: Hashable, Sendable, Comparable {
    package var app: String
    /// `apns` or `fcm`, as devices store it.
    package var platform: String

    package init(app: String, platform: String) {
        self.app = app
        self.platform = platform
    }

    package static func < (lhs: ProviderKey, rhs: ProviderKey) -> Bool {
        (lhs.app, lhs.platform) < (rhs.app, rhs.platform)
    }
}

/// An app's provider held back because its answers blame the configuration, not the devices.
package struct ProviderPause: Sendable, Hashable {
    /// What kind of answer paused it.
    package enum Kind: Sendable, Hashable {
        /// The credential or topic was refused (`InvalidProviderToken`, `TopicDisallowed`, FCM 401 …).
        case credential
        /// Most of a large batch came back "bad token" (`BadDeviceToken`, `DeviceTokenNotForTopic`,
        /// FCM 404 without an error code): more likely the wrong environment or project than dead devices.
        case tokensRejected
    }

    package var kind: Kind
    /// The provider's reason (`InvalidProviderToken`, `BadDeviceToken` …).
    package var reason: String
    package var since: Date
    /// When the credential is tried again with a few deliveries.
    package var retryAt: Date
    /// Tries that failed in a row: the wait is 1 minute doubling to 15.
    package var failures: Int
}

/// The providers that are paused and when each is tried again. While paused, an
/// app's deliveries stay queued — never `failed`, never counted as attempts — and its devices
/// are never deactivated; at `retryAt` a few deliveries probe the provider, and one answer that
/// does not blame the configuration resumes it. Kept in memory: a restart (as after fixing the
/// configuration) tries at once.
package final class ProviderPauses: Sendable {
    /// The first wait; each failed try doubles it, up to ``longestWait``.
    package static let firstWait: TimeInterval = 60
    package static let longestWait: TimeInterval = 900
    /// Deliveries a probe sends.
    package static let probeSize = 10

    /// What the dispatcher may do with a provider's deliveries now.
    package enum Gate: Sendable {
        case open
        case closed(until: Date)
        /// Paused, and its wait is over: send a few to try.
        case probe(ProviderPause)
    }

    private let state = Mutex<[ProviderKey: ProviderPause]>([:])

    package init() {}

    package func gate(_ key: ProviderKey, now: Date) -> Gate {
        state.withLock { pauses in
            guard let pause = pauses[key] else { return .open }
            return pause.retryAt <= now ? .probe(pause) : .closed(until: pause.retryAt)
        }
    }

    /// Pauses `key`. A provider already paused keeps its pause unless this answer came from a
    /// probe (`tried`), which lengthens the wait. Returns the pause and whether it is new.
    package func pause(_ key: ProviderKey, kind: ProviderPause.Kind, reason: String, now: Date, tried: Bool) -> (
        ProviderPause, isNew: Bool
    ) {
        state.withLock { pauses in
            if let existing = pauses[key], !tried { return (existing, false) }
            let failures = (pauses[key]?.failures ?? 0) + 1
            let wait = min(Self.longestWait, Self.firstWait * pow(2, Double(failures - 1)))
            let pause = ProviderPause(
                kind: kind, reason: reason, since: pauses[key]?.since ?? now, retryAt: now.addingTimeInterval(wait),
                failures: failures)
            let isNew = pauses[key] == nil
            pauses[key] = pause
            return (pause, isNew)
        }
    }

    /// Ends the pause of `key`; returns it when there was one.
    @discardableResult
    package func resume(_ key: ProviderKey) -> ProviderPause? {
        state.withLock { $0.removeValue(forKey: key) }
    }

    package var all: [ProviderKey: ProviderPause] { state.withLock { $0 } }
}
