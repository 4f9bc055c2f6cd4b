public import Foundation
public import HeraldPayload

/// Where a tap on a notification leads (LucidPal's taps).
public enum RouteDecision: Sendable, Codable, Equatable {
    /// Open this link in the app.
    case open(URL)
    /// Open it once the user authenticated (a high-stakes card: approvals behind Face ID).
    case openBehindAuthentication(URL)
    /// Nothing to open (no link, a scheme not allowed, a dismissal); the reason is for logs.
    case none(reason: String)
}

/// Turns a tapped notification into a destination: the app's own resolver first (LucidPal's
/// pre-seeded chat or sheet from its data), then the payload's `deep_link` if its scheme is
/// allowed (the app's own schemes and https on its hosts; never `javascript:`, `file:` or an
/// unknown host), and a high-stakes type opens behind authentication.
public struct NotificationRouter: Sendable {
    /// The app's custom schemes, e.g. `["lucid"]`.
    public var schemes: Set<String>
    /// Hosts whose https links are the app's (universal links).
    public var hosts: Set<String>
    /// The app's resolver for what its data means (nil: not its kind).
    public var resolve: @Sendable (_ appData: [String: JSONValue], _ action: String) -> URL?
    /// A type's stakes (from `CategoryCatalog.stakes(ofType:)`).
    public var stakes: @Sendable (_ type: String) -> Stakes?

    public init(
        schemes: Set<String>, hosts: Set<String> = [],
        resolve: @escaping @Sendable ([String: JSONValue], String) -> URL? = { _, _ in nil },
        stakes: @escaping @Sendable (String) -> Stakes? = { _ in nil }
    ) {
        self.schemes = Set(schemes.map { $0.lowercased() })
        self.hosts = Set(hosts.map { $0.lowercased() })
        self.resolve = resolve
        self.stakes = stakes
    }

    /// The system's dismiss action.
    public static let dismissAction = "com.apple.UNNotificationDismissActionIdentifier"

    public func route(appData: [String: JSONValue], action: String = "default") -> RouteDecision {
        guard action != Self.dismissAction else { return .none(reason: "dismissed") }
        let link: URL
        if let resolved = resolve(appData, action) {
            link = resolved
        } else if let text = appData["deep_link"]?.stringValue, let url = URL(string: text) {
            link = url
        } else {
            return .none(reason: "no deep link")
        }
        guard allowed(link) else { return .none(reason: "\(link.scheme ?? "no") scheme or host not allowed") }
        let high = appData["type"]?.stringValue.flatMap(stakes).map { $0 >= .high } ?? false
        return high ? .openBehindAuthentication(link) : .open(link)
    }

    private func allowed(_ url: URL) -> Bool {
        guard let scheme = url.scheme?.lowercased() else { return false }
        if scheme == "https" { return url.host.map { hosts.contains($0.lowercased()) } ?? false }
        return schemes.contains(scheme)
    }
}

/// A destination decided while the app could not show it (a cold start from a tap): kept in the
/// key-value store, so it survives the launch, and taken once when the app is in the foreground.
public struct PendingRoute: Sendable {
    static let storeKey = "herald.pending-route"
    private let store: any KeyValueStore
    private let lock = LockedState(())

    public init(store: any KeyValueStore) {
        self.store = store
    }

    /// Keeps `decision` (replacing one not taken yet); a `.none` keeps nothing.
    public func park(_ decision: RouteDecision) {
        if case .none = decision { return }
        lock.withLock { _ in store.set(try? JSONEncoder().encode(decision), forKey: Self.storeKey) }
    }

    /// The parked destination, once: a second call answers nil.
    public func take() -> RouteDecision? {
        lock.withLock { _ in
            defer { store.set(nil, forKey: Self.storeKey) }
            return store.data(forKey: Self.storeKey).flatMap { try? JSONDecoder().decode(RouteDecision.self, from: $0) }
        }
    }
}
