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
            into: &output, [(.enablePush, 0), (.initialWindowSize, streamReceiveWindow), (.maximumConcurrentStreams, 0)])
        HTTP2Wire.writeWindowUpdate(into: &output, streamID: 0, increment: connectionReceiveWindow - HTTP2Wire.defaultWindow)
    }

    /// Whether a body of this size may go out whole on a new stream now.
    package func fits(bodySize size: Int) -> Bool {
        size <= connectionSendWindow && size <= streamInitialSendWindow && size <= peerMaximumFrameSize
    }

    /// Bytes arrived: the connection is alive.
    package mutating func didRead() {
        lastRead = .now()
        pingSentAt = nil
    }

    /// Applies a SETTINGS frame and acknowledges it.
    package mutating func apply(
        settings frame: HTTP2ReadFrame, encoder: inout HPACKEncoder, output: inout ByteBuffer
    ) throws(HTTP2ConnectionError) {
        guard !frame.isAcknowledgement else { return }
        if !receivedSettings {
            receivedSettings = true
            remoteStreamLimit = streamLimitCap
        }
        for (identifier, value) in frame.settings {
            switch HTTP2Wire.Setting(rawValue: identifier) {
            case .maximumConcurrentStreams?: remoteStreamLimit = min(Int(value), streamLimitCap)
            case .initialWindowSize?:
                guard value <= UInt32(Int32.max) else { throw HTTP2ConnectionError(.flowControlError, "initial window over 2^31-1") }
                streamInitialSendWindow = Int(value)
            case .maximumFrameSize?: peerMaximumFrameSize = Int(value)
            case .headerTableSize?: try? encoder.setDynamicTableSize(min(Int(value), HPACKEncoder.defaultDynamicTableSize))
            default: break
            }
        }
        HTTP2Wire.writeSettingsAcknowledgement(into: &output)
    }

    /// Applies a WINDOW_UPDATE (only the connection window matters: bodies go out whole).
    package mutating func apply(windowUpdate frame: HTTP2ReadFrame) throws(HTTP2ConnectionError) {
        var payload = frame.payload
        let increment = Int((payload.readInteger(as: UInt32.self) ?? 0) & 0x7fff_ffff)
        guard frame.streamID == 0 else { return }
        connectionSendWindow += increment
        guard connectionSendWindow <= Int(Int32.max) else {
            throw HTTP2ConnectionError(.flowControlError, "connection window over 2^31-1")
        }
    }

    /// Answers a PING.
    package static func answer(ping frame: HTTP2ReadFrame, output: inout ByteBuffer) {
        var payload = frame.payload
        let data = payload.readInteger(as: UInt64.self) ?? 0
        if !frame.isAcknowledgement { HTTP2Wire.writePing(into: &output, data: data, acknowledgement: true) }
    }

    /// Counts received DATA against our connection window.
    package mutating func received(data frame: HTTP2ReadFrame) { unacknowledgedBytes += frame.flowControlledLength }

    /// After a read: gives the received bytes back once a MiB has accumulated.
    package mutating func acknowledgeReceived(into output: inout ByteBuffer) {
        if unacknowledgedBytes >= 1 << 20 {
            HTTP2Wire.writeWindowUpdate(into: &output, streamID: 0, increment: unacknowledgedBytes)
            unacknowledgedBytes = 0
        }
    }

    /// Keep-alive: PING after `idle` without reads; `false` when a PING went unanswered for
    /// `timeout` (the connection is dead and should be closed).
    package mutating func keepAlive(now: NIODeadline, idle: TimeAmount, timeout: TimeAmount, output: inout ByteBuffer) -> Bool {
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
