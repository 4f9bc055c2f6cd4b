import Foundation
import HeraldCore
import HeraldHTTP2
import Logging
import NIOCore
import NIOPosix
import NIOSSL

/// One long-lived connection slot of the pool, confined to its event loop: a queue of
/// notifications, the HTTP/2 channel it writes them to, and the channels it is retiring.
/// When a channel goes away (GOAWAY, token rotation, failure) the slot opens a new one with
/// backoff and sends what was never answered again.
final class APNSConnection: @unchecked Sendable {
    let eventLoop: any EventLoop
    /// Set once by the client right after creating the pool, before any use.
    private unowned(unsafe) var clientReference: APNSClient?
    private var client: APNSClient { clientReference.unsafelyUnwrapped }
    private let index: Int
    private var logger: Logger
    private var queue = CircularBuffer<APNSPendingRequest>()
    private var active: APNSConnectionHandler?
    private var retiring: [ObjectIdentifier: APNSConnectionHandler] = [:]
    private var isConnecting = false
    private var reconnectTask: Scheduled<Void>?
    private var queueSweep: Scheduled<Void>?
    /// Requests waiting out a retry delay, finished at shutdown (a task left on a stopped
    /// event loop would drop them unanswered).
    private var retries: [ObjectIdentifier: (request: APNSPendingRequest, task: Scheduled<Void>)] = [:]
    private var consecutiveFailures = 0
    private var drainScheduled = false
    private var isShutDown = false

    init(index: Int, eventLoop: any EventLoop, logger: Logger) {
        self.index = index
        self.eventLoop = eventLoop
        var logger = logger
        logger[metadataKey: "apns.connection"] = "\(index)"
        self.logger = logger
    }

    func attach(to client: APNSClient) { clientReference = client }

    // MARK: Work in

    /// Queues requests; must be called on `eventLoop`. Each may wait here for a stream up to
    /// the configuration's `requestDeadline` from now: a request whose connection never comes
    /// up times out like one that APNs never answers (and gets a fresh deadline once written).
    func enqueue(_ requests: some Collection<APNSPendingRequest>, front: Bool = false) {
        eventLoop.preconditionInEventLoop()
        guard !isShutDown else {
            for request in requests { client.finishShutDown(request) }
            return
        }
        let waitDeadline = NIODeadline.now() + .nanoseconds(Int64(client.configuration.requestDeadline * 1e9))
        for request in requests { request.waitDeadline = waitDeadline }
        if front {
            queue.insert(contentsOf: requests, at: queue.startIndex)
        } else {
            queue.append(contentsOf: requests)
        }
        scheduleDrain()
        scheduleQueueSweep()
    }

    /// Sends `request` again after `delay` seconds, through whichever connection the client
    /// picks then; must be called on `eventLoop`.
    func scheduleRetry(_ request: APNSPendingRequest, in delay: TimeInterval) {
        eventLoop.preconditionInEventLoop()
        guard !isShutDown else {
            client.finishShutDown(request)
            return
        }
        let key = ObjectIdentifier(request)
        let task = eventLoop.scheduleTask(in: .nanoseconds(Int64(delay * 1e9))) { [self] in
            retries[key] = nil
            client.distribute([request])
        }
        retries[key] = (request, task)
    }

    /// While requests wait here, checks their deadlines a few times per `requestDeadline`.
    private func scheduleQueueSweep() {
        guard queueSweep == nil, !queue.isEmpty else { return }
        queueSweep = eventLoop.scheduleTask(in: client.configuration.deadlineSweepInterval) { [self] in
            queueSweep = nil
            sweepQueue(now: .now())
            scheduleQueueSweep()
        }
    }

    /// Requests whose deadline passed while they waited for a stream: answered as timed out
    /// (the retry policy decides what follows), the rest keep their place.
    private func sweepQueue(now: NIODeadline) {
        guard queue.contains(where: { $0.waitDeadline <= now }) else { return }
        var expired: [APNSPendingRequest] = []
        var kept = CircularBuffer<APNSPendingRequest>(initialCapacity: queue.count)
        while let request = queue.popFirst() {
            if request.waitDeadline <= now { expired.append(request) } else { kept.append(request) }
        }
        queue = kept
        logger.warning(
            "APNs requests timed out waiting for a connection",
            metadata: ["apns.timed_out": "\(expired.count)", "apns.connect_failures": "\(consecutiveFailures)"])
        for request in expired {
            client.handleAnswer(request, status: nil, reason: .timeout, timestamp: nil, on: self, handler: nil)
        }
    }

    private func scheduleDrain() {
        guard !drainScheduled else { return }
        drainScheduled = true
        eventLoop.execute { [self] in
            drainScheduled = false
            drain()
        }
    }

    /// Writes as many queued requests as the active channel has streams for, then flushes once.
    func drain() {
        guard !isShutDown, !queue.isEmpty else { return }
        if let reason = client.disabledReason {
            while let request = queue.popFirst() { client.finishDisabled(request, reason: reason) }
            return
        }
        guard let handler = active, handler.acceptsNewStreams else {
            active = nil
            connectIfNeeded()
            return
        }
        guard pinToken(on: handler) else { return }
        var wrote = false
        while handler.availableStreams > 0, let request = queue.first, handler.canSend(request) {
            queue.removeFirst()
            handler.write(request)
            wrote = true
        }
        if wrote { handler.flush() }
    }

    /// Gives the channel the current provider token, unless it changed tokens less than
    /// 20 minutes ago: then the channel is retired and a new one opened (protocols.md §6).
    private func pinToken(on handler: APNSConnectionHandler) -> Bool {
        let token = client.tokenManager.current()
        guard handler.token?.generation != token.generation else { return true }
        let now = NIODeadline.now()
        if handler.token == nil
            || now - handler.tokenSetAt >= .seconds(Int64(APNSProviderTokenManager.minimumRegenerationInterval))
        {
            handler.token = token
            handler.tokenSetAt = now
            return true
        }
        retire(handler)
        connectIfNeeded()
        return false
    }

    /// Stops writing to `handler`; it closes once its streams are answered.
    func retire(_ handler: APNSConnectionHandler) {
        if active === handler { active = nil }
        retiring[ObjectIdentifier(handler)] = handler
        handler.retire()
    }

    // MARK: Connecting

    /// Connects when work waits and no channel is open or opening: at once after a success,
    /// after the backoff delay after failures. (The delayed try connects; asking again here
    /// would only schedule another delay, for ever.)
    private func connectIfNeeded() {
        guard mayConnect, reconnectTask == nil else { return }
        if consecutiveFailures == 0 {
            connect()
        } else {
            let delay = client.reconnectDelay(afterFailures: consecutiveFailures)
            reconnectTask = eventLoop.scheduleTask(in: .nanoseconds(Int64(delay * 1e9))) { [self] in
                reconnectTask = nil
                if mayConnect { connect() }
            }
        }
    }

    private var mayConnect: Bool { !isShutDown && active == nil && !isConnecting && !queue.isEmpty }

    private func connect() {
        isConnecting = true
        let configuration = client.configuration
        let endpoint = configuration.endpoint
        let handler = APNSConnectionHandler(
            authority: endpoint.port == 443 ? endpoint.host : "\(endpoint.host):\(endpoint.port)",
            ownStreamLimit: configuration.maximumStreamsPerConnection,
            requestDeadline: configuration.requestDeadline,
            sweepInterval: configuration.deadlineSweepInterval,
            handshakeTimeout: configuration.connectTimeout,
            idlePingInterval: configuration.idlePingInterval,
            pingTimeout: configuration.pingTimeout,
            logger: logger)
        handler.delegate = self
        let sslContext = client.sslContext
        let serverHostname = endpoint.host.isIPAddress ? nil : endpoint.host
        let handlerBox = NIOLoopBound(handler, eventLoop: eventLoop)
        ClientBootstrap(group: eventLoop)
            .connectTimeout(.nanoseconds(Int64(configuration.connectTimeout * 1e9)))
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(NIOSSLClientHandler(context: sslContext, serverHostname: serverHostname))
                    try sync.addHandler(handlerBox.value)
                }
            }
            .connect(host: endpoint.host, port: endpoint.port)
            .whenComplete { [self] result in
                let handler = handlerBox.value
                isConnecting = false
                switch result {
                case .success:
                    if isShutDown {
                        handler.close()
                        return
                    }
                    // Counted as connected only when the server's SETTINGS arrive
                    // (`handlerIsReady`): a TLS handshake or preface that fails is a failed connect.
                    client.connectionOpened()
                    active = handler
                    logger.debug(
                        "APNs TCP connection open; TLS and HTTP/2 preface next",
                        metadata: ["apns.endpoint": "\(endpoint)"])
                    drain()
                case .failure(let error):
                    connectFailed("\(error)")
                }
            }
    }

    /// A connect that did not reach the server's SETTINGS (TCP refused or timed out, TLS
    /// handshake failed, the peer closed or stalled before its preface): the next try waits
    /// longer; after `maximumConnectFailures` in a row what is queued fails as unreachable.
    private func connectFailed(_ error: String) {
        consecutiveFailures += 1
        let endpoint = client.configuration.endpoint
        logger.warning(
            "APNs connect failed",
            metadata: [
                "apns.endpoint": "\(endpoint)", "error": "\(error)", "apns.connect_failures": "\(consecutiveFailures)",
            ])
        if consecutiveFailures >= client.configuration.maximumConnectFailures {
            while let request = queue.popFirst() { client.finishUnreachable(request) }
            consecutiveFailures = 0
        }
        connectIfNeeded()
    }

    // MARK: Shutdown

    /// Fails what is queued, closes every channel once its streams are answered.
    func shutdown() {
        eventLoop.preconditionInEventLoop()
        isShutDown = true
        reconnectTask?.cancel()
        reconnectTask = nil
        queueSweep?.cancel()
        queueSweep = nil
        for (request, task) in retries.values {
            task.cancel()
            client.finishShutDown(request)
        }
        retries.removeAll()
        while let request = queue.popFirst() { client.finishShutDown(request) }
        if let active { retire(active) }
        for handler in retiring.values { handler.retire() }
    }

    /// Closes every channel at once; unanswered streams fail.
    func forceClose() {
        eventLoop.preconditionInEventLoop()
        active?.close()
        for handler in retiring.values { handler.close() }
    }
}

extension APNSConnection: APNSConnectionHandlerDelegate {
    func handlerIsReady(_ handler: APNSConnectionHandler) {
        if handler === active {
            consecutiveFailures = 0
            logger.debug("APNs connection ready", metadata: ["apns.endpoint": "\(client.configuration.endpoint)"])
        }
    }

    func handlerHasCapacity(_ handler: APNSConnectionHandler) {
        if handler === active { drain() }
    }

    func handler(
        _ handler: APNSConnectionHandler, answered request: APNSPendingRequest, status: Int, reason: APNSReason?,
        timestamp: Date?
    ) {
        client.handleAnswer(request, status: status, reason: reason, timestamp: timestamp, on: self, handler: handler)
    }

    func handler(_ handler: APNSConnectionHandler, unanswered requests: [APNSPendingRequest]) {
        var again: [APNSPendingRequest] = []
        for request in requests {
            request.resends += 1
            if !client.configuration.retry.mayResend(resends: request.resends, elapsed: request.elapsed) || isShutDown {
                client.finishUnreachable(request)
            } else {
                again.append(request)
            }
        }
        if !again.isEmpty { enqueue(again, front: true) }
    }

    func handler(_ handler: APNSConnectionHandler, timedOut request: APNSPendingRequest) {
        client.handleAnswer(request, status: nil, reason: .timeout, timestamp: nil, on: self, handler: handler)
    }

    func handlerIsGoingAway(_ handler: APNSConnectionHandler, reason: String?) {
        if active === handler {
            active = nil
            retiring[ObjectIdentifier(handler)] = handler
        }
        connectIfNeeded()
    }

    func handlerDidClose(_ handler: APNSConnectionHandler, wasReady: Bool) {
        client.connectionClosed()
        let wasActive = active === handler
        if wasActive { active = nil }
        retiring[ObjectIdentifier(handler)] = nil
        if wasActive, !wasReady, !isShutDown {
            connectFailed("the connection closed before the server's HTTP/2 SETTINGS (TLS handshake or preface failed)")
        } else {
            connectIfNeeded()
        }
    }
}
