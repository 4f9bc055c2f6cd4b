package import NIOCore
package import NIOHPACK

/// One frame as read, with padding and priority fields removed and a header block already
/// joined with its CONTINUATION frames.
package struct HTTP2ReadFrame {
    package var type: UInt8
    package var flags: UInt8
    package var streamID: Int32
    /// The payload: the data of DATA, the whole header block of HEADERS, the raw payload otherwise.
    package var payload: ByteBuffer
    /// Bytes that count against flow control (DATA: the whole frame payload, padding included).
    package var flowControlledLength: Int

    package var endStream: Bool { flags & HTTP2Wire.Flag.endStream != 0 }
    package var isAcknowledgement: Bool { flags & HTTP2Wire.Flag.ack != 0 }
}

/// Cuts frames out of the bytes of a connection.
package struct HTTP2FrameParser {
    private var buffer: ByteBuffer
    /// The largest frame payload we accept (what we advertised, default 16,384).
    package var maximumFrameSize: Int
    /// A HEADERS frame waiting for its CONTINUATIONs, and how many it has had.
    private var pendingHeaders: HTTP2ReadFrame?
    private var continuations = 0
    /// The largest header block (HEADERS and its CONTINUATIONs) accepted: APNs and FCM answer
    /// with a few hundred bytes.
    package static let maximumHeaderBlockSize = 256 << 10
    /// The most CONTINUATION frames one header block may take (a flood of tiny ones is an attack).
    package static let maximumContinuationFrames = 64

    package init(
        allocator: ByteBufferAllocator = ByteBufferAllocator(),
        maximumFrameSize: Int = HTTP2Wire.defaultMaximumFrameSize
    ) {
        buffer = allocator.buffer(capacity: 0)
        self.maximumFrameSize = maximumFrameSize
    }

    /// Adds bytes read from the connection.
    package mutating func append(_ bytes: inout ByteBuffer) {
        if buffer.readableBytes == 0 {
            // Avoid a copy: adopt the incoming buffer.
            swap(&buffer, &bytes)
        } else {
            buffer.writeBuffer(&bytes)
        }
    }

    /// Consumes `count` raw bytes (the client preface) if they are all there; returns them.
    package mutating func readRaw(count: Int) -> [UInt8]? {
        buffer.readBytes(length: count)
    }

    /// The next complete frame, or `nil` when more bytes are needed.
    package mutating func next() throws(HTTP2ConnectionError) -> HTTP2ReadFrame? {
        while true {
            guard let frame = try nextRaw() else {
                compactIfNeeded()
                return nil
            }
            if var joined = pendingHeaders {
                guard frame.type == HTTP2Wire.FrameType.continuation.rawValue, frame.streamID == joined.streamID else {
                    throw HTTP2ConnectionError(.protocolError, "expected CONTINUATION for stream \(joined.streamID)")
                }
                // Taken out first so the block is uniquely held: the fragment is appended in
                // place, not the whole block copied per frame.
                pendingHeaders = nil
                continuations += 1
                guard continuations <= Self.maximumContinuationFrames else {
                    throw HTTP2ConnectionError(
                        .enhanceYourCalm, "more than \(Self.maximumContinuationFrames) CONTINUATION frames")
                }
                guard joined.payload.readableBytes + frame.payload.readableBytes <= Self.maximumHeaderBlockSize else {
                    throw HTTP2ConnectionError(
                        .enhanceYourCalm, "header block over \(Self.maximumHeaderBlockSize) bytes")
                }
                var fragment = frame.payload
                joined.payload.writeBuffer(&fragment)
                if frame.flags & HTTP2Wire.Flag.endHeaders != 0 { return joined }
                pendingHeaders = joined
                continue
            }
            switch frame.type {
            case HTTP2Wire.FrameType.continuation.rawValue:
                throw HTTP2ConnectionError(.protocolError, "CONTINUATION without HEADERS")
            case HTTP2Wire.FrameType.headers.rawValue, HTTP2Wire.FrameType.pushPromise.rawValue:
                if frame.flags & HTTP2Wire.Flag.endHeaders == 0 {
                    // Own the fragment (room for a few more) so later frames are appended to it.
                    var owned = frame
                    var copy = ByteBufferAllocator().buffer(capacity: frame.payload.readableBytes * 4)
                    var fragment = frame.payload
                    copy.writeBuffer(&fragment)
                    owned.payload = copy
                    pendingHeaders = owned
                    continuations = 0
                    continue
                }
                return frame
            default:
                return frame
            }
        }
    }

    private mutating func nextRaw() throws(HTTP2ConnectionError) -> HTTP2ReadFrame? {
        guard buffer.readableBytes >= 9,
            let lengthHigh = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self),
            let lengthLow = buffer.getInteger(at: buffer.readerIndex + 1, as: UInt16.self)
        else { return nil }
        let length = Int(lengthHigh) << 16 | Int(lengthLow)
        guard length <= maximumFrameSize else {
            throw HTTP2ConnectionError(.frameSizeError, "frame of \(length) bytes over the \(maximumFrameSize) allowed")
        }
        guard buffer.readableBytes >= 9 + length else { return nil }
        let type = buffer.getInteger(at: buffer.readerIndex + 3, as: UInt8.self)!
        var flags = buffer.getInteger(at: buffer.readerIndex + 4, as: UInt8.self)!
        let streamID = Int32(bitPattern: buffer.getInteger(at: buffer.readerIndex + 5, as: UInt32.self)! & 0x7fff_ffff)
        buffer.moveReaderIndex(forwardBy: 9)
        var payload = buffer.readSlice(length: length)!
        switch type {
        case HTTP2Wire.FrameType.data.rawValue, HTTP2Wire.FrameType.headers.rawValue,
            HTTP2Wire.FrameType.pushPromise.rawValue:
            if flags & HTTP2Wire.Flag.padded != 0 {
                guard let padLength = payload.readInteger(as: UInt8.self), Int(padLength) <= payload.readableBytes
                else { throw HTTP2ConnectionError(.protocolError, "padding longer than the frame") }
                payload = payload.getSlice(at: payload.readerIndex, length: payload.readableBytes - Int(padLength))!
                flags &= ~HTTP2Wire.Flag.padded
            }
            if type == HTTP2Wire.FrameType.headers.rawValue, flags & HTTP2Wire.Flag.priority != 0 {
                guard payload.readableBytes >= 5 else {
                    throw HTTP2ConnectionError(.frameSizeError, "HEADERS priority fields cut short")
                }
                payload.moveReaderIndex(forwardBy: 5)
                flags &= ~HTTP2Wire.Flag.priority
            }
        default:
            break
        }
        return HTTP2ReadFrame(
            type: type, flags: flags, streamID: streamID, payload: payload, flowControlledLength: length)
    }

    private mutating func compactIfNeeded() {
        if buffer.readerIndex > 1 << 16, buffer.readerIndex > buffer.readableBytes {
            buffer.discardReadBytes()
        }
    }
}

extension HTTP2ReadFrame {
    /// SETTINGS parameters as (identifier, value) pairs.
    package var settings: [(UInt16, UInt32)] {
        var payload = self.payload
        var result: [(UInt16, UInt32)] = []
        while let identifier = payload.readInteger(as: UInt16.self), let value = payload.readInteger(as: UInt32.self) {
            result.append((identifier, value))
        }
        return result
    }
}

extension HPACKDecoder {
    /// Decodes a HEADERS frame's block; a bad block is a connection-level COMPRESSION_ERROR.
    package mutating func decodeBlock(of frame: HTTP2ReadFrame) throws(HTTP2ConnectionError) -> HPACKHeaders {
        var block = frame.payload
        do {
            return try decodeHeaders(from: &block)
        } catch {
            throw HTTP2ConnectionError(.compressionError, "cannot decode a header block")
        }
    }
}
