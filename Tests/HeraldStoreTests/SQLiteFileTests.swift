import Foundation
import HeraldCore
import HeraldStore
import HeraldTesting
import Synchronization
import Testing

/// The SQLite file under load: the WAL's restarts and checkpoints, and the gauges read beside
/// the writer.
@Suite("Store: the SQLite file")
struct SQLiteFileTests {
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
        let result = await Task { () async throws -> OutboxGauges? in
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
        #expect(gauges?.totalDue == 3)
        #expect(gauges?.due[AppLane(app: "g", lane: .normal)] == 3)
        #expect(gauges?.totalDeferred == 0)
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
        let devices = makeDeviceRecords(20_000)
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
}
