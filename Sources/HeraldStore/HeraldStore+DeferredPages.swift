import Foundation
import HeraldCore

/// PostgreSQL: deferred rows whose time has come, moved into pages as they are claimed.
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
            var traces: [String] = []
            var traceIndex: [String: Int] = [:]
            var listed = "["
            listed.reserveCapacity(group.count * 48)
            var firstID = Int64.max
            for (index, columns) in group.enumerated() {
                guard let id = columns[0].integer, let device = columns[3].text, let attempts = columns[4].integer
                else { throw StoreError(.corrupt, "deliveries: a row the outbox cannot read") }
                firstID = min(firstID, id)
                var trace = -1
                if let text = columns[6].text {
                    trace = traceIndex[text] ?? traces.count
                    if trace == traces.count {
                        traceIndex[text] = trace
                        traces.append(text)
                    }
                }
                listed += index == 0 ? "[" : ",["
                SQLText.appendJSON(device, to: &listed)
                listed += ","
                SQLText.appendJSON(columns[14].text ?? columns[11].text ?? "", to: &listed)
                listed += "," + String(id) + "," + String(attempts) + "," + String(trace) + "]"
            }
            listed += "]"
            let pageID = try await insertListedPage(
                notification: key.notification, app: key.app, lane: key.lane, dueAt: now, acceptedAt: key.createdAt,
                firstID: firstID, size: Int64(group.count), listed: listed, trace: SQLText.jsonArray(strings: traces),
                session)
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

    /// A page of moved rows handed out again (its node died, or gave it back): its entries
    /// without their row (`waiting`), less those of users cancelled meanwhile (they get their
    /// row, cancelled); an entry whose device is gone, inactive or another user's now gets its
    /// row, failed, as the claim would have failed it.
    func rehandMovedPage(
        _ page: StepPage, _ waiting: [(id: Int64, device: String, user: String, entry: ListedEntry)], due: Int64,
        _ session: Session
    ) async throws -> [ClaimedDelivery] {
        var found: [String: [Session.Value]] = [:]
        for row in try await session.query(
            """
            SELECT device_id, platform, token, environment, user_id, locale, time_zone, active FROM devices
            WHERE app_id = $1 AND device_id IN \(database.outbox.jsonList("$2"))
            """, [.text(page.app), .text(SQLText.jsonArray(strings: Set(waiting.map(\.device))))])
        {
            if let device = row.first?.text { found[device] = row }
        }
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
            guard let device = found[waiting.device], device.count == 8 else {
                failed["DeviceUnregistered", default: []].append(row)
                continue
            }
            if device[7].integer == 0 {
                failed["DeviceInactive", default: []].append(row)
            } else if !waiting.user.isEmpty, device[4].text != waiting.user {
                failed["DeviceReassigned", default: []].append(row)
            } else {
                handed.append((waiting.entry, waiting.id, Array(device.prefix(7))))
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
                let trace = traces.indices.contains(handed.entry.trace) ? traces[handed.entry.trace] : nil
                return (handed.entry.user, handed.entry.attempts, trace)
            })
    }
}
