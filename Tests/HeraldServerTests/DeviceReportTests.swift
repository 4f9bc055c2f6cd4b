import Foundation
import HTTPTypes
import HeraldAPI
import HeraldEngine
import HeraldPayload
import HeraldServer
import HeraldStore
import HeraldTesting
import HummingbirdTesting
import NIOCore
import NIOEmbedded
import NIOHTTPTypes
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Opens and receipts answered on the connection's event loop (`DeviceReportHandler`): the
/// same answers as the router's, for every check; what it does not take goes on untouched, and
/// a connection's answers keep their order.
@Suite("Device reports on the event loop")
struct DeviceReportTests {
    /// A call as a device makes it; with `origin` the router answers it (the handler leaves
    /// requests with an `Origin` to the router's CORS).
    static func call(
        _ server: ServerHarness, _ route: String, _ json: String, app: String = "demo",
        key: String? = ServerHarness.server, userToken: String? = nil, origin: Bool
    ) async throws -> (status: Int, headers: HTTPFields, body: String) {
        var headers: HTTPFields = [.contentType: "application/json"]
        if let key { headers[.authorization] = "Bearer \(key)" }
        if let userToken { headers[HTTPField.Name("X-Herald-User-Token")!] = userToken }
        if origin { headers[.origin] = "https://app.example" }
        let response = try await server.client.execute(
            uri: "/v1/apps/\(app)/\(route)", method: .post, headers: headers, body: ByteBuffer(string: json))
        return (Int(response.status.code), response.headers, String(buffer: response.body))
    }

    static func object(_ text: String) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any] ?? [:]
    }

    /// At noon on the manual clock, `devices` (device id, user) registered and sent one
    /// notification (SyncWell's PN-02 when `typed`, else a plain alert): each one's delivery id,
    /// from the stamp its token received.
    static func deliveries(_ server: ServerHarness, _ devices: [(device: String, user: String)], typed: Bool = false)
        async throws -> [Int64]
    {
        try await EngagementTests.noon(server)
        let tokens = makeDeviceTokens(devices.count)
        for (device, token) in zip(devices, tokens) {
            #expect(try await server.register(device.device, user: device.user, token: token) == .created)
        }
        let users = devices.map { #""\#($0.user)""# }.joined(separator: ",")
        let content =
            typed ? #""type":"PN-02","data":{"Source":"Strava","source_id":"strava"}"# : #""alert":{"body":"x"}"#
        let sent = try await server.send(#"{"to":{"user_ids":[\#(users)]},\#(content)}"#)
        _ = try await server.settled(try #require(sent.body["id"] as? String))
        return try tokens.map { try #require(EngagementTests.stamps(server, $0).first).deliveryID }
    }

    @Test(
        "every refusal of an open or a receipt taken on the event loop is the router's, byte for byte; a first report counts, a repeat does not, whichever answers; the metrics count both under the route"
    )
    func sameAnswers() async throws {
        try await withServer(configure: { $0.clock = .manual }) { server in
            let ids = try await Self.deliveries(server, [("ana-phone", "ana"), ("bo-phone", "bo")], typed: true)
            let (ana, bo) = (ids[0], ids[1])
            let anaToken = ServerHarness.userToken("ana", now: server.runtime.store.now)
            let client = ServerHarness.client
            let tooMany =
                "["
                + Array(repeating: #"{"delivery_id":1,"device_id":"x"}"#, count: 101).joined(
                    separator: ",") + "]"
            let refusals: [(route: String, json: String, app: String, key: String?, token: String?)] = [
                ("opened", #"{"delivery_id":\#(ana),"device_id":"ana-phone"}"#, "demo", nil, nil),
                ("opened", #"{"delivery_id":\#(ana),"device_id":"ana-phone"}"#, "demo", "wrong-key", nil),
                ("opened", #"{"delivery_id":\#(ana),"device_id":"ana-phone"}"#, "nope", ServerHarness.server, nil),
                ("opened", #"{"delivery_id":\#(ana),"device_id":"ana-phone"}"#, "demo", client, nil),
                ("opened", #"{"delivery_id":\#(ana),"device_id":"ana-phone"}"#, "demo", client, "not.a.token"),
                ("opened", #"{"delivery_id":\#(bo),"device_id":"bo-phone"}"#, "demo", client, anaToken),
                ("opened", #"{"delivery_id":\#(bo),"device_id":"ana-phone"}"#, "demo", ServerHarness.server, nil),
                ("opened", #"{"device_id":"ana-phone"}"#, "demo", ServerHarness.server, nil),
                ("opened", #"{"delivery_id":"x1","device_id":"ana-phone"}"#, "demo", ServerHarness.server, nil),
                ("opened", #"{"delivery_id":\#(ana),"#, "demo", ServerHarness.server, nil),
                ("opened", #"[1,2]"#, "demo", ServerHarness.server, nil),
                (
                    "opened", #"{"delivery_id":\#(ana),"device_id":"ana-phone","action":"APPROVE"}"#, "demo",
                    ServerHarness.server, nil
                ),
                (
                    "opened", #"{"delivery_id":\#(ana),"device_id":"ana-phone","at":"noon"}"#, "demo",
                    ServerHarness.server, nil
                ),
                ("opened", #"{"delivery_id":999999999,"device_id":"ana-phone"}"#, "demo", ServerHarness.server, nil),
                ("opened", #"{"delivery_id":\#(ana),"device_id":"a\u0000b"}"#, "demo", ServerHarness.server, nil),
                ("received", #"{"delivery_id":999999999,"device_id":"ana-phone"}"#, "demo", ServerHarness.server, nil),
                ("received", #"{"delivery_id":\#(bo),"device_id":"bo-phone"}"#, "demo", client, anaToken),
                ("received", #"{"receipts":\#(tooMany)}"#, "demo", ServerHarness.server, nil),
                ("received", #"{"receipts":[],"delivery_id":1}"#, "demo", ServerHarness.server, nil),
                (
                    "received", #"{"delivery_id":\#(ana),"device_id":"ana-phone","displayed":"yes"}"#, "demo", client,
                    anaToken
                ),
            ]
            for refusal in refusals {
                var answers: [(status: Int, headers: HTTPFields, body: String)] = []
                for origin in [true, false] {
                    answers.append(
                        try await Self.call(
                            server, refusal.route, refusal.json, app: refusal.app, key: refusal.key,
                            userToken: refusal.token, origin: origin))
                }
                let (routed, direct) = (answers[0], answers[1])
                #expect((400..<500).contains(direct.status), "\(refusal.json): \(direct.status) \(direct.body)")
                #expect(routed.status == direct.status && routed.body == direct.body, "\(refusal.json)")
                #expect(
                    routed.headers[.contentType] == direct.headers[.contentType]
                        && direct.headers[.server] == "herald" && direct.headers[.date] != nil, "\(direct.headers)")
            }

            // Ana's open on the event loop counts; the router's repeat does not, and names the same event.
            let first = Self.object(
                try await Self.call(
                    server, "opened", #"{"delivery_id":\#(ana),"device_id":"ana-phone","action":"FIX"}"#,
                    key: client, userToken: anaToken, origin: false
                ).body)
            let repeated = Self.object(
                try await Self.call(
                    server, "opened", #"{"delivery_id":\#(ana),"device_id":"ana-phone"}"#, origin: true
                ).body)
            #expect(first["counted"] as? Bool == true && first["reports"] as? Int == 1, "\(first)")
            #expect(repeated["counted"] as? Bool == false && repeated["reports"] as? Int == 2, "\(repeated)")
            #expect(
                first["event_id"] as? String != nil && repeated["event_id"] as? String == first["event_id"] as? String)
            // Bo's open the other way round.
            let routedFirst = Self.object(
                try await Self.call(server, "opened", #"{"delivery_id":\#(bo),"device_id":"bo-phone"}"#, origin: true)
                    .body)
            let directAgain = Self.object(
                try await Self.call(server, "opened", #"{"delivery_id":\#(bo),"device_id":"bo-phone"}"#, origin: false)
                    .body)
            #expect(routedFirst["counted"] as? Bool == true && directAgain["counted"] as? Bool == false)
            // A batch of receipts: one counted, one repeat, one never sent.
            let receipts = Self.object(
                try await Self.call(
                    server, "received",
                    #"{"receipts":[{"delivery_id":\#(ana),"device_id":"ana-phone"},{"delivery_id":\#(ana),"device_id":"ana-phone"},{"delivery_id":999999999,"device_id":"ana-phone"}]}"#,
                    origin: false
                ).body)
            let statuses = (receipts["receipts"] as? [[String: Any]])?.map {
                ($0["status"] as? Int, $0["counted"] as? Bool)
            }
            #expect(statuses?.map(\.0) == [200, 200, 404], "\(receipts)")
            #expect(statuses?.map(\.1) == [true, false, nil], "\(receipts)")

            let analytics = try await server.request(.get, "/v1/apps/demo/analytics?type=PN-02")
            let counts = (analytics.body["types"] as? [[String: Any]])?.first
            #expect(counts?["opened"] as? Int == 2 && counts?["received"] as? Int == 1, "\(analytics.body)")
            // Both answers are counted under the route's pattern.
            let text = try await server.metricsText()
            let opened = text.split(separator: "\n").filter {
                $0.hasPrefix("herald_api_requests_total{") && $0.contains(#"route="/v1/apps/{app}/opened""#)
            }
            let total = opened.compactMap { $0.split(separator: " ").last.flatMap { Double($0) } }.reduce(0, +)
            let openCalls = refusals.filter { $0.route == "opened" }.count * 2 + 4
            #expect(Int(total) == openCalls, "\(opened)")
            // The keyless probes, also answered on the event loop, carry a Date as well.
            let probe = try await server.client.execute(uri: "/livez", method: .get)
            #expect(probe.status == .ok && probe.headers[.date]?.hasSuffix(" GMT") == true)
        }
    }

    /// Writes `requests` to the server's port in one write and reads `count` answers back.
    static func pipelined(port: Int, _ requests: [String], count: Int) async throws -> [(status: Int, body: String)] {
        let answers = try await exchange(port: port, Array(requests.joined().utf8), count: count)
        try #require(answers.count == count, "the connection ended after \(answers.count) answers")
        return answers
    }

    /// Writes `bytes` to a new connection to `port` and reads up to `count` answers back: fewer
    /// when the server closes the connection first. The socket blocks, so it runs on a thread
    /// of Dispatch's, never the cooperative pool the server's tasks need.
    static func exchange(port: Int, _ bytes: [UInt8], count: Int) async throws -> [(status: Int, body: String)] {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(with: Result { try blockingExchange(port: port, bytes, count: count) })
            }
        }
    }

    private static func blockingExchange(port: Int, _ bytes: [UInt8], count: Int) throws -> [(
        status: Int, body: String
    )] {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        try #require(socket >= 0)
        defer { close(socket) }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        try #require(connected == 0)
        // The server may answer and close before it has read everything (a refused head).
        _ = bytes.withUnsafeBytes { send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        var received: [UInt8] = []
        var answers: [(status: Int, body: String)] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while answers.count < count {
            let read = buffer.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, 0) }
            guard read > 0 else { break }
            received += buffer[..<read]
            // Every whole answer in what was read (each has a Content-Length).
            while let end = received.firstRange(of: Array("\r\n\r\n".utf8)) {
                let head = String(decoding: received[..<end.lowerBound], as: UTF8.self)
                let length =
                    head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
                    .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
                guard received.count >= end.upperBound + length else { break }
                let status = Int(head.split(separator: " ").dropFirst().first ?? "") ?? 0
                answers.append(
                    (status, String(decoding: received[end.upperBound..<end.upperBound + length], as: UTF8.self)))
                received.removeFirst(end.upperBound + length)
            }
        }
        return answers
    }

    static func post(_ path: String, _ json: String, key: String = ServerHarness.server) -> String {
        "POST \(path) HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer \(key)\r\nContent-Type: application/json\r\n"
            + "Content-Length: \(json.utf8.count)\r\n\r\n\(json)"
    }

    static func get(_ path: String, key: String = ServerHarness.server) -> String {
        "GET \(path) HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer \(key)\r\n\r\n"
    }

    @Test(
        "requests pipelined on one connection are answered in their order, around reports taken on the event loop and those passed on"
    )
    func pipelinedOrder() async throws {
        try await withServer(configure: { $0.clock = .manual }) { server in
            let ids = try await Self.deliveries(server, (0..<3).map { ("phone-\($0)", "u\($0)") })
            let port = try #require(server.client.port)
            func open(_ index: Int) -> String {
                Self.post("/v1/apps/demo/opened", #"{"delivery_id":\#(ids[index]),"device_id":"phone-\#(index)"}"#)
            }
            // A report, a route, a report, the same report again, a receipt, a route: six answers in order.
            let answers = try await Self.pipelined(
                port: port,
                [
                    open(0), Self.get("/v1/apps/demo/analytics"), open(1), open(1),
                    Self.post("/v1/apps/demo/received", #"{"delivery_id":\#(ids[2]),"device_id":"phone-2"}"#),
                    Self.get("/livez"),
                ], count: 6)
            #expect(answers.map(\.status) == [200, 200, 200, 200, 200, 200], "\(answers)")
            let bodies = answers.map { Self.object($0.body) }
            #expect(bodies[0]["delivery_id"] as? Int64 == ids[0] && bodies[0]["counted"] as? Bool == true)
            #expect(bodies[1]["types"] != nil, "\(bodies[1])")
            #expect(bodies[2]["delivery_id"] as? Int64 == ids[1] && bodies[2]["counted"] as? Bool == true)
            #expect(bodies[3]["delivery_id"] as? Int64 == ids[1] && bodies[3]["counted"] as? Bool == false)
            #expect(bodies[4]["delivery_id"] as? Int64 == ids[2] && bodies[4]["counted"] as? Bool == true)
            #expect(bodies[5]["status"] as? String == "ok", "\(bodies[5])")
        }
    }

    /// A channel with a `DeviceReportHandler` of `server`'s runtime and nothing behind it.
    static func channel(_ server: ServerHarness) async throws -> NIOAsyncTestingChannel {
        let reports = DeviceReports(runtime: server.runtime)
        return try await NIOAsyncTestingChannel { channel in
            try channel.pipeline.syncOperations.addHandler(DeviceReportHandler(reports: reports))
        }
    }

    @Test(
        "the handler answers a report itself and passes on what it does not take — another route, an Origin, the admin key, a body of unknown length — untouched"
    )
    func takesOnlyReports() async throws {
        try await withServer(configure: { $0.clock = .manual }) { server in
            let id = try await Self.deliveries(server, [("phone", "u")])[0]
            let body = ByteBuffer(string: #"{"delivery_id":\#(id),"device_id":"phone"}"#)
            func head(
                _ path: String, _ extra: HTTPFields = [:], key: String = ServerHarness.server, length: Bool = true
            ) -> HTTPRequest {
                var fields: HTTPFields = [.authorization: "Bearer \(key)"]
                fields[.contentLength] = length ? "\(body.readableBytes)" : nil
                for field in extra { fields[field.name] = field.value }
                return HTTPRequest(method: .post, scheme: nil, authority: "h", path: path, headerFields: fields)
            }
            let passed: [HTTPRequest] = [
                head("/v1/apps/demo/notifications"), head("/v1/apps/demo/opened?x=1"), head("/v1/apps/demo/opened/"),
                head("/v1/apps/demo/opened", [.origin: "https://app.example"]),
                head("/v1/apps/demo/opened", key: ServerHarness.admin), head("/v1/apps/demo/opened", length: false),
                head("/v1/apps/demo/opened", [.contentLength: "\(DeviceReports.bodyLimit + 1)"]),
            ]
            for request in passed {
                let channel = try await Self.channel(server)
                for part: HTTPRequestPart in [.head(request), .body(body), .end(nil)] {
                    try await channel.writeInbound(part)
                }
                // Each part comes out unchanged, and nothing was answered.
                guard case .head(let out) = try await channel.readInbound(as: HTTPRequestPart.self) else {
                    Issue.record("\(request.path ?? ""): no head passed on")
                    continue
                }
                #expect(out == request)
                guard case .body(let bytes) = try await channel.readInbound(as: HTTPRequestPart.self) else {
                    Issue.record("no body passed on")
                    continue
                }
                #expect(bytes == body)
                guard case .end = try await channel.readInbound(as: HTTPRequestPart.self) else {
                    Issue.record("no end passed on")
                    continue
                }
                #expect(try await channel.readOutbound(as: HTTPResponsePart.self) == nil)
                _ = try await channel.finish()
            }
            // The report itself: answered by the handler, nothing passed on.
            let channel = try await Self.channel(server)
            for part: HTTPRequestPart in [.head(head("/v1/apps/demo/opened")), .body(body), .end(nil)] {
                try await channel.writeInbound(part)
            }
            guard case .head(let response) = try await channel.waitForOutboundWrite(as: HTTPResponsePart.self) else {
                Issue.record("no answer")
                return
            }
            #expect(response.status == .ok)
            guard case .body(let answer) = try await channel.waitForOutboundWrite(as: HTTPResponsePart.self) else {
                Issue.record("no answer's body")
                return
            }
            #expect(Self.object(String(buffer: answer))["counted"] as? Bool == true)
            #expect(try await channel.readInbound(as: HTTPRequestPart.self) == nil)
            _ = try await channel.finish()
        }
    }
}
