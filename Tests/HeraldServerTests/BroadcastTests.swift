import Foundation
import HTTPTypes
import HeraldCore
import HeraldEngine
import HeraldSimulator
import HeraldStore
import HeraldTesting
import Testing

/// A notification to all devices is a broadcast: no delivery rows at acceptance, pages of
/// devices handed out under fenced claims, one row per device written with its result.
@Suite("Broadcasts")
struct BroadcastTests {
    @Test(
        "two broadcasts of one app under a clock that stands still: when the first ends on an exactly full page, the claim goes on to the second (it stalled for good under a manual clock)"
    )
    func backToBack() async throws {
        let clock = ManualClock(Date(timeIntervalSince1970: 1_800_000_000))
        let store = try await HeraldStore.open(
            url: try await TestDatabase.url("broadcast-back-to-back"), clock: .manual(clock))
        defer { Task { await store.close() } }
        let devices = makeDeviceRecords(6)
        #expect(try await store.devices.importDevices(appID: "a", devices) == 6)
        var notifications: [UUID] = []
        for _ in 0..<2 {
            notifications.append(
                try await store.notifications.createNotification(
                    appID: "a", id: UUID(), idempotencyKey: nil, content: Data("{}".utf8), recipients: .all,
                    excludeDeviceIDs: [], dueAt: clock.now
                ).0.id)
        }
        // The first's six devices in two full pages; the third claim finds it ended and must
        // hand out the second's devices itself.
        let claims = [
            try await store.outbox.claimDueDeliveries(limit: 3), try await store.outbox.claimDueDeliveries(limit: 3),
            try await store.outbox.claimDueDeliveries(limit: 3),
        ]
        #expect(claims.map(\.count) == [3, 3, 3])
        // (Due at the same moment: taken in notification id order.)
        let order = notifications.sorted { $0.uuidString < $1.uuidString }
        #expect(
            claims[0].allSatisfy { $0.notificationID == order[0] }
                && claims[2].allSatisfy { $0.notificationID == order[1] })
        #expect(try await store.outbox.claimDueDeliveries(limit: 10).map(\.deviceID) == ["d3", "d4", "d5"])
    }

    @Test("a broadcast writes each device's row once, with its result; ids, odd device ids and counts hold")
    func rowsWrittenWithResults() async throws {
        let store = try await HeraldStore.open(url: try await TestDatabase.url("broadcast"))
        defer { Task { await store.close() } }
        let ids = ["a1", "a2", #"b"quote\back"#, "c\u{1}é", "d5"]
        let devices = zip(ids, makeDeviceTokens(ids.count)).map {
            DeviceRecord(deviceID: $0.0, userID: "user-" + $0.0, platform: "apns", token: $0.1, environment: "sandbox")
        }
        #expect(try await store.devices.importDevices(appID: "a", devices) == 5)
        let (first, _) = try await store.notifications.createNotification(
            appID: "a", id: UUID(), idempotencyKey: nil, content: Data("{}".utf8), recipients: .all,
            excludeDeviceIDs: [], dueAt: Date())
        #expect(first.recipients == 5)
        // Nothing per device is written at acceptance: every device is still to be sent.
        #expect(try await store.notifications.deliveries(notificationID: first.id, limit: 10, offset: 0).isEmpty)
        #expect(try await store.notifications.deliveryCounts(notificationID: first.id)[.queued] == 5)
        let depth = try await store.nodes.queueDepth()
        #expect(depth == 5)

        let page = try await store.outbox.claimDueDeliveries(limit: 2)
        let rest = try await store.outbox.claimDueDeliveries(limit: 10)
        #expect(page.map(\.deviceID) == ids.sorted().prefix(2).map { $0 })
        #expect(
            rest.count == 3 && (page + rest).allSatisfy { $0.broadcast != nil && $0.userID == "user-" + $0.deviceID })
        #expect(Set((page + rest).map(\.id)).count == 5)
        #expect(try await store.outbox.claimDueDeliveries(limit: 10).isEmpty)

        // Results: three sent, one dead token, one retry later.
        let all = page + rest
        let later = Date().addingTimeInterval(600)
        var results = all.prefix(3).map { DeliveryResult($0, .sent, attempts: 1) }
        results.append(DeliveryResult(all[3], .tokenDead(reason: "Unregistered", since: nil), attempts: 1))
        results.append(DeliveryResult(all[4], .retry(reason: "TooManyRequests", dueAt: later), attempts: 1))
        #expect(try await store.outbox.recordResults(results) == 5)
        let rows = try await store.notifications.deliveries(notificationID: first.id, limit: 10, offset: 0)
        #expect(rows.map(\.deviceID) == ids.sorted())
        #expect(
            Dictionary(uniqueKeysWithValues: rows.map { ($0.deviceID, $0.id) })
                == Dictionary(uniqueKeysWithValues: all.map { ($0.deviceID, $0.id) }))
        #expect(rows.map(\.status) == [.sent, .sent, .sent, .failed, .queued])
        #expect(
            rows[3].reason == "Unregistered" && rows[4].reason == "TooManyRequests"
                && rows.allSatisfy { $0.attempts == 1 })
        let counts = try await store.notifications.deliveryCounts(notificationID: first.id)
        #expect(counts[.sent] == 3 && counts[.failed] == 1 && counts[.queued] == 1)
        // A result written twice (a late duplicate) writes nothing: the page is answered.
        #expect(try await store.outbox.recordResults(Array(results.prefix(1))) == 0)
        #expect(try await store.devices.device(appID: "a", deviceID: all[3].deviceID)?.active == false)

        // The dead token's device is no recipient of the next broadcast; a device registered
        // after the acceptance is none either, and one deleted before its page is taken out.
        let (second, _) = try await store.notifications.createNotification(
            appID: "a", id: UUID(), idempotencyKey: nil, content: Data("{}".utf8), recipients: .all,
            excludeDeviceIDs: [], dueAt: Date())
        #expect(second.recipients == 4)
        try await Task.sleep(for: .milliseconds(5))
        #expect(
            try await store.devices.importDevices(
                appID: "a",
                [
                    DeviceRecord(
                        deviceID: "a0", userID: "late", platform: "apns", token: makeDeviceTokens(6)[5],
                        environment: "sandbox")
                ]) == 1)
        #expect(try await store.devices.deleteDevice(appID: "a", deviceID: "d5"))
        let handed = try await store.outbox.claimDueDeliveries(limit: 10)
        #expect(Set(handed.map(\.deviceID)) == Set(ids.sorted().prefix(3)))
        #expect(try await store.notifications.deliveryCounts(notificationID: second.id)[.queued] == 3)
        #expect(try await store.outbox.recordResults(handed.map { DeliveryResult($0, .sent, attempts: 1) }) == 3)
        #expect(try await store.notifications.deliveryCounts(notificationID: second.id)[.queued] == 0)
    }

    @Test(
        "writes of one page's results that overlap (outbox.result_writes on PostgreSQL) write every row once, and the page ends answered"
    )
    func overlappingPageWrites() async throws {
        let store = try await HeraldStore.open(url: try await TestDatabase.url("broadcast-overlap"))
        defer { Task { await store.close() } }
        let devices = makeDeviceRecords(40)
        #expect(try await store.devices.importDevices(appID: "a", devices) == 40)
        let (notification, _) = try await store.notifications.createNotification(
            appID: "a", id: UUID(), idempotencyKey: nil, content: Data("{}".utf8), recipients: .all,
            excludeDeviceIDs: [], dueAt: Date())
        let held = try await store.outbox.claimDueDeliveries(limit: 40)
        #expect(held.count == 40 && Set(held.compactMap(\.broadcast?.page)).count == 1)
        // Four writes of the one page at once, each a quarter of its answers.
        let written = try await withThrowingTaskGroup(of: Int.self) { group in
            for start in stride(from: 0, to: held.count, by: 10) {
                let quarter = held[start..<(start + 10)]
                group.addTask {
                    try await store.outbox.recordResults(quarter.map { DeliveryResult($0, .sent, attempts: 1) })
                }
            }
            return try await group.reduce(0, +)
        }
        #expect(written == 40)
        let rows = try await store.notifications.deliveries(notificationID: notification.id, limit: 100, offset: 0)
        #expect(rows.count == 40 && rows.allSatisfy { $0.status == .sent })
        let counts = try await store.notifications.deliveryCounts(notificationID: notification.id)
        #expect(counts[.sent] == 40 && counts[.queued] == 0)
        #expect(try await store.nodes.queueDepth() == 0)
        // The page is gone: a late duplicate writes nothing.
        #expect(try await store.outbox.recordResults([DeliveryResult(held[0], .sent, attempts: 1)]) == 0)
    }

    @Test("a page whose node died is handed out again with the same ids, without the devices already answered")
    func rescuedPageKeepsIDs() async throws {
        let url = try await TestDatabase.url("broadcast-rescue")
        let first = try await HeraldStore.open(url: url)
        let devices = makeDeviceRecords(8)
        #expect(try await first.devices.importDevices(appID: "a", devices) == 8)
        let (notification, _) = try await first.notifications.createNotification(
            appID: "a", id: UUID(), idempotencyKey: nil, content: Data("{}".utf8), recipients: .all,
            excludeDeviceIDs: [], dueAt: Date())
        let held = try await first.outbox.claimDueDeliveries(limit: 8)
        #expect(held.count == 8)
        // Three answers are written, then the node dies; a device of the page is deleted meanwhile.
        #expect(
            try await first.outbox.recordResults(held.prefix(3).map { DeliveryResult($0, .sent, attempts: 1) }) == 3)
        await first.close()
        let second = try await HeraldStore.open(url: url)
        #expect(try await second.devices.deleteDevice(appID: "a", deviceID: "d7"))
        #expect(try await second.nodes.rescueDeadClaims(deadAfter: 0) == 5)
        let again = try await second.outbox.claimDueDeliveries(limit: 100)
        #expect(again.map(\.deviceID) == ["d3", "d4", "d5", "d6"])
        #expect(again.map(\.id) == held[3..<7].map(\.id))
        #expect(again.allSatisfy { $0.claim == 2 })
        // The dead node's late answers are fenced off; the new claim's are written.
        #expect(
            try await second.outbox.recordResults(held.suffix(5).map { DeliveryResult($0, .sent, attempts: 1) }) == 0)
        #expect(try await second.outbox.recordResults(again.map { DeliveryResult($0, .sent, attempts: 1) }) == 4)
        let counts = try await second.notifications.deliveryCounts(notificationID: notification.id)
        #expect(counts[.sent] == 7 && counts[.queued] == 0)
        await second.close()
    }
}

/// A broadcast of a promotional type at night: each zone's users are deferred to their own
/// morning with their reason and trace (a zone's many kept as one page that waits, a zone of
/// few with rows of their own), then sent as each morning comes.
@Suite("Broadcasts deferred by quiet hours")
struct BroadcastDeferralTests {
    @Test("20 users in Paris and 2 in Tokyo at 22:00 UTC: deferred to 09:00 local, with their traces; sent then")
    func zones() async throws {
        let clock = ManualClock(PolicyScenarioTests.date("2026-11-22T22:00:00Z"))
        try await withServer(clock: clock) { server in
            let users = (0..<20).map { ("p\($0)", "Europe/Paris") } + (0..<2).map { ("t\($0)", "Asia/Tokyo") }
            let tokens = makeDeviceTokens(users.count)
            for ((user, zone), token) in zip(users, tokens) {
                #expect(try await server.register("d-" + user, user: user, token: token) == .created)
                let zoneSet = try await server.request(
                    .put, "/v1/apps/demo/users/\(user)", json: #"{"time_zone":"\#(zone)"}"#)
                #expect(zoneSet.status == .ok)
            }
            let sent = try await server.send(
                #"{"to":{"all":true},"type":"new_provider","data":{"New Provider":"Oura","provider_id":"oura"}}"#)
            let id = try #require(sent.body["id"] as? String)
            let view = try await server.settled(id)
            #expect((view["counts"] as? [String: Int])?["deferred"] == users.count)
            let deliveries = try #require(view["deliveries"] as? [[String: Any]])
            #expect(deliveries.count == users.count)
            for delivery in deliveries {
                let tokyo = (delivery["device_id"] as? String)?.hasPrefix("d-t") == true
                #expect(delivery["status"] as? String == "deferred")
                #expect(delivery["reason"] as? String == "quiet_hours")
                #expect(
                    delivery["until"] as? String == (tokyo ? "2026-11-23T00:00:00.000Z" : "2026-11-23T08:00:00.000Z"))
                let trace = (delivery["trace"] as? [[String: Any]])?.first?["message"] as? String
                #expect(
                    trace
                        == (tokyo
                            ? "deferred: quiet hours until 2026-11-23T09:00+09:00 Asia/Tokyo"
                            : "deferred: quiet hours until 2026-11-23T09:00+01:00 Europe/Paris"))
            }
            #expect(server.simulator.state.inboxSummary().total == 0)
            // Paris's twenty wait in one page (no row each), Tokyo's two as rows.
            let store = server.runtime.store
            let waitingPages = try await store.broadcasts.waitingDeferredPages(
                notificationID: try #require(UUID(uuidString: id)))
            #expect(waitingPages.pages == 1 && waitingPages.deliveries == 20)
            #expect(try await store.nodes.queueDepth() == 0)
            // The dashboard's view of a user's waiting deliveries finds them in the page too.
            let waiting = try await store.dashboard.waitingDeliveries(appID: "demo", userID: "p3", limit: 10)
            #expect(waiting.map(\.delivery.deviceID) == ["d-p3"])
            #expect(waiting.first?.delivery.status == .deferred && waiting.first?.delivery.reason == "quiet_hours")
            // The deferred gauge is read from the triggers' totals, and the retention pass's
            // fold of them (PostgreSQL) keeps the sum.
            let nodes = server.runtime.store.nodes
            #expect(try await nodes.outboxGauges(appIDs: ["demo"]).deferred == ["demo": users.count])
            _ = try await server.runtime.store.pruneHistory(before: clock.now.addingTimeInterval(-7 * 86_400))
            #expect(try await nodes.outboxGauges(appIDs: ["demo"]).deferred == ["demo": users.count])

            // 09:00 in Tokyo: its two go; Paris still sleeps.
            clock.set(PolicyScenarioTests.date("2026-11-23T00:00:01Z"))
            server.runtime.wake.signal()
            try await eventually { server.simulator.state.inboxSummary().total == 2 }
            try await eventually {
                (try? await nodes.outboxGauges(appIDs: ["demo"]).deferred) == ["demo": users.count - 2]
            }
            #expect(Set(tokens.suffix(2)).allSatisfy { !server.simulator.state.inbox(for: $0).isEmpty })
            // 09:00 in Paris: the rest, once each.
            clock.set(PolicyScenarioTests.date("2026-11-23T08:00:01Z"))
            server.runtime.wake.signal()
            try await eventually { server.simulator.state.inboxSummary().total == users.count }
            let after = try await server.settled(id)
            #expect((after["counts"] as? [String: Int])?["sent"] == users.count)
            #expect(server.simulator.state.inboxSummary().duplicates == 0)
        }
    }
}
