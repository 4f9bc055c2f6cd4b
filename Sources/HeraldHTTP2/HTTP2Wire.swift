package import NIOCore
package import NIOHPACK

/// The parts of RFC 9113 that APNs and FCM traffic needs, written and read directly on a
/// connection's bytes: no per-stream objects, one buffer per batch of writes. Used by the
/// APNs client and the simulator, where NIOHTTP2's general stream state machine costs more
/// per request than everything else together (see BENCHMARKS.md).
package enum HTTP2Wire {
    /// The client connection preface.
    package static let clientPreface: [UInt8] = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)
    /// The default initial window (stream and connection) before SETTINGS change it.
    package static let defaultWindow = 65_535
    /// The largest frame payload before SETTINGS_MAX_FRAME_SIZE raises it.
    package static let defaultMaximumFrameSize = 16_384

    package enum FrameType: UInt8 {
        case data = 0x0
        case headers = 0x1
        case priority = 0x2
        case rstStream = 0x3
        case settings = 0x4
        case pushPromise = 0x5
        case ping = 0x6
        case goAway = 0x7
        case windowUpdate = 0x8
        case continuation = 0x9
    }

    package enum Flag {
        package static let endStream: UInt8 = 0x1
        package static let ack: UInt8 = 0x1
        package static let endHeaders: UInt8 = 0x4
        package static let padded: UInt8 = 0x8
        package static let priority: UInt8 = 0x20
    }

    package enum Setting: UInt16 {
        case headerTableSize = 0x1
        case enablePush = 0x2
        case maximumConcurrentStreams = 0x3
        case initialWindowSize = 0x4
        case maximumFrameSize = 0x5
        case maximumHeaderListSize = 0x6
    }

    package enum ErrorCode: UInt32 {
        case noError = 0x0
        case protocolError = 0x1
        case internalError = 0x2
        case flowControlError = 0x3
        case settingsTimeout = 0x4
        case streamClosed = 0x5
        case frameSizeError = 0x6
        case refusedStream = 0x7
        case cancel = 0x8
        case compressionError = 0x9
        case connectError = 0xa
        case enhanceYourCalm = 0xb
        case inadequateSecurity = 0xc
        case http11Required = 0xd
    }

    /// Writes a 9-byte frame header.
    @inlinable
    package static func writeFrameHeader(
        into buffer: inout ByteBuffer, length: Int, type: FrameType, flags: UInt8, streamID: Int32
    ) {
        buffer.writeInteger(UInt8(truncatingIfNeeded: length >> 16))
        buffer.writeInteger(UInt16(truncatingIfNeeded: length))
        buffer.writeInteger(type.rawValue)
        buffer.writeInteger(flags)
        buffer.writeInteger(UInt32(bitPattern: streamID) & 0x7fff_ffff)
    }

    package static func writeSettings(into buffer: inout ByteBuffer, _ settings: [(Setting, UInt32)]) {
        writeFrameHeader(into: &buffer, length: settings.count * 6, type: .settings, flags: 0, streamID: 0)
        for (setting, value) in settings {
            buffer.writeInteger(setting.rawValue)
            buffer.writeInteger(value)
        }
    }

    package static func writeSettingsAcknowledgement(into buffer: inout ByteBuffer) {
        writeFrameHeader(into: &buffer, length: 0, type: .settings, flags: Flag.ack, streamID: 0)
    }

    package static func writeWindowUpdate(into buffer: inout ByteBuffer, streamID: Int32, increment: Int) {
        writeFrameHeader(into: &buffer, length: 4, type: .windowUpdate, flags: 0, streamID: streamID)
        buffer.writeInteger(UInt32(increment) & 0x7fff_ffff)
    }

    package static func writePing(into buffer: inout ByteBuffer, data: UInt64, acknowledgement: Bool) {
        writeFrameHeader(into: &buffer, length: 8, type: .ping, flags: acknowledgement ? Flag.ack : 0, streamID: 0)
        buffer.writeInteger(data)
    }

    package static func writeResetStream(into buffer: inout ByteBuffer, streamID: Int32, code: ErrorCode) {
        writeFrameHeader(into: &buffer, length: 4, type: .rstStream, flags: 0, streamID: streamID)
        buffer.writeInteger(code.rawValue)
    }

    package static func writeGoAway(
        into buffer: inout ByteBuffer, lastStreamID: Int32, code: ErrorCode, debugData: String = ""
    ) {
        let debug = Array(debugData.utf8)
        writeFrameHeader(into: &buffer, length: 8 + debug.count, type: .goAway, flags: 0, streamID: 0)
        buffer.writeInteger(UInt32(bitPattern: lastStreamID) & 0x7fff_ffff)
        buffer.writeInteger(code.rawValue)
        buffer.writeBytes(debug)
    }

    /// Writes a HEADERS frame whose block is HPACK-encoded in place (no copy), followed by
    /// CONTINUATION frames when the block is larger than the peer's maximum frame size.
    /// On an encoding error nothing is left in `buffer`.
    package static func writeHeaders(
        into buffer: inout ByteBuffer, encoder: inout HPACKEncoder, headers: HPACKHeaders, streamID: Int32,
        endStream: Bool, maximumFrameSize: Int = defaultMaximumFrameSize
    ) throws {
        try writeHeaders(into: &buffer, streamID: streamID, endStream: endStream, maximumFrameSize: maximumFrameSize) {
            try encoder.encode(headers: headers, to: &$0)
        }
    }

    /// Writes a HEADERS frame (and CONTINUATIONs when needed) whose block `encode` writes.
    package static func writeHeaders(
        into buffer: inout ByteBuffer, streamID: Int32, endStream: Bool, maximumFrameSize: Int,
        encode: (inout ByteBuffer) throws -> Void
    ) throws {
        let start = buffer.writerIndex
        let flags = endStream ? Flag.endStream : 0
        writeFrameHeader(into: &buffer, length: 0, type: .headers, flags: flags | Flag.endHeaders, streamID: streamID)
        do {
            try encode(&buffer)
        } catch {
            buffer.moveWriterIndex(to: start)
            throw error
        }
        let blockLength = buffer.writerIndex - start - 9
        if blockLength <= maximumFrameSize {
            buffer.setInteger(UInt8(truncatingIfNeeded: blockLength >> 16), at: start)
            buffer.setInteger(UInt16(truncatingIfNeeded: blockLength), at: start + 1)
            return
        }
        // Rare: re-frame the block as HEADERS + CONTINUATION.
        let block = buffer.getSlice(at: start + 9, length: blockLength)!
        buffer.moveWriterIndex(to: start)
        var offset = 0
        while offset < blockLength {
            let length = min(maximumFrameSize, blockLength - offset)
            let last = offset + length == blockLength
            let type: FrameType = offset == 0 ? .headers : .continuation
            let frameFlags = (offset == 0 ? flags : 0) | (last ? Flag.endHeaders : 0)
            writeFrameHeader(into: &buffer, length: length, type: type, flags: frameFlags, streamID: streamID)
            var part = block.getSlice(at: block.readerIndex + offset, length: length)!
            buffer.writeBuffer(&part)
            offset += length
        }
    }

    /// Writes a DATA frame (no padding).
    @inlinable
    package static func writeData(into buffer: inout ByteBuffer, streamID: Int32, data: ByteBuffer, endStream: Bool) {
        writeFrameHeader(
            into: &buffer, length: data.readableBytes, type: .data, flags: endStream ? Flag.endStream : 0,
            streamID: streamID)
        var data = data
        buffer.writeBuffer(&data)
    }
}

/// A connection-level HTTP/2 error: the connection must end with GOAWAY carrying `code`.
package struct HTTP2ConnectionError: Error, CustomStringConvertible {
    package var code: HTTP2Wire.ErrorCode
    package var message: String

    package init(_ code: HTTP2Wire.ErrorCode, _ message: String) {
        self.code = code
        self.message = message
    }

    package var description: String { "HTTP/2 \(code): \(message)" }
}
