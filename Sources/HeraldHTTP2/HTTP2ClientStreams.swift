package import NIOCore
package import NIOHPACK

/// What a frame from the server meant for the requests of an ``HTTP2ClientStreams``.
package enum HTTP2StreamEvent {
    package typealias Request = AnyObject

    /// The server answered (END_STREAM, or a reset after the answer's HEADERS): its status, its
    /// headers when the table keeps them, and its body.
    case answered(Request, status: Int, headers: HPACKHeaders, body: ByteBuffer?)
    /// Reset before any answer: the request never reached the server's application.
    case unanswered(Request)
    /// The answer's body passed ``HTTP2ClientPeerState/maximumResponseBody``: its stream was
    /// reset; `status` if the answer's HEADERS had come.
    case responseTooLarge(Request, status: Int?)
    /// GOAWAY: no new streams. The requests above its last stream id were never processed.
    case goingAway(code: UInt32, debugData: ByteBuffer, unanswered: [Request])
}

/// One HTTP/2 client connection as a pure state machine: the streams in flight and their
/// requests, the connection-level state (``HTTP2ClientPeerState``), HPACK both ways, and the
/// bytes to write. It does no I/O and reads no clock: the owner feeds it frames and the time,
/// takes ``output`` to write (a batch of requests is encoded into one buffer and flushed once),
/// and acts on the events it returns. The APNs handler and the general handler (FCM, OAuth2)
/// are thin NIO shells over it.
package struct HTTP2ClientStreams {
    /// A request as the table holds it: the owner's object (one class per client, cast back
    /// with `unsafeDowncast`). Not generic on purpose: a generic table was not specialized
    /// across modules and cost the APNs client ~19% more CPU per notification.
    package typealias Request = AnyObject

    @usableFromInline
    struct Stream {
        @usableFromInline var request: Request
        @usableFromInline var deadline: NIODeadline
        @usableFromInline var status: Int?
        @usableFromInline var headers: HPACKHeaders
        @usableFromInline var body: ByteBuffer?
        /// DATA bytes received on the stream (padding included).
        @usableFromInline var received: Int

        @inlinable
        init(request: Request, deadline: NIODeadline) {
            self.request = request
            self.deadline = deadline
            status = nil
            headers = HPACKHeaders()
            body = nil
            received = 0
        }
    }

    /// Frames written and not yet taken: the owner writes them and puts an empty buffer back.
    package var output: ByteBuffer
    package private(set) var peer: HTTP2ClientPeerState
    @usableFromInline var streams: [Int32: Stream] = [:]
    @usableFromInline var waitingBodies = HTTP2WaitingBodies()
    @usableFromInline var nextStreamID: Int32 = 1
    @usableFromInline var encoder = HPACKEncoder(allocator: ByteBufferAllocator(), useHuffmanEncoding: false)
    @usableFromInline var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
    /// Encoded blocks of requests' shared header fields (`open(_:requestHeaders:…)`).
    @usableFromInline var templates = HTTP2HeaderTemplates()
    /// The server sent GOAWAY, or the owner retired the connection: no new streams.
    package private(set) var isGoingAway = false
    /// Whether answers keep all their headers (the general client) or only `:status` (APNs).
    @usableFromInline let keepsResponseHeaders: Bool

    /// - Parameters:
    ///   - streamLimitCap: the most streams open at once, however many the server allows.
    ///   - keepsResponseHeaders: keep every header of an answer, not just its status.
    package init(streamLimitCap: Int, keepsResponseHeaders: Bool, output: ByteBuffer = ByteBuffer()) {
        peer = HTTP2ClientPeerState(streamLimitCap: streamLimitCap)
        self.keepsResponseHeaders = keepsResponseHeaders
        self.output = output
    }

    // MARK: Opening streams

    /// Streams open now.
    @inlinable package var openStreams: Int { streams.count }

    /// Whether stream ids are left (past the largest the connection must be replaced).
    @inlinable package var hasStreamIDs: Bool { nextStreamID < Int32.max - 2 }

    /// Streams that may open now: after the server's SETTINGS, below its limit, not going away.
    @inlinable package var availableStreams: Int {
        guard peer.receivedSettings, !isGoingAway, hasStreamIDs else { return 0 }
        return max(0, peer.remoteStreamLimit - streams.count)
    }

    /// Whether a request with a body of this size may open a stream now, as far as the
    /// flow-control windows go (bodies larger than a window wait their turn, one at a time).
    @inlinable package func mayOpen(bodySize: Int) -> Bool {
        peer.mayOpen(bodySize: bodySize, bodiesWaiting: !waitingBodies.isEmpty)
    }

    /// The client preface and our SETTINGS, first on a new connection.
    package mutating func writePreface() {
        HTTP2ClientPeerState.writePreface(into: &output)
    }

    /// Opens a stream for `request`: HEADERS (the pseudo-headers included in `headers`) and as
    /// much of `body` as the windows allow, the rest as WINDOW_UPDATEs come. The caller checked
    /// ``availableStreams`` and ``mayOpen(bodySize:)``. `false` when the headers cannot be
    /// encoded: nothing was written.
    @inlinable
    package mutating func open(_ request: Request, headers: HPACKHeaders, body: ByteBuffer, deadline: NIODeadline)
        -> Bool
    {
        let streamID = nextStreamID
        do {
            try HTTP2Wire.writeHeaders(
                into: &output, encoder: &encoder, headers: headers, streamID: streamID, endStream: false,
                maximumFrameSize: peer.peerMaximumFrameSize)
        } catch {
            return false
        }
        return opened(request, streamID: streamID, body: body, deadline: deadline)
    }

    /// `open` for headers split into shared and own fields: the shared ones' encoding is
    /// reused while the peer's table holds them (`HTTP2HeaderTemplates`).
    @inlinable
    package mutating func open(
        _ request: Request, requestHeaders: HTTP2RequestHeaders, body: ByteBuffer, deadline: NIODeadline
    ) -> Bool {
        let streamID = nextStreamID
        do {
            try HTTP2HeaderTemplates.writeHeaders(
                requestHeaders, templates: &templates, encoder: &encoder, into: &output, streamID: streamID,
                maximumFrameSize: peer.peerMaximumFrameSize)
        } catch {
            return false
        }
        return opened(request, streamID: streamID, body: body, deadline: deadline)
    }

    /// After a request's HEADERS: as much of its body as the windows allow, and its stream.
    @inlinable
    mutating func opened(_ request: Request, streamID: Int32, body: ByteBuffer, deadline: NIODeadline) -> Bool {
        nextStreamID += 2
        if peer.fits(bodySize: body.readableBytes) {
            HTTP2Wire.writeData(into: &output, streamID: streamID, data: body, endStream: true)
            peer.connectionSendWindow -= body.readableBytes
        } else {
            waitingBodies.start(body, streamID: streamID, peer: &peer, output: &output)
        }
        streams[streamID] = Stream(request: request, deadline: deadline)
        return true
    }

    // MARK: Reading

    /// Bytes arrived at `now`: the connection is alive (for the keep-alive PING).
    @inlinable package mutating func didRead(now: NIODeadline) {
        peer.didRead(now: now)
    }

    /// Applies one frame from the server; returns what it meant for a request, if anything.
    /// A thrown error is a connection error: the owner calls ``fail(with:)`` and closes.
    @inlinable
    package mutating func read(_ frame: HTTP2ReadFrame) throws(HTTP2ConnectionError) -> HTTP2StreamEvent? {
        switch HTTP2Wire.FrameType(rawValue: frame.type) {
        case .headers?:
            // Decoded even for a stream we no longer track: the HPACK table must stay in step.
            let headers = try decoder.decodeBlock(of: frame)
            guard var stream = streams[frame.streamID] else { return nil }
            // A later block with a status (after a 1xx) replaces it; trailers carry none.
            if let status = headers.first(name: ":status").flatMap({ Int($0) }) {
                stream.status = status
                if keepsResponseHeaders { stream.headers = headers }
            }
            return finishOrKeep(stream, frame)
        case .data?:
            try peer.received(data: frame)
            // Taken out so the body is appended in place, not copied per frame.
            guard var stream = streams.removeValue(forKey: frame.streamID) else { return nil }
            guard try HTTP2ClientPeerState.appendResponseData(frame, to: &stream.body, streamReceived: &stream.received)
            else {
                HTTP2Wire.writeResetStream(into: &output, streamID: frame.streamID, code: .cancel)
                waitingBodies.remove(frame.streamID)
                return .responseTooLarge(stream.request, status: stream.status)
            }
            return finishOrKeep(stream, frame)
        case .rstStream?:
            waitingBodies.remove(frame.streamID)
            guard let stream = streams.removeValue(forKey: frame.streamID) else { return nil }
            // An answer's HEADERS before the reset are an answer.
            if let status = stream.status {
                return .answered(stream.request, status: status, headers: stream.headers, body: stream.body)
            }
            return .unanswered(stream.request)
        case .settings?:
            // The peer may have resized its table: encoded blocks are made anew.
            templates.reset()
            try waitingBodies.growAll(by: try peer.apply(settings: frame, encoder: &encoder, output: &output))
            return nil
        case .ping?:
            HTTP2ClientPeerState.answer(ping: frame, output: &output)
            return nil
        case .goAway?:
            var payload = frame.payload
            let last = Int32(bitPattern: (payload.readInteger(as: UInt32.self) ?? 0) & 0x7fff_ffff)
            let code = payload.readInteger(as: UInt32.self) ?? 0
            isGoingAway = true
            var orphans: [Request] = []
            for streamID in streams.keys.sorted() where streamID > last {
                orphans.append(streams.removeValue(forKey: streamID)!.request)
                waitingBodies.remove(streamID)
            }
            return .goingAway(code: code, debugData: payload, unanswered: orphans)
        case .windowUpdate?:
            if let (streamID, increment) = try peer.apply(windowUpdate: frame) {
                try waitingBodies.grow(streamID, by: increment)
            }
            return nil
        case .pushPromise?:
            throw HTTP2ConnectionError(.protocolError, "PUSH_PROMISE although push is disabled")
        default:
            return nil
        }
    }

    @inlinable
    mutating func finishOrKeep(_ stream: Stream, _ frame: HTTP2ReadFrame) -> HTTP2StreamEvent? {
        guard frame.endStream else {
            streams[frame.streamID] = stream
            return nil
        }
        streams[frame.streamID] = nil
        waitingBodies.remove(frame.streamID)
        return .answered(stream.request, status: stream.status ?? 0, headers: stream.headers, body: stream.body)
    }

    /// After the frames of one read: gives received bytes back to the server's window and
    /// sends more of the bodies waiting for window.
    package mutating func readComplete() {
        peer.acknowledgeReceived(into: &output)
        waitingBodies.resume(peer: &peer, output: &output)
    }

    // MARK: Time, retiring, closing

    /// The requests whose deadline is at or before `now`: their streams are reset and forgotten
    /// (a late answer is ignored). Oldest stream first.
    package mutating func expire(now: NIODeadline) -> [Request] {
        var expired: [Request] = []
        for streamID in streams.keys.sorted() where streams[streamID]!.deadline <= now {
            expired.append(streams.removeValue(forKey: streamID)!.request)
            waitingBodies.remove(streamID)
            HTTP2Wire.writeResetStream(into: &output, streamID: streamID, code: .cancel)
        }
        return expired
    }

    /// Keep-alive at `now`: a PING after `idle` without reads; `false` when a PING went
    /// unanswered for `timeout` (the connection is dead: close it).
    package mutating func keepAlive(now: NIODeadline, idle: TimeAmount, timeout: TimeAmount) -> Bool {
        peer.keepAlive(now: now, idle: idle, timeout: timeout, output: &output)
    }

    /// No new streams from now on; those in flight are still answered.
    package mutating func retire() {
        isGoingAway = true
    }

    /// Whether a connection that is going away has nothing left in flight (it may close).
    package var isDrained: Bool { isGoingAway && streams.isEmpty }

    /// A connection error of ours: GOAWAY with its code; the owner closes the connection.
    package mutating func fail(with error: HTTP2ConnectionError) {
        HTTP2Wire.writeGoAway(into: &output, lastStreamID: 0, code: error.code)
        isGoingAway = true
    }

    /// The connection closed: every stream still open is unanswered, oldest first.
    package mutating func closed() -> [Request] {
        isGoingAway = true
        let orphans = streams.keys.sorted().map { streams[$0]!.request }
        streams.removeAll()
        waitingBodies = HTTP2WaitingBodies()
        return orphans
    }
}
