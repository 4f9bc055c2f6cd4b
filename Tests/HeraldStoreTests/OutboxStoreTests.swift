import Foundation
import HeraldCore
import HeraldStore
import HeraldTesting
import Synchronization
import Testing

/// The outbox in the store, on SQLite and PostgreSQL (`HERALD_TEST_DATABASE`): claims, results,
/// restarts, lanes and retention.
@Suite("Store: the outbox")
struct OutboxStoreTests {
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
        "a fan-out's results: plain ones written as one list of ids, the rest row by row; each counted once, fenced by its claim"
    )
    func fanOutResults() async throws {
        let url = try await TestDatabase.url("results")
        let store = try await HeraldStore.open(url: url)
        // d90–d99 on FCM: each platform's rows counted apart.
        let devices = makeDeviceTokens(100).enumerated().map {
            DeviceRecord(
                deviceID: "d\($0.offset)", userID: "u\($0.offset)", platform: $0.offset >= 90 ? "fcm" : "apns",
                token: $0.element, environment: "sandbox")
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
        // Per platform, what was written, once: the stale copy and the repeat add nothing.
        let hours = try await store.tracks.platformHours(
            appIDs: ["a"], since: PlatformHour.hour(of: Date()) - 1)
        var perPlatform: [String: PlatformHourCounts] = [:]
        for (key, counts) in hours { perPlatform[key.platform, default: .init()] += counts }
        let fcmFailed = Int64(claimed.prefix(2).filter { $0.platform == "fcm" }.count)
        #expect(
            perPlatform == [
                "apns": PlatformHourCounts(accepted: 90 - (2 - fcmFailed), failed: 2 - fcmFailed),
                "fcm": PlatformHourCounts(accepted: 10 - fcmFailed, failed: fcmFailed),
            ], "\(perPlatform)")
        // The counters and the rows agree.
        let counted = try await store.notifications.deliveryCounts(notificationID: record.id)
        #expect(counted[.sent] == 98 && counted[.failed] == 2 && counted[.queued] == 0, "\(counted)")
        let rows = try await store.notifications.deliveries(notificationID: record.id, limit: 200, offset: 0)
        #expect(rows.filter { $0.status == .sent && $0.attempts == 1 }.count == 98)
        #expect(rows.filter { $0.status == .failed && $0.reason == "BadDeviceToken" }.count == 2)
        await store.close()
    }

    /// A SQLite store on a file (so durable commits fsync) of app `a` with `devices` devices,
    /// `d0`… of users `u0`….
    static func sqliteFileStore(_ name: String, devices count: Int) async throws -> (HeraldStore, [DeviceRecord]) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "herald-\(name)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let store = try await HeraldStore.open(
            url: "sqlite://" + directory.appendingPathComponent("herald.sqlite").path)
        let devices = makeDeviceRecords(count)
        #expect(try await store.devices.importDevices(appID: "a", devices) == count)
        return (store, devices)
    }

    @Test(
        "SQLite: an accepted notification is synced to disk before createNotification returns; accepts arriving together share transactions and fsyncs; one that fails fails alone"
    )
    func acceptIsSynced() async throws {
        let (store, _) = try await Self.sqliteFileStore("walsync", devices: 20)
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
        #expect(store.groupedWrites > 0)
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

    @Test(
        "SQLite: opens reported together share transactions and fsyncs; each counts once, a repeat adds a report"
    )
    func opensShareCommits() async throws {
        let (store, devices) = try await Self.sqliteFileStore("opens", devices: 40)
        let (notification, _) = try await store.notifications.createNotification(
            appID: "a", id: UUID(), idempotencyKey: nil, content: Data("{}".utf8),
            recipients: .devices(devices.map(\.deviceID)), excludeDeviceIDs: [], dueAt: Date())
        let rows = try await store.notifications.deliveries(notificationID: notification.id, limit: 100, offset: 0)
        #expect(rows.count == 40)
        var references: [TrackRepository.DeliveryReference] = []
        for row in rows {
            references.append(try #require(try await store.tracks.deliveryReference(appID: "a", deliveryID: row.id)))
        }
        let syncsBefore = store.walSyncs
        // 40 opens at once and 10 of them again: 50 reports, 40 counted.
        let outcomes = try await withThrowingTaskGroup(of: Bool.self) { group in
            for reference in references + references.prefix(10) {
                group.addTask {
                    try await store.tracks.recordOpen(
                        appID: "a", reference, action: "default", openedAt: Date(), event: nil
                    ).counted
                }
            }
            return try await group.reduce(into: [Bool]()) { $0.append($1) }
        }
        #expect(outcomes.count == 50 && outcomes.filter { $0 }.count == 40)
        #expect(store.walSyncs - syncsBefore < 50, "\(store.walSyncs - syncsBefore) fsyncs for 50 opens")
        #expect(store.groupedWrites > 0)
        let summary = try await store.dashboard.recentNotifications(
            appID: "a", type: nil, status: nil, before: nil, limit: 1)
        #expect(summary.first?.opened == 40)
        await store.close()
    }

    @Test(
        "opens reported together are written as one batch: repeats in the batch count once with reports 1, 2, …; a refused or unknown one fails alone; one app.opened event each"
    )
    func opensBatched() async throws {
        let clock = ManualClock(Date(timeIntervalSince1970: 1_800_000_000))
        let store = try await storeWithDevices("open-batch", count: 40, clock: clock) { "u\($0)" }
        let (notification, _) = try await store.notifications.createNotification(
            appID: "a", id: UUID(), idempotencyKey: nil, content: Data("{}".utf8),
            recipients: .devices((0..<40).map { "d\($0)" }), excludeDeviceIDs: [], dueAt: clock.now)
        let rows = try await store.notifications.deliveries(notificationID: notification.id, limit: 100, offset: 0)
        #expect(rows.count == 40)
        struct Refused: Error {}
        func report(_ id: Int64, refuse: Bool = false) -> TrackRepository.OpenReport {
            TrackRepository.OpenReport(
                appID: "a", deliveryID: id, action: "default", openedAt: clock.now,
                check: { delivery in
                    if refuse { throw Refused() }
                    return #"{"delivery_id":\#(delivery.id)}"#
                })
        }
        // 40 opens, 10 of them twice, 5 refused and 2 of no delivery, all at once.
        let ids = rows.map(\.id)
        let reports =
            ids.map { report($0) } + ids.prefix(10).map { report($0) } + ids.suffix(5).map { report($0, refuse: true) }
            + [report(999_999_999), report(999_999_998)]
        let before = store.openBatches
        let outcomes = await withTaskGroup(of: Result<TrackRepository.ReportedOpen?, any Error>.self) { group in
            for item in reports {
                group.addTask {
                    do { return .success(try await store.tracks.reportOpen(item)) } catch { return .failure(error) }
                }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        let recorded = outcomes.compactMap { try? $0.get() }
        #expect(outcomes.filter { if case .failure(let error) = $0 { error is Refused } else { false } }.count == 5)
        #expect(outcomes.filter { if case .success(nil) = $0 { true } else { false } }.count == 2)
        #expect(recorded.count == 50 && recorded.filter(\.recorded.counted).count == 40)
        for id in ids.prefix(10) {
            let twice = recorded.filter { $0.delivery.id == id }
            #expect(twice.map(\.recorded.reports).sorted() == [1, 2] && twice.filter(\.recorded.counted).count == 1)
            #expect(twice[0].recorded.eventID != nil && twice[0].recorded.eventID == twice[1].recorded.eventID)
        }
        #expect(Set(recorded.compactMap(\.recorded.eventID)).count == 40)
        let after = store.openBatches
        #expect(after.opens - before.opens == reports.count && after.batches - before.batches < reports.count)
        // Reported again later: not counted, the same event.
        let again = try #require(try await store.tracks.reportOpen(report(ids[0])))
        #expect(!again.recorded.counted && again.recorded.reports == 3)
        #expect(again.recorded.eventID == recorded.first { $0.delivery.id == ids[0] }?.recorded.eventID)
        let summary = try await store.dashboard.recentNotifications(
            appID: "a", type: nil, status: nil, before: nil, limit: 1)
        #expect(summary.first?.opened == 40)
        await store.close()
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
        "deferred rows whose time has come keep their attempts and trace through the claim (PostgreSQL moves them into a page); a dead node's are handed out again, a device gone since fails, a user cancelled meanwhile ends cancelled"
    )
    func deferredRowsClaimedAgain() async throws {
        let clock = ManualClock(Date(timeIntervalSince1970: 1_800_000_000))
        let url = try await TestDatabase.url("deferred-claim")
        let store = try await HeraldStore.open(url: url, clock: .manual(clock))
        let devices = makeDeviceRecords(10)
        #expect(try await store.devices.importDevices(appID: "a", devices) == 10)
        let (notification, _) = try await store.notifications.createNotification(
            appID: "a", id: UUID(), idempotencyKey: nil, content: Data("{}".utf8), recipients: .all,
            excludeDeviceIDs: [], dueAt: clock.now, cancelKey: "k")
        func results(_ claimed: [ClaimedDelivery], _ outcome: (String) -> (DeliveryResult.Outcome, Int, String?)?)
            async throws
        {
            _ = try await store.outbox.recordResults(
                claimed.compactMap { delivery in
                    outcome(delivery.deviceID).map { DeliveryResult(delivery, $0.0, attempts: $0.1, trace: $0.2) }
                })
        }
        let quiet = #"[{"rule":"quiet_hours","message":"until 09:00"}]"#
        let again = #"[{"rule":"quiet_hours","message":"still quiet"}]"#
        let first = try await store.outbox.claimDueDeliveries(limit: 100)
        #expect(first.count == 10)
        try await results(first) {
            ["d0", "d1"].contains($0)
                ? (.retry(reason: "TooManyRequests", dueAt: clock.now.addingTimeInterval(10)), 1, nil)
                : (.deferred(reason: "QuietHours", until: clock.now.addingTimeInterval(3_600)), 0, quiet)
        }
        clock.advance(by: 10)
        let retried = try await store.outbox.claimDueDeliveries(limit: 100)
        #expect(retried.map(\.deviceID).sorted() == ["d0", "d1"])
        try await results(retried) { _ in
            (.deferred(reason: "QuietHours", until: clock.now.addingTimeInterval(3_590)), 0, again)
        }
        #expect(try await store.notifications.deliveryCounts(notificationID: notification.id)[.deferred] == 10)

        // 09:00: d8's device is gone; the other nine are claimed with what their rows held.
        clock.advance(by: 3_590)
        #expect(try await store.devices.deleteDevice(appID: "a", deviceID: "d8"))
        let wave = try await store.outbox.claimDueDeliveries(limit: 100)
        #expect(wave.map(\.deviceID).sorted() == ["d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7", "d9"])
        #expect(wave.allSatisfy { $0.trace == (["d0", "d1"].contains($0.deviceID) ? again : quiet) })
        #expect(wave.allSatisfy { $0.attempts == (["d0", "d1"].contains($0.deviceID) ? 1 : 0) })
        if TestDatabase.kind == .postgres {
            // Moved into a page: their rows are gone until their results write them again.
            #expect(wave.allSatisfy { $0.broadcast != nil })
            #expect(
                try await store.notifications.deliveries(notificationID: notification.id, limit: 20, offset: 0).count
                    == 1)
        }
        var counts = try await store.notifications.deliveryCounts(notificationID: notification.id)
        #expect(counts[.deferred] == 0 && counts[.failed] == 1)
        let sent = #"[{"rule":"sent","message":"ok"}]"#
        try await results(wave) { device in
            switch device {
            case "d0": (.sent, 1, nil)
            case "d1": (.deferred(reason: "QuietHours", until: clock.now.addingTimeInterval(600)), 0, nil)
            case "d9": (.tokenDead(reason: "Unregistered", since: nil), 1, sent)
            case "d5", "d6", "d7": nil  // in flight when the node dies
            default: (.sent, 1, sent)
            }
        }

        // The node dies; another takes its claims back. Meanwhile d5's device goes and u7's
        // deliveries are cancelled.
        let other = try await HeraldStore.open(url: url, clock: .manual(clock))
        clock.advance(by: 60)
        try await other.nodes.heartbeat()
        #expect(try await other.nodes.rescueDeadClaims() == 3)
        #expect(try await other.devices.deleteDevice(appID: "a", deviceID: "d5"))
        #expect(try await other.notifications.cancel(appID: "a", cancelKey: "k", userIDs: ["u7"]).cancelled == 1)
        let rescued = try await other.outbox.claimDueDeliveries(limit: 100)
        #expect(rescued.map(\.deviceID) == ["d6"])
        #expect(rescued.first?.trace == quiet)
        _ = try await other.outbox.recordResults(rescued.map { DeliveryResult($0, .sent, attempts: 1) })

        counts = try await other.notifications.deliveryCounts(notificationID: notification.id)
        #expect(counts[.sent] == 5 && counts[.failed] == 3 && counts[.deferred] == 1 && counts[.cancelled] == 1)
        #expect(counts[.queued] == 0)
        let rows = Dictionary(
            uniqueKeysWithValues: try await other.notifications.deliveries(
                notificationID: notification.id, limit: 20, offset: 0
            ).map { ($0.deviceID, $0) })
        #expect(rows.count == 10)
        #expect(rows["d0"]?.status == .sent && rows["d0"]?.attempts == 2 && rows["d0"]?.trace == again)
        #expect(rows["d1"]?.status == .deferred && rows["d1"]?.attempts == 1 && rows["d1"]?.trace == again)
        #expect(rows["d2"]?.status == .sent && rows["d2"]?.attempts == 1 && rows["d2"]?.trace == sent)
        #expect(rows["d5"]?.status == .failed && rows["d5"]?.reason == "DeviceUnregistered")
        #expect(rows["d6"]?.status == .sent && rows["d6"]?.trace == quiet)
        #expect(rows["d7"]?.status == .cancelled)
        #expect(rows["d8"]?.status == .failed && rows["d8"]?.reason == "DeviceUnregistered")
        #expect(rows["d9"]?.status == .failed && rows["d9"]?.reason == "Unregistered")
        #expect(try await other.devices.device(appID: "a", deviceID: "d9")?.active == false)
        await other.close()
        await store.close()
    }

    @Test(
        "a broadcast page's many deferrals wait as one page, not a row each: a rescue of the broadcast's page leaves them, a user cancelled meanwhile ends cancelled, a device gone fails, the rest are handed out at their time with their ids, attempts and trace"
    )
    func deferredTogetherWaitInAPage() async throws {
        let clock = ManualClock(Date(timeIntervalSince1970: 1_800_000_000))
        let url = try await TestDatabase.url("deferred-page")
        let store = try await HeraldStore.open(url: url, clock: .manual(clock))
        #expect(try await store.devices.importDevices(appID: "a", makeDeviceRecords(40)) == 40)
        let (notification, _) = try await store.notifications.createNotification(
            appID: "a", id: UUID(), idempotencyKey: nil, content: Data("{}".utf8), recipients: .all,
            excludeDeviceIDs: [], dueAt: clock.now, cancelKey: "k")
        let quiet = #"[{"rule":"quiet_hours","message":"until 09:00"}]"#
        let first = try await store.outbox.claimDueDeliveries(limit: 100)
        #expect(first.count == 40)
        let ids = Dictionary(uniqueKeysWithValues: first.map { ($0.deviceID, $0.id) })
        // d0…d29 deferred together, d30…d35 sent; d36…d39 unanswered when the node dies.
        _ = try await store.outbox.recordResults(
            first.compactMap { delivery in
                let index = Int(delivery.deviceID.dropFirst()) ?? 0
                if index < 30 {
                    return DeliveryResult(
                        delivery, .deferred(reason: "QuietHours", until: clock.now.addingTimeInterval(3_600)),
                        attempts: 0, trace: quiet)
                }
                return index < 36 ? DeliveryResult(delivery, .sent, attempts: 1) : nil
            })
        let waiting = try await store.broadcasts.waitingDeferredPages(notificationID: notification.id)
        #expect(waiting.pages == 1 && waiting.deliveries == 30)
        var counts = try await store.notifications.deliveryCounts(notificationID: notification.id)
        #expect(counts[.deferred] == 30 && counts[.sent] == 6)
        let listed = try await store.notifications.deliveries(notificationID: notification.id, limit: 100, offset: 0)
        #expect(listed.count == 36)
        #expect(listed.filter { $0.status == .deferred }.count == 30)
        let d7 = try #require(listed.first { $0.deviceID == "d7" })
        #expect(d7.id == ids["d7"] && d7.reason == "QuietHours" && d7.trace == quiet)
        #expect(d7.dueAt == clock.now.addingTimeInterval(3_600))

        // Another node takes the dead one's page back: only the four unanswered are handed out.
        let other = try await HeraldStore.open(url: url, clock: .manual(clock))
        clock.advance(by: 60)
        try await other.nodes.heartbeat()
        #expect(try await other.nodes.rescueDeadClaims() == 4)
        let rescued = try await other.outbox.claimDueDeliveries(limit: 100)
        #expect(rescued.map(\.deviceID).sorted() == ["d36", "d37", "d38", "d39"])
        #expect(rescued.allSatisfy { $0.id == ids[$0.deviceID] })
        _ = try await other.outbox.recordResults(rescued.map { DeliveryResult($0, .sent, attempts: 1) })

        // u3's deliveries are cancelled; d5's device goes.
        #expect(try await other.notifications.cancel(appID: "a", cancelKey: "k", userIDs: ["u3"]).cancelled == 1)
        #expect(try await other.devices.deleteDevice(appID: "a", deviceID: "d5"))
        counts = try await other.notifications.deliveryCounts(notificationID: notification.id)
        #expect(counts[.deferred] == 29 && counts[.cancelled] == 1 && counts[.sent] == 10)
        #expect(try await other.outbox.claimDueDeliveries(limit: 100).isEmpty)
        // Listed: the eleven rows in device order, then the page's 29 (d3 no longer among them).
        let all = try await other.notifications.deliveries(notificationID: notification.id, limit: 100, offset: 0)
        #expect(all.count == 40 && Set(all.map(\.deviceID)).count == 40)
        #expect(all.prefix(11).allSatisfy { $0.status != .deferred })
        #expect(all.dropFirst(11).allSatisfy { $0.status == .deferred && $0.deviceID != "d3" })
        #expect(all.dropFirst(11).map(\.deviceID) == all.dropFirst(11).map(\.deviceID).sorted())
        let across = try await other.notifications.deliveries(notificationID: notification.id, limit: 5, offset: 9)
        #expect(across.map(\.id) == all[9..<14].map(\.id))
        let inPage = try await other.notifications.deliveries(notificationID: notification.id, limit: 5, offset: 20)
        #expect(inPage.map(\.id) == all[20..<25].map(\.id))

        // Their time comes: the page is handed out, each with its id, attempts and trace.
        clock.advance(by: 3_600)
        try await other.nodes.heartbeat()
        let wave = try await other.outbox.claimDueDeliveries(limit: 100)
        #expect(wave.count == 28)
        #expect(!wave.contains { ["d3", "d5"].contains($0.deviceID) })
        #expect(wave.allSatisfy { $0.id == ids[$0.deviceID] && $0.trace == quiet && $0.attempts == 0 })
        counts = try await other.notifications.deliveryCounts(notificationID: notification.id)
        #expect(counts[.deferred] == 0 && counts[.failed] == 1)
        // d0 is deferred again (alone: a row); the others are sent.
        _ = try await other.outbox.recordResults(
            wave.map {
                $0.deviceID == "d0"
                    ? DeliveryResult(
                        $0, .deferred(reason: "QuietHours", until: clock.now.addingTimeInterval(600)), attempts: 0)
                    : DeliveryResult($0, .sent, attempts: 1)
            })
        counts = try await other.notifications.deliveryCounts(notificationID: notification.id)
        #expect(counts[.sent] == 37 && counts[.deferred] == 1 && counts[.cancelled] == 1 && counts[.failed] == 1)
        #expect(try await other.broadcasts.waitingDeferredPages(notificationID: notification.id).pages == 0)
        let rows = Dictionary(
            uniqueKeysWithValues: try await other.notifications.deliveries(
                notificationID: notification.id, limit: 100, offset: 0
            ).map { ($0.deviceID, $0) })
        #expect(rows.count == 40)
        #expect(rows["d3"]?.status == .cancelled && rows["d5"]?.status == .failed)
        #expect(rows["d7"]?.status == .sent && rows["d7"]?.id == ids["d7"] && rows["d7"]?.trace == quiet)
        for (app, figures) in try await other.nodes.deferredTotalsAgainstRows(appIDs: ["a"]) {
            #expect(figures.totals == figures.rows, "deferred_totals for \(app)")
        }
        await other.close()
        await store.close()
    }

    /// A store with 20 devices (users u0…u19) and a broadcast to them (cancel key "k") whose
    /// every delivery was deferred for an hour: one page of deferred deliveries.
    static func deferredPageOfTwenty(_ name: String, clock: ManualClock) async throws -> (
        HeraldStore, NotificationRecord
    ) {
        let store = try await HeraldStore.open(url: try await TestDatabase.url(name), clock: .manual(clock))
        #expect(try await store.devices.importDevices(appID: "a", makeDeviceRecords(20)) == 20)
        let (notification, _) = try await store.notifications.createNotification(
            appID: "a", id: UUID(), idempotencyKey: nil, content: Data("{}".utf8), recipients: .all,
            excludeDeviceIDs: [], dueAt: clock.now, cancelKey: "k")
        let claimed = try await store.outbox.claimDueDeliveries(limit: 100)
        _ = try await store.outbox.recordResults(
            claimed.map {
                DeliveryResult(
                    $0, .deferred(reason: "QuietHours", until: clock.now.addingTimeInterval(3_600)), attempts: 0)
            })
        return (store, notification)
    }

    @Test("a cancel for all ends a page of deferred deliveries: counted cancelled, never handed out")
    func cancelEndsDeferredPage() async throws {
        let clock = ManualClock(Date(timeIntervalSince1970: 1_800_000_000))
        let (store, notification) = try await Self.deferredPageOfTwenty("deferred-page-cancel", clock: clock)
        #expect(try await store.broadcasts.waitingDeferredPages(notificationID: notification.id).deliveries == 20)
        #expect(try await store.notifications.cancel(appID: "a", cancelKey: "k", userIDs: nil).cancelled == 20)
        let counts = try await store.notifications.deliveryCounts(notificationID: notification.id)
        #expect(counts[.cancelled] == 20 && counts[.deferred] == 0 && counts[.queued] == 0)
        clock.advance(by: 3_600)
        #expect(try await store.outbox.claimDueDeliveries(limit: 100).isEmpty)
        for (app, figures) in try await store.nodes.deferredTotalsAgainstRows(appIDs: ["a"]) {
            #expect(figures.totals == figures.rows, "deferred_totals for \(app)")
        }
        await store.close()
    }

    @Test("a notification resolved by a user ends the user's deliveries of it waiting in a page of deferred ones")
    func resolvedEndsDeferredInPage() async throws {
        let clock = ManualClock(Date(timeIntervalSince1970: 1_800_000_000))
        let (store, notification) = try await Self.deferredPageOfTwenty("deferred-page-resolved", clock: clock)
        let resolution = try await store.actions.resolve(
            appID: "a", notificationID: notification.id, userID: "u3", deviceID: "d3", label: "Done",
            replacement: (UUID(), Data("{}".utf8)))
        #expect(resolution.cancelled == 1 && resolution.devices == 0)
        let counts = try await store.notifications.deliveryCounts(notificationID: notification.id)
        #expect(counts[.deferred] == 19 && counts[.cancelled] == 1)
        #expect(try await store.broadcasts.waitingDeferredPages(notificationID: notification.id).deliveries == 19)
        let d3 = try await store.notifications.deliveries(notificationID: notification.id, limit: 100, offset: 0)
            .filter { $0.deviceID == "d3" }
        #expect(d3.count == 1 && d3.first?.status == .cancelled && d3.first?.reason == "Resolved")
        clock.advance(by: 3_600)
        let wave = try await store.outbox.claimDueDeliveries(limit: 100)
        #expect(wave.count == 19 && !wave.contains { $0.deviceID == "d3" })
        for (app, figures) in try await store.nodes.deferredTotalsAgainstRows(appIDs: ["a"]) {
            #expect(figures.totals == figures.rows, "deferred_totals for \(app)")
        }
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
