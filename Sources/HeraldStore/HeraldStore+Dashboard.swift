package import Foundation

// What the dashboard reads (issue #15): recent notifications with their counters, and a user's
// deliveries still waiting. Both on the reading connection, bounded by a limit.

/// A notification as a dashboard list shows it: its counters, not its deliveries.
package struct NotificationSummary: Sendable, Hashable {
    package var id: UUID
    package var type: String?
    package var recipients: Int
    package var createdAt: Date
    package var sent: Int
    package var failed: Int
    package var deferred: Int
    package var suppressed: Int
    package var cancelled: Int
    package var opened: Int
}

/// A delivery waiting to be sent (queued or deferred), with its notification.
package struct WaitingDelivery: Sendable, Hashable {
    package var notificationID: UUID
    package var type: String?
    package var delivery: DeliveryRecord
}

extension HeraldStore {
    /// What the notifications list can filter on: a notification with at least one delivery so.
    package static let summaryFilters: [String: String] = [
        "sent": "sent_count", "failed": "failed_count", "deferred": "deferred_count", "suppressed": "suppressed_count",
        "cancelled": "cancelled_count", "opened": "opened_count",
    ]

    /// The app's newest notifications (created before `before`, when given), of `type` and
    /// with a delivery in `status` (one of `summaryFilters`) when given.
    package func recentNotifications(appID: String, type: String?, status: String?, before: Date?, limit: Int) async throws -> [NotificationSummary] {
        var conditions = ["app_id = $1"]
        var binds: [Session.Value] = [.text(appID)]
        if let type {
            binds.append(.text(type))
            conditions.append("type = $\(binds.count)")
        }
        if let before {
            binds.append(.integer(Int64((before.timeIntervalSince1970 * 1000).rounded())))
            conditions.append("created_at < $\(binds.count)")
        }
        if let status, let column = Self.summaryFilters[status] { conditions.append("\(column) > 0") }
        binds.append(.integer(Int64(limit)))
        let sql = """
            SELECT id, type, recipients, created_at, sent_count, failed_count, deferred_count, suppressed_count, cancelled_count, opened_count
            FROM notifications WHERE \(conditions.joined(separator: " AND ")) ORDER BY created_at DESC LIMIT $\(binds.count)
            """
        return try await reading { session in
            try await session.query(sql, binds).compactMap { columns in
                guard columns.count == 10, let id = columns[0].text.flatMap(UUID.init(uuidString:)), let created = columns[3].integer else { return nil }
                func count(_ index: Int) -> Int { Int(columns[index].integer ?? 0) }
                return NotificationSummary(
                    id: id, type: columns[1].text, recipients: count(2), createdAt: Self.date(created), sent: count(4), failed: count(5),
                    deferred: count(6), suppressed: count(7), cancelled: count(8), opened: count(9))
            }
        }
    }

    /// The user's deliveries still waiting (queued or deferred), soonest first: through the
    /// app's notifications not yet done (`notifications_open`) and the user's devices, each a
    /// lookup in `deliveries_notification`. (`d.created_at >= n.created_at` lets PostgreSQL skip
    /// the day partitions older than the notification.)
    package func waitingDeliveries(appID: String, userID: String, limit: Int) async throws -> [WaitingDelivery] {
        try await reading { session in
            try await session.query(
                """
                SELECT d.id, d.notification_id, n.type, d.device_id, d.status, d.reason, d.attempts, d.trace, d.due_at, d.created_at, d.updated_at
                FROM notifications n CROSS JOIN deliveries d
                WHERE n.app_id = $1 AND n.recipients > n.sent_count + n.failed_count + n.suppressed_count + n.cancelled_count
                  AND d.notification_id = n.id AND d.device_id IN (SELECT device_id FROM devices WHERE app_id = $1 AND user_id = $2)
                  AND d.created_at >= n.created_at AND d.user_id = $2 AND d.status IN ('queued', 'deferred')
                ORDER BY d.due_at, d.id LIMIT $3
                """, [.text(appID), .text(userID), .integer(Int64(limit))]
            ).compactMap { columns in
                guard columns.count == 11, let id = columns[0].integer, let notification = columns[1].text.flatMap(UUID.init(uuidString:)),
                    let device = columns[3].text, let status = columns[4].text.flatMap(DeliveryStatus.init(rawValue:)),
                    let due = columns[8].integer, let created = columns[9].integer, let updated = columns[10].integer
                else { return nil }
                return WaitingDelivery(
                    notificationID: notification, type: columns[2].text,
                    delivery: DeliveryRecord(
                        id: id, deviceID: device, status: status, reason: columns[5].text, attempts: Int(columns[6].integer ?? 0),
                        trace: columns[7].text, dueAt: Self.date(due), createdAt: Self.date(created), updatedAt: Self.date(updated)))
            }
        }
    }
}
