import HeraldHTTP2
import NIOCore
import NIOHPACK
import Testing

/// The stream table both HTTP/2 clients use, driven without sockets and with a clock the test
/// moves: frames in, events and written frames out.
@Suite("HTTP/2 client streams: a state machine without I/O")
struct HTTP2ClientStreamsTests {
    typealias Streams = HTTP2ClientStreams

    /// A request as the table holds it: an object; tests name theirs.
    final class Named {
        let name: String
        init(_ name: String) { self.name = name }
    }

    static func names(_ requests: [AnyObject]) -> [String] { requests.map { ($0 as! Named).name } }

    /// A mock clock: a fixed start the test moves forward.
    static let start = NIODeadline.uptimeNanoseconds(1_000_000_000_000)

    static func frames(_ buffer: ByteBuffer) throws -> [HTTP2ReadFrame] {
        var parser = HTTP2FrameParser(maximumFrameSize: 1 << 24)
        var all = buffer
        if all.readableBytesView.starts(with: HTTP2Wire.clientPreface) {
            all.moveReaderIndex(forwardBy: HTTP2Wire.clientPreface.count)
        }
        parser.append(&all)
        var frames: [HTTP2ReadFrame] = []
        while let frame = try parser.next() { frames.append(frame) }
        return frames
    }

    /// What the table wrote since the last call, parsed; the output is emptied.
    static func written(_ streams: inout Streams) throws -> [HTTP2ReadFrame] {
        let output = streams.output
        streams.output = ByteBuffer()
        return try frames(output)
    }

    /// Feeds server bytes as the handler would: every frame, then the read's end.
    static func feed(_ streams: inout Streams, _ buffer: ByteBuffer, now: NIODeadline = start) throws
        -> [HTTP2StreamEvent]
    {
        streams.didRead(now: now)
        var events: [HTTP2StreamEvent] = []
        for frame in try frames(buffer) {
            if let event = try streams.read(frame) { events.append(event) }
        }
        streams.readComplete()
        return events
    }

    /// A table past the preface with the server's SETTINGS applied and acknowledged.
    static func connected(settings: [(UInt16, UInt32)] = [], cap: Int = 1000) throws -> Streams {
        var streams = Streams(streamLimitCap: cap, keepsResponseHeaders: true)
        streams.writePreface()
        _ = try feed(&streams, HTTP2HardeningTests.settings(settings))
        _ = try written(&streams)
        return streams
    }

    static func headers(stream: Int32, status: Int, endStream: Bool) throws -> ByteBuffer {
        HTTP2HardeningTests.frame(
            .headers, flags: HTTP2Wire.Flag.endHeaders | (endStream ? HTTP2Wire.Flag.endStream : 0), stream: stream,
            try HTTP2HardeningTests.statusBlock(status))
    }

    static func request(_ path: String) -> HPACKHeaders {
        HPACKHeaders([(":method", "POST"), (":scheme", "https"), (":authority", "test"), (":path", path)])
    }

    static func answered(_ event: HTTP2StreamEvent?) -> (String, Int, String)? {
        guard case .answered(let request, let status, _, let body)? = event else { return nil }
        return ((request as! Named).name, status, body.map { String(buffer: $0) } ?? "")
    }

    @Test("nothing opens before the server's SETTINGS; then up to its limit, and an answer frees a stream")
    func streamLimit() throws {
        var streams = Streams(streamLimitCap: 1000, keepsResponseHeaders: false)
        streams.writePreface()
        #expect(streams.availableStreams == 0)
        _ = try Self.feed(
            &streams, HTTP2HardeningTests.settings([(HTTP2Wire.Setting.maximumConcurrentStreams.rawValue, 2)]))
        // Our SETTINGS went out first; the server's were acknowledged.
        let control = try Self.written(&streams)
        #expect(control.contains { $0.type == HTTP2Wire.FrameType.settings.rawValue && $0.isAcknowledgement })
        #expect(streams.availableStreams == 2)
        let opened1 = streams.open(
            Named("a"), headers: Self.request("/a"), body: ByteBuffer(string: "{}"), deadline: Self.start + .seconds(10)
        )
        #expect(opened1)
        let opened2 = streams.open(
            Named("b"), headers: Self.request("/b"), body: ByteBuffer(string: "{}"), deadline: Self.start + .seconds(10)
        )
        #expect(opened2)
        #expect(streams.availableStreams == 0)
        let frames = try Self.written(&streams)
        #expect(frames.map(\.streamID) == [1, 1, 3, 3])
        #expect(frames.filter(\.endStream).map(\.streamID) == [1, 3])
        let events = try Self.feed(&streams, try Self.headers(stream: 3, status: 200, endStream: true))
        #expect(Self.answered(events.first)?.0 == "b")
        #expect(streams.availableStreams == 1)
        #expect(streams.openStreams == 1)
    }

    @Test("an answer is assembled from HEADERS and DATA frames; headers are kept only when asked")
    func answerAssembly() throws {
        for keeps in [true, false] {
            var streams = Streams(streamLimitCap: 10, keepsResponseHeaders: keeps)
            _ = try Self.feed(&streams, HTTP2HardeningTests.settings([]))
            let opened3 = streams.open(
                Named("x"), headers: Self.request("/x"), body: ByteBuffer(), deadline: Self.start + .seconds(1))
            #expect(opened3)
            var bytes = try Self.headers(stream: 1, status: 400, endStream: false)
            bytes.writeImmutableBuffer(HTTP2HardeningTests.frame(.data, stream: 1, Array(#"{"reason":"#.utf8)))
            let events1 = try Self.feed(&streams, bytes)
            #expect(events1.isEmpty)
            let events = try Self.feed(
                &streams,
                HTTP2HardeningTests.frame(
                    .data, flags: HTTP2Wire.Flag.endStream, stream: 1, Array(#""BadDeviceToken"}"#.utf8)))
            let answer = try #require(Self.answered(events.first))
            #expect(answer.0 == "x" && answer.1 == 400 && answer.2 == #"{"reason":"BadDeviceToken"}"#)
            guard case .answered(_, _, let headers, _)? = events.first else { return }
            #expect(headers.first(name: ":status") == (keeps ? "400" : nil))
        }
    }

    @Test("a deadline passes on the mock clock: the stream is reset, the request reported once, a late answer ignored")
    func deadlines() throws {
        var streams = try Self.connected()
        let opened4 = streams.open(
            Named("early"), headers: Self.request("/1"), body: ByteBuffer(), deadline: Self.start + .seconds(1))
        #expect(opened4)
        let opened5 = streams.open(
            Named("late"), headers: Self.request("/2"), body: ByteBuffer(), deadline: Self.start + .seconds(5))
        #expect(opened5)
        _ = try Self.written(&streams)
        let expired1 = streams.expire(now: Self.start + .milliseconds(999))
        #expect(expired1.isEmpty)
        let expired2 = streams.expire(now: Self.start + .seconds(1))
        #expect(Self.names(expired2) == ["early"])
        let resets = try Self.written(&streams)
        #expect(resets.map(\.type) == [HTTP2Wire.FrameType.rstStream.rawValue])
        #expect(resets.first?.streamID == 1)
        let expired3 = streams.expire(now: Self.start + .seconds(2))
        #expect(expired3.isEmpty)
        // The server answers the reset stream after all: nothing is reported twice.
        let events2 = try Self.feed(&streams, try Self.headers(stream: 1, status: 200, endStream: true))
        #expect(events2.isEmpty)
        #expect(streams.openStreams == 1)
        let expired4 = streams.expire(now: Self.start + .seconds(6))
        #expect(Self.names(expired4) == ["late"])
    }

    @Test("GOAWAY: the streams above its last id are unanswered, the ones below still answered, then drained")
    func goAway() throws {
        var streams = try Self.connected()
        for name in ["s1", "s3", "s5", "s7"] {
            let opened6 = streams.open(
                Named(name), headers: Self.request("/" + name), body: ByteBuffer(), deadline: Self.start + .seconds(10))
            #expect(opened6)
        }
        var payload: [UInt8] = [0, 0, 0, 3, 0, 0, 0, 0]
        payload += Array(#"{"reason":"Shutdown"}"#.utf8)
        let events = try Self.feed(&streams, HTTP2HardeningTests.frame(.goAway, stream: 0, payload))
        guard case .goingAway(let code, let debugData, let orphans)? = events.first else {
            Issue.record("no goingAway: \(events)")
            return
        }
        #expect(code == 0)
        #expect(String(buffer: debugData) == #"{"reason":"Shutdown"}"#)
        #expect(Self.names(orphans) == ["s5", "s7"])
        #expect(streams.availableStreams == 0)
        #expect(!streams.isDrained)
        _ = try Self.feed(&streams, try Self.headers(stream: 1, status: 200, endStream: true))
        let last = try Self.feed(&streams, try Self.headers(stream: 3, status: 200, endStream: true))
        #expect(Self.answered(last.first)?.0 == "s3")
        #expect(streams.isDrained)
    }

    @Test("RST_STREAM before an answer is unanswered; after the answer's HEADERS it is the answer")
    func resets() throws {
        var streams = try Self.connected()
        let opened7 = streams.open(
            Named("refused"), headers: Self.request("/1"), body: ByteBuffer(), deadline: Self.start + .seconds(10))
        #expect(opened7)
        let opened8 = streams.open(
            Named("answered"), headers: Self.request("/2"), body: ByteBuffer(), deadline: Self.start + .seconds(10))
        #expect(opened8)
        let refusedStream: [UInt8] = [0, 0, 0, 7]
        var events = try Self.feed(&streams, HTTP2HardeningTests.frame(.rstStream, stream: 1, refusedStream))
        guard case .unanswered(let refused)? = events.first, (refused as! Named).name == "refused" else {
            Issue.record("not unanswered: \(events)")
            return
        }
        var bytes = try Self.headers(stream: 3, status: 429, endStream: false)
        bytes.writeImmutableBuffer(HTTP2HardeningTests.frame(.rstStream, stream: 3, [0, 0, 0, 8]))
        events = try Self.feed(&streams, bytes)
        #expect(Self.answered(events.first).map { "\($0.0) \($0.1)" } == "answered 429")
    }

    @Test("a body larger than the server's windows goes out as WINDOW_UPDATEs allow, END_STREAM last")
    func flowControl() throws {
        var streams = try Self.connected(settings: [(HTTP2Wire.Setting.initialWindowSize.rawValue, 10)])
        #expect(streams.mayOpen(bodySize: 25))
        let opened9 = streams.open(
            Named("big"), headers: Self.request("/big"), body: ByteBuffer(repeating: 0x61, count: 25),
            deadline: Self.start + .seconds(10))
        #expect(opened9)
        // While a body waits for window, another one larger than a window does not start.
        #expect(!streams.mayOpen(bodySize: 25))
        var data = try Self.written(&streams).filter { $0.type == HTTP2Wire.FrameType.data.rawValue }
        #expect(data.map(\.payload.readableBytes) == [10])
        #expect(!data[0].endStream)
        _ = try Self.feed(&streams, HTTP2HardeningTests.windowUpdate(stream: 1, 20))
        data = try Self.written(&streams).filter { $0.type == HTTP2Wire.FrameType.data.rawValue }
        #expect(data.map(\.payload.readableBytes) == [15])
        #expect(data.first?.endStream == true)
        #expect(streams.mayOpen(bodySize: 25))
    }

    @Test("an answer body over 64 KiB resets its stream and is reported as too large, with its status")
    func responseTooLarge() throws {
        var streams = try Self.connected()
        let opened10 = streams.open(
            Named("huge"), headers: Self.request("/1"), body: ByteBuffer(), deadline: Self.start + .seconds(10))
        #expect(opened10)
        _ = try Self.written(&streams)
        var bytes = try Self.headers(stream: 1, status: 500, endStream: false)
        for _ in 0..<5 {
            bytes.writeImmutableBuffer(
                HTTP2HardeningTests.frame(.data, stream: 1, [UInt8](repeating: 0x62, count: 16_000)))
        }
        let events = try Self.feed(&streams, bytes)
        guard case .responseTooLarge(let huge, let status)? = events.first, (huge as! Named).name == "huge" else {
            Issue.record("not responseTooLarge: \(events)")
            return
        }
        #expect(status == 500)
        let frames1 = try Self.written(&streams)
        #expect(frames1.contains { $0.type == HTTP2Wire.FrameType.rstStream.rawValue && $0.streamID == 1 })
        #expect(streams.openStreams == 0)
    }

    @Test("keep-alive on the mock clock: PING after the idle interval, dead when it goes unanswered")
    func keepAlive() throws {
        var streams = try Self.connected()
        streams.didRead(now: Self.start)
        let alive1 = streams.keepAlive(now: Self.start + .seconds(59), idle: .seconds(60), timeout: .seconds(10))
        #expect(alive1)
        let frames2 = try Self.written(&streams)
        #expect(frames2.isEmpty)
        let alive2 = streams.keepAlive(now: Self.start + .seconds(61), idle: .seconds(60), timeout: .seconds(10))
        #expect(alive2)
        let frames3 = try Self.written(&streams)
        #expect(frames3.map(\.type) == [HTTP2Wire.FrameType.ping.rawValue])
        let alive3 = streams.keepAlive(now: Self.start + .seconds(70), idle: .seconds(60), timeout: .seconds(10))
        #expect(alive3)
        let alive4 = streams.keepAlive(now: Self.start + .seconds(72), idle: .seconds(60), timeout: .seconds(10))
        #expect(!alive4)
        // Any read (the PING's answer) makes it alive again.
        streams.didRead(now: Self.start + .seconds(72))
        let alive5 = streams.keepAlive(now: Self.start + .seconds(73), idle: .seconds(60), timeout: .seconds(10))
        #expect(alive5)
    }

    @Test("a closed connection reports every open stream unanswered, oldest first; a retired one drains")
    func closeAndRetire() throws {
        var streams = try Self.connected()
        for name in ["a", "b", "c"] {
            let opened11 = streams.open(
                Named(name), headers: Self.request("/" + name), body: ByteBuffer(), deadline: Self.start + .seconds(10))
            #expect(opened11)
        }
        streams.retire()
        #expect(streams.availableStreams == 0)
        #expect(!streams.isDrained)
        let orphans1 = streams.closed()
        #expect(Self.names(orphans1) == ["a", "b", "c"])
        #expect(streams.isDrained)
        let orphans2 = streams.closed()
        #expect(orphans2.isEmpty)
    }

    @Test("a protocol error from the server is a connection error: GOAWAY with its code")
    func protocolError() throws {
        var streams = try Self.connected()
        do {
            _ = try Self.feed(
                &streams,
                HTTP2HardeningTests.frame(.pushPromise, flags: HTTP2Wire.Flag.endHeaders, stream: 1, [0, 0, 0, 2]))
            Issue.record("PUSH_PROMISE accepted")
        } catch let error as HTTP2ConnectionError {
            streams.fail(with: error)
        }
        let goAway = try #require(try Self.written(&streams).first { $0.type == HTTP2Wire.FrameType.goAway.rawValue })
        var payload = goAway.payload
        _ = payload.readInteger(as: UInt32.self)
        #expect(payload.readInteger(as: UInt32.self) == HTTP2Wire.ErrorCode.protocolError.rawValue)
        #expect(streams.availableStreams == 0)
    }

    @Test(
        "headers split into shared and own fields decode to the same fields for every request: the shared block reused, made anew when the values change, an insertion moves indexes, or SETTINGS come"
    )
    func headerTemplates() throws {
        var streams = try Self.connected()
        var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
        let names = [
            ":method", ":scheme", ":authority", "authorization", "apns-push-type", "apns-topic", "apns-priority",
        ]
        func values(_ token: String, _ type: String, _ priority: String) -> [String] {
            ["POST", "https", "api.push.apple.com", "bearer " + token, type, "com.example.app", priority]
        }
        let longToken = String(repeating: "t", count: 300)
        let kinds = [
            values("a", "alert", "10"), values("a", "alert", "10"), values("a", "background", "5"),
            values("a", "alert", "10"), values("b", "alert", "10"), values("a", "alert", "10"),
            values(longToken, "alert", "10"), values(longToken, "alert", "10"),
        ]
        var sizes: [Int] = []
        for (number, kind) in (kinds + kinds).enumerated() {
            if number == kinds.count {
                // A SETTINGS frame halfway (a smaller table): the blocks are made anew.
                _ = try Self.feed(&streams, HTTP2HardeningTests.settings([(0x1, 256)]))
                _ = try Self.written(&streams)
                decoder.maxDynamicTableLength = 256
            }
            var own: [(name: String, value: String)] = [(":path", "/3/device/\(number)"), ("apns-id", "id-\(number)")]
            if number % 3 == 0 { own.append(("apns-collapse-id", "c" + String(repeating: "x", count: number * 20))) }
            own.append(("content-length", "2"))
            let headers = HTTP2RequestHeaders(fixedNames: names, fixedValues: kind, own: own)
            let opened = streams.open(
                Named("r\(number)"), requestHeaders: headers, body: ByteBuffer(string: "{}"),
                deadline: Self.start + .seconds(10))
            #expect(opened)
            let frames = try Self.written(&streams).filter { $0.type == 0x1 }
            try #require(frames.count == 1)
            var block = frames[0].payload
            sizes.append(block.readableBytes)
            let decoded = try decoder.decodeHeaders(from: &block)
            let fields = decoded.map { ($0.name, $0.value) }
            let expected =
                own.filter { $0.name.hasPrefix(":") } + zip(names, kind).map { ($0, $1) }
                + own.filter { !$0.name.hasPrefix(":") }
            #expect(fields.map(\.0) == expected.map(\.0), "request \(number)")
            #expect(fields.map(\.1) == expected.map(\.1), "request \(number)")
            // Pseudo-header fields first.
            let firstRegular = fields.firstIndex { !$0.0.hasPrefix(":") } ?? fields.count
            #expect(!fields[firstRegular...].contains { $0.0.hasPrefix(":") })
        }
        // A repeat of the same shared values sends their block of indexes, not the values again.
        #expect(sizes[1] < sizes[0] - 20)
    }
}
