package import Foundation

/// Retention (`outbox.retention`): answered deliveries (with their decision traces), the
/// notifications left without deliveries (with their idempotency keys) and pacing records older
/// than the cutoff are deleted, a few thousand rows per transaction, so the queue never waits
/// long behind the clean-up and the database stays the size of its recent history.
extension HeraldStore {
    /// What one pruning step deleted.
    package struct Pruned: Sendable, Equatable {
        package var deliveries = 0
        package var notifications = 0
        package var userSends = 0
        /// Rows deleted in all.
        package var total: Int { deliveries + notifications + userSends }
        /// Whether some kind deleted `limit` rows: more of it may be left for another step.
        package func reached(_ limit: Int) -> Bool { max(deliveries, notifications, userSends) >= limit }
        package init(deliveries: Int = 0, notifications: Int = 0, userSends: Int = 0) {
            self.deliveries = deliveries
            self.notifications = notifications
            self.userSends = userSends
        }
        package static func += (lhs: inout Pruned, rhs: Pruned) {
            lhs.deliveries += rhs.deliveries
            lhs.notifications += rhs.notifications
            lhs.userSends += rhs.userSends
        }
    }

    /// Deletes up to `limit` rows of each kind older than `cutoff`, in one transaction: answered
    /// deliveries (`sent`, `failed`, `suppressed`, `cancelled`; last written before the cutoff), notifications
    /// created before it that have no delivery left (nor a broadcast still handing out devices),
    /// and pacing records. Deliveries still to be
    /// sent are never touched, whatever their age (`outbox.max_age` ends them first). Returns
    /// what it deleted: call again while it `reached(limit)`. On PostgreSQL one node
    /// prunes at a time (an advisory lock; the others' steps delete nothing).
    package func pruneHistory(before cutoff: Date, limit: Int = 5_000) async throws -> Pruned {
        try await transaction { session in
            if dialect == .postgres {
                let locked = try await session.query("SELECT pg_try_advisory_xact_lock(\(Self.retentionLock))").first?.first
                guard locked == .integer(1) else { return Pruned() }
            }
            let before = Self.milliseconds(cutoff, rounding: .down)
            var pruned = Pruned()
            // Oldest first: ids grow with time, so the scan finds old rows at once.
            pruned.deliveries = try await session.query(
                """
                DELETE FROM deliveries WHERE id IN (
                    SELECT id FROM deliveries WHERE status IN ('sent', 'failed', 'suppressed', 'cancelled') AND updated_at < $1
                    ORDER BY id LIMIT $2)
                RETURNING 1
                """, [.integer(before), .integer(Int64(limit))]
            ).count
            pruned.notifications = try await session.query(
                """
                DELETE FROM notifications WHERE id IN (
                    SELECT n.id FROM notifications n WHERE n.created_at < $1
                    AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.notification_id = n.id)
                    AND NOT EXISTS (SELECT 1 FROM broadcasts b WHERE b.notification_id = n.id)
                    AND NOT EXISTS (SELECT 1 FROM broadcast_pages p WHERE p.notification_id = n.id)
                    LIMIT $2)
                RETURNING 1
                """, [.integer(before), .integer(Int64(limit))]
            ).count
            pruned.userSends = try await session.query(
                """
                DELETE FROM user_sends WHERE (app_id, user_id, notification_id) IN (
                    SELECT app_id, user_id, notification_id FROM user_sends WHERE sent_at < $1 LIMIT $2)
                RETURNING 1
                """, [.integer(before), .integer(Int64(limit))]
            ).count
            return pruned
        }
    }
}
