import Foundation
import HeraldServer
import HeraldStore
import HeraldTesting
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The delivery pipeline of issue #11: overlapping batches, bounded shutdown, `outbox.*`.
@Suite("Delivery pipeline")
struct PipelineTests {
    @Test("a hung token does not delay another user's delivery by more than 1 s")
    func hungToken() async throws {
        let stuck = String(repeating: "ab", count: 32)
        let fine = String(repeating: "cd", count: 32)
        try await withServer { server in
            server.simulator.state.faults.hangTokens = [stuck]
            #expect(try await server.register("stuck-phone", user: "stuck", token: stuck) == .created)
            #expect(try await server.register("bob-phone", user: "bob", token: fine) == .created)
            let first = try await server.send(#"{"to":{"user_ids":["stuck"]},"alert":{"body":"never answered"}}"#)
            let firstText = try #require(first.body["id"] as? String)
            let firstID = try #require(UUID(uuidString: firstText))
            // The hung delivery is claimed and on the wire before Bob's is sent.
            var claimed = false
            for _ in 0..<200 where !claimed {
                claimed = try await server.runtime.store.deliveries(notificationID: firstID, limit: 1, offset: 0).first?.status == .sending
                try await Task.sleep(for: .milliseconds(10))
            }
            try #require(claimed)
            let started = ContinuousClock.now
            _ = try await server.send(#"{"to":{"user_ids":["bob"]},"alert":{"body":"hello"}}"#)
            var arrived: Duration?
            for _ in 0..<500 where arrived == nil {
                if !server.simulator.state.inbox(for: fine).isEmpty { arrived = ContinuousClock.now - started }
                try await Task.sleep(for: .milliseconds(5))
            }
            let waited = try #require(arrived, "Bob's notification never arrived")
            #expect(waited < .seconds(1), "Bob waited \(waited) behind a hung token")
            // The hung one is still unanswered, not lost.
            let status = try await server.runtime.store.deliveries(notificationID: firstID, limit: 1, offset: 0).first?.status
            #expect(status == .sending)
        }
    }

    @Test("outbox.* is read from YAML with ranges, and the retry schedule doubles to its cap and honours Retry-After")
    func configuration() throws {
        let parsed = try HeraldConfiguration.parse(
            yaml: "outbox: { batch_size: 100, max_in_flight: 300, max_attempts: 7, retry_base_delay: 2, retry_max_delay: 60, batch_deadline: 30, shutdown_grace: 3 }",
            file: "/tmp/herald.yaml")
        let outbox = parsed.outbox
        #expect(outbox.batchSize == 100 && outbox.maximumInFlight == 300 && outbox.maximumAttempts == 7)
        #expect(outbox.batchDeadline == 30 && outbox.shutdownGrace == 3)
        #expect([1, 2, 3, 4, 5, 6, 7].map { outbox.retryDelay(attempts: $0) } == [2, 4, 8, 16, 32, 60, 60])
        #expect(outbox.retryDelay(attempts: 1, providerAsked: 90) == 90)
        #expect(outbox.retryDelay(attempts: 1, providerAsked: .infinity) == 3600)
        #expect(outbox.retryDelay(attempts: 1, providerAsked: -5) == 2)
        for bad in ["outbox: { batch_size: 0 }", "outbox: { shutdown_grace: 301 }", "outbox: { retry_base_delay: 90, retry_max_delay: 60 }", "outbox: { batches: 3 }"] {
            #expect(throws: ConfigurationError.self, "\(bad)") { try HeraldConfiguration.parse(yaml: bad, file: "/tmp/herald.yaml") }
        }
    }

    @Test("SIGTERM with an unreachable APNs endpoint exits within 30 s and keeps the delivery queued")
    func boundedShutdown() async throws {
        let directory = try makeTemporaryDirectory("herald-shutdown")
        let port = freeLoopbackPort()
        // A listener that never accepts: TCP connects, TLS never answers.
        let blackhole = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(blackhole) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                _ = bind(blackhole, socketAddress, length)
                return getsockname(blackhole, socketAddress, &length)
            }
        }
        listen(blackhole, 64)
        let blackholePort = Int(UInt16(bigEndian: address.sin_port))
        let key = TestSigningKey()
        try key.pem.write(toFile: directory + "/AuthKey.p8", atomically: true, encoding: .utf8)
        try """
            server: { host: 127.0.0.1, port: \(port) }
            database: { url: "sqlite://\(directory)/herald.sqlite" }
            admin_key: "admin-0123456789abcdef-0123456789abcdef"
            apps:
              - id: demo
                keys: { server: "server-0123456789abcdef" }
                apns: { team_id: "\(key.signingKey.teamID)", key_id: "\(key.signingKey.keyID)", key_file: "AuthKey.p8",
                        topic: "com.example.demo", environment: sandbox, endpoint: "https://127.0.0.1:\(blackholePort)" }
            """.write(toFile: directory + "/herald.yaml", atomically: true, encoding: .utf8)
        let process = Process()
        process.executableURL = heraldExecutable
        process.arguments = ["serve", "--config", directory + "/herald.yaml"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer { if process.isRunning { process.terminate() } }
        var up = false
        for _ in 0..<300 where !up {
            up = (try? await curl(["--max-time", "1", "http://127.0.0.1:\(port)/healthz"]))?.status == 200
            if !up { try await Task.sleep(for: .milliseconds(100)) }
        }
        try #require(up, "herald serve did not start")
        let auth = ["-H", "Authorization: Bearer server-0123456789abcdef", "-H", "Content-Type: application/json"]
        let device = try await curl(
            auth + ["-X", "POST", "http://127.0.0.1:\(port)/v1/apps/demo/devices", "-d",
                #"{"device_id":"d1","user_id":"u1","token":"\#(String(repeating: "ef", count: 32))"}"#])
        #expect(device.status == 201)
        let sent = try await curl(
            auth + ["-X", "POST", "http://127.0.0.1:\(port)/v1/apps/demo/notifications", "-d", #"{"to":{"user_ids":["u1"]},"alert":{"body":"x"}}"#])
        #expect(sent.status == 202)
        try await Task.sleep(for: .seconds(1))
        let stopping = ContinuousClock.now
        process.terminate()
        while process.isRunning && ContinuousClock.now - stopping < .seconds(40) {
            try await Task.sleep(for: .milliseconds(100))
        }
        let took = ContinuousClock.now - stopping
        #expect(!process.isRunning && took < .seconds(30), "herald serve took \(took) to stop")
        #expect(process.terminationStatus == 0)
        // The database keeps the delivery queued for the next start, not lost and not failed.
        let object = try JSONSerialization.jsonObject(with: Data(sent.body.utf8))
        let body = try #require(object as? [String: Any])
        let idText = try #require(body["id"] as? String)
        let id = try #require(UUID(uuidString: idText))
        let store = try await HeraldStore.open(url: "sqlite://\(directory)/herald.sqlite")
        let deliveries = try await store.deliveries(notificationID: id, limit: 10, offset: 0)
        await store.close()
        #expect(deliveries.map(\.status) == [.queued], "\(deliveries)")
    }
}
