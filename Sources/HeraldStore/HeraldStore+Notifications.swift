package import Foundation
package import HeraldCore
import SQLKit

/// Notifications: accepting one (and its fan-out into deliveries) and reading it back.
extension NotificationRepository {
    /// How long an idempotency key returns the first notification.
    package static let idempotencyWindow: TimeInterval = 24 * 3600

    /// Stores a notification and one queued delivery per active recipient device in one
    /// durable transaction (on SQLite the WAL is synced at its commit), before the caller
    /// answers 202. The fan-out runs inside the database
    /// (`INSERT … SELECT`), so memory stays flat for any number of devices. A notification to
    /// all devices (and none excluded) is a broadcast instead: one row and a cursor over the
    /// app's devices, its deliveries written as they are answered (`HeraldStore+Broadcasts`). With an
    /// idempotency key seen in the last 24 hours, nothing is written and the first notification
    /// is returned with `created == false`. `lane`: urgent deliveries are claimed before normal ones.
    package func createNotification(
        appID: String, id: UUID, idempotencyKey: String?, content: Data, recipients: RecipientSelector,
        excludeDeviceIDs: [String], dueAt: Date, lane: DeliveryLane = .normal, cancelKey: String? = nil
    ) async throws -> (NotificationRecord, created: Bool) {
        let accepted = try await acceptNotification(
            appID: appID, id: id, idempotencyKey: idempotencyKey, content: content, recipients: recipients,
            excludeDeviceIDs: excludeDeviceIDs, dueAt: dueAt, lane: lane, cancelKey: cancelKey)
        return (accepted.record, accepted.created)
    }

    /// A notification accepted, and the deliveries this node claimed with it (`directUpTo`).
    package struct Accepted: Sendable {
        package var record: NotificationRecord
        package var created: Bool
        package var claimed: [ClaimedDelivery]
    }

    /// `createNotification`, and with `directUpTo > 0` a due notification to at most that many
    /// named devices (or users) is claimed by this node in the same transaction: its deliveries
    /// are written `sending` under claim 1, owned like any claim (rescued if this node dies,
    /// results fenced by the claim), and returned for the caller's dispatcher to send at once,
    /// with no claim transaction of their own (the trip a single send waited for).
    package func acceptNotification(
        appID: String, id: UUID, idempotencyKey: String?, content: Data, recipients: RecipientSelector,
        excludeDeviceIDs: [String], dueAt: Date, lane: DeliveryLane = .normal, cancelKey: String? = nil,
        directUpTo: Int = 0
    ) async throws -> Accepted {
        try await acceptTransaction { [self] session in
            let now = nowMilliseconds
            if let idempotencyKey {
                if let row = try await session.sql.raw(
                    "SELECT id, content, recipients, created_at FROM notifications WHERE app_id = \(bind: appID) AND idempotency_key = \(bind: idempotencyKey)"
                ).first() {
                    let existing = try Self.notification(from: row, appID: appID, idempotencyKey: idempotencyKey)
                    if existing.createdAt.timeIntervalSince1970 * 1000 >= Double(now) - Self.idempotencyWindow * 1000 {
                        return Accepted(record: existing, created: false, claimed: [])
                    }
                    try await session.sql.raw(
                        "UPDATE notifications SET idempotency_key = NULL WHERE id = \(bind: existing.id.uuidString)"
                    ).run()
                }
            }
            let (count, direct) = try await writeNotification(
                appID: appID, id: id, idempotencyKey: idempotencyKey, cancelKey: cancelKey, content: content,
                recipients: recipients,
                excludeDeviceIDs: excludeDeviceIDs, due: Self.milliseconds(dueAt), lane: lane, now: now,
                directUpTo: directUpTo, session)
            let record = NotificationRecord(
                id: id, appID: appID, idempotencyKey: idempotencyKey, cancelKey: cancelKey, content: content,
                recipients: count,
                createdAt: Date(timeIntervalSince1970: Double(now) / 1000))
            guard direct, count > 0 else { return Accepted(record: record, created: true, claimed: []) }
            // What sending needs, as a claim reads it (the devices were active a moment ago, in
            // this transaction: nothing to fail here).
            let claimed = try await directClaims(notification: id, appID: appID, trace: nil, now: now, session)
            return Accepted(record: record, created: true, claimed: claimed)
        }
    }

    /// Writes a notification and its deliveries (or a broadcast's cursor) in `session`'s
    /// transaction: the accept's work once its idempotency key is settled, and a track step's
    /// when it fires. `trace` starts every delivery's decision trace. Returns the recipients, and
    /// whether the deliveries were claimed for this node (`directUpTo`).
    func writeNotification(
        appID: String, id: UUID, idempotencyKey: String?, cancelKey: String?, content: Data,
        recipients: RecipientSelector,
        excludeDeviceIDs: [String], due: Int64, lane: DeliveryLane, now: Int64, directUpTo: Int = 0,
        trace: String? = nil, _ session: Session
    ) async throws -> (count: Int, direct: Bool) {
        if case .all = recipients, excludeDeviceIDs.isEmpty {
            let count = try await database.broadcasts.acceptBroadcast(
                appID: appID, id: id, idempotencyKey: idempotencyKey, cancelKey: cancelKey, content: content,
                dueAt: due, lane: lane,
                now: now, session)
            return (count, false)
        }
        var filter: SQLQueryString = ""
        var named = Int.max
        switch recipients {
        case .all: break
        case .users(let ids):
            filter += " AND user_id IN "
            filter += list(ids)
            named = ids.count
        case .devices(let ids):
            filter += " AND device_id IN "
            filter += list(ids)
            named = ids.count
        }
        if !excludeDeviceIDs.isEmpty { filter += " AND device_id NOT IN (\(binds: excludeDeviceIDs))" }
        let direct = directUpTo > 0 && named <= directUpTo && due <= now
        let claimedBy: String? = direct ? nodeID : nil
        // A trace to start the deliveries with (a track step's re-planning) is a column named
        // only when there is one: the accept of a send keeps its statement.
        var insert: SQLQueryString =
            "INSERT INTO deliveries (notification_id, app_id, device_id, user_id, status, due_at, attempts, created_at, updated_at, lane, claimed_by, claim"
        insert += trace == nil ? ") " : ", trace) "
        insert += """
            SELECT \(bind: id.uuidString), app_id, device_id, user_id, \(bind: direct ? "sending" : "queued"), \(bind: due), 0, \(bind: now), \(bind: now), \(bind: lane.rawValue), \(bind: claimedBy), \(bind: direct ? 1 : 0)
            """
        if let trace { insert += ", \(bind: trace)" }
        // Rows in device order, except for named users: there `ORDER BY device_id` made SQLite
        // walk every device of the app by its primary key (to skip a sort) and test each against
        // the list (a step wave to 5,000 users at a time read the whole table each time); the
        // user index finds them directly.
        insert += " FROM devices WHERE app_id = \(bind: appID) AND active = 1"
        insert += filter
        if case .users = recipients {} else { insert += " ORDER BY device_id" }
        // The cancel key's column is named only when there is one (a store on a schema from
        // before cancel keys, as the migration tests open, still accepts sends).
        var notificationColumns = "INSERT INTO notifications (id, app_id, idempotency_key, content, created_at"
        var notificationValues: SQLQueryString = """
            (\(bind: id.uuidString), \(bind: appID), \(bind: idempotencyKey), \(bind: String(decoding: content, as: UTF8.self)), \(bind: now)
            """
        // A typed notification's analytics cohort (likewise named only when there is one).
        if let cohort = TrackRepository.cohort(content, now: now) {
            notificationColumns += ", type, day"
            notificationValues += ", \(bind: cohort.type), \(bind: cohort.day)"
        }
        if let cancelKey {
            notificationColumns += ", cancel_key"
            notificationValues += ", \(bind: cancelKey)"
        }
        notificationColumns += ", recipients) VALUES "
        let count: Int
        switch dialect {
        case .sqlite:
            // The deliveries first, then the notification row with their count (`changes()`
            // is the last statement's): two statements, each a trip to the database thread,
            // where an accept at 500/s is felt.
            try await session.sql.raw(insert).run()
            var record = SQLQueryString(notificationColumns)
            record += notificationValues
            record += ", changes()) RETURNING recipients"
            count = try await session.sql.raw(record).first()?.decode(column: "recipients", as: Int.self) ?? 0
        case .postgres:
            var record = SQLQueryString(notificationColumns)
            record += notificationValues
            record += ", 0)"
            try await session.sql.raw(record).run()
            var counted: SQLQueryString = "WITH inserted AS ("
            counted += insert
            counted +=
                " RETURNING 1), recorded AS (UPDATE notifications SET recipients = (SELECT count(*) FROM inserted) WHERE id = \(bind: id.uuidString) RETURNING recipients) SELECT recipients AS n FROM recorded"
            count = try await session.sql.raw(counted).first()?.decode(column: "n", as: Int.self) ?? 0
            if !direct { try await database.nodes.notifyOutbox(session) }
        }
        return (count, direct)
    }

    /// `(…)` of `ids` for `IN`: on SQLite a long list is one bound JSON array (`boundListLimit`).
    private func list(_ ids: [String]) -> SQLQueryString {
        guard dialect == .sqlite, ids.count > SQLText.boundListLimit else { return "(\(binds: ids))" }
        return "(SELECT value FROM json_each(\(bind: SQLText.jsonArray(strings: ids))))"
    }

    /// A durable transaction for an accept: on SQLite, the group transaction shared with the
    /// accepts that arrive meanwhile (`SQLiteCommitGroup`).
    private func acceptTransaction(_ body: @escaping @Sendable (Session) async throws -> Accepted) async throws
        -> Accepted
    {
        dialect == .sqlite ? try await commitGroup.run(database, body) : try await transaction(durable: true, body)
    }

    /// The deliveries of notification `id` just written claimed for this node (`writeNotification`
    /// with `direct`), with what sending needs from their devices. What the transaction wrote
    /// is known (the app, no attempts yet, claim 1, the trace it started with, created now); the
    /// statement reads only what the devices add (a due wave reads 5,000 at a time).
    func directClaims(notification id: UUID, appID: String, trace: String?, now: Int64, _ session: Session) async throws
        -> [ClaimedDelivery]
    {
        let createdAt = Date(timeIntervalSince1970: Double(now) / 1000)
        return try await session.query(
            """
            SELECT d.id, d.device_id, v.platform, v.token, v.environment, v.user_id, v.locale, v.time_zone, v.app_version
            FROM deliveries d JOIN devices v ON v.app_id = d.app_id AND v.device_id = d.device_id
            WHERE d.notification_id = $1
            """, [.text(id.uuidString)]
        ).map { columns in
            guard columns.count == 9, let delivery = columns[0].integer, let deviceID = columns[1].text,
                let platform = columns[2].text,
                let token = columns[3].text, let environment = columns[4].text
            else { throw StoreError(.corrupt, "deliveries: a row the outbox cannot read") }
            return ClaimedDelivery(
                id: delivery, notificationID: id, appID: appID, deviceID: deviceID, platform: platform, token: token,
                environment: environment,
                attempts: 0, userID: columns[5].text ?? "", locale: columns[6].text, timeZone: columns[7].text,
                trace: trace, claim: 1,
                createdAt: createdAt, appVersion: columns[8].text)
        }
    }

    /// A notification of an app.
    package func notification(appID: String, id: UUID) async throws -> NotificationRecord? {
        try await exclusive { session in
            try await session.sql.raw(
                "SELECT id, content, recipients, created_at, idempotency_key, cancel_key FROM notifications WHERE app_id = \(bind: appID) AND id = \(bind: id.uuidString)"
            ).first().map {
                var record = try Self.notification(
                    from: $0, appID: appID, idempotencyKey: try $0.decode(column: "idempotency_key", as: String?.self))
                record.cancelKey = try $0.decode(column: "cancel_key", as: String?.self)
                return record
            }
        }
    }

    /// The stored content of notifications, by id (the dispatcher caches these).
    package func notificationContents(_ ids: [UUID]) async throws -> [UUID: Data] {
        guard !ids.isEmpty else { return [:] }
        // On the reading connection (the dispatcher's batches do not wait for the writer): a
        // notification is committed before its deliveries are handed out.
        return try await reading { session in
            var result: [UUID: Data] = [:]
            for row in try await session.sql.raw(
                "SELECT id, content FROM notifications WHERE id IN (\(binds: ids.map(\.uuidString)))"
            ).all() {
                if let id = UUID(uuidString: try row.decode(column: "id", as: String.self)) {
                    result[id] = Data(try row.decode(column: "content", as: String.self).utf8)
                }
            }
            return result
        }
    }

    /// Delivery counts by status for a notification, from its counters (O(1)); deliveries being
    /// sent count as queued.
    package func deliveryCounts(notificationID: UUID) async throws -> [DeliveryStatus: Int] {
        try await reading { session in
            guard
                let row = try await session.sql.raw(
                    "SELECT recipients, sent_count, failed_count, deferred_count, suppressed_count, cancelled_count FROM notifications WHERE id = \(bind: notificationID.uuidString)"
                ).first()
            else { return [:] }
            let recipients = try row.decode(column: "recipients", as: Int.self)
            var counts: [DeliveryStatus: Int] = [
                .sent: try row.decode(column: "sent_count", as: Int.self),
                .failed: try row.decode(column: "failed_count", as: Int.self),
                .deferred: try row.decode(column: "deferred_count", as: Int.self),
                .suppressed: try row.decode(column: "suppressed_count", as: Int.self),
                .cancelled: try row.decode(column: "cancelled_count", as: Int.self),
            ]
            counts[.queued] = max(0, recipients - counts.values.reduce(0, +))
            return counts
        }
    }

    /// A page of a notification's deliveries: those with a row in device order, then those that
    /// wait in pages of deliveries deferred together (`HeraldStore+DeferredPages`), which have
    /// no row until they are sent, page by page (each in device order). The pages are read only
    /// where the rows end, and only those the window reaches.
    package func deliveries(notificationID: UUID, limit: Int, offset: Int) async throws -> [DeliveryRecord] {
        let rows = try await deliveryRows(notificationID: notificationID, limit: limit, offset: offset)
        guard rows.count < limit, database.deferredPages else { return rows }
        return try await reading { session in
            let id = notificationID.uuidString
            var skip = 0
            if rows.isEmpty, offset > 0 {
                let counted = try await session.query(
                    "SELECT COUNT(*) FROM deliveries WHERE notification_id = $1", [.text(id)])
                skip = max(0, offset - Int(counted.first?.first?.integer ?? 0))
            }
            var listed = rows
            for page in try await session.query(
                "SELECT id, remaining FROM broadcast_pages WHERE notification_id = $1 AND reason IS NOT NULL ORDER BY id",
                [.text(id)])
            {
                guard listed.count < limit else { break }
                guard page.count == 2, let pageID = page[0].integer, let remaining = page[1].integer else { continue }
                if skip >= remaining {
                    skip -= Int(remaining)
                    continue
                }
                guard
                    let body = try await session.query(
                        "SELECT due_at, accepted_at, reason, devices, trace FROM broadcast_pages WHERE id = $1",
                        [.integer(pageID)]
                    ).first, body.count == 5, let due = body[0].integer, let accepted = body[1].integer,
                    let entries = body[3].text
                else { continue }
                let traces = SQLText.jsonStrings(body[4].text)
                for entry in BroadcastRepository.ListedEntry.entries(entries).dropFirst(skip).prefix(
                    limit - listed.count)
                {
                    if let delivery = entry.waitingDelivery(
                        reason: body[2].text, traces: traces, due: due, accepted: accepted)
                    {
                        listed.append(delivery)
                    }
                }
                skip = 0
            }
            return listed
        }
    }

    /// A page of a notification's delivery rows, in device order.
    private func deliveryRows(notificationID: UUID, limit: Int, offset: Int) async throws -> [DeliveryRecord] {
        try await reading { session in
            try await session.sql.raw(
                """
                SELECT d.id, d.device_id, d.status, d.reason, d.attempts, d.trace, d.due_at, d.created_at, d.updated_at,
                    r.received_at, o.opened_at FROM deliveries d
                LEFT JOIN receipts r ON r.app_id = d.app_id AND r.delivery_id = d.id
                LEFT JOIN opens o ON o.app_id = d.app_id AND o.delivery_id = d.id
                WHERE d.notification_id = \(bind: notificationID.uuidString) ORDER BY d.device_id LIMIT \(bind: limit) OFFSET \(bind: offset)
                """
            ).all().map { row in
                func date(_ column: String) throws -> Date {
                    Date(timeIntervalSince1970: Double(try row.decode(column: column, as: Int64.self)) / 1000)
                }
                return DeliveryRecord(
                    id: try row.decode(column: "id", as: Int64.self),
                    deviceID: try row.decode(column: "device_id", as: String.self),
                    status: DeliveryStatus(rawValue: try row.decode(column: "status", as: String.self)) ?? .queued,
                    reason: try row.decode(column: "reason", as: String?.self),
                    attempts: try row.decode(column: "attempts", as: Int.self),
                    trace: try row.decode(column: "trace", as: String?.self),
                    dueAt: try date("due_at"), createdAt: try date("created_at"), updatedAt: try date("updated_at"),
                    receivedAt: try row.decode(column: "received_at", as: Int64?.self).map(SQLText.date),
                    openedAt: try row.decode(column: "opened_at", as: Int64?.self).map(SQLText.date))
            }
        }
    }

    static func notification(from row: any SQLRow, appID: String, idempotencyKey: String?) throws -> NotificationRecord
    {
        NotificationRecord(
            id: UUID(uuidString: try row.decode(column: "id", as: String.self)) ?? UUID(),
            appID: appID, idempotencyKey: idempotencyKey,
            content: Data(try row.decode(column: "content", as: String.self).utf8),
            recipients: try row.decode(column: "recipients", as: Int.self),
            createdAt: Date(timeIntervalSince1970: Double(try row.decode(column: "created_at", as: Int64.self)) / 1000))
    }
}
