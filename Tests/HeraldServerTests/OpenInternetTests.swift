import Foundation
import HTTPTypes
import HeraldCore
import HeraldEngine
import HeraldSimulator
import HeraldStore
import HeraldTesting
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// What a stranger can send to the API's port, with no key: every request below once killed the
/// process or cost the store work. Each answers a 4xx, and the same server still answers
/// `/livez` and delivers a send afterwards.
@Suite("Safe on the open internet")
struct OpenInternetTests {
    static func raw(
        _ server: ServerHarness, _ method: HTTPRequest.Method, _ path: String, headers: HTTPFields = [:],
        body: [UInt8]? = nil
    ) async throws -> (status: HTTPResponse.Status, headers: HTTPFields, text: String) {
        let response = try await server.client.execute(
            uri: path, method: method, headers: headers, body: body.map { ByteBuffer(bytes: $0) })
        return (response.status, response.headers, String(buffer: response.body))
    }

    /// The process still answers and still delivers: `/livez` is 200 and a send reaches the inbox.
    static func stillServes(_ server: ServerHarness, user: String) async throws {
        #expect(try await raw(server, .get, "/livez").status == .ok)
        let token = makeDeviceTokens(1)[0]
        #expect(try await server.register("phone-\(user)", user: user, token: token) == .created)
        let sent = try await server.send(#"{"to":{"user_ids":["\#(user)"]},"alert":{"body":"still here"}}"#)
        _ = try await server.settled(try #require(sent.body["id"] as? String))
        #expect(server.simulator.state.inbox(for: token).count == 1)
    }

    @Test(
        "form bodies a browser never sends (a raw space, %, #, a 0xff byte, a bad escape) are a 4xx at the sign-in; a multipart or JSON body is a 415; Herald keeps serving"
    )
    func hostileForms() async throws {
        try await withServer { server in
            let form: HTTPFields = [.contentType: "application/x-www-form-urlencoded"]
            for body in ["key=a b", "key=%", "key=#", "key=%zz", "%=x", "key=%E9"].map({ Array($0.utf8) }) + [
                [0x6b, 0x3d, 0xff]
            ] {
                let answer = try await Self.raw(server, .post, "/dashboard/login", headers: form, body: body)
                #expect((400..<500).contains(answer.status.code), "\(body): \(answer.status)")
            }
            let bad = try await Self.raw(
                server, .post, "/dashboard/login", headers: form, body: Array("csrf=x&key=%".utf8))
            #expect(bad.status == .badRequest && bad.text.contains(#""field":"body""#))
            let multipart: HTTPFields = [.contentType: "multipart/form-data; boundary=X"]
            let parts = Array("--X\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\na b\r\n--X--\r\n".utf8)
            #expect(
                try await Self.raw(server, .post, "/dashboard/login", headers: multipart, body: parts).status
                    == .unsupportedMediaType)
            #expect(
                try await Self.raw(server, .post, "/dashboard/login", body: Array("key=x".utf8)).status
                    == .unsupportedMediaType)

            // Signed in, the composer refuses a multipart POST (what fetch sends for a FormData) with 415.
            let browser = DashboardTests.Browser(server)
            #expect(try await browser.signIn(ServerHarness.server) == .seeOther)
            var headers = multipart
            headers[.cookie] = browser.cookies.map { "\($0.key)=\($0.value)" }.joined(separator: "; ")
            #expect(
                try await Self.raw(server, .post, "/dashboard/apps/demo/compose", headers: headers, body: parts).status
                    == .unsupportedMediaType)
            try await Self.stillServes(server, user: "forms")
        }
    }

    @Test(
        "forged session cookies (expiry 1e300, inf, -1, 0x1p70, 30 digits; a foreign app's; garbage) are not signed in, and Herald keeps serving"
    )
    func forgedCookies() async throws {
        try await withServer { server in
            let demo = Base64URL.encode(Data("demo".utf8))
            let values = [
                "v1.admin.-.1e300.x.y", "v1.app.\(demo).inf.x.y", "v1.app.\(demo).-1.x.y", "v1.admin.-.0x1p70.x.y",
                "v1.admin.-.\(String(repeating: "9", count: 30)).x.y",
                "v1.app.\(Base64URL.encode(Data("nope".utf8))).1.x.y",
                "v1.app.%%%.1.x.y", "v1", String(repeating: ".", count: 5000), "v1.admin.-.1.x.y.z",
            ]
            for value in values {
                for name in ["__Host-herald_session", "herald_session"] {
                    let answer = try await Self.raw(
                        server, .get, "/dashboard/overview", headers: [.cookie: "\(name)=\(value)"])
                    #expect(answer.status == .seeOther && answer.headers[.location] == "/dashboard/login", "\(value)")
                }
            }
            try await Self.stillServes(server, user: "cookies")
        }
    }

    @Test(
        "sign-in: a login token the client made up is refused; a key under 32 characters cannot sign in; failures are throttled per address with 429 and Retry-After; a sign-out is stored, so the cookie is over on every node"
    )
    func signIn() async throws {
        try await withServer(configure: { configuration in
            // A server key long enough for the API (16) but not for the dashboard (32).
            configuration.apps[1].serverKeys = ["short-server-key-0123"]
        }) { server in
            // Any equal pair the client picks (the old double submit) is refused.
            var headers: HTTPFields = [
                .contentType: "application/x-www-form-urlencoded", .cookie: "__Host-herald_login=x",
            ]
            let chosen = try await Self.raw(
                server, .post, "/dashboard/login", headers: headers,
                body: Array("csrf=x&key=\(ServerHarness.server)".utf8))
            #expect(chosen.status == .forbidden)
            let browser = DashboardTests.Browser(server)
            #expect(try await browser.signIn("short-server-key-0123") == .unauthorized)

            // Five failures from this address (the short key was one) are free; the sixth makes the next wait.
            for _ in 0..<4 { #expect(try await browser.signIn("wrong-key-0123456789-0123456789-01") == .unauthorized) }
            #expect(try await browser.signIn("wrong-key-0123456789-0123456789-01") == .unauthorized)
            // Four failures more from this address (counted straight into the throttle): its wait
            // is now 16 s, longer than any pause of a loaded test run before the next try.
            for _ in 0..<4 {
                for peer in ["127.0.0.1", "::1"] { server.runtime.signInThrottle.failed(peer: peer, now: Date()) }
            }
            let page = try await browser.go(.get, "/dashboard/login")
            headers = [.contentType: "application/x-www-form-urlencoded"]
            headers[.cookie] = browser.cookies.map { "\($0.key)=\($0.value)" }.joined(separator: "; ")
            let csrf = DashboardTests.csrf(page.html) ?? ""
            let throttled = try await Self.raw(
                server, .post, "/dashboard/login", headers: headers,
                body: Array("csrf=\(csrf)&key=\(ServerHarness.server)".utf8))
            #expect(throttled.status == .tooManyRequests)
            #expect(throttled.headers[.retryAfter].flatMap { Int($0) }.map { $0 >= 2 } == true)

            // Another address is not held up (the throttle forgets this one after a success).
            server.runtime.signInThrottle.succeeded(peer: "127.0.0.1")
            server.runtime.signInThrottle.succeeded(peer: "::1")
            #expect(try await browser.signIn(ServerHarness.server) == .seeOther)
            let cookie = try #require(browser.cookies["__Host-herald_session"])
            let overview = try await browser.go(.get, "/dashboard/apps/demo")
            #expect(overview.status == .ok)
            #expect(
                try await browser.go(
                    .post, "/dashboard/logout", form: ["csrf": DashboardTests.csrf(overview.html) ?? ""]
                ).status == .seeOther)
            let nonce = String(cookie.split(separator: ".")[4])
            #expect(try await server.runtime.store.dashboard.isSignedOut(nonce: nonce))
            let replay = try await Self.raw(
                server, .get, "/dashboard/apps/demo", headers: [.cookie: "__Host-herald_session=\(cookie)"])
            #expect(replay.status == .seeOther)
        }
    }

    @Test(
        "/livez does no I/O; /readyz and /healthz answer a stranger only their status, the operator everything; a flood of probes is one computation a second"
    )
    func probes() async throws {
        try await withServer(healthInterval: .seconds(3600)) { server in
            let live = try await Self.raw(server, .get, "/livez")
            #expect(live.status == .ok && live.text == #"{"status":"ok"}"#)
            for path in ["/readyz", "/healthz"] {
                let anonymous = try await server.request(.get, path, key: nil)
                #expect(anonymous.status == .ok && anonymous.body.keys.sorted() == ["status"], "\(path)")
                let detailed = try await server.request(.get, path, key: ServerHarness.admin)
                #expect(
                    detailed.body["database"] as? String == "writable" && detailed.body["dispatcher"] != nil, "\(path)")
            }
            let before = server.runtime.healthCache.computations
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<16 {
                    group.addTask { for _ in 0..<20 { _ = try await server.request(.get, "/healthz", key: nil) } }
                }
                try await group.waitForAll()
            }
            #expect(server.runtime.healthCache.computations == before)
        }
    }

    @Test(
        "keyless probes are answered on the connection from the cached report, in order behind a request still being answered; with a key or a stale report the router answers"
    )
    func probesOnTheConnection() async throws {
        try await withServer(healthInterval: .seconds(3600)) { server in
            let port = try #require(server.client.port)
            #expect(try await server.request(.get, "/readyz", key: ServerHarness.admin).status == .ok)
            let before = server.runtime.healthCache.computations
            let descriptor = try #require(openLoopbackConnection(port: port))
            defer { close(descriptor) }
            // A request the router answers, then two probes, pipelined on one connection.
            let pipelined = Array(
                ("GET /v1/apps/demo/users/nobody/devices HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(ServerHarness.server)\r\n\r\n"
                    + "GET /livez HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\n\r\n").utf8)
            #expect(send(descriptor, pipelined, pipelined.count, 0) == pipelined.count)
            var timeout = timeval(tv_sec: 10, tv_usec: 0)
            setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            var received = ""
            var buffer = [UInt8](repeating: 0, count: 8192)
            while received.components(separatedBy: "HTTP/1.1 200").count < 4 {
                let count = recv(descriptor, &buffer, buffer.count, 0)
                guard count > 0 else { break }
                received += String(decoding: buffer[0..<count], as: UTF8.self)
            }
            let devices = try #require(received.range(of: #"{"devices":[]}"#))
            let statuses = received.ranges(of: #"{"status":"ok"}"#)
            #expect(statuses.count == 2 && statuses.allSatisfy { $0.lowerBound > devices.upperBound }, "\(received)")
            #expect(server.runtime.healthCache.computations == before)
            let metrics = try await server.metricsText()
            #expect(
                metrics.split(separator: "\n").contains {
                    $0.hasPrefix("herald_api_requests_total{") && $0.contains(#"route="/livez""#)
                })
        }
    }

    @Test("a NUL character in a path or a JSON text field is a 400, not a 500 (PostgreSQL cannot store it)")
    func nulCharacters() async throws {
        try await withServer { server in
            let path = try await server.request(.get, "/v1/apps/demo/users/%00/badges")
            #expect(
                path.status == .badRequest && (path.body["error"] as? [String: Any])?["field"] as? String == "user_id")
            let token = makeDeviceTokens(1)[0]
            let body = try await server.request(
                .post, "/v1/apps/demo/devices",
                json: #"{"device_id":"nul\u0000","user_id":"nul","token":"\#(token)","environment":"sandbox"}"#)
            if TestDatabase.kind == .postgres {
                #expect(
                    body.status == .badRequest
                        && (body.body["error"] as? [String: Any])?["code"] as? String == "invalid_text", "\(body)")
            } else {
                #expect(body.status.code < 500, "\(body)")
            }
        }
    }

    @Test("POST …/actions reads at most 4 KiB, and an unknown app is refused before its body is read")
    func actionBodies() async throws {
        try await withServer { server in
            let big = #"{"device_id":"x","token":"\#(String(repeating: "a", count: 5000))"}"#
            let json: HTTPFields = [.contentType: "application/json"]
            let tooLarge = try await Self.raw(
                server, .post, "/v1/apps/demo/actions", headers: json, body: Array(big.utf8))
            #expect(tooLarge.status == .contentTooLarge && tooLarge.text.contains(#""field":"body""#))
            let unknown = try await Self.raw(
                server, .post, "/v1/apps/nope/actions", headers: json, body: Array(big.utf8))
            #expect(unknown.status == .unauthorized)
            let small = try await Self.raw(
                server, .post, "/v1/apps/demo/actions", headers: json,
                body: Array(#"{"device_id":"x","token":"abc"}"#.utf8))
            #expect(small.status == .unauthorized)
        }
    }

    @Test("client-key registrations beyond the user's burst answer 429 with Retry-After; the server key is not limited")
    func rateLimits() async throws {
        try await withServer(configure: { configuration in
            configuration.limits.userBurst = 3
            configuration.limits.userPerMinute = 1
        }) { server in
            let tokens = makeDeviceTokens(5)
            for index in 0..<3 {
                #expect(try await server.register("d\(index)", user: "mallory", token: tokens[index]) == .created)
            }
            let limited = try await server.request(
                .post, "/v1/apps/demo/devices", key: ServerHarness.client,
                userToken: ServerHarness.userToken("mallory"),
                json: #"{"device_id":"d3","user_id":"mallory","token":"\#(tokens[3])","environment":"sandbox"}"#)
            #expect(limited.status == .tooManyRequests)
            #expect((limited.body["error"] as? [String: String])?["code"] == "rate_limited")
            // Another user is not held up by mallory's bucket; the server key has none.
            #expect(try await server.register("e0", user: "eve", token: tokens[4]) == .created)
            #expect(
                try await server.register("d3", user: "mallory", token: tokens[3], key: ServerHarness.server)
                    == .created)
            #expect(try await server.metricsText().contains(#"herald_rate_limited_total{app="demo"} 1"#))
        }
    }

    @Test(
        "resolve: a device without a delivery of the notification cannot resolve it (403), and the replacement goes only to the user's devices that had one"
    )
    func resolveNeedsADelivery() async throws {
        try await withServer { server in
            let tokens = makeDeviceTokens(3)
            #expect(try await server.register("alice-phone", user: "alice", token: tokens[0]) == .created)
            #expect(try await server.register("alice-mac", user: "alice", token: tokens[1]) == .created)
            let sent = try await server.send(#"{"to":{"user_ids":["alice"]},"alert":{"body":"Weekly digest"}}"#)
            let id = try #require(sent.body["id"] as? String)
            _ = try await server.settled(id)
            // Registered after the send: it had no delivery of it.
            #expect(try await server.register("evil", user: "alice", token: tokens[2]) == .created)
            let refused = try await server.request(
                .post, "/v1/apps/demo/notifications/\(id)/resolve", key: ServerHarness.client,
                userToken: ServerHarness.userToken("alice"),
                json: #"{"device_id":"evil","label":"Security alert: call +1 555 0100"}"#)
            #expect(
                refused.status == .forbidden
                    && (refused.body["error"] as? [String: Any])?["field"] as? String == "device_id")
            let resolved = try await server.request(
                .post, "/v1/apps/demo/notifications/\(id)/resolve",
                json: #"{"device_id":"alice-phone","label":"✓ Read on iPhone"}"#)
            #expect(resolved.status == .ok && resolved.body["devices"] as? Int == 1, "\(resolved.body)")
            try await eventually { server.simulator.state.inbox(for: tokens[1]).count == 2 }
            #expect(server.simulator.state.inbox(for: tokens[2]).isEmpty)
        }
    }

    @Test(
        "a user's devices come a page at a time (limit, next_cursor), oldest first; a bad limit or cursor is a 400 naming it"
    )
    func devicePages() async throws {
        try await withServer { server in
            let tokens = makeDeviceTokens(5)
            for (index, token) in tokens.enumerated() {
                #expect(
                    try await server.register("d\(index)", user: "pat", token: token, key: ServerHarness.server)
                        == .created)
            }
            var seen: [String] = []
            var cursor: String?
            repeat {
                let query =
                    "limit=2"
                    + (cursor.map { "&cursor=\($0.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? $0)" }
                        ?? "")
                let page = try await server.request(.get, "/v1/apps/demo/users/pat/devices?\(query)")
                #expect(page.status == .ok)
                let devices = (page.body["devices"] as? [[String: Any]]) ?? []
                #expect(devices.count <= 2)
                seen += devices.compactMap { $0["device_id"] as? String }
                cursor = page.body["next_cursor"] as? String
            } while cursor != nil && seen.count < 10
            #expect(seen == ["d0", "d1", "d2", "d3", "d4"])
            for bad in [
                "limit=0", "limit=1001", "limit=1e3", "limit=-1", "limit=abc", "cursor=%25", "cursor=1e300.x",
                "cursor=abc",
            ] {
                let answer = try await server.request(.get, "/v1/apps/demo/users/pat/devices?\(bad)")
                #expect(answer.status == .badRequest, "\(bad)")
            }
            // The other lists refuse a limit that is not a whole number in range, too.
            for path in ["/v1/apps/demo/audit?limit=abc", "/v1/apps/demo/audit?limit=99999999999999999999"] {
                let answer = try await server.request(.get, path)
                #expect(
                    answer.status == .badRequest
                        && (answer.body["error"] as? [String: Any])?["field"] as? String == "limit", "\(path)")
            }
        }
    }

    @Test(
        "max_devices_per_user: devices beyond the limit are deactivated, and deleted once inactive for 30 days, so a user cannot grow the table without bound"
    )
    func deviceLimitDeletes() async throws {
        let clock = ManualClock(Date(timeIntervalSince1970: 1_800_000_000))
        try await withServer(clock: clock, app: { $0.maxDevicesPerUser = 2 }) { (server: ServerHarness) async throws in
            let tokens = makeDeviceTokens(4)
            for index in 0..<3 {
                #expect(
                    try await server.register(
                        "m\(index)", user: "mallory", token: tokens[index], key: ServerHarness.server) == .created)
                clock.advance(by: 1)
            }
            func devices() async throws -> [String: Bool] {
                let body = try await server.request(.get, "/v1/apps/demo/users/mallory/devices").body
                return Dictionary(
                    uniqueKeysWithValues: ((body["devices"] as? [[String: Any]]) ?? []).compactMap { device in
                        (device["device_id"] as? String).map { ($0, device["active"] as? Bool ?? false) }
                    })
            }
            #expect(try await devices() == ["m0": false, "m1": true, "m2": true])
            clock.advance(by: 31 * 86_400)
            #expect(
                try await server.register("m3", user: "mallory", token: tokens[3], key: ServerHarness.server)
                    == .created)
            // m0 was inactive for 31 days beyond the limit: gone; m1 just became inactive: kept.
            #expect(try await devices() == ["m1": false, "m2": true, "m3": true])
        }
    }
}
