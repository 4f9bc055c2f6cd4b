import Foundation
public import HeraldPayload

/// What the notification center's delegate saw, without UserNotifications types.
public enum NotificationEvent: Sendable, Equatable {
    /// The user tapped the notification (`action` "default") or chose one of its actions
    /// (`text`: a text-input action's answer).
    case response(appData: [String: JSONValue], action: String, text: String?)
    /// It arrived while the app was in the foreground.
    case willPresent(appData: [String: JSONValue])
}

/// The notification center, behind a port: the Apple adapter wraps
/// `UNUserNotificationCenter` and its delegate; tests use `FakeNotificationCenter`.
public protocol NotificationCenterPort: Sendable {
    func authorizationStatus() async -> AuthorizationStatus
    /// Shows the system prompt (or asks quietly when `provisional`); answers the status after.
    func requestAuthorization(provisional: Bool) async throws -> AuthorizationStatus
    func setCategories(_ categories: [CategorySpec]) async
}

/// Delegate events, buffered until someone listens: a tap that launched the app
/// arrives before the app has made its `HeraldClient`; it waits here (in memory: a launch's
/// response is handed to the delegate again by the system if the process dies) and the first
/// listener gets it, then everything after as it comes.
public final class NotificationEvents: Sendable {
    /// The process's buffer: the delegate posts here from its first call on.
    public static let shared = NotificationEvents()

    private struct State {
        var buffered: [NotificationEvent] = []
        var continuation: AsyncStream<NotificationEvent>.Continuation?
        /// Which listener `continuation` is (a finished older one must not clear a newer one).
        var listener = 0
    }

    private let state = LockedState(State())

    public init() {}

    /// From the delegate: to the listener, or kept for the first one.
    public func post(_ event: NotificationEvent) {
        let continuation = state.withLock { state -> AsyncStream<NotificationEvent>.Continuation? in
            guard let continuation = state.continuation else {
                state.buffered.append(event)
                return nil
            }
            return continuation
        }
        continuation?.yield(event)
    }

    /// The events: those buffered first, then new ones. One listener at a time (a second
    /// `events()` ends the first stream).
    public func events() -> AsyncStream<NotificationEvent> {
        let (stream, continuation) = AsyncStream<NotificationEvent>.makeStream()
        let (previous, buffered, listener) = state.withLock {
            state -> (AsyncStream<NotificationEvent>.Continuation?, [NotificationEvent], Int) in
            let previous = state.continuation
            state.continuation = continuation
            state.listener += 1
            defer { state.buffered = [] }
            return (previous, state.buffered, state.listener)
        }
        continuation.onTermination = { [weak self] _ in
            self?.state.withLock { state in
                if state.listener == listener { state.continuation = nil }
            }
        }
        previous?.finish()
        for event in buffered { continuation.yield(event) }
        return stream
    }
}

extension HeraldClient {
    /// Reports what the delegate posts to `events` (the buffered cold-start tap first): each
    /// tap or action as an open, each foreground arrival as a receipt, once per delivery.
    /// Returns the task (cancel it to stop).
    @discardableResult
    public nonisolated func attach(_ events: NotificationEvents = .shared) -> Task<Void, Never> {
        let stream = events.events()
        return Task { [weak self] in
            for await event in stream {
                guard let self else { return }
                switch event {
                case .response(let appData, let action, _) where action != NotificationRouter.dismissAction:
                    await self.reportOpened(appData: appData, action: action)
                case .willPresent(let appData):
                    await self.reportReceived(appData: appData)
                case .response:
                    break
                }
            }
        }
    }
}
