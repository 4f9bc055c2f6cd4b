import Foundation
import HeraldCore
import PostgresNIO
import Synchronization

/// Broadcasts: a notification to all of an app's devices. Accepting one writes the notification
/// (its recipients counted) and a cursor over the app's devices, not a row per device. The
/// dispatcher is handed pages of devices after the cursor, each under a claim like a row's (the
/// node and a number every result must match), with row ids reserved for its devices; each
/// device's row is written once, by its result, already answered (or queued for a retry, or
/// deferred). One write per device instead of three (queued, sending, answered), and the 202
/// does not wait for the fan-out.
///
/// A page whose node died (or that was handed back) is handed out again, without the devices
/// that have their row. Devices registered after the acceptance are not recipients; devices
/// deactivated before their page is handed out are left out, and the notification's recipients
/// are corrected when the cursor reaches the end.
extension BroadcastRepository {
    /// The notification row of a broadcast, with the app's active devices counted as its
    /// recipients (all of them less the inactive ones: two index counts, where counting the
    /// active ones reads every device row), and its cursor. Returns the recipients.
    func acceptBroadcast(
        appID: String, id: UUID, idempotencyKey: String?, cancelKey: String?, content: Data, dueAt: Int64,
        lane: DeliveryLane, now: Int64,
        _ session: Session
    ) async throws -> Int {
        let cohort = TrackRepository.cohort(content, now: now)
        let counted = try await session.query(
            """
            INSERT INTO notifications (id, app_id, idempotency_key, content, created_at, cancel_key, type, day, recipients)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8,
                (SELECT count(*) FROM devices WHERE app_id = $2) - (SELECT count(*) FROM devices WHERE app_id = $2 AND active = 0))
            RETURNING recipients
            """,
            [
                .text(id.uuidString), .text(appID), idempotencyKey.map { .text($0) } ?? .null,
                .text(String(decoding: content, as: UTF8.self)),
                .integer(now), cancelKey.map { .text($0) } ?? .null, cohort.map { .text($0.type) } ?? .null,
                cohort.map { .integer($0.day) } ?? .null,
            ])
        let recipients = counted.first?.first?.integer ?? 0
        _ = try await session.query(
            "INSERT INTO broadcasts (notification_id, app_id, lane, due_at, accepted_at, expected) VALUES ($1, $2, $3, $4, $5, $6)",
            [
                .text(id.uuidString), .text(appID), .integer(Int64(lane.rawValue)), .integer(dueAt), .integer(now),
                .integer(recipients),
            ])
        try await database.nodes.notifyOutbox(session)
        database.noBroadcastsSince.store(0, ordering: .relaxed)
        return Int(recipients)
    }

    /// Hands this node up to `limit` devices of due broadcasts, in pages: pages handed back
    /// (their node died, or they were returned unsent) first, then the devices after the cursors
    /// of the broadcasts due, the room shared between apps (each app's oldest broadcast gets an
    /// equal part; what one leaves goes to the others). Runs inside the claim's transaction.
    ///
    /// `prefetched`: pages of devices read before the transaction (`prefetchBroadcastPages`),
    /// used where the cursor has not moved since.
    func claimBroadcastPages(
        limit: Int, now: Int64, prefetched: [String: PrefetchedPage] = [:], _ session: Session
    ) async throws -> [ClaimedDelivery] {
        guard limit > 0 else { return [] }
        var claimed: [ClaimedDelivery] = []
        for _ in 0..<8 where claimed.count < limit {
            guard let page = try await rehandPage(now: now, session) else { break }
            claimed += page
        }
        for _ in 0..<16 where claimed.count < limit {
            var apps = Set<String>()
            let firsts = try await session.query(
                "SELECT notification_id, app_id FROM broadcasts WHERE due_at <= $1 ORDER BY due_at, notification_id LIMIT 64",
                [.integer(now)]
            ).compactMap { row in row[1].text.flatMap { serves($0) && apps.insert($0).inserted ? row[0].text : nil } }
            guard !firsts.isEmpty else { break }
            let room = limit - claimed.count
            let share = max(1, room / firsts.count)
            // With more apps than room, each claim starts at another app (by the clock).
            let start = firsts.count > room ? Int(now % Int64(firsts.count)) : 0
            let before = claimed.count
            var ended = false
            for notification in firsts[start...] + firsts[..<start] where claimed.count < limit {
                let next = try await nextPage(
                    of: notification, limit: min(share, limit - claimed.count, Self.broadcastPageLimit), now: now,
                    prefetched: prefetched[notification], session)
                claimed += next.claimed
                ended = ended || next.ended
            }
            // Another round for the room left (a broadcast ended short of its share, or the
            // share was more than a page), as long as devices are still being handed out or a
            // broadcast ended: one that ended with no device left (its last page was exactly
            // full) makes way for the app's next one, which must not wait for another claim.
            guard claimed.count > before || ended else { break }
        }
        return claimed
    }

    /// A page handed back, oldest first, handed to this node again without the devices that
    /// have their row; nil when there is none. One whose devices all have their row is deleted
    /// (an empty page).
    private func rehandPage(now: Int64, _ session: Session) async throws -> [ClaimedDelivery]? {
        guard
            let page = try await session.query(
                """
                SELECT id, notification_id, app_id, lane, due_at, accepted_at, after_device, through_device, remaining, first_id, size
                FROM broadcast_pages WHERE claimed_by IS NULL AND due_at <= $1 ORDER BY id LIMIT 1\(dialect == .postgres ? " FOR UPDATE SKIP LOCKED" : "")
                """, [.integer(now)]
            ).first, page.count == 11, let pageID = page[0].integer, let notification = page[1].text,
            let app = page[2].text,
            let lane = page[3].integer, let due = page[4].integer, let accepted = page[5].integer,
            let after = page[6].text,
            let through = page[7].text, let remaining = page[8].integer, let firstID = page[9].integer,
            let size = page[10].integer
        else { return nil }
        // (Asked apart: a page handed back is rare, and the claim's query stays the one every
        // schema since broadcasts reads.)
        let deferredPages = database.deferredPages
        let more =
            try await session.query(
                "SELECT cancelled, devices, cancelled_users, trace\(deferredPages ? ", reason" : "") FROM broadcast_pages WHERE id = $1",
                [.integer(pageID)]
            ).first ?? []
        let fresh = more.count == 5 && more[4].text != nil
        if fresh { try await undefer(page: pageID, notification: notification, remaining: remaining, session) }
        if more.first?.integer == 1 {
            // Cancelled while a node held it (which died, or gave it back): never handed out again.
            _ = try await session.query("DELETE FROM broadcast_pages WHERE id = $1", [.integer(pageID)])
            _ = try await session.query(
                "UPDATE notifications SET cancelled_count = cancelled_count + $1 WHERE id = $2",
                [.integer(remaining), .text(notification)])
            return []
        }
        if more.count >= 4, let listed = more[1].text {
            let page = StepPage(
                id: pageID, notification: notification, app: app, lane: lane, acceptedAt: accepted, firstID: firstID,
                size: size,
                remaining: remaining, listed: listed, cancelledUsers: more[2].text, trace: more[3].text, fresh: fresh,
                range: after.isEmpty || through.isEmpty ? nil : (after, through))
            return try await rehandStepPage(page, due: due, session)
        }
        // The devices still without their row get the block's ids no row has taken, in device
        // order: the ids they were first sent with (unless a device of the page was deleted
        // meanwhile: then those after it shift; none is ever given an id twice).
        // Devices a page handed on (deferred together) have no row, and are not this page's now.
        let (used, handedOn) = try await usedIDs(
            notification: notification, page: pageID, firstID: firstID, size: size, session)
        let free = (firstID..<(firstID + size)).filter { !used.contains($0) }
        let devices = Array(
            try await session.query(
                Self.pageDevicesSQL(rehanding: true),
                [.text(app), .text(after), .integer(accepted), .text(through), .text(notification)]
            ).filter { !handedOn.devices.contains($0.first?.text ?? "") }.prefix(free.count))
        guard
            let claim = try await reclaim(
                page: pageID, notification: notification, handing: devices.count,
                lost: remaining - Int64(devices.count), session)
        else { return [] }
        let slot = BroadcastSlot(page: pageID, lane: Int(lane), dueAt: due, acceptedAt: accepted, userID: "")
        return try handOut(devices, ids: free, notification: notification, app: app, claim: claim, slot: slot)
    }

    /// The ids of a page's block that are taken: those with their row (its devices answered,
    /// or cancelled) and those another page of the notification keeps (`handedOn`, returned
    /// with their devices).
    func usedIDs(notification: String, page: Int64, firstID: Int64, size: Int64, _ session: Session) async throws
        -> (ids: Set<Int64>, handedOn: HandedOn)
    {
        let answered = Set(
            try await session.query(
                "SELECT id FROM deliveries WHERE id >= $1 AND id < $2", [.integer(firstID), .integer(firstID + size)]
            ).compactMap { $0.first?.integer })
        guard database.deferredPages, size > 0 else { return (answered, HandedOn()) }
        let handedOn = try await handedOn(
            notification: notification, page: page, ids: firstID...(firstID + size - 1), session)
        return (answered.union(handedOn.ids), handedOn)
    }

    /// A page handed out again to `handing` devices, `lost` others gone or deactivated since
    /// it was first handed out (no longer recipients): this node's, under a new claim (returned);
    /// nil, the page deleted, when there is none to hand out.
    func reclaim(page: Int64, notification: String, handing: Int, lost: Int64, _ session: Session) async throws
        -> Int64?
    {
        if lost != 0 {
            _ = try await session.query(
                "UPDATE notifications SET recipients = recipients - $1 WHERE id = $2",
                [.integer(lost), .text(notification)])
        }
        guard handing > 0 else {
            _ = try await session.query("DELETE FROM broadcast_pages WHERE id = $1", [.integer(page)])
            return nil
        }
        return try await session.query(
            "UPDATE broadcast_pages SET claimed_by = $1, claim = claim + 1, remaining = $2 WHERE id = $3 RETURNING claim",
            [.text(nodeID), .integer(Int64(handing)), .integer(page)]
        ).first?.first?.integer ?? 0
    }

    /// The next page of up to `limit` devices after a broadcast's cursor; a page short of
    /// `limit` was the last (the broadcast's row goes, its recipients corrected). PostgreSQL: a
    /// node handing out a page of the same broadcast holds its row until it commits; the next
    /// waits (briefly) and continues after the cursor it moved.
    private func nextPage(
        of notification: String, limit: Int, now: Int64, prefetched: PrefetchedPage?, _ session: Session
    ) async throws -> (claimed: [ClaimedDelivery], ended: Bool) {
        guard
            let broadcast = try await session.query(
                """
                SELECT app_id, lane, due_at, accepted_at, cursor, handed, expected FROM broadcasts
                WHERE notification_id = $1\(dialect == .postgres ? " FOR UPDATE" : "")
                """, [.text(notification)]
            ).first, broadcast.count == 7, let app = broadcast[0].text, let lane = broadcast[1].integer,
            let due = broadcast[2].integer,
            let accepted = broadcast[3].integer, let cursor = broadcast[4].text, let handed = broadcast[5].integer,
            let expected = broadcast[6].integer
        else { return ([], false) }
        let devices: [[Session.Value]]
        if let ready = prefetched?.devices(after: cursor, limit: limit) {
            devices = ready
        } else {
            devices = try await session.query(
                Self.pageDevicesSQL(rehanding: false),
                [.text(app), .text(cursor), .integer(accepted), .integer(Int64(limit))])
        }
        let ended = devices.count < limit
        if ended {
            // The end: the recipients become the devices handed out (those deactivated since the
            // acceptance left out, those activated again added).
            _ = try await session.query("DELETE FROM broadcasts WHERE notification_id = $1", [.text(notification)])
            let correction = expected - handed - Int64(devices.count)
            if correction != 0 {
                _ = try await session.query(
                    "UPDATE notifications SET recipients = recipients - $1 WHERE id = $2",
                    [.integer(correction), .text(notification)])
            }
        } else {
            _ = try await session.query(
                "UPDATE broadcasts SET cursor = $1, handed = handed + $2 WHERE notification_id = $3",
                [devices[devices.count - 1][0], .integer(Int64(devices.count)), .text(notification)])
        }
        guard let last = devices.last?[0] else { return ([], ended) }
        let count = Int64(devices.count)
        let firstID = try await reserveDeliveryIDs(count, session)
        guard
            let pageID = try await session.query(
                """
                INSERT INTO broadcast_pages
                    (notification_id, app_id, lane, due_at, accepted_at, after_device, through_device, first_id, size, remaining, claimed_by, claim)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9, $10, 1) RETURNING id
                """,
                [
                    .text(notification), .text(app), .integer(lane), .integer(due), .integer(accepted), .text(cursor),
                    last,
                    .integer(firstID), .integer(count), .text(nodeID),
                ]
            ).first?.first?.integer
        else { throw StoreError(.corrupt, "broadcast_pages: no id for a new page") }
        let slot = BroadcastSlot(page: pageID, lane: Int(lane), dueAt: due, acceptedAt: accepted, userID: "")
        return (
            try handOut(
                devices, ids: Array(firstID..<(firstID + count)), notification: notification, app: app, claim: 1,
                slot: slot), ended
        )
    }

    /// Reserves `count` (at most `broadcastPageLimit`) consecutive delivery row ids for a page;
    /// returns the first. SQLite: from the AUTOINCREMENT counter; PostgreSQL: a block of 4,096.
    func reserveDeliveryIDs(_ count: Int64, _ session: Session) async throws -> Int64 {
        switch dialect {
        case .sqlite:
            guard
                let reserved = try await session.query(
                    "UPDATE sqlite_sequence SET seq = seq + $1 WHERE name = 'deliveries' RETURNING seq",
                    [.integer(count)]
                ).first?.first?.integer
            else { throw StoreError(.corrupt, "sqlite_sequence: no counter for deliveries") }
            return reserved - count + 1
        case .postgres:
            guard let block = try await session.query("SELECT nextval('broadcast_blocks')").first?.first?.integer
            else { throw StoreError(.corrupt, "broadcast_blocks: no block") }
            return Self.postgresBlockBase + block * Int64(Self.broadcastPageLimit)
        }
    }

    /// Devices per page at most (a PostgreSQL id block's size).
    static let broadcastPageLimit = 4_096

    /// PostgreSQL: where broadcast id blocks start (2^50).
    static let postgresBlockBase: Int64 = 1 << 50

    /// Devices after a broadcast's cursor, read before the claim's transaction.
    struct PrefetchedPage: Sendable {
        var cursor: String
        var devices: [[Session.Value]]
        /// Whether fewer were found than asked for: nothing came after them then.
        var complete: Bool

        /// The first `limit` devices after `cursor` (the cursor the read started from, or a
        /// device of the read), or nil when the read does not cover them.
        func devices(after cursor: String, limit: Int) -> [[Session.Value]]? {
            let start: Int
            if cursor == self.cursor {
                start = 0
            } else if let index = devices.firstIndex(where: { $0.first == .text(cursor) }) {
                start = index + 1
            } else {
                return nil
            }
            let available = devices.count - start
            guard available >= limit || complete else { return nil }
            return Array(devices[start..<(start + min(limit, available))])
        }
    }

    /// Reads, on SQLite's reading connection (beside the writer, not under its lock), the next
    /// `limit` devices of the oldest due broadcast of each of up to four apps. A claim then
    /// holds the writer only to move the cursors and write the pages: the read was 60% of a
    /// claim's time under the lock in the 300,000-device fan-out.
    func prefetchBroadcastPages(limit: Int, now: Int64) async throws -> [String: PrefetchedPage] {
        guard limit > 0, dialect == .sqlite else { return [:] }
        return try await reading { session in
            var apps = Set<String>()
            let firsts = try await session.query(
                "SELECT notification_id, app_id, cursor, accepted_at FROM broadcasts WHERE due_at <= $1 ORDER BY due_at, notification_id LIMIT 64",
                [.integer(now)]
            ).filter { row in row[1].text.map { serves($0) && apps.insert($0).inserted } ?? false }
            var pages: [String: PrefetchedPage] = [:]
            for row in firsts.prefix(4) {
                guard row.count == 4, let notification = row[0].text, let app = row[1].text, let cursor = row[2].text,
                    let accepted = row[3].integer
                else { continue }
                let devices = try await session.query(
                    Self.pageDevicesSQL(rehanding: false),
                    [.text(app), .text(cursor), .integer(accepted), .integer(Int64(limit))])
                pages[notification] = PrefetchedPage(cursor: cursor, devices: devices, complete: devices.count < limit)
            }
            return pages
        }
    }

    /// The devices of a page, in device order: after $2, active, registered by the acceptance
    /// ($3); the first $4 of them, or (`rehanding` a page) those through $4 without a row of
    /// notification $5.
    static func pageDevicesSQL(rehanding: Bool) -> String {
        let range =
            rehanding
            ? "AND v.device_id <= $4 AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.notification_id = $5 AND d.device_id = v.device_id)"
            : ""
        return """
            SELECT \(handOutColumns) FROM devices v
            WHERE v.app_id = $1 AND v.device_id > $2 AND v.active = 1 AND v.created_at <= $3 \(range)
            ORDER BY v.device_id\(rehanding ? "" : " LIMIT $4")
            """
    }

    /// The device columns a page hands out (`handOut` reads them by position).
    static let handOutColumns = "device_id, platform, token, environment, user_id, locale, time_zone, app_version"
    static let handOutColumnCount = 8

    /// The page's devices as claimed deliveries, each with its reserved row id; `priors`, for
    /// moved rows, what each row held: its user, attempts and trace.
    func handOut(
        _ devices: [[Session.Value]], ids: [Int64], notification: String, app: String, claim: Int64,
        slot: BroadcastSlot, trace: String? = nil, priors: [(user: String, attempts: Int, trace: String?)]? = nil
    ) throws -> [ClaimedDelivery] {
        guard let notificationID = UUID(uuidString: notification) else {
            throw StoreError(.corrupt, "broadcasts: a notification id that is not a UUID")
        }
        guard ids.count >= devices.count else { throw StoreError(.corrupt, "deliveries: fewer row ids than devices") }
        let createdAt = Date(timeIntervalSince1970: Double(slot.acceptedAt) / 1000)
        var claimed: [ClaimedDelivery] = []
        claimed.reserveCapacity(devices.count)
        for (index, columns) in devices.enumerated() {
            guard columns.count == Self.handOutColumnCount, let deviceID = columns[0].text,
                let platform = columns[1].text,
                let token = columns[2].text,
                let environment = columns[3].text, let userID = columns[4].text
            else { throw StoreError(.corrupt, "devices: a row a broadcast cannot read") }
            var deviceSlot = slot
            deviceSlot.userID = userID
            if let priors, priors.indices.contains(index) {
                let prior = priors[index]
                deviceSlot.userID = prior.user
                deviceSlot.attempts = prior.attempts
                deviceSlot.trace = prior.trace
            }
            claimed.append(
                ClaimedDelivery(
                    id: ids[index], notificationID: notificationID, appID: app, deviceID: deviceID, platform: platform,
                    token: token,
                    environment: environment, attempts: deviceSlot.attempts, userID: userID, locale: columns[5].text,
                    timeZone: columns[6].text, trace: deviceSlot.trace ?? trace,
                    claim: claim, createdAt: createdAt, broadcast: deviceSlot, appVersion: columns[7].text))
        }
        return claimed
    }
}
