package import Foundation
import HeraldCore

/// Silent sync to a user's other devices: a timer per device (`kind = 'sync'`,
/// `name` the device), one pending at a time. A sync while one is pending replaces its cursor
/// (coalesced); otherwise a new one is due at once, or `debounce` after the last one to that
/// device, or when the device's hourly budget frees up; what was coalesced or held is in its
/// trace, which the delivery starts with.
extension NodeRepository {
    /// What a sync did for one device.
    package struct SyncPlan: Sendable, Hashable {
        package var deviceID: String
        package var dueAt: Date
        /// It joined a push already waiting (its cursor replaced).
        package var coalesced: Bool
        /// The device's hourly budget was spent: it waits for a slot.
        package var held: Bool
    }

    /// Schedules a background push with `cursor` to every active device of the user but
    /// `origin`, in one transaction. What was coalesced or held is a `sync` step of the timer's
    /// decision trace.
    package func scheduleSync(
        appID: String, userID: String, origin: String?, cursor: String, debounce: TimeInterval, hourlyBudget: Int
    ) async throws -> [SyncPlan] {
        try await transaction { [self] session in
            let now = nowMilliseconds
            func trace(_ message: String, _ previous: String?) -> String? {
                DecisionTrace.appending(
                    [PolicyStep(rule: "sync", message: message)], at: SQLText.date(now), to: previous)
            }
            let devices = try await session.query(
                "SELECT device_id FROM devices WHERE app_id = $1 AND user_id = $2 AND active = 1 ORDER BY device_id",
                [.text(appID), .text(userID)]
            ).compactMap { $0.first?.text }.filter { $0 != origin }
            var plans: [SyncPlan] = []
            for device in devices {
                if let pending = try await session.query(
                    "SELECT id, data, trace, due_at FROM timers WHERE app_id = $1 AND user_id = $2 AND kind = 'sync' AND name = $3 AND status = 'pending'",
                    [.text(appID), .text(userID), .text(device)]
                ).first, let id = pending[0].integer, let due = pending[3].integer {
                    let note = trace(
                        "coalesced: cursor \(pending[1].text ?? "") replaced by \(cursor) while waiting to be sent",
                        pending[2].text)
                    _ = try await session.query(
                        "UPDATE timers SET data = $1, trace = $2, updated_at = $3 WHERE id = $4 AND status = 'pending'",
                        [.text(cursor), note.map { .text($0) } ?? .null, .integer(now), .integer(id)])
                    plans.append(
                        SyncPlan(deviceID: device, dueAt: SQLText.date(due), coalesced: true, held: false))
                    continue
                }
                // The pushes of the last hour to this device (being sent or sent), newest first.
                let recent = try await session.query(
                    """
                    SELECT updated_at FROM timers WHERE app_id = $1 AND user_id = $2 AND kind = 'sync' AND name = $3
                      AND status IN ('firing', 'fired') AND updated_at > $4 ORDER BY updated_at DESC LIMIT $5
                    """,
                    [
                        .text(appID), .text(userID), .text(device), .integer(now - 3_600_000),
                        .integer(Int64(hourlyBudget)),
                    ]
                ).compactMap { $0.first?.integer }
                var due = max(now, (recent.first ?? Int64.min / 2) + Int64(debounce * 1000))
                var note: String?
                var held = false
                if recent.count >= hourlyBudget, let oldest = recent.last {
                    due = max(due, oldest + 3_600_000)
                    held = true
                    note = trace(
                        "held: \(hourlyBudget) background pushes to this device in the last hour (the budget); due when the oldest is an hour old",
                        nil)
                }
                _ = try await session.query(
                    """
                    INSERT INTO timers (app_id, user_id, kind, name, step, due_at, status, data, trace, created_at, updated_at)
                    VALUES ($1, $2, 'sync', $3, 'sync', $4, 'pending', $5, $6, $7, $7)
                    """,
                    [
                        .text(appID), .text(userID), .text(device), .integer(due), .text(cursor),
                        note.map { .text($0) } ?? .null, .integer(now),
                    ])
                plans.append(SyncPlan(deviceID: device, dueAt: SQLText.date(due), coalesced: false, held: held))
            }
            return plans
        }
    }
}
