package import Foundation
package import HeraldCore

/// Badges and events with their triggers' effects, server-authoritative: a
/// user's badge is the sum of their counters, and every change of the sum sends the new total
/// (never a delta) to each of their active devices, in the transaction that changed it.
extension DeviceRepository {
    /// A user's counters.
    package func badges(appID: String, userID: String) async throws -> [String: Int64] {
        try await exclusive { session in
            try await self.counters(appID: appID, userID: userID, session)
        }
    }

    /// Changes counters in one durable transaction; when the total changes, its badge push is
    /// written too. Returns the counters after, and the push's notification id when one was sent.
    package func changeBadges(
        appID: String, userID: String, _ changes: [BadgeChange], push: BadgePush
    ) async throws -> (counters: [String: Int64], notification: UUID?) {
        try await transaction(durable: true) { [self] session in
            try await changeBadges(
                appID: appID, userID: userID, changes, push: push, now: nowMilliseconds, session)
        }
    }

    private func counters(appID: String, userID: String, _ session: Session) async throws -> [String: Int64] {
        var counters: [String: Int64] = [:]
        for row in try await session.query(
            "SELECT counter, value FROM badges WHERE app_id = $1 AND user_id = $2", [.text(appID), .text(userID)])
        {
            if let counter = row[0].text, let value = row[1].integer { counters[counter] = value }
        }
        return counters
    }

    /// Counters never go below zero (a "resolved" that arrives twice does not make -1).
    func changeBadges(
        appID: String, userID: String, _ changes: [BadgeChange], push: BadgePush, now: Int64, _ session: Session
    ) async throws -> (counters: [String: Int64], notification: UUID?) {
        var counters = try await counters(appID: appID, userID: userID, session)
        guard !changes.isEmpty else { return (counters, nil) }
        let before = counters.values.reduce(0, +)
        for change in changes {
            let value = max(0, change.value ?? ((counters[change.counter] ?? 0) + (change.delta ?? 0)))
            counters[change.counter] = value
            _ = try await session.query(
                """
                INSERT INTO badges (app_id, user_id, counter, value, updated_at) VALUES ($1, $2, $3, $4, $5)
                ON CONFLICT (app_id, user_id, counter) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at
                """, [.text(appID), .text(userID), .text(change.counter), .integer(value), .integer(now)])
        }
        let total = counters.values.reduce(0, +)
        guard total != before else { return (counters, nil) }
        let id = UUID.random()
        _ = try await database.notifications.writeNotification(
            appID: appID, id: id, idempotencyKey: nil, cancelKey: nil,
            content: try push.content(total: total, now: SQLText.date(now)),
            recipients: .users([userID]),
            excludeDeviceIDs: [], due: now, lane: .urgent, now: now, session)
        return (counters, id)
    }

    /// What an event's triggers do, prepared before its transaction: attributes to merge into
    /// the user's, cancel keys (for this user), badge changes, sends (to this user), in that order.
    package struct EventEffects: Sendable {
        package var attributes: [String: String] = [:]
        package var cancels: [String] = []
        package var badges: [BadgeChange] = []
        package var sends: [(id: UUID, content: Data, lane: DeliveryLane, cancelKey: String?)] = []
        package init() {}
    }

    /// Stores an event and applies its triggers' effects in one durable transaction. An
    /// idempotency key seen before applies nothing and answers the first event's id and
    /// notifications with `duplicate == true`.
    package func applyEvent(
        appID: String, id: UUID, userID: String, name: String, data: String, occurredAt: Date, idempotencyKey: String?,
        effects: EventEffects, badgePush: BadgePush
    ) async throws -> (id: String, duplicate: Bool, notifications: [String]) {
        try await transaction(durable: true) { [self] session in
            try await applyEvent(
                appID: appID, id: id, userID: userID, name: name, data: data, occurredAt: occurredAt,
                idempotencyKey: idempotencyKey,
                effects: effects, badgePush: badgePush, session)
        }
    }

    /// `applyEvent` inside a transaction already open.
    func applyEvent(
        appID: String, id: UUID, userID: String, name: String, data: String, occurredAt: Date, idempotencyKey: String?,
        effects: EventEffects, badgePush: BadgePush, _ session: Session
    ) async throws -> (id: String, duplicate: Bool, notifications: [String]) {
        if let idempotencyKey,
            let existing = try await session.query(
                "SELECT id, notifications FROM events WHERE app_id = $1 AND idempotency_key = $2",
                [.text(appID), .text(idempotencyKey)]
            ).first, let existingID = existing[0].text
        {
            let sent = existing[1].text.map { $0.split(separator: ",").map(String.init) } ?? []
            return (existingID, true, sent)
        }
        let now = nowMilliseconds
        var notifications: [String] = []
        if !effects.attributes.isEmpty {
            let stored = try await session.query(
                "SELECT attributes FROM users WHERE app_id = $1 AND user_id = $2", [.text(appID), .text(userID)]
            ).first?.first?.text
            var attributes =
                (stored.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) } as? [String: Any]) ?? [:]
            for (key, value) in effects.attributes { attributes[key] = value }
            let text = String(
                decoding: try JSONSerialization.data(withJSONObject: attributes, options: [.sortedKeys]), as: UTF8.self)
            _ = try await session.query(
                """
                INSERT INTO users (app_id, user_id, attributes, preferences, created_at, updated_at) VALUES ($1, $2, $3, '{}', $4, $4)
                ON CONFLICT (app_id, user_id) DO UPDATE SET attributes = excluded.attributes, updated_at = excluded.updated_at
                """, [.text(appID), .text(userID), .text(text), .integer(now)])
        }
        for key in effects.cancels {
            _ = try await database.notifications.cancel(
                appID: appID, cancelKey: key, userIDs: [userID], now: now, session)
        }
        if let badge = try await changeBadges(
            appID: appID, userID: userID, effects.badges, push: badgePush, now: now, session
        ).notification {
            notifications.append(badge.uuidString.lowercased())
        }
        for send in effects.sends {
            _ = try await database.notifications.writeNotification(
                appID: appID, id: send.id, idempotencyKey: nil, cancelKey: send.cancelKey, content: send.content,
                recipients: .users([userID]), excludeDeviceIDs: [], due: now, lane: send.lane, now: now, session)
            notifications.append(send.id.uuidString.lowercased())
        }
        let eventID = id.uuidString.lowercased()
        _ = try await session.query(
            """
            INSERT INTO events (id, app_id, user_id, name, data, occurred_at, received_at, idempotency_key, notifications)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
            """,
            [
                .text(eventID), .text(appID), .text(userID), .text(name), .text(data),
                .integer(Self.milliseconds(occurredAt)),
                .integer(now), idempotencyKey.map { .text($0) } ?? .null,
                notifications.isEmpty ? .null : .text(notifications.joined(separator: ",")),
            ])
        if !notifications.isEmpty { try await database.nodes.notifyOutbox(session) }
        return (eventID, false, notifications)
    }
}
