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

/// Owned, fenced claims on one database shared by two processes (two stores on one file).
@Suite("Claims: ownership and fencing")
struct ClaimFencingTests {
    @Test(
        "a second node on the same SQLite file takes nothing a live node holds; a dead node's claims are rescued and its late results fenced off"
    )
    func twoNodes() async throws {
        let url = try await TestDatabase.url("nodes")
        let first = try await HeraldStore.open(url: url)
        let devices = makeDeviceRecords(30)
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
        let devices = makeDeviceRecords(count)
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
        let devices = makeDeviceRecords(3)
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
        let devices = makeDeviceRecords(4)
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
