import Foundation
import HTTPTypes
import HeraldAPNs
import HeraldCatalog
import HeraldCore
import HeraldEngine
import HeraldFCM
import HeraldPayload
import HeraldSimulator
import HeraldStore
import HeraldTesting
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The delivery pipeline: overlapping batches, bounded shutdown, `outbox.*`.
@Suite("Delivery pipeline")
struct PipelineTests {
    @Test("a hung token does not hold back another user's delivery: it arrives while the hung one is still unanswered")
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
                claimed =
                    try await server.runtime.store.notifications.deliveries(
                        notificationID: firstID, limit: 1, offset: 0
                    ).first?
                    .status == .sending
                try await Task.sleep(for: .milliseconds(10))
            }
            try #require(claimed)
            // Measured from the 202: the accept itself (a durable commit, an fsync) took up to
            // 0.55 s on a loaded box and is not a delay the hung token causes.
            let sending = ContinuousClock.now
            _ = try await server.send(#"{"to":{"user_ids":["bob"]},"alert":{"body":"hello"}}"#)
            let started = ContinuousClock.now
            var arrived: Duration?
            for _ in 0..<500 where arrived == nil {
                if !server.simulator.state.inbox(for: fine).isEmpty { arrived = ContinuousClock.now - started }
                try await Task.sleep(for: .milliseconds(5))
            }
            _ = try #require(arrived, "Bob's notification never arrived (accepting took \(started - sending))")
            // Bob's arrived while the hung one is still unanswered (not lost either): it did not
            // wait behind it. (Ordered, not timed: a wall-clock bound failed on a loaded box.)
            let status = try await server.runtime.store.notifications.deliveries(
                notificationID: firstID, limit: 1, offset: 0
            ).first?
            .status
            #expect(status == .sending)
        }
    }

    @Test(
        "outbox.* (retention included) is read from YAML with ranges, and the retry schedule doubles to its cap and honours Retry-After"
    )
    func configuration() throws {
        let parsed = try HeraldConfiguration.parse(
            yaml:
                "outbox: { batch_size: 100, max_in_flight: 300, max_attempts: 7, retry_base_delay: 2, retry_max_delay: 60, batch_deadline: 30, shutdown_grace: 3, retention: 86400, result_writes: 2 }",
            file: "/tmp/herald.yaml")
        let outbox = parsed.outbox
        #expect(outbox.batchSize == 100 && outbox.maximumInFlight == 300 && outbox.maximumAttempts == 7)
        #expect(outbox.batchDeadline == 30 && outbox.shutdownGrace == 3)
        #expect(outbox.retention == 86_400 && DispatcherConfiguration().retention == 7 * 86_400)
        #expect(outbox.resultWrites == 2 && DispatcherConfiguration().resultWrites == 1)
        // The answer journal: beside a SQLite file by default; on PostgreSQL in systemd's state
        // directory when there is one (the first of a list; a relative one is not taken), else
        // none; a relative directory is read beside the config file; `off` is none.
        let besides = DispatcherConfiguration().answerJournal
        let postgres = "postgres://h@127.0.0.1/h"
        for state in [nil, "/var/lib/herald"] {
            #expect(
                besides.directory(databaseURL: "sqlite:///var/lib/herald/h.sqlite", stateDirectory: state)
                    == "/var/lib/herald/h.sqlite-answers")
            #expect(besides.directory(databaseURL: "sqlite://:memory:", stateDirectory: state) == nil)
        }
        #expect(besides.directory(databaseURL: postgres, stateDirectory: nil) == nil)
        for (state, directory) in [
            ("/var/lib/herald", "/var/lib/herald/answers"), ("/var/lib/herald/", "/var/lib/herald/answers"),
            ("/var/lib/herald:/var/lib/other", "/var/lib/herald/answers"), ("", nil), ("herald", nil),
        ] {
            #expect(besides.directory(databaseURL: postgres, stateDirectory: state) == directory, "\(state)")
        }
        for (yaml, directory) in [("answers", "/tmp/answers"), ("/srv/answers", "/srv/answers"), ("off", nil)] {
            let journal = try HeraldConfiguration.parse(
                yaml: "outbox: { answer_journal: \(yaml) }", file: "/tmp/herald.yaml"
            )
            .outbox.answerJournal
            for state in [nil, "/var/lib/herald"] {
                #expect(journal.directory(databaseURL: postgres, stateDirectory: state) == directory, "\(yaml)")
            }
        }
        #expect([1, 2, 3, 4, 5, 6, 7].map { outbox.retryDelay(attempts: $0) } == [2, 4, 8, 16, 32, 60, 60])
        #expect(outbox.retryDelay(attempts: 1, providerAsked: 90) == 90)
        #expect(outbox.retryDelay(attempts: 1, providerAsked: .infinity) == 3600)
        #expect(outbox.retryDelay(attempts: 1, providerAsked: -5) == 2)
        for bad in [
            "outbox: { batch_size: 0 }", "outbox: { shutdown_grace: 301 }",
            "outbox: { retry_base_delay: 90, retry_max_delay: 60 }", "outbox: { batches: 3 }",
            "outbox: { retention: 60 }", "outbox: { result_writes: 0 }", "outbox: { result_writes: 5 }",
            "outbox: { answer_journal: '' }",
            "outbox: { answer_journal: [a] }",
        ] {
            #expect(throws: ConfigurationError.self, "\(bad)") {
                try HeraldConfiguration.parse(yaml: bad, file: "/tmp/herald.yaml")
            }
        }
    }

    @Test(
        "SIGTERM with an unreachable APNs endpoint exits once outbox.shutdown_grace is over and keeps the delivery queued"
    )
    func boundedShutdown() async throws {
        let directory = try makeTemporaryDirectory("herald-shutdown")
        let databaseURL = try await TestDatabase.url("shutdown")
        // A listener that never accepts: TCP connects, TLS never answers.
        let (blackhole, blackholePort) = boundLoopbackSocket()
        defer { close(blackhole) }
        listen(blackhole, 64)
        let key = TestSigningKey()
        try key.pem.write(toFile: directory + "/AuthKey.p8", atomically: true, encoding: .utf8)
        try """
        server: { host: 127.0.0.1 }
        database: { url: "\(databaseURL)" }
        admin_key: "admin-0123456789abcdef-0123456789abcdef"
        outbox: { shutdown_grace: 2 }
        apps:
          - id: demo
            keys: { server: "server-0123456789abcdef" }
            apns: { team_id: "\(key.signingKey.teamID)", key_id: "\(key.signingKey.keyID)", key_file: "AuthKey.p8",
                    topic: "com.example.demo", environment: sandbox, endpoint: "https://127.0.0.1:\(blackholePort)" }
        """.write(toFile: directory + "/herald.yaml", atomically: true, encoding: .utf8)
        let (process, port) = try await startHeraldServe(config: directory + "/herald.yaml")
        defer { if process.isRunning { process.terminate() } }
        let auth = ["-H", "Authorization: Bearer server-0123456789abcdef", "-H", "Content-Type: application/json"]
        let device = try await curl(
            auth + [
                "-X", "POST", "http://127.0.0.1:\(port)/v1/apps/demo/devices", "-d",
                #"{"device_id":"d1","user_id":"u1","token":"\#(String(repeating: "ef", count: 32))"}"#,
            ])
        #expect(device.status == 201)
        let sent = try await curl(
            auth + [
                "-X", "POST", "http://127.0.0.1:\(port)/v1/apps/demo/notifications", "-d",
                #"{"to":{"user_ids":["u1"]},"alert":{"body":"x"}}"#,
            ])
        #expect(sent.status == 202)
        try await Task.sleep(for: .seconds(1))
        let stopping = ContinuousClock.now
        process.terminate()
        while process.isRunning && ContinuousClock.now - stopping < .seconds(40) {
            try await Task.sleep(for: .milliseconds(20))
        }
        // The grace is 2 s; the bound leaves a loaded machine room without letting a stop that
        // ignored the grace (the default is 20 s) pass.
        let took = ContinuousClock.now - stopping
        #expect(!process.isRunning && took < .seconds(15), "herald serve took \(took) to stop")
        #expect(process.terminationStatus == 0)
        // The database keeps the delivery queued for the next start, not lost and not failed.
        let object = try JSONSerialization.jsonObject(with: Data(sent.body.utf8))
        let body = try #require(object as? [String: Any])
        let idText = try #require(body["id"] as? String)
        let id = try #require(UUID(uuidString: idText))
        let store = try await HeraldStore.open(url: databaseURL)
        let deliveries = try await store.notifications.deliveries(notificationID: id, limit: 10, offset: 0)
        await store.close()
        #expect(deliveries.map(\.status) == [.queued], "\(deliveries)")
    }

    @Test("Alice's scheduled message is not delivered to Bob after the device changes hands: it fails DeviceReassigned")
    func reassignedDevice() async throws {
        let token = String(repeating: "1a", count: 32)
        // On a manual clock: the message falls due only when the clock is moved, after the iPad
        // changed hands (a 1.5 s wall-clock margin lost the race under a loaded machine).
        try await withServer(configure: { $0.clock = .manual }) { server in
            #expect(
                try await server.register("shared-ipad", user: "alice", token: token, key: ServerHarness.server)
                    == .created)
            let deliverAt = HeraldTime.format(server.runtime.store.now.addingTimeInterval(60))
            let sent = try await server.send(
                #"{"to":{"user_ids":["alice"]},"alert":{"body":"for Alice only"},"deliver_at":"\#(deliverAt)"}"#)
            let id = try #require(sent.body["id"] as? String)
            #expect(sent.body["recipients"] as? Int == 1)
            // The iPad is handed to Bob before the message is due.
            let moved = try await server.register("shared-ipad", user: "bob", token: token, key: ServerHarness.server)
            #expect(moved == .ok || moved == .created)
            try await TrackTests.advance(server, to: server.runtime.store.now.addingTimeInterval(61))
            let view = try await server.settled(id)
            #expect((view["counts"] as? [String: Int])?["failed"] == 1)
            #expect((view["deliveries"] as? [[String: Any]])?.first?["reason"] as? String == "DeviceReassigned")
            #expect(server.simulator.state.inbox(for: token).isEmpty)
            // Bob's own notifications reach the iPad.
            let bob = try await server.send(#"{"to":{"user_ids":["bob"]},"alert":{"body":"for Bob"}}"#)
            _ = try await server.settled(try #require(bob.body["id"] as? String))
            #expect(server.simulator.state.inbox(for: token).count == 1)
        }
    }

    @Test("every app's APNs and FCM clients run on the server's one provider event-loop group, closed once at shutdown")
    func sharedProviderLoops() async throws {
        let apnsToken = String(repeating: "5e", count: 32)
        let otherToken = String(repeating: "6f", count: 32)
        try await withServer(configure: { configuration in
            var other = configuration.apps[0]
            other.id = "other"
            other.serverKeys = ["other-server-key-0123456789ab"]
            other.clientKeys = []
            other.userTokenSecret = nil
            other.catalogFile = nil
            other.fcm = nil
            configuration.apps.append(other)
        }) { server in
            #expect(
                try await server.register("phone", user: "ana", token: apnsToken, key: ServerHarness.server) == .created
            )
            let pixel = try await server.request(
                .post, "/v1/apps/demo/devices",
                json: #"{"device_id":"pixel","user_id":"ana","platform":"fcm","token":"fcm-shared-loops"}"#)
            #expect(pixel.status == .created)
            let registered = try await server.request(
                .post, "/v1/apps/other/devices", key: "other-server-key-0123456789ab",
                json: #"{"device_id":"tablet","user_id":"bo","token":"\#(otherToken)","environment":"sandbox"}"#)
            #expect(registered.status == .created)
            let sent = try await server.send(
                #"{"to":{"user_ids":["ana"]},"alert":{"body":"to both of Ana's devices"}}"#)
            let view = try await server.settled(try #require(sent.body["id"] as? String))
            #expect((view["counts"] as? [String: Int])?["sent"] == 2)
            let otherSent = try await server.request(
                .post, "/v1/apps/other/notifications", key: "other-server-key-0123456789ab",
                json: #"{"to":{"user_ids":["bo"]},"alert":{"body":"from the other app"}}"#)
            #expect(otherSent.status == .accepted)
            for _ in 0..<250 where server.simulator.state.inbox(for: otherToken).isEmpty {
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(server.simulator.state.inbox(for: apnsToken).count == 1)
            #expect(server.simulator.state.inbox(for: "fcm-shared-loops").count == 1)
            #expect(server.simulator.state.inbox(for: otherToken).count == 1)

            // Three clients, one group.
            guard
                case .client(let demoAPNs) = try #require(server.runtime.apps["demo"]).apnsClient(
                    environment: "sandbox"),
                case .client(let otherAPNs) = try #require(server.runtime.apps["other"]).apnsClient(
                    environment: "sandbox"),
                let demoFCM = server.runtime.apps["demo"]?.fcmClient
            else {
                Issue.record("a client is missing")
                return
            }
            #expect(demoAPNs !== otherAPNs)
            #expect(demoAPNs.eventLoopGroup === otherAPNs.eventLoopGroup)
            #expect(demoAPNs.eventLoopGroup === demoFCM.eventLoopGroup)

            // Once the providers are shut down, no new client starts on the stopped loops.
            await server.runtime.shutdown(gracePeriod: 0)
            guard
                case .unavailable(let reason) = try #require(server.runtime.apps["other"]).apnsClient(
                    environment: "production")
            else {
                Issue.record("a client was made after shutdown")
                return
            }
            #expect(reason == .clientShutdown)
        }
    }

    @Test("the dispatcher's copy of freshly accepted contents keeps the last ones and forgets the oldest")
    func recentContents() throws {
        let recent = RecentContents(capacity: 3)
        let ids = (0..<5).map { _ in UUID() }
        for (index, id) in ids.enumerated() {
            var content = NotificationContent()
            content.data = ["n": .int(index)]
            recent.insert(
                id, StoredNotificationContent(content: content),
                apnsPayload: try APNSRenderer.template(content, payloadKey: "demo", notificationID: id))
        }
        let (held, payloads) = recent.held(ids)
        #expect(Set(held.keys) == Set(ids.suffix(3)))
        #expect(held[ids[4]]?.content.data?["n"] == .int(4))
        // The rendered payloads go with their contents.
        #expect(Set(payloads.keys) == Set(ids.suffix(3)))
        #expect(payloads[ids[2]]?.notificationID == ids[2].uuidString.lowercased())
        let payload = try #require(payloads[ids[2]]?.payload(deliveryID: 7))
        #expect(
            String(decoding: payload, as: UTF8.self)
                == #"{"aps":{},"demo":{"herald":{"d":7,"n":"\#(ids[2].uuidString.lowercased())"},"n":2}}"#)
    }

    @Test(
        "batches hand their requests over in claim order: each waits for the ones before it to be submitted, not answered"
    )
    func submissionOrder() async {
        let order = SubmissionOrder()
        let turns = (0..<6).map { _ in SubmissionTurn(order) }
        // A batch with nothing to send gives its turn up early; it holds nobody up.
        turns[2].release()
        final class Log: Sendable { let order = Mutex<[Int]>([]) }
        let log = Log()
        await withDiscardingTaskGroup { group in
            for index in [5, 3, 1, 4, 0] {
                group.addTask {
                    await turns[index].wait()
                    log.order.withLock { $0.append(index) }
                    turns[index].release()
                    // Its second submission (after a probe) does not wait again.
                    await turns[index].wait()
                }
            }
        }
        #expect(log.order.withLock { $0 } == [0, 1, 3, 4, 5])
    }

    @Test(
        "clock: manual: POST /v1/dev/clock moves the server's clock and a send scheduled two days ahead goes when due (not Expired); admin key, a valid duration, and 404 on the wall clock"
    )
    func devClock() async throws {
        let token = makeDeviceTokens(1)[0]
        try await withServer(configure: { $0.clock = .manual }) { server in
            #expect(try await server.register("phone", user: "ana", token: token) == .created)
            let start = try #require(server.runtime.devClock?.now)
            let later = HeraldTime.format(start.addingTimeInterval(2 * 86_400))
            let sent = try await server.send(
                #"{"to":{"user_ids":["ana"]},"alert":{"body":"in two days"},"deliver_at":"\#(later)"}"#)
            #expect(sent.status == .accepted)
            // The clock stands still: nothing is due, however long the test waits.
            try await server.settle()
            #expect(server.simulator.state.inbox(for: token).isEmpty)

            let noKey = try await server.request(.post, "/v1/dev/clock", json: #"{"advance":"48h"}"#)
            #expect(noKey.status == .unauthorized)
            for bad in [#"{"advance":"soon"}"#, #"{"advance":"-1h"}"#, #"{"advance":"400d"}"#, "{}"] {
                let refused = try await server.request(.post, "/v1/dev/clock", key: ServerHarness.admin, json: bad)
                #expect(refused.status == .badRequest, "\(bad)")
                #expect((refused.body["error"] as? [String: Any])?["field"] as? String == "advance", "\(bad)")
            }
            let moved = try await server.request(
                .post, "/v1/dev/clock", key: ServerHarness.admin, json: #"{"advance":"1d23h59m"}"#)
            #expect(moved.status == .ok)
            #expect(moved.body["advanced_seconds"] as? Double == 172_740)
            try await server.settle()
            #expect(server.simulator.state.inbox(for: token).isEmpty, "a minute early")
            let due = try await server.request(
                .post, "/v1/dev/clock", key: ServerHarness.admin, json: #"{"advance":"60s"}"#)
            #expect(due.body["now"] as? String == later)
            try await eventually { server.simulator.state.inbox(for: token).count == 1 }
            // At most ten years past where it started: the tenth year-long move (2 days in) is refused.
            for move in 1...10 {
                let year = try await server.request(
                    .post, "/v1/dev/clock", key: ServerHarness.admin, json: #"{"advance":"366d"}"#)
                #expect(year.status == (move < 10 ? .ok : .badRequest), "move \(move)")
            }
            // Two days after it was stored, past outbox.max_age (24 h) since then: sent, not Expired.
            let view = try await server.settled(try #require(sent.body["id"] as? String))
            #expect((view["counts"] as? [String: Int])?["sent"] == 1)
        }
        // On the wall clock the path does not exist.
        try await withServer { server in
            let absent = try await server.request(
                .post, "/v1/dev/clock", key: ServerHarness.admin, json: #"{"advance":"1h"}"#)
            #expect(absent.status == .notFound)
        }
    }

    @Test("durations: 90, 90s, 15m, 48h, 2d, 1h30m, 1.5h; nothing else; the clock setting (system, manual)")
    func durations() throws {
        let cases: [(String, Double?)] = [
            ("90", 90), ("90s", 90), ("15m", 900), ("48h", 172_800), ("2d", 172_800), ("1h30m", 5_400), ("1.5h", 5_400),
            ("", nil), ("h", nil), ("10x", nil), ("1h30", nil), ("soon", nil), ("-1h", nil),
        ]
        for (text, seconds) in cases { #expect(HeraldDuration.seconds(text) == seconds, "\(text)") }
        // The clock setting that enables POST /v1/dev/clock outside --dev.
        #expect(try HeraldConfiguration.parse(yaml: "clock: manual", file: "/tmp/herald.yaml").clock == .manual)
        #expect(HeraldConfiguration().clock == .system)
        #expect(DevClock.make(dev: false, setting: .system) == nil)
        #expect(throws: ConfigurationError.self) {
            try HeraldConfiguration.parse(yaml: "clock: sometimes", file: "/tmp/herald.yaml")
        }
    }

    @Test("deliveries past their expiration or outbox.max_age end failed Expired, unsent")
    func expired() async throws {
        let token = String(repeating: "2b", count: 32)
        let clock = ManualClock(Date())
        try await withServer(clock: clock) { server in
            #expect(
                try await server.register("old-phone", user: "carol", token: token, key: ServerHarness.server)
                    == .created)
            let expiration = Int(clock.now.timeIntervalSince1970) + 1
            let deliverAt = HeraldTime.format(clock.now.addingTimeInterval(2.5))
            let sent = try await server.send(
                #"{"to":{"user_ids":["carol"]},"alert":{"body":"stale"},"expiration":\#(expiration),"deliver_at":"\#(deliverAt)"}"#
            )
            let id = try #require(sent.body["id"] as? String)
            try await server.settle()
            #expect(server.simulator.state.inbox(for: token).isEmpty)
            // Due at 2.5 s and expired at 1 s: when it falls due, it ends Expired, unsent.
            clock.advance(by: 3)
            let view = try await server.settled(id)
            #expect((view["deliveries"] as? [[String: Any]])?.first?["reason"] as? String == "Expired")
            #expect(server.simulator.state.inbox(for: token).isEmpty)
        }
    }
}

/// A thread-safe count for callbacks.
final class Counter: Sendable {
    private let storage = Mutex(0)
    func add() { storage.withLock { $0 += 1 } }
    var value: Int { storage.withLock { $0 } }
}
