import Foundation
import HeraldCore
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

    /// Queues requests; must be called on `eventLoop`.
    func enqueue(_ requests: some Collection<APNSPendingRequest>, front: Bool = false) {
        eventLoop.preconditionInEventLoop()
        guard !isShutDown else {
            for request in requests { client.finishShutDown(request) }
            return
        }
        if front {
            queue.insert(contentsOf: requests, at: queue.startIndex)
        } else {
            queue.append(contentsOf: requests)
        }
        scheduleDrain()
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

    private func connectIfNeeded() {
        guard !isShutDown, active == nil, !isConnecting, reconnectTask == nil, !queue.isEmpty else { return }
        if consecutiveFailures == 0 {
            connect()
        } else {
            let delay = client.reconnectDelay(afterFailures: consecutiveFailures)
            reconnectTask = eventLoop.scheduleTask(in: .nanoseconds(Int64(delay * 1e9))) { [self] in
                reconnectTask = nil
                connectIfNeeded()
            }
        }
    }

    private func connect() {
        isConnecting = true
        let configuration = client.configuration
        let endpoint = configuration.endpoint
        let handler = APNSConnectionHandler(
            authority: endpoint.port == 443 ? endpoint.host : "\(endpoint.host):\(endpoint.port)",
            ownStreamLimit: configuration.maximumStreamsPerConnection,
            requestDeadline: configuration.requestDeadline,
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
                    consecutiveFailures = 0
                    client.connectionOpened()
                    active = handler
                    logger.debug("APNs connection open", metadata: ["apns.endpoint": "\(endpoint)"])
                    drain()
                case .failure(let error):
                    consecutiveFailures += 1
                    logger.warning(
                        "APNs connect failed",
                        metadata: [
                            "apns.endpoint": "\(endpoint)", "error": "\(error)",
                            "apns.connect_failures": "\(consecutiveFailures)",
                        ])
                    if consecutiveFailures >= configuration.maximumConnectFailures {
                        while let request = queue.popFirst() { client.finishUnreachable(request) }
                        consecutiveFailures = 0
                    }
                    connectIfNeeded()
                }
            }
    }

    // MARK: Shutdown

    /// Fails what is queued, closes every channel once its streams are answered.
    func shutdown() {
        eventLoop.preconditionInEventLoop()
        isShutDown = true
        reconnectTask?.cancel()
        reconnectTask = nil
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

    func handlerDidClose(_ handler: APNSConnectionHandler) {
        client.connectionClosed()
        if active === handler { active = nil }
        retiring[ObjectIdentifier(handler)] = nil
        connectIfNeeded()
    }
}

extension String {
    /// Whether this is an IPv4 or IPv6 literal (no SNI is sent for those).
    var isIPAddress: Bool {
        var ipv4 = in_addr()
        var ipv6 = in6_addr()
        return withCString { inet_pton(AF_INET, $0, &ipv4) == 1 || inet_pton(AF_INET6, $0, &ipv6) == 1 }
    }
}
