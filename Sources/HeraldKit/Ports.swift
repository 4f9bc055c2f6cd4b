public import Foundation

// The seams in front of every system singleton: the core reaches the network, the
// disk, the clock and the log only through these, so it builds and is tested on Linux with
// fakes (HeraldKitTesting) and each Apple adapter stays a few lines without logic.

/// One HTTP request to Herald.
public struct HTTPRequestSpec: Sendable, Hashable, Codable {
    public var method: String
    /// The path and query, e.g. `/v1/apps/lucid/devices`.
    public var path: String
    public var headers: [String: String]
    public var body: Data?

    public init(method: String, path: String, headers: [String: String] = [:], body: Data? = nil) {
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
    }
}

/// Herald's answer.
public struct HTTPResponseSpec: Sendable, Hashable {
    public var status: Int
    public var body: Data

    public init(status: Int, body: Data = Data()) {
        self.status = status
        self.body = body
    }
}

/// Sends requests to Herald's base URL. Throws for a transport failure (no answer); any answer,
/// 4xx and 5xx included, is returned.
public protocol HTTPTransport: Sendable {
    func send(_ request: HTTPRequestSpec) async throws -> HTTPResponseSpec
}

/// Sends a request that must finish even if the app is suspended right after (a quick action
/// chosen on the lock screen gives the app a few seconds): a background `URLSession` upload on
/// Apple platforms (`BackgroundURLSessionUploader`). Same contract as `HTTPTransport`: throws when
/// there was no answer (the outbox retries with the same idempotency key).
public protocol BackgroundUploader: Sendable {
    func upload(_ request: HTTPRequestSpec) async throws -> HTTPResponseSpec
}

/// The OS's registration with APNs (`UIApplication.registerForRemoteNotifications` on iOS):
/// the token arrives at the app delegate, which hands it to `HeraldClient.register(rawToken:…)`.
public protocol RemoteNotificationRegistrar: Sendable {
    @MainActor func registerForRemoteNotifications()
}

/// Opens the system's settings for the app (the only way back from a denied permission).
public protocol SettingsOpener: Sendable {
    @MainActor func openNotificationSettings()
}

/// Small persistent values (UserDefaults on Apple platforms): the outbox, the last token sent.
public protocol KeyValueStore: Sendable {
    func data(forKey key: String) -> Data?
    func set(_ data: Data?, forKey key: String)
}

/// The time, for retries, heartbeats and budgets.
public protocol KitClock: Sendable {
    var now: Date { get }
    /// Waits `seconds` (a fake clock may return when its time is moved).
    func sleep(seconds: TimeInterval) async throws
}

/// Where HeraldKit says what it did (os.Logger on Apple platforms). Device tokens are never
/// passed whole: the first 8 characters at most.
public protocol KitLogger: Sendable {
    func log(_ level: KitLogLevel, _ message: String)
}

public enum KitLogLevel: String, Sendable, Comparable {
    case debug, info, warning, error

    public static func < (lhs: KitLogLevel, rhs: KitLogLevel) -> Bool {
        let order: [KitLogLevel] = [.debug, .info, .warning, .error]
        return order.firstIndex(of: lhs)! < order.firstIndex(of: rhs)!
    }
}

/// The system clock.
public struct SystemKitClock: KitClock {
    public init() {}
    public var now: Date { Date() }
    public func sleep(seconds: TimeInterval) async throws {
        try await Task.sleep(for: .milliseconds(Int64(max(0, seconds) * 1000)))
    }
}

/// Logs nothing.
public struct SilentKitLogger: KitLogger {
    public init() {}
    public func log(_ level: KitLogLevel, _ message: String) {}
}

/// `UserDefaults` as the key-value store (a suite of the app's, or the standard one).
public final class UserDefaultsStore: KeyValueStore, @unchecked Sendable {
    // UserDefaults is thread-safe; it is not marked Sendable on every platform.
    private let defaults: UserDefaults

    public init(_ defaults: UserDefaults = .standard) {
        self.defaults = defaults
    }

    public func data(forKey key: String) -> Data? { defaults.data(forKey: key) }
    public func set(_ data: Data?, forKey key: String) { defaults.set(data, forKey: key) }
}
