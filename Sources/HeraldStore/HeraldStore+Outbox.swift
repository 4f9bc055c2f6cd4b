package import Foundation
import SQLKit
import SQLiteNIO

extension HeraldStore {
    /// How long an idempotency key returns the first notification.
    package static let idempotencyWindow: TimeInterval = 24 * 3600

    /// Stores a notification and one queued delivery per active recipient device in one
    /// transaction, before the caller answers 202. The fan-out runs inside the database
    /// (`INSERT … SELECT`), so memory stays flat for any number of devices. With an
    /// idempotency key seen in the last 24 hours, nothing is written and the first notification
    /// is returned with `created == false`.
    package func createNotification(
        appID: String, id: UUID, idempotencyKey: String?, content: Data, recipients: RecipientSelector,
        excludeDeviceIDs: [String], dueAt: Date
    ) async throws -> (NotificationRecord, created: Bool) {
        try await transaction {
            let now = nowMilliseconds
            if let idempotencyKey {
                if let row = try await database.raw(
                    "SELECT id, content, recipients, created_at FROM notifications WHERE app_id = \(bind: appID) AND idempotency_key = \(bind: idempotencyKey)"
                ).first() {
                    let existing = try Self.notification(from: row, appID: appID, idempotencyKey: idempotencyKey)
                    if existing.createdAt.timeIntervalSince1970 * 1000 >= Double(now) - Self.idempotencyWindow * 1000 {
                        return (existing, false)
                    }
                    try await database.raw(
                        "UPDATE notifications SET idempotency_key = NULL WHERE id = \(bind: existing.id.uuidString)"
                    ).run()
                }
            }
            try await database.raw(
                """
                INSERT INTO notifications (id, app_id, idempotency_key, content, recipients, created_at)
                VALUES (\(bind: id.uuidString), \(bind: appID), \(bind: idempotencyKey), \(bind: String(decoding: content, as: UTF8.self)), 0, \(bind: now))
                """
            ).run()
            let due = Self.milliseconds(dueAt)
            var filter: SQLQueryString = ""
            switch recipients {
            case .all: break
            case .users(let ids): filter += " AND user_id IN (\(binds: ids))"
            case .devices(let ids): filter += " AND device_id IN (\(binds: ids))"
            }
            if !excludeDeviceIDs.isEmpty { filter += " AND device_id NOT IN (\(binds: excludeDeviceIDs))" }
            try await database.raw(
                """
                INSERT INTO deliveries (notification_id, app_id, device_id, status, due_at, attempts, created_at, updated_at)
                SELECT \(bind: id.uuidString), app_id, device_id, 'queued', \(bind: due), 0, \(bind: now), \(bind: now)
                FROM devices WHERE app_id = \(bind: appID) AND active = 1\(filter)
                ORDER BY device_id
                """
            ).run()
            let count = try await database.raw("SELECT changes() AS n").first()?.decode(column: "n", as: Int.self) ?? 0
            try await database.raw(
                "UPDATE notifications SET recipients = \(bind: count) WHERE id = \(bind: id.uuidString)"
            ).run()
            let record = NotificationRecord(
                id: id, appID: appID, idempotencyKey: idempotencyKey, content: content, recipients: count,
                createdAt: Date(timeIntervalSince1970: Double(now) / 1000))
            return (record, true)
        }
    }

    /// A notification of an app.
    package func notification(appID: String, id: UUID) async throws -> NotificationRecord? {
        try await exclusive {
            try await database.raw(
                "SELECT id, content, recipients, created_at, idempotency_key FROM notifications WHERE app_id = \(bind: appID) AND id = \(bind: id.uuidString)"
            ).first().map {
                try Self.notification(
                    from: $0, appID: appID, idempotencyKey: try $0.decode(column: "idempotency_key", as: String?.self))
            }
        }
    }

    /// The stored content of notifications, by id (the dispatcher caches these).
    package func notificationContents(_ ids: [UUID]) async throws -> [UUID: Data] {
        guard !ids.isEmpty else { return [:] }
        return try await exclusive {
            var result: [UUID: Data] = [:]
            for row in try await database.raw(
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
        try await exclusive {
            guard let row = try await database.raw(
                "SELECT recipients, sent_count, failed_count, deferred_count, suppressed_count FROM notifications WHERE id = \(bind: notificationID.uuidString)"
            ).first() else { return [:] }
            let recipients = try row.decode(column: "recipients", as: Int.self)
            var counts: [DeliveryStatus: Int] = [
                .sent: try row.decode(column: "sent_count", as: Int.self),
                .failed: try row.decode(column: "failed_count", as: Int.self),
                .deferred: try row.decode(column: "deferred_count", as: Int.self),
                .suppressed: try row.decode(column: "suppressed_count", as: Int.self),
            ]
            counts[.queued] = max(0, recipients - counts.values.reduce(0, +))
            return counts
        }
    }

    /// A page of a notification's deliveries, in device order.
    package func deliveries(notificationID: UUID, limit: Int, offset: Int) async throws -> [DeliveryRecord] {
        try await exclusive {
            try await database.raw(
                """
                SELECT id, device_id, status, reason, attempts, trace, due_at, created_at, updated_at FROM deliveries
                WHERE notification_id = \(bind: notificationID.uuidString) ORDER BY id LIMIT \(bind: limit) OFFSET \(bind: offset)
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
                    dueAt: try date("due_at"), createdAt: try date("created_at"), updatedAt: try date("updated_at"))
            }
        }
    }

    /// Claims up to `limit` due deliveries (`queued` or `deferred` → `sending`) with the device
    /// data needed to send them; deferred ones whose time has come go first. Deliveries whose
    /// device is gone or inactive fail here instead.
    package func claimDueDeliveries(limit: Int) async throws -> [ClaimedDelivery] {
        try await transaction {
            let now = nowMilliseconds
            // One query per status, so each walks the (status, due_at) index in order. Rows are read
            // as SQLiteRow: SQLKit's Codable decoding was 16% of the server's CPU in the 1M fan-out.
            var rows: [SQLiteRow] = []
            for status in [DeliveryStatus.deferred, .queued] where rows.count < limit {
                rows += try await connection.query(Self.claimSQL(status), [.integer(Int(now)), .integer(limit - rows.count)])
            }
            var claimed: [ClaimedDelivery] = []
            claimed.reserveCapacity(rows.count)
            var gone: [Int64] = []
            var inactive: [Int64] = []
            var failedByNotification: [String: Int] = [:]
            var undeferredByNotification: [String: Int] = [:]
            func text(_ value: SQLiteData) -> String? {
                if case .text(let string) = value { return string }
                return nil
            }
            for row in rows {
                // Columns by position, in the SELECT's order.
                let columns = row.columns.map(\.data)
                guard columns.count == 14, case .integer(let rawID) = columns[0], let notificationText = text(columns[1]),
                    let appID = text(columns[2]), let deviceID = text(columns[3]), case .integer(let attempts) = columns[4]
                else { throw StoreError(.corrupt, "deliveries: a row the outbox cannot read") }
                let id = Int64(rawID)
                if text(columns[5]) == DeliveryStatus.deferred.rawValue {
                    undeferredByNotification[notificationText, default: 0] += 1
                }
                guard let platform = text(columns[7]), let token = text(columns[8]), let environment = text(columns[9]) else {
                    gone.append(id)
                    failedByNotification[notificationText, default: 0] += 1
                    continue
                }
                guard columns[10].integer != 0 else {
                    inactive.append(id)
                    failedByNotification[notificationText, default: 0] += 1
                    continue
                }
                guard let notificationID = UUID(uuidString: notificationText) else { continue }
                claimed.append(
                    ClaimedDelivery(
                        id: id, notificationID: notificationID, appID: appID, deviceID: deviceID, platform: platform,
                        token: token, environment: environment, attempts: attempts, userID: text(columns[11]) ?? "",
                        locale: text(columns[12]), timeZone: text(columns[13]), trace: text(columns[6])))
            }
            for (ids, reason) in [(gone, "DeviceUnregistered"), (inactive, "DeviceInactive")] where !ids.isEmpty {
                try await updateDeliveries(ids, status: .failed, reason: reason, now: now)
            }
            for (notificationID, failed) in failedByNotification {
                try await database.raw(
                    "UPDATE notifications SET failed_count = failed_count + \(bind: failed) WHERE id = \(bind: notificationID)"
                ).run()
            }
            for (notificationID, undeferred) in undeferredByNotification {
                try await database.raw(
                    "UPDATE notifications SET deferred_count = deferred_count - \(bind: undeferred) WHERE id = \(bind: notificationID)"
                ).run()
            }
            for chunk in claimed.map(\.id).chunked(Self.batchSize) {
                try await updateDeliveries(chunk, status: .sending, reason: nil, now: now)
            }
            return claimed
        }
    }

    /// The partial outbox index's condition (migration 5). SQLite uses a partial index only when
    /// the query's WHERE repeats this term verbatim, so every outbox query by status carries it.
    static let outboxIndexTerm = "status IN ('queued', 'deferred', 'sending')"

    /// Due deliveries of one status, oldest first, with what sending needs from the device.
    static func claimSQL(_ status: DeliveryStatus) -> String {
        """
        SELECT d.id, d.notification_id, d.app_id, d.device_id, d.attempts, d.status, d.trace,
               v.platform, v.token, v.environment, v.active, v.user_id, v.locale, v.time_zone
        FROM deliveries d LEFT JOIN devices v ON v.app_id = d.app_id AND v.device_id = d.device_id
        WHERE d.status = '\(status.rawValue)' AND d.\(outboxIndexTerm) AND d.due_at <= ?1
        ORDER BY d.due_at, d.id LIMIT ?2
        """
    }

    static let requeueSQL = "UPDATE deliveries SET status = 'queued', updated_at = ?1 WHERE status = 'sending' AND \(outboxIndexTerm) RETURNING id"
    static let queueDepthSQL = "SELECT COUNT(*) AS n FROM deliveries WHERE \(outboxIndexTerm) AND due_at <= ?1"

    /// SQLite's plan for each outbox query by status (tests check that they use the index).
    package func outboxQueryPlans() async throws -> [String: String] {
        try await exclusive {
            var plans: [String: String] = [:]
            let queries = [
                ("claim queued", Self.claimSQL(.queued)), ("claim deferred", Self.claimSQL(.deferred)),
                ("requeue", Self.requeueSQL), ("queue depth", Self.queueDepthSQL),
            ]
            for (name, sql) in queries {
                let binds: [SQLiteData] = sql.contains("?2") ? [.integer(0), .integer(1)] : [.integer(0)]
                let rows = try await connection.query("EXPLAIN QUERY PLAN " + sql, binds)
                plans[name] = rows.compactMap { $0.column("detail")?.string }.joined(separator: "; ")
            }
            return plans
        }
    }

    /// When each of these users last received policy-governed notifications since `since`, by
    /// user: (notification, time) pairs, oldest first. Pacing and grouping count them.
    package func recentSends(appID: String, userIDs: [String], since: Date) async throws -> [String: [(UUID, Date)]] {
        guard !userIDs.isEmpty else { return [:] }
        return try await exclusive {
            var result: [String: [(UUID, Date)]] = [:]
            let sinceMilliseconds = Self.milliseconds(since, rounding: .down)
            for chunk in userIDs.chunked(Self.batchSize) {
                for row in try await database.raw(
                    """
                    SELECT user_id, notification_id, sent_at FROM user_sends
                    WHERE app_id = \(bind: appID) AND user_id IN (\(binds: chunk)) AND sent_at > \(bind: sinceMilliseconds)
                    ORDER BY sent_at
                    """
                ).all() {
                    guard let id = UUID(uuidString: try row.decode(column: "notification_id", as: String.self)) else { continue }
                    let at = Date(timeIntervalSince1970: Double(try row.decode(column: "sent_at", as: Int64.self)) / 1000)
                    result[try row.decode(column: "user_id", as: String.self), default: []].append((id, at))
                }
            }
            return result
        }
    }

    /// Writes results in one transaction: `sent` rows in multi-row updates, the rest one by one;
    /// dead tokens make their devices inactive with APNs' timestamp.
    package func recordResults(_ results: [DeliveryResult]) async throws {
        guard !results.isEmpty else { return }
        try await transaction {
            let now = nowMilliseconds
            var sentByAttempts: [Int: [Int64]] = [:]
            var finished: [UUID: (sent: Int, failed: Int, deferred: Int, suppressed: Int)] = [:]
            for result in results {
                if let trace = result.trace {
                    try await database.raw("UPDATE deliveries SET trace = \(bind: trace) WHERE id = \(bind: result.deliveryID)").run()
                }
                switch result.outcome {
                case .sent:
                    sentByAttempts[result.attempts, default: []].append(result.deliveryID)
                    finished[result.notificationID, default: (0, 0, 0, 0)].sent += 1
                case .failed(let reason):
                    finished[result.notificationID, default: (0, 0, 0, 0)].failed += 1
                    try await database.raw(
                        "UPDATE deliveries SET status = 'failed', reason = \(bind: reason), attempts = attempts + \(bind: result.attempts), updated_at = \(bind: now) WHERE id = \(bind: result.deliveryID)"
                    ).run()
                case .tokenDead(let reason, let since):
                    finished[result.notificationID, default: (0, 0, 0, 0)].failed += 1
                    try await database.raw(
                        "UPDATE deliveries SET status = 'failed', reason = \(bind: reason), attempts = attempts + \(bind: result.attempts), updated_at = \(bind: now) WHERE id = \(bind: result.deliveryID)"
                    ).run()
                    let sinceMilliseconds = Self.milliseconds(since ?? clock.now())
                    try await database.raw(
                        "UPDATE devices SET active = 0, inactive_reason = \(bind: reason), inactive_since = \(bind: sinceMilliseconds), updated_at = \(bind: now) WHERE app_id = \(bind: result.appID) AND device_id = \(bind: result.deviceID)"
                    ).run()
                case .retry(let reason, let dueAt):
                    let due = Self.milliseconds(dueAt)
                    try await database.raw(
                        "UPDATE deliveries SET status = 'queued', reason = \(bind: reason), due_at = \(bind: due), attempts = attempts + \(bind: result.attempts), updated_at = \(bind: now) WHERE id = \(bind: result.deliveryID)"
                    ).run()
                case .deferred(let reason, let until):
                    finished[result.notificationID, default: (0, 0, 0, 0)].deferred += 1
                    let due = Self.milliseconds(until, rounding: .up)
                    try await database.raw(
                        "UPDATE deliveries SET status = 'deferred', reason = \(bind: reason), due_at = \(bind: due), updated_at = \(bind: now) WHERE id = \(bind: result.deliveryID)"
                    ).run()
                case .suppressed(let reason):
                    finished[result.notificationID, default: (0, 0, 0, 0)].suppressed += 1
                    try await database.raw(
                        "UPDATE deliveries SET status = 'suppressed', reason = \(bind: reason), updated_at = \(bind: now) WHERE id = \(bind: result.deliveryID)"
                    ).run()
                }
            }
            for (notificationID, counts) in finished {
                try await database.raw(
                    """
                    UPDATE notifications SET sent_count = sent_count + \(bind: counts.sent), failed_count = failed_count + \(bind: counts.failed),
                        deferred_count = deferred_count + \(bind: counts.deferred), suppressed_count = suppressed_count + \(bind: counts.suppressed)
                    WHERE id = \(bind: notificationID.uuidString)
                    """
                ).run()
            }
            for (attempts, ids) in sentByAttempts {
                for chunk in ids.chunked(Self.batchSize) {
                    try await database.raw(
                        "UPDATE deliveries SET status = 'sent', reason = NULL, attempts = attempts + \(bind: attempts), updated_at = \(bind: now) WHERE id IN (\(binds: chunk))"
                    ).run()
                }
            }
        }
    }

    /// Counts policy-governed sends for pacing and grouping (`recentSends`): what each user was
    /// sent, when. Rows older than a day are never read and are deleted here.
    package func recordUserSends(appID: String, sends: [(userID: String, notificationID: UUID)], at date: Date) async throws {
        guard !sends.isEmpty else { return }
        try await transaction {
            let now = Self.milliseconds(date)
            for chunk in sends.chunked(Self.batchSize) {
                var values: [SQLQueryString] = []
                for (userID, notificationID) in chunk {
                    values.append("(\(bind: appID), \(bind: userID), \(bind: notificationID.uuidString), \(bind: now))")
                }
                try await database.raw(
                    "INSERT OR IGNORE INTO user_sends (app_id, user_id, notification_id, sent_at) VALUES \(values.joined(separator: ", "))"
                ).run()
                try await database.raw(
                    "DELETE FROM user_sends WHERE app_id = \(bind: appID) AND user_id IN (\(binds: Array(Set(chunk.map(\.userID))))) AND sent_at < \(bind: now - 86_400_000)"
                ).run()
            }
        }
    }

    /// At start: deliveries a previous process claimed but never answered go back to the queue
    /// (at-least-once). Returns how many; they are counted in `resent_after_restart`.
    package func requeueUnfinished() async throws -> Int {
        try await transaction {
            let rows = try await connection.query(Self.requeueSQL, [.integer(Int(nowMilliseconds))])
            if !rows.isEmpty { try await addToCounter("resent_after_restart", rows.count) }
            return rows.count
        }
    }

    /// Puts claimed deliveries back in the queue unsent (a prefetched batch at shutdown).
    package func unclaim(_ ids: [Int64]) async throws {
        guard !ids.isEmpty else { return }
        try await transaction {
            for chunk in ids.chunked(Self.batchSize) {
                try await database.raw(
                    "UPDATE deliveries SET status = 'queued', updated_at = \(bind: nowMilliseconds) WHERE status = 'sending' AND id IN (\(binds: chunk))"
                ).run()
            }
        }
    }

    /// Deliveries waiting to be sent (queued and due, or being sent).
    package func queueDepth() async throws -> Int {
        try await exclusive {
            try await connection.query(Self.queueDepthSQL, [.integer(Int(nowMilliseconds))]).first?.column("n")?.integer ?? 0
        }
    }

    /// What an operator watches of the outbox: deliveries due now, deliveries deferred by the
    /// policy engine, and how long the oldest due delivery has waited past its time.
    package func outboxGauges() async throws -> (due: Int, deferred: Int, oldestDueAge: TimeInterval) {
        let now = nowMilliseconds
        return try await exclusive {
            let due = try await connection.query(Self.queueDepthSQL, [.integer(Int(now))]).first?.column("n")?.integer ?? 0
            let deferred = try await connection.query(
                "SELECT COUNT(*) AS n FROM deliveries WHERE \(Self.outboxIndexTerm) AND status = 'deferred'", []
            ).first?.column("n")?.integer ?? 0
            let oldest = try await connection.query(
                "SELECT MIN(due_at) AS m FROM deliveries WHERE \(Self.outboxIndexTerm) AND status = 'queued' AND due_at <= ?1",
                [.integer(Int(now))]
            ).first?.column("m")?.integer
            return (due, deferred, oldest.map { max(0, Double(Int(now) - $0) / 1000) } ?? 0)
        }
    }

    private func updateDeliveries(_ ids: [Int64], status: DeliveryStatus, reason: String?, now: Int64) async throws {
        try await database.raw(
            "UPDATE deliveries SET status = \(bind: status.rawValue), reason = \(bind: reason), updated_at = \(bind: now) WHERE id IN (\(binds: ids))"
        ).run()
    }

    static func notification(from row: any SQLRow, appID: String, idempotencyKey: String?) throws -> NotificationRecord {
        NotificationRecord(
            id: UUID(uuidString: try row.decode(column: "id", as: String.self)) ?? UUID(),
            appID: appID, idempotencyKey: idempotencyKey,
            content: Data(try row.decode(column: "content", as: String.self).utf8),
            recipients: try row.decode(column: "recipients", as: Int.self),
            createdAt: Date(timeIntervalSince1970: Double(try row.decode(column: "created_at", as: Int64.self)) / 1000))
    }
}

extension Array {
    /// Consecutive slices of at most `size` elements.
    func chunked(_ size: Int) -> [[Element]] {
        stride(from: 0, to: count, by: size).map { Array(self[$0..<Swift.min(count, $0 + size)]) }
    }
}
