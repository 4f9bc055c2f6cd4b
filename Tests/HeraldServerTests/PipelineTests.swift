import Foundation
import HTTPTypes
import HeraldAPNs
import HeraldCatalog
import HeraldCore
import HeraldFCM
import HeraldPayload
import HeraldServer
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
                "outbox: { batch_size: 100, max_in_flight: 300, max_attempts: 7, retry_base_delay: 2, retry_max_delay: 60, batch_deadline: 30, shutdown_grace: 3, retention: 86400 }",
            file: "/tmp/herald.yaml")
        let outbox = parsed.outbox
        #expect(outbox.batchSize == 100 && outbox.maximumInFlight == 300 && outbox.maximumAttempts == 7)
        #expect(outbox.batchDeadline == 30 && outbox.shutdownGrace == 3)
        #expect(outbox.retention == 86_400 && DispatcherConfiguration().retention == 7 * 86_400)
        #expect([1, 2, 3, 4, 5, 6, 7].map { outbox.retryDelay(attempts: $0) } == [2, 4, 8, 16, 32, 60, 60])
        #expect(outbox.retryDelay(attempts: 1, providerAsked: 90) == 90)
        #expect(outbox.retryDelay(attempts: 1, providerAsked: .infinity) == 3600)
        #expect(outbox.retryDelay(attempts: 1, providerAsked: -5) == 2)
        for bad in [
            "outbox: { batch_size: 0 }", "outbox: { shutdown_grace: 301 }",
            "outbox: { retry_base_delay: 90, retry_max_delay: 60 }", "outbox: { batches: 3 }",
            "outbox: { retention: 60 }",
        ] {
            #expect(throws: ConfigurationError.self, "\(bad)") {
                try HeraldConfiguration.parse(yaml: bad, file: "/tmp/herald.yaml")
            }
        }
    }

    @Test("SIGTERM with an unreachable APNs endpoint exits within 30 s and keeps the delivery queued")
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
        let took = ContinuousClock.now - stopping
        #expect(!process.isRunning && took < .seconds(30), "herald serve took \(took) to stop")
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

/// Owned, fenced claims on one database shared by two processes (two stores on one file).
@Suite("Claims: ownership and fencing")
struct ClaimFencingTests {
    @Test(
        "a second node on the same SQLite file takes nothing a live node holds; a dead node's claims are rescued and its late results fenced off"
    )
    func twoNodes() async throws {
        let url = try await TestDatabase.url("nodes")
        let first = try await HeraldStore.open(url: url)
        let devices = makeDeviceTokens(30).enumerated().map {
            DeviceRecord(
                deviceID: "d\($0.offset)", userID: "u\($0.offset)", platform: "apns", token: $0.element,
                environment: "sandbox")
        }
        #expect(try await first.devices.importDevices(appID: "a", devices) == 30)
        let (notification, _) = try await first.notifications.createNotification(
            appID: "a", id: UUID(), idempotencyKey: nil, content: Data("{}".utf8), recipients: .all,
            excludeDeviceIDs: [], dueAt: Date())
        let held = try await first.outbox.claimDueDeliveries(limit: 20)
        #expect(held.count == 20 && held.allSatisfy { $0.claim == 1 })

        // A second process starts on the same file: it rescues nothing and claims only the rest.
        let second = try await HeraldStore.open(url: url)
        #expect(second.nodeID != first.nodeID)
        #expect(try await second.nodes.rescueDeadClaims() == 0)
        let rest = try await second.outbox.claimDueDeliveries(limit: 100)
        #expect(rest.count == 10 && Set(rest.map(\.id)).isDisjoint(with: held.map(\.id)))

        // The first node goes silent; the second takes its claims back and claims them anew.
        #expect(try await second.nodes.rescueDeadClaims(deadAfter: 0) == 20)
        let retaken = try await second.outbox.claimDueDeliveries(limit: 100)
        #expect(Set(retaken.map(\.id)) == Set(held.map(\.id)) && retaken.allSatisfy { $0.claim == 2 })
        func sent(_ deliveries: [ClaimedDelivery]) -> [DeliveryResult] {
            deliveries.map {
                DeliveryResult($0, .sent, attempts: 1)
            }
        }
        // The first node's late answers carry the old claim: none is written.
        #expect(try await first.outbox.recordResults(sent(held)) == 0)
        #expect(try await second.outbox.recordResults(sent(retaken)) == 20)
        let counts = try await second.notifications.deliveryCounts(notificationID: notification.id)
        #expect(counts[.sent] == 20)
        await first.close()
        await second.close()
    }
}

/// PostgreSQL-only behaviour: several nodes claiming from one database at once. Runs in every
/// `swift test` where PostgreSQL is installed (the tests start their own server).
@Suite("PostgreSQL: nodes sharing one database", .enabled(if: TestDatabase.postgresAvailable))
struct PostgresNodesTests {
    @Test("two nodes claiming at once take disjoint sets that cover the outbox; both record, counters add up")
    func concurrentClaims() async throws {
        let url = try await TestDatabase.url("concurrent", kind: .postgres)
        let nodes = [try await HeraldStore.open(url: url), try await HeraldStore.open(url: url)]
        #expect(nodes[0].dialect == .postgres)
        let count = 3_000
        let devices = makeDeviceTokens(count).enumerated().map {
            DeviceRecord(
                deviceID: "d\($0.offset)", userID: "u\($0.offset)", platform: "apns", token: $0.element,
                environment: "sandbox")
        }
        #expect(try await nodes[0].devices.importDevices(appID: "a", devices) == count)
        let (notification, _) = try await nodes[0].notifications.createNotification(
            appID: "a", id: UUID(), idempotencyKey: nil, content: Data("{}".utf8), recipients: .all,
            excludeDeviceIDs: [], dueAt: Date())
        #expect(notification.recipients == count)
        let claimed = try await withThrowingTaskGroup(of: [Int64].self) { group in
            for node in nodes {
                group.addTask {
                    var ids: [Int64] = []
                    while true {
                        let batch = try await node.outbox.claimDueDeliveries(limit: 97)
                        if batch.isEmpty { return ids }
                        ids += batch.map(\.id)
                        let results = batch.map {
                            DeliveryResult($0, .sent, attempts: 1)
                        }
                        #expect(try await node.outbox.recordResults(results) == batch.count)
                    }
                }
            }
            var all: [[Int64]] = []
            for try await ids in group { all.append(ids) }
            return all
        }
        let union = Set(claimed.flatMap { $0 })
        #expect(claimed.map(\.count).reduce(0, +) == count, "a delivery was claimed twice: \(claimed.map(\.count))")
        #expect(union.count == count)
        let counts = try await nodes[1].notifications.deliveryCounts(notificationID: notification.id)
        #expect(counts[.sent] == count)
        #expect(counts[.queued] == 0)
        for node in nodes { await node.close() }
    }
}

extension PostgresNodesTests {
    @Test("a node hears another node's enqueue (LISTEN/NOTIFY) instead of waiting for its next poll")
    func listenHearsEnqueue() async throws {
        let url = try await TestDatabase.url("listen", kind: .postgres)
        let listening = try await HeraldStore.open(url: url)
        let sending = try await HeraldStore.open(url: url)
        let heard = Counter()
        let listener = Task { await listening.nodes.listenForDueDeliveries { heard.add() } }
        // LISTEN takes effect once its connection runs it: enqueue until heard (no sleep-and-hope).
        _ = try await sending.devices.importDevices(
            appID: "a",
            [DeviceRecord(deviceID: "d", userID: "u", platform: "apns", token: "ab", environment: "sandbox")])
        let started = ContinuousClock.now
        while heard.value == 0 && ContinuousClock.now - started < .seconds(10) {
            _ = try await sending.notifications.createNotification(
                appID: "a", id: UUID(), idempotencyKey: nil, content: Data("{}".utf8), recipients: .all,
                excludeDeviceIDs: [], dueAt: Date())
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(heard.value > 0)
        listener.cancel()
        await listener.value
        await listening.close()
        await sending.close()
    }

}

/// PostgreSQL's deliveries partitioned by day (migration 11) and their upkeep.
extension PostgresNodesTests {
    @Test(
        "deliveries are partitioned by day: days made ahead, a past day dropped whole once nothing in it is kept, a day with a delivery to send kept"
    )
    func partitionsByDay() async throws {
        let day: TimeInterval = 86_400
        let clock = ManualClock(Date(timeIntervalSince1970: 1_800_000_000))  // 2027-01-15 08:00 UTC
        let store = try await HeraldStore.open(
            url: try await TestDatabase.url("partitions", kind: .postgres), clock: .manual(clock))
        // Opening made today's partition and the next two days' (the DEFAULT one takes the rest).
        #expect(
            Set(try await store.deliveryPartitions().keys)
                == ["deliveries_default", "deliveries_20270115", "deliveries_20270116", "deliveries_20270117"])
        let devices = makeDeviceTokens(3).enumerated().map {
            DeviceRecord(
                deviceID: "d\($0.offset)", userID: "u\($0.offset)", platform: "apns", token: $0.element,
                environment: "sandbox")
        }
        #expect(try await store.devices.importDevices(appID: "a", devices) == 3)
        func send(due: Date) async throws -> UUID {
            try await store.notifications.createNotification(
                appID: "a", id: UUID(), idempotencyKey: nil, content: Data("{}".utf8),
                recipients: .users(["u0", "u1", "u2"]),
                excludeDeviceIDs: [], dueAt: due
            ).0.id
        }
        // Day 0: answered. Day 1: one scheduled 30 days ahead (still to send when day 0 goes).
        let answered = try await send(due: clock.now)
        let claimed = try await store.outbox.claimDueDeliveries(limit: 10)
        #expect(claimed.count == 3)
        #expect(try await store.outbox.recordResults(claimed.map { DeliveryResult($0, .sent, attempts: 1) }) == 3)
        clock.advance(by: day)
        let scheduled = try await send(due: clock.now.addingTimeInterval(30 * day))
        #expect(try await store.deliveryPartitions()["deliveries_20270115"] == 3)
        #expect(try await store.deliveryPartitions()["deliveries_20270116"] == 3)
        // Day 9, retention 7 days: day 0 is dropped whole, day 1 stays for its scheduled rows.
        clock.advance(by: 8 * day)
        let upkeep = try await store.maintainPartitions(before: clock.now.addingTimeInterval(-7 * day))
        #expect(upkeep.dropped == ["deliveries_20270115"])
        #expect(upkeep.droppedRows == 3)
        #expect(upkeep.created == ["deliveries_20270124", "deliveries_20270125", "deliveries_20270126"])
        #expect(try await store.notifications.deliveries(notificationID: answered, limit: 10, offset: 0).isEmpty)
        #expect(
            try await store.notifications.deliveries(notificationID: scheduled, limit: 10, offset: 0).map(\.status) == [
                .queued, .queued, .queued,
            ])
        // The notification left without deliveries goes with the row-by-row retention.
        #expect(try await store.pruneHistory(before: clock.now.addingTimeInterval(-7 * day)).notifications == 1)
        #expect(try await store.notifications.notification(appID: "a", id: answered) == nil)
        // Nothing more to do at the next upkeep.
        #expect(
            try await store.maintainPartitions(before: clock.now.addingTimeInterval(-7 * day))
                == HeraldStore.PartitionUpkeep())
        // A day the upkeep did not reach in time: its rows land in DEFAULT, and the day is
        // reported once and left there (a partition cannot be made over rows DEFAULT holds).
        clock.advance(by: 20 * day)
        let late = try await send(due: clock.now)
        let skipped = try await store.maintainPartitions(before: nil)
        #expect(skipped.skipped == ["deliveries_20270213"])
        #expect(skipped.created == ["deliveries_20270214", "deliveries_20270215"])
        #expect(try await store.maintainPartitions(before: nil).skipped.isEmpty)
        #expect(try await store.deliveryPartitions()["deliveries_default"] == 3)
        #expect(try await store.notifications.deliveries(notificationID: late, limit: 10, offset: 0).count == 3)
        await store.close()
    }

    @Test(
        "a database from before partitions keeps every delivery: the migration copies them into their days, ids go on")
    func partitionMigration() async throws {
        let day: TimeInterval = 86_400
        let clock = ManualClock(Date(timeIntervalSince1970: 1_800_000_000))
        let url = try await TestDatabase.url("partition-migration", kind: .postgres)
        let old = try await HeraldStore.open(url: url, clock: .manual(clock), schemaVersion: 10)
        let devices = makeDeviceTokens(4).enumerated().map {
            DeviceRecord(
                deviceID: "d\($0.offset)", userID: "u\($0.offset)", platform: "apns", token: $0.element,
                environment: "sandbox")
        }
        #expect(try await old.devices.importDevices(appID: "a", devices) == 4)
        func send(_ store: HeraldStore) async throws -> UUID {
            try await store.notifications.createNotification(
                appID: "a", id: UUID(), idempotencyKey: nil, content: Data("{}".utf8),
                recipients: .users(["u0", "u1", "u2", "u3"]),
                excludeDeviceIDs: [], dueAt: clock.now
            ).0.id
        }
        let first = try await send(old)
        let sent = try await old.outbox.claimDueDeliveries(limit: 2)
        #expect(try await old.outbox.recordResults(sent.map { DeliveryResult($0, .sent, attempts: 1) }) == 2)
        clock.advance(by: 2 * day)
        let second = try await send(old)
        await old.close()

        let store = try await HeraldStore.open(url: url, clock: .manual(clock))
        let partitions = try await store.deliveryPartitions()
        #expect(partitions["deliveries_20270115"] == 4)
        #expect(partitions["deliveries_20270117"] == 4)
        #expect(partitions["deliveries_default"] == 0)
        #expect(try await store.notifications.deliveryCounts(notificationID: first)[.sent] == 2)
        #expect(
            try await store.notifications.deliveries(notificationID: first, limit: 10, offset: 0).map(\.status).sorted {
                $0.rawValue < $1.rawValue
            }
                == [.queued, .queued, .sent, .sent])
        // New rows take ids after the copied ones; the outbox claims old and new alike.
        let third = try await send(store)
        let claimed = try await store.outbox.claimDueDeliveries(limit: 100)
        #expect(claimed.count == 10)
        #expect(Set(claimed.map(\.id)).count == 10)
        #expect(Set(claimed.map(\.notificationID)) == [first, second, third])
        #expect(try await store.outbox.recordResults(claimed.map { DeliveryResult($0, .sent, attempts: 1) }) == 10)
        #expect(try await store.notifications.deliveryCounts(notificationID: third)[.sent] == 4)
        await store.close()
    }
}

/// A thread-safe count for callbacks.
final class Counter: Sendable {
    private let storage = Mutex(0)
    func add() { storage.withLock { $0 += 1 } }
    var value: Int { storage.withLock { $0 } }
}
