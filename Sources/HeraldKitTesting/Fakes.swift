public import Foundation
public import HeraldKit
public import HeraldPayload

// Fakes for an app team's tests (`HeraldKitTesting`): the seams HeraldKit reaches
// the system through, in memory and under the test's control.

/// Values in memory; `snapshot` is what a relaunch would read.
public final class InMemoryKeyValueStore: KeyValueStore, @unchecked Sendable {
    private let lock = NSLock()
    private var values: [String: Data] = [:]

    public init() {}

    public func data(forKey key: String) -> Data? { lock.withLock { values[key] } }
    public func set(_ data: Data?, forKey key: String) { lock.withLock { values[key] = data } }
}

/// A clock that stands still until the test moves it; a sleep returns at once and moves it by
/// the time slept (a test of retries runs in no time).
public final class ManualKitClock: KitClock, @unchecked Sendable {
    private let lock = NSLock()
    private var current: Date

    public init(_ start: Date = Date(timeIntervalSince1970: 1_800_000_000)) {
        current = start
    }

    public var now: Date { lock.withLock { current } }

    public func advance(by seconds: TimeInterval) {
        lock.withLock { current = current.addingTimeInterval(seconds) }
    }

    public func sleep(seconds: TimeInterval) async throws {
        advance(by: seconds)
        await Task.yield()
    }
}

/// A transport that records every request and answers what the test scripts (by default 200
/// with `{}`); `offline` makes every call fail as a lost network does.
public final class RecordingTransport: HTTPTransport, @unchecked Sendable {
    public enum Answer: Sendable {
        case status(Int, String = "{}")
        case offline
    }

    private let lock = NSLock()
    private var recorded: [HTTPRequestSpec] = []
    private var script: [Answer] = []
    private var fallback: Answer = .status(200)

    public init() {}

    public var requests: [HTTPRequestSpec] { lock.withLock { recorded } }

    /// The next answers, in order, then `fallback`.
    public func answer(_ answers: Answer..., then fallback: Answer = .status(200)) {
        lock.withLock {
            script = answers
            self.fallback = fallback
        }
    }

    public struct Offline: Error {
        public init() {}
    }

    public func send(_ request: HTTPRequestSpec) async throws -> HTTPResponseSpec {
        let answer = lock.withLock { () -> Answer in
            recorded.append(request)
            return script.isEmpty ? fallback : script.removeFirst()
        }
        switch answer {
        case .offline: throw Offline()
        case .status(let status, let body): return HTTPResponseSpec(status: status, body: Data(body.utf8))
        }
    }
}

/// A recording transport is also a background uploader (the tests tell the two apart by
/// giving the client two of them).
extension RecordingTransport: BackgroundUploader {
    public func upload(_ request: HTTPRequestSpec) async throws -> HTTPResponseSpec {
        try await send(request)
    }
}

/// Keeps what HeraldKit logs.
public final class RecordingLogger: KitLogger, @unchecked Sendable {
    private let lock = NSLock()
    private var lines: [(KitLogLevel, String)] = []

    public init() {}

    public var messages: [String] { lock.withLock { lines.map(\.1) } }

    public func log(_ level: KitLogLevel, _ message: String) {
        lock.withLock { lines.append((level, message)) }
    }
}

/// A clock whose sleeps wait until the test moves it past their end (a budget or a retry
/// delay runs out exactly when the test says).
public final class SteppedKitClock: KitClock, @unchecked Sendable {
    private let lock = NSLock()
    private var current: Date
    private var sleepers: [(id: UUID, until: Date, continuation: CheckedContinuation<Void, Never>)] = []

    public init(_ start: Date = Date(timeIntervalSince1970: 1_800_000_000)) {
        current = start
    }

    public var now: Date { lock.withLock { current } }

    /// How many sleeps are waiting.
    public var waiting: Int { lock.withLock { sleepers.count } }

    public func advance(by seconds: TimeInterval) {
        let due = lock.withLock { () -> [CheckedContinuation<Void, Never>] in
            current = current.addingTimeInterval(seconds)
            let due = sleepers.filter { $0.until <= current }.map(\.continuation)
            sleepers.removeAll { $0.until <= current }
            return due
        }
        for continuation in due { continuation.resume() }
    }

    /// Waits until the clock is moved past its end; a cancelled sleep ends at once.
    public func sleep(seconds: TimeInterval) async throws {
        let id = UUID()
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let resumeNow = lock.withLock { () -> Bool in
                    let until = current.addingTimeInterval(seconds)
                    if until <= current || Task.isCancelled { return true }
                    sleepers.append((id, until, continuation))
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let cancelled = lock.withLock { () -> CheckedContinuation<Void, Never>? in
                guard let index = sleepers.firstIndex(where: { $0.id == id }) else { return nil }
                return sleepers.remove(at: index).continuation
            }
            cancelled?.resume()
        }
        try Task.checkCancellation()
    }
}

/// The notification center's pending local notifications, in memory.
public final class FakeLocalScheduler: LocalNotificationScheduler, @unchecked Sendable {
    private let lock = NSLock()
    private var requests: [String: LocalNotificationRequest] = [:]

    public init() {}

    public var pending: [LocalNotificationRequest] {
        lock.withLock { requests.values.sorted { $0.fireDate < $1.fireDate } }
    }

    public func pendingIdentifiers() async -> [String] { lock.withLock { Array(requests.keys) } }
    public func add(_ request: LocalNotificationRequest) async throws {
        lock.withLock { requests[request.identifier] = request }
    }
    public func remove(identifiers: [String]) async { lock.withLock { for id in identifiers { requests[id] = nil } } }
}

/// The notification center in memory: the status the test sets, what a prompt answers, the
/// categories registered and how often the prompt was shown.
public final class FakeNotificationCenter: NotificationCenterPort, @unchecked Sendable {
    private let lock = NSLock()
    private var status: AuthorizationStatus
    private var answer: AuthorizationStatus
    private var registered: [CategorySpec] = []
    private var prompts = 0

    /// `status` now; a prompt answers `answer`.
    public init(status: AuthorizationStatus = .notDetermined, answer: AuthorizationStatus = .authorized) {
        self.status = status
        self.answer = answer
    }

    public var categories: [CategorySpec] { lock.withLock { registered } }
    public var promptsShown: Int { lock.withLock { prompts } }

    public func authorizationStatus() async -> AuthorizationStatus { lock.withLock { status } }

    public func requestAuthorization(provisional: Bool) async throws -> AuthorizationStatus {
        lock.withLock {
            if !provisional { prompts += 1 }
            status = provisional ? .provisional : answer
            return status
        }
    }

    public func setCategories(_ categories: [CategorySpec]) async { lock.withLock { registered = categories } }
}

/// Counts the OS registrations and Settings openings asked for.
public final class FakeRegistrar: RemoteNotificationRegistrar, SettingsOpener, @unchecked Sendable {
    private let lock = NSLock()
    private var registrations = 0
    private var settings = 0

    public init() {}

    public var registrationsAsked: Int { lock.withLock { registrations } }
    public var settingsOpened: Int { lock.withLock { settings } }

    public func registerForRemoteNotifications() { lock.withLock { registrations += 1 } }
    public func openNotificationSettings() { lock.withLock { settings += 1 } }
}
