package import Foundation
import HeraldCore
import HeraldHTTP2
import Logging
import NIOCore
import NIOHPACK

/// The events an `APNSConnectionHandler` reports to the connection that owns it. All calls
/// happen on the channel's event loop.
protocol APNSConnectionHandlerDelegate: AnyObject {
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
    /// The channel closed.
    func handlerDidClose(_ handler: APNSConnectionHandler)
}

/// Speaks APNs over one HTTP/2 connection, directly on the TLS byte stream: stream ids map to
/// pending requests, every batch of requests is encoded into one buffer and flushed once,
/// flow-control windows are kept by hand, and every request has a deadline.
final class APNSConnectionHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = Never
    typealias OutboundOut = ByteBuffer

    private struct InFlight {
        var request: APNSPendingRequest
        var status: Int?
        var body: ByteBuffer?
        /// DATA bytes received on the stream (padding included).
        var received = 0
    }

    /// Payloads that wait for a WINDOW_UPDATE (only when the server's windows are smaller than a
    /// payload; APNs' never are).
    private var waitingBodies = HTTP2WaitingBodies()

    weak var delegate: (any APNSConnectionHandlerDelegate)?
    private let authority: String
    private let ownStreamLimit: Int
    private let requestDeadline: TimeAmount
    private let idlePingInterval: TimeAmount
    private let pingTimeout: TimeAmount
    private let logger: Logger

    private var context: ChannelHandlerContext?
    private var parser = HTTP2FrameParser()
    private var encoder = HPACKEncoder(allocator: ByteBufferAllocator(), useHuffmanEncoding: false)
    private var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
    private var output = ByteBuffer()
    private var inFlight: [Int32: InFlight] = [:]
    private var nextStreamID: Int32 = 1
    private var peer = HTTP2ClientPeerState()
    private(set) var isGoingAway = false
    private(set) var isClosed = false
    /// Set when the owner wants this connection to finish its streams and close (token rotation).
    private(set) var isRetired = false
    private var sweepTask: RepeatedTask?

    /// The provider token this connection sends and since when (for the 20-minute rule).
    var token: APNSProviderToken?
    var tokenSetAt = NIODeadline.distantPast
    /// `bearer <token>`, built once per token generation.
    private var authorizationValue = ""
    private var authorizationGeneration = 0

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
        guard peer.receivedSettings, !isGoingAway, !isClosed, !isRetired else { return 0 }
        // Leave room below the largest stream id; past it the connection must be replaced.
        guard nextStreamID < Int32.max - 2 else { return 0 }
        return max(0, min(peer.remoteStreamLimit, ownStreamLimit) - inFlight.count)
    }

    /// Whether new requests may be written here (now or once SETTINGS arrive).
    var acceptsNewStreams: Bool { !isGoingAway && !isClosed && !isRetired && nextStreamID < Int32.max - 2 }

    var inFlightCount: Int { inFlight.count }

    /// Whether the flow-control windows let this request's body go out whole right now.
    func canSend(_ request: APNSPendingRequest) -> Bool {
        peer.mayOpen(bodySize: request.payload.readableBytes, bodiesWaiting: !waitingBodies.isEmpty)
    }

    // MARK: Writing

    /// Encodes one request on a new stream into the pending output; the caller checked
    /// `availableStreams` and `canSend`, and calls `flush()` after the batch.
    func write(_ request: APNSPendingRequest) {
        guard context != nil, let token else { return }
        if authorizationGeneration != token.generation {
            authorizationValue = "bearer " + token.value
            authorizationGeneration = token.generation
        }
        let streamID = nextStreamID
        nextStreamID += 2
        let notification = request.notification
        var headers = HPACKHeaders()
        headers.reserveCapacity(12)
        headers.add(name: ":method", value: "POST")
        headers.add(name: ":scheme", value: "https")
        headers.add(name: ":authority", value: authority)
        headers.add(name: ":path", value: notification.path, indexing: .nonIndexable)
        headers.add(name: "authorization", value: authorizationValue)
        headers.add(name: "apns-push-type", value: notification.pushType.rawValue)
        headers.add(name: "apns-topic", value: notification.topic)
        headers.add(name: "apns-priority", value: String(notification.priority.rawValue))
        headers.add(name: "apns-id", value: notification.apnsID.lowercasedString, indexing: .nonIndexable)
        if let expiration = notification.expiration {
            headers.add(name: "apns-expiration", value: String(expiration), indexing: .nonIndexable)
        }
        if let collapseID = notification.collapseID {
            headers.add(name: "apns-collapse-id", value: collapseID, indexing: .nonIndexable)
        }
        headers.add(name: "content-length", value: String(request.payload.readableBytes), indexing: .nonIndexable)
        request.tokenGeneration = token.generation
        let now = NIODeadline.now()
        request.writtenAt = now
        request.deadline = now + requestDeadline

        do {
            try HTTP2Wire.writeHeaders(
                into: &output, encoder: &encoder, headers: headers, streamID: streamID, endStream: false,
                maximumFrameSize: peer.peerMaximumFrameSize)
        } catch {
            nextStreamID -= 2
            request.finish(status: nil, reason: .invalidNotification, disposition: .badRequest)
            return
        }
        if peer.fits(bodySize: request.payload.readableBytes) {
            HTTP2Wire.writeData(into: &output, streamID: streamID, data: request.payload, endStream: true)
            peer.connectionSendWindow -= request.payload.readableBytes
        } else {
            waitingBodies.start(request.payload, streamID: streamID, peer: &peer, output: &output)
        }
        inFlight[streamID] = InFlight(request: request)
    }

    /// Sends everything written since the last flush as one write.
    func flush() {
        guard let context, output.readableBytes > 0 else { return }
        context.writeAndFlush(wrapOutboundOut(output), promise: nil)
        output = context.channel.allocator.buffer(capacity: 16_384)
    }

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
        output = context.channel.allocator.buffer(capacity: 16_384)
        let interval = TimeAmount.milliseconds(min(1000, max(10, requestDeadline.nanoseconds / 1_000_000 / 4)))
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
        HTTP2ClientPeerState.writePreface(into: &output)
        flush()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = unwrapInboundIn(data)
        parser.append(&bytes)
        peer.didRead()
        do {
            while let frame = try parser.next() {
                try process(frame)
            }
        } catch {
            logger.warning("APNs connection protocol error; closing it", metadata: ["error": "\(error)"])
            HTTP2Wire.writeGoAway(into: &output, lastStreamID: 0, code: error.code)
            flush()
            context.close(promise: nil)
        }
    }

    private func process(_ frame: HTTP2ReadFrame) throws(HTTP2ConnectionError) {
        switch HTTP2Wire.FrameType(rawValue: frame.type) {
        case .headers?:
            let headers = try decoder.decodeBlock(of: frame)
            guard var entry = inFlight[frame.streamID] else { return }
            if let status = headers.first(name: ":status").flatMap({ Int($0) }) { entry.status = status }
            if frame.endStream {
                inFlight[frame.streamID] = nil
                waitingBodies.remove(frame.streamID)
                answer(entry)
            } else {
                inFlight[frame.streamID] = entry
            }
        case .data?:
            try peer.received(data: frame)
            // Taken out so the body is appended in place, not copied per frame.
            guard var entry = inFlight.removeValue(forKey: frame.streamID) else { return }
            guard try HTTP2ClientPeerState.appendResponseData(frame, to: &entry.body, streamReceived: &entry.received) else {
                // APNs answers with a few bytes of JSON: a huge body is not an answer to read.
                HTTP2Wire.writeResetStream(into: &output, streamID: frame.streamID, code: .cancel)
                waitingBodies.remove(frame.streamID)
                if let status = entry.status {
                    delegate?.handler(self, answered: entry.request, status: status, reason: nil, timestamp: nil)
                } else {
                    delegate?.handler(self, unanswered: [entry.request])
                }
                return
            }
            if frame.endStream {
                waitingBodies.remove(frame.streamID)
                answer(entry)
            } else {
                inFlight[frame.streamID] = entry
            }
        case .rstStream?:
            waitingBodies.remove(frame.streamID)
            var payload = frame.payload
            let code = payload.readInteger(as: UInt32.self) ?? 0
            if let entry = inFlight.removeValue(forKey: frame.streamID) {
                if let status = entry.status {
                    // The answer's headers came before the reset: that is an answer.
                    delegate?.handler(self, answered: entry.request, status: status, reason: nil, timestamp: nil)
                } else {
                    logger.debug("APNs stream reset", metadata: ["apns.http2.error": "\(code)"])
                    delegate?.handler(self, unanswered: [entry.request])
                }
            }
        case .settings?:
            try waitingBodies.growAll(by: try peer.apply(settings: frame, encoder: &encoder, output: &output))
        case .ping?:
            HTTP2ClientPeerState.answer(ping: frame, output: &output)
        case .goAway?:
            var payload = frame.payload
            let last = Int32(bitPattern: (payload.readInteger(as: UInt32.self) ?? 0) & 0x7fff_ffff)
            let code = payload.readInteger(as: UInt32.self) ?? 0
            isGoingAway = true
            var orphans: [APNSPendingRequest] = []
            for (streamID, entry) in inFlight where streamID > last {
                orphans.append(entry.request)
                inFlight[streamID] = nil
                waitingBodies.remove(streamID)
            }
            let reason = Self.reason(in: payload)
            logger.info(
                "APNs sent GOAWAY",
                metadata: [
                    "apns.http2.error": "\(code)", "apns.reason": "\(reason ?? "-")", "apns.resent": "\(orphans.count)",
                ])
            delegate?.handlerIsGoingAway(self, reason: reason)
            if !orphans.isEmpty { delegate?.handler(self, unanswered: orphans) }
        case .windowUpdate?:
            if let (streamID, increment) = try peer.apply(windowUpdate: frame) { try waitingBodies.grow(streamID, by: increment) }
        case .pushPromise?:
            throw HTTP2ConnectionError(.protocolError, "PUSH_PROMISE although push is disabled")
        default:
            break
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        peer.acknowledgeReceived(into: &output)
        waitingBodies.resume(peer: &peer, output: &output)
        delegate?.handlerHasCapacity(self)
        flush()
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
                timestamp = APNSTimestamp.sane(seconds: milliseconds.doubleValue / 1000)
            }
        }
        delegate?.handler(self, answered: entry.request, status: status, reason: reason, timestamp: timestamp)
    }

    private func closeIfDrained() {
        if isGoingAway || isRetired, inFlight.isEmpty, !isClosed {
            isClosed = true
            flush()
            context?.close(promise: nil)
        }
    }

    private func sweep() {
        guard !isClosed, let context else { return }
        let now = NIODeadline.now()
        var expired: [Int32] = []
        for (streamID, entry) in inFlight where entry.request.deadline <= now {
            expired.append(streamID)
        }
        for streamID in expired {
            guard let entry = inFlight.removeValue(forKey: streamID) else { continue }
            waitingBodies.remove(streamID)
            HTTP2Wire.writeResetStream(into: &output, streamID: streamID, code: .cancel)
            delegate?.handler(self, timedOut: entry.request)
        }
        guard peer.keepAlive(now: now, idle: idlePingInterval, timeout: pingTimeout, output: &output) else {
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
