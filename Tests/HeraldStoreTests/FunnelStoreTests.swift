import Foundation
import HeraldCore
import HeraldStore
import HeraldTesting
import Testing

/// The confirmed-delivery funnel per build (platform and app version), on SQLite and
/// PostgreSQL (`HERALD_TEST_DATABASE`): counted as deliveries are answered, received and opened,
/// and the same for what a store held before it kept those counts.
@Suite("Store: the funnel per build")
struct FunnelStoreTests {
    /// Six devices: two of build apns 1.0, two of apns 2.0, two on FCM without a version.
    static let devices = [
        ("d0", "apns", "1.0"), ("d1", "apns", "1.0"), ("d2", "apns", "2.0"), ("d3", "apns", "2.0"),
        ("d4", "fcm", nil), ("d5", "fcm", nil),
    ]

    static let start = Date(timeIntervalSince1970: 1_800_000_000)

    /// What `buildCounts` answers, as comparable rows: platform, version, sent, failed,
    /// received, opened, accepted not received.
    static func rows(_ counts: [TrackRepository.BuildDayCounts]) -> [[String]] {
        counts.map {
            [
                $0.platform, $0.appVersion ?? "-", "\($0.counts.sent)", "\($0.counts.failed)",
                "\($0.counts.received)", "\($0.counts.opened)", "\($0.counts.acceptedNotReceived)",
            ]
        }
    }

    /// Two notifications of type PN-02 to the six devices. The first: all answered at once (d5
    /// failed), received by d0 and d2, opened by d0 and d3. The second: d0–d2 answered, then
    /// two hours later d3–d5. Then the clock moves to 25 hours after the second's first answers.
    static func scenario(_ store: HeraldStore, _ clock: ManualClock) async throws {
        let tokens = makeDeviceTokens(6)
        let records = devices.enumerated().map { index, device in
            DeviceRecord(
                deviceID: device.0, userID: "u\(index)", platform: device.1,
                token: device.1 == "apns" ? tokens[index] : "fcm-token-\(index)", environment: "production",
                appVersion: device.2)
        }
        #expect(try await store.devices.importDevices(appID: "a", records) == 6)
        let content = Data(#"{"typed":{"type":"PN-02"}}"#.utf8)
        func send() async throws -> [String: ClaimedDelivery] {
            _ = try await store.notifications.createNotification(
                appID: "a", id: UUID(), idempotencyKey: nil, content: content, recipients: .all,
                excludeDeviceIDs: [], dueAt: clock.now)
            let claimed = try await store.outbox.claimDueDeliveries(limit: 100)
            #expect(claimed.count == 6)
            return Dictionary(uniqueKeysWithValues: claimed.map { ($0.deviceID, $0) })
        }
        let first = try await send()
        try await store.outbox.recordResults(
            first.values.map {
                DeliveryResult($0, $0.deviceID == "d5" ? .failed(reason: "BadDeviceToken") : .sent, attempts: 1)
            })
        for device in ["d0", "d2"] {
            let delivery = try #require(first[device])
            let outcome = try await store.tracks.recordReceipts(
                appID: "a", userID: nil,
                [.init(deliveryID: delivery.id, deviceID: device, receivedAt: clock.now, displayed: true)])
            guard case .recorded(let recorded) = outcome.first else {
                Issue.record("receipt of \(device): \(outcome)")
                continue
            }
            #expect(recorded.counted)
        }
        for device in ["d0", "d3"] {
            let delivery = try #require(first[device])
            let reference = try #require(try await store.tracks.deliveryReference(appID: "a", deliveryID: delivery.id))
            let open = try await store.tracks.recordOpen(
                appID: "a", reference, action: "default", openedAt: clock.now, event: nil)
            #expect(open.counted)
        }
        clock.advance(by: 3_600)
        let second = try await send()
        try await store.outbox.recordResults(
            ["d0", "d1", "d2"].compactMap { second[$0] }.map { DeliveryResult($0, .sent, attempts: 1) })
        clock.advance(by: 7_200)
        try await store.outbox.recordResults(
            ["d3", "d4", "d5"].compactMap { second[$0] }.map { DeliveryResult($0, .sent, attempts: 1) })
        // 25 hours after the second's first answers: the window's edge falls between its two.
        clock.advance(by: 25 * 3_600 - 7_200)
    }

    /// The counts the scenario leaves. Builds that reported a receipt: apns 1.0 and 2.0 (not
    /// FCM). Not received after 24 hours: d1 of the first and d3 (apns 2.0); of the second d0
    /// and d1 (apns 1.0) and d2 — d3, answered two hours later, is inside the window.
    static let expected = [
        ["apns", "1.0", "4", "0", "1", "1", "3"],
        ["apns", "2.0", "4", "0", "1", "1", "2"],
        ["fcm", "-", "3", "1", "0", "0", "0"],
    ]

    @Test(
        "answers, receipts and opens are counted per build as they are written; accepted but not received reads the deliveries only of a notification whose sending spans the window's edge"
    )
    func countedAsWritten() async throws {
        let clock = ManualClock(Self.start)
        let store = try await HeraldStore.open(url: try await TestDatabase.url("funnel"), clock: .manual(clock))
        try await Self.scenario(store, clock)
        let counts = try await store.tracks.buildCounts(appID: "a", days: 0...1_000_000)
        #expect(Self.rows(counts) == Self.expected)
        let funnel = try await store.tracks.funnelCounts(appID: "a", days: 0...1_000_000)
        #expect(funnel.map(\.acceptedNotReceived) == [5] && funnel.map(\.sent) == [11], "\(funnel)")
        // The same summed from the builds (what the dashboard's Analytics reads once).
        let summed = try await store.tracks.funnelCounts(appID: "a", days: 0...1_000_000, builds: counts)
        #expect(summed.map(\.acceptedNotReceived) == [5], "\(summed)")
        // Another two hours: the second notification's last answers leave the window too.
        clock.advance(by: 7_200)
        let later = try await store.tracks.funnelCounts(appID: "a", days: 0...1_000_000)
        #expect(later.map(\.acceptedNotReceived) == [6], "\(later)")
        await store.close()
    }

    /// 27: before the per-notification counts; 28: with them, before their sums per type, day
    /// and build.
    @Test(
        "a store written before the per-build counts (or their sums) were kept counts the same after its upgrade",
        arguments: [27, 28])
    func countedByTheUpgrade(schemaVersion: Int) async throws {
        let clock = ManualClock(Self.start)
        let url = try await TestDatabase.url("funnel-upgrade-\(schemaVersion)")
        let old = try await HeraldStore.open(url: url, clock: .manual(clock), schemaVersion: schemaVersion)
        try await Self.scenario(old, clock)
        await old.close()
        let store = try await HeraldStore.open(url: url, clock: .manual(clock))
        let counts = try await store.tracks.buildCounts(appID: "a", days: 0...1_000_000)
        #expect(Self.rows(counts) == Self.expected)
        await store.close()
    }
}
