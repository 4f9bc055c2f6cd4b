import Foundation
import HeraldCatalog
import HeraldCore
import HeraldServer
import HeraldStore
import HeraldTesting
import Synchronization
import Testing

@Suite("Outbox durability and configuration")
struct StoreAndConfigurationTests {
    @Test("deliveries claimed but never answered are queued again after a restart, and counted")
    func requeueAfterCrash() async throws {
        let url = try await TestDatabase.url("requeue")
        let store = try await HeraldStore.open(url: url)
        let devices = makeDeviceTokens(20).enumerated().map {
            DeviceRecord(
                deviceID: "d\($0.offset)", userID: "u", platform: "apns", token: $0.element, environment: "sandbox")
        }
        #expect(try await store.devices.importDevices(appID: "a", devices) == 20)
        let (notification, created) = try await store.notifications.createNotification(
            appID: "a", id: UUID(), idempotencyKey: nil, content: Data("{}".utf8), recipients: .all,
            excludeDeviceIDs: [], dueAt: Date())
        #expect(created)
        #expect(notification.recipients == 20)
        let claimed = try await store.outbox.claimDueDeliveries(limit: 15)
        #expect(claimed.count == 15)
        try await store.outbox.recordResults(
            claimed.prefix(5).map {
                DeliveryResult($0, .sent, attempts: 1)
            })
        // The process dies here: 10 claimed rows have no answer. A new process opens the file;
        // while the old node's heartbeat is fresh its claims are left alone.
        await store.close()
        let reopened = try await HeraldStore.open(url: url)
        #expect(try await reopened.nodes.rescueDeadClaims() == 0)
        // Once it has been silent past the limit, they are queued again.
        #expect(try await reopened.nodes.rescueDeadClaims(deadAfter: 0) == 10)
        #expect(try await reopened.counter("resent_after_restart") == 10)
        let again = try await reopened.outbox.claimDueDeliveries(limit: 100)
        #expect(again.count == 15)
        #expect(Set(again.map(\.id)).isDisjoint(with: Set(claimed.prefix(5).map(\.id))))
        let counts = try await reopened.notifications.deliveryCounts(notificationID: notification.id)
        #expect(counts[.sent] == 5)
        #expect(counts[.queued] == 15)
        // A batch claimed ahead and handed back at shutdown is queued again, not counted as resent.
        try await reopened.nodes.unclaim(again)
        #expect(try await reopened.outbox.claimDueDeliveries(limit: 100).count == 15)
        await reopened.close()
    }

    @Test("every outbox query by status walks the partial outbox index, never the whole table")
    func outboxQueriesUseTheIndex() async throws {
        // SQLite's query plans; PostgreSQL chooses its own (docs/scaling.md).
        let store = try await HeraldStore.open(
            url: "sqlite://" + (try makeTemporaryDirectory("herald-plan")) + "/plan.sqlite")
        let plans: [String: String]
        do { plans = try await store.outbox.outboxQueryPlans() } catch {
            await store.close()
            throw error
        }
        #expect(plans.count == 6)
        for (name, plan) in plans {
            #expect(plan.contains("INDEX deliveries_due"), "\(name): \(plan)")
            #expect(!plan.contains("SCAN d") && !plan.contains("SCAN deliveries"), "\(name): \(plan)")
            #expect(!plan.contains("TEMP B-TREE"), "\(name): \(plan)")
        }
        await store.close()
    }

    @Test(
        "under steady commits the SQLite WAL starts over once it passes its limit, instead of growing until a commit checkpoints it"
    )
    func walStartsOver() async throws {
        let path = try makeTemporaryDirectory("herald-wal") + "/wal.sqlite"
        // 64 pages (256 KiB) here; 16,384 (64 MiB) in production.
        let store = try await HeraldStore.open(url: "sqlite://" + path, walRestartPages: 64)
        // Four writers keep the connection busy, as the API, the claims and the results do: a
        // checkpoint never finds every frame copied when a transaction begins, so without the
        // paused checkpoint the WAL grows with every commit (to 128 MiB in production).
        let writes = await Task {
            try await withThrowingTaskGroup(of: Int.self) { group in
                for writer in 0..<4 {
                    group.addTask {
                        var largest = 0
                        for batch in 0..<40 {
                            let devices = (0..<100).map { index in
                                DeviceRecord(
                                    deviceID: "w\(writer)-\(batch)-\(index)", userID: "u\(index)", platform: "apns",
                                    token: UUID().uuidString + UUID().uuidString, environment: "production")
                            }
                            _ = try await store.devices.importDevices(appID: "wal", devices)
                            largest = max(
                                largest,
                                (try? FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int) ?? 0)
                        }
                        return largest
                    }
                }
                return try await group.reduce(0, max)
            }
        }.result
        await store.close()
        let largest = try writes.get()
        #expect(largest > 0)
        // 13 MiB here with the paused checkpoint; 90 MiB without it.
        #expect(largest < 32 << 20, "the WAL grew to \(largest) bytes")
    }

    @Test(
        "the outbox gauges are read beside the SQLite writer: a long transaction does not hold up /metrics or /healthz, nor they it"
    )
    func gaugesBesideTheWriter() async throws {
        let path = try makeTemporaryDirectory("herald-gauges") + "/gauges.sqlite"
        let store = try await HeraldStore.open(url: "sqlite://" + path)
        let result = await Task { () async throws -> (due: Int, deferred: Int, oldestDueAge: TimeInterval)? in
            _ = try await store.devices.importDevices(
                appID: "g",
                (0..<3).map {
                    DeviceRecord(
                        deviceID: "d\($0)", userID: "u", platform: "apns", token: "t\($0)", environment: "production")
                })
            _ = try await store.notifications.createNotification(
                appID: "g", id: UUID(), idempotencyKey: nil,
                content: try JSONEncoder().encode(StoredNotificationContent(content: NotificationContent())),
                recipients: .all, excludeDeviceIDs: [], dueAt: Date())
            // While the writer is held, the gauges still answer, with what was committed (a
            // version that waits for the writer answers only after it is let go: too late).
            let answered = Mutex(false)
            let gauges = Task {
                let value = try await store.nodes.outboxGauges(appIDs: ["g"])
                answered.withLock { $0 = true }
                return value
            }
            var inTime = false
            try await store.withWriterHeld {
                for _ in 0..<1_000 where !inTime {
                    try await Task.sleep(for: .milliseconds(10))
                    inTime = answered.withLock { $0 }
                }
            }
            let value = try await gauges.value
            return inTime ? value : nil
        }.result
        await store.close()
        let gauges = try result.get()
        #expect(gauges != nil, "the gauges waited for the writer")
        #expect(gauges?.due == 3)
        #expect(gauges?.deferred == 0)
    }

    @Test("a configuration error names the key and the line")
    func configurationErrors() throws {
        let yaml = """
            server: { host: 127.0.0.1, port: 8080 }
            apps:
              - id: demo
                keys: { server: "short" }
            """
        do {
            _ = try HeraldConfiguration.parse(yaml: yaml, file: "herald.yaml")
            Issue.record("accepted a short key")
        } catch {
            #expect(error.key == "apps[0].keys.server")
            #expect(error.line == 4)
            #expect(error.description.hasPrefix("herald.yaml:4: apps[0].keys.server"))
        }
        #expect(throws: ConfigurationError.self) {
            try HeraldConfiguration.parse(yaml: "server: { prot: 1 }", file: "x.yaml")
        }
        #expect(throws: ConfigurationError.self) {
            try HeraldConfiguration.parse(yaml: "apps:\n  - id: a\n    apns: { team_id: T }\n", file: "x.yaml")
        }
    }

    @Test("telemetry: off by default; otlp_endpoint and sample_ratio parse; a bad value names its key")
    func telemetryConfiguration() throws {
        #expect(try HeraldConfiguration.parse(yaml: "server: { port: 1 }", file: "x.yaml").telemetry.enabled == false)
        let telemetry = try HeraldConfiguration.parse(
            yaml: "telemetry: { otlp_endpoint: \"http://collector:4318\", sample_ratio: 0.25 }", file: "x.yaml"
        ).telemetry
        #expect(telemetry.enabled)
        #expect(telemetry.sampleRatio == 0.25)
        #expect(telemetry.tracesURL == "http://collector:4318/v1/traces")
        let explicit = HeraldConfiguration.Telemetry(otlpEndpoint: "https://c.example/otlp/v1/traces")
        #expect(explicit.tracesURL == "https://c.example/otlp/v1/traces")
        #expect(HeraldConfiguration.Telemetry(otlpEndpoint: "http://c:4318/").tracesURL == "http://c:4318/v1/traces")
        for (yaml, key) in [
            ("telemetry: { otlp_endpoint: \"collector:4318\" }", "telemetry.otlp_endpoint"),
            ("telemetry: { otlp_endpoint: \"ftp://collector\" }", "telemetry.otlp_endpoint"),
            ("telemetry: { sample_ratio: 2 }", "telemetry.sample_ratio"),
            ("telemetry: { sample_ratio: nan }", "telemetry.sample_ratio"),
            ("telemetry: { sample_ratio: half }", "telemetry.sample_ratio"),
            ("telemetry: { endpoint: \"http://c:4318\" }", "telemetry.endpoint"),
        ] {
            do {
                _ = try HeraldConfiguration.parse(yaml: yaml, file: "x.yaml")
                Issue.record("accepted \(yaml)")
            } catch {
                #expect(error.key == key, "\(yaml)")
            }
        }
    }

    @Test("the documented configuration parses, relative key files resolve beside it, environment overrides")
    func configurationContract() throws {
        let yaml = """
            server: { host: 0.0.0.0, port: 9090 }
            database: { url: "sqlite://herald.sqlite" }
            admin_key: "admin-0123456789abcdef-0123456789abcdef"
            metrics_key: "metrics-0123456789abcdef-0123456789abcdef"
            apps:
              - id: demo
                payload_key: lucid
                keys: { server: "server-0123456789abcdef", client: "client-0123456789abcdef" }
                user_token_secret: "user-token-secret-0123456789abcdef"
                client_registration: verified
                max_devices_per_user: 5
                apns: { team_id: "T", key_id: "K", key_file: "AuthKey.p8", topic: "com.example.demo",
                        environment: sandbox, endpoint: "https://127.0.0.1:8443", ca_file: "sim-ca.pem" }
            """
        var configuration = try HeraldConfiguration.parse(yaml: yaml, file: "/etc/herald/herald.yaml")
        #expect(configuration.host == "0.0.0.0")
        #expect(configuration.port == 9090)
        let app = try #require(configuration.apps.first)
        #expect(app.payloadKey == "lucid")
        #expect(app.apns?.keyFile == "/etc/herald/AuthKey.p8")
        #expect(app.apns?.caFile == "/etc/herald/sim-ca.pem")
        #expect(app.apns?.environment == "sandbox")
        #expect(app.userTokenSecret == "user-token-secret-0123456789abcdef")
        #expect(app.clientRegistration == .verified)
        #expect(app.maxDevicesPerUser == 5)
        #expect(configuration.metricsKey == "metrics-0123456789abcdef-0123456789abcdef")
        configuration.applyEnvironment([
            "HERALD_DATABASE_URL": "sqlite:///tmp/x.sqlite", "HERALD_ADMIN_KEY": "env-admin-key-0123",
        ])
        #expect(configuration.databaseURL == "sqlite:///tmp/x.sqlite")
        #expect(configuration.adminKey == "env-admin-key-0123")
        // A short admin key from the environment is refused before the server starts.
        #expect(throws: ConfigurationError.self) { try configuration.validate() }
    }

    @Test("an app without credentials says why APNs is off, and its deliveries fail visibly")
    func noCredentials() async throws {
        let store = try await HeraldStore.open(url: try await TestDatabase.url("nocredentials"))
        var configuration = HeraldConfiguration()
        configuration.apps = [.init(id: "quiet", serverKey: "server-0123456789abcdef")]
        let runtime = try HeraldRuntime(configuration: configuration, store: store)
        #expect(runtime.apps["quiet"]?.apnsDisabledReason == "no credentials")
        _ = try await store.devices.upsertDevice(
            appID: "quiet",
            DeviceRecord(deviceID: "d", userID: "u", platform: "apns", token: "abcd", environment: "production"))
        let (notification, _) = try await store.notifications.createNotification(
            appID: "quiet", id: UUID(), idempotencyKey: nil,
            content: try JSONEncoder().encode(StoredNotificationContent(content: NotificationContent())),
            recipients: .all, excludeDeviceIDs: [], dueAt: Date())
        #expect(try await OutboxLoop(runtime: runtime).runOnce() == 1)
        let deliveries = try await store.notifications.deliveries(notificationID: notification.id, limit: 10, offset: 0)
        #expect(deliveries.first?.status == .failed)
        #expect(deliveries.first?.reason == "APNsNotConfigured")
        await store.close()
    }

    @Test("an app's catalog is loaded and checked at start; a bad one stops the start with file and line")
    func catalogAtStart() async throws {
        let directory = try makeTemporaryDirectory("herald-catalog")
        let bad = directory + "/bad.yaml"
        try "types:\n  a:\n    copy:\n      en: { title: \"Hi {who}\" }\n".write(
            toFile: bad, atomically: true, encoding: .utf8)
        let yaml = "apps:\n  - id: demo\n    catalog: bad.yaml\n"
        let configuration = try HeraldConfiguration.parse(yaml: yaml, file: directory + "/herald.yaml")
        #expect(configuration.apps.first?.catalogFile == bad)
        let store = try await HeraldStore.open(url: "sqlite://:memory:")
        do {
            _ = try HeraldRuntime(configuration: configuration, store: store)
            Issue.record("a bad catalog was accepted")
        } catch {
            #expect(error.file == bad)
            #expect(error.line == 4)
            #expect(error.key == "types.a.copy.en.title")
        }
        await store.close()
    }

    @Test(
        "a due send to named devices is claimed as it is stored: no claim needed, results fenced by its claim, rescued if its node dies"
    )
    func directClaim() async throws {
        let clock = ManualClock(Date(timeIntervalSince1970: 1_800_000_000))
        let url = try await TestDatabase.url("direct")
        let store = try await HeraldStore.open(url: url, clock: .manual(clock))
        let devices = makeDeviceTokens(4).enumerated().map {
            DeviceRecord(
                deviceID: "d\($0.offset)", userID: "u\($0.offset / 2)", platform: "apns", token: $0.element,
                environment: "sandbox")
        }
        #expect(try await store.devices.importDevices(appID: "a", devices) == 4)
        func accept(_ recipients: RecipientSelector, due: Date? = nil, upTo: Int = 64) async throws
            -> NotificationRepository.Accepted
        {
            try await store.notifications.acceptNotification(
                appID: "a", id: UUID(), idempotencyKey: nil, content: Data("{}".utf8), recipients: recipients,
                excludeDeviceIDs: [],
                dueAt: due ?? clock.now, directUpTo: upTo)
        }
        let direct = try await accept(.users(["u0"]))
        #expect(direct.record.recipients == 2)
        #expect(direct.claimed.map(\.deviceID).sorted() == ["d0", "d1"])
        #expect(
            direct.claimed.allSatisfy {
                $0.claim == 1 && $0.userID == "u0" && $0.platform == "apns" && !$0.token.isEmpty
            })
        // Nothing left for the outbox's claim: the rows are this node's, `sending`.
        #expect(try await store.outbox.claimDueDeliveries(limit: 10).isEmpty)
        #expect(
            try await store.outbox.recordResults(direct.claimed.map { DeliveryResult($0, .sent, attempts: 1) }) == 2)
        #expect(try await store.notifications.deliveryCounts(notificationID: direct.record.id)[.sent] == 2)
        // Later, too many, or not asked: queued as before.
        let later = try await accept(.devices(["d2"]), due: clock.now.addingTimeInterval(60))
        let many = try await accept(.devices(["d0", "d1", "d2"]), upTo: 2)
        let plain = try await accept(.devices(["d3"]), upTo: 0)
        #expect(later.claimed.isEmpty && many.claimed.isEmpty && plain.claimed.isEmpty)
        #expect(try await store.outbox.claimDueDeliveries(limit: 10).count == 4)
        // A node that dies holding direct claims: they are queued again like any claim.
        let orphan = try await accept(.devices(["d3"]))
        #expect(orphan.claimed.count == 1)
        let other = try await HeraldStore.open(url: url, clock: .manual(clock))
        try await other.nodes.heartbeat()
        #expect(try await other.outbox.claimDueDeliveries(limit: 10).isEmpty)  // a live node's claim
        clock.advance(by: 60)
        try await other.nodes.heartbeat()
        #expect(try await other.nodes.rescueDeadClaims() == 5)  // the orphan and the four claimed above
        #expect(
            try await other.outbox.claimDueDeliveries(limit: 10).map(\.deviceID).sorted() == [
                "d0", "d1", "d2", "d2", "d3", "d3",
            ])  // with the one due at +60 s
        await other.close()
        await store.close()
    }

    @Test(
        "due steps fire in one transaction: taken in due order, their deliveries claimed for the node as they are written; a cancel that waits for it finds them in flight; a dead node's fire leaves them pending"
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
        // half of each. On SQLite the step is read and decided beside the writer: the cancel
        // commits first and the write fires nothing. On PostgreSQL the step is locked: the
        // cancel waits for the fire, and finds its deliveries being sent.
        let started = AsyncStream<Void>.makeStream()
        let cancel = Task {
            for await _ in started.stream { break }
            return try await store.notifications.cancel(appID: "a", cancelKey: "track:t", userIDs: ["u2"])
        }
        let sqlite = store.dialect == .sqlite
        let last = try await store.timers.fireDueTimers(limit: 10, directUpTo: 100) { _, timers in
            started.continuation.yield()
            if sqlite { _ = try? await cancel.value } else { try await Task.sleep(for: .milliseconds(100)) }
            return send(timers)
        }
        let cancelled = try await cancel.value
        #expect(last.taken == 1)
        if sqlite {
            #expect(last.fired == 0 && last.claimed.isEmpty && last.notifications == 0)
            #expect(cancelled.steps == 1 && cancelled.inFlight == 0 && cancelled.cancelled == 0)
        } else {
            #expect(last.claimed.map(\.deviceID).sorted() == ["d4", "d5"])
            #expect(cancelled.steps == 0 && cancelled.inFlight == 2 && cancelled.cancelled == 0)
        }
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
        "a fan-out's results: plain ones written as one list of ids, the rest row by row; each counted once, fenced by its claim"
    )
    func fanOutResults() async throws {
        let url = try await TestDatabase.url("results")
        let store = try await HeraldStore.open(url: url)
        let devices = makeDeviceTokens(100).enumerated().map {
            DeviceRecord(
                deviceID: "d\($0.offset)", userID: "u\($0.offset)", platform: "apns", token: $0.element,
                environment: "sandbox")
        }
        #expect(try await store.devices.importDevices(appID: "a", devices) == 100)
        let (record, _) = try await store.notifications.createNotification(
            appID: "a", id: UUID(), idempotencyKey: nil, content: Data("{}".utf8),
            recipients: .devices(devices.map(\.deviceID)),
            excludeDeviceIDs: [], dueAt: Date())
        let claimed = try await store.outbox.claimDueDeliveries(limit: 200)
        #expect(claimed.count == 100)
        // 97 plain (one list), two failed with a reason and one with a trace (row by row).
        let results = claimed.enumerated().map { index, delivery in
            switch index {
            case 0, 1: DeliveryResult(delivery, .failed(reason: "BadDeviceToken"), attempts: 1)
            case 2: DeliveryResult(delivery, .sent, attempts: 1, trace: "[]")
            default: DeliveryResult(delivery, .sent, attempts: 1)
            }
        }
        // A stale copy of the plain ones under another claim changes nothing.
        let stale = claimed.dropFirst(3).map {
            DeliveryResult(
                ClaimedDelivery(
                    id: $0.id, notificationID: $0.notificationID, appID: $0.appID, deviceID: $0.deviceID,
                    platform: $0.platform, token: $0.token,
                    environment: $0.environment, attempts: 0, claim: $0.claim + 1),
                .failed(reason: "Stale"), attempts: 1)
        }
        #expect(try await store.outbox.recordResults(stale) == 0)
        #expect(try await store.outbox.recordResults(results) == 100)
        #expect(try await store.outbox.recordResults(results) == 0)  // written once
        // The counters and the rows agree.
        let counted = try await store.notifications.deliveryCounts(notificationID: record.id)
        #expect(counted[.sent] == 98 && counted[.failed] == 2 && counted[.queued] == 0, "\(counted)")
        let rows = try await store.notifications.deliveries(notificationID: record.id, limit: 200, offset: 0)
        #expect(rows.filter { $0.status == .sent && $0.attempts == 1 }.count == 98)
        #expect(rows.filter { $0.status == .failed && $0.reason == "BadDeviceToken" }.count == 2)
        await store.close()
    }

    @Test(
        "SQLite: an accepted notification is synced to disk before createNotification returns; accepts arriving together share transactions and fsyncs; one that fails fails alone"
    )
    func acceptIsSynced() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "herald-walsync-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let store = try await HeraldStore.open(
            url: "sqlite://" + directory.appendingPathComponent("herald.sqlite").path)
        let devices = makeDeviceTokens(20).enumerated().map {
            DeviceRecord(
                deviceID: "d\($0.offset)", userID: "u\($0.offset)", platform: "apns", token: $0.element,
                environment: "sandbox")
        }
        #expect(try await store.devices.importDevices(appID: "a", devices) == 20)
        #expect(store.walSyncs == 0)  // an import is not a durable transaction
        _ = try await store.notifications.createNotification(
            appID: "a", id: UUID(), idempotencyKey: nil, content: Data("{}".utf8), recipients: .devices(["d0"]),
            excludeDeviceIDs: [], dueAt: Date())
        #expect(store.walSyncs == 1)
        // Twenty at once: each returns after an fsync that began after its commit; none is lost.
        let ids = try await withThrowingTaskGroup(of: UUID.self) { group in
            for index in 0..<20 {
                group.addTask {
                    try await store.notifications.createNotification(
                        appID: "a", id: UUID(), idempotencyKey: nil, content: Data("{}".utf8),
                        recipients: .devices(["d\(index)"]),
                        excludeDeviceIDs: [], dueAt: Date()
                    ).0.id
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(Set(ids).count == 20)
        #expect((2...21).contains(store.walSyncs), "\(store.walSyncs) fsyncs for 21 accepts")
        for id in ids { #expect(try await store.notifications.notification(appID: "a", id: id)?.recipients == 1) }
        // They arrived while one held the writer: the others shared transactions.
        #expect(store.groupedAccepts > 0)
        // One that fails (the id of a notification already stored) among others: only it fails.
        let outcomes = await withTaskGroup(of: Bool.self) { group in
            for index in 0..<6 {
                group.addTask {
                    (try? await store.notifications.createNotification(
                        appID: "a", id: index == 3 ? ids[0] : UUID(), idempotencyKey: nil, content: Data("{}".utf8),
                        recipients: .devices(["d\(index)"]),
                        excludeDeviceIDs: [], dueAt: Date())) != nil
                }
            }
            return await group.reduce(into: [Bool]()) { $0.append($1) }
        }
        #expect(outcomes.filter { $0 }.count == 5)
        await store.close()
    }

    @Test("SQLite: the WAL is copied into the database in the background, not left for the writer's own checkpoint")
    func backgroundCheckpoint() async throws {
        let url = try await TestDatabase.url("checkpoint", kind: .sqlite)
        let path = String(url.dropFirst("sqlite://".count))
        let store = try await HeraldStore.open(url: url)
        func size(_ file: String) -> Int {
            (try? FileManager.default.attributesOfItem(atPath: file)[.size] as? Int) ?? 0
        }
        let before = size(path)
        // ~6 MB of pages: far below the writer's own checkpoint (32,768 pages), so only the
        // background checkpointer moves them into the database file.
        let devices = makeDeviceTokens(20_000).enumerated().map {
            DeviceRecord(
                deviceID: "d\($0.offset)", userID: "u\($0.offset)", platform: "apns", token: $0.element,
                environment: "sandbox")
        }
        #expect(try await store.devices.importDevices(appID: "a", devices) == 20_000)
        var after = size(path)
        for _ in 0..<100 where after < before + 4_000_000 {
            try await Task.sleep(for: .milliseconds(50))
            after = size(path)
        }
        #expect(
            after >= before + 4_000_000, "database file \(before) -> \(after) bytes, WAL \(size(path + "-wal")) bytes")
        await store.close()
        // The last close checkpoints the rest and removes the WAL.
        #expect(!FileManager.default.fileExists(atPath: path + "-wal"))
    }

    @Test(
        "retention deletes answered history older than outbox.retention in small steps, never a delivery still to send")
    func retention() async throws {
        let clock = ManualClock(Date(timeIntervalSince1970: 1_800_000_000))
        let store = try await storeWithDevices("retention", count: 3, clock: clock) { _ in "u" }
        func send(key: String, answer: (Int) -> DeliveryResult.Outcome) async throws -> UUID {
            let (notification, _) = try await store.notifications.createNotification(
                appID: "a", id: UUID(), idempotencyKey: key, content: Data("{}".utf8), recipients: .all,
                excludeDeviceIDs: [], dueAt: clock.now)
            let claimed = try await store.outbox.claimDueDeliveries(limit: 10).sorted { $0.deviceID < $1.deviceID }
            #expect(claimed.count == 3)
            _ = try await store.outbox.recordResults(
                claimed.enumerated().map {
                    DeliveryResult($0.element, answer($0.offset), attempts: 1)
                })
            // Pacing records under a user per notification (a user's own new sends would prune
            // its records older than a day themselves).
            try await store.outbox.recordUserSends(appID: "a", sends: [(key, notification.id)], at: clock.now)
            return notification.id
        }
        // Day 0: one notification fully answered, one with a delivery queued again for day 30.
        let answered = try await send(key: "old") { $0 == 0 ? .failed(reason: "BadDeviceToken") : .sent }
        let pending = try await send(key: "pending") {
            $0 == 0
                ? .retry(reason: "TooManyRequests", dueAt: clock.now.addingTimeInterval(30 * 86_400))
                : .suppressed(reason: "Vacation")
        }
        // Day 6: one more, within the retention at day 8.
        clock.advance(by: 6 * 86_400)
        let recent = try await send(key: "recent") { _ in .sent }
        clock.advance(by: 2 * 86_400)
        var pruned = HeraldStore.Pruned()
        var steps = 0
        while true {
            let step = try await store.pruneHistory(before: clock.now.addingTimeInterval(-7 * 86_400), limit: 2)
            pruned += step
            steps += 1
            guard step.reached(2) else { break }
        }
        #expect(pruned == HeraldStore.Pruned(deliveries: 5, notifications: 1, userSends: 2))
        #expect(steps == 3)
        #expect(try await store.notifications.notification(appID: "a", id: answered) == nil)
        #expect(try await store.notifications.deliveries(notificationID: answered, limit: 10, offset: 0).isEmpty)
        // The queued delivery and its notification stay, whatever their age; so does day 6.
        #expect(try await store.notifications.notification(appID: "a", id: pending) != nil)
        #expect(
            try await store.notifications.deliveries(notificationID: pending, limit: 10, offset: 0).map(\.status) == [
                .queued
            ])
        #expect(try await store.notifications.deliveries(notificationID: recent, limit: 10, offset: 0).count == 3)
        let sends = try await store.outbox.recentSends(
            appID: "a", userIDs: ["old", "pending", "recent"], since: .distantPast)
        #expect(sends.mapValues { $0.map(\.0) } == ["recent": [recent]])
        // Nothing older is left: another pass deletes nothing.
        #expect(try await store.pruneHistory(before: clock.now.addingTimeInterval(-7 * 86_400)) == HeraldStore.Pruned())
        await store.close()
    }

    @Test(
        "deferred deliveries whose time has come and new sends share each claim: a 09:00 backlog does not starve new sends"
    )
    func backlogSharesClaims() async throws {
        let clock = ManualClock(Date(timeIntervalSince1970: 1_800_000_000))
        let store = try await storeWithDevices("backlog", count: 10, clock: clock) { "u\($0)" }
        let (quiet, _) = try await store.notifications.createNotification(
            appID: "a", id: UUID(), idempotencyKey: nil, content: Data("{}".utf8), recipients: .all,
            excludeDeviceIDs: [], dueAt: clock.now)
        let held = try await store.outbox.claimDueDeliveries(limit: 100)
        _ = try await store.outbox.recordResults(
            held.map {
                DeliveryResult(
                    $0, .deferred(reason: "QuietHours", until: clock.now.addingTimeInterval(3600)), attempts: 0)
            })
        clock.advance(by: 3600)
        let (fresh, _) = try await store.notifications.createNotification(
            appID: "a", id: UUID(), idempotencyKey: nil, content: Data("{}".utf8), recipients: .devices(["d0", "d1"]),
            excludeDeviceIDs: [], dueAt: clock.now)
        let first = try await store.outbox.claimDueDeliveries(limit: 4)
        #expect(first.filter { $0.notificationID == fresh.id }.count == 2)
        #expect(first.filter { $0.notificationID == quiet.id }.count == 2)
        // What one side leaves, the other takes.
        let second = try await store.outbox.claimDueDeliveries(limit: 100)
        #expect(second.count == 8 && second.allSatisfy { $0.notificationID == quiet.id })
        await store.close()
    }

    @Test(
        "urgent deliveries are claimed before bulk ones, and apps share a claim instead of the biggest fan-out taking it"
    )
    func lanesAndAppsShareClaims() async throws {
        let clock = ManualClock(Date(timeIntervalSince1970: 1_800_000_000))
        let store = try await storeWithDevices("lanes", count: 10, clock: clock) { "u\($0)" }
        let other = makeDeviceTokens(4).enumerated().map {
            DeviceRecord(
                deviceID: "b\($0.offset)", userID: "v\($0.offset)", platform: "apns", token: $0.element,
                environment: "sandbox")
        }
        #expect(try await store.devices.importDevices(appID: "b", other) == 4)
        func send(_ app: String, _ recipients: RecipientSelector, lane: DeliveryLane = .normal) async throws -> UUID {
            try await store.notifications.createNotification(
                appID: app, id: UUID(), idempotencyKey: nil, content: Data("{}".utf8), recipients: recipients,
                excludeDeviceIDs: [],
                dueAt: clock.now, lane: lane
            ).0.id
        }
        // App a's bulk fan-out is oldest; app b's arrives later, then a's urgent message.
        let bulk = try await send("a", .all)
        clock.advance(by: 1)
        let otherApp = try await send("b", .all)
        let urgent = try await send("a", .devices(["d0", "d1"]), lane: .urgent)
        let first = try await store.outbox.claimDueDeliveries(limit: 6)
        #expect(first.filter { $0.notificationID == urgent }.count == 2)
        #expect(first.filter { $0.notificationID == bulk }.count == 2)
        #expect(first.filter { $0.notificationID == otherApp }.count == 2)
        // App b has 2 left and a 8: a claim of 8 shares 4 + 4, b's unused 2 go to a.
        let second = try await store.outbox.claimDueDeliveries(limit: 8)
        #expect(second.filter { $0.notificationID == otherApp }.count == 2)
        #expect(second.filter { $0.notificationID == bulk }.count == 6)
        #expect(Set((first + second).map(\.id)).count == 14)
        let rest = try await store.outbox.claimDueDeliveries(limit: 100)
        #expect(rest.count == 2 && rest.allSatisfy { $0.notificationID == bulk })
        await store.close()
    }

    /// A store on `clock` with `count` APNs devices `d0…` of app "a", device i belonging to `user(i)`.
    private func storeWithDevices(_ name: String, count: Int, clock: ManualClock, user: (Int) -> String) async throws
        -> HeraldStore
    {
        let store = try await HeraldStore.open(url: try await TestDatabase.url(name), clock: .manual(clock))
        let devices = makeDeviceTokens(count).enumerated().map {
            DeviceRecord(
                deviceID: "d\($0.offset)", userID: user($0.offset), platform: "apns", token: $0.element,
                environment: "sandbox")
        }
        #expect(try await store.devices.importDevices(appID: "a", devices) == count)
        return store
    }
}
