package import Foundation
import HeraldCore

/// Deferred deliveries kept in pages: a page of deliveries the policy engine deferred together,
/// and (PostgreSQL) deferred rows whose time has come, moved into pages as they are claimed.
///
/// A broadcast's or a step's page whose results defer many of its deliveries to the same time
/// for the same reason (a zone's users inside quiet hours) writes them as one page, not a row
/// each (`DeferredGroup`): no node holds it, it is due when the deferral ends, and `reason`
/// says why it waits. Its entries are `[device, user, id, attempts, trace]`, as a moved page's.
/// The notification counts them deferred (`deferred_count`) until the page is first handed out
/// (`undefer`), when they are handed out as a moved page's are, their devices read anew. A 09:00
/// wave then claims a page where it claimed a row per delivery, and a night's broadcast writes
/// a page where it wrote a row per delivery. A cancel finds them as it finds a step's pages.
/// Pages that handed a delivery on to another page (deferred, or moved) are handed out again
/// without it (`handedOn`).
///
/// The claim deletes the rows it can send (`OutboxRepository.postgresClaimDeferredSQL`) and
/// writes a page per notification, day of creation and lane, held by this node, that lists
/// them: each entry `[device, user, id, attempts, trace]`, the trace an index into the page's
/// `trace` column (a JSON array of the distinct traces: a zone's users share theirs) or -1.
/// Each result inserts its row again, as a broadcast's does (`writeBroadcastResults`), with
/// the attempts and trace it had. A page whose node died (or that was handed back) is handed
/// out again (`rehandMovedPage`): the entries without their row, their devices read anew.
extension BroadcastRepository {
    /// An entry of a page's `devices` list: a step's `[device, user]` (its id is the page's
    /// first id plus its place), or a moved row's `[device, user, id, attempts, trace]`.
    struct ListedEntry: Decodable {
        var device: String
        var user: String
        var id: Int64?
        var attempts = 0
        var trace = -1

        init(device: String, user: String, id: Int64?, attempts: Int, trace: Int) {
            self.device = device
            self.user = user
            self.id = id
            self.attempts = attempts
            self.trace = trace
        }

        init(from decoder: any Decoder) throws {
            var container = try decoder.unkeyedContainer()
            device = try container.decode(String.self)
            user = try container.decode(String.self)
            guard !container.isAtEnd else { return }
            id = try container.decode(Int64.self)
            attempts = try container.decode(Int.self)
            trace = try container.decode(Int.self)
        }

        /// A page's entries; none when the list cannot be read.
        static func entries(_ listed: String) -> [ListedEntry] {
            (try? JSONDecoder().decode([ListedEntry].self, from: Data(listed.utf8))) ?? []
        }

        /// `,"user",` as a page's list holds it: a list without it names no entry of the user's.
        static func userMarker(_ user: String) -> String {
            var marker = ","
            SQLText.appendJSON(user, to: &marker)
            return marker + ","
        }

        /// Its trace, out of its page's `traces` (the page's `trace` column).
        func trace(in traces: [String]) -> String? { traces.indices.contains(trace) ? traces[trace] : nil }

        /// The delivery an entry of a waiting page of deferred deliveries stands for (it has no
        /// row until it is sent); nil for an entry without an id.
        func waitingDelivery(reason: String?, traces: [String], due: Int64, accepted: Int64) -> DeliveryRecord? {
            id.map {
                DeliveryRecord(
                    id: $0, deviceID: device, status: .deferred, reason: reason, attempts: attempts,
                    trace: trace(in: traces), dueAt: SQLText.date(due), createdAt: SQLText.date(accepted),
                    updatedAt: SQLText.date(accepted))
            }
        }

        /// Entries with their ids as a page's list: `[[device, user, id, attempts, trace], …]`.
        static func list(_ entries: some Collection<ListedEntry>) -> String {
            var listed = "["
            listed.reserveCapacity(entries.count * 48)
            for (index, entry) in entries.enumerated() {
                listed += index == 0 ? "[" : ",["
                SQLText.appendJSON(entry.device, to: &listed)
                listed += ","
                SQLText.appendJSON(entry.user, to: &listed)
                listed += "," + String(entry.id ?? 0) + "," + String(entry.attempts) + "," + String(entry.trace) + "]"
            }
            return listed + "]"
        }
    }

    /// A page's distinct traces (its `trace` column, a JSON array) and each entry's index into
    /// them: a zone's deliveries share one trace, written once.
    struct TraceTable {
        private(set) var traces: [String] = []
        private var places: [String: Int] = [:]

        /// The trace's index, added if new; -1 for none.
        mutating func index(of trace: String?) -> Int {
            guard let trace else { return -1 }
            if let place = places[trace] { return place }
            places[trace] = traces.count
            traces.append(trace)
            return traces.count - 1
        }

        var json: String { SQLText.jsonArray(strings: traces) }
    }

    /// Writes the pages of deferred rows a PostgreSQL claim deleted (`claimColumns` rows, all
    /// sendable) and returns each row's delivery by row id, handed out under its page's claim.
    func moveIntoPages(_ rows: [[Session.Value]], now: Int64, _ session: Session) async throws
        -> [Int64: ClaimedDelivery]
    {
        struct Key: Hashable {
            var notification: String
            var app: String
            var createdAt: Int64
            var lane: Int64
        }
        var groups: [(key: Key, rows: [[Session.Value]])] = []
        var place: [Key: Int] = [:]
        for columns in rows {
            guard columns.count == OutboxRepository.claimColumnCount, let notification = columns[1].text,
                let app = columns[2].text, let createdAt = columns[16].integer, let lane = columns[18].integer
            else { throw StoreError(.corrupt, "deliveries: a row the outbox cannot read") }
            let key = Key(notification: notification, app: app, createdAt: createdAt, lane: lane)
            if let index = place[key] {
                groups[index].rows.append(columns)
            } else {
                place[key] = groups.count
                groups.append((key, [columns]))
            }
        }
        var moved: [Int64: ClaimedDelivery] = [:]
        moved.reserveCapacity(rows.count)
        for (key, group) in groups {
            var traces = TraceTable()
            var entries: [ListedEntry] = []
            entries.reserveCapacity(group.count)
            for columns in group {
                guard let id = columns[0].integer, let device = columns[3].text, let attempts = columns[4].integer
                else { throw StoreError(.corrupt, "deliveries: a row the outbox cannot read") }
                entries.append(
                    ListedEntry(
                        device: device, user: columns[14].text ?? columns[11].text ?? "", id: id,
                        attempts: Int(attempts), trace: traces.index(of: columns[6].text)))
            }
            let pageID = try await insertListedPage(
                notification: key.notification, app: key.app, lane: key.lane, dueAt: now, acceptedAt: key.createdAt,
                firstID: entries.compactMap(\.id).min() ?? 0, size: Int64(group.count),
                listed: ListedEntry.list(entries),
                trace: traces.json, session)
            var notificationIDs = RunMemo<String, UUID?>()
            for columns in group {
                guard
                    let delivery = try OutboxRepository.claimedDelivery(
                        columns, claimOffset: 0, page: pageID, notifications: &notificationIDs)
                else { throw StoreError(.corrupt, "deliveries: a deferred row without a notification id") }
                moved[delivery.id] = delivery
            }
        }
        return moved
    }

    /// The devices `wanted` of a page's entries, by device id, with what sending needs and
    /// whether they are active. A page of deferred deliveries names its first and last device
    /// (`range`): when it waits for many, the app's devices between them are read in one range
    /// of the key (about 1.5 µs a device on PostgreSQL, against 6 µs a device looked up one by
    /// one), unless the range holds more than four times as many devices as it wants (a step's
    /// or a zone's few among many): then each is looked up.
    func listedDevices(_ page: StepPage, _ wanted: Set<String>, _ session: Session) async throws
        -> [String: [Session.Value]]
    {
        let columns = Self.handOutColumns + ", active"
        var found: [String: [Session.Value]] = [:]
        if let range = page.range, wanted.count >= Self.rangeReadMinimum {
            let limit = wanted.count * 4
            let rows = try await session.query(
                """
                SELECT \(columns) FROM devices WHERE app_id = $1 AND device_id >= $2 AND device_id <= $3
                ORDER BY device_id LIMIT $4
                """, [.text(page.app), .text(range.first), .text(range.last), .integer(Int64(limit))])
            if rows.count < limit {
                for row in rows {
                    if let device = row.first?.text, wanted.contains(device) { found[device] = row }
                }
                return found
            }
        }
        for row in try await session.query(
            "SELECT \(columns) FROM devices WHERE app_id = $1 AND device_id IN \(database.outbox.jsonList("$2"))",
            [.text(page.app), .text(SQLText.jsonArray(strings: wanted))])
        {
            if let device = row.first?.text { found[device] = row }
        }
        return found
    }

    /// Entries a page of deferred deliveries must wait for before its devices are read as a
    /// range rather than one by one (as many as make a page: below, either way costs little).
    static let rangeReadMinimum = deferredPageMinimum

    /// A page of moved rows handed out again (its node died, or gave it back): its entries
    /// without their row (`waiting`), less those of users cancelled meanwhile (they get their
    /// row, cancelled); an entry whose device is gone, inactive or another user's now gets its
    /// row, failed, as the claim would have failed it.
    func rehandMovedPage(
        _ page: StepPage, _ waiting: [(id: Int64, device: String, user: String, entry: ListedEntry)], due: Int64,
        _ session: Session
    ) async throws -> [ClaimedDelivery] {
        let found = try await listedDevices(page, Set(waiting.map(\.device)), session)
        let traces = SQLText.jsonStrings(page.trace)
        let cancelledUsers = Set(SQLText.jsonStrings(page.cancelledUsers))
        var cancelled: [(id: Int64, device: String, user: String)] = []
        var failed: [String: [(id: Int64, device: String, user: String)]] = [:]
        var handed: [(entry: ListedEntry, id: Int64, device: [Session.Value])] = []
        for waiting in waiting {
            let row = (waiting.id, waiting.device, waiting.user)
            guard !cancelledUsers.contains(waiting.user) else {
                cancelled.append(row)
                continue
            }
            guard let device = found[waiting.device], device.count == Self.handOutColumnCount + 1 else {
                failed["DeviceUnregistered", default: []].append(row)
                continue
            }
            if device[Self.handOutColumnCount].integer == 0 {
                failed["DeviceInactive", default: []].append(row)
            } else if !waiting.user.isEmpty, device[4].text != waiting.user {
                failed["DeviceReassigned", default: []].append(row)
            } else {
                handed.append((waiting.entry, waiting.id, Array(device.prefix(Self.handOutColumnCount))))
            }
        }
        if !cancelled.isEmpty {
            _ = try await writeEndedEntries(
                cancelled, of: page, status: .cancelled, reason: NotificationRepository.cancelledReason, session)
        }
        for (reason, rows) in failed.sorted(by: { $0.key < $1.key }) {
            _ = try await writeEndedEntries(rows, of: page, status: .failed, reason: reason, session)
        }
        guard
            let claim = try await reclaim(
                page: page.id, notification: page.notification, handing: handed.count, lost: 0, session)
        else { return [] }
        let slot = BroadcastSlot(
            page: page.id, lane: Int(page.lane), dueAt: due, acceptedAt: page.acceptedAt, userID: "")
        return try handOut(
            handed.map(\.device), ids: handed.map(\.id), notification: page.notification, app: page.app, claim: claim,
            slot: slot,
            priors: handed.map { handed in
                let trace = handed.entry.trace(in: traces)
                return (handed.entry.user, handed.entry.attempts, trace)
            })
    }

    /// A page's results deferred to one time for one reason: kept as one page when there are
    /// at least `deferredPageMinimum` of them.
    struct DeferralKey: Hashable {
        var due: Int64
        var reason: String
    }

    /// Deliveries of one page's results deferred together (same due time, same reason), written
    /// as a page that waits for that time (`writeDeferredPages`).
    struct DeferredGroup: Sendable {
        var due: Int64
        var reason: String
        var lane: Int64
        var acceptedAt: Int64
        var entries: [(id: Int64, device: String, user: String, attempts: Int, trace: String?)] = []
    }

    /// Fewer deferred together than this are written as rows (a page is worth it for many).
    static let deferredPageMinimum = 16

    /// The groups of `results` (one page's, each with its row, `row(for:)`) deferred together,
    /// those big enough to be kept as pages, by their key.
    static func deferredGroups(
        _ results: [DeliveryResult], rows: [(status: DeliveryStatus, reason: String?, due: Int64?, attempts: Int)],
        slot: BroadcastSlot
    ) -> [DeferralKey: DeferredGroup] {
        var groups: [DeferralKey: DeferredGroup] = [:]
        for (result, row) in zip(results, rows) where row.status == .deferred {
            guard let reason = row.reason else { continue }
            let key = DeferralKey(due: row.due ?? slot.dueAt, reason: reason)
            groups[
                key,
                default: DeferredGroup(
                    due: key.due, reason: reason, lane: Int64(slot.lane), acceptedAt: slot.acceptedAt)
            ].entries.append(
                (
                    result.deliveryID, result.deviceID, result.broadcast?.userID ?? "", row.attempts,
                    result.trace ?? result.broadcast?.trace
                ))
        }
        return groups.filter { $0.value.entries.count >= deferredPageMinimum }
    }

    /// Writes a page's deferred groups as pages no node holds, due when their deferral ends.
    /// Entries of users cancelled while the page was held (or all, `cancelled`) end instead:
    /// their row is written cancelled, as a deferred row of theirs would have been. Returns how
    /// many ended so.
    func writeDeferredPages(
        _ groups: [DeferredGroup], notification: String, app: String, cancelled: Bool, users: Set<String>,
        now: Int64, _ session: Session
    ) async throws -> Int64 {
        var ended: Int64 = 0
        for group in groups {
            let ending = group.entries.filter { cancelled || users.contains($0.user) }
            for entry in ending {
                ended += Int64(
                    try await session.query(
                        """
                        INSERT INTO deliveries (notification_id, app_id, created_at, lane, updated_at, id, device_id, user_id, status, reason, attempts, due_at, trace)
                        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'cancelled', '\(NotificationRepository.cancelledInFlightReason)', $9, $10, $11)
                        ON CONFLICT DO NOTHING RETURNING id
                        """,
                        [
                            .text(notification), .text(app), .integer(group.acceptedAt), .integer(group.lane),
                            .integer(now), .integer(entry.id), .text(entry.device), .text(entry.user),
                            .integer(Int64(entry.attempts)), .integer(group.due),
                            entry.trace.map { .text($0) } ?? .null,
                        ]
                    ).count)
            }
            let kept = ending.isEmpty ? group.entries : group.entries.filter { !(cancelled || users.contains($0.user)) }
            guard let firstID = kept.map(\.id).min() else { continue }
            var traces = TraceTable()
            // In device order (bytes, as the database orders them): a notification's deliveries
            // are listed so (`deliveries`), and the page names its first and last device.
            let sorted = kept.sorted { $0.device.utf8.lexicographicallyPrecedes($1.device.utf8) }
            let listed = ListedEntry.list(
                sorted.map {
                    ListedEntry(
                        device: $0.device, user: $0.user, id: $0.id, attempts: $0.attempts,
                        trace: traces.index(of: $0.trace))
                })
            // `after_device` and `through_device` hold the first and last device listed (a page
            // that lists its devices has no range of the app's devices to hand out).
            _ = try await session.query(
                """
                INSERT INTO broadcast_pages
                    (notification_id, app_id, lane, due_at, accepted_at, after_device, through_device, first_id, size, remaining, claimed_by, claim,
                     devices, trace, reason)
                VALUES ($1, $2, $3, $4, $5, $11, $12, $6, $7, $7, NULL, 0, $8, $9, $10)
                """,
                [
                    .text(notification), .text(app), .integer(group.lane), .integer(group.due),
                    .integer(group.acceptedAt), .integer(firstID), .integer(Int64(kept.count)), .text(listed),
                    .text(traces.json), .text(group.reason), .text(sorted[0].device),
                    .text(sorted[sorted.count - 1].device),
                ])
            if dialect == .sqlite { database.noteDeferredPage(due: group.due) }
        }
        return ended
    }

    /// Ends `userID`'s deliveries of `notification` that wait in pages of deferred deliveries no
    /// node holds: their rows are written with `status` and `reason`, and they leave the pages
    /// and the deferred count (`writeEndedEntries`). Returns how many ended.
    func endWaiting(notification: String, userID: String, status: DeliveryStatus, reason: String, _ session: Session)
        async throws -> Int64
    {
        guard database.deferredPages else { return 0 }
        let quoted = ListedEntry.userMarker(userID)
        var ended: Int64 = 0
        for row in try await session.query(
            """
            SELECT id, app_id, lane, accepted_at, first_id, size, remaining, devices FROM broadcast_pages
            WHERE notification_id = $1 AND reason IS NOT NULL AND claimed_by IS NULL\(dialect == .postgres ? " FOR UPDATE" : "")
            """, [.text(notification)])
        {
            guard row.count == 8, let id = row[0].integer, let app = row[1].text, let lane = row[2].integer,
                let accepted = row[3].integer, let firstID = row[4].integer, let size = row[5].integer,
                let remaining = row[6].integer, let listed = row[7].text, listed.contains(quoted)
            else { continue }
            let page = StepPage(
                id: id, notification: notification, app: app, lane: lane, acceptedAt: accepted, firstID: firstID,
                size: size, remaining: remaining, listed: listed, cancelledUsers: nil, trace: nil, deferred: true)
            let hits = ListedEntry.entries(listed).compactMap { entry in
                entry.user == userID ? entry.id.map { ($0, entry.device, entry.user) } : nil
            }
            ended += try await writeEndedEntries(hits, of: page, status: status, reason: reason, session)
        }
        return ended
    }

    /// A deferred page's first hand-out: it no longer waits (its reason goes), and its entries
    /// leave the notification's deferred count (they are sent, or end, from here on).
    func undefer(page: Int64, notification: String, remaining: Int64, _ session: Session) async throws {
        _ = try await session.query("UPDATE broadcast_pages SET reason = NULL WHERE id = $1", [.integer(page)])
        _ = try await session.query(
            "UPDATE notifications SET deferred_count = deferred_count - $1 WHERE id = $2",
            [.integer(remaining), .text(notification)])
    }

    /// Deliveries of a page kept by other pages of its notification: their ids and devices.
    struct HandedOn {
        var ids = Set<Int64>()
        var devices = Set<String>()
    }

    /// The deliveries of `notification` listed in its pages other than `page` whose first id
    /// lies in `ids`: deliveries a page handed on (deferred together, or moved) are kept there,
    /// without a row, and every id of a page handed on from this one lies in its ids.
    func handedOn(notification: String, page: Int64, ids: ClosedRange<Int64>, _ session: Session) async throws
        -> HandedOn
    {
        var found = HandedOn()
        for row in try await session.query(
            """
            SELECT devices FROM broadcast_pages
            WHERE notification_id = $1 AND id <> $2 AND first_id >= $3 AND first_id <= $4 AND devices IS NOT NULL
            """,
            [.text(notification), .integer(page), .integer(ids.lowerBound), .integer(ids.upperBound)])
        {
            guard let listed = row.first?.text else { continue }
            for entry in ListedEntry.entries(listed) {
                guard let id = entry.id, ids.contains(id) else { continue }
                found.ids.insert(id)
                found.devices.insert(entry.device)
            }
        }
        return found
    }
}

extension BroadcastRepository {
    /// The pages of a notification's deliveries deferred together that still wait, and how
    /// many deliveries they keep: a check for tests and diagnosis.
    package func waitingDeferredPages(notificationID: UUID) async throws -> (pages: Int, deliveries: Int) {
        guard database.deferredPages else { return (0, 0) }
        return try await reading { session in
            let row = try await session.query(
                "SELECT COUNT(*), COALESCE(SUM(remaining), 0) FROM broadcast_pages WHERE notification_id = $1 AND reason IS NOT NULL",
                [.text(notificationID.uuidString)]
            ).first
            return (Int(row?.first?.integer ?? 0), Int(row?.last?.integer ?? 0))
        }
    }
}
