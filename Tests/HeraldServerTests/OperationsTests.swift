import Foundation
import HTTPTypes
import HeraldCore
import HeraldEngine
import HeraldSimulator
import HeraldStore
import HeraldTesting
import HummingbirdTesting
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// What an operator sees — `/metrics` behind a key, its labels bounded and escaped,
/// `/healthz` that fails when the database or the dispatcher does, logs without tokens or copy.
@Suite("Operations: metrics, health, logs")
struct OperationsTests {
    @Test("/metrics needs the admin or metrics key; reasons outside the known set are 'other'; routes, not paths")
    func metricsContract() async throws {
        let metricsKey = "metrics-key-0123456789abcdef-0123456789"
        try await withServer(configure: { $0.metricsKey = metricsKey }) { server in
            for key in [nil, ServerHarness.server, ServerHarness.client, "wrong"] {
                let headers: [String] = key.map { ["Bearer \($0)"] } ?? []
                let response = try await server.client.execute(
                    uri: "/metrics", method: .get, headers: headers.isEmpty ? [:] : [.authorization: headers[0]],
                    body: nil)
                #expect(response.status == .unauthorized, "key \(key ?? "none")")
            }
            let byMetricsKey = try await server.client.execute(
                uri: "/metrics", method: .get, headers: [.authorization: "Bearer \(metricsKey)"], body: nil)
            #expect(byMetricsKey.status == .ok)

            let tokens = makeDeviceTokens(2)
            #expect(try await server.register("a", user: "eve", token: tokens[0]) == .created)
            #expect(try await server.register("b", user: "eve", token: tokens[1]) == .created)
            // A peer answering a reason nobody documented: one label value, not one per invention.
            server.simulator.state.script(tokens[1], status: 400, reason: "MadeUpReason")
            let sent = try await server.send(#"{"to":{"user_ids":["eve"]},"alert":{"body":"x"}}"#)
            _ = try await server.settled(try #require(sent.body["id"] as? String))
            let text = try await server.metricsText()
            #expect(text.contains(#"herald_deliveries_total{app="demo",status="sent",reason=""} 1"#))
            #expect(text.contains(#"herald_deliveries_total{app="demo",status="failed",reason="other"} 1"#))
            #expect(!text.contains("Made"))
            for name in [
                "herald_restart_resends_total", "herald_oldest_queued_age_seconds", "herald_deferred_deliveries",
                "herald_last_batch_timestamp_seconds", "herald_fcm_request_seconds",
                "herald_apns_request_seconds_bucket",
                "herald_queue_depth", "herald_notifications_total",
                // What a crash now would send again, and where a wave's time goes.
                "herald_outbox_in_flight", "herald_outbox_unwritten_answers",
                #"herald_outbox_stage_seconds_bucket{stage="prepare""#,
                #"herald_outbox_stage_seconds_bucket{stage="provider""#,
                #"herald_outbox_stage_seconds_bucket{stage="record""#,
            ] {
                #expect(text.contains(name), "\(name) missing")
            }
            // Both answers are written: nothing waits unwritten, nothing is in flight.
            let gauges = text.split(separator: "\n").filter {
                $0.hasPrefix("herald_outbox_in_flight ") || $0.hasPrefix("herald_outbox_unwritten_answers ")
            }
            #expect(gauges.count == 2 && gauges.allSatisfy { $0.hasSuffix(" 0") || $0.hasSuffix(" 0.0") }, "\(gauges)")
            let api = text.split(separator: "\n").filter { $0.hasPrefix("herald_api_requests_total{") }
            #expect(api.contains { $0.contains(#"status="202""#) && $0.contains(#"route="/v1/apps/"#) })
            // Labels carry the route pattern, never ids from the path.
            #expect(!api.contains { $0.contains("/apps/demo/") || $0.contains("eve") })
        }
    }

    @Test(
        "/healthz is 503 naming the database when it does not take writes (SQLite: PRAGMA query_only)",
        .enabled(if: TestDatabase.kind == .sqlite))
    func healthDatabase() async throws {
        try await withServer { server in
            #expect(try await server.request(.get, "/healthz", key: nil).status == .ok)
            try await server.runtime.store.setQueryOnly(true)
            #expect(try await server.request(.get, "/healthz", key: nil).status == .serviceUnavailable)
            let sick = try await server.request(.get, "/healthz", key: ServerHarness.admin)
            #expect(sick.status == .serviceUnavailable)
            #expect(sick.body["database"] as? String == "unwritable")
            #expect((sick.body["problems"] as? [String])?.first?.hasPrefix("database") == true)
            try await server.runtime.store.setQueryOnly(false)
            #expect(try await server.request(.get, "/healthz", key: nil).status == .ok)
        }
    }

    @Test(
        "a database refusing writes as the dispatcher starts pauses the dispatcher, not the server (herald_database_writable 0); once writable, sends go out",
        .enabled(if: TestDatabase.kind == .sqlite))
    func unwritableAtStart() async throws {
        try await withServer(beforeStart: { runtime in try await runtime.store.setQueryOnly(true) }) { server in
            let sick = try await server.request(.get, "/healthz", key: ServerHarness.admin)
            #expect(sick.status == .serviceUnavailable)
            #expect(sick.body["database"] as? String == "unwritable")
            // The gauge the alert rules read (docs/operations/herald.rules.yml).
            func writableGauge() async throws -> Double? {
                try await server.metricsText().split(separator: "\n")
                    .first { $0.hasPrefix("herald_database_writable ") }
                    .flatMap { Double($0.dropFirst("herald_database_writable ".count)) }
            }
            let whileUnwritable = try await writableGauge()
            #expect(whileUnwritable == 0)
            try await server.runtime.store.setQueryOnly(false)
            #expect(try await server.request(.get, "/healthz", key: nil).status == .ok)
            let onceWritable = try await writableGauge()
            #expect(onceWritable == 1)
            let token = makeDeviceTokens(1)[0]
            #expect(try await server.register("a", user: "uma", token: token) == .created)
            let sent = try await server.send(
                #"{"to":{"user_ids":["uma"]},"alert":{"body":"after the database came back"}}"#)
            #expect(sent.status == .accepted)
            let view = try await server.settled(try #require(sent.body["id"] as? String))
            #expect((view["counts"] as? [String: Int])?["sent"] == 1)
            #expect(server.simulator.state.inbox(for: token).count == 1)
        }
    }

    @Test("/healthz is 503 naming the dispatcher when work is due and no batch finishes")
    func healthDispatcher() async throws {
        // The store's clock stands still until the test moves it: the limit is crossed exactly.
        let clock = ManualClock(Date())
        try await withServer(clock: clock, dispatcher: false, dispatcherStallLimit: 1) { server in
            #expect(try await server.register("a", user: "fay", token: makeDeviceTokens(1)[0]) == .created)
            _ = try await server.send(#"{"to":{"user_ids":["fay"]},"alert":{"body":"x"}}"#)
            // Work due for less than the limit is healthy.
            let early = try await server.request(.get, "/healthz", key: nil)
            #expect(early.status == .ok, "\(early.body)")
            clock.advance(by: 1.5)
            let stalled = try await server.request(.get, "/healthz", key: ServerHarness.admin)
            #expect(stalled.status == .serviceUnavailable)
            #expect((stalled.body["problems"] as? [String])?.first?.hasPrefix("dispatcher") == true)
            #expect((stalled.body["dispatcher"] as? [String: Any])?["due"] as? Int == 1)
            try await OutboxLoop(runtime: server.runtime).runOnce()
            let healthy = try await server.request(.get, "/healthz", key: ServerHarness.admin)
            #expect(healthy.status == .ok, "\(healthy.body)")
        }
    }

    @Test(
        "at HERALD_LOG_LEVEL=trace the log holds no device token and no notification text; --dev ignores HERALD_DATABASE_URL and HERALD_ADMIN_KEY"
    )
    func traceLogIsClean() async throws {
        let directory = try makeTemporaryDirectory("herald-trace")
        var environment = ProcessInfo.processInfo.environment
        environment["HERALD_LOG_LEVEL"] = "trace"
        // A dev run never reaches another database (nothing listens on port 1) nor takes this key.
        let ignoredKey = "env-admin-key-a-dev-run-must-ignore-0123"
        environment["HERALD_DATABASE_URL"] = "postgres://herald@127.0.0.1:1/production"
        environment["HERALD_ADMIN_KEY"] = ignoredKey
        let (process, port) = try await startHerald(
            ["serve", "--dev", "--dev-dir", directory + "/dev"], environment: environment, log: directory + "/serve.err"
        )
        defer { if process.isRunning { process.terminate() } }
        let base = "http://127.0.0.1:\(port)"
        let keys = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: directory + "/dev/keys.json")))
                as? [String: String])
        #expect(try await curl(["-H", "Authorization: Bearer \(ignoredKey)", "\(base)/metrics"]).status == 401)
        #expect(try await curl(["-H", "Authorization: Bearer \(keys["admin"]!)", "\(base)/metrics"]).status == 200)
        let startLog = (try? String(contentsOfFile: directory + "/serve.err", encoding: .utf8)) ?? ""
        #expect(
            startLog.contains("HERALD_DATABASE_URL is ignored under --dev")
                && startLog.contains("HERALD_ADMIN_KEY is ignored under --dev"))
        // The secrets --dev writes are the owner's alone from the moment they exist.
        for file in ["keys.json", "demo-AuthKey.p8"] {
            let mode =
                try FileManager.default.attributesOfItem(atPath: directory + "/dev/" + file)[.posixPermissions] as? Int
            #expect(mode == 0o600, "\(file) has mode \(String(mode ?? 0, radix: 8))")
        }
        let token = makeDeviceTokens(1)[0]
        let secretText = "Your lab result is ready: glucose 5.4"
        let registered = try await curl([
            "-X", "POST", "\(base)/v1/apps/demo/devices", "-H", "Authorization: Bearer \(keys["client"]!)", "-H",
            "Content-Type: application/json", "-d",
            #"{"device_id":"phone","user_id":"gus","token":"\#(token)","environment":"sandbox"}"#,
        ])
        #expect(registered.status == 201, "\(registered.body)")
        let sent = try await curl([
            "-X", "POST", "\(base)/v1/apps/demo/notifications", "-H", "Authorization: Bearer \(keys["server"]!)", "-H",
            "Content-Type: application/json", "-d",
            #"{"to":{"user_ids":["gus"]},"alert":{"title":"Lab","body":"\#(secretText)"}}"#,
        ])
        #expect(sent.status == 202, "\(sent.body)")
        let id = try #require(
            (try JSONSerialization.jsonObject(with: Data(sent.body.utf8)) as? [String: Any])?["id"] as? String)
        var delivered = false
        for _ in 0..<200 where !delivered {
            let view = try await curl([
                "\(base)/v1/apps/demo/notifications/\(id)", "-H", "Authorization: Bearer \(keys["server"]!)",
            ])
            delivered = view.body.contains(#""sent":1"#)
            if !delivered { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(delivered)
        process.interrupt()
        await process.waitUntilExit()
        let text = try String(contentsOfFile: directory + "/serve.err", encoding: .utf8)
        #expect(text.contains("trace") || text.contains("debug"), "the log is not at trace level")
        #expect(!text.contains(token), "a full device token is in the log")
        #expect(!text.contains(token.prefix(16)), "more than 8 characters of a device token are in the log")
        #expect(!text.contains("glucose"), "notification text is in the log")
        // The admin key's use is logged with the route and the peer's address, never the key.
        let adminLine =
            text.split(separator: "\n").first { $0.contains("Admin key used") && $0.contains("herald.route=/metrics") }
            ?? ""
        #expect(adminLine.contains("herald.peer=127.0.0.1") && adminLine.contains("herald.status=200"), "\(adminLine)")
        #expect(
            !text.contains(keys["admin"]!) && !text.contains(keys["server"]!) && !text.contains(keys["client"]!),
            "a key is in the log")
    }
}

/// The built `herald` executable beside the test bundle.
var heraldExecutable: URL {
    let beside = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent(
        "herald")
    if FileManager.default.isExecutableFile(atPath: beside.path) { return beside }
    return URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
        .appendingPathComponent(".build/debug/herald")
}

/// Runs `curl -s ARGS`, returning the HTTP status and body.
func curl(_ arguments: [String]) async throws -> (status: Int, body: String) {
    let run = try await runProcess(
        URL(fileURLWithPath: "/usr/bin/env"), ["curl", "-s", "-w", "\n%{http_code}"] + arguments)
    let lines = run.stdout.split(separator: "\n", omittingEmptySubsequences: false)
    return (Int(lines.last ?? "") ?? 0, lines.dropLast().joined(separator: "\n"))
}

/// `herald serve --config config` started on a port of its own choosing and answering `/healthz`;
/// the caller terminates it.
func startHeraldServe(config: String) async throws -> (process: ChildProcess, port: Int) {
    let log = try makeTemporaryDirectory("herald-serve") + "/serve.err"
    return try await startHerald(["serve", "--config", config], log: log)
}

/// `herald ARGUMENTS --port 0` started, its log in `log`, and the port it listens on once
/// `/healthz` answers 200. The port comes from the "Herald listening" line: a port picked free
/// beforehand could be taken by any other test's connection before herald bound it (CI saw that).
/// Fails with the log's last lines when herald exits or does not come up within 60 s.
func startHerald(
    _ arguments: [String], environment: [String: String]? = nil, log: String, scheme: String = "http",
    curlOptions: [String] = []
) async throws -> (process: ChildProcess, port: Int) {
    // The "Herald listening" line is logged at info: a quieter level (CI runs the tests with
    // HERALD_LOG_LEVEL=warning) would hide the port.
    var environment = environment ?? ProcessInfo.processInfo.environment
    if !["trace", "debug", "info"].contains(environment["HERALD_LOG_LEVEL"] ?? "info") {
        environment["HERALD_LOG_LEVEL"] = "info"
    }
    _ = FileManager.default.createFile(atPath: log, contents: nil)
    let process = try ChildProcess(
        heraldExecutable.path, arguments + ["--port", "0"], environment: environment, stderr: log)
    var port: Int?
    for _ in 0..<1200 where process.isRunning {
        if port == nil, let text = try? String(contentsOfFile: log, encoding: .utf8),
            let line = text.split(separator: "\n").first(where: { $0.contains("Herald listening") }),
            let match = line.firstMatch(of: #/herald\.address"?[=:]"?[^ "]*:(\d+)/#),
            let number = Int(match.output.1)
        {
            port = number
        }
        if let port,
            (try? await curl(curlOptions + ["--max-time", "1", "\(scheme)://127.0.0.1:\(port)/healthz"]))?.status == 200
        {
            return (process, port)
        }
        try await Task.sleep(for: .milliseconds(50))
    }
    if process.isRunning { process.terminate() }
    let tail = ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n").suffix(20).joined(
        separator: "\n")
    Issue.record(
        "herald \(arguments.first ?? "") did not start\(port.map { " (listening on \($0))" } ?? ""); its log ends:\n\(tail)"
    )
    throw CancellationError()
}

/// `server.idle_timeout` and `server.max_connections` on the real listener of `herald serve`.
@Suite("API listener limits")
struct ListenerLimitTests {
    @Test("connections beyond server.max_connections wait; idle ones close after server.idle_timeout")
    func limits() async throws {
        let directory = try makeTemporaryDirectory("herald-listener")
        try """
        server: { host: 127.0.0.1, idle_timeout: 3, max_connections: 2 }
        database: { url: "sqlite://\(directory)/herald.sqlite" }
        """.write(toFile: directory + "/herald.yaml", atomically: true, encoding: .utf8)
        let (process, port) = try await startHeraldServe(config: directory + "/herald.yaml")
        defer { if process.isRunning { process.terminate() } }
        // Two idle connections take both places: a third request is not served while they last.
        // Each is served one request first, so the server has surely accepted both (a fixed
        // wait for that was not enough on a loaded box: the third got a place first).
        let first = try #require(openLoopbackConnection(port: port))
        let second = try #require(openLoopbackConnection(port: port))
        defer {
            close(first)
            close(second)
        }
        #expect(healthzOnConnection(first) && healthzOnConnection(second))
        let waiting = try await curl(["--max-time", "0.8", "http://127.0.0.1:\(port)/healthz"])
        #expect(waiting.status == 0, "a third connection was served: \(waiting)")
        // The idle ones are closed by the server after 3 s; then the next request is served.
        #expect(waitForClose(first, seconds: 4))
        #expect(waitForClose(second, seconds: 1))
        let served = try await curl(["--max-time", "2", "http://127.0.0.1:\(port)/healthz"])
        #expect(served.status == 200)
    }
}

/// A TCP connection to loopback `port` that sends nothing; its descriptor, or nil.
func openLoopbackConnection(port: Int) -> Int32? {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let result = withUnsafePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
    }
    guard result == 0 else {
        close(descriptor)
        return nil
    }
    return descriptor
}

/// Whether the peer closes `descriptor` within `seconds` (a read returns end of stream).
func waitForClose(_ descriptor: Int32, seconds: Int) -> Bool {
    var timeout = timeval(tv_sec: seconds, tv_usec: 0)
    setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    var byte: UInt8 = 0
    return recv(descriptor, &byte, 1, 0) == 0
}

/// Sends `GET /healthz` (keep-alive) on a connection and reads the whole answer (within 10 s):
/// whether it was a 200 with its body.
func healthzOnConnection(_ descriptor: Int32) -> Bool {
    let request = Array("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)
    guard send(descriptor, request, request.count, 0) == request.count else { return false }
    var timeout = timeval(tv_sec: 10, tv_usec: 0)
    setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    var received: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
        let count = recv(descriptor, &buffer, buffer.count, 0)
        guard count > 0 else { return false }
        received += buffer[0..<count]
        let text = String(decoding: received, as: UTF8.self)
        guard let end = text.range(of: "\r\n\r\n") else { continue }
        let head = text[..<end.lowerBound].lowercased()
        let length =
            head.split(separator: "\r\n").first { $0.hasPrefix("content-length:") }
            .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
        if received.count >= text.utf8.distance(from: text.utf8.startIndex, to: end.upperBound) + length {
            return head.hasPrefix("http/1.1 200")
        }
    }
}
