package import Foundation
import Synchronization

/// One notification the simulator accepted: what went over the wire.
package struct SimulatorInboxEntry: Sendable, Hashable {
    package var deviceToken: String
    package var apnsID: String
    package var pushType: String
    package var topic: String
    package var priority: Int
    package var expiration: Int?
    package var collapseID: String?
    package var payload: Data
    package var receivedAt: Date
    /// What the device replaces an earlier notification by instead of showing another:
    /// `apns-collapse-id`; for FCM, `android.notification.tag`.
    package var replaceKey: String?

    package init(
        deviceToken: String, apnsID: String, pushType: String, topic: String, priority: Int, expiration: Int?,
        collapseID: String?, payload: Data, receivedAt: Date, replaceKey: String? = nil
    ) {
        self.deviceToken = deviceToken
        self.apnsID = apnsID
        self.pushType = pushType
        self.topic = topic
        self.priority = priority
        self.expiration = expiration
        self.collapseID = collapseID
        self.payload = payload
        self.receivedAt = receivedAt
        self.replaceKey = replaceKey
    }

    /// The payload parsed as a JSON object.
    package var payloadObject: [String: Any]? {
        (try? JSONSerialization.jsonObject(with: payload)) as? [String: Any]
    }
}

/// Counters of everything the simulator saw.
package struct SimulatorCounters: Sendable, Hashable {
    package var requests = 0
    package var accepted = 0
    package var byStatus: [Int: Int] = [:]
    package var byReason: [String: Int] = [:]
    package var connections = 0
    package var goAways = 0
    package var signatureVerifications = 0
    package var tokenChanges = 0
    /// Streams refused (RST_STREAM REFUSED_STREAM) for exceeding the advertised limit.
    package var refusedStreams = 0
    /// FCM: OAuth2 assertions exchanged for access tokens, and sends by answer status.
    package var fcmTokenExchanges = 0
    package var fcmRequests = 0
}

/// The simulator's shared state: inbox, dead tokens, scripted answers, faults and counters.
package final class SimulatorState: Sendable {
    private struct Storage {
        var inbox: [String: [SimulatorInboxEntry]] = [:]
        var inboxCount = 0
        var duplicates = 0
        /// Notifications that replaced an earlier one of the same token with the same replace key.
        var replaced = 0
        var dead: [String: (reason: String, timestamp: Int64)] = [:]
        /// Scripted answers; `retryAfter` is sent as given (a hostile peer may send `1e300`).
        var scripted: [String: (status: Int, reason: String, retryAfter: String?)] = [:]
        var counters = SimulatorCounters()
        var faults: SimulatorFaults
        /// FCM OAuth2 access tokens issued, with their project and expiry.
        var fcmAccessTokens: [String: (project: String, expires: Date)] = [:]
        /// Per registration token: the start of its current one-minute window and messages in it.
        var fcmDeviceWindows: [String: (start: Date, count: Int)] = [:]
    }

    private let storage: Mutex<Storage>
    private let inboxLimit: Int
    /// The simulated devices' Live Activities, as `liveactivity` pushes make and change them.
    package let activities = SimulatorActivities()
    /// The simulated browsers' web push subscriptions.
    package let webpush = SimulatorWebPush()

    package init(faults: SimulatorFaults = SimulatorFaults(), inboxLimit: Int = 1_000_000) {
        storage = Mutex(Storage(faults: faults))
        self.inboxLimit = inboxLimit
    }

    // MARK: Inbox

    package func accept(_ entry: SimulatorInboxEntry) {
        if entry.pushType == "liveactivity" {
            activities.apply(token: entry.deviceToken, priority: entry.priority, payload: entry.payload)
        }
        storage.withLock { storage in
            storage.counters.requests += 1
            storage.counters.accepted += 1
            storage.counters.byStatus[200, default: 0] += 1
            if storage.inboxCount >= inboxLimit { return }
            if let earlier = storage.inbox[entry.deviceToken] {
                storage.duplicates += 1
                if let key = entry.replaceKey, earlier.contains(where: { $0.replaceKey == key }) {
                    storage.replaced += 1
                }
            }
            storage.inbox[entry.deviceToken, default: []].append(entry)
            storage.inboxCount += 1
        }
    }

    func reject(status: Int, reason: String) {
        storage.withLock { storage in
            storage.counters.requests += 1
            storage.counters.byStatus[status, default: 0] += 1
            storage.counters.byReason[reason, default: 0] += 1
        }
    }

    /// The notifications accepted for a token, oldest first.
    package func inbox(for token: String) -> [SimulatorInboxEntry] {
        storage.withLock { $0.inbox[token.lowercased()] ?? [] }
    }

    /// Totals: notifications, distinct tokens, notifications beyond the first per token, and
    /// what the devices would show: every notification but those that replaced an earlier one
    /// of their token with the same replace key (a resend with the same collapse identity).
    package func inboxSummary() -> (total: Int, tokens: Int, duplicates: Int, shown: Int) {
        storage.withLock { ($0.inboxCount, $0.inbox.count, $0.duplicates, $0.inboxCount - $0.replaced) }
    }

    package func clearInbox() {
        storage.withLock { storage in
            storage.inbox = [:]
            storage.inboxCount = 0
            storage.duplicates = 0
            storage.replaced = 0
        }
    }

    // MARK: Tokens

    /// From now on the token is answered 410 with `reason` (`Unregistered` or `ExpiredToken`) and `timestamp`.
    package func markDead(_ token: String, reason: String = "Unregistered", at timestamp: Date = Date()) {
        storage.withLock {
            $0.dead[token.lowercased()] = (reason, Int64(timestamp.timeIntervalSince1970 * 1000))
        }
    }

    package func revive(_ token: String) {
        _ = storage.withLock { $0.dead.removeValue(forKey: token.lowercased()) }
    }

    func deadEntry(for token: String) -> (reason: String, timestamp: Int64)? {
        storage.withLock { $0.dead[token] }
    }

    /// Answers every request for `token` with this status and reason (any reason Apple documents).
    package func script(_ token: String, status: Int, reason: String, retryAfter: String? = nil) {
        storage.withLock { $0.scripted[token.lowercased()] = (status, reason, retryAfter) }
    }

    package func removeScript(_ token: String) {
        _ = storage.withLock { $0.scripted.removeValue(forKey: token.lowercased()) }
    }

    func scripted(for token: String) -> (status: Int, reason: String, retryAfter: String?)? {
        storage.withLock { $0.scripted.isEmpty ? nil : $0.scripted[token] }
    }

    // MARK: FCM access tokens

    func issueFCMAccessToken(project: String, lifetime: TimeInterval, now: Date, random: inout SimulatorRandom)
        -> String
    {
        let token = "ya29.sim-" + SimulatorIdentifiers.randomUUIDString(using: &random)
        storage.withLock {
            $0.fcmAccessTokens[token] = (project, now.addingTimeInterval(lifetime))
            $0.counters.fcmTokenExchanges += 1
        }
        return token
    }

    /// The project an access token was issued for, while it is valid.
    func fcmProject(forAccessToken token: String, now: Date) -> String? {
        storage.withLock { storage in
            guard let entry = storage.fcmAccessTokens[token], entry.expires > now else { return nil }
            return entry.project
        }
    }

    /// Counts a message to `token` against the per-device rate; the seconds until the device's
    /// window ends when it is over `limit`, else `nil`.
    func takeFCMDeviceSlot(_ token: String, limit: Int, now: Date) -> TimeInterval? {
        storage.withLock { storage in
            if storage.fcmDeviceWindows.count > 100_000 {
                storage.fcmDeviceWindows = storage.fcmDeviceWindows.filter {
                    now.timeIntervalSince($0.value.start) < 60
                }
            }
            var window = storage.fcmDeviceWindows[token] ?? (now, 0)
            if now.timeIntervalSince(window.start) >= 60 { window = (now, 0) }
            guard window.count < limit else { return 60 - now.timeIntervalSince(window.start) }
            window.count += 1
            storage.fcmDeviceWindows[token] = window
            return nil
        }
    }

    /// Makes every FCM access token invalid (as when Google revokes them).
    package func revokeFCMAccessTokens() {
        storage.withLock { $0.fcmAccessTokens.removeAll() }
    }

    // MARK: Faults and counters

    package var faults: SimulatorFaults {
        get { storage.withLock { $0.faults } }
        set { storage.withLock { $0.faults = newValue } }
    }

    package var counters: SimulatorCounters { storage.withLock { $0.counters } }

    func count(_ update: (inout SimulatorCounters) -> Void) {
        storage.withLock { update(&$0.counters) }
    }
}
