package import Foundation
package import HeraldCore
import PostgresNIO
import SQLKit
import SQLiteNIO
import Synchronization

/// The outbox's nodes (heartbeats, rescue of a dead node's claims, leaving), its wake-ups
/// (PostgreSQL NOTIFY/LISTEN) and its gauges.
extension NodeRepository {
    /// How long a node may stay silent before its claims are taken back: heartbeats come every
    /// 5 s, so a killed node's deliveries are queued again within 30 s.
    package static let nodeDeadAfter: TimeInterval = 20

    /// Says this node is alive (the outbox loop calls it every few seconds).
    package func heartbeat() async throws {
        let now = nowMilliseconds
        try await exclusive { session in try await touchNode(now: now, session) }
        database.lastHeartbeat.store(now, ordering: .relaxed)
    }

    /// This node's row, with `now` as its last heartbeat.
    func touchNode(now: Int64, _ session: Session) async throws {
        try await session.sql.raw(
            "INSERT INTO nodes (id, started_at, heartbeat_at) VALUES (\(bind: nodeID), \(bind: now), \(bind: now)) ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at"
        ).run()
    }

    /// Takes back the claims of nodes not heard from for `deadAfter` seconds (killed, or
    /// frozen): their deliveries are queued again (at-least-once: those sent but unanswered may
    /// arrive twice) and counted in `resent_after_restart`. Never touches a live node's claims,
    /// so a second process on the same database resends nothing. On PostgreSQL one node at a
    /// time does it (a transaction advisory lock; the others skip this round). Returns how many.
    package func rescueDeadClaims(deadAfter: TimeInterval = NodeRepository.nodeDeadAfter) async throws -> Int {
        try await transaction { session in
            if dialect == .postgres {
                let locked = try await session.query("SELECT pg_try_advisory_xact_lock(\(Self.rescueLock))").first?
                    .first
                guard locked == .integer(1) else { return 0 }
            }
            let now = nowMilliseconds
            let alive = now - Int64(deadAfter * 1000)
            let rows = try await session.query(
                OutboxRepository.requeueSQL, [.integer(now), .integer(alive), .text(nodeID)])
            let pages = try await session.query(BroadcastRepository.rescuePagesSQL, [.integer(alive), .text(nodeID)])
            // Timers the dead node was firing: fired at most once (their outcome is fenced).
            let timers = try await session.query(
                TimerRepository.requeueTimersSQL, [.integer(now), .integer(alive), .text(nodeID)])
            if !timers.isEmpty {
                logger.notice(
                    "Timers of a node that stopped answering are pending again",
                    metadata: ["herald.timers": "\(timers.count)"])
            }
            let rescued = rows.count + Int(pages.reduce(0) { $0 + ($1.first?.integer ?? 0) })
            if !pages.isEmpty { database.noBroadcastsSince.store(0, ordering: .relaxed) }
            if rescued > 0 {
                try await addToCounter("resent_after_restart", rescued, session)
                try await notifyOutbox(session)
            }
            try await session.sql.raw("DELETE FROM nodes WHERE heartbeat_at < \(bind: alive) AND id <> \(bind: nodeID)")
                .run()
            return rescued
        }
    }

    /// Gracefully leaving: this node's row goes (its claims are all answered or handed back).
    package func leave() async throws {
        try await exclusive { session in
            try await session.sql.raw("DELETE FROM nodes WHERE id = \(bind: nodeID)").run()
        }
        database.lastHeartbeat.store(0, ordering: .relaxed)
    }

    /// Puts this node's claimed deliveries back in the queue unsent (a broadcast's: their page).
    package func unclaim(_ claimed: [ClaimedDelivery]) async throws {
        guard !claimed.isEmpty else { return }
        let ids = claimed.filter { $0.broadcast == nil }.map(\.id)
        let pages = Set(claimed.compactMap { $0.broadcast?.page })
        if !pages.isEmpty { database.noBroadcastsSince.store(0, ordering: .relaxed) }
        try await transaction { session in
            try await database.broadcasts.returnPages(pages, session)
            for chunk in ids.chunked(Self.batchSize) {
                try await session.sql.raw(
                    "UPDATE deliveries SET status = 'queued', claimed_by = NULL, updated_at = \(bind: nowMilliseconds) WHERE status = 'sending' AND claimed_by = \(bind: nodeID) AND id IN (\(binds: chunk))"
                ).run()
            }
            try await notifyOutbox(session)
        }
    }

    /// The channel PostgreSQL nodes hear new due deliveries on.
    package static let outboxChannel = "herald_outbox"

    /// Tells the other nodes (PostgreSQL `NOTIFY`, delivered at commit; one per transaction
    /// however many deliveries it queued) that deliveries are due. Nothing on SQLite, where only
    /// this process sends.
    func notifyOutbox(_ session: Session) async throws {
        guard dialect == .postgres else { return }
        try await session.sql.raw("SELECT pg_notify(\(bind: Self.outboxChannel), '')").run()
    }

    /// PostgreSQL: calls `heard` each time a node queues deliveries (`LISTEN` on a connection
    /// held for it), until the calling task is cancelled; after a lost connection it listens
    /// again a second later (the outbox loop polls meanwhile). Returns at once on SQLite.
    package func listenForDueDeliveries(_ heard: @escaping @Sendable () -> Void) async {
        guard case .postgres(let client, _) = backend else { return }
        while !Task.isCancelled {
            do {
                try await client.withConnection { connection in
                    try await connection.listen(on: Self.outboxChannel) { notifications in
                        for try await _ in notifications { heard() }
                    }
                }
            } catch {
                if Task.isCancelled { return }
                logger.warning(
                    "Listening for due deliveries failed; polling until it works again",
                    metadata: [
                        "herald.error": "\((error as? PSQLError)?.summary ?? String(describing: type(of: error)))"
                    ])
                try? await Task.sleep(for: .seconds(1))
            }
        }
    }

    /// Deliveries waiting to be sent (queued and due, or being sent; a due broadcast's devices
    /// not yet answered).
    package func queueDepth() async throws -> Int {
        try await exclusive { session in
            let now: [Session.Value] = [.integer(nowMilliseconds)]
            let rows = try await session.query(OutboxRepository.queueDepthSQL, now).first?.first?.integer ?? 0
            let devices = try await session.query(BroadcastRepository.broadcastDepthSQL, now).first?.first?.integer ?? 0
            return Int(rows + devices)
        }
    }

    /// What an operator watches of the outbox: deliveries due now per app and lane, deliveries
    /// deferred by the policy engine per app, and how long the oldest due delivery has waited
    /// past its time. `appIDs`: the configured apps. Due rows are read as one range of the
    /// outbox index per (status, app, lane), the index's prefix: without the apps a million
    /// deferred rows not yet due were all read (150 ms for each health check and scrape), and
    /// PostgreSQL 15 took `lane IN (…)` as a filter over every row of the app (48 ms for 200,000
    /// deferred; 1 ms as ranges). Deferred deliveries are read from `deferred_totals`, which
    /// triggers keep, not counted.
    package func outboxGauges(appIDs: [String]) async throws -> OutboxGauges {
        let now = nowMilliseconds
        let apps = appIDs.sorted()
        let lanes = apps.flatMap { app in DeliveryLane.allCases.map { AppLane(app: app, lane: $0) } }
        let appBinds = apps.map { Session.Value.text($0) }
        // Counting visits every due row: off the writer's connection.
        return try await reading { session in
            var gauges = OutboxGauges()
            let listed = Set(apps)
            for row in try await session.query(
                "SELECT app_id, lane, SUM(n) FROM (\(BroadcastRepository.broadcastWaitingSQL)) waiting GROUP BY app_id, lane",
                [.integer(now)])
            {
                guard row.count == 3, let app = row[0].text, listed.contains(app),
                    let lane = row[1].integer.flatMap({ DeliveryLane(rawValue: Int($0)) }), let count = row[2].integer,
                    count > 0
                else { continue }
                gauges.due[AppLane(app: app, lane: lane), default: 0] += Int(count)
            }
            guard !apps.isEmpty else { return gauges }
            /// The index range of one (status, app, lane), the app bound as `$(index + 2)`.
            func range(_ status: DeliveryStatus, _ index: Int) -> String {
                "\(OutboxRepository.outboxIndexTerm) AND status = '\(status.rawValue)' AND app_id = $\(index / DeliveryLane.allCases.count + 2) AND lane = \(lanes[index].lane.rawValue)"
            }
            let dueColumns = lanes.indices.map { index in
                [DeliveryStatus.queued, .deferred, .sending].map {
                    "(SELECT COUNT(*) FROM deliveries WHERE \(range($0, index)) AND due_at <= $1)"
                }.joined(separator: " + ")
            }
            let oldestRanges = lanes.indices.map {
                "SELECT MIN(due_at) AS m FROM deliveries WHERE \(range(.queued, $0)) AND due_at <= $1"
            }
            let row =
                try await session.query(
                    """
                    SELECT \(dueColumns.joined(separator: ", ")),
                        (SELECT MIN(m) FROM (\(oldestRanges.joined(separator: " UNION ALL "))) oldest),
                        (SELECT MIN(due_at) FROM broadcasts WHERE due_at <= $1)
                    """, [.integer(now)] + appBinds
                ).first ?? []
            for (index, lane) in lanes.enumerated() where index < row.count {
                if let count = row[index].integer, count > 0 { gauges.due[lane, default: 0] += Int(count) }
            }
            let oldest = row.dropFirst(lanes.count).compactMap(\.integer).min()
            gauges.oldestDueAge = oldest.map { max(0, Double(now - $0) / 1000) } ?? 0
            for row in try await session.query("SELECT app_id, SUM(deferred) FROM deferred_totals GROUP BY app_id") {
                guard row.count == 2, let app = row[0].text, listed.contains(app), let count = row[1].integer, count > 0
                else { continue }
                gauges.deferred[app] = Int(count)
            }
            return gauges
        }
    }

    /// Per app, `deferred_totals` beside a count of the deferred deliveries themselves (rows,
    /// and the entries of pages deferred together), read in one statement (one snapshot): what
    /// the triggers keep against what they stand for. Visits every deferred row: a check for
    /// tests and diagnosis, never for a scrape.
    package func deferredTotalsAgainstRows(appIDs: [String]) async throws -> [String: (totals: Int, rows: Int)] {
        let pages =
            database.deferredPages
            ? " + (SELECT COALESCE(SUM(remaining), 0) FROM broadcast_pages WHERE reason IS NOT NULL AND app_id = $1)"
            : ""
        return try await reading { session in
            var result: [String: (totals: Int, rows: Int)] = [:]
            for app in appIDs {
                let row = try await session.query(
                    """
                    SELECT (SELECT COALESCE(SUM(deferred), 0) FROM deferred_totals WHERE app_id = $1),
                        (SELECT COUNT(*) FROM deliveries WHERE status = 'deferred' AND app_id = $1)\(pages)
                    """, [.text(app)]
                ).first
                result[app] = (Int(row?.first?.integer ?? -1), Int(row?.last?.integer ?? -1))
            }
            return result
        }
    }
}

/// One app's lane of the outbox.
package struct AppLane: Sendable, Hashable {
    package var app: String
    package var lane: DeliveryLane

    package init(app: String, lane: DeliveryLane) {
        self.app = app
        self.lane = lane
    }
}

/// What `outboxGauges` reads: the outbox's depth as an operator watches it.
package struct OutboxGauges: Sendable, Equatable {
    /// Deliveries due now and not answered, per app and lane (a due broadcast's devices not yet
    /// answered included); lanes with none are absent.
    package var due: [AppLane: Int] = [:]
    /// Deliveries held by the policy engine (quiet hours, pacing), per app; apps with none are absent.
    package var deferred: [String: Int] = [:]
    /// How long the oldest due delivery has waited past its due time, in seconds (0 when none waits).
    package var oldestDueAge: TimeInterval = 0

    package init() {}

    package var totalDue: Int { due.values.reduce(0, +) }
    package var totalDeferred: Int { deferred.values.reduce(0, +) }
}

extension Array {
    /// Consecutive slices of at most `size` elements.
    func chunked(_ size: Int) -> [[Element]] {
        stride(from: 0, to: count, by: size).map { Array(self[$0..<Swift.min(count, $0 + size)]) }
    }
}
