package import Foundation

// What the dashboard reads: recent notifications with their counters, and a user's
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

extension DashboardQueries {
    /// What the notifications list can filter on: a notification with at least one delivery so.
    package static let summaryFilters: [String: String] = [
        "sent": "sent_count", "failed": "failed_count", "deferred": "deferred_count", "suppressed": "suppressed_count",
        "cancelled": "cancelled_count", "opened": "opened_count",
    ]

    /// The app's newest notifications (created before `before`, when given), of `type` and
    /// with a delivery in `status` (one of `summaryFilters`) when given.
    package func recentNotifications(appID: String, type: String?, status: String?, before: Date?, limit: Int)
        async throws -> [NotificationSummary]
    {
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
                guard columns.count == 10, let id = columns[0].text.flatMap(UUID.init(uuidString:)),
                    let created = columns[3].integer
                else { return nil }
                func count(_ index: Int) -> Int { Int(columns[index].integer ?? 0) }
                return NotificationSummary(
                    id: id, type: columns[1].text, recipients: count(2), createdAt: SQLText.date(created),
                    sent: count(4),
                    failed: count(5),
                    deferred: count(6), suppressed: count(7), cancelled: count(8), opened: count(9))
            }
        }
    }

    /// How many open notifications one lookup of a user's waiting deliveries names.
    static let waitingLookupChunk = 500

    /// The user's deliveries still waiting (queued or deferred), soonest first: the app's
    /// notifications not yet done (`notifications_open`) and the user's devices, then their
    /// deliveries by both lists in `deliveries_notification`. Three steps, not one join:
    /// PostgreSQL planned the join deliveries-first (a scan of the day's partition, 80–190 ms
    /// with 200,000 deliveries) even with fresh statistics.
    package func waitingDeliveries(appID: String, userID: String, limit: Int) async throws -> [WaitingDelivery] {
        try await reading { session in
            var types: [String: String?] = [:]
            for row in try await session.query(
                "SELECT id, type FROM notifications WHERE app_id = $1 AND recipients > sent_count + failed_count + suppressed_count + cancelled_count",
                [.text(appID)])
            {
                if let id = row.first?.text { types[id] = row.count > 1 ? row[1].text : nil }
            }
            let devices = try await session.query(
                "SELECT device_id FROM devices WHERE app_id = $1 AND user_id = $2", [.text(appID), .text(userID)]
            )
            .compactMap { $0.first?.text }
            guard !types.isEmpty, !devices.isEmpty else { return [] }
            var found: [WaitingDelivery] = []
            // Both lists in chunks: at most 1,002 binds a statement, however many devices a user has.
            for (chunk, deviceChunk) in types.keys.sorted().chunked(Self.waitingLookupChunk).flatMap({ notifications in
                devices.chunked(Self.waitingLookupChunk).map { (notifications, $0) }
            }) {
                let devices = deviceChunk
                // $1 the user, $2 the limit, then the devices, then the notifications.
                let deviceList = devices.indices.map { "$\($0 + 3)" }.joined(separator: ", ")
                let notificationList = chunk.indices.map { "$\($0 + 3 + devices.count)" }.joined(separator: ", ")
                found += try await session.query(
                    """
                    SELECT id, notification_id, device_id, status, reason, attempts, trace, due_at, created_at, updated_at FROM deliveries
                    WHERE notification_id IN (\(notificationList)) AND device_id IN (\(deviceList)) AND user_id = $1 AND status IN ('queued', 'deferred')
                    ORDER BY due_at, id LIMIT $2
                    """, [.text(userID), .integer(Int64(limit))] + devices.map { .text($0) } + chunk.map { .text($0) }
                ).compactMap { columns in
                    guard columns.count == 10, let id = columns[0].integer, let notificationText = columns[1].text,
                        let notification = UUID(uuidString: notificationText), let device = columns[2].text,
                        let status = columns[3].text.flatMap(DeliveryStatus.init(rawValue:)),
                        let due = columns[7].integer, let created = columns[8].integer, let updated = columns[9].integer
                    else { return nil }
                    return WaitingDelivery(
                        notificationID: notification, type: types[notificationText] ?? nil,
                        delivery: DeliveryRecord(
                            id: id, deviceID: device, status: status, reason: columns[4].text,
                            attempts: Int(columns[5].integer ?? 0),
                            trace: columns[6].text, dueAt: SQLText.date(due),
                            createdAt: SQLText.date(created),
                            updatedAt: SQLText.date(updated)))
                }
            }
            found += try await deferredInPages(
                appID: appID, userID: userID, devices: devices, types: types, session)
            return Array(
                found.sorted { ($0.delivery.dueAt, $0.delivery.id) < ($1.delivery.dueAt, $1.delivery.id) }.prefix(limit)
            )
        }
    }

    /// The user's deliveries waiting in pages deferred together (`HeraldStore+DeferredPages`),
    /// which have no row until they are sent: the app's waiting pages whose first and last
    /// device bound one of the user's devices, read where their list names the user. (The
    /// search for the user's id is not left to SQLite: it ran it on every page's list before
    /// the range test, 16 ms for 120 pages.)
    private func deferredInPages(
        appID: String, userID: String, devices: [String], types: [String: String?], _ session: Session
    ) async throws -> [WaitingDelivery] {
        guard database.deferredPages else { return [] }
        let quoted = BroadcastRepository.ListedEntry.userMarker(userID)
        let listed =
            dialect == .sqlite
            ? "SELECT value FROM json_each($2)" : "SELECT value FROM json_array_elements_text($2::json) AS d(value)"
        var found: [WaitingDelivery] = []
        for row in try await session.query(
            """
            SELECT notification_id, due_at, accepted_at, reason, devices, trace FROM broadcast_pages p
            WHERE app_id = $1 AND reason IS NOT NULL
              AND EXISTS (SELECT 1 FROM (\(listed)) d WHERE d.value BETWEEN p.after_device AND p.through_device)
            """, [.text(appID), .text(SQLText.jsonArray(strings: devices))])
        {
            guard row.count == 6, let notificationText = row[0].text,
                let notification = UUID(uuidString: notificationText), let due = row[1].integer,
                let accepted = row[2].integer, let listed = row[4].text, listed.contains(quoted)
            else { continue }
            let traces = SQLText.jsonStrings(row[5].text)
            for entry in BroadcastRepository.ListedEntry.entries(listed) where entry.user == userID {
                guard
                    let delivery = entry.waitingDelivery(
                        reason: row[3].text, traces: traces, due: due, accepted: accepted)
                else { continue }
                found.append(
                    WaitingDelivery(
                        notificationID: notification, type: types[notificationText] ?? nil, delivery: delivery))
            }
        }
        return found
    }
}
