import Foundation
import HeraldCore

/// A fired step's deliveries handed out as pages, as a broadcast's are (`HeraldStore+Broadcasts`):
/// no row per device until its result, which inserts it already answered. A due wave wrote each
/// step's delivery twice (a `sending` row as the step fired, then its result) and read it back
/// to hand it out; a page writes it once.
///
/// The page lists its devices (a JSON array of [device, user], in the order of the row ids
/// reserved for them), where a broadcast's page is a range of the app's devices. A page whose
/// node died (or that was handed back) is handed out again without the devices that have
/// their row. A cancel for some users finds their devices in the pages of the key's
/// notifications: in a page no node holds, they get their row at once, cancelled; in a page a
/// node holds, the users are marked (`cancelled_users`), and their devices' attempts end as they
/// end, none tried again (a retry or a deferral ends cancelled).
extension BroadcastRepository {
    /// A step's page read back to be handed out again.
    struct StepPage {
        var id: Int64
        var notification: String
        var app: String
        var lane: Int64
        var acceptedAt: Int64
        var firstID: Int64
        var size: Int64
        var remaining: Int64
        /// The JSON array of [device, user].
        var listed: String
        var cancelledUsers: String?
        var trace: String?
        /// Its entries wait, deferred (`HeraldStore+DeferredPages`): counted in the notification's
        /// deferred count, and each listed only while it waits (none has a row).
        var deferred = false
        /// A page of deferred deliveries handed out for the first time: none of its entries has
        /// a row or was handed on.
        var fresh = false
        /// A page of deferred deliveries: its first and last device, in byte order.
        var range: (first: String, last: String)? = nil
    }

    /// The active devices of `users` (an app's), as a step's page hands them out.
    func stepDevices(appID: String, users: [String], _ session: Session) async throws -> [[Session.Value]] {
        try await session.query(
            """
            SELECT \(Self.handOutColumns) FROM devices
            WHERE app_id = $1 AND active = 1 AND user_id IN \(database.outbox.jsonList("$2"))
            """, [.text(appID), .text(SQLText.jsonArray(strings: users))])
    }

    /// Writes a fired step's notification to `devices` (`stepDevices`, read for it) and hands
    /// its deliveries to this node in pages (one per 4,096 devices), in the firing transaction.
    func handOutStep(
        appID: String, notification: UUID, content: Data, cancelKey: String?, lane: DeliveryLane, trace: String?,
        devices: [[Session.Value]],
        now: Int64, _ session: Session
    ) async throws -> [ClaimedDelivery] {
        let cohort = TrackRepository.cohort(content, now: now)
        _ = try await session.query(
            "INSERT INTO notifications (id, app_id, content, created_at, cancel_key, recipients, type, day) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            [
                .text(notification.uuidString), .text(appID), .text(String(decoding: content, as: UTF8.self)),
                .integer(now),
                cancelKey.map { .text($0) } ?? .null, .integer(Int64(devices.count)),
                cohort.map { .text($0.type) } ?? .null,
                cohort.map { .integer($0.day) } ?? .null,
            ])
        var claimed: [ClaimedDelivery] = []
        claimed.reserveCapacity(devices.count)
        for page in devices.chunked(Self.broadcastPageLimit) {
            let count = Int64(page.count)
            let firstID = try await reserveDeliveryIDs(count, session)
            var listed = "["
            listed.reserveCapacity(page.count * 32)
            for (index, columns) in page.enumerated() {
                guard columns.count == Self.handOutColumnCount, let device = columns[0].text, let user = columns[4].text
                else { throw StoreError(.corrupt, "devices: a row a step cannot read") }
                listed += index == 0 ? "[" : ",["
                SQLText.appendJSON(device, to: &listed)
                listed += ","
                SQLText.appendJSON(user, to: &listed)
                listed += "]"
            }
            listed += "]"
            let pageID = try await insertListedPage(
                notification: notification.uuidString, app: appID, lane: Int64(lane.rawValue), dueAt: now,
                acceptedAt: now, firstID: firstID, size: count, listed: listed, trace: trace, session)
            let slot = BroadcastSlot(page: pageID, lane: lane.rawValue, dueAt: now, acceptedAt: now, userID: "")
            claimed += try handOut(
                Array(page), ids: Array(firstID..<(firstID + count)), notification: notification.uuidString, app: appID,
                claim: 1, slot: slot,
                trace: trace)
        }
        return claimed
    }

    /// Writes a page that lists its devices (`listed`, `ListedEntry`s), held by this node under
    /// its first claim; returns its id.
    func insertListedPage(
        notification: String, app: String, lane: Int64, dueAt: Int64, acceptedAt: Int64, firstID: Int64, size: Int64,
        listed: String, trace: String?, _ session: Session
    ) async throws -> Int64 {
        guard
            let pageID = try await session.query(
                """
                INSERT INTO broadcast_pages
                    (notification_id, app_id, lane, due_at, accepted_at, after_device, through_device, first_id, size, remaining, claimed_by, claim,
                     devices, trace)
                VALUES ($1, $2, $3, $4, $5, '', '', $6, $7, $7, $8, 1, $9, $10) RETURNING id
                """,
                [
                    .text(notification), .text(app), .integer(lane), .integer(dueAt), .integer(acceptedAt),
                    .integer(firstID), .integer(size), .text(nodeID), .text(listed), trace.map { .text($0) } ?? .null,
                ]
            ).first?.first?.integer
        else { throw StoreError(.corrupt, "broadcast_pages: no id for a new page") }
        return pageID
    }

    /// A step's page handed out again (its node died, or gave it back): the devices without
    /// their row, less those of users cancelled meanwhile (they get their row, cancelled) and
    /// those gone or deactivated since (no longer recipients).
    func rehandStepPage(_ page: StepPage, due: Int64, _ session: Session) async throws -> [ClaimedDelivery] {
        let waiting = try await unansweredEntries(of: page, session)
        if waiting.contains(where: { $0.entry.id != nil }) {
            return try await rehandMovedPage(page, waiting, due: due, session)
        }
        let cancelledUsers = Set(SQLText.jsonStrings(page.cancelledUsers))
        let cancelled = waiting.filter { cancelledUsers.contains($0.user) }
        if !cancelled.isEmpty {
            _ = try await writeEndedEntries(
                cancelled.map { ($0.id, $0.device, $0.user) }, of: page, status: .cancelled,
                reason: NotificationRepository.cancelledReason, session)
        }
        let live = waiting.filter { !cancelledUsers.contains($0.user) }
        var found: [String: [Session.Value]] = [:]
        if !live.isEmpty {
            for row in try await session.query(
                """
                SELECT \(Self.handOutColumns) FROM devices
                WHERE app_id = $1 AND active = 1 AND device_id IN \(database.outbox.jsonList("$2"))
                """, [.text(page.app), .text(SQLText.jsonArray(strings: live.map(\.device)))])
            {
                if let device = row.first?.text { found[device] = row }
            }
        }
        let handed = live.filter { found[$0.device] != nil }
        guard
            let claim = try await reclaim(
                page: page.id, notification: page.notification, handing: handed.count,
                lost: Int64(live.count - handed.count), session)
        else { return [] }
        let slot = BroadcastSlot(
            page: page.id, lane: Int(page.lane), dueAt: due, acceptedAt: page.acceptedAt, userID: "")
        return try handOut(
            handed.compactMap { found[$0.device] }, ids: handed.map(\.id), notification: page.notification,
            app: page.app, claim: claim, slot: slot,
            trace: page.trace)
    }

    /// A page's entries that have no row yet, with their ids: a step's reserved ids, or the
    /// ids moved rows had (`HeraldStore+DeferredPages`).
    func unansweredEntries(of page: StepPage, _ session: Session) async throws -> [(
        id: Int64, device: String, user: String, entry: ListedEntry
    )] {
        let entries = ListedEntry.entries(page.listed)
        if page.fresh {
            return entries.compactMap { entry in entry.id.map { ($0, entry.device, entry.user, entry) } }
        }
        var used: Set<Int64>
        let ids = entries.compactMap(\.id)
        if let lowest = ids.min(), let highest = ids.max() {
            // Moved rows' ids are scattered: their rows are found by notification and device.
            used = Set(
                try await session.query(
                    "SELECT id FROM deliveries WHERE notification_id = $1 AND device_id IN \(database.outbox.jsonList("$2"))",
                    [.text(page.notification), .text(SQLText.jsonArray(strings: Set(entries.map(\.device))))]
                ).compactMap { $0.first?.integer })
            if database.deferredPages {
                used.formUnion(
                    try await handedOn(notification: page.notification, page: page.id, ids: lowest...highest, session)
                        .ids)
            }
        } else {
            used = try await usedIDs(
                notification: page.notification, page: page.id, firstID: page.firstID, size: page.size, session
            ).ids
        }
        return entries.enumerated().compactMap { index, entry in
            let id = entry.id ?? page.firstID + Int64(index)
            guard !used.contains(id) else { return nil }
            return (id, entry.device, entry.user, entry)
        }
    }

    /// Writes the rows of a page's devices that end before they are handed out again (cancelled,
    /// or failed: their device gone), and counts them on the notification; the page has that
    /// many fewer devices left (and goes when none is). Returns how many were written.
    func writeEndedEntries(
        _ entries: [(id: Int64, device: String, user: String)], of page: StepPage, status: DeliveryStatus,
        reason: String, _ session: Session
    ) async throws -> Int64 {
        let now = nowMilliseconds
        var written: Int64 = 0
        for entry in entries {
            written += Int64(
                try await session.query(
                    """
                    INSERT INTO deliveries (notification_id, app_id, created_at, lane, updated_at, id, device_id, user_id, status, reason, attempts, due_at)
                    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $10, $9, 0, $3)
                    ON CONFLICT DO NOTHING RETURNING id
                    """,
                    [
                        .text(page.notification), .text(page.app), .integer(page.acceptedAt), .integer(page.lane),
                        .integer(now), .integer(entry.id),
                        .text(entry.device), .text(entry.user), .text(reason), .text(status.rawValue),
                    ]
                ).count)
        }
        guard written > 0 else { return 0 }
        if page.deferred {
            // A waiting page lists only the deliveries that still wait.
            let ended = Set(entries.map(\.id))
            _ = try await session.query(
                "UPDATE broadcast_pages SET devices = $1 WHERE id = $2",
                [
                    .text(ListedEntry.list(ListedEntry.entries(page.listed).filter { !ended.contains($0.id ?? -1) })),
                    .integer(page.id),
                ])
        }
        if let column = OutboxRepository.counterColumn[status] {
            _ = try await session.query(
                "UPDATE notifications SET \(column) = \(column) + $1\(page.deferred ? ", deferred_count = deferred_count - $1" : "") WHERE id = $2",
                [.integer(written), .text(page.notification)])
        }
        let left = try await session.query(
            "UPDATE broadcast_pages SET remaining = remaining - $1 WHERE id = $2 RETURNING remaining",
            [.integer(written), .integer(page.id)])
        if let remaining = left.first?.first?.integer, remaining <= 0 {
            _ = try await session.query("DELETE FROM broadcast_pages WHERE id = $1", [.integer(page.id)])
        }
        return written
    }

    /// A cancel's part, for all users, in the pages of `notifications` (a broadcast's or a
    /// step's): a page no node holds goes, its devices cancelled; a held one is marked
    /// cancelled (its devices' attempts end as they end, none is tried again). Returns the
    /// devices cancelled by notification (for its counters), those of them that were deferred
    /// (a page of deferred deliveries), and those in flight.
    func cancelPages(of notifications: [String], _ session: Session) async throws -> (
        cancelled: [String: Int64], undeferred: [String: Int64], inFlight: Int64
    ) {
        let list = SQLText.placeholders(notifications.count, from: 1)
        let deferredPages = database.deferredPages
        var cancelled: [String: Int64] = [:]
        var undeferred: [String: Int64] = [:]
        for row in try await session.query(
            "DELETE FROM broadcast_pages WHERE notification_id IN (\(list)) AND claimed_by IS NULL RETURNING notification_id, remaining\(deferredPages ? ", reason" : "")",
            notifications.map { .text($0) })
        {
            guard let id = row[0].text, let remaining = row[1].integer else { continue }
            cancelled[id, default: 0] += remaining
            if row.count == 3, row[2].text != nil { undeferred[id, default: 0] += remaining }
        }
        let held = try await session.query(
            "UPDATE broadcast_pages SET cancelled = 1 WHERE notification_id IN (\(list)) AND claimed_by IS NOT NULL RETURNING remaining",
            notifications.map { .text($0) })
        return (cancelled, undeferred, held.reduce(0) { $0 + ($1.first?.integer ?? 0) })
    }

    /// A cancel's part, for `userIDs`, in the step pages of `notifications`: their devices in a
    /// page no node holds get their row, cancelled (counted); in a held page the users are
    /// marked (on PostgreSQL the pages locked: a result or another cancel waits). Returns
    /// (cancelled, in flight) devices.
    func cancelStepPages(of notifications: [String], userIDs: [String], _ session: Session) async throws -> (
        cancelled: Int64, inFlight: Int64
    ) {
        let binds = notifications.map { Session.Value.text($0) }
        let list = SQLText.placeholders(notifications.count, from: 1)
        let named = Set(userIDs)
        let quoted = named.map { user in
            var json = ""
            SQLText.appendJSON(user, to: &json)
            return json
        }
        var cancelled: Int64 = 0
        var inFlight: Int64 = 0
        let deferredPages = database.deferredPages
        for row in try await session.query(
            """
            SELECT id, notification_id, app_id, lane, accepted_at, first_id, size, remaining, devices, cancelled_users, claimed_by\(deferredPages ? ", reason" : "")
            FROM broadcast_pages WHERE notification_id IN (\(list)) AND devices IS NOT NULL AND cancelled = 0\(dialect == .postgres ? " FOR UPDATE" : "")
            """, binds)
        {
            guard row.count >= 11, let id = row[0].integer, let notification = row[1].text, let app = row[2].text,
                let lane = row[3].integer,
                let accepted = row[4].integer, let firstID = row[5].integer, let size = row[6].integer,
                let remaining = row[7].integer,
                let listed = row[8].text
            else { continue }
            // Only a page that names one of the users is read further.
            guard quoted.contains(where: { listed.contains($0) }) else { continue }
            let page = StepPage(
                id: id, notification: notification, app: app, lane: lane, acceptedAt: accepted, firstID: firstID,
                size: size, remaining: remaining,
                listed: listed, cancelledUsers: row[9].text, trace: nil,
                deferred: row.count == 12 && row[11].text != nil)
            let hits = try await unansweredEntries(of: page, session).filter { named.contains($0.user) }
            guard !hits.isEmpty else { continue }
            if row[10].text == nil {
                cancelled += try await writeEndedEntries(
                    hits.map { ($0.id, $0.device, $0.user) }, of: page, status: .cancelled,
                    reason: NotificationRepository.cancelledReason, session)
            } else {
                var users = SQLText.jsonStrings(page.cancelledUsers)
                for user in Set(hits.map(\.user)).sorted() where !users.contains(user) { users.append(user) }
                _ = try await session.query(
                    "UPDATE broadcast_pages SET cancelled_users = $1 WHERE id = $2",
                    [.text(SQLText.jsonArray(strings: users)), .integer(id)])
                inFlight += Int64(hits.count)
            }
        }
        return (cancelled, inFlight)
    }
}
