package import Foundation

extension OutboxRepository {
    /// Makes the queued deliveries of `apps` held back for a paused provider (reason
    /// `ProviderPaused`, due within `window` seconds) due now: after a restart no pause is known,
    /// so the first of them probe the provider at once instead of waiting out the stored pause.
    /// Reads one range of the outbox index per app and lane. Returns how many were moved.
    @discardableResult
    package func releasePausedDeliveries(apps: [String], reason: String, window: TimeInterval) async throws -> Int {
        let now = nowMilliseconds
        let until = now + Int64(window * 1000) + 1
        var moved = 0
        for app in apps {
            for lane in DeliveryLane.allCases {
                moved += try await transaction { session in
                    try await session.query(
                        """
                        UPDATE deliveries SET due_at = $1 WHERE id IN (
                            SELECT id FROM deliveries WHERE status = 'queued' AND app_id = $2 AND lane = $3 AND due_at > $1 AND due_at <= $4
                            AND reason = $5)
                        RETURNING id
                        """,
                        [.integer(now), .text(app), .integer(Int64(lane.rawValue)), .integer(until), .text(reason)]
                    ).count
                }
            }
        }
        return moved
    }
}
