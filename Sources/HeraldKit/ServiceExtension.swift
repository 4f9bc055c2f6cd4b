public import Foundation
public import HeraldPayload

/// Fetches a notification's media for the service extension: streamed to a file, stopped at
/// `maximumBytes` (an extension has little memory), given up at cancellation.
public protocol MediaFetcher: Sendable {
    func fetch(_ url: URL, maximumBytes: Int) async throws -> URL
}

/// Decrypts an end-to-end encrypted body (`encrypted_body` in the app data) with the app's key.
public protocol PayloadDecryptor: Sendable {
    func decrypt(_ ciphertext: String, appData: [String: JSONValue]) async throws -> String
}

/// What the service extension shows: the notification's text and its attachments, without
/// UserNotifications types (the Apple adapter copies it into `UNMutableNotificationContent`).
public struct ExtensionContent: Sendable, Equatable {
    public var title: String?
    public var subtitle: String?
    public var body: String?
    /// Files to attach (media fetched in time).
    public var attachments: [URL]
    /// The object under the app's payload key (`media_url`, `encrypted_body`, the herald stamp…).
    public var appData: [String: JSONValue]

    public init(
        title: String? = nil, subtitle: String? = nil, body: String? = nil, attachments: [URL] = [],
        appData: [String: JSONValue] = [:]
    ) {
        self.title = title
        self.subtitle = subtitle
        self.body = body
        self.attachments = attachments
        self.appData = appData
    }
}

/// One notification in the service extension: its receipt is reported (confirmed delivery,
/// beside the work, never delaying it), the body is decrypted
/// first (a hook), then the media is fetched with an explicit budget (2 s: Cocotte's avatar falls
/// back to the no-avatar variant), and the best content so far is delivered **exactly once** —
/// when the work is done, when the budget runs out, or when the system calls
/// `serviceExtensionTimeWillExpire`, whichever comes first; later calls do nothing.
public final class ServiceExtensionSession: Sendable {
    public static let mediaKey = "media_url"
    public static let encryptedBodyKey = "encrypted_body"

    private struct State {
        var best: ExtensionContent
        var delivered = false
        var deliver: (@Sendable (ExtensionContent) -> Void)?
        var receipt: Task<Void, Never>?
    }

    private let state: LockedState<State>
    private let reportReceipt: (@Sendable ([String: JSONValue]) async -> Void)?
    private let decryptor: (any PayloadDecryptor)?
    private let fetcher: (any MediaFetcher)?
    private let clock: any KitClock
    private let mediaBudget: TimeInterval
    private let maximumBytes: Int
    private let logger: any KitLogger

    public init(
        content: ExtensionContent, decryptor: (any PayloadDecryptor)?, fetcher: (any MediaFetcher)?,
        clock: any KitClock = SystemKitClock(),
        mediaBudget: TimeInterval = 2, maximumBytes: Int = 10 << 20, logger: any KitLogger = SilentKitLogger(),
        reportReceipt: (@Sendable ([String: JSONValue]) async -> Void)? = nil,
        deliver: @escaping @Sendable (ExtensionContent) -> Void
    ) {
        state = LockedState(State(best: content, deliver: deliver))
        self.reportReceipt = reportReceipt
        self.decryptor = decryptor
        self.fetcher = fetcher
        self.clock = clock
        self.mediaBudget = mediaBudget
        self.maximumBytes = maximumBytes
        self.logger = logger
    }

    /// Whether the content went to the system already.
    public var delivered: Bool { state.withLock { $0.delivered } }

    /// Does the work and delivers once (what `didReceive(_:withContentHandler:)` starts). The
    /// receipt (`reportReceipt`, e.g. `HeraldClient.reportReceived`) is started beside the work
    /// and never waited for: the content goes to the system whatever the network does.
    public func run() async {
        var content = state.withLock { $0.best }
        if let report = reportReceipt {
            let appData = content.appData
            let task = Task { await report(appData) }
            state.withLock { $0.receipt = task }
        }
        if let decryptor, let ciphertext = content.appData[Self.encryptedBodyKey]?.stringValue {
            do {
                content.body = try await decryptor.decrypt(ciphertext, appData: content.appData)
                improve(content)
            } catch {
                // The payload's own body (a neutral "New message") stays.
                logger.log(
                    .warning, "HeraldKit: the body could not be decrypted (\(error)); the payload's text is shown")
            }
        }
        if let fetcher, let text = content.appData[Self.mediaKey]?.stringValue, let url = URL(string: text), !delivered
        {
            let budget = mediaBudget
            let clock = clock
            let maximum = maximumBytes
            let file: URL? = await withTaskGroup(of: URL?.self) { group in
                group.addTask { try? await fetcher.fetch(url, maximumBytes: maximum) }
                group.addTask {
                    try? await clock.sleep(seconds: budget)
                    return nil
                }
                let first = await group.next() ?? nil
                group.cancelAll()
                return first
            }
            if let file {
                content.attachments.append(file)
                improve(content)
            } else {
                logger.log(.info, "HeraldKit: the media did not arrive within \(budget) s; delivered without it")
            }
        }
        finish()
    }

    /// Waits until the receipt's report returned (stored in the outbox, and sent if it could
    /// be); at once when there is none.
    public func receiptReported() async {
        await state.withLock { $0.receipt }?.value
    }

    /// The system's time is up (`serviceExtensionTimeWillExpire`): the best content so far goes now.
    public func timeWillExpire() {
        finish()
    }

    private func improve(_ content: ExtensionContent) {
        state.withLock { state in
            if !state.delivered { state.best = content }
        }
    }

    private func finish() {
        let (deliver, content) = state.withLock {
            state -> ((@Sendable (ExtensionContent) -> Void)?, ExtensionContent) in
            guard !state.delivered else { return (nil, state.best) }
            state.delivered = true
            defer { state.deliver = nil }
            return (state.deliver, state.best)
        }
        deliver?(content)
    }
}

/// A value behind a lock (Foundation only: the core does not use Synchronization's Mutex, which
/// needs newer Apple OS versions than an app may target).
final class LockedState<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) {
        self.value = value
    }

    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
