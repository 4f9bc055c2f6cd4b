import HeraldHTTP2
import NIOCore
import NIOHPACK
import Testing

@Suite("HTTP/2 framing")
struct HTTP2FrameParserTests {
    func frame(_ type: HTTP2Wire.FrameType, flags: UInt8 = 0, stream: Int32, _ payload: [UInt8]) -> ByteBuffer {
        var buffer = ByteBuffer()
        HTTP2Wire.writeFrameHeader(into: &buffer, length: payload.count, type: type, flags: flags, streamID: stream)
        buffer.writeBytes(payload)
        return buffer
    }

    func headerBlock(_ fields: [(String, String)]) throws -> [UInt8] {
        var encoder = HPACKEncoder(allocator: ByteBufferAllocator(), useHuffmanEncoding: false)
        var buffer = ByteBuffer()
        try encoder.encode(headers: HPACKHeaders(fields), to: &buffer)
        return Array(buffer.readableBytesView)
    }

    @Test("frames written by HTTP2Wire read back, even when the bytes arrive one at a time")
    func roundTrip() throws {
        var bytes = ByteBuffer()
        HTTP2Wire.writeSettings(into: &bytes, [(.maximumConcurrentStreams, 7), (.initialWindowSize, 1 << 20)])
        HTTP2Wire.writeWindowUpdate(into: &bytes, streamID: 0, increment: 1000)
        HTTP2Wire.writePing(into: &bytes, data: 42, acknowledgement: true)
        HTTP2Wire.writeResetStream(into: &bytes, streamID: 3, code: .refusedStream)
        HTTP2Wire.writeData(into: &bytes, streamID: 5, data: ByteBuffer(string: "hello"), endStream: true)
        HTTP2Wire.writeGoAway(into: &bytes, lastStreamID: 9, code: .noError, debugData: "bye")
        var parser = HTTP2FrameParser()
        var frames: [HTTP2ReadFrame] = []
        for byte in bytes.readableBytesView {
            var single = ByteBuffer(bytes: [byte])
            parser.append(&single)
            while let frame = try parser.next() { frames.append(frame) }
        }
        #expect(frames.map(\.type) == [0x4, 0x8, 0x6, 0x3, 0x0, 0x7])
        #expect(frames[0].settings.map(\.0) == [0x3, 0x4])
        #expect(frames[0].settings.map(\.1) == [7, 1 << 20])
        #expect(frames[2].isAcknowledgement)
        #expect(frames[3].streamID == 3)
        #expect(String(buffer: frames[4].payload) == "hello")
        #expect(frames[4].endStream)
        #expect(frames[4].flowControlledLength == 5)
        var goAway = frames[5].payload
        #expect(goAway.readInteger(as: UInt32.self) == 9)
        #expect(goAway.readInteger(as: UInt32.self) == 0)
        #expect(String(buffer: goAway) == "bye")
    }

    @Test("padding and priority fields are removed; padding still counts for flow control")
    func paddingAndPriority() throws {
        var parser = HTTP2FrameParser()
        var data = frame(
            .data, flags: HTTP2Wire.Flag.padded | HTTP2Wire.Flag.endStream, stream: 1,
            [3] + Array("abc".utf8) + [0, 0, 0])
        parser.append(&data)
        let dataFrame = try #require(try parser.next())
        #expect(String(buffer: dataFrame.payload) == "abc")
        #expect(dataFrame.flowControlledLength == 7)
        let block = try headerBlock([(":status", "200")])
        var headers = frame(
            .headers, flags: HTTP2Wire.Flag.padded | HTTP2Wire.Flag.priority | HTTP2Wire.Flag.endHeaders, stream: 1,
            [2] + [0, 0, 0, 0, 16] + block + [0, 0])
        parser.append(&headers)
        let headersFrame = try #require(try parser.next())
        var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
        var payload = headersFrame.payload
        #expect(try decoder.decodeHeaders(from: &payload).first(name: ":status") == "200")
    }

    @Test("a header block split over CONTINUATION frames is joined")
    func continuation() throws {
        let block = try headerBlock([(":status", "400"), ("apns-id", "x"), ("content-type", "application/json")])
        var parser = HTTP2FrameParser()
        var bytes = frame(.headers, flags: HTTP2Wire.Flag.endStream, stream: 3, Array(block.prefix(4)))
        bytes.writeImmutableBuffer(frame(.continuation, stream: 3, Array(block.dropFirst(4).prefix(3))))
        bytes.writeImmutableBuffer(
            frame(.continuation, flags: HTTP2Wire.Flag.endHeaders, stream: 3, Array(block.dropFirst(7))))
        parser.append(&bytes)
        let joined = try #require(try parser.next())
        #expect(joined.endStream)
        #expect(Array(joined.payload.readableBytesView) == block)
        #expect(try parser.next()?.type == nil)
    }

    @Test("protocol errors: oversized frames, stray CONTINUATION, interleaving, bad padding")
    func errors() throws {
        var parser = HTTP2FrameParser()
        var big = frame(.data, stream: 1, Array(repeating: 0, count: 16_385))
        parser.append(&big)
        #expect(throws: HTTP2ConnectionError.self) { try parser.next() }

        parser = HTTP2FrameParser()
        var stray = frame(.continuation, flags: HTTP2Wire.Flag.endHeaders, stream: 1, [0x88])
        parser.append(&stray)
        #expect(throws: HTTP2ConnectionError.self) { try parser.next() }

        parser = HTTP2FrameParser()
        var interleaved = frame(.headers, stream: 1, [0x88])
        interleaved.writeImmutableBuffer(frame(.data, stream: 1, [1]))
        parser.append(&interleaved)
        #expect(throws: HTTP2ConnectionError.self) { try parser.next() }

        parser = HTTP2FrameParser()
        var padding = frame(.data, flags: HTTP2Wire.Flag.padded, stream: 1, [9, 1, 2])
        parser.append(&padding)
        #expect(throws: HTTP2ConnectionError.self) { try parser.next() }
    }
}

@Suite("HTTP/2 header writing")
struct HTTP2HeaderWritingTests {
    @Test("a header block larger than the frame size goes out as HEADERS + CONTINUATION and reads back whole")
    func largeBlock() throws {
        var encoder = HPACKEncoder(allocator: ByteBufferAllocator(), useHuffmanEncoding: false)
        let big = String(repeating: "v", count: 40_000)
        var buffer = ByteBuffer()
        try HTTP2Wire.writeHeaders(
            into: &buffer, encoder: &encoder, headers: HPACKHeaders([(":status", "200"), ("x-big", big)]), streamID: 1,
            endStream: true)
        var parser = HTTP2FrameParser()
        parser.append(&buffer)
        let frame = try #require(try parser.next())
        #expect(frame.endStream)
        var decoder = HPACKDecoder(
            allocator: ByteBufferAllocator(), maxDynamicTableSize: 4096, maxHeaderListSize: 1 << 20)
        var block = frame.payload
        let headers = try decoder.decodeHeaders(from: &block)
        #expect(headers.first(name: "x-big") == big)
        #expect(headers.first(name: ":status") == "200")
    }
}
