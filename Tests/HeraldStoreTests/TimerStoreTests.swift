import Foundation
import HeraldCore
import HeraldStore
import HeraldTesting
import Synchronization
import Testing

/// Timers in the store: firing due timers and handing out a due step's deliveries in pages.
@Suite("Store: timers")
struct TimerStoreTests {
    @Test(
        "due steps fire in due order, their deliveries claimed for the node as they are written; a step that fails to be decided stays due; a cancel while a step is decided wins over its write"
    )
    func fireDueTimers() async throws {
        let clock = ManualClock(Date(timeIntervalSince1970: 1_800_000_000))
        let url = try await TestDatabase.url("timers")
        let store = try await HeraldStore.open(url: url, clock: .manual(clock))
        let devices = makeDeviceTokens(6).enumerated().map {
            DeviceRecord(
                deviceID: "d\($0.offset)", userID: "u\($0.offset / 2)", platform: "apns", token: $0.element,
                environment: "sandbox")
        }
        #expect(try await store.devices.importDevices(appID: "a", devices) == 6)
        for (index, user) in ["u0", "u1", "u2"].enumerated() {
            _ = try await store.tracks.enrol(
                appID: "a", userID: user, track: "t", cancelKey: "track:t", anchorAt: clock.now, data: "{}",
                testSeconds: nil,
                steps: [PlannedStep(id: "s1", dueAt: clock.now.addingTimeInterval(Double(60 + index)))], restart: false)
        }
        func send(_ timers: [TimerRepository.DueTimer]) -> [TimerRepository.TimerOutcome] {
            [
                .send(
                    appID: "a", notification: UUID(), content: Data("{}".utf8), lane: .normal, cancelKey: "track:t",
                    trace: nil, timers: timers.map(\.id))
            ]
        }
        // None due yet.
        #expect(try await store.timers.fireDueTimers(limit: 10) { _, timers in send(timers) }.taken == 0)
        clock.advance(by: 120)
        // A node that fails while deciding commits nothing: the steps are still there to fire.
        await #expect(throws: CancellationError.self) {
            try await store.timers.fireDueTimers(limit: 10, directUpTo: 100) { _, _ in throw CancellationError() }
        }
        // Two at a time, the earliest first; the deliveries come back claimed, `sending`.
        var users: [String] = []
        let first = try await store.timers.fireDueTimers(limit: 2, directUpTo: 100) { _, timers in
            users = timers.map(\.userID)
            return send(timers)
        }
        #expect(users == ["u0", "u1"])
        #expect(first.taken == 2 && first.fired == 2 && first.notifications == 1)
        #expect(first.claimed.map(\.deviceID).sorted() == ["d0", "d1", "d2", "d3"])
        #expect(try await store.outbox.claimDueDeliveries(limit: 10).isEmpty)
        // A cancel asked while the last step is being decided is ordered with its write, never
        // half of each. The step is decided outside any transaction (on SQLite beside the
        // writer; on PostgreSQL claimed `firing` first, no row locked while deciding): the
        // cancel commits first and the write fires nothing.
        let started = AsyncStream<Void>.makeStream()
        let cancel = Task {
            for await _ in started.stream { break }
            return try await store.notifications.cancel(appID: "a", cancelKey: "track:t", userIDs: ["u2"])
        }
        let last = try await store.timers.fireDueTimers(limit: 10, directUpTo: 100) { _, timers in
            started.continuation.yield()
            _ = try? await cancel.value
            return send(timers)
        }
        let cancelled = try await cancel.value
        #expect(last.taken == 1)
        #expect(last.fired == 0 && last.claimed.isEmpty && last.notifications == 0)
        #expect(cancelled.steps == 1 && cancelled.inFlight == 0 && cancelled.cancelled == 0)
        // Without room: written queued, for the outbox's claim.
        _ = try await store.tracks.enrol(
            appID: "a", userID: "u0", track: "t2", cancelKey: "track:t2", anchorAt: clock.now, data: "{}",
            testSeconds: nil,
            steps: [PlannedStep(id: "s1", dueAt: clock.now)], restart: false)
        let queued = try await store.timers.fireDueTimers(limit: 10, directUpTo: 0) { _, timers in send(timers) }
        #expect(queued.fired == 1 && queued.claimed.isEmpty)
        #expect(try await store.outbox.claimDueDeliveries(limit: 10).map(\.deviceID).sorted() == ["d0", "d1"])
        await store.close()
    }

    @Test(
        "a fired step's deliveries are handed out in pages and written once, by their results; a cancel for a user marks a held page and writes a returned one's rows; a returned page is handed out again without them"
    )
    func stepPages() async throws {
        let clock = ManualClock(Date(timeIntervalSince1970: 1_800_000_000))
        let url = try await TestDatabase.url("steppages")
        let store = try await HeraldStore.open(url: url, clock: .manual(clock))
        let devices = makeDeviceTokens(8).enumerated().map {
            DeviceRecord(
                deviceID: "d\($0.offset)", userID: "u\($0.offset / 2)", platform: "apns", token: $0.element,
                environment: "sandbox")
        }
        #expect(try await store.devices.importDevices(appID: "a", devices) == 8)
        func enrol(_ user: String, track: String) async throws {
            _ = try await store.tracks.enrol(
                appID: "a", userID: user, track: track, cancelKey: "track:\(track)", anchorAt: clock.now, data: "{}",
                testSeconds: nil,
                steps: [PlannedStep(id: "s1", dueAt: clock.now.addingTimeInterval(60))], restart: false)
        }
        for user in ["u0", "u1", "u2", "u3"] { try await enrol(user, track: "t") }
        clock.advance(by: 120)
        let notification = UUID()
        let fired = try await store.timers.fireDueTimers(limit: 10, directUpTo: 100) { _, timers in
            [
                .send(
                    appID: "a", notification: notification, content: Data("{}".utf8), lane: .normal,
                    cancelKey: "track:t", trace: nil, timers: timers.map(\.id))
            ]
        }
        let claimed = Dictionary(uniqueKeysWithValues: fired.claimed.map { ($0.deviceID, $0) })
        #expect(claimed.count == 8 && claimed.values.allSatisfy { $0.broadcast != nil })
        // No row until a result: the notification counts its eight recipients, all still queued.
        #expect(try await store.notifications.deliveries(notificationID: notification, limit: 20, offset: 0).isEmpty)
        #expect(try await store.notifications.deliveryCounts(notificationID: notification)[.queued] == 8)
        func result(_ device: String, _ outcome: DeliveryResult.Outcome) throws -> DeliveryResult {
            DeliveryResult(try #require(claimed[device]), outcome, attempts: 1)
        }
        let retry = DeliveryResult.Outcome.retry(reason: "TooManyRequests", dueAt: clock.now.addingTimeInterval(60))
        #expect(
            try await store.outbox.recordResults([
                try result("d0", .sent), try result("d1", .sent), try result("d2", retry),
            ])
                == 3)
        // u1 upgrades while the page is held: d2 (queued for a retry) is cancelled, d3 is in flight
        // and its retry ends cancelled.
        let upgrade = try await store.notifications.cancel(appID: "a", cancelKey: "track:t", userIDs: ["u1"])
        #expect(upgrade.cancelled == 1 && upgrade.inFlight == 1, "\(upgrade)")
        #expect(try await store.outbox.recordResults([try result("d3", retry)]) == 1)
        // The node gives the rest back unsent; u2 upgrades meanwhile: its rows are written cancelled.
        try await store.nodes.unclaim(["d4", "d5", "d6", "d7"].compactMap { claimed[$0] })
        let second = try await store.notifications.cancel(appID: "a", cancelKey: "track:t", userIDs: ["u2"])
        #expect(second.cancelled == 2 && second.inFlight == 0, "\(second)")
        // Handed out again: only u3's devices, with the ids reserved for them.
        let again = try await store.outbox.claimDueDeliveries(limit: 10)
        #expect(again.map(\.deviceID).sorted() == ["d6", "d7"])
        #expect(again.map(\.id).sorted() == [claimed["d6"]?.id, claimed["d7"]?.id].compactMap { $0 }.sorted())
        #expect(try await store.outbox.recordResults(again.map { DeliveryResult($0, .sent, attempts: 1) }) == 2)
        #expect(try await store.outbox.claimDueDeliveries(limit: 10).isEmpty)
        let counts = try await store.notifications.deliveryCounts(notificationID: notification)
        #expect(counts[.sent] == 4 && counts[.cancelled] == 4 && counts[.queued] == 0, "\(counts)")
        let rows = try await store.notifications.deliveries(notificationID: notification, limit: 20, offset: 0)
        #expect(rows.count == 8)
        #expect(Set(rows.filter { $0.status == .cancelled }.map(\.deviceID)) == ["d2", "d3", "d4", "d5"])
        // A user cancelled while a page is held, whose node then dies: handed out again without
        // that user's devices (their rows written cancelled).
        try await enrol("u0", track: "t2")
        try await enrol("u1", track: "t2")
        clock.advance(by: 120)
        let other = UUID()
        let held = try await store.timers.fireDueTimers(limit: 10, directUpTo: 100) { _, timers in
            [
                .send(
                    appID: "a", notification: other, content: Data("{}".utf8), lane: .normal, cancelKey: "track:t2",
                    trace: nil, timers: timers.map(\.id))
            ]
        }
        #expect(held.claimed.count == 4)
        #expect(try await store.notifications.cancel(appID: "a", cancelKey: "track:t2", userIDs: ["u0"]).inFlight == 2)
        try await store.nodes.unclaim(held.claimed)
        let rehanded = try await store.outbox.claimDueDeliveries(limit: 10)
        #expect(rehanded.map(\.deviceID).sorted() == ["d2", "d3"])
        // A cancel for everyone while a page is held: its devices' retries end cancelled.
        let all = try await store.notifications.cancel(appID: "a", cancelKey: "track:t2", userIDs: nil)
        #expect(all.inFlight == 2 && all.cancelled == 0, "\(all)")
        #expect(try await store.outbox.recordResults(rehanded.map { DeliveryResult($0, retry, attempts: 1) }) == 2)
        #expect(try await store.notifications.deliveryCounts(notificationID: other)[.cancelled] == 4)
        #expect(try await store.outbox.claimDueDeliveries(limit: 10).isEmpty)
        await store.close()
    }

    @Test(
        "PostgreSQL: two nodes firing at once fire each step once; a node that stops while deciding leaves its claims to the others, and its late write fires nothing",
        .enabled(if: TestDatabase.postgresAvailable))
    func nodesShareTimers() async throws {
        let clock = ManualClock(Date(timeIntervalSince1970: 1_800_000_000))
        let url = try await TestDatabase.url("timer-nodes", kind: .postgres)
        let a = try await HeraldStore.open(url: url, clock: .manual(clock))
        let b = try await HeraldStore.open(url: url, clock: .manual(clock))
        let tokens = makeDeviceTokens(41)
        let users = (0...40).map { "u\($0)" }
        _ = try await a.devices.importDevices(
            appID: "a",
            users.indices.map {
                DeviceRecord(
                    deviceID: "d\($0)", userID: users[$0], platform: "apns", token: tokens[$0], environment: "sandbox")
            })
        for user in users.dropLast() {
            _ = try await a.tracks.enrol(
                appID: "a", userID: user, track: "t", cancelKey: "track:t", anchorAt: clock.now, data: "{}",
                testSeconds: nil, steps: [PlannedStep(id: "s1", dueAt: clock.now.addingTimeInterval(60))],
                restart: false)
        }
        clock.advance(by: 120)
        try await a.nodes.heartbeat()
        try await b.nodes.heartbeat()
        @Sendable func send(_ timers: [TimerRepository.DueTimer]) -> [TimerRepository.TimerOutcome] {
            timers.map {
                .send(
                    appID: "a", notification: UUID(), content: Data("{}".utf8), lane: .normal, cancelKey: nil,
                    trace: nil, timers: [$0.id])
            }
        }
        // Both nodes fire in batches of 5 at once, each decision taking a while.
        @Sendable func drain(_ store: HeraldStore) async throws -> [String] {
            var fired: [String] = []
            while true {
                var decided: [String] = []
                let result = try await store.timers.fireDueTimers(limit: 5) { _, timers in
                    decided = timers.map(\.userID)
                    try await Task.sleep(for: .milliseconds(5))
                    return send(timers)
                }
                guard result.taken > 0 else { return fired }
                #expect(result.fired == decided.count)
                fired += decided
            }
        }
        async let byA = drain(a)
        async let byB = drain(b)
        let fired = try await byA + byB
        #expect(fired.sorted() == users.dropLast().sorted(), "each step fired once, by one node")

        // A node claims the last step and stops while deciding it (no heartbeat from then on).
        _ = try await a.tracks.enrol(
            appID: "a", userID: "u40", track: "t", cancelKey: "track:t", anchorAt: clock.now, data: "{}",
            testSeconds: nil,
            steps: [PlannedStep(id: "s1", dueAt: clock.now)], restart: false)
        let deciding = AsyncStream<Void>.makeStream()
        let resume = AsyncStream<Void>.makeStream()
        let late = Task {
            try await a.timers.fireDueTimers(limit: 10) { _, timers in
                deciding.continuation.yield()
                for await _ in resume.stream { break }
                return send(timers)
            }
        }
        for await _ in deciding.stream { break }
        // Its claim holds the step: the other node finds nothing due.
        #expect(try await b.timers.fireDueTimers(limit: 10) { _, timers in send(timers) }.taken == 0)
        clock.advance(by: NodeRepository.nodeDeadAfter + 1)
        try await b.nodes.heartbeat()
        _ = try await b.nodes.rescueDeadClaims()
        let rescued = try await b.timers.fireDueTimers(limit: 10) { _, timers in send(timers) }
        #expect(rescued.fired == 1 && rescued.timers.values.map(\.userID) == ["u40"])
        resume.continuation.yield()
        let lateWrite = try await late.value
        #expect(lateWrite.fired == 0 && lateWrite.notifications == 0)
        await a.close()
        await b.close()
    }

    @Test(
        "PostgreSQL: claims the database refused to hand back are handed back before the node's next claim, not left firing while it lives",
        .enabled(if: TestDatabase.postgresAvailable && TestPostgres.binaryDirectory() != nil))
    func unreleasedClaims() async throws {
        let clock = ManualClock(Date(timeIntervalSince1970: 1_800_000_000))
        let url = try await TestDatabase.url("timer-release", kind: .postgres)
        let a = try await HeraldStore.open(url: url, clock: .manual(clock))
        let b = try await HeraldStore.open(url: url, clock: .manual(clock))
        _ = try await a.devices.importDevices(
            appID: "a",
            [
                DeviceRecord(
                    deviceID: "d0", userID: "u0", platform: "apns", token: makeDeviceTokens(1)[0],
                    environment: "sandbox")
            ])
        _ = try await a.tracks.enrol(
            appID: "a", userID: "u0", track: "t", cancelKey: "track:t", anchorAt: clock.now, data: "{}",
            testSeconds: nil, steps: [PlannedStep(id: "s1", dueAt: clock.now)], restart: false)
        try await a.nodes.heartbeat()
        try await b.nodes.heartbeat()
        // The database refuses the first hand-back of a claim (a trigger; a sequence counts
        // attempts outside the transactions it fails).
        let psql = try #require(TestPostgres.binaryDirectory()) + "/psql"
        let refuse = try await runProcess(
            URL(fileURLWithPath: psql),
            [
                url, "-v", "ON_ERROR_STOP=1", "-c",
                """
                CREATE SEQUENCE release_attempts;
                CREATE FUNCTION refuse_first_release() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                  IF OLD.status = 'firing' AND NEW.status = 'pending' THEN
                    IF nextval('release_attempts') = 1 THEN RAISE EXCEPTION 'release refused'; END IF;
                  END IF;
                  RETURN NEW;
                END $$;
                CREATE TRIGGER refuse_first_release BEFORE UPDATE ON timers FOR EACH ROW EXECUTE FUNCTION refuse_first_release();
                """,
            ])
        #expect(refuse.status == 0, "\(refuse.stderr)")
        struct DecisionFailed: Error {}
        await #expect(throws: DecisionFailed.self) {
            try await a.timers.fireDueTimers(limit: 10) { _, _ in throw DecisionFailed() }
        }
        // Still claimed by a live node: nobody else takes it.
        #expect(try await b.timers.fireDueTimers(limit: 10) { _, _ in [] }.taken == 0)
        // The node's next pass hands it back first, then fires it.
        let fired = try await a.timers.fireDueTimers(limit: 10) { _, timers in
            [
                .send(
                    appID: "a", notification: UUID(), content: Data("{}".utf8), lane: .normal, cancelKey: "track:t",
                    trace: nil, timers: timers.map(\.id))
            ]
        }
        #expect(fired.fired == 1)
        await a.close()
        await b.close()
    }
}
