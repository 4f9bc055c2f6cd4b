package import Foundation
package import HeraldCore

/// Resolved elsewhere: once a user dealt with a notification on one device,
/// its deliveries to that user not yet sent are cancelled and the user's other devices get a
/// replacement (the same collapse id) saying so.
extension ActionRepository {
    /// A notification's resolution for a user (the first one stays).
    package struct Resolution: Sendable, Equatable {
        package var deviceID: String
        package var label: String
        package var replacementID: UUID?
        package var createdAt: Date
        /// Whether this call made it (false: it was resolved before, and nothing was done now).
        package var first: Bool
        /// Deliveries of it to the user that were still waiting, now cancelled.
        package var cancelled: Int
        /// Devices the replacement goes to.
        package var devices: Int
    }

    /// The resolution of `notificationID` for `userID`, if any.
    package func resolution(appID: String, notificationID: UUID, userID: String) async throws -> Resolution? {
        try await reading { session in
            try await Self.resolution(appID: appID, notificationID: notificationID, userID: userID, session)
        }
    }

    private static func resolution(appID: String, notificationID: UUID, userID: String, _ session: Session) async throws
        -> Resolution?
    {
        guard
            let row = try await session.query(
                "SELECT device_id, label, replacement_id, created_at FROM resolutions WHERE app_id = $1 AND notification_id = $2 AND user_id = $3",
                [.text(appID), .text(notificationID.uuidString), .text(userID)]
            ).first, let device = row[0].text, let label = row[1].text, let created = row[3].integer
        else { return nil }
        return Resolution(
            deviceID: device, label: label, replacementID: row[2].text.flatMap(UUID.init(uuidString:)),
            createdAt: SQLText.date(created), first: false,
            cancelled: 0, devices: 0)
    }

    /// Resolves `notificationID` for `userID` from `deviceID`, in one durable transaction:
    /// records it, cancels the user's deliveries of it not yet claimed, and writes the
    /// replacement (`replacement`, content as stored) to the user's other active devices. A
    /// notification already resolved for the user answers the first resolution and does nothing.
    package func resolve(
        appID: String, notificationID: UUID, userID: String, deviceID: String, label: String,
        replacement: (id: UUID, content: Data)
    ) async throws -> Resolution {
        try await transaction(durable: true) { [self] session in
            if let earlier = try await Self.resolution(
                appID: appID, notificationID: notificationID, userID: userID, session)
            {
                return earlier
            }
            // The user's deliveries of it waiting in a page of deferred deliveries end first,
            // written as rows (cancelled, resolved): from here on they are the user's like others.
            let waiting = try await database.broadcasts.endWaiting(
                notification: notificationID.uuidString, userID: userID, status: .cancelled, reason: "Resolved",
                session)
            // Only devices that had a delivery of the notification take part: the resolving one
            // must have had one, and the replacement goes to the user's others that had one.
            let reached = Set(
                try await session.query(
                    "SELECT device_id FROM deliveries WHERE notification_id = $1 AND user_id = $2",
                    [.text(notificationID.uuidString), .text(userID)]
                ).compactMap { $0.first?.text })
            guard reached.contains(deviceID) else {
                throw StoreError(.notFound, "the device had no delivery of this notification")
            }
            // …and still the user's (a device that moved to another user since is left out).
            let current = Set(
                try await session.query(
                    "SELECT device_id FROM devices WHERE app_id = $1 AND user_id = $2", [.text(appID), .text(userID)]
                )
                .compactMap { $0.first?.text })
            let now = nowMilliseconds
            var cancelled = 0
            var undeferred = 0
            for status in [DeliveryStatus.queued, .deferred] {
                let rows = try await session.query(
                    """
                    UPDATE deliveries SET status = 'cancelled', reason = 'Resolved', updated_at = $1
                    WHERE notification_id = $2 AND user_id = $3 AND status = $4 AND \(OutboxRepository.outboxIndexTerm) RETURNING 1
                    """, [.integer(now), .text(notificationID.uuidString), .text(userID), .text(status.rawValue)]
                ).count
                cancelled += rows
                if status == .deferred { undeferred = rows }
            }
            if cancelled > 0 {
                _ = try await session.query(
                    "UPDATE notifications SET cancelled_count = cancelled_count + $1, deferred_count = deferred_count - $2 WHERE id = $3",
                    [.integer(Int64(cancelled)), .integer(Int64(undeferred)), .text(notificationID.uuidString)])
            }
            // No other device (a user with one): no replacement notification at all (an empty
            // device list is no statement PostgreSQL takes).
            let others = reached.intersection(current).subtracting([deviceID]).sorted()
            let devices =
                others.isEmpty
                ? 0
                : try await database.notifications.writeNotification(
                    appID: appID, id: replacement.id, idempotencyKey: nil, cancelKey: nil, content: replacement.content,
                    recipients: .devices(others), excludeDeviceIDs: [], due: now, lane: .urgent, now: now, session
                ).0
            _ = try await session.query(
                """
                INSERT INTO resolutions (app_id, notification_id, user_id, device_id, label, replacement_id, created_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7)
                """,
                [
                    .text(appID), .text(notificationID.uuidString), .text(userID), .text(deviceID), .text(label),
                    devices > 0 ? .text(replacement.id.uuidString) : .null, .integer(now),
                ])
            if devices > 0 { try await database.nodes.notifyOutbox(session) }
            return Resolution(
                deviceID: deviceID, label: label, replacementID: devices > 0 ? replacement.id : nil,
                createdAt: SQLText.date(now), first: true,
                cancelled: cancelled + Int(waiting), devices: devices)
        }
    }
}

/// Responses to a notification: what the user answered (Lucid's reflection
/// prompts: text, energy, mood, focus).
extension ActionRepository {
    package struct NotificationResponse: Sendable, Equatable {
        package var id: UUID
        package var notificationID: UUID
        package var userID: String?
        package var deviceID: String
        package var text: String?
        package var energy: Int?
        package var mood: Int?
        package var focus: Int?
        package var createdAt: Date

        package init(
            id: UUID, notificationID: UUID, userID: String?, deviceID: String, text: String?, energy: Int?, mood: Int?,
            focus: Int?, createdAt: Date
        ) {
            self.id = id
            self.notificationID = notificationID
            self.userID = userID
            self.deviceID = deviceID
            self.text = text
            self.energy = energy
            self.mood = mood
            self.focus = focus
            self.createdAt = createdAt
        }
    }

    package func addResponse(appID: String, _ response: NotificationResponse) async throws {
        try await transaction(durable: true) { session in
            func number(_ value: Int?) -> Session.Value { value.map { .integer(Int64($0)) } ?? .null }
            _ = try await session.query(
                """
                INSERT INTO responses (id, app_id, notification_id, user_id, device_id, text, energy, mood, focus, created_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
                """,
                [
                    .text(response.id.uuidString), .text(appID), .text(response.notificationID.uuidString),
                    response.userID.map { .text($0) } ?? .null,
                    .text(response.deviceID), response.text.map { .text($0) } ?? .null, number(response.energy),
                    number(response.mood),
                    number(response.focus), .integer(Self.milliseconds(response.createdAt)),
                ])
        }
    }

    /// A notification's responses, oldest first.
    package func responses(appID: String, notificationID: UUID, limit: Int) async throws -> [NotificationResponse] {
        try await reading { session in
            try await session.query(
                """
                SELECT id, user_id, device_id, text, energy, mood, focus, created_at FROM responses
                WHERE app_id = $1 AND notification_id = $2 ORDER BY created_at, id LIMIT $3
                """, [.text(appID), .text(notificationID.uuidString), .integer(Int64(limit))]
            ).compactMap { row in
                guard let id = row[0].text.flatMap(UUID.init(uuidString:)), let device = row[2].text,
                    let created = row[7].integer
                else { return nil }
                return NotificationResponse(
                    id: id, notificationID: notificationID, userID: row[1].text, deviceID: device, text: row[3].text,
                    energy: row[4].integer.map(Int.init), mood: row[5].integer.map(Int.init),
                    focus: row[6].integer.map(Int.init),
                    createdAt: SQLText.date(created))
            }
        }
    }
}

/// Delivery events for the apps' webhooks: a delivery that failed, a device whose
/// token its provider called dead.
extension ActionRepository {
    /// Which apps' webhooks take which delivery event.
    package struct ResultWebhooks: Sendable {
        /// Apps that take `delivery.failed`.
        package var failed: Set<String> = []
        /// Apps that take `device.deactivated`.
        package var deactivated: Set<String> = []

        package init(failed: Set<String> = [], deactivated: Set<String> = []) {
            self.failed = failed
            self.deactivated = deactivated
        }

        var isEmpty: Bool { failed.isEmpty && deactivated.isEmpty }

        /// Whether a result makes a message: what `recordResults` queues.
        package func wants(_ result: DeliveryResult) -> Bool {
            switch result.outcome {
            case .failed: failed.contains(result.appID)
            case .tokenDead: failed.contains(result.appID) || deactivated.contains(result.appID)
            default: false
            }
        }
    }

    package static let deliveryFailedEvent = "delivery.failed"
    package static let deviceDeactivatedEvent = "device.deactivated"

    /// Queues, in the results' transaction, a message per failed delivery and per device
    /// deactivated among `results` whose app takes it: only for rows this transaction wrote
    /// (failed, updated since `since`: a result of a claim taken back wrote nothing). The
    /// body is built from the rows (`{"type", "timestamp", "data"}`); each user's in delivery order.
    func queueResultWebhooks(
        _ results: [DeliveryResult], _ webhooks: ResultWebhooks, since: Int64, now: Int64, _ session: Session
    ) async throws -> Int {
        var failed: [Int64] = []
        var dead: [Int64] = []
        for result in results {
            switch result.outcome {
            case .failed:
                if webhooks.failed.contains(result.appID) { failed.append(result.deliveryID) }
            case .tokenDead:
                if webhooks.failed.contains(result.appID) { failed.append(result.deliveryID) }
                if webhooks.deactivated.contains(result.appID) { dead.append(result.deliveryID) }
            default: break
            }
        }
        let postgres = dialect == .postgres
        let object = postgres ? "json_build_object" : "json_object"
        let messageID =
            postgres ? "'msg_' || replace(gen_random_uuid()::text, '-', '')" : "'msg_' || lower(hex(randomblob(16)))"
        let ids = postgres ? "(SELECT json_array_elements_text($1::json)::bigint)" : SQLText.jsonEach("$1")
        // RFC 3339 in UTC with milliseconds, as the API writes times.
        func time(_ milliseconds: String) -> String {
            postgres
                ? "to_char(to_timestamp(\(milliseconds) / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
                : "strftime('%Y-%m-%dT%H:%M:%fZ', \(milliseconds) / 1000.0, 'unixepoch')"
        }
        let body = postgres ? "::text" : ""
        let insert = """
            INSERT INTO webhook_messages (message_id, app_id, user_id, event, idempotency_key, body, status, attempts, next_at, created_at, updated_at)
            """
        var queued = 0
        for chunk in failed.chunked(OutboxRepository.resultRowsPerStatement) {
            queued += try await session.query(
                """
                \(insert)
                SELECT \(messageID), d.app_id, COALESCE(d.user_id, ''), '\(Self.deliveryFailedEvent)', 'delivery:' || d.id || ':failed',
                    \(object)('type', '\(Self.deliveryFailedEvent)', 'timestamp', \(time("$3")), 'data', \(object)(
                        'app', d.app_id, 'notification_id', lower(d.notification_id), 'delivery_id', d.id, 'device_id', d.device_id,
                        'user_id', d.user_id, 'reason', d.reason, 'attempts', d.attempts))\(body),
                    'pending', 0, $3, $3, $3
                FROM deliveries d WHERE d.id IN \(ids) AND d.status = 'failed' AND d.updated_at >= $2 ORDER BY d.id RETURNING 1
                """, [.text(SQLText.jsonArray(chunk)), .integer(since), .integer(now)]
            ).count
        }
        for chunk in dead.chunked(OutboxRepository.resultRowsPerStatement) {
            queued += try await session.query(
                """
                \(insert)
                SELECT \(messageID), d.app_id, COALESCE(d.user_id, ''), '\(Self.deviceDeactivatedEvent)', 'device:' || d.device_id || ':' || d.id,
                    \(object)('type', '\(Self.deviceDeactivatedEvent)', 'timestamp', \(time("$3")), 'data', \(object)(
                        'app', d.app_id, 'device_id', d.device_id, 'user_id', d.user_id, 'platform', v.platform, 'reason', v.inactive_reason,
                        'inactive_since', \(time("v.inactive_since")), 'delivery_id', d.id, 'notification_id', lower(d.notification_id)))\(body),
                    'pending', 0, $3, $3, $3
                FROM deliveries d JOIN devices v ON v.app_id = d.app_id AND v.device_id = d.device_id AND v.active = 0
                WHERE d.id IN \(ids) AND d.status = 'failed' AND d.updated_at >= $2 ORDER BY d.id RETURNING 1
                """, [.text(SQLText.jsonArray(chunk)), .integer(since), .integer(now)]
            ).count
        }
        return queued
    }
}
