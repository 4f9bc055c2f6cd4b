import Foundation
import HeraldCore
import Logging
import NIOCore
import NIOHPACK
import NIOHTTP2

/// The events an `APNSConnectionHandler` reports to the connection that owns it. All calls
/// happen on the channel's event loop.
protocol APNSConnectionHandlerDelegate: AnyObject {
    /// The server's SETTINGS arrived or a stream finished: there may be room for more streams.
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
    /// The channel closed.
    func handlerDidClose(_ handler: APNSConnectionHandler)
}

/// Speaks APNs on one HTTP/2 connection by handling frames directly on the connection's
/// pipeline (no child channel per stream): stream ids map to pending requests, writes are
/// flushed once per batch, and every request has a deadline (GUIDE performance notes).
final class APNSConnectionHandler: ChannelDuplexHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundIn = Never
    typealias OutboundOut = HTTP2Frame

    private struct InFlight {
        var request: APNSPendingRequest
        var status: Int?
        var body: ByteBuffer?
    }

    weak var delegate: (any APNSConnectionHandlerDelegate)?
    private let authority: String
    private let ownStreamLimit: Int
    private let requestDeadline: TimeAmount
    private let idlePingInterval: TimeAmount
    private let pingTimeout: TimeAmount
    private let logger: Logger

    private var context: ChannelHandlerContext?
    private var inFlight: [Int32: InFlight] = [:]
    private var nextStreamID: Int32 = 1
    private var remoteStreamLimit = 0
    private var receivedSettings = false
    private(set) var isGoingAway = false
    private(set) var isClosed = false
    /// Set when the owner wants this connection to finish its streams and close (token rotation).
    private(set) var isRetired = false
    private var unacknowledgedBytes = 0
    private var lastRead = NIODeadline.now()
    private var pingSentAt: NIODeadline?
    private var sweepTask: RepeatedTask?

    /// The provider token this connection sends and since when (for the 20-minute rule).
    var token: APNSProviderToken?
    var tokenSetAt = NIODeadline.distantPast

    init(
        authority: String, ownStreamLimit: Int, requestDeadline: TimeInterval, idlePingInterval: TimeInterval,
        pingTimeout: TimeInterval, logger: Logger
    ) {
        self.authority = authority
        self.ownStreamLimit = ownStreamLimit
        self.requestDeadline = .nanoseconds(Int64(requestDeadline * 1e9))
        self.idlePingInterval = .nanoseconds(Int64(idlePingInterval * 1e9))
        self.pingTimeout = .nanoseconds(Int64(pingTimeout * 1e9))
        self.logger = logger
    }

    /// Streams that may be opened now.
    var availableStreams: Int {
        guard receivedSettings, !isGoingAway, !isClosed, !isRetired else { return 0 }
        // Leave room below the largest stream id; past it the connection must be replaced.
        guard nextStreamID < Int32.max - 2 else { return 0 }
        return max(0, min(remoteStreamLimit, ownStreamLimit) - inFlight.count)
    }

    /// Whether new requests may be written here (now or once SETTINGS arrive).
    var acceptsNewStreams: Bool { !isGoingAway && !isClosed && !isRetired && nextStreamID < Int32.max - 2 }

    var inFlightCount: Int { inFlight.count }

    // MARK: Writing

    /// Writes one request on a new stream; the caller checked `availableStreams` and flushes.
    func write(_ request: APNSPendingRequest) {
        guard let context, let token else { return }
        let streamID = nextStreamID
        nextStreamID += 2
        let notification = request.notification
        var headers = HPACKHeaders()
        headers.reserveCapacity(12)
        headers.add(name: ":method", value: "POST")
        headers.add(name: ":scheme", value: "https")
        headers.add(name: ":authority", value: authority)
        headers.add(name: ":path", value: notification.path, indexing: .nonIndexable)
        headers.add(name: "authorization", value: "bearer " + token.value)
        headers.add(name: "apns-push-type", value: notification.pushType.rawValue)
        headers.add(name: "apns-topic", value: notification.topic)
        headers.add(name: "apns-priority", value: String(notification.priority.rawValue))
        headers.add(name: "apns-id", value: notification.apnsID.uuidString.lowercased(), indexing: .nonIndexable)
        if let expiration = notification.expiration {
            headers.add(name: "apns-expiration", value: String(expiration), indexing: .nonIndexable)
        }
        if let collapseID = notification.collapseID {
            headers.add(name: "apns-collapse-id", value: collapseID, indexing: .nonIndexable)
        }
        headers.add(name: "content-length", value: String(request.payload.readableBytes))
        request.tokenGeneration = token.generation
        request.deadline = .now() + requestDeadline
        inFlight[streamID] = InFlight(request: request)
        let id = HTTP2StreamID(streamID)
        context.write(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .headers(.init(headers: headers)))), promise: nil)
        context.write(
            wrapOutboundOut(HTTP2Frame(streamID: id, payload: .data(.init(data: .byteBuffer(request.payload), endStream: true)))),
            promise: nil)
    }

    func flush() { context?.flush() }

    /// Stops taking new streams; closes once the streams in flight are answered.
    func retire() {
        isRetired = true
        closeIfDrained()
    }

    /// Closes now; streams in flight are reported unanswered.
    func close() {
        context?.close(promise: nil)
    }

    // MARK: Channel events

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        let interval = TimeAmount.milliseconds(min(1000, max(10, requestDeadline.nanoseconds / 1_000_000 / 4)))
        let bound = NIOLoopBound(self, eventLoop: context.eventLoop)
        // Cancelled in handlerRemoved, so the strong reference ends with the handler.
        sweepTask = context.eventLoop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { _ in
            bound.value.sweep()
        }
    }

    func channelActive(context: ChannelHandlerContext) {
        // Open the connection-level window wide at once: a 64 KiB window would stall bursts and
        // release buffered frames out of stream order.
        context.writeAndFlush(
            wrapOutboundOut(
                HTTP2Frame(
                    streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: Self.connectionWindowIncrement))),
            promise: nil)
        context.fireChannelActive()
    }

    /// Added to the 65,535-byte default connection window when the connection opens.
    static let connectionWindowIncrement = (16 << 20) - 65_535

    func handlerRemoved(context: ChannelHandlerContext) {
        sweepTask?.cancel()
        sweepTask = nil
        self.context = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        lastRead = .now()
        pingSentAt = nil
        switch frame.payload {
        case .settings(.settings(let settings)):
            if !receivedSettings {
                receivedSettings = true
                remoteStreamLimit = Int(Int32.max)
            }
            for setting in settings where setting.parameter == .maxConcurrentStreams {
                remoteStreamLimit = setting.value
            }
        case .headers(let headers):
            let streamID = Int32(frame.streamID)
            guard var entry = inFlight[streamID] else { return }
            if let status = headers.headers.first(name: ":status").flatMap({ Int($0) }) {
                entry.status = status
            }
            if headers.endStream {
                inFlight[streamID] = nil
                answer(entry)
            } else {
                inFlight[streamID] = entry
            }
        case .data(let data):
            if case .byteBuffer(var bytes) = data.data {
                unacknowledgedBytes += bytes.readableBytes + (data.paddingBytes ?? 0)
                let streamID = Int32(frame.streamID)
                if var entry = inFlight[streamID] {
                    if entry.body == nil {
                        entry.body = bytes
                    } else {
                        entry.body!.writeBuffer(&bytes)
                    }
                    if data.endStream {
                        inFlight[streamID] = nil
                        answer(entry)
                    } else {
                        inFlight[streamID] = entry
                    }
                }
            }
        case .rstStream(let code):
            if let entry = inFlight.removeValue(forKey: Int32(frame.streamID)) {
                if let status = entry.status {
                    // The answer's headers came before the reset: that is an answer.
                    delegate?.handler(self, answered: entry.request, status: status, reason: nil, timestamp: nil)
                } else {
                    logger.debug("APNs stream reset", metadata: ["apns.http2.error": "\(code)"])
                    delegate?.handler(self, unanswered: [entry.request])
                }
            }
        case .goAway(let lastStreamID, let code, let opaqueData):
            isGoingAway = true
            let last = Int32(lastStreamID)
            var orphans: [APNSPendingRequest] = []
            for (streamID, entry) in inFlight where streamID > last {
                orphans.append(entry.request)
                inFlight[streamID] = nil
            }
            let reason = opaqueData.flatMap(Self.reason(in:))
            logger.info(
                "APNs sent GOAWAY",
                metadata: [
                    "apns.http2.error": "\(code)", "apns.reason": "\(reason ?? "-")",
                    "apns.resent": "\(orphans.count)",
                ])
            delegate?.handlerIsGoingAway(self, reason: reason)
            if !orphans.isEmpty { delegate?.handler(self, unanswered: orphans) }
        default:
            break
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if unacknowledgedBytes >= 1 << 20 {
            // Without a stream multiplexer the connection-level window is ours to replenish.
            context.write(
                wrapOutboundOut(
                    HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: unacknowledgedBytes))),
                promise: nil)
            unacknowledgedBytes = 0
        }
        delegate?.handlerHasCapacity(self)
        context.flush()
        closeIfDrained()
    }

    func channelInactive(context: ChannelHandlerContext) {
        isClosed = true
        let orphans = inFlight.values.map(\.request)
        inFlight.removeAll()
        sweepTask?.cancel()
        sweepTask = nil
        if !orphans.isEmpty { delegate?.handler(self, unanswered: orphans) }
        delegate?.handlerDidClose(self)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // Stream-level errors (a reset racing an answer, a frame for a stream already closed)
        // leave the connection usable; anything else ends it and its streams are resent.
        if error is NIOHTTP2Errors.NoSuchStream || error is NIOHTTP2Errors.StreamClosed
            || error is NIOHTTP2Errors.StreamError
        {
            logger.debug("APNs stream error", metadata: ["error": "\(error)"])
            return
        }
        logger.warning("APNs connection error", metadata: ["error": "\(error)"])
        context.close(promise: nil)
    }

    // MARK: Internals

    private func answer(_ entry: InFlight) {
        let status = entry.status ?? 0
        var reason: APNSReason?
        var timestamp: Date?
        if status != 200, let body = entry.body, let object = Self.jsonObject(in: body) {
            reason = (object["reason"] as? String).map(APNSReason.init(rawValue:))
            if let milliseconds = object["timestamp"] as? NSNumber {
                timestamp = Date(timeIntervalSince1970: milliseconds.doubleValue / 1000)
            }
        }
        delegate?.handler(self, answered: entry.request, status: status, reason: reason, timestamp: timestamp)
    }

    private func closeIfDrained() {
        if (isGoingAway || isRetired), inFlight.isEmpty, !isClosed {
            isClosed = true
            context?.close(promise: nil)
        }
    }

    private func sweep() {
        guard let context, !isClosed else { return }
        let now = NIODeadline.now()
        var expired: [Int32] = []
        for (streamID, entry) in inFlight where entry.request.deadline <= now {
            expired.append(streamID)
        }
        for streamID in expired {
            guard let entry = inFlight.removeValue(forKey: streamID) else { continue }
            context.write(
                wrapOutboundOut(HTTP2Frame(streamID: HTTP2StreamID(streamID), payload: .rstStream(.cancel))),
                promise: nil)
            delegate?.handler(self, timedOut: entry.request)
        }
        if let pingSentAt {
            if now - pingSentAt > pingTimeout {
                logger.warning("APNs connection did not answer PING; closing it")
                context.close(promise: nil)
                return
            }
        } else if now - lastRead > idlePingInterval {
            pingSentAt = now
            context.write(
                wrapOutboundOut(
                    HTTP2Frame(streamID: .rootStream, payload: .ping(HTTP2PingData(withInteger: 0x4845_5241_4c44), ack: false))),
                promise: nil)
        }
        if !expired.isEmpty || pingSentAt == now {
            context.flush()
            closeIfDrained()
        }
    }

    static func jsonObject(in buffer: ByteBuffer) -> [String: Any]? {
        guard let bytes = buffer.getBytes(at: buffer.readerIndex, length: buffer.readableBytes) else { return nil }
        return (try? JSONSerialization.jsonObject(with: Data(bytes))) as? [String: Any]
    }

    static func reason(in buffer: ByteBuffer) -> String? {
        jsonObject(in: buffer)?["reason"] as? String
    }
}
