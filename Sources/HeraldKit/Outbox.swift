public import Foundation

/// Requests to Herald that must arrive even if the device is offline now: kept in the key-value
/// store, sent in order, each with its own idempotency key (the same
/// on every try), retried with backoff on a transport failure, a 5xx, 408 or 429, and dropped
/// with a log line on an answer that no retry can change (another 4xx). A registration replaces
/// one of the same device still waiting (only the newest token matters).
public actor Outbox {
    /// One request waiting.
    public struct Entry: Sendable, Codable, Hashable {
        public var id: UUID
        /// What it is (`register`, `unregister`, `opened`, `action`): for logs and coalescing.
        public var kind: String
        /// Entries with the same key replace each other while waiting (the newest wins).
        public var coalesceKey: String?
        public var request: HTTPRequestSpec
        public var attempts: Int
        public var notBefore: Date
        public var createdAt: Date
        /// 404 is retried (up to `notFoundRetries` tries): for an open or a commit reported
        /// before Herald recorded its delivery.
        public var retryNotFound: Bool
        /// The user the request speaks for: its user token is asked for when it is sent (a
        /// token made at enqueue time could expire while the device is offline).
        public var userID: String?
        /// Sent through the background uploader when there is one (a quick action's commit).
        /// Optional so that entries stored by an earlier version still decode.
        public var background: Bool?
        /// A 404 means it is already done (removing a device Herald no longer has).
        public var notFoundIsDone: Bool?
    }

    /// How an entry ended.
    public enum Outcome: Sendable, Equatable {
        /// Herald answered 2xx.
        case delivered(status: Int, body: Data)
        /// Herald refused it for good (4xx that no retry changes), or it expired.
        case dropped(status: Int?, reason: String)
    }

    static let storeKey = "herald.outbox"
    /// Retries back off from 2 s, doubling, to at most 5 min.
    static let baseDelay: TimeInterval = 2
    static let maximumDelay: TimeInterval = 300
    /// An entry older than this is dropped (a week offline).
    static let maximumAge: TimeInterval = 7 * 86_400
    static let notFoundRetries = 5
    static let maximumEntries = 500

    private let transport: any HTTPTransport
    private let uploader: (any BackgroundUploader)?
    private let prepare: @Sendable (HTTPRequestSpec, _ userID: String?) async throws -> HTTPRequestSpec
    private let store: any KeyValueStore
    private let clock: any KitClock
    private let logger: any KitLogger
    private var entries: [Entry]
    private var finished: [UUID: @Sendable (Outcome) async -> Void] = [:]
    private var draining = false

    /// `prepare` adds what is decided when a request is sent (the key and the user token);
    /// `uploader` sends the entries marked `background` (else `transport` does).
    public init(
        transport: any HTTPTransport, uploader: (any BackgroundUploader)? = nil, store: any KeyValueStore,
        clock: any KitClock,
        logger: any KitLogger,
        prepare: @escaping @Sendable (HTTPRequestSpec, _ userID: String?) async throws -> HTTPRequestSpec = {
            request, _ in request
        }
    ) {
        self.transport = transport
        self.uploader = uploader
        self.prepare = prepare
        self.store = store
        self.clock = clock
        self.logger = logger
        entries = store.data(forKey: Self.storeKey).flatMap { try? JSONDecoder().decode([Entry].self, from: $0) } ?? []
    }

    /// What waits, oldest first.
    public var pending: [Entry] { entries }

    /// Adds a request; its idempotency key is the entry's id. `onFinish` runs when it is
    /// delivered or dropped in this process (an entry left from an earlier launch has none).
    @discardableResult
    public func enqueue(
        kind: String, request: HTTPRequestSpec, userID: String? = nil, coalesceKey: String? = nil,
        retryNotFound: Bool = false,
        background: Bool = false, notFoundIsDone: Bool = false, onFinish: (@Sendable (Outcome) async -> Void)? = nil
    ) -> UUID {
        let id = UUID()
        var request = request
        request.headers["Idempotency-Key"] = id.uuidString.lowercased()
        if let coalesceKey, let index = entries.firstIndex(where: { $0.coalesceKey == coalesceKey }) {
            finished[entries[index].id] = nil
            entries.remove(at: index)
        }
        if entries.count >= Self.maximumEntries {
            logger.log(.warning, "HeraldKit outbox full: the oldest waiting request (\(entries[0].kind)) is dropped")
            entries.removeFirst()
        }
        entries.append(
            Entry(
                id: id, kind: kind, coalesceKey: coalesceKey, request: request, attempts: 0, notBefore: clock.now,
                createdAt: clock.now,
                retryNotFound: retryNotFound, userID: userID, background: background ? true : nil,
                notFoundIsDone: notFoundIsDone ? true : nil))
        if let onFinish { finished[id] = onFinish }
        save()
        return id
    }

    /// Sends what is due, in order, until one must wait (a retry later keeps the ones after it
    /// waiting too: a registration goes before the opens that need it). Returns when it stops:
    /// nothing left, or the head not due yet (its due time).
    @discardableResult
    public func drain() async -> Date? {
        guard !draining else { return entries.first?.notBefore }
        draining = true
        defer { draining = false }
        while let entry = entries.first {
            let now = clock.now
            if now.timeIntervalSince(entry.createdAt) > Self.maximumAge {
                await finish(entry, .dropped(status: nil, reason: "expired after 7 days offline"))
                continue
            }
            if entry.notBefore > now { return entry.notBefore }
            let response: HTTPResponseSpec
            do {
                let request = try await prepare(entry.request, entry.userID)
                if entry.background == true, let uploader {
                    response = try await uploader.upload(request)
                } else {
                    response = try await transport.send(request)
                }
            } catch {
                retry(entry, reason: "no answer (\(error))")
                return entries.first?.notBefore
            }
            switch response.status {
            case 200..<300:
                await finish(entry, .delivered(status: response.status, body: response.body))
            case 404 where entry.notFoundIsDone == true:
                await finish(entry, .delivered(status: response.status, body: response.body))
            case 404 where entry.retryNotFound && entry.attempts + 1 < Self.notFoundRetries,
                408, 429, 500..<600:
                retry(entry, reason: "HTTP \(response.status)")
                return entries.first?.notBefore
            default:
                let text = String(decoding: response.body.prefix(300), as: UTF8.self)
                logger.log(.error, "HeraldKit: Herald refused \(entry.kind) with HTTP \(response.status): \(text)")
                await finish(entry, .dropped(status: response.status, reason: text))
            }
        }
        return nil
    }

    /// Drains until empty, sleeping on the clock until each retry is due: what an app's
    /// background task (or the tests) runs.
    public func drainUntilEmpty(maximumWait: TimeInterval = .infinity) async throws {
        let started = clock.now
        while let next = await drain() {
            let wait = max(0, next.timeIntervalSince(clock.now))
            guard clock.now.timeIntervalSince(started) + wait <= maximumWait else { return }
            try await clock.sleep(seconds: wait)
        }
    }

    /// Everything waiting is sent again at once (the network is back).
    public func retryNow() {
        for index in entries.indices { entries[index].notBefore = clock.now }
        save()
    }

    private func retry(_ entry: Entry, reason: String) {
        guard let index = entries.firstIndex(where: { $0.id == entry.id }) else { return }
        entries[index].attempts += 1
        let delay = min(Self.maximumDelay, Self.baseDelay * pow(2, Double(entries[index].attempts - 1)))
        entries[index].notBefore = clock.now.addingTimeInterval(delay)
        logger.log(
            .info, "HeraldKit: \(entry.kind) waits \(Int(delay)) s (\(reason)), try \(entries[index].attempts + 1) next"
        )
        save()
    }

    private func finish(_ entry: Entry, _ outcome: Outcome) async {
        entries.removeAll { $0.id == entry.id }
        save()
        if let callback = finished.removeValue(forKey: entry.id) { await callback(outcome) }
    }

    private func save() {
        store.set(try? JSONEncoder().encode(entries), forKey: Self.storeKey)
    }
}
