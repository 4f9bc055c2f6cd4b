import HeraldHTTP2
import NIOCore
import NIOEmbedded
import NIOHPACK
import Testing

/// What a hostile or broken HTTP/2 peer can send the client. The handler runs in an
/// `EmbeddedChannel` playing the server byte for byte: every answer here is a frame on the wire.
@Suite("HTTP/2 hardening")
struct HTTP2HardeningTests {
    static func frame(_ type: HTTP2Wire.FrameType, flags: UInt8 = 0, stream: Int32, _ payload: [UInt8]) -> ByteBuffer {
        var buffer = ByteBuffer()
        HTTP2Wire.writeFrameHeader(into: &buffer, length: payload.count, type: type, flags: flags, streamID: stream)
        buffer.writeBytes(payload)
        return buffer
    }

    static func settings(_ pairs: [(UInt16, UInt32)]) -> ByteBuffer {
        var payload: [UInt8] = []
        for (identifier, value) in pairs {
            payload += [UInt8(identifier >> 8), UInt8(identifier & 0xff)]
            payload += [
                UInt8(value >> 24), UInt8((value >> 16) & 0xff), UInt8((value >> 8) & 0xff), UInt8(value & 0xff),
            ]
        }
        return frame(.settings, stream: 0, payload)
    }

    static func windowUpdate(stream: Int32, _ increment: UInt32) -> ByteBuffer {
        frame(
            .windowUpdate, stream: stream,
            [
                UInt8(increment >> 24), UInt8((increment >> 16) & 0xff), UInt8((increment >> 8) & 0xff),
                UInt8(increment & 0xff),
            ])
    }

    static func statusBlock(_ status: Int) throws -> [UInt8] {
        var encoder = HPACKEncoder(allocator: ByteBufferAllocator(), useHuffmanEncoding: false)
        var buffer = ByteBuffer()
        try encoder.encode(headers: HPACKHeaders([(":status", "\(status)")]), to: &buffer)
        return Array(buffer.readableBytesView)
    }

    /// A client handler on an embedded channel, past the preface, with the server's SETTINGS applied.
    struct Peer {
        let channel = EmbeddedChannel()
        let handler = HTTP2ClientHandler(authority: "fcm.test")

        init(settings: [(UInt16, UInt32)] = []) throws {
            try channel.pipeline.syncOperations.addHandler(handler)
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 443)).wait()
            try feed(HTTP2HardeningTests.settings(settings))
            _ = try frames()
        }

        func feed(_ buffer: ByteBuffer) throws {
            try channel.writeInbound(buffer)
            channel.pipeline.fireChannelReadComplete()
        }

        /// Frames the client wrote since the last call, parsed.
        func frames() throws -> [HTTP2ReadFrame] {
            channel.embeddedEventLoop.run()
            var parser = HTTP2FrameParser(maximumFrameSize: 1 << 24)
            var all = ByteBuffer()
            while var bytes = try channel.readOutbound(as: ByteBuffer.self) { all.writeBuffer(&bytes) }
            if all.readableBytesView.starts(with: HTTP2Wire.clientPreface) {
                all.moveReaderIndex(forwardBy: HTTP2Wire.clientPreface.count)
            }
            parser.append(&all)
            var frames: [HTTP2ReadFrame] = []
            while let frame = try parser.next() { frames.append(frame) }
            return frames
        }

        func submit(body: Int) -> EventLoopFuture<HTTP2Response> {
            let promise = channel.eventLoop.makePromise(of: HTTP2Response.self)
            handler.submit(
                method: "POST", path: "/send", headers: [:], body: ByteBuffer(repeating: 0x61, count: body),
                deadline: .now() + .seconds(30), promise: promise)
            return promise.futureResult
        }

        func goAwayCode(in frames: [HTTP2ReadFrame]) -> UInt32? {
            guard var payload = frames.first(where: { $0.type == HTTP2Wire.FrameType.goAway.rawValue })?.payload else {
                return nil
            }
            _ = payload.readInteger(as: UInt32.self)
            return payload.readInteger(as: UInt32.self)
        }
    }

    @Test("a body larger than the server's stream window goes out as its per-stream WINDOW_UPDATEs allow")
    func streamWindowUpdates() throws {
        let peer = try Peer(settings: [(0x4, 100)])  // SETTINGS_INITIAL_WINDOW_SIZE = 100
        let answer = peer.submit(body: 1_000)
        var frames = try peer.frames()
        #expect(frames.map(\.type) == [HTTP2Wire.FrameType.headers.rawValue, HTTP2Wire.FrameType.data.rawValue])
        #expect(frames.last?.payload.readableBytes == 100)
        #expect(frames.last?.endStream == false)
        try peer.feed(Self.windowUpdate(stream: 1, 400))
        frames = try peer.frames()
        #expect(frames.map(\.payload.readableBytes) == [400])
        try peer.feed(Self.windowUpdate(stream: 1, 10_000))
        frames = try peer.frames()
        #expect(frames.map(\.payload.readableBytes) == [500])
        #expect(frames.last?.endStream == true)
        try peer.feed(
            Self.frame(
                .headers, flags: HTTP2Wire.Flag.endHeaders | HTTP2Wire.Flag.endStream, stream: 1,
                try Self.statusBlock(200)))
        #expect(try answer.wait().status == 200)
    }

    @Test("a response body over 64 KiB resets its stream and fails only that request")
    func responseBodyCap() throws {
        let peer = try Peer()
        let big = peer.submit(body: 10)
        let small = peer.submit(body: 10)
        _ = try peer.frames()
        try peer.feed(Self.frame(.headers, flags: HTTP2Wire.Flag.endHeaders, stream: 1, try Self.statusBlock(200)))
        for _ in 0..<5 { try peer.feed(Self.frame(.data, stream: 1, Array(repeating: 0x7b, count: 16_000))) }
        #expect(throws: HTTP2RequestFailure.responseTooLarge) { try big.wait() }
        let reset = try peer.frames().filter { $0.type == HTTP2Wire.FrameType.rstStream.rawValue }
        #expect(reset.map(\.streamID) == [1])
        try peer.feed(
            Self.frame(
                .headers, flags: HTTP2Wire.Flag.endHeaders | HTTP2Wire.Flag.endStream, stream: 3,
                try Self.statusBlock(200)))
        #expect(try small.wait().status == 200)
    }

    @Test("DATA beyond the window the client granted is a FLOW_CONTROL_ERROR that closes the connection")
    func dataBeyondWindow() throws {
        let peer = try Peer()
        let answer = peer.submit(body: 10)
        _ = try peer.frames()
        try peer.feed(Self.frame(.headers, flags: HTTP2Wire.Flag.endHeaders, stream: 1, try Self.statusBlock(200)))
        // The stream window is 1 MiB; the cap resets the stream at 64 KiB, but the connection
        // window (16 MiB) still counts what the server sends on it.
        // 17 MiB in one read, before the client could give any of it back.
        var flood = ByteBuffer()
        for _ in 0..<(17 * 64) {
            flood.writeImmutableBuffer(Self.frame(.data, stream: 1, Array(repeating: 0, count: 16_384)))
        }
        try? peer.feed(flood)
        let frames = try peer.frames()
        #expect(peer.goAwayCode(in: frames) == HTTP2Wire.ErrorCode.flowControlError.rawValue)
        #expect(!peer.channel.isActive)
        #expect(throws: (any Error).self) { try answer.wait() }
    }

    @Test(
        "SETTINGS values outside RFC 9113's ranges are connection errors",
        arguments: [
            ([(UInt16(0x5), UInt32(100))], HTTP2Wire.ErrorCode.protocolError),  // MAX_FRAME_SIZE below 16384
            ([(UInt16(0x5), UInt32(1 << 24))], HTTP2Wire.ErrorCode.protocolError),  // MAX_FRAME_SIZE over 2^24-1
            ([(UInt16(0x2), UInt32(2))], HTTP2Wire.ErrorCode.protocolError),  // ENABLE_PUSH not 0 or 1
            // INITIAL_WINDOW_SIZE over 2^31-1
            ([(UInt16(0x4), UInt32(1) << 31)], HTTP2Wire.ErrorCode.flowControlError),
        ])
    func settingsValidation(pairs: [(UInt16, UInt32)], code: HTTP2Wire.ErrorCode) throws {
        let peer = try Peer()
        try peer.feed(Self.settings(pairs))
        #expect(peer.goAwayCode(in: try peer.frames()) == code.rawValue)
    }

    @Test("a SETTINGS frame that is not a multiple of 6 bytes, and a WINDOW_UPDATE of 0, are rejected")
    func malformedControlFrames() throws {
        let odd = try Peer()
        try odd.feed(Self.frame(.settings, stream: 0, [0, 3, 0, 0, 0]))
        #expect(odd.goAwayCode(in: try odd.frames()) == HTTP2Wire.ErrorCode.frameSizeError.rawValue)
        let zero = try Peer()
        try zero.feed(Self.windowUpdate(stream: 0, 0))
        #expect(zero.goAwayCode(in: try zero.frames()) == HTTP2Wire.ErrorCode.protocolError.rawValue)
    }

    @Test("a flood of CONTINUATION frames is cut off after the cap; a long legitimate chain is joined in order")
    func continuationFlood() throws {
        var parser = HTTP2FrameParser()
        var bytes = Self.frame(.headers, stream: 1, [0x88])
        for _ in 0..<(HTTP2FrameParser.maximumContinuationFrames + 1) {
            bytes.writeImmutableBuffer(Self.frame(.continuation, stream: 1, []))
        }
        parser.append(&bytes)
        #expect(throws: HTTP2ConnectionError.self) { while try parser.next() != nil {} }

        var chain = HTTP2FrameParser()
        var encoder = HPACKEncoder(allocator: ByteBufferAllocator(), useHuffmanEncoding: false)
        var encoded = ByteBuffer()
        try encoder.encode(
            headers: HPACKHeaders([(":status", "400"), ("apns-id", "8a1f0b5c-3a4e-4c1d-9a0b-1c2d3e4f5a6b")]),
            to: &encoded)
        let block = Array(encoded.readableBytesView)
        var input = Self.frame(.headers, stream: 3, [block[0]])
        for (index, byte) in block.dropFirst().enumerated() {
            let last = index == block.count - 2
            input.writeImmutableBuffer(
                Self.frame(.continuation, flags: last ? HTTP2Wire.Flag.endHeaders : 0, stream: 3, [byte]))
        }
        chain.append(&input)
        let joined = try #require(try chain.next())
        #expect(Array(joined.payload.readableBytesView) == block)
    }
}
