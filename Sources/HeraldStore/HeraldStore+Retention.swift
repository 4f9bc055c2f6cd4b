package import Foundation
import HeraldCore
import Synchronization

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
        /// Events, finished track steps and job occurrences past `historyRetention`.
        package var history = 0
        /// Rows deleted in all.
        package var total: Int { deliveries + notifications + userSends + history }
        /// Whether some kind deleted `limit` rows: more of it may be left for another step.
        package func reached(_ limit: Int) -> Bool { max(deliveries, notifications, userSends, history) >= limit }
        package init(deliveries: Int = 0, notifications: Int = 0, userSends: Int = 0, history: Int = 0) {
            self.deliveries = deliveries
            self.notifications = notifications
            self.userSends = userSends
            self.history = history
        }
        package static func += (lhs: inout Pruned, rhs: Pruned) {
            lhs.deliveries += rhs.deliveries
            lhs.notifications += rhs.notifications
            lhs.userSends += rhs.userSends
            lhs.history += rhs.history
        }
    }

    /// How long events (what a step's `unless` reads since its anchor, up to a year back), track
    /// steps that are over (fired, skipped, cancelled, failed) and job occurrences are kept:
    /// 400 days, past the longest `after` a track may have (366 days).
    package static let historyRetention: TimeInterval = 400 * 86_400

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
                let locked = try await session.query("SELECT pg_try_advisory_xact_lock(\(Self.retentionLock))").first?
                    .first
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
            let notifications = try await session.query(
                """
                DELETE FROM notifications WHERE id IN (
                    SELECT n.id FROM notifications n WHERE n.created_at < $1
                    AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.notification_id = n.id)
                    AND NOT EXISTS (SELECT 1 FROM broadcasts b WHERE b.notification_id = n.id)
                    AND NOT EXISTS (SELECT 1 FROM broadcast_pages p WHERE p.notification_id = n.id)
                    LIMIT $2)
                RETURNING id
                """, [.integer(before), .integer(Int64(limit))]
            ).compactMap { $0.first?.text }
            pruned.notifications = notifications.count
            // Their builds' counts go with them (their types' days stay in type_stats and type_builds).
            if !notifications.isEmpty, keepsNotificationBuilds.load(ordering: .relaxed) {
                _ = try await session.query(
                    "DELETE FROM notification_builds WHERE notification_id IN \(outbox.jsonList("$1"))",
                    [.text(SQLText.jsonArray(strings: notifications))])
            }
            let history = Self.milliseconds(clock.now().addingTimeInterval(-Self.historyRetention), rounding: .down)
            for statement in [
                "DELETE FROM events WHERE id IN (SELECT id FROM events WHERE received_at < $1 LIMIT $2) RETURNING 1",
                """
                DELETE FROM timers WHERE id IN (
                    SELECT id FROM timers WHERE status IN ('fired', 'skipped', 'cancelled', 'failed') AND updated_at < $1 ORDER BY id LIMIT $2)
                RETURNING 1
                """,
                """
                DELETE FROM job_occurrences WHERE (app_id, job, user_id, occurrence) IN (
                    SELECT app_id, job, user_id, occurrence FROM job_occurrences WHERE created_at < $1 LIMIT $2)
                RETURNING 1
                """,
            ] {
                pruned.history += try await session.query(statement, [.integer(history), .integer(Int64(limit))]).count
            }
            // Opens and receipts go with their deliveries' history (what they counted stays in
            // type_stats and type_builds).
            pruned.history += try await session.query(
                """
                DELETE FROM opens WHERE (app_id, delivery_id) IN (SELECT app_id, delivery_id FROM opens WHERE received_at < $1 LIMIT $2)
                RETURNING 1
                """, [.integer(before), .integer(Int64(limit))]
            ).count
            pruned.history += try await session.query(
                """
                DELETE FROM receipts WHERE (app_id, delivery_id) IN (SELECT app_id, delivery_id FROM receipts WHERE recorded_at < $1 LIMIT $2)
                RETURNING 1
                """, [.integer(before), .integer(Int64(limit))]
            ).count
            // Live Activities: pushes go with the outbox's history; an ended activity (with its
            // devices) once it ended that long ago.
            pruned.history += try await session.query(
                "DELETE FROM activity_pushes WHERE id IN (SELECT id FROM activity_pushes WHERE created_at < $1 ORDER BY id LIMIT $2) RETURNING 1",
                [.integer(before), .integer(Int64(limit))]
            ).count
            for statement in [
                """
                DELETE FROM activity_devices WHERE (app_id, activity_id) IN (
                    SELECT app_id, activity_id FROM activities WHERE status = 'ended' AND updated_at < $1 LIMIT $2)
                RETURNING 1
                """,
                """
                DELETE FROM activities WHERE (app_id, activity_id) IN (
                    SELECT app_id, activity_id FROM activities WHERE status = 'ended' AND updated_at < $1 LIMIT $2)
                RETURNING 1
                """,
            ] {
                pruned.history += try await session.query(statement, [.integer(before), .integer(Int64(limit))]).count
            }
            pruned.history += try await session.query(
                "DELETE FROM platform_hours WHERE hour < $1 RETURNING 1",
                [.integer(PlatformHour.hour(ofMilliseconds: history))]
            ).count
            // Webhook messages no longer pending go with the outbox's history; commits (the
            // audit) with the events'.
            pruned.history += try await session.query(
                """
                DELETE FROM webhook_messages WHERE id IN (
                    SELECT id FROM webhook_messages WHERE status <> 'pending' AND updated_at < $1 ORDER BY id LIMIT $2)
                RETURNING 1
                """, [.integer(before), .integer(Int64(limit))]
            ).count
            pruned.history += try await session.query(
                "DELETE FROM responses WHERE id IN (SELECT id FROM responses WHERE created_at < $1 LIMIT $2) RETURNING 1",
                [.integer(history), .integer(Int64(limit))]
            ).count
            pruned.history += try await session.query(
                """
                DELETE FROM action_commits WHERE (app_id, delivery_id) IN (
                    SELECT app_id, delivery_id FROM action_commits WHERE created_at < $1 LIMIT $2)
                RETURNING 1
                """, [.integer(history), .integer(Int64(limit))]
            ).count
            pruned.userSends = try await session.query(
                """
                DELETE FROM user_sends WHERE (app_id, user_id, notification_id) IN (
                    SELECT app_id, user_id, notification_id FROM user_sends WHERE sent_at < $1 LIMIT $2)
                RETURNING 1
                """, [.integer(before), .integer(Int64(limit))]
            ).count
            if dialect == .postgres {
                // The deferred totals' rows (one per statement that changed a count) folded into one
                // per app; rows written meanwhile are not in this statement's snapshot and stay.
                _ = try await session.query(
                    """
                    WITH folded AS (DELETE FROM deferred_totals RETURNING app_id, deferred)
                    INSERT INTO deferred_totals (app_id, deferred)
                    SELECT app_id, sum(deferred) FROM folded GROUP BY app_id HAVING sum(deferred) <> 0
                    """)
                // The platforms' recent hours likewise (one row per transaction that counted) into
                // one per (app, platform, hour); an older hour gains a row only from a late receipt.
                _ = try await session.query(
                    """
                    WITH folded AS (DELETE FROM platform_hours WHERE hour >= $1 RETURNING app_id, platform, hour, accepted, failed, received)
                    INSERT INTO platform_hours (app_id, platform, hour, accepted, failed, received)
                    SELECT app_id, platform, hour, sum(accepted), sum(failed), sum(received) FROM folded
                    GROUP BY app_id, platform, hour
                    """, [.integer(PlatformHour.hour(ofMilliseconds: nowMilliseconds) - 48)])
            }
            return pruned
        }
    }
}
