public import NIOCore
public import NIOHPACK
import Synchronization

/// What a generic HTTP/2 request ends with.
public struct HTTP2Response: Sendable {
    public var status: Int
    public var headers: HPACKHeaders
    public var body: ByteBuffer?

    /// The first value of a response header.
    public func header(_ name: String) -> String? { headers.first(name: name) }
}

/// Why a request got no answer. `unanswered` requests never reached the server's application
/// (refused stream, above a GOAWAY's last stream, connection lost before any answer): they may
/// be sent again as they are.
public enum HTTP2RequestFailure: Error, Sendable, Hashable {
    case unanswered
    case timedOut
    case invalidRequest
    /// The answer's body was over 64 KiB: its stream was reset.
    case responseTooLarge
}

/// Whether a connection still takes new requests, readable from any thread.
public final class HTTP2ConnectionStatus: Sendable {
    private let usable = Atomic<Bool>(true)

    public init() {}

    public var isUsable: Bool { usable.load(ordering: .relaxed) }
    func markUnusable() { usable.store(false, ordering: .relaxed) }
}

/// A general HTTP/2 client on one TLS byte stream (for FCM and OAuth2; APNs has its own tuned
/// handler): requests wait until the server's stream limit and flow-control windows let them
/// out, every request has a deadline, idle connections are PINGed, and answers, refusals and
/// GOAWAY are reported per request through its promise. All calls on the channel's event loop.
public final class HTTP2ClientHandler: ChannelDuplexHandler {
    public typealias InboundIn = ByteBuffer
    public typealias OutboundIn = Never
    public typealias OutboundOut = ByteBuffer

    private struct Pending {
        var headers: HPACKHeaders
        var body: ByteBuffer
        var deadline: NIODeadline
        var promise: EventLoopPromise<HTTP2Response>
    }

    private struct InFlight {
        var pending: Pending
        var status: Int?
        var headers = HPACKHeaders()
        var body: ByteBuffer?
        /// DATA bytes received on the stream (padding included).
        var received = 0
    }

    public let status: HTTP2ConnectionStatus
    private let authority: String
    private let idlePingInterval: TimeAmount
    private let pingTimeout: TimeAmount
    private var context: ChannelHandlerContext?
    private var parser = HTTP2FrameParser()
    private var encoder = HPACKEncoder(allocator: ByteBufferAllocator(), useHuffmanEncoding: false)
    private var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
    private var output = ByteBuffer()
    private var waiting = CircularBuffer<Pending>()
    private var inFlight: [Int32: InFlight] = [:]
    private var nextStreamID: Int32 = 1
    private var peer = HTTP2ClientPeerState(streamLimitCap: 1000)
    private var isGoingAway = false
    private var isClosed = false
    private var sentPreface = false
    private var flushScheduled = false
    private var sweepTask: RepeatedTask?

    public init(
        authority: String, status: HTTP2ConnectionStatus = HTTP2ConnectionStatus(), idlePingInterval: TimeAmount = .seconds(60),
        pingTimeout: TimeAmount = .seconds(10)
    ) {
        self.authority = authority
        self.status = status
        self.idlePingInterval = idlePingInterval
        self.pingTimeout = pingTimeout
    }

    /// Sends a request once there is room; `headers` are the regular (non-pseudo) headers.
    public func submit(
        method: String, path: String, headers: HPACKHeaders, body: ByteBuffer, deadline: NIODeadline,
        promise: EventLoopPromise<HTTP2Response>
    ) {
        guard !isClosed, !isGoingAway else {
            promise.fail(HTTP2RequestFailure.unanswered)
            return
        }
        var all = HPACKHeaders()
        all.reserveCapacity(headers.count + 5)
        all.add(name: ":method", value: method)
        all.add(name: ":scheme", value: "https")
        all.add(name: ":authority", value: authority)
        all.add(name: ":path", value: path, indexing: .nonIndexable)
        all.add(contentsOf: headers)
        all.add(name: "content-length", value: String(body.readableBytes), indexing: .nonIndexable)
        waiting.append(Pending(headers: all, body: body, deadline: deadline, promise: promise))
        drain()
        scheduleFlush()
    }

    /// Flushes after the submissions already queued on the event loop have been written, so a
    /// burst of requests goes out in one TLS record and one `write`, not one each.
    private func scheduleFlush() {
        guard !flushScheduled, let context else { return }
        flushScheduled = true
        context.eventLoop.assumeIsolated().execute {
            self.flushScheduled = false
            self.flush()
        }
    }

    private var availableStreams: Int {
        guard peer.receivedSettings, !isGoingAway, !isClosed, nextStreamID < Int32.max - 2 else { return 0 }
        return max(0, peer.remoteStreamLimit - inFlight.count)
    }

    /// Request bodies that wait for a WINDOW_UPDATE.
    private var waitingBodies = HTTP2WaitingBodies()

    private func drain() {
        waitingBodies.resume(peer: &peer, output: &output)
        while availableStreams > 0, let next = waiting.first {
            let size = next.body.readableBytes
            guard peer.mayOpen(bodySize: size, bodiesWaiting: !waitingBodies.isEmpty) else { return }
            let pending = waiting.removeFirst()
            let streamID = nextStreamID
            do {
                try HTTP2Wire.writeHeaders(
                    into: &output, encoder: &encoder, headers: pending.headers, streamID: streamID, endStream: false,
                    maximumFrameSize: peer.peerMaximumFrameSize)
            } catch {
                pending.promise.fail(HTTP2RequestFailure.invalidRequest)
                continue
            }
            nextStreamID += 2
            if peer.fits(bodySize: size) {
                HTTP2Wire.writeData(into: &output, streamID: streamID, data: pending.body, endStream: true)
                peer.connectionSendWindow -= size
            } else {
                // Larger than a window: what fits now, the rest as the server opens its windows.
                waitingBodies.start(pending.body, streamID: streamID, peer: &peer, output: &output)
            }
            inFlight[streamID] = InFlight(pending: pending)
        }
    }

    private func flush() {
        guard let context, output.readableBytes > 0 else { return }
        context.writeAndFlush(wrapOutboundOut(output), promise: nil)
        output = context.channel.allocator.buffer(capacity: 4096)
    }

    /// Stops taking requests and closes once the streams in flight are answered.
    public func retire() {
        isGoingAway = true
        status.markUnusable()
        failWaiting()
        closeIfDrained()
    }

    // MARK: Channel events

    public func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        output = context.channel.allocator.buffer(capacity: 4096)
        let bound = NIOLoopBound(self, eventLoop: context.eventLoop)
        sweepTask = context.eventLoop.scheduleRepeatedTask(initialDelay: .milliseconds(100), delay: .milliseconds(100)) { _ in
            bound.value.sweep()
        }
        if context.channel.isActive { sendPreface() }
    }

    public func handlerRemoved(context: ChannelHandlerContext) {
        sweepTask?.cancel()
        sweepTask = nil
        self.context = nil
    }

    public func channelActive(context: ChannelHandlerContext) {
        sendPreface()
        context.fireChannelActive()
    }

    private func sendPreface() {
        guard !sentPreface else { return }
        sentPreface = true
        HTTP2ClientPeerState.writePreface(into: &output)
        flush()
    }

    public func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = unwrapInboundIn(data)
        parser.append(&bytes)
        peer.didRead()
        do {
            while let frame = try parser.next() { try process(frame) }
        } catch {
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
            if let status = headers.first(name: ":status").flatMap({ Int($0) }) {
                entry.status = status
                entry.headers = headers
            }
            finishOrKeep(entry, frame)
        case .data?:
            try peer.received(data: frame)
            // Taken out so the body is appended in place, not copied per frame.
            guard var entry = inFlight.removeValue(forKey: frame.streamID) else { return }
            guard try HTTP2ClientPeerState.appendResponseData(frame, to: &entry.body, streamReceived: &entry.received) else {
                HTTP2Wire.writeResetStream(into: &output, streamID: frame.streamID, code: .cancel)
                waitingBodies.remove(frame.streamID)
                entry.pending.promise.fail(HTTP2RequestFailure.responseTooLarge)
                return
            }
            finishOrKeep(entry, frame)
        case .rstStream?:
            waitingBodies.remove(frame.streamID)
            if let entry = inFlight.removeValue(forKey: frame.streamID) {
                if let status = entry.status {
                    entry.pending.promise.succeed(HTTP2Response(status: status, headers: entry.headers, body: entry.body))
                } else {
                    entry.pending.promise.fail(HTTP2RequestFailure.unanswered)
                }
            }
        case .settings?:
            try waitingBodies.growAll(by: try peer.apply(settings: frame, encoder: &encoder, output: &output))
        case .ping?:
            HTTP2ClientPeerState.answer(ping: frame, output: &output)
        case .goAway?:
            var payload = frame.payload
            let last = Int32(bitPattern: (payload.readInteger(as: UInt32.self) ?? 0) & 0x7fff_ffff)
            isGoingAway = true
            status.markUnusable()
            for (streamID, entry) in inFlight where streamID > last {
                inFlight[streamID] = nil
                waitingBodies.remove(streamID)
                entry.pending.promise.fail(HTTP2RequestFailure.unanswered)
            }
            failWaiting()
        case .windowUpdate?:
            if let (streamID, increment) = try peer.apply(windowUpdate: frame) { try waitingBodies.grow(streamID, by: increment) }
        case .pushPromise?:
            throw HTTP2ConnectionError(.protocolError, "PUSH_PROMISE although push is disabled")
        default:
            break
        }
    }

    private func finishOrKeep(_ entry: InFlight, _ frame: HTTP2ReadFrame) {
        guard frame.endStream else {
            inFlight[frame.streamID] = entry
            return
        }
        inFlight[frame.streamID] = nil
        waitingBodies.remove(frame.streamID)
        entry.pending.promise.succeed(HTTP2Response(status: entry.status ?? 0, headers: entry.headers, body: entry.body))
    }

    public func channelReadComplete(context: ChannelHandlerContext) {
        peer.acknowledgeReceived(into: &output)
        drain()
        flush()
        closeIfDrained()
    }

    public func channelInactive(context: ChannelHandlerContext) {
        isClosed = true
        status.markUnusable()
        let orphans = inFlight.values.map(\.pending)
        inFlight.removeAll()
        for pending in orphans { pending.promise.fail(HTTP2RequestFailure.unanswered) }
        failWaiting()
        sweepTask?.cancel()
        sweepTask = nil
        context.fireChannelInactive()
    }

    public func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    private func failWaiting() {
        while let pending = waiting.popFirst() { pending.promise.fail(HTTP2RequestFailure.unanswered) }
    }

    private func closeIfDrained() {
        if isGoingAway, inFlight.isEmpty, !isClosed {
            isClosed = true
            flush()
            context?.close(promise: nil)
        }
    }

    private func sweep() {
        guard !isClosed, let context else { return }
        let now = NIODeadline.now()
        for (streamID, entry) in inFlight where entry.pending.deadline <= now {
            inFlight[streamID] = nil
            waitingBodies.remove(streamID)
            HTTP2Wire.writeResetStream(into: &output, streamID: streamID, code: .cancel)
            entry.pending.promise.fail(HTTP2RequestFailure.timedOut)
        }
        while let first = waiting.first, first.deadline <= now {
            waiting.removeFirst().promise.fail(HTTP2RequestFailure.timedOut)
        }
        guard peer.keepAlive(now: now, idle: idlePingInterval, timeout: pingTimeout, output: &output) else {
            context.close(promise: nil)
            return
        }
        flush()
        closeIfDrained()
    }
}
