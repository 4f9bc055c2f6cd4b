import Foundation
import Synchronization

/// A Live Activity as a simulated device holds it.
package struct SimulatorLiveActivity: Sendable, Hashable {
    /// The push-to-start token the start came to.
    package var startToken: String
    /// The update token the device issued for it (rotated by `rotate`), when the start asked for one.
    package var updateToken: String?
    package var attributesType: String?
    package var attributes: [String: String]
    /// The content state as the last applied push carried it (JSON text).
    package var contentState: String?
    /// `active` or `ended`.
    package var status: String
    package var lastTimestamp: Int64
    package var staleDate: Int64?
    package var dismissalDate: Int64?
    package var relevanceScore: Double?
    /// The broadcast channel it listens on (`input-push-channel`).
    package var channel: String?
    /// Pushes applied (the start included), and the alerts' titles the device showed.
    package var applied: Int
    package var alerts: [String]
    /// The last priority a push came with.
    package var lastPriority: Int
}

/// The Live Activities of the simulated devices: a `start` to a push-to-start token makes one
/// (and an update token, when `input-push-token` asks); `update` and `end` to its update token
/// change it. Like ActivityKit, a device ignores — APNs still answers 200 — a start without an
/// alert, a push without a timestamp or not newer than the last one it applied, anything after
/// an end but a later end, a push to a token it has no activity for, and a content state over
/// 4 KB. Each ignored push is counted by its reason.
package final class SimulatorActivities: Sendable {
    private struct Storage {
        var activities: [SimulatorLiveActivity] = []
        /// Update token → index in `activities`.
        var byUpdateToken: [String: Int] = [:]
        var ignored: [String: Int] = [:]

        mutating func ignore(_ reason: String) { ignored[reason, default: 0] += 1 }

        /// An update or end to activity `index`, as ActivityKit applies it.
        mutating func change(_ index: Int, event: String, aps: [String: Any], priority: Int) {
            guard event == "update" || event == "end" else { return ignore("UnknownEvent") }
            guard let timestamp = (aps["timestamp"] as? NSNumber)?.int64Value else { return ignore("NoTimestamp") }
            var activity = activities[index]
            if activity.status == "ended" && event == "update" { return ignore("ActivityEnded") }
            guard timestamp > activity.lastTimestamp else { return ignore("StaleTimestamp") }
            if aps["dismissal-date"] != nil && event != "end" { return ignore("DismissalDateOnUpdate") }
            if let contentState = aps["content-state"] {
                guard let state = SimulatorActivities.state(contentState) else { return ignore("ContentStateTooLarge") }
                activity.contentState = state
            }
            activity.lastTimestamp = timestamp
            if let stale = (aps["stale-date"] as? NSNumber)?.int64Value { activity.staleDate = stale }
            if let score = (aps["relevance-score"] as? NSNumber)?.doubleValue { activity.relevanceScore = score }
            if let alert = (aps["alert"] as? [String: Any])?["title"] as? String { activity.alerts.append(alert) }
            if event == "end" {
                activity.status = "ended"
                activity.dismissalDate = (aps["dismissal-date"] as? NSNumber)?.int64Value
            }
            activity.applied += 1
            activity.lastPriority = priority
            activities[index] = activity
        }
    }

    private let storage = Mutex(Storage())

    package init() {}

    /// Every activity, in the order they started.
    package var all: [SimulatorLiveActivity] { storage.withLock { $0.activities } }

    /// Pushes the devices ignored, by reason (`StaleTimestamp`, `NoActivity`, `StartWithoutAlert`, …).
    package var ignored: [String: Int] { storage.withLock { $0.ignored } }

    /// The activity an update token belongs to.
    package func activity(updateToken: String) -> SimulatorLiveActivity? {
        storage.withLock { storage in storage.byUpdateToken[updateToken.lowercased()].map { storage.activities[$0] } }
    }

    /// The activities started through a push-to-start token.
    package func activities(startToken: String) -> [SimulatorLiveActivity] {
        storage.withLock { $0.activities.filter { $0.startToken == startToken.lowercased() } }
    }

    /// The device rotates an activity's update token (an APNs routing event): answers the new
    /// one; the old one is answered 410 from now on (`state.markDead`), as Apple does.
    package func rotate(updateToken: String, state: SimulatorState) -> String? {
        let old = updateToken.lowercased()
        let new = Self.newToken()
        let rotated = storage.withLock { storage -> Bool in
            guard let index = storage.byUpdateToken.removeValue(forKey: old) else { return false }
            storage.byUpdateToken[new] = index
            storage.activities[index].updateToken = new
            return true
        }
        guard rotated else { return nil }
        state.markDead(old, reason: "Unregistered")
        return new
    }

    package func clear() { storage.withLock { $0 = Storage() } }

    /// Applies an accepted `liveactivity` push as the device would.
    func apply(token: String, priority: Int, payload: Data) {
        let aps = Self.aps(payload)
        storage.withLock { storage in
            guard let event = aps["event"] as? String else { return storage.ignore("NoEvent") }
            if event == "start" {
                guard let timestamp = (aps["timestamp"] as? NSNumber)?.int64Value else {
                    return storage.ignore("NoTimestamp")
                }
                guard let alert = (aps["alert"] as? [String: Any])?["title"] as? String else {
                    return storage.ignore("StartWithoutAlert")
                }
                guard let contentState = aps["content-state"] else { return storage.ignore("StartWithoutContentState") }
                guard let state = Self.state(contentState) else { return storage.ignore("ContentStateTooLarge") }
                let wantsToken = (aps["input-push-token"] as? NSNumber)?.intValue == 1
                let updateToken = wantsToken ? Self.newToken() : nil
                let attributes = (aps["attributes"] as? [String: Any] ?? [:]).mapValues { "\($0)" }
                storage.activities.append(
                    SimulatorLiveActivity(
                        startToken: token, updateToken: updateToken, attributesType: aps["attributes-type"] as? String,
                        attributes: attributes, contentState: state, status: "active", lastTimestamp: timestamp,
                        staleDate: (aps["stale-date"] as? NSNumber)?.int64Value, dismissalDate: nil,
                        relevanceScore: (aps["relevance-score"] as? NSNumber)?.doubleValue,
                        channel: aps["input-push-channel"] as? String, applied: 1, alerts: [alert],
                        lastPriority: priority))
                if let updateToken { storage.byUpdateToken[updateToken] = storage.activities.count - 1 }
                return
            }
            guard let index = storage.byUpdateToken[token] else { return storage.ignore("NoActivity") }
            storage.change(index, event: event, aps: aps, priority: priority)
        }
    }

    // MARK: Broadcast channels

    /// Channels per bundle id: id → message storage policy.
    private let channels = Mutex<[String: [String: Int]]>([:])
    /// Broadcast publishes accepted.
    package var publishes: Int { published.load(ordering: .relaxed) }
    private let published = Atomic<Int>(0)

    /// Apple's limit of channels per app and environment.
    package static let channelLimit = 10_000

    /// The channels of `bundleID`.
    package func channels(bundleID: String) -> [String: Int] { channels.withLock { $0[bundleID] ?? [:] } }

    /// Makes a channel; nil when the bundle has `channelLimit` already.
    func createChannel(bundleID: String, policy: Int) -> String? {
        var generator = SystemRandomNumberGenerator()
        let id = Data((0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }).base64EncodedString()
        return channels.withLock { channels in
            guard (channels[bundleID]?.count ?? 0) < Self.channelLimit else { return nil }
            channels[bundleID, default: [:]][id] = policy
            return id
        }
    }

    /// Deletes a channel; false when it is not there.
    func deleteChannel(bundleID: String, id: String) -> Bool {
        channels.withLock { $0[bundleID]?.removeValue(forKey: id) != nil }
    }

    /// A channel's storage policy, when it exists.
    func channelPolicy(bundleID: String, id: String) -> Int? { channels.withLock { $0[bundleID]?[id] } }

    /// A publish APNs accepted: every activity listening on the channel takes it as its own push.
    func publish(channel: String, priority: Int, payload: Data) {
        published.add(1, ordering: .relaxed)
        let aps = Self.aps(payload)
        storage.withLock { storage in
            guard let event = aps["event"] as? String else { return storage.ignore("NoEvent") }
            for index in storage.activities.indices where storage.activities[index].channel == channel {
                storage.change(index, event: event, aps: aps, priority: priority)
            }
        }
    }

    private static func aps(_ payload: Data) -> [String: Any] {
        let object = (try? JSONSerialization.jsonObject(with: payload)) as? [String: Any]
        return object?["aps"] as? [String: Any] ?? [:]
    }

    /// A content state as JSON text with sorted keys; nil over ActivityKit's 4 KB.
    fileprivate static func state(_ value: Any) -> String? {
        guard let data = try? JSONSerialization.data(withJSONObject: value, options: [.sortedKeys]),
            data.count <= 4_096
        else { return nil }
        return String(decoding: data, as: UTF8.self)
    }

    /// 32 random bytes as hex, like an ActivityKit push token.
    private static func newToken() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
    }
}
