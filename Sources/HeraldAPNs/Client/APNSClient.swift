package import Foundation
package import HeraldCore
package import Logging
package import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// The APNs delivery core: a pool of long-lived HTTP/2 connections for one signing key and
/// endpoint. Every notification submitted gets exactly one `APNSResult`, after the retries
/// its answers allow; nothing answered is sent twice and nothing unanswered is dropped
/// while the resend budget lasts.
package final class APNSClient: Sendable {
    package let configuration: APNSClientConfiguration
    let tokenManager: APNSProviderTokenManager
    let sslContext: NIOSSLContext
    private let group: any EventLoopGroup
    /// Whether this client made its event loops (and shuts them down), or was lent a group.
    private let ownsGroup: Bool
    private let connections: [APNSConnection]
    private let logger: Logger
    private let state = Mutex(State())
    private let randomSource: @Sendable () -> Double
    private let openConnectionCount = Atomic<Int>(0)

    /// The event loops the connections run on (lent by the server, or this client's own).
    package var eventLoopGroup: any EventLoopGroup { group }

    /// HTTP/2 connections open right now.
    package var openConnections: Int { openConnectionCount.load(ordering: .relaxed) }

    func connectionOpened() { openConnectionCount.add(1, ordering: .relaxed) }
    func connectionClosed() { openConnectionCount.subtract(1, ordering: .relaxed) }

    private struct State {
        var nextConnection = 0
        var disabledReason: APNSReason?
        var outstanding = 0
        var isShutDown = false
        var drainWaiters: [CheckedContinuation<Void, Never>] = []
    }

    /// Creates the client and its event loops; connections open on first use.
    /// - Parameters:
    ///   - threads: event loops the connections are spread over (default: one per 4 connections, leaving a core
    ///     for the rest of the process; one loop drives ~50,000 notifications/s).
    ///   - eventLoopGroup: loops shared with other clients (the server's provider loops): the
    ///     connections take the group's next loops in turn, `threads` is ignored, and the
    ///     owner shuts the group down, not this client.
    ///   - random: a source of values in `0..<1` for backoff jitter (tests pass a fixed one).
    package init(
        key: APNSSigningKey,
        configuration: APNSClientConfiguration,
        clock: HeraldClock = .system,
        threads: Int? = nil,
        eventLoopGroup: (any EventLoopGroup)? = nil,
        logger: Logger = Logger(label: "herald.apns"),
        random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) }
    ) throws(APNSConfigurationError) {
        self.configuration = configuration
        self.tokenManager = APNSProviderTokenManager(key: key, clock: clock)
        self.logger = logger
        self.randomSource = random
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.minimumTLSVersion = .tlsv12
        tls.applicationProtocols = ["h2"]
        if let caFile = configuration.additionalCAFile {
            guard FileManager.default.isReadableFile(atPath: caFile) else {
                throw APNSConfigurationError(code: .invalidCAFile, message: "cannot read the CA file \(caFile)")
            }
            tls.additionalTrustRoots = [.file(caFile)]
        }
        do {
            sslContext = try NIOSSLContext(configuration: tls)
        } catch {
            throw APNSConfigurationError(code: .invalidCAFile, message: "TLS setup failed: \(error)")
        }
        if let eventLoopGroup {
            group = eventLoopGroup
            ownsGroup = false
        } else {
            let threadCount = threads ?? max(1, min(System.coreCount - 1, (configuration.connections + 3) / 4))
            group = MultiThreadedEventLoopGroup(numberOfThreads: threadCount)
            ownsGroup = true
        }
        let group = group
        connections = (0..<configuration.connections).map { index in
            APNSConnection(index: index, eventLoop: group.next(), logger: logger)
        }
        for connection in connections { connection.attach(to: self) }
    }

    // MARK: Sending

    /// Sends one notification and waits for its final result.
    package func send(_ notification: APNSNotification) async -> APNSResult {
        await withCheckedContinuation { continuation in
            submit([notification]) { result in continuation.resume(returning: result) }
        }
    }

    /// Submits notifications; `completion` is called once per notification, on an event loop,
    /// in no particular order. Notifications that break an APNs rule are answered at once.
    package func submit(
        _ notifications: some Collection<APNSNotification>,
        completion: @escaping @Sendable (APNSResult) -> Void
    ) {
        var valid: [APNSPendingRequest] = []
        valid.reserveCapacity(notifications.count)
        // The last payload's buffer, shared by the next request while the bytes are the same (a
        // plain bulk send). No dictionary: Herald's deliveries each carry their own ids, and
        // Data's hash reads only its first bytes, so distinct payloads of one notification all
        // collided (5% of a due wave's CPU went to probing 64 of them per request).
        var last: (payload: Data, buffer: ByteBuffer)?
        let counted: @Sendable (APNSResult) -> Void = { [self] result in
            completion(result)
            finishedOne()
        }
        let accepted = state.withLock { state -> Bool in
            guard !state.isShutDown else { return false }
            state.outstanding += notifications.count
            return true
        }
        for notification in notifications {
            guard accepted else {
                completion(Self.unsent(notification, reason: .clientShutdown, disposition: .badRequest))
                continue
            }
            do throws(APNSValidationError) {
                try notification.validate()
            } catch {
                counted(Self.unsent(notification, reason: APNSReason(error.code.rawValue), disposition: .badRequest))
                continue
            }
            let buffer: ByteBuffer
            if let last, last.payload == notification.payload {
                buffer = last.buffer
            } else {
                buffer = ByteBuffer(bytes: notification.payload)
                last = (notification.payload, buffer)
            }
            valid.append(APNSPendingRequest(notification: notification, payload: buffer, completion: counted))
        }
        guard !valid.isEmpty else { return }
        if let reason = disabledReason {
            for request in valid { finishDisabled(request, reason: reason) }
            return
        }
        if valid.count <= Self.affinityLimit && connections.count > 1 {
            distributeByToken(valid)
        } else {
            distribute(valid)
        }
    }

    /// Submits of at most this many notifications go to each token's own connection.
    static let affinityLimit = 64

    /// A few requests (single sends as they come): each to the connection its device token
    /// hashes to, so one device's notifications, submitted in order, are written in that order
    /// on one connection (round-robin would put consecutive ones on different connections,
    /// where a connection still opening lets the later one overtake).
    func distributeByToken(_ requests: [APNSPendingRequest]) {
        let pool = connections
        var parts: [Int: [APNSPendingRequest]] = [:]
        for request in requests {
            // FNV-1a: stable across runs, a few ns for a 64-character token.
            var hash: UInt64 = 0xcbf2_9ce4_8422_2325
            for byte in request.notification.deviceToken.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
            parts[Int(hash % UInt64(pool.count)), default: []].append(request)
        }
        for (slot, part) in parts {
            let connection = pool[slot]
            connection.eventLoop.execute { connection.enqueue(part) }
        }
    }

    /// Spreads requests over the connections in contiguous chunks, one hop per connection
    /// (large submits, and retries: those go to whichever connection is next).
    func distribute(_ requests: [APNSPendingRequest]) {
        let pool = connections
        let start = state.withLock { state in
            defer { state.nextConnection &+= 1 }
            return state.nextConnection
        }
        if requests.count == 1 {
            let connection = pool[start % pool.count]
            let request = requests[0]
            connection.eventLoop.execute { connection.enqueue(CollectionOfOne(request)) }
            return
        }
        let chunk = (requests.count + pool.count - 1) / pool.count
        var offset = 0
        var slot = start
        while offset < requests.count {
            let connection = pool[slot % pool.count]
            let part = Array(requests[offset..<min(requests.count, offset + chunk)])
            connection.eventLoop.execute { connection.enqueue(part) }
            offset += chunk
            slot += 1
        }
    }

    /// Waits until every submitted notification has its result.
    package func waitUntilIdle() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ready = state.withLock { state -> Bool in
                if state.outstanding == 0 { return true }
                state.drainWaiters.append(continuation)
                return false
            }
            if ready { continuation.resume() }
        }
    }

    private func finishedOne() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.outstanding -= 1
            guard state.outstanding == 0 else { return [] }
            defer { state.drainWaiters = [] }
            return state.drainWaiters
        }
        for waiter in waiters { waiter.resume() }
    }

    // MARK: Answers

    /// Applies the disposition of an answer (or of a timeout, `status == nil`). Runs on the loop of `connection`.
    func handleAnswer(
        _ request: APNSPendingRequest, status: Int?, reason: APNSReason?, timestamp: Date?,
        on connection: APNSConnection, handler: APNSConnectionHandler?
    ) {
        request.attempts += 1
        request.lastStatus = status
        request.lastReason = reason
        var disposition = APNSDisposition(status: status ?? 0, reason: reason)
        if status == nil { disposition = .retryWithBackoff }
        switch disposition {
        case .delivered, .tokenDead, .badRequest:
            // Dead tokens are counted and logged once per batch by the caller, not once each.
            request.finish(status: status, reason: reason, disposition: disposition, timestamp: timestamp)
            return
        case .configurationError:
            if reason?.refusesCredential(pushType: request.notification.pushType) ?? true {
                disable(reason: reason ?? APNSReason("HTTP \(status ?? 0)"))
            }
            request.finish(status: status, reason: reason, disposition: disposition)
            return
        case .resendOnNewConnection:
            if reason == .expiredProviderToken,
                tokenManager.tokenExpired(generation: request.tokenGeneration) == .clockSkew
            {
                logger.critical(
                    "APNs says a provider token we just made is expired: check this machine's clock",
                    metadata: ["apns.reason": "ExpiredProviderToken"])
                disable(reason: .expiredProviderToken)
                request.finish(status: status, reason: reason, disposition: .configurationError)
                return
            }
            if let handler { connection.retire(handler) }
        case .retryTokenLater, .retryWithBackoff:
            break
        }
        switch configuration.retry.decide(
            after: disposition, attempt: request.attempts, elapsed: request.elapsed, random: randomSource)
        {
        case .giveUp:
            request.finish(status: status, reason: reason, disposition: disposition, timestamp: timestamp)
        case .retry(let delay):
            if delay <= 0 {
                connection.enqueue(CollectionOfOne(request), front: true)
            } else {
                connection.scheduleRetry(request, in: delay)
            }
        }
    }

    /// The reason the credential was disabled after a configuration error, if it was.
    package var disabledReason: APNSReason? { state.withLock { $0.disabledReason } }

    /// Lets requests through again after a configuration error: the server tries the credential
    /// again this way once its pause is over (the key may have been activated, the topic allowed).
    package func enable() {
        state.withLock { $0.disabledReason = nil }
    }

    private func disable(reason: APNSReason) {
        let first = state.withLock { state -> Bool in
            guard state.disabledReason == nil else { return false }
            state.disabledReason = reason
            return true
        }
        if first {
            logger.critical(
                "APNs rejected the credential or topic: sending with this credential is stopped until the configuration is fixed",
                metadata: ["apns.reason": "\(reason.rawValue)"])
        }
    }

    func finishDisabled(_ request: APNSPendingRequest, reason: APNSReason) {
        request.finish(status: request.lastStatus, reason: reason, disposition: .configurationError)
    }

    func finishUnreachable(_ request: APNSPendingRequest) {
        request.finish(
            status: request.lastStatus, reason: request.lastReason ?? .connectionFailed, disposition: .retryWithBackoff)
    }

    func finishShutDown(_ request: APNSPendingRequest) {
        request.finish(status: nil, reason: .clientShutdown, disposition: .retryWithBackoff)
    }

    func reconnectDelay(afterFailures failures: Int) -> TimeInterval {
        let step = min(
            configuration.maximumReconnectDelay,
            configuration.reconnectBaseDelay * pow(2, Double(min(failures - 1, 30))))
        return step / 2 + step / 2 * randomSource()
    }

    private static func unsent(
        _ notification: APNSNotification, reason: APNSReason, disposition: APNSDisposition
    ) -> APNSResult {
        APNSResult(
            apnsID: notification.apnsID, deviceToken: notification.deviceToken, status: nil, reason: reason,
            disposition: disposition, timestamp: nil, attempts: 0)
    }

    // MARK: Lifecycle

    /// Stops taking notifications, waits up to `gracePeriod` seconds for those in flight,
    /// then closes every connection and the event loops.
    /// A second call returns at once (the event loops are gone).
    package func shutdown(gracePeriod: TimeInterval = 10) async {
        let first = state.withLock { state in
            defer { state.isShutDown = true }
            return !state.isShutDown
        }
        guard first else { return }
        let deadline = ContinuousClock.now + .seconds(gracePeriod)
        while state.withLock({ $0.outstanding }) > 0, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(10))
        }
        for connection in connections {
            try? await connection.eventLoop.submit { connection.shutdown() }.get()
        }
        try? await Task.sleep(for: .milliseconds(50))
        for connection in connections {
            try? await connection.eventLoop.submit { connection.forceClose() }.get()
        }
        if ownsGroup { try? await group.shutdownGracefully() }
    }
}
