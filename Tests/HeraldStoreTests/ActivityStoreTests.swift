import Foundation
import HeraldCore
import HeraldStore
import HeraldTesting
import Testing

/// Live Activities' records: each push of an activity gets a later timestamp than the one
/// before, whichever node takes it; tokens are replaced and ended as APNs answers.
@Suite("Store: Live Activities")
struct ActivityStoreTests {
    @Test("two nodes updating one activity at once never take the same timestamp, and never an earlier one")
    func timestampsAcrossNodes() async throws {
        let url = try await TestDatabase.url("activities")
        let first = try await HeraldStore.open(url: url)
        let second = try await HeraldStore.open(url: url)
        let now = Date()
        let seconds = Int64(now.timeIntervalSince1970)
        #expect(
            try await first.activities.createActivity(
                appID: "a",
                .init(
                    id: "match", attributesType: "T", attributes: "{}", contentState: "{}", status: "active",
                    staleAt: nil, dismissalAt: nil, lastTimestamp: seconds, channelID: nil, createdAt: now,
                    updatedAt: now)))
        let taken = try await withThrowingTaskGroup(of: [Int64].self) { group in
            for store in [first, second] {
                group.addTask {
                    var mine: [Int64] = []
                    for _ in 0..<40 {
                        guard
                            case .advanced(let activity) = try await store.activities.advance(
                                appID: "a", activityID: "match", event: .update, timestamp: nil, now: seconds,
                                contentState: nil, staleAt: nil, dismissalAt: nil)
                        else { continue }
                        mine.append(activity.lastTimestamp)
                    }
                    return mine
                }
            }
            var all: [[Int64]] = []
            for try await mine in group { all.append(mine) }
            return all
        }
        // Each node saw its own timestamps rise; together they are 80 distinct ones after the start.
        #expect(taken.allSatisfy { $0 == $0.sorted() && $0.count == 40 })
        let all = taken.flatMap { $0 }
        #expect(Set(all).count == 80 && all.allSatisfy { $0 > seconds })
        #expect(try await first.activities.activity(appID: "a", activityID: "match")?.lastTimestamp == all.max())
        // A timestamp asked for that is not after the last is stale; an end ends it.
        #expect(
            try await second.activities.advance(
                appID: "a", activityID: "match", event: .update, timestamp: all.max(), now: seconds, contentState: nil,
                staleAt: nil, dismissalAt: nil) == .stale(last: all.max()!))
        guard
            case .advanced(let ended) = try await second.activities.advance(
                appID: "a", activityID: "match", event: .end, timestamp: nil, now: seconds, contentState: #"{"x":1}"#,
                staleAt: nil, dismissalAt: seconds + 60)
        else {
            Issue.record("the end was not taken")
            return
        }
        #expect(ended.status == "ended" && ended.dismissalAt == seconds + 60 && ended.contentState == #"{"x":1}"#)
        #expect(
            try await first.activities.advance(
                appID: "a", activityID: "match", event: .update, timestamp: nil, now: seconds, contentState: nil,
                staleAt: nil, dismissalAt: nil) == .ended)
        await first.close()
        await second.close()
    }

    @Test(
        "an update token is replaced when it rotates; a 410 ends the activity on that device only; priority pushes are counted once per timestamp"
    )
    func tokens() async throws {
        let url = try await TestDatabase.url("activity-tokens")
        let store = try await HeraldStore.open(url: url)
        let tokens = makeDeviceTokens(4)
        let devices = (0..<2).map {
            DeviceRecord(
                deviceID: "d\($0)", userID: "u\($0)", platform: "apns", token: tokens[$0], environment: "sandbox")
        }
        #expect(try await store.devices.importDevices(appID: "a", devices) == 2)
        #expect(
            try await store.activities.setUpdateToken(
                appID: "a", activityID: "o1", deviceID: "d0", token: tokens[2], attributesType: "T", ownedBy: "u1")
                == .otherUser)
        #expect(
            try await store.activities.setUpdateToken(
                appID: "a", activityID: "o1", deviceID: "nobody", token: tokens[2], attributesType: "T", ownedBy: nil)
                == .noDevice)
        for (device, token) in [("d0", tokens[2]), ("d1", tokens[3]), ("d0", String(repeating: "ab", count: 32))] {
            #expect(
                try await store.activities.setUpdateToken(
                    appID: "a", activityID: "o1", deviceID: device, token: token, attributesType: "T", ownedBy: nil)
                    == .stored)
        }
        var held = try await store.activities.devices(appID: "a", activityID: "o1")
        #expect(
            held.map { "\($0.deviceID):\($0.token ?? "-"):\($0.status)" } == [
                "d0:\(String(repeating: "ab", count: 32)):active", "d1:\(tokens[3]):active",
            ])
        #expect(try await store.activities.activity(appID: "a", activityID: "o1")?.attributesType == "T")
        let now = Date()
        func push(_ device: String?, _ timestamp: Int64, priority: Int = 10) -> ActivityRepository.Push {
            .init(
                deviceID: device, event: .update, timestamp: timestamp, priority: priority, status: "sent", reason: nil,
                trace: nil, createdAt: now)
        }
        try await store.activities.record(
            appID: "a", activityID: "o1",
            [
                (push("d0", 100), .none), (push("d1", 100), .updateTokenGone(reason: "Unregistered")),
                (push("d0", 101, priority: 5), .none),
            ])
        held = try await store.activities.devices(appID: "a", activityID: "o1")
        #expect(
            held.map { "\($0.deviceID):\($0.status):\($0.reason ?? "-")" } == ["d0:active:-", "d1:ended:Unregistered"])
        #expect(
            try await store.activities.priorityPushes(appID: "a", activityID: "o1", since: now.addingTimeInterval(-60))
                == 1)
        #expect(
            try await store.activities.pushes(appID: "a", activityID: "o1", limit: 10).map(\.timestamp) == [
                101, 100, 100,
            ])
        await store.close()
    }
}
