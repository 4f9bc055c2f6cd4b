package import NIOCore
package import NIOHPACK

/// The connection-level half of an HTTP/2 client that every client handler here shares: the
/// preface it sends, the server's SETTINGS, both send windows, the receive window it grants
/// back, PING answers and the idle keep-alive. Stream bookkeeping stays with each handler.
package struct HTTP2ClientPeerState {
    /// Our receive windows: 16 MiB for the connection, 1 MiB per stream.
    package static let connectionReceiveWindow = 16 << 20
    package static let streamReceiveWindow: UInt32 = 1 << 20

    package private(set) var receivedSettings = false
    /// SETTINGS_MAX_CONCURRENT_STREAMS as last announced (capped), 0 before the first SETTINGS.
    package private(set) var remoteStreamLimit = 0
    /// What we may still send on the connection, and the window each new stream starts with.
    package var connectionSendWindow = HTTP2Wire.defaultWindow
    package private(set) var streamInitialSendWindow = HTTP2Wire.defaultWindow
    package private(set) var peerMaximumFrameSize = HTTP2Wire.defaultMaximumFrameSize
    private var unacknowledgedBytes = 0
    /// What the server may still send on the connection before our next WINDOW_UPDATE.
    private var receiveWindowRemaining = connectionReceiveWindow
    /// The largest response body kept; a larger one resets its stream.
    package static let maximumResponseBody = 64 << 10
    private var lastRead = NIODeadline.now()
    private var pingSentAt: NIODeadline?
    private let streamLimitCap: Int

    /// - Parameter streamLimitCap: the most streams we use however many the server allows.
    package init(streamLimitCap: Int = Int(Int32.max)) { self.streamLimitCap = streamLimitCap }

    /// Client preface, our SETTINGS (no push, 1 MiB stream windows, no server streams) and a
    /// connection window opened wide at once so answers never wait for WINDOW_UPDATE.
    package static func writePreface(into output: inout ByteBuffer) {
        output.writeBytes(HTTP2Wire.clientPreface)
        HTTP2Wire.writeSettings(
            into: &output,
            [(.enablePush, 0), (.initialWindowSize, streamReceiveWindow), (.maximumConcurrentStreams, 0)])
        HTTP2Wire.writeWindowUpdate(
            into: &output, streamID: 0, increment: connectionReceiveWindow - HTTP2Wire.defaultWindow)
    }

    /// Whether a body of this size may go out whole on a new stream now.
    package func fits(bodySize size: Int) -> Bool {
        size <= connectionSendWindow && size <= streamInitialSendWindow && size <= peerMaximumFrameSize
    }

    /// Whether a new stream may open for a body of this size: at once when it goes out whole;
    /// otherwise only when no other stream is waiting for window (`bodiesWaiting`) and some
    /// connection window is left, and it is then sent as WINDOW_UPDATEs allow.
    package func mayOpen(bodySize size: Int, bodiesWaiting: Bool) -> Bool {
        fits(bodySize: size) || (!bodiesWaiting && connectionSendWindow > 0)
    }

    /// Writes as much of a request body as the stream's and the connection's windows allow, in
    /// frames the server accepts, END_STREAM on the last; `true` once it is all out.
    package mutating func writeBody(_ body: inout HTTP2OutgoingBody, streamID: Int32, into output: inout ByteBuffer)
        -> Bool
    {
        if body.remaining.readableBytes == 0 {
            guard !body.finished else { return true }
            HTTP2Wire.writeData(into: &output, streamID: streamID, data: body.remaining, endStream: true)
            body.finished = true
            return true
        }
        while body.remaining.readableBytes > 0 {
            let size = min(body.remaining.readableBytes, body.window, connectionSendWindow, peerMaximumFrameSize)
            guard size > 0 else { return false }
            let chunk = body.remaining.readSlice(length: size)!
            let last = body.remaining.readableBytes == 0
            HTTP2Wire.writeData(into: &output, streamID: streamID, data: chunk, endStream: last)
            body.window -= size
            connectionSendWindow -= size
            if last { body.finished = true }
        }
        return true
    }

    /// Bytes arrived at `now`: the connection is alive.
    package mutating func didRead(now: NIODeadline = .now()) {
        lastRead = now
        pingSentAt = nil
    }

    /// Applies a SETTINGS frame (RFC 9113 §6.5: every value checked) and acknowledges it.
    /// Returns how much the initial stream window changed: open streams' windows move by it.
    @discardableResult
    package mutating func apply(
        settings frame: HTTP2ReadFrame, encoder: inout HPACKEncoder, output: inout ByteBuffer
    ) throws(HTTP2ConnectionError) -> Int {
        guard frame.streamID == 0 else { throw HTTP2ConnectionError(.protocolError, "SETTINGS on a stream") }
        guard frame.payload.readableBytes % 6 == 0 else {
            throw HTTP2ConnectionError(.frameSizeError, "SETTINGS payload not a multiple of 6 bytes")
        }
        guard !frame.isAcknowledgement else {
            guard frame.payload.readableBytes == 0 else {
                throw HTTP2ConnectionError(.frameSizeError, "SETTINGS ACK with a payload")
            }
            return 0
        }
        if !receivedSettings {
            receivedSettings = true
            remoteStreamLimit = streamLimitCap
        }
        var delta = 0
        for (identifier, value) in frame.settings {
            switch HTTP2Wire.Setting(rawValue: identifier) {
            case .maximumConcurrentStreams?: remoteStreamLimit = min(Int(value), streamLimitCap)
            case .initialWindowSize?:
                guard value <= UInt32(Int32.max) else {
                    throw HTTP2ConnectionError(.flowControlError, "initial window over 2^31-1")
                }
                delta += Int(value) - streamInitialSendWindow
                streamInitialSendWindow = Int(value)
            case .maximumFrameSize?:
                guard (HTTP2Wire.defaultMaximumFrameSize...16_777_215).contains(Int(value)) else {
                    throw HTTP2ConnectionError(
                        .protocolError, "SETTINGS_MAX_FRAME_SIZE \(value) outside 16384…16777215")
                }
                peerMaximumFrameSize = Int(value)
            case .enablePush?:
                guard value <= 1 else {
                    throw HTTP2ConnectionError(.protocolError, "SETTINGS_ENABLE_PUSH \(value) is not 0 or 1")
                }
            case .headerTableSize?:
                try? encoder.setDynamicTableSize(min(Int(value), HPACKEncoder.defaultDynamicTableSize))
            default: break
            }
        }
        HTTP2Wire.writeSettingsAcknowledgement(into: &output)
        return delta
    }

    /// Applies a WINDOW_UPDATE. The connection's is applied here; a stream's is returned
    /// (stream id, increment) for the handler to add to that stream's window.
    package mutating func apply(windowUpdate frame: HTTP2ReadFrame) throws(HTTP2ConnectionError) -> (
        streamID: Int32, increment: Int
    )? {
        var payload = frame.payload
        guard payload.readableBytes == 4, let raw = payload.readInteger(as: UInt32.self) else {
            throw HTTP2ConnectionError(.frameSizeError, "WINDOW_UPDATE of \(frame.payload.readableBytes) bytes")
        }
        let increment = Int(raw & 0x7fff_ffff)
        guard increment > 0 else { throw HTTP2ConnectionError(.protocolError, "WINDOW_UPDATE of 0") }
        guard frame.streamID == 0 else { return (frame.streamID, increment) }
        connectionSendWindow += increment
        guard connectionSendWindow <= Int(Int32.max) else {
            throw HTTP2ConnectionError(.flowControlError, "connection window over 2^31-1")
        }
        return nil
    }

    /// Answers a PING.
    package static func answer(ping frame: HTTP2ReadFrame, output: inout ByteBuffer) {
        var payload = frame.payload
        let data = payload.readInteger(as: UInt64.self) ?? 0
        if !frame.isAcknowledgement { HTTP2Wire.writePing(into: &output, data: data, acknowledgement: true) }
    }

    /// Counts received DATA against our connection window: more than we granted is a
    /// FLOW_CONTROL_ERROR (RFC 9113 §6.9.1), not a buffer that grows without end.
    package mutating func received(data frame: HTTP2ReadFrame) throws(HTTP2ConnectionError) {
        receiveWindowRemaining -= frame.flowControlledLength
        guard receiveWindowRemaining >= 0 else {
            throw HTTP2ConnectionError(.flowControlError, "DATA beyond the connection window we granted")
        }
        unacknowledgedBytes += frame.flowControlledLength
    }

    /// A stream's DATA as the client keeps it: counted against the stream window we granted
    /// (beyond it, a FLOW_CONTROL_ERROR) and appended to `body` in place, unless the body would
    /// pass ``maximumResponseBody``: then `false`, and the caller resets the stream.
    package static func appendResponseData(
        _ frame: HTTP2ReadFrame, to body: inout ByteBuffer?, streamReceived: inout Int
    ) throws(HTTP2ConnectionError) -> Bool {
        streamReceived += frame.flowControlledLength
        guard streamReceived <= Int(streamReceiveWindow) else {
            throw HTTP2ConnectionError(.flowControlError, "DATA beyond the stream window we granted")
        }
        var data = frame.payload
        guard (body?.readableBytes ?? 0) + data.readableBytes <= maximumResponseBody else { return false }
        if body == nil { body = ByteBuffer(buffer: data) } else { body!.writeBuffer(&data) }
        return true
    }

    /// After a read: gives the received bytes back once a MiB has accumulated.
    package mutating func acknowledgeReceived(into output: inout ByteBuffer) {
        if unacknowledgedBytes >= 1 << 20 {
            HTTP2Wire.writeWindowUpdate(into: &output, streamID: 0, increment: unacknowledgedBytes)
            receiveWindowRemaining += unacknowledgedBytes
            unacknowledgedBytes = 0
        }
    }

    /// Keep-alive: PING after `idle` without reads; `false` when a PING went unanswered for
    /// `timeout` (the connection is dead and should be closed).
    package mutating func keepAlive(now: NIODeadline, idle: TimeAmount, timeout: TimeAmount, output: inout ByteBuffer)
        -> Bool
    {
        if let pingSentAt {
            return now - pingSentAt <= timeout
        }
        if now - lastRead > idle {
            pingSentAt = now
            HTTP2Wire.writePing(into: &output, data: 0x4845_5241_4c44, acknowledgement: false)
        }
        return true
    }
}

/// A request body on an open stream, sent as the flow-control windows allow.
package struct HTTP2OutgoingBody {
    /// What is still to be sent.
    package var remaining: ByteBuffer
    /// The stream's send window.
    package var window: Int
    /// Whether END_STREAM went out.
    package var finished = false

    package init(_ body: ByteBuffer, window: Int) {
        remaining = body
        self.window = window
    }

    /// Adds a WINDOW_UPDATE's increment or a SETTINGS change; over 2^31-1 is a FLOW_CONTROL_ERROR.
    package mutating func grow(by increment: Int) throws(HTTP2ConnectionError) {
        window += increment
        guard window <= Int(Int32.max) else {
            throw HTTP2ConnectionError(.flowControlError, "stream window over 2^31-1")
        }
    }
}

/// The request bodies of open streams still waiting for flow-control window, by stream, and how
/// they move on: WINDOW_UPDATEs and SETTINGS grow their windows, `resume` sends what now fits,
/// oldest stream first. Empty unless a server's windows are smaller than a body.
package struct HTTP2WaitingBodies {
    private var bodies: [Int32: HTTP2OutgoingBody] = [:]

    package init() {}

    package var isEmpty: Bool { bodies.isEmpty }

    /// Writes what the windows allow of a new stream's body now; keeps the rest.
    package mutating func start(
        _ body: ByteBuffer, streamID: Int32, peer: inout HTTP2ClientPeerState, output: inout ByteBuffer
    ) {
        var outgoing = HTTP2OutgoingBody(body, window: peer.streamInitialSendWindow)
        if !peer.writeBody(&outgoing, streamID: streamID, into: &output) { bodies[streamID] = outgoing }
    }

    /// The stream is answered, reset or timed out: nothing more of it goes.
    package mutating func remove(_ streamID: Int32) {
        bodies[streamID] = nil
    }

    /// A stream's WINDOW_UPDATE.
    package mutating func grow(_ streamID: Int32, by increment: Int) throws(HTTP2ConnectionError) {
        try bodies[streamID]?.grow(by: increment)
    }

    /// A SETTINGS change of the initial stream window moves every open stream's window.
    package mutating func growAll(by delta: Int) throws(HTTP2ConnectionError) {
        guard delta != 0 else { return }
        for streamID in bodies.keys { try bodies[streamID]!.grow(by: delta) }
    }

    /// Sends more of the waiting bodies as the windows now allow, oldest stream first.
    package mutating func resume(peer: inout HTTP2ClientPeerState, output: inout ByteBuffer) {
        guard !bodies.isEmpty else { return }
        for streamID in bodies.keys.sorted() {
            if peer.writeBody(&bodies[streamID]!, streamID: streamID, into: &output) {
                bodies[streamID] = nil
            } else if peer.connectionSendWindow <= 0 {
                return
            }
        }
    }
}
