package import Foundation

/// A delivery claimed by the dispatcher, with what it needs to send it. Its fields live in one
/// immutable box: a delivery is copied into its batch, tracker, plan and result, and with nine
/// strings each copy was nine retains and releases (~5% of a fan-out's CPU in `perf`); now one.
/// A claim is read, never changed, so the fields are read-only.
package struct ClaimedDelivery: Sendable, Hashable {
    /// The fields, as they would be stored in the struct itself.
    struct Fields: Sendable, Hashable {
        var id: Int64
        var notificationID: UUID
        var appID: String
        var deviceID: String
        var platform: String
        var token: String
        var environment: String
        var attempts: Int
        var userID: String
        var locale: String?
        var timeZone: String?
        var trace: String?
        var claim: Int64
        var createdAt: Date
        var broadcast: BroadcastSlot?
        var appVersion: String?
    }

    private final class Box: Sendable {
        let fields: Fields
        init(_ fields: Fields) { self.fields = fields }
    }

    private let box: Box

    package init(
        id: Int64,
        notificationID: UUID,
        appID: String,
        deviceID: String,
        platform: String,
        token: String,
        environment: String,
        attempts: Int,
        userID: String = "",
        locale: String? = nil,
        timeZone: String? = nil,
        trace: String? = nil,
        claim: Int64 = 0,
        createdAt: Date = Date(timeIntervalSince1970: 0),
        broadcast: BroadcastSlot? = nil,
        appVersion: String? = nil
    ) {
        box = Box(
            Fields(
                id: id, notificationID: notificationID, appID: appID, deviceID: deviceID, platform: platform,
                token: token,
                environment: environment, attempts: attempts, userID: userID, locale: locale, timeZone: timeZone,
                trace: trace,
                claim: claim, createdAt: createdAt, broadcast: broadcast, appVersion: appVersion))
    }

    package var id: Int64 { box.fields.id }
    package var notificationID: UUID { box.fields.notificationID }
    package var appID: String { box.fields.appID }
    package var deviceID: String { box.fields.deviceID }
    package var platform: String { box.fields.platform }
    package var token: String { box.fields.token }
    package var environment: String { box.fields.environment }
    package var attempts: Int { box.fields.attempts }
    /// The device's user, locale and time zone: the policy engine needs them.
    package var userID: String { box.fields.userID }
    package var locale: String? { box.fields.locale }
    package var timeZone: String? { box.fields.timeZone }
    /// The decision trace so far (a JSON array), when the delivery was deferred before.
    package var trace: String? { box.fields.trace }
    /// This claim's number: the fencing token every result for it carries.
    package var claim: Int64 { box.fields.claim }
    /// When the delivery was queued (its age decides `outbox.max_age`).
    package var createdAt: Date { box.fields.createdAt }
    /// A delivery handed out in a page (a broadcast's, a step's, or deferred rows moved into one)
    /// has no row while it is sent: its result writes it (`BroadcastSlot`).
    package var broadcast: BroadcastSlot? { box.fields.broadcast }
    /// The device's app version when it was claimed: the build its result is counted under.
    package var appVersion: String? { box.fields.appVersion }

    package static func == (lhs: ClaimedDelivery, rhs: ClaimedDelivery) -> Bool {
        lhs.box === rhs.box || lhs.box.fields == rhs.box.fields
    }

    package func hash(into hasher: inout Hasher) { box.fields.hash(into: &hasher) }
}

/// A delivery without a row while it is sent: handed out in a page of devices (whose claim
/// fences its result), with the id of the row its result will insert. A broadcast's or a
/// step's devices have no row before their result; on PostgreSQL, deferred rows whose time has
/// come are moved into such a page as they are claimed (their row deleted, written again by
/// the result).
package struct BroadcastSlot: Sendable, Hashable {
    /// The page of devices it was handed out in (`broadcast_pages.id`).
    package var page: Int64
    package var lane: Int
    /// The notification's due time and acceptance (Unix milliseconds), the row's `due_at` and `created_at`.
    package var dueAt: Int64
    package var acceptedAt: Int64
    /// The device's user when the page was handed out.
    package var userID: String
    /// What the row held before it was moved into a page (a deferred row whose time came): its
    /// attempts, added to the result's, and its decision trace, kept when the result has none.
    package var attempts: Int
    package var trace: String?

    package init(
        page: Int64, lane: Int, dueAt: Int64, acceptedAt: Int64, userID: String, attempts: Int = 0,
        trace: String? = nil
    ) {
        self.page = page
        self.lane = lane
        self.dueAt = dueAt
        self.acceptedAt = acceptedAt
        self.userID = userID
        self.attempts = attempts
        self.trace = trace
    }
}

/// The result of one delivery, to be written in a batch.
package struct DeliveryResult: Sendable, Hashable {
    package enum Outcome: Sendable, Hashable {
        case sent
        case failed(reason: String)
        /// The token is dead: the delivery fails and the device becomes inactive.
        case tokenDead(reason: String, since: Date?)
        /// Not sent now: back to the queue at `dueAt`.
        case retry(reason: String, dueAt: Date)
        /// The policy engine held it back until `until` (quiet hours, pacing).
        case deferred(reason: String, until: Date)
        /// The policy engine decided it is not sent at all (preference off, vacation).
        case suppressed(reason: String)
    }

    package var deliveryID: Int64
    /// The claim the result answers (`ClaimedDelivery.claim`): written only if it still holds.
    package var claim: Int64
    package var notificationID: UUID
    package var appID: String
    package var deviceID: String
    package var outcome: Outcome
    package var attempts: Int
    /// The whole decision trace (a JSON array) to store, when the policy engine ran; nil keeps
    /// the one stored.
    package var trace: String?

    /// A broadcast's delivery: the result inserts its row.
    package var broadcast: BroadcastSlot?

    /// When the row was created (`ClaimedDelivery.createdAt`): PostgreSQL's partition key, so a
    /// result's update looks in its day's partition only.
    package var createdAt: Date

    /// The device's platform (`apns`, `fcm`): what the platform's hourly counts add it to.
    package var platform: String
    /// The device's app version (with `platform`, the build the result is counted under).
    package var appVersion: String?

    package init(
        deliveryID: Int64, claim: Int64, notificationID: UUID, appID: String, deviceID: String, outcome: Outcome,
        attempts: Int,
        trace: String? = nil, broadcast: BroadcastSlot? = nil, createdAt: Date, platform: String = "",
        appVersion: String? = nil
    ) {
        self.createdAt = createdAt
        self.platform = platform
        self.appVersion = appVersion
        self.deliveryID = deliveryID
        self.claim = claim
        self.notificationID = notificationID
        self.appID = appID
        self.deviceID = deviceID
        self.outcome = outcome
        self.attempts = attempts
        self.trace = trace
        self.broadcast = broadcast
    }

    /// The result of a claimed delivery. A trace the delivery already holds (a deferred one sent
    /// when its time came: the policy step added nothing) is left out: the store keeps the trace
    /// a result names none for (its row's, or for a broadcast's the slot's), so the result is
    /// written as a plain one, and the answer journal does not carry it again.
    package init(_ delivery: ClaimedDelivery, _ outcome: Outcome, attempts: Int, trace: String? = nil) {
        let stored = delivery.broadcast.map(\.trace) ?? delivery.trace
        self.init(
            deliveryID: delivery.id, claim: delivery.claim, notificationID: delivery.notificationID,
            appID: delivery.appID,
            deviceID: delivery.deviceID, outcome: outcome, attempts: attempts, trace: trace == stored ? nil : trace,
            broadcast: delivery.broadcast,
            createdAt: delivery.createdAt, platform: delivery.platform, appVersion: delivery.appVersion)
    }
}

extension UUID {
    /// The `apns-id` of a delivery: derived from its notification and row id, so it never needs
    /// storing per row and is the same on every attempt.
    package static func apnsID(notification: UUID, delivery: Int64) -> UUID {
        var bytes = notification.uuid
        withUnsafeMutableBytes(of: &bytes) { buffer in
            var value = UInt64(bitPattern: delivery).bigEndian
            withUnsafeBytes(of: &value) { deliveryBytes in
                for index in 0..<8 { buffer[8 + index] ^= deliveryBytes[index] }
            }
            buffer[8] = (buffer[8] & 0x3f) | 0x80
        }
        return UUID(uuid: bytes)
    }
}
