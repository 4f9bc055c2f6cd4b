package import Foundation
import HeraldCore
import HeraldHTTP2
import Logging
import NIOCore
import NIOHPACK

/// The events an `APNSConnectionHandler` reports to the connection that owns it. All calls
/// happen on the channel's event loop.
protocol APNSConnectionHandlerDelegate: AnyObject {
    /// The server's first SETTINGS arrived: TLS and the HTTP/2 preface succeeded.
    func handlerIsReady(_ handler: APNSConnectionHandler)
    /// The server's SETTINGS arrived or streams finished: there may be room for more streams.
    func handlerHasCapacity(_ handler: APNSConnectionHandler)
    /// APNs answered a request.
    func handler(
        _ handler: APNSConnectionHandler, answered request: APNSPendingRequest, status: Int, reason: APNSReason?,
        timestamp: Date?)
    /// These requests were never answered (refused, above a GOAWAY, cut by a close): send them again.
    func handler(_ handler: APNSConnectionHandler, unanswered requests: [APNSPendingRequest])
    /// This request's deadline passed; its stream was reset.
    func handler(_ handler: APNSConnectionHandler, timedOut request: APNSPendingRequest)
    /// The server sent GOAWAY: no new streams on this connection.
    func handlerIsGoingAway(_ handler: APNSConnectionHandler, reason: String?)
    /// The channel closed; `wasReady`: whether the server's SETTINGS had come.
    func handlerDidClose(_ handler: APNSConnectionHandler, wasReady: Bool)
}

/// Speaks APNs over one HTTP/2 connection, directly on the TLS byte stream: a NIO shell over
/// ``HTTP2ClientStreams`` (stream ids map to pending requests, every batch of requests is
/// encoded into one buffer and flushed once, flow-control windows are kept by hand), with the
/// requests' deadlines swept, a PING when idle, and a connection that does not finish its TLS
/// handshake and HTTP/2 preface within `handshakeTimeout` closed as a failed connect.
final class APNSConnectionHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = Never
    typealias OutboundOut = ByteBuffer

    weak var delegate: (any APNSConnectionHandlerDelegate)?
    private let authority: String
    private let requestDeadline: TimeAmount
    private let sweepInterval: TimeAmount
    private let handshakeTimeout: TimeAmount
    private let idlePingInterval: TimeAmount
    private let pingTimeout: TimeAmount
    private let logger: Logger

    private var context: ChannelHandlerContext?
    private var parser = HTTP2FrameParser()
    private var streams: HTTP2ClientStreams
    /// Streams kept open for the rate this connection carries (`HTTP2StreamWindow`).
    private var window = HTTP2StreamWindow(floor: APNSConnectionHandler.streamFloor, now: .now())
    private(set) var isClosed = false
    /// Set when the owner wants this connection to finish its streams and close (token rotation).
    private(set) var isRetired = false
    /// Whether the server's first SETTINGS came (TLS and the HTTP/2 preface went through).
    private(set) var isReady = false
    private var addedAt = NIODeadline.now()
    private var sweepTask: RepeatedTask?

    /// The provider token this connection sends and since when (for the 20-minute rule).
    var token: APNSProviderToken?
    var tokenSetAt = NIODeadline.distantPast
    /// `bearer <token>`, built once per token generation.
    private var authorizationValue = ""
    private var authorizationGeneration = 0

    init(
        authority: String, ownStreamLimit: Int, requestDeadline: TimeInterval, sweepInterval: TimeAmount,
        handshakeTimeout: TimeInterval,
        idlePingInterval: TimeInterval, pingTimeout: TimeInterval, logger: Logger
    ) {
        self.authority = authority
        streams = HTTP2ClientStreams(streamLimitCap: ownStreamLimit, keepsResponseHeaders: false)
        self.requestDeadline = .nanoseconds(Int64(requestDeadline * 1e9))
        self.sweepInterval = sweepInterval
        self.handshakeTimeout = .nanoseconds(Int64(handshakeTimeout * 1e9))
        self.idlePingInterval = .nanoseconds(Int64(idlePingInterval * 1e9))
        self.pingTimeout = .nanoseconds(Int64(pingTimeout * 1e9))
        self.logger = logger
    }

    /// Streams that may be opened now: the server's limit, and no more than the rate measured
    /// needs (`HTTP2StreamWindow`).
    var availableStreams: Int {
        guard !isClosed, !isRetired else { return 0 }
        return max(0, min(streams.availableStreams, window.limit - streams.openStreams))
    }

    /// Streams open however slow the answers: enough for a near server's bursts.
    static let streamFloor = 250

    /// Whether new requests may be written here (now or once SETTINGS arrive).
    var acceptsNewStreams: Bool { !streams.isGoingAway && !isClosed && !isRetired && streams.hasStreamIDs }

    var inFlightCount: Int { streams.openStreams }

    /// Whether the flow-control windows let this request's body go out whole right now.
    func canSend(_ request: APNSPendingRequest) -> Bool {
        streams.mayOpen(bodySize: request.payload.readableBytes)
    }

    // MARK: Writing

    /// The fields every request on a connection shares while the credential, push type, topic
    /// and priority stay the same: encoded once, then reused (`HTTP2HeaderTemplates`).
    static let fixedHeaderNames = [
        ":method", ":scheme", ":authority", "authorization", "apns-push-type", "apns-topic", "apns-priority",
    ]

    /// Encodes one request on a new stream into the pending output; the caller checked
    /// `availableStreams` and `canSend`, and calls `flush()` after the batch. Its answer is due
    /// `requestDeadline` from now (its wait for a stream had its own deadline).
    func write(_ request: APNSPendingRequest) {
        guard context != nil, let token else { return }
        if authorizationGeneration != token.generation {
            authorizationValue = "bearer " + token.value
            authorizationGeneration = token.generation
        }
        let notification = request.notification
        var own: [(name: String, value: String)] = [
            (":path", notification.path), ("apns-id", notification.apnsID.lowercasedString),
        ]
        own.reserveCapacity(5)
        if let expiration = notification.expiration { own.append(("apns-expiration", String(expiration))) }
        if let collapseID = notification.collapseID { own.append(("apns-collapse-id", collapseID)) }
        own.append(("content-length", String(request.payload.readableBytes)))
        let headers = HTTP2RequestHeaders(
            fixedNames: Self.fixedHeaderNames,
            fixedValues: [
                "POST", "https", authority, authorizationValue, notification.pushType.rawValue, notification.topic,
                String(notification.priority.rawValue),
            ],
            own: own)
        request.tokenGeneration = token.generation
        let now = NIODeadline.now()
        request.writtenAt = now
        request.deadline = now + requestDeadline
        if !streams.open(request, requestHeaders: headers, body: request.payload, deadline: request.deadline) {
            request.finish(status: nil, reason: .invalidNotification, disposition: .badRequest)
        }
    }

    /// Sends everything written since the last flush as one write.
    func flush() {
        guard let context, streams.output.readableBytes > 0 else { return }
        context.writeAndFlush(wrapOutboundOut(streams.output), promise: nil)
        streams.output = context.channel.allocator.buffer(capacity: 16_384)
    }

    /// Stops taking new streams; closes once the streams in flight are answered.
    func retire() {
        isRetired = true
        streams.retire()
        closeIfDrained()
    }

    /// Closes now; streams in flight are reported unanswered.
    func close() {
        context?.close(promise: nil)
    }

    // MARK: Channel events

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        addedAt = .now()
        streams.output = context.channel.allocator.buffer(capacity: 16_384)
        let interval = sweepInterval
        let bound = NIOLoopBound(self, eventLoop: context.eventLoop)
        // Cancelled in handlerRemoved, so the strong reference ends with the handler.
        sweepTask = context.eventLoop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { _ in
            bound.value.sweep()
        }
        if context.channel.isActive { sendPreface() }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        sweepTask?.cancel()
        sweepTask = nil
        self.context = nil
    }

    func channelActive(context: ChannelHandlerContext) {
        sendPreface()
        context.fireChannelActive()
    }

    private var sentPreface = false

    private func sendPreface() {
        guard !sentPreface else { return }
        sentPreface = true
        streams.writePreface()
        flush()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = unwrapInboundIn(data)
        parser.append(&bytes)
        streams.didRead(now: .now())
        do {
            while let frame = try parser.next() {
                if let event = try streams.read(frame) { handle(event) }
            }
        } catch {
            logger.warning("APNs connection protocol error; closing it", metadata: ["error": "\(error)"])
            streams.fail(with: error)
            flush()
            context.close(promise: nil)
        }
    }

    private func handle(_ event: HTTP2StreamEvent) {
        switch event {
        case .answered(let object, let status, _, let body):
            let request = Self.request(object)
            if let writtenAt = request.writtenAt {
                let now = NIODeadline.now()
                window.answered(roundTrip: now - writtenAt, now: now)
            }
            var reason: APNSReason?
            var timestamp: Date?
            if status != 200, let body, let object = Self.jsonObject(in: body) {
                reason = (object["reason"] as? String).map(APNSReason.init(rawValue:))
                if let milliseconds = object["timestamp"] as? NSNumber {
                    timestamp = APNSTimestamp.sane(seconds: milliseconds.doubleValue / 1000)
                }
            }
            delegate?.handler(self, answered: request, status: status, reason: reason, timestamp: timestamp)
        case .unanswered(let object):
            logger.debug("APNs stream reset before an answer")
            delegate?.handler(self, unanswered: [Self.request(object)])
        case .responseTooLarge(let object, let status):
            let request = Self.request(object)
            // APNs answers with a few bytes of JSON: a huge body is not an answer to read.
            if let status {
                delegate?.handler(self, answered: request, status: status, reason: nil, timestamp: nil)
            } else {
                delegate?.handler(self, unanswered: [request])
            }
        case .goingAway(let code, let debugData, let orphans):
            let reason = Self.reason(in: debugData)
            logger.info(
                "APNs sent GOAWAY",
                metadata: [
                    "apns.http2.error": "\(code)", "apns.reason": "\(reason ?? "-")", "apns.resent": "\(orphans.count)",
                ])
            delegate?.handlerIsGoingAway(self, reason: reason)
            if !orphans.isEmpty { delegate?.handler(self, unanswered: orphans.map(Self.request)) }
        }
    }

    /// The table holds only this handler's requests.
    private static func request(_ object: AnyObject) -> APNSPendingRequest {
        unsafeDowncast(object, to: APNSPendingRequest.self)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        streams.readComplete()
        if !isReady, streams.peer.receivedSettings {
            isReady = true
            delegate?.handlerIsReady(self)
        }
        delegate?.handlerHasCapacity(self)
        flush()
        closeIfDrained()
    }

    func channelInactive(context: ChannelHandlerContext) {
        isClosed = true
        let orphans = streams.closed().map(Self.request)
        sweepTask?.cancel()
        sweepTask = nil
        if !orphans.isEmpty { delegate?.handler(self, unanswered: orphans) }
        delegate?.handlerDidClose(self, wasReady: isReady)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        logger.warning("APNs connection error", metadata: ["error": "\(error)"])
        context.close(promise: nil)
    }

    // MARK: Internals

    private func closeIfDrained() {
        if isRetired || streams.isGoingAway, streams.openStreams == 0, !isClosed {
            isClosed = true
            flush()
            context?.close(promise: nil)
        }
    }

    private func sweep() {
        guard !isClosed, let context else { return }
        let now = NIODeadline.now()
        if !isReady, now - addedAt >= handshakeTimeout {
            logger.warning(
                "APNs connection: no HTTP/2 SETTINGS within the connect timeout (TLS handshake or preface stalled); closing it"
            )
            context.close(promise: nil)
            return
        }
        for object in streams.expire(now: now) { delegate?.handler(self, timedOut: Self.request(object)) }
        guard streams.keepAlive(now: now, idle: idlePingInterval, timeout: pingTimeout) else {
            logger.warning("APNs connection did not answer PING; closing it")
            context.close(promise: nil)
            return
        }
        flush()
        closeIfDrained()
    }

    static func jsonObject(in buffer: ByteBuffer) -> [String: Any]? {
        guard buffer.readableBytes > 0 else { return nil }
        return (try? JSONSerialization.jsonObject(with: Data(buffer.readableBytesView))) as? [String: Any]
    }

    static func reason(in buffer: ByteBuffer) -> String? {
        jsonObject(in: buffer)?["reason"] as? String
    }
}

extension UUID {
    /// The canonical lowercase form (`8-4-4-4-12`), without going through `uuidString`'s formatter.
    var lowercasedString: String {
        let digits: [UInt8] = Array("0123456789abcdef".utf8)
        return withUnsafeBytes(of: uuid) { bytes in
            String(unsafeUninitializedCapacity: 36) { output in
                var index = 0
                for (position, byte) in bytes.enumerated() {
                    if position == 4 || position == 6 || position == 8 || position == 10 {
                        output[index] = UInt8(ascii: "-")
                        index += 1
                    }
                    output[index] = digits[Int(byte >> 4)]
                    output[index + 1] = digits[Int(byte & 0x0f)]
                    index += 2
                }
                return 36
            }
        }
    }
}

/// Apple's "token invalid since" time (the 410 answer's `timestamp`, in milliseconds).
package enum APNSTimestamp {
    /// Believed only within the last ten years and not in the future; anything else (`1e300`,
    /// negative, `nan`) is clamped or dropped, so no peer's number reaches a trapping conversion.
    package static func sane(seconds: Double, now: Date = Date()) -> Date? {
        guard seconds.isFinite else { return nil }
        if seconds >= now.timeIntervalSince1970 { return now }
        let earliest = now.timeIntervalSince1970 - 10 * 365 * 86400
        return Date(timeIntervalSince1970: min(max(seconds, earliest), now.timeIntervalSince1970))
    }
}
