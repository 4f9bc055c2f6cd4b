import Foundation
import HTTPTypes
import HeraldAPI
import HeraldCore
import HeraldEngine
import HeraldServer
import HeraldSimulator
import HeraldTesting
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

/// The route fuzzer: random and mutated requests — methods, paths, percent-escapes, headers,
/// keys, cookies, form, JSON and raw bodies, sizes — to every route the OpenAPI document lists
/// and every dashboard route, through the whole router in process (middleware, auth, store,
/// dispatcher). No answer may be a 5xx and the process must live: a trap ends the test run.
/// The opens and receipts, which the connection's event loop answers below the router
/// (`DeviceReportHandler`), are fuzzed again over real connections.
///
/// The routes are taken in turn, so every route gets its share whatever the length of the run.
/// `HERALD_ROUTE_FUZZ_SECONDS` bounds the run in time (CI: 60), else `HERALD_ROUTE_FUZZ_REQUESTS`
/// in count (default: 6 a route, about 400 — the minute-long CI stage is the deep run);
/// `HERALD_ROUTE_FUZZ_SEED` replays a run (each run prints its seed).
@Suite("Route fuzzer")
struct RouteFuzzTests {
    /// The dashboard's routes (the OpenAPI document lists its form routes; these are all of them).
    static let dashboardRoutes: [(HTTPRequest.Method, String)] = [
        (.get, "/dashboard"), (.get, "/dashboard/login"), (.post, "/dashboard/login"), (.post, "/dashboard/logout"),
        (.get, "/dashboard/overview"), (.get, "/dashboard/apps/{app}"), (.get, "/dashboard/apps/{app}/users"),
        (.get, "/dashboard/apps/{app}/notifications"), (.get, "/dashboard/apps/{app}/notifications/{id}"),
        (.get, "/dashboard/apps/{app}/notifications/{id}/live"), (.get, "/dashboard/apps/{app}/compose"),
        (.post, "/dashboard/apps/{app}/compose"), (.get, "/dashboard/apps/{app}/analytics"),
        (.get, "/dashboard/apps/{app}/catalog"),
        (.get, "/dashboard/assets/herald.css"), (.get, "/dashboard/assets/herald.js"),
    ]

    /// Every (method, path template) the OpenAPI document lists.
    static func documentedRoutes() throws -> [(HTTPRequest.Method, String)] {
        var routes: [(HTTPRequest.Method, String)] = []
        var path: String?
        for line in OpenAPIDocument.yaml.split(separator: "\n") {
            if line.hasPrefix("  /"), line.hasSuffix(":"), !line.hasPrefix("   ") {
                path = String(line.dropFirst(2).dropLast())
            } else if let current = path, line.hasPrefix("    "), !line.hasPrefix("     ") {
                let name = line.trimmingCharacters(in: .whitespaces).dropLast()
                if let method = HTTPRequest.Method(String(name).uppercased()),
                    ["get", "post", "put", "delete"].contains(String(name))
                {
                    routes.append((method, current))
                }
            } else if !line.hasPrefix(" ") {
                path = nil
            }
        }
        return routes
    }

    @Test(
        "random and mutated requests to every route in turn, dashboard included: no 5xx, the process lives and still delivers"
    )
    func fuzz() async throws {
        let routes = try Self.documentedRoutes() + Self.dashboardRoutes
        #expect(routes.count > 40)
        // In process (Hummingbird's router test client): every request reaches the router, with
        // no connection for a malformed one to close.
        try await Self.fuzz(routes, testing: .router, requestsPerRoute: 6)
    }

    @Test(
        "random and mutated opens and receipts over real connections, where the event loop answers them: no 5xx, the process lives and still delivers"
    )
    func fuzzDeviceReports() async throws {
        let routes = try Self.documentedRoutes().filter { $0.1.hasSuffix("/opened") || $0.1.hasSuffix("/received") }
        #expect(routes.count == 2)
        // A connection a request: at most 10,000 in a timed run, well inside the ephemeral ports
        // their TIME_WAIT holds.
        try await Self.fuzz(routes, testing: .live, requestsPerRoute: 150, maximum: 10_000)
    }

    /// Sends one fuzzed request: through the test client in process; over live connections, as
    /// bytes on a connection of its own (a malformed request closes its connection, and the
    /// test client would not open another).
    static func send(_ request: FuzzGenerator.Request, _ server: ServerHarness) async throws -> (
        status: Int, body: String
    ) {
        guard let port = server.client.port else {
            let response = try await server.client.execute(
                uri: request.uri, method: request.method, headers: request.headers, body: request.body)
            return (Int(response.status.code), String(buffer: response.body))
        }
        var head = "\(request.method.rawValue) \(request.uri) HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        for field in request.headers where field.name != .contentLength {
            head += "\(field.name.rawName): \(field.value)\r\n"
        }
        let body = request.body.map { Array($0.readableBytesView) } ?? []
        head += "Content-Length: \(body.count)\r\n\r\n"
        guard let answer = try await DeviceReportTests.exchange(port: port, Array(head.utf8) + body, count: 1).first
        else {
            throw ChannelError.ioOnClosedChannel
        }
        return answer
    }

    /// Sends `requestsPerRoute` requests a route (or what the environment asks, see above; never
    /// more than `maximum`) to `routes` in turn through `testing`, and checks the answers and
    /// the process.
    static func fuzz(
        _ routes: [(HTTPRequest.Method, String)], testing: TestingSetup, requestsPerRoute: Int, maximum: Int? = nil
    ) async throws {
        let environment = ProcessInfo.processInfo.environment
        let seconds = environment["HERALD_ROUTE_FUZZ_SECONDS"].flatMap { Int($0) }
        let seed = environment["HERALD_ROUTE_FUZZ_SEED"].flatMap { UInt64($0) } ?? UInt64.random(in: 1...UInt64.max)
        let count = environment["HERALD_ROUTE_FUZZ_REQUESTS"].flatMap { Int($0) } ?? requestsPerRoute * routes.count
        print("route fuzzer: seed \(seed) (HERALD_ROUTE_FUZZ_SEED=\(seed) replays it), \(routes.count) routes")
        try await withServer(
            clock: nil,
            configure: { configuration in
                configuration.clock = .manual
                configuration.limits.addressBurst = 1_000_000
                // Browsers' calls too: an origin the app lists, and preflights.
                configuration.apps[0].corsOrigins = ["https://app.example.com"]
            }, testing: testing
        ) { server in
            // A session for the dashboard's pages, so the fuzzer gets past the sign-in too.
            let browser = DashboardTests.Browser(server)
            #expect(try await browser.signIn(ServerHarness.admin) == .seeOther)
            let session = browser.cookies.map { "\($0.key)=\($0.value)" }.joined(separator: "; ")
            let overview = try await browser.go(.get, "/dashboard/overview")
            let csrf = DashboardTests.csrf(overview.html) ?? ""
            let sent = try await server.send(#"{"to":{"user_ids":["fuzz"]},"alert":{"body":"seed"}}"#)
            let notification = sent.body["id"] as? String ?? UUID().uuidString

            var generator = FuzzGenerator(seed: seed, session: session, csrf: csrf, notification: notification)
            let started = ContinuousClock.now
            var sentCount = 0
            var statuses: [Int: Int] = [:]
            var unanswered = 0
            var failures: [String] = []
            while failures.count < 5 {
                if let seconds {
                    if ContinuousClock.now - started > .seconds(seconds) { break }
                } else if sentCount >= count {
                    break
                }
                if let maximum, sentCount >= maximum { break }
                let route = routes[sentCount % routes.count]
                let request = generator.request(route)
                sentCount += 1
                let answer: (status: Int, body: String)
                do {
                    answer = try await Self.send(request, server)
                } catch {
                    // The request could not be sent as HTTP, or the server closed the connection on
                    // it (a malformed request): no answer to judge; the process is checked below.
                    unanswered += 1
                    continue
                }
                statuses[answer.status, default: 0] += 1
                let probe = request.uri.hasPrefix("/readyz") || request.uri.hasPrefix("/healthz")
                if answer.status >= 500 && !(probe && answer.status == 503) {
                    failures.append(
                        "\(request.method) \(request.uri.prefix(200)) headers \(request.headers) body \(request.body.map { String(buffer: $0).prefix(300) } ?? "") → \(answer.status) \(answer.body.prefix(300))"
                    )
                }
            }
            print(
                "route fuzzer: \(sentCount) requests, \(unanswered) unanswered, statuses \(statuses.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", "))"
            )
            for failure in failures { Issue.record("5xx (seed \(seed)): \(failure)") }
            #expect(sentCount > 0 && unanswered < sentCount / 10)
            // Still alive, and still delivering.
            #expect(try await server.client.execute(uri: "/livez", method: .get).status == .ok)
            let token = makeDeviceTokens(1)[0]
            #expect(
                try await server.register("after-fuzz", user: "after-fuzz", token: token, key: ServerHarness.server)
                    == .created)
            let after = try await server.send(#"{"to":{"user_ids":["after-fuzz"]},"alert":{"body":"after the fuzz"}}"#)
            _ = try await server.settled(try #require(after.body["id"] as? String))
            #expect(server.simulator.state.inbox(for: token).count == 1)
        }
    }
}

/// Random requests from a seed (SplitMix64: the same seed, the same requests).
struct FuzzGenerator {
    struct Request {
        var method: HTTPRequest.Method
        var uri: String
        var headers: HTTPFields
        var body: ByteBuffer?
    }

    var state: UInt64
    let session: String
    let csrf: String
    let notification: String

    init(seed: UInt64, session: String, csrf: String, notification: String) {
        state = seed
        self.session = session
        self.csrf = csrf
        self.notification = notification
    }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    mutating func int(_ bound: Int) -> Int { Int(next() % UInt64(max(bound, 1))) }
    mutating func chance(_ percent: Int) -> Bool { int(100) < percent }
    mutating func pick<T>(_ items: [T]) -> T { items[int(items.count)] }

    static let methods: [HTTPRequest.Method] = [.get, .post, .put, .delete, .patch, .head, .options]
    static let keys = [
        "Bearer \(ServerHarness.admin)", "Bearer \(ServerHarness.server)", "Bearer \(ServerHarness.client)", "Bearer ",
        "Bearer x", "Basic abc",
        "bearer \(ServerHarness.server)", "Bearer \(ServerHarness.server) extra", String(repeating: "A", count: 9000),
    ]
    /// Values that once trapped or that parsers get wrong: huge and odd numbers, escapes, bytes.
    static let atoms = [
        "", "0", "-1", "1e300", "-1e300", "inf", "NaN", "0x1p70", "9223372036854775807", "9223372036854775808",
        "99999999999999999999999",
        "1.5", "true", "null", "%", "%zz", "%00", "%C3%28", "%FF", "a b", "#", "..", "../..", "/", "//", "é", "🙂",
        "\u{0}", "demo", "silent",
        "nope", "fuzz", "PN-02", "new_provider", "2026-11-27T12:00:00Z", "2026-13-45T99:99:99Z", "-1d", "48h", "366d",
        "100000d",
        String(repeating: "a", count: 300), String(repeating: "9", count: 40),
    ]

    mutating func atom() -> String { Self.atoms[int(Self.atoms.count)] }

    mutating func percentEscaped(_ text: String) -> String {
        text.addingPercentEncoding(
            withAllowedCharacters: .urlPathAllowed.subtracting(CharacterSet(charactersIn: "/?#%"))) ?? "x"
    }

    mutating func pathValue(_ name: String) -> String {
        switch int(6) {
        case 0: return name == "app" ? pick(["demo", "silent", "nope"]) : name == "id" ? notification : "fuzz"
        case 1: return pick(["%", "%zz", "%C3%28", "%FF%FE", "a%2Fb", "%00", "..", "%2e%2e"])
        case 2: return percentEscaped(atom())
        case 3: return String(repeating: pick(["a", "%41", "%C3%A9"]), count: 1 + int(600))
        default:
            return name == "app"
                ? "demo"
                : name == "id" ? pick([notification, UUID().uuidString, "not-a-uuid"]) : percentEscaped(atom())
        }
    }

    mutating func path(_ template: String) -> String {
        var result = ""
        for segment in template.split(separator: "/", omittingEmptySubsequences: false) {
            if !result.isEmpty || segment.isEmpty { result += result.isEmpty && segment.isEmpty ? "" : "/" }
            if segment.hasPrefix("{") && segment.hasSuffix("}") {
                result += pathValue(String(segment.dropFirst().dropLast()))
            } else {
                result += segment
            }
        }
        if !result.hasPrefix("/") { result = "/" + result }
        if chance(10) { result += pick(["/", "//x", "/%", "/.."]) }
        if chance(40) {
            let names = [
                "limit", "offset", "cursor", "before", "type", "status", "user_id", "locale", "from", "to", "days",
                "id", "%", "a b",
            ]
            var items: [String] = []
            for _ in 0..<(1 + int(4)) {
                let value = chance(50) ? percentEscaped(atom()) : pick(["%", "%zz", "+", "&&", "=", "%FF"])
                items.append(pick(names) + "=" + value)
            }
            result += "?" + items.joined(separator: "&")
        }
        return result
    }

    /// A JSON value: sometimes well-formed with hostile leaves, sometimes deep or broken.
    mutating func json(depth: Int = 0) -> String {
        switch depth > 3 ? int(4) : int(9) {
        case 0:
            return
                "\"\(atom().replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\""))\""
        case 1: return pick(["1e300", "-1", "9223372036854775808", "1.5", "0", "true", "null", "-0", "1E400"])
        case 2: return "\"\(String(repeating: "x", count: int(5000)))\""
        case 3: return String(repeating: "[", count: 1 + int(600)) + String(repeating: "]", count: 1 + int(600))
        default:
            let fields = [
                "to", "user_ids", "all", "alert", "body", "title", "type", "data", "device_id", "user_id", "token",
                "platform", "environment",
                "locale", "time_zone", "deliver_at", "cancel_key", "delivery_id", "action", "at", "advance", "label",
                "text", "name", "events",
                "delta", "value", "origin", "cursor", "quiet_hours", "types", "attributes", "push_type", "expiration",
                "priority", "badge",
                "idempotency_key", "exclude_device_ids", "lines", "steps", "users",
            ]
            var parts: [String] = []
            for _ in 0..<int(6) { parts.append("\"\(pick(fields))\":\(json(depth: depth + 1))") }
            return "{" + parts.joined(separator: ",") + "}"
        }
    }

    /// Bodies the real routes take, with a leaf replaced now and then.
    static let samples = [
        #"{"to":{"user_ids":["fuzz"]},"alert":{"body":"x"}}"#,
        #"{"to":{"all":true},"type":"PN-02","data":{"Source":"S","source_id":"s"}}"#,
        #"{"device_id":"d","user_id":"fuzz","token":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","environment":"sandbox"}"#,
        #"{"device_id":"p","user_id":"fuzz","platform":"fcm","token":"t"}"#,
        #"{"time_zone":"Europe/Paris","locale":"fr-FR"}"#,
        #"{"delivery_id":1,"device_id":"d"}"#, #"{"advance":"1h"}"#,
        #"{"name":"sync.failed","user_id":"fuzz","data":{}}"#,
        #"{"cancel_key":"k"}"#, #"{"device_id":"d","label":"done"}"#, #"{"device_id":"d","text":"hi"}"#,
        #"{"types":{"PN-02":false}}"#,
        #"{"delta":1,"name":"inbox"}"#, #"{"user_ids":["fuzz"]}"#, #"{"device_id":"d","token":"x.y.z"}"#,
    ]

    mutating func mutated(_ sample: String) -> String {
        var text = sample
        for _ in 0..<(1 + int(3)) {
            switch int(4) {
            case 0:
                // Replace a number or string leaf.
                if let range = text.range(of: #""[a-z_]+":("[^"]*"|[-0-9.a-z]+)"#, options: .regularExpression) {
                    let key = text[range].prefix { $0 != ":" }
                    text.replaceSubrange(range, with: "\(key):\(json(depth: 2))")
                }
            case 1:
                // Cut it short.
                text = String(text.prefix(int(text.count + 1)))
            case 2:
                // Insert a random byte.
                let index = text.index(text.startIndex, offsetBy: int(text.count + 1))
                text.insert(Character(UnicodeScalar(UInt8(truncatingIfNeeded: next()))), at: index)
            default:
                break
            }
        }
        return text
    }

    mutating func formBody() -> [UInt8] {
        var fields = ["csrf=" + (chance(70) ? csrf : atom())]
        let names = ["key", "action", "type", "title", "body", "data", "user_ids", "deliver_at", "cancel_key"]
        for _ in 0..<int(6) {
            let value: String
            switch int(4) {
            case 0: value = percentEscaped(atom())
            case 1: value = pick(["%", "%zz", "a b", "#", "%C3%28", "+", "%2B", "a=b=c", "&&&"])
            case 2:
                value =
                    pick(["send", "preview", "fuzz", "PN-02", "Source=S\nsource_id=s", #"{"a":1}"#])
                    .addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
            default: value = String(repeating: "x", count: int(3000))
            }
            fields.append(pick(names) + "=" + value)
        }
        var bytes = Array(fields.joined(separator: "&").utf8)
        if chance(10) { bytes.append(UInt8(truncatingIfNeeded: next())) }
        return bytes
    }

    mutating func request(_ route: (HTTPRequest.Method, String)) -> Request {
        let method = chance(85) ? route.0 : pick(Self.methods)
        var headers: HTTPFields = [:]
        if chance(80) { headers[.authorization] = pick(Self.keys) }
        if chance(15) {
            headers[.origin] = pick(["https://app.example.com", "null", "https://evil.example", percentEscaped(atom())])
            if chance(40) { headers[.accessControlRequestMethod] = pick(["POST", "GET", atom()]) }
        }
        if route.1.hasPrefix("/dashboard") || chance(5) {
            headers[.cookie] =
                chance(75)
                ? session
                : pick([
                    "__Host-herald_session=v1.admin.-.1e300.x.y", "herald_session=v1.app.ZGVtbw.inf.x.y",
                    "__Host-herald_session=\(percentEscaped(atom()))", "a", "=;=;",
                ])
        }
        if chance(20) {
            headers[HTTPField.Name("X-Herald-User-Token")!] = pick([
                ServerHarness.userToken("fuzz"), "a.b.c", "eyJhbGciOiJub25lIn0.eyJzdWIiOiJmdXp6IiwiZXhwIjoxZTMwMH0.",
                percentEscaped(atom()),
            ])
        }
        var body: [UInt8]?
        if method == .post || method == .put || chance(5) {
            switch int(10) {
            case 0, 1, 2:
                body = Array(mutated(pick(Self.samples)).utf8)
                headers[.contentType] = "application/json"
            case 3, 4:
                body = Array(json().utf8)
                headers[.contentType] = pick(["application/json", "text/plain"])
            case 5, 6:
                body = formBody()
                headers[.contentType] = "application/x-www-form-urlencoded"
            case 7:
                body = Array("--X\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\n\(atom())\r\n--X--\r\n".utf8)
                headers[.contentType] = "multipart/form-data; boundary=X"
            case 8:
                body = (0..<int(2000)).map { _ in UInt8(truncatingIfNeeded: next()) }
                if chance(50) {
                    headers[.contentType] = pick([
                        "application/json", "application/x-www-form-urlencoded", "application/x-ndjson",
                    ])
                }
            default:
                body = Array(pick(Self.samples).utf8)
                headers[.contentType] = "application/json"
            }
        }
        return Request(method: method, uri: path(route.1), headers: headers, body: body.map { ByteBuffer(bytes: $0) })
    }
}

/// The OpenAPI document and the router agree: every route the API serves is documented, and
/// every documented route is served. The dashboard's HTML pages and assets are the only routes
/// the document leaves out (its form routes are in it, for schemathesis).
@Suite("OpenAPI document against the router")
struct OpenAPIRouterTests {
    /// A path with its parameters unnamed: the router's `/v1/apps/:app/users/:user` and the
    /// document's `/v1/apps/{app}/users/{user_id}` are both `/v1/apps/{}/users/{}`.
    static func shape(_ path: String) -> String {
        path.split(separator: "/", omittingEmptySubsequences: false).map { segment in
            segment.hasPrefix(":") || segment.hasPrefix("{") ? "{}" : String(segment)
        }.joined(separator: "/")
    }

    @Test("every served route is in /openapi.yaml and every documented route is served")
    func routesMatch() async throws {
        try await withServer(dispatcher: false) { server in
            let served = Set(
                HeraldServices.apiRouter(runtime: server.runtime).routes.map {
                    "\($0.method.rawValue) \(Self.shape("\($0.path)"))"
                })
            let documented = Set(try RouteFuzzTests.documentedRoutes().map { "\($0.0.rawValue) \(Self.shape($0.1))" })
            let pages = Set(RouteFuzzTests.dashboardRoutes.map { "\($0.0.rawValue) \(Self.shape($0.1))" })
            #expect(documented.count >= 40)
            #expect(
                documented.subtracting(served).isEmpty,
                "documented but not served: \(documented.subtracting(served).sorted())")
            #expect(
                served.subtracting(documented).subtracting(pages).isEmpty,
                "served but not documented: \(served.subtracting(documented).subtracting(pages).sorted())")
        }
    }
}
