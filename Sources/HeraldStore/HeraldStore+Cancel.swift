import Foundation
import HeraldCore
import Logging

/// Cancellation by cancel key, and what happens to a delivery that was already
/// being sent when it was cancelled.
///
/// The order a cancel keeps: it is one transaction, so it falls between two accepts (or two
/// claims) in the database's commit order. Everything accepted before it (a send answered 202
/// before the cancel was asked) is covered, whole: a fan-out's rows were written in their
/// accept's transaction, and a broadcast's devices not yet handed out go with its cursor.
/// Nothing accepted after it is touched. A delivery not yet claimed by a dispatcher is never
/// sent; one claimed before the cancel (being sent, for milliseconds) is in flight: if that
/// attempt ends sent or failed, that is what it records; if it would have been tried again
/// (deferred by the policy engine, a provider's retry, its node died), it ends cancelled.
extension NotificationRepository {
    /// What a cancel did.
    package struct Cancellation: Sendable, Hashable {
        /// Deliveries cancelled before anything was sent to their device.
        package var cancelled = 0
        /// Deliveries being sent as the cancel committed: their attempt ends as it ends, and
        /// is never followed by another.
        package var inFlight = 0
        /// Notifications to all devices (`to: all`) with the key, left alone because the cancel
        /// named users (a broadcast is cancelled whole).
        package var broadcastsSkipped = 0
        /// Track steps (timers) with the key that had not fired: they never will.
        package var steps = 0

        package init(cancelled: Int = 0, inFlight: Int = 0, broadcastsSkipped: Int = 0, steps: Int = 0) {
            self.cancelled = cancelled
            self.inFlight = inFlight
            self.broadcastsSkipped = broadcastsSkipped
            self.steps = steps
        }
    }

    /// Why a delivery ended cancelled: before it was claimed, or while it was being sent.
    package static let cancelledReason = "Cancelled"
    package static let cancelledInFlightReason = "CancelledInFlight"

    /// Cancels every delivery of the app's notifications with `cancelKey` that is not yet
    /// answered, for all users or for `userIDs` only, in one durable transaction.
    package func cancel(appID: String, cancelKey: String, userIDs: [String]?) async throws -> Cancellation {
        try await transaction(durable: true) { [self] session in
            try await cancel(appID: appID, cancelKey: cancelKey, userIDs: userIDs, now: nowMilliseconds, session)
        }
    }

    /// The cancel, in `session`'s transaction (a track's restart and removal cancel with it):
    /// the timers with the key that have not fired, then the deliveries.
    func cancel(appID: String, cancelKey: String, userIDs: [String]?, now: Int64, _ session: Session) async throws
        -> Cancellation
    {
        var result = Cancellation()
        var timerBinds: [Session.Value] = [.integer(now), .text(appID), .text(cancelKey)]
        var timerUsers = ""
        // Some users' steps are found by user (a few rows each), never by the key, which every
        // step of a track shares: SQLite is told so (with a million users enrolled, the key's
        // index walked a million entries for one user's Pro upgrade).
        // PostgreSQL is kept off the key's index with an expression it does not cover: with a
        // table not yet analyzed after a wave of enrolments it chose the key (500,000 entries
        // walked, 170-410 ms) over the user (a few rows, under a millisecond).
        var table = "timers"
        var key = "cancel_key = $3"
        if let userIDs {
            timerUsers = " AND user_id IN (" + SQLText.placeholders(userIDs.count, from: 4) + ")"
            timerBinds += userIDs.map { .text($0) }
            if dialect == .sqlite { table = "timers INDEXED BY timers_user" } else { key = "(cancel_key || '') = $3" }
        }
        result.steps = try await session.query(
            """
            UPDATE \(table) SET status = 'cancelled', reason = '\(Self.cancelledReason)', claimed_by = NULL, updated_at = $1
            WHERE app_id = $2 AND \(key) AND status IN ('pending', 'firing')\(timerUsers)
            RETURNING id
            """, timerBinds
        ).count
        let ids = try await session.query(
            "SELECT id FROM notifications WHERE app_id = $1 AND cancel_key = $2 AND cancel_key IS NOT NULL",
            [.text(appID), .text(cancelKey)]
        ).compactMap { $0.first?.text }
        var cancelledBy: [String: Int64] = [:]
        var undeferredBy: [String: Int64] = [:]
        for chunk in ids.chunked(Self.batchSize) {
            let notifications = SQLText.placeholders(chunk.count, from: 4)
            var users = ""
            var binds: [Session.Value] = [.integer(now), .text(""), .text("")] + chunk.map { .text($0) }
            if let userIDs {
                users = " AND user_id IN (" + SQLText.placeholders(userIDs.count, from: binds.count + 1) + ")"
                binds += userIDs.map { .text($0) }
            }
            // Rows not yet claimed, then rows being sent: each status its own statement, so
            // the counters know what each row was.
            for status in [DeliveryStatus.queued, .deferred, .sending] {
                binds[1] = .text(status == .sending ? Self.cancelledInFlightReason : Self.cancelledReason)
                binds[2] = .text(status.rawValue)
                let rows = try await session.query(
                    """
                    UPDATE deliveries SET status = 'cancelled', reason = $2, updated_at = $1
                    WHERE notification_id IN (\(notifications)) AND status = $3 AND \(OutboxRepository.outboxIndexTerm)\(users)
                    RETURNING notification_id
                    """, binds)
                for row in rows {
                    guard let id = row.first?.text else { continue }
                    cancelledBy[id, default: 0] += 1
                    if status == .deferred { undeferredBy[id, default: 0] += 1 }
                }
                if status == .sending { result.inFlight += rows.count } else { result.cancelled += rows.count }
            }
            if let userIDs {
                let pages = try await database.broadcasts.cancelStepPages(of: chunk, userIDs: userIDs, session)
                result.cancelled += Int(pages.cancelled)
                result.inFlight += Int(pages.inFlight)
            } else {
                // Pages handed back and not yet handed out again are never handed out; a page a
                // node holds is marked: its devices' attempts end as they end, none tried again.
                let pages = try await database.broadcasts.cancelPages(of: chunk, session)
                for (id, count) in pages.cancelled {
                    cancelledBy[id, default: 0] += count
                    result.cancelled += Int(count)
                }
                for (id, count) in pages.undeferred { undeferredBy[id, default: 0] += count }
                result.inFlight += Int(pages.inFlight)
            }
            let broadcasts = try await session.query(
                "SELECT notification_id, expected - handed FROM broadcasts WHERE notification_id IN (\(SQLText.placeholders(chunk.count, from: 1)))",
                chunk.map { .text($0) })
            guard !broadcasts.isEmpty else { continue }
            if userIDs != nil {
                result.broadcastsSkipped += broadcasts.count
                continue
            }
            for broadcast in broadcasts {
                guard let id = broadcast[0].text else { continue }
                // The devices after the cursor are never handed out.
                let unsent = broadcast[1].integer ?? 0
                _ = try await session.query("DELETE FROM broadcasts WHERE notification_id = $1", [.text(id)])
                cancelledBy[id, default: 0] += unsent
                result.cancelled += Int(unsent)
            }
        }
        for (id, count) in cancelledBy.sorted(by: { $0.key < $1.key }) where count > 0 {
            _ = try await session.query(
                "UPDATE notifications SET cancelled_count = cancelled_count + $1, deferred_count = deferred_count - $2 WHERE id = $3",
                [.integer(count), .integer(undeferredBy[id] ?? 0), .text(id)])
        }
        if result.cancelled + result.inFlight + result.steps > 0 {
            logger.info(
                "Cancelled by key",
                metadata: [
                    "herald.app": "\(appID)", "herald.cancelled": "\(result.cancelled)",
                    "herald.in_flight": "\(result.inFlight)",
                    "herald.steps": "\(result.steps)", "herald.notifications": "\(ids.count)",
                ])
        }
        return result
    }

    /// Results that found their row cancelled while it was being sent (`cancelledInFlightReason`,
    /// under the same claim): a sent or failed attempt records what happened (the row leaves
    /// the cancelled count); any other (a retry, a deferral) leaves it cancelled, for good.
    /// Runs only when some results of a batch were not written by the fenced writes.
    func writeCancelledInFlight(
        _ results: [DeliveryResult], now: Int64, builds: inout BuildTally, _ session: Session
    ) async throws -> Int {
        var written = 0
        // In the notifications' order, as the other writers of their counters.
        let unfenced = results.filter { $0.broadcast == nil }.sorted {
            ($0.notificationID.uuidString, $0.deliveryID) < ($1.notificationID.uuidString, $1.deliveryID)
        }
        for result in unfenced {
            let (status, reason, _, attempts) = OutboxRepository.row(for: result)
            let final = status == .sent || status == .failed
            let rows = try await session.query(
                """
                UPDATE deliveries SET status = $1, reason = $2, attempts = attempts + $3, trace = COALESCE($4, trace), claimed_by = NULL, updated_at = $5
                WHERE id = $6 AND created_at = $7 AND claim = $8 AND status = 'cancelled' AND reason = '\(Self.cancelledInFlightReason)'
                RETURNING notification_id
                """,
                [
                    .text(final ? status.rawValue : DeliveryStatus.cancelled.rawValue),
                    final ? (reason.map { .text($0) } ?? .null) : .text(Self.cancelledReason),
                    .integer(Int64(attempts)),
                    result.trace.map { .text($0) } ?? .null, .integer(now), .integer(result.deliveryID),
                    .integer(Self.milliseconds(result.createdAt)), .integer(result.claim),
                ])
            guard !rows.isEmpty else { continue }
            written += 1
            guard final, let column = OutboxRepository.counterColumn[status] else { continue }
            _ = try await session.query(
                "UPDATE notifications SET \(column) = \(column) + 1, cancelled_count = cancelled_count - 1 WHERE id = $1",
                [.text(result.notificationID.uuidString)])
            builds.add([result], at: now)
            if case .tokenDead(let reason, let since) = result.outcome {
                try await database.broadcasts.deactivateDevice(
                    appID: result.appID, deviceID: result.deviceID, reason: reason, since: since, now: now, session)
            }
        }
        return written
    }
}
