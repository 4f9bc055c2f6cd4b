package import Foundation
import PostgresNIO
import SQLKit
import SQLiteNIO

/// The outbox: claims, results, node heartbeats and rescue, pacing records, gauges.
extension HeraldStore {
    /// Whether rows are due in the outbox (or, with `broadcasts`, a broadcast or a page handed
    /// back): read on SQLite's reading connection, beside the writer.
    private func hasDueWork(now: Int64, broadcasts: Bool) async throws -> Bool {
        try await reading { session in
            let apps = try await session.query(AppsWithWork.self, [.integer(now)])
            if apps.contains(where: { $0.count == 4 && ($0[2].integer == 1 || $0[3].integer == 1) }) { return true }
            guard broadcasts else { return false }
            return try await !session.query(
                """
                SELECT 1 FROM broadcasts WHERE due_at <= $1
                UNION ALL SELECT 1 FROM broadcast_pages WHERE claimed_by IS NULL AND due_at <= $1 LIMIT 1
                """, [.integer(now)]
            ).isEmpty
        }
    }

    /// Claims up to `limit` due deliveries (`queued` or `deferred` → `sending`) for this node,
    /// with the device data needed to send them; deferred ones whose time has come and new ones
    /// share the claim half and half (either takes what the other leaves).
    /// Each claim is owned (`claimed_by` = `nodeID`) and numbered (`claim`, the fencing token
    /// results must match). Deliveries whose device is gone or inactive fail here, and so do
    /// those whose device now belongs to another user than the one they were planned for.
    package func claimDueDeliveries(limit: Int) async throws -> [ClaimedDelivery] {
        let now = nowMilliseconds
        // Claiming says this node is alive; a heartbeat under a second old is left as it is (a
        // second is nothing next to the 20 s after which a node counts as dead), so claims at
        // hundreds per second do not each write the nodes table.
        let touch = now - lastHeartbeat.load(ordering: .relaxed) >= 1_000
        // The quiet second is measured on the monotonic clock: under a manual clock (tests,
        // `clock: manual`) `now` stands still, and a second measured with it never ends.
        let uptime = Self.uptimeMilliseconds
        let quiet = noBroadcastsSince.load(ordering: .relaxed)
        let lookForBroadcasts = dialect == .postgres || quiet == 0 || uptime - quiet >= 1_000 || uptime < quiet
        let prefetched = lookForBroadcasts ? try await prefetchBroadcastPages(limit: limit, now: now) : [:]
        // SQLite: asked first on the reading connection whether anything is due, so a claim
        // that would find nothing does not wait for the writer (during a due wave, the timer
        // loop's transactions): the dispatcher goes on taking what was claimed for it. (Its
        // heartbeat is written apart, every few seconds.)
        if dialect == .sqlite, prefetched.isEmpty, try await !hasDueWork(now: now, broadcasts: lookForBroadcasts) {
            if lookForBroadcasts {
                _ = noBroadcastsSince.compareExchange(expected: quiet, desired: uptime, ordering: .relaxed)
            }
            return []
        }
        let claimed = try await transaction { session in
            if dialect == .postgres {
                // A claim's commit does not wait for its WAL to reach the disk (~1 ms here): a
                // PostgreSQL crash could forget the last claims, whose rows are then claimed and
                // sent again, as a dead node's are (at least once). Everything else stays durable.
                _ = try await session.query("SET LOCAL synchronous_commit = off")
            }
            if touch { try await touchNode(now: now, session) }
            // Which apps have due work of each status and lane: a loose scan of the outbox index
            // (a few seeks per app), so a claim asks each app for its share instead of taking
            // the oldest rows of whichever app sent the biggest fan-out, and asks nothing where
            // nothing is due.
            var apps: [DeliveryStatus: [DeliveryLane: [String]]] = [:]
            for row in try await session.query(AppsWithWork.self, [.integer(now)]) {
                guard let status = row[0].text.flatMap(DeliveryStatus.init(rawValue:)), let app = row[1].text,
                    serves(app)
                else { continue }
                if row[2].integer == 1 { apps[status, default: [:]][.urgent, default: []].append(app) }
                if row[3].integer == 1 { apps[status, default: [:]][.normal, default: []].append(app) }
            }
            // Urgent deliveries (transactional types, priority 10 asked for) before normal ones.
            // Within a lane, deferred deliveries whose time has come get half of what is left,
            // new ones the rest, and each the share the other leaves: a 09:00 backlog of
            // quiet-hours deferrals never holds back new sends (nor they it).
            var rows: [[Session.Value]] = []
            // A broadcast's page of devices (`HeraldStore+Broadcasts`) shares the normal lane
            // with due rows: half its room when rows are due too.
            var page: [ClaimedDelivery] = []
            for lane in DeliveryLane.allCases {
                if lane == .normal, lookForBroadcasts, limit - rows.count > 0 {
                    let rowsDue = apps.values.contains { !($0[.normal] ?? []).isEmpty }
                    let room = limit - rows.count
                    page = try await claimBroadcastPages(
                        limit: rowsDue ? (room + 1) / 2 : room, now: now, prefetched: prefetched, session)
                    if page.isEmpty, dialect == .sqlite {
                        _ = noBroadcastsSince.compareExchange(expected: quiet, desired: uptime, ordering: .relaxed)
                    }
                }
                let room = limit - rows.count - page.count
                guard room > 0 else { break }
                func due(_ status: DeliveryStatus, _ count: Int) async throws -> [[Session.Value]] {
                    try await fairShare(status, lane: lane, apps: apps[status]?[lane] ?? [], count, now: now, session)
                }
                let deferredShare = (room + 1) / 2
                if dialect == .sqlite {
                    // SQLite marks the rows after reading them: the deferred ones are read once, up
                    // to the whole room, and kept as far as the share and the new ones leave room.
                    let deferred = try await due(.deferred, room)
                    let queued = try await due(.queued, room - min(deferred.count, deferredShare))
                    rows += Array(deferred.prefix(room - queued.count)) + queued
                } else {
                    let deferred = try await due(.deferred, deferredShare)
                    rows += deferred
                    rows += try await due(.queued, room - deferred.count)
                    if deferred.count == deferredShare {
                        rows += try await due(.deferred, limit - rows.count - page.count)
                    }
                }
            }
            // SQLite's rows hold the claim before this one; PostgreSQL's the one just taken.
            let claimOffset: Int64 = dialect == .sqlite ? 1 : 0
            var claimed: [ClaimedDelivery] = []
            claimed.reserveCapacity(rows.count)
            var unsendable: [(ids: [Int64], reason: String)] = [
                ([], "DeviceUnregistered"), ([], "DeviceInactive"), ([], "DeviceReassigned"),
            ]
            var failedByNotification: [String: Int] = [:]
            var undeferredByNotification: [String: Int] = [:]
            for columns in rows {
                // Columns by position, in the SELECT's order.
                guard columns.count == 18, let id = columns[0].integer, let notificationText = columns[1].text
                else { throw StoreError(.corrupt, "deliveries: a row the outbox cannot read") }
                if columns[5].text == DeliveryStatus.deferred.rawValue {
                    undeferredByNotification[notificationText, default: 0] += 1
                }
                let failure: Int?
                if columns[7].text == nil || columns[8].text == nil || columns[9].text == nil {
                    failure = 0
                } else if columns[10].integer == 0 {
                    failure = 1
                } else if let planned = columns[14].text, planned != columns[11].text {
                    failure = 2
                } else {
                    failure = nil
                }
                if let failure {
                    unsendable[failure].ids.append(id)
                    failedByNotification[notificationText, default: 0] += 1
                    continue
                }
                if let delivery = try Self.claimedDelivery(columns, claimOffset: claimOffset) {
                    claimed.append(delivery)
                }
            }
            for (ids, reason) in unsendable where !ids.isEmpty {
                for chunk in ids.chunked(Self.batchSize) {
                    try await session.sql.raw(
                        "UPDATE deliveries SET status = 'failed', reason = \(bind: reason), claimed_by = NULL, updated_at = \(bind: now) WHERE id IN (\(binds: chunk))"
                    ).run()
                }
            }
            for (notificationID, failed) in failedByNotification {
                try await session.sql.raw(
                    "UPDATE notifications SET failed_count = failed_count + \(bind: failed) WHERE id = \(bind: notificationID)"
                ).run()
            }
            for (notificationID, undeferred) in undeferredByNotification {
                try await session.sql.raw(
                    "UPDATE notifications SET deferred_count = deferred_count - \(bind: undeferred) WHERE id = \(bind: notificationID)"
                ).run()
            }
            if dialect == .sqlite {
                for chunk in claimed.map(\.id).chunked(Self.batchSize) {
                    try await session.sql.raw(
                        "UPDATE deliveries SET status = 'sending', claimed_by = \(bind: nodeID), claim = claim + 1, updated_at = \(bind: now) WHERE id IN (\(binds: chunk))"
                    ).run()
                }
            }
            return claimed + page
        }
        if touch { lastHeartbeat.store(now, ordering: .relaxed) }
        return claimed
    }

    /// A sendable delivery from a claim's columns (`claimColumns`); `claimOffset` added to the
    /// row's claim number (SQLite reads the rows before marking them).
    /// nil when the row names no device to send to (its device is gone) or no notification id.
    static func claimedDelivery(_ columns: [Session.Value], claimOffset: Int64) throws -> ClaimedDelivery? {
        guard columns.count == 18, let id = columns[0].integer, let notificationText = columns[1].text,
            let appID = columns[2].text, let deviceID = columns[3].text, let attempts = columns[4].integer,
            let claim = columns[15].integer, let createdAt = columns[16].integer
        else { throw StoreError(.corrupt, "deliveries: a row the outbox cannot read") }
        guard let notificationID = UUID(uuidString: notificationText), let platform = columns[7].text,
            let token = columns[8].text, let environment = columns[9].text
        else { return nil }
        return ClaimedDelivery(
            id: id, notificationID: notificationID, appID: appID, deviceID: deviceID, platform: platform,
            token: token, environment: environment, attempts: Int(attempts), userID: columns[11].text ?? "",
            locale: columns[12].text, timeZone: columns[13].text, trace: columns[6].text, claim: claim + claimOffset,
            createdAt: Date(timeIntervalSince1970: Double(createdAt) / 1000))
    }

    /// Up to `count` due deliveries of one status and lane, shared between `apps`: each gets
    /// an equal part, and what some leave goes to those that had more. SQLite reads rows (they
    /// are marked after the claim's reads), so the second round continues after the first
    /// round's last row; PostgreSQL claims in the statement, so asking again takes new rows.
    private func fairShare(
        _ status: DeliveryStatus, lane: DeliveryLane, apps: [String], _ count: Int, now: Int64, _ session: Session
    ) async throws -> [[Session.Value]] {
        guard count > 0, !apps.isEmpty else { return [] }
        func take(_ app: String, _ limit: Int, after: [Session.Value]? = nil) async throws -> [[Session.Value]] {
            switch dialect {
            case .sqlite:
                var binds: [Session.Value] = [
                    .integer(now), .integer(Int64(limit)), .text(app), .integer(Int64(lane.rawValue)),
                ]
                if let after, let due = after[Self.claimDueColumn].integer, let id = after[0].integer {
                    binds += [.integer(due), .integer(id)]
                    return try await session.query(Self.claimSQL(status, after: true), binds)
                }
                return try await session.query(Self.claimSQL(status, after: false), binds)
            case .postgres:
                let binds: [Session.Value] = [
                    .integer(now), .integer(Int64(limit)), .text(nodeID), .text(app), .integer(Int64(lane.rawValue)),
                ]
                let rows =
                    try await status == .deferred
                    ? session.query(ClaimDeferred.self, binds) : session.query(ClaimQueued.self, binds)
                // An UPDATE returns its rows in no promised order (a join may shuffle them): put
                // them back in claim order, (due_at, id), which a device's sends keep.
                return rows.sorted {
                    let (left, right) = ($0[Self.claimDueColumn].integer ?? 0, $1[Self.claimDueColumn].integer ?? 0)
                    return left != right ? left < right : ($0[0].integer ?? 0) < ($1[0].integer ?? 0)
                }
            }
        }
        guard apps.count > 1 else { return try await take(apps[0], count) }
        let share = max(1, count / apps.count)
        // With more apps than rows to claim, each claim starts at another app (by the clock), so
        // the apps late in the order are not always the ones left out.
        let start = apps.count > count ? Int(now % Int64(apps.count)) : 0
        var byApp: [(app: String, rows: [[Session.Value]])] = []
        var total = 0
        for app in apps[start...] + apps[..<start] where total < count {
            let rows = try await take(app, min(share, count - total))
            total += rows.count
            byApp.append((app, rows))
        }
        // What the apps with less work left over, for those whose share was full.
        for index in byApp.indices where total < count && byApp[index].rows.count == share {
            let more = try await take(
                byApp[index].app, count - total, after: dialect == .sqlite ? byApp[index].rows.last : nil)
            total += more.count
            byApp[index].rows += more
        }
        return byApp.flatMap(\.rows)
    }

    /// The outbox's hot statements, prepared once per PostgreSQL connection.
    enum AppsWithWork: PreparedSQL { static let sql = HeraldStore.appsWithWorkSQL }
    enum ClaimQueued: PreparedSQL { static let sql = HeraldStore.postgresClaimSQL(.queued) }
    enum ClaimDeferred: PreparedSQL { static let sql = HeraldStore.postgresClaimSQL(.deferred) }

    /// (status, app) pairs with deliveries queued or deferred (one index seek per app), and
    /// whether each lane has rows due by $1 (one seek per lane).
    static let appsWithWorkSQL = """
        WITH RECURSIVE apps(status, app_id) AS (
            SELECT 'deferred', (SELECT min(app_id) FROM deliveries WHERE status = 'deferred' AND \(outboxIndexTerm))
            UNION ALL
            SELECT 'queued', (SELECT min(app_id) FROM deliveries WHERE status = 'queued' AND \(outboxIndexTerm))
            UNION ALL
            SELECT apps.status, (SELECT min(d.app_id) FROM deliveries d WHERE d.status = apps.status AND d.\(outboxIndexTerm) AND d.app_id > apps.app_id)
            FROM apps WHERE apps.app_id IS NOT NULL
        )
        SELECT status, app_id,
            CASE WHEN EXISTS (SELECT 1 FROM deliveries d WHERE d.status = apps.status AND d.\(outboxIndexTerm) AND d.app_id = apps.app_id AND d.lane = 0 AND d.due_at <= $1) THEN 1 ELSE 0 END,
            CASE WHEN EXISTS (SELECT 1 FROM deliveries d WHERE d.status = apps.status AND d.\(outboxIndexTerm) AND d.app_id = apps.app_id AND d.lane = 1 AND d.due_at <= $1) THEN 1 ELSE 0 END
        FROM apps WHERE app_id IS NOT NULL
        """

    /// The partial outbox index's condition (migration 5). SQLite uses a partial index only when
    /// the query's WHERE repeats this term verbatim, so every outbox query by status carries it.
    static let outboxIndexTerm = "status IN ('queued', 'deferred', 'sending')"

    /// The columns a claim reads, in the order `claimDueDeliveries` expects them; `status` is
    /// the column that holds the status the row had before the claim.
    static func claimColumns(status: String) -> String {
        """
        d.id, d.notification_id, d.app_id, d.device_id, d.attempts, \(status), d.trace,
        v.platform, v.token, v.environment, v.active, v.user_id, v.locale, v.time_zone, d.user_id, d.claim, d.created_at, d.due_at
        """
    }

    /// The position of `due_at` in `claimColumns` (where a second round continues).
    static let claimDueColumn = 17

    /// Due deliveries of one status, app ($3) and lane ($4), oldest first, with what sending
    /// needs from the device (SQLite); `after`: only those after ($5, $6) = (due_at, id).
    static func claimSQL(_ status: DeliveryStatus, after: Bool) -> String {
        """
        SELECT \(claimColumns(status: "d.status"))
        FROM deliveries d LEFT JOIN devices v ON v.app_id = d.app_id AND v.device_id = d.device_id
        WHERE d.status = '\(status.rawValue)' AND d.\(outboxIndexTerm) AND d.app_id = $3 AND d.lane = $4 AND d.due_at <= $1\(
            after ? " AND (d.due_at > $5 OR (d.due_at = $5 AND d.id > $6))" : "")
        ORDER BY d.due_at, d.id LIMIT $2
        """
    }

    /// The same on PostgreSQL, claimed in the statement: the oldest due rows of app $4 and lane
    /// $5 that no other node holds locked become `sending` for node $3 under a new claim number.
    static func postgresClaimSQL(_ status: DeliveryStatus) -> String {
        """
        WITH due AS (
            SELECT id, created_at, status, app_id, device_id FROM deliveries
            WHERE status = '\(status.rawValue)' AND \(outboxIndexTerm) AND app_id = $4 AND lane = $5 AND due_at <= $1
            ORDER BY due_at, id LIMIT $2
            FOR UPDATE SKIP LOCKED
        )
        UPDATE deliveries d SET status = 'sending', claimed_by = $3, claim = d.claim + 1, updated_at = $1
        FROM due LEFT JOIN devices v ON v.app_id = due.app_id AND v.device_id = due.device_id
        WHERE d.id = due.id AND d.created_at = due.created_at
        RETURNING \(claimColumns(status: "due.status"))
        """
    }

    /// Deliveries a dead node was sending go back to the queue (`requeueStatement`).
    static let requeueSQL = requeueStatement(
        table: "deliveries", claimed: "sending", back: "queued", indexTerm: outboxIndexTerm)

    /// Rows of `table` claimed (`claimed`) by nodes not heard from since $2 (or by no node: written
    /// before owners existed) go back to `back`; never those of $3, the node asking. $1 is now.
    static func requeueStatement(table: String, claimed: String, back: String, indexTerm: String) -> String {
        """
        UPDATE \(table) SET status = '\(back)', claimed_by = NULL, updated_at = $1
        WHERE status = '\(claimed)' AND \(indexTerm)
          AND (claimed_by IS NULL OR (claimed_by <> $3 AND claimed_by NOT IN (SELECT id FROM nodes WHERE heartbeat_at >= $2)))
        RETURNING id
        """
    }
    static let queueDepthSQL = "SELECT COUNT(*) AS n FROM deliveries WHERE \(outboxIndexTerm) AND due_at <= $1"

    /// SQLite's plan for each outbox query by status (tests check that they use the index).
    package func outboxQueryPlans() async throws -> [String: String] {
        try await exclusive { session in
            var plans: [String: String] = [:]
            let queries = [
                ("claim queued", Self.claimSQL(.queued, after: false)),
                ("claim deferred", Self.claimSQL(.deferred, after: false)),
                ("claim queued, second round", Self.claimSQL(.queued, after: true)),
                ("apps with work", Self.appsWithWorkSQL),
                ("requeue", Self.requeueSQL), ("queue depth", Self.queueDepthSQL),
            ]
            for (name, sql) in queries {
                // Sample values for as many parameters as the statement has ($1 … $6).
                let samples: [Session.Value] = [
                    .integer(0), .integer(1), .text(""), .integer(1), .integer(0), .integer(0),
                ]
                let binds = Array(samples.prefix((1...6).last(where: { sql.contains("$\($0)") }) ?? 0))
                let rows = try await session.query("EXPLAIN QUERY PLAN " + sql, binds)
                plans[name] = rows.compactMap { $0.last?.text }.joined(separator: "; ")
            }
            return plans
        }
    }

    /// When each of these users last received policy-governed notifications since `since`, by
    /// user: (notification, time) pairs, oldest first. Pacing and grouping count them.
    package func recentSends(appID: String, userIDs: [String], since: Date) async throws -> [String: [(UUID, Date)]] {
        guard !userIDs.isEmpty else { return [:] }
        // On the reading connection: the dispatcher's batches do not wait for the writer.
        return try await reading { session in
            var result: [String: [(UUID, Date)]] = [:]
            let sinceMilliseconds = Self.milliseconds(since, rounding: .down)
            for chunk in userIDs.chunked(Self.batchSize) {
                for row in try await session.sql.raw(
                    """
                    SELECT user_id, notification_id, sent_at FROM user_sends
                    WHERE app_id = \(bind: appID) AND user_id IN (\(binds: chunk)) AND sent_at > \(bind: sinceMilliseconds)
                    ORDER BY sent_at
                    """
                ).all() {
                    guard let id = UUID(uuidString: try row.decode(column: "notification_id", as: String.self)) else {
                        continue
                    }
                    let at = Date(
                        timeIntervalSince1970: Double(try row.decode(column: "sent_at", as: Int64.self)) / 1000)
                    result[try row.decode(column: "user_id", as: String.self), default: []].append((id, at))
                }
            }
            return result
        }
    }

    /// Writes results in one transaction, one set-based statement per outcome class (a CTE of
    /// VALUES joined to the rows). Every write is fenced: it applies only where the row is still
    /// `sending` under the claim the result belongs to, so a node whose claim was taken back
    /// cannot overwrite what another node did. Dead tokens make their devices inactive with the
    /// provider's timestamp. The failures and deactivations whose app's webhook takes them are
    /// queued as webhook messages in the same transaction. Returns how many results were written.
    @discardableResult
    package func recordResults(_ results: [DeliveryResult], webhooks: ResultWebhooks = ResultWebhooks()) async throws
        -> Int
    {
        guard !results.isEmpty else { return 0 }
        let broadcastNow = nowMilliseconds
        let broadcast =
            results.contains { $0.broadcast != nil }
            ? Self.broadcastWrites(results.filter { $0.broadcast != nil }, now: broadcastNow, dialect: dialect) : []
        return try await transaction { session in
            let now = nowMilliseconds
            var classes: [DeliveryStatus: [ResultRow]] = [:]
            var dead: [Int64: (reason: String, since: Date?)] = [:]
            for result in results where result.broadcast == nil {
                let (status, reason, due, attempts) = Self.row(for: result)
                classes[status, default: []].append((result, reason, due, attempts))
                if case .tokenDead(let reason, let since) = result.outcome { dead[result.deliveryID] = (reason, since) }
            }
            var written = broadcast.isEmpty ? 0 : try await writeBroadcastResults(broadcast, now: broadcastNow, session)
            switch session.raw {
            case .sqlite(let connection):
                written += try await writeResults(classes, dead: dead, now: now, connection, session)
            case .postgres(let connection):
                written += try await writeResults(classes, dead: dead, now: now, connection)
            }
            if written < results.count {
                // Rows cancelled while being sent (`HeraldStore.cancel`) took no fenced write.
                written += try await writeCancelledInFlight(results, now: now, session)
            }
            if !webhooks.isEmpty, results.contains(where: webhooks.wants) {
                _ = try await queueResultWebhooks(results, webhooks, since: min(now, broadcastNow), now: now, session)
            }
            if written < results.count {
                logger.warning(
                    "Results for claims this node no longer holds were not written",
                    metadata: ["herald.results": "\(results.count - written)", "herald.node": "\(nodeID)"])
            }
            return written
        }
    }

    typealias ResultRow = (result: DeliveryResult, reason: String?, due: Int64?, attempts: Int)

    /// What a result writes to its row: the status, the reason, the new due time (a retry's or
    /// a deferral's) and the attempts to add (none for the policy's decisions).
    static func row(for result: DeliveryResult) -> (status: DeliveryStatus, reason: String?, due: Int64?, attempts: Int)
    {
        switch result.outcome {
        case .sent: (.sent, nil, nil, result.attempts)
        case .failed(let reason), .tokenDead(let reason, _): (.failed, reason, nil, result.attempts)
        case .retry(let reason, let dueAt): (.queued, reason, milliseconds(dueAt), result.attempts)
        case .deferred(let reason, let until): (.deferred, reason, milliseconds(until, rounding: .up), 0)
        case .suppressed(let reason): (.suppressed, reason, nil, 0)
        }
    }

    /// SQLite: raw statements with positional binds, one per (class, 1,000 rows), a
    /// notification's rows together. A chunk of one notification (a fan-out) counts its rows
    /// with `changes()`; a chunk of many (single-device sends, each its own notification) or
    /// with dead tokens returns the ids it wrote. The notifications' counters are one statement.
    private func writeResults(
        _ classes: [DeliveryStatus: [ResultRow]], dead: [Int64: (reason: String, since: Date?)], now: Int64,
        _ connection: SQLiteConnection, _ session: Session
    ) async throws -> Int {
        var written = 0
        var finished: [UUID: (sent: Int, failed: Int, deferred: Int, suppressed: Int)] = [:]
        func count(_ status: DeliveryStatus, _ notificationID: UUID, _ applied: Int) {
            switch status {
            case .sent: finished[notificationID, default: (0, 0, 0, 0)].sent += applied
            case .failed: finished[notificationID, default: (0, 0, 0, 0)].failed += applied
            case .deferred: finished[notificationID, default: (0, 0, 0, 0)].deferred += applied
            case .suppressed: finished[notificationID, default: (0, 0, 0, 0)].suppressed += applied
            default: break
            }
        }
        for (status, all) in classes.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            // A fan-out's common case first: results with nothing of their own to write (no
            // reason, due time or trace, not a dead token), many for one notification under one
            // claim, are a list of ids in one bound JSON array (`json_each`): no statement with
            // thousands of values to parse, bind and join, as a due wave's rows are. A few (single
            // sends, each its own notification) share the multi-row statement below: one
            // statement each would hold the writer for hundreds of trips.
            var rows: [ResultRow] = []
            var plain: [PlainResults: [ResultRow]] = [:]
            for row in all {
                if row.reason == nil, row.due == nil, row.result.trace == nil, dead[row.result.deliveryID] == nil {
                    plain[
                        PlainResults(
                            notificationID: row.result.notificationID, claim: row.result.claim, attempts: row.attempts),
                        default: []
                    ]
                    .append(row)
                } else {
                    rows.append(row)
                }
            }
            for (key, group) in plain where group.count <= Self.boundListLimit {
                rows += group
                plain[key] = nil
            }
            for (key, group) in plain {
                let ids = group.map(\.result.deliveryID)
                for chunk in ids.chunked(Self.plainResultsPerStatement) {
                    _ = try await connection.query(
                        """
                        UPDATE deliveries SET status = '\(status.rawValue)', reason = NULL, attempts = attempts + ?, claimed_by = NULL, updated_at = ?
                        WHERE id IN \(Self.jsonEach("?")) AND claim = ? AND status = 'sending'
                        """,
                        [
                            .integer(key.attempts), .integer(Int(now)), .text(Self.jsonArray(chunk)),
                            .integer(Int(key.claim)),
                        ])
                    let applied =
                        try await connection.query("SELECT changes() AS n", []).first?.column("n")?.integer ?? 0
                    written += applied
                    count(status, key.notificationID, applied)
                }
            }
            let grouped = Dictionary(grouping: rows, by: \.result.notificationID).values.flatMap { $0 }
            for chunk in grouped.chunked(Self.resultRowsPerStatement) {
                var sql = "WITH v(id, claim, attempts, reason, due, trace) AS (VALUES "
                sql.reserveCapacity(400 + chunk.count * 20)
                var binds: [SQLiteData] = []
                binds.reserveCapacity(chunk.count * 6 + 1)
                for (index, row) in chunk.enumerated() {
                    sql += index == 0 ? "(?, ?, ?, ?, ?, ?)" : ", (?, ?, ?, ?, ?, ?)"
                    binds.append(.integer(Int(row.result.deliveryID)))
                    binds.append(.integer(Int(row.result.claim)))
                    binds.append(.integer(row.attempts))
                    binds.append(row.reason.map { .text($0) } ?? .null)
                    binds.append(row.due.map { .integer(Int($0)) } ?? .null)
                    binds.append(row.result.trace.map { .text($0) } ?? .null)
                }
                sql += """
                    ) UPDATE deliveries SET status = '\(status.rawValue)', reason = v.reason, attempts = deliveries.attempts + v.attempts,
                        due_at = COALESCE(v.due, deliveries.due_at), trace = COALESCE(v.trace, deliveries.trace),
                        claimed_by = NULL, updated_at = ?
                    FROM v WHERE deliveries.id = v.id AND deliveries.claim = v.claim AND deliveries.status = 'sending'
                    """
                binds.append(.integer(Int(now)))
                let notificationID = chunk[0].result.notificationID
                let hasDead = status == .failed && chunk.contains(where: { dead[$0.result.deliveryID] != nil })
                guard hasDead || chunk.contains(where: { $0.result.notificationID != notificationID }) else {
                    _ = try await connection.query(sql, binds)
                    let applied =
                        try await connection.query("SELECT changes() AS n", []).first?.column("n")?.integer ?? 0
                    written += applied
                    count(status, notificationID, applied)
                    continue
                }
                let notificationOf = Dictionary(
                    chunk.map { ($0.result.deliveryID, $0.result.notificationID) },
                    uniquingKeysWith: { first, _ in first })
                let returned = try await connection.query(
                    sql + " RETURNING deliveries.id, deliveries.app_id, deliveries.device_id", binds)
                written += returned.count
                for row in returned {
                    let columns = row.columns.map(\.data)
                    guard columns.count == 3, case .integer(let id) = columns[0],
                        let notification = notificationOf[Int64(id)]
                    else { continue }
                    count(status, notification, 1)
                    guard case .text(let appID) = columns[1], case .text(let deviceID) = columns[2],
                        let (reason, since) = dead[Int64(id)]
                    else { continue }
                    try await session.sql.raw(
                        "UPDATE devices SET active = 0, inactive_reason = \(bind: reason), inactive_since = \(bind: Self.milliseconds(since ?? clock.now())), updated_at = \(bind: now) WHERE app_id = \(bind: appID) AND device_id = \(bind: deviceID)"
                    ).run()
                }
            }
        }
        for chunk in Array(finished).chunked(Self.resultRowsPerStatement) {
            var sql = "WITH c(id, sent, failed, deferred, suppressed) AS (VALUES "
            var binds: [SQLiteData] = []
            binds.reserveCapacity(chunk.count * 5)
            for (index, (notificationID, counts)) in chunk.enumerated() {
                sql += index == 0 ? "(?, ?, ?, ?, ?)" : ", (?, ?, ?, ?, ?)"
                binds += [
                    .text(notificationID.uuidString), .integer(counts.sent), .integer(counts.failed),
                    .integer(counts.deferred), .integer(counts.suppressed),
                ]
            }
            sql += """
                ) UPDATE notifications SET sent_count = sent_count + c.sent, failed_count = failed_count + c.failed,
                    deferred_count = deferred_count + c.deferred, suppressed_count = suppressed_count + c.suppressed
                FROM c WHERE notifications.id = c.id
                """
            _ = try await connection.query(sql, binds)
        }
        return written
    }

    /// PostgreSQL: one statement per outcome class, whatever the number of rows or
    /// notifications: the results arrive as arrays (`unnest`), the fenced update, the
    /// notifications' counters and the dead tokens' devices are written together, and the
    /// statement answers how many rows it wrote.
    private func writeResults(
        _ classes: [DeliveryStatus: [ResultRow]], dead: [Int64: (reason: String, since: Date?)], now: Int64,
        _ connection: PostgresConnection
    ) async throws -> Int {
        var written = 0
        for (status, rows) in classes.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
            for chunk in rows.chunked(Self.postgresResultRowsPerStatement) {
                var ids: [Int64] = []
                var claims: [Int64] = []
                var attempts: [Int64] = []
                var reasons: [String] = []
                var dues: [Int64] = []
                var traces: [String] = []
                var deadSince: [Int64] = []
                var created: [Int64] = []
                for row in chunk {
                    created.append(Self.milliseconds(row.result.createdAt))
                    ids.append(row.result.deliveryID)
                    claims.append(row.result.claim)
                    attempts.append(Int64(row.attempts))
                    reasons.append(row.reason ?? "")
                    dues.append(row.due ?? -1)
                    traces.append(row.result.trace ?? "")
                    deadSince.append(
                        dead[row.result.deliveryID].map { Self.milliseconds($0.since ?? clock.now()) } ?? -1)
                }
                var bindings = PostgresBindings(capacity: 9)
                bindings.append(ids)
                bindings.append(claims)
                bindings.append(attempts)
                bindings.append(reasons)
                bindings.append(dues)
                bindings.append(traces)
                bindings.append(deadSince)
                bindings.append(now)
                bindings.append(created)
                let counter =
                    Self.counterColumn[status].map { column in
                        """
                        , counted AS (SELECT notification_id, count(*) AS n FROM upd GROUP BY notification_id),
                        bumped AS (UPDATE notifications n SET \(column) = n.\(column) + counted.n FROM counted WHERE n.id = counted.notification_id RETURNING 1)
                        """
                    } ?? ""
                let sql = """
                    WITH v AS (
                        SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], $5::bigint[], $6::text[], $7::bigint[], $9::bigint[])
                        AS v(id, claim, attempts, reason, due, trace, dead_since, created_at)
                    ), upd AS (
                        UPDATE deliveries d SET status = '\(status.rawValue)', reason = NULLIF(v.reason, ''), attempts = d.attempts + v.attempts,
                            due_at = COALESCE(NULLIF(v.due, -1), d.due_at), trace = COALESCE(NULLIF(v.trace, ''), d.trace),
                            claimed_by = NULL, updated_at = $8
                        FROM v WHERE d.id = v.id AND d.created_at = v.created_at AND d.claim = v.claim AND d.status = 'sending'
                        RETURNING d.notification_id, d.app_id, d.device_id, v.reason, v.dead_since
                    ), dead AS (
                        UPDATE devices x SET active = 0, inactive_reason = upd.reason, inactive_since = upd.dead_since, updated_at = $8
                        FROM upd WHERE upd.dead_since >= 0 AND x.app_id = upd.app_id AND x.device_id = upd.device_id
                        RETURNING 1
                    )\(counter)
                    SELECT (SELECT count(*) FROM upd) AS written, (SELECT count(*) FROM dead) AS dead
                    """
                let answer = try await Session.query(connection, sql, bindings)
                written += Int(answer.first?.first?.integer ?? 0)
            }
        }
        return written
    }

    /// The notification counter each final outcome adds to.
    static let counterColumn: [DeliveryStatus: String] = [
        .sent: "sent_count", .failed: "failed_count", .deferred: "deferred_count", .suppressed: "suppressed_count",
        .cancelled: "cancelled_count",
    ]

    /// Result rows per PostgreSQL statement (arrays: no bound-value limit).
    static let postgresResultRowsPerStatement = 10_000

    /// Result rows per statement: 6 bound values each, far below SQLite's 32,766.
    static let resultRowsPerStatement = 1_000
    /// Ids per statement of plain results (one bound JSON array).
    static let plainResultsPerStatement = 10_000

    /// Plain results written together: one notification's, under one claim, after as many attempts.
    struct PlainResults: Hashable {
        var notificationID: UUID
        var claim: Int64
        var attempts: Int
    }

    /// On SQLite, a list longer than this is bound as one JSON array (`jsonEach`): no statement
    /// with thousands of values to encode, parse and bind (a due wave names 5,000 at a time).
    static let boundListLimit = 64

    /// `(…)` for `IN`: the values of the JSON array bound at `placeholder` (SQLite).
    static func jsonEach(_ placeholder: String) -> String { "(SELECT value FROM json_each(\(placeholder)))" }

    /// `[1,2,3]`: ids bound as one JSON array, for SQLite's `json_each`.
    static func jsonArray(_ ids: some Collection<Int64>) -> String {
        var text = "["
        text.reserveCapacity(ids.count * 8 + 2)
        for (index, id) in ids.enumerated() {
            if index > 0 { text += "," }
            text += String(id)
        }
        return text + "]"
    }

    /// `(…)` of the strings of the JSON array bound at `placeholder`, for `IN`.
    func jsonList(_ placeholder: String) -> String {
        dialect == .sqlite ? Self.jsonEach(placeholder) : "(SELECT json_array_elements_text(\(placeholder)::json))"
    }

    /// A JSON array of strings.
    static func jsonArray(strings: some Collection<String>) -> String {
        var json = "["
        for (index, string) in strings.enumerated() {
            if index > 0 { json += "," }
            appendJSON(string, to: &json)
        }
        return json + "]"
    }

    /// The strings of a JSON array (none when `json` is nil or not one).
    static func jsonStrings(_ json: String?) -> [String] {
        guard let json else { return [] }
        return (try? JSONDecoder().decode([String].self, from: Data(json.utf8))) ?? []
    }

    /// Counts policy-governed sends for pacing and grouping (`recentSends`): what each user was
    /// sent, when. Rows older than a day are never read and are deleted here.
    package func recordUserSends(appID: String, sends: [(userID: String, notificationID: UUID)], at date: Date)
        async throws
    {
        guard !sends.isEmpty else { return }
        try await transaction { session in
            let now = Self.milliseconds(date)
            for chunk in sends.chunked(Self.batchSize) {
                var values: [SQLQueryString] = []
                for (userID, notificationID) in chunk {
                    values.append("(\(bind: appID), \(bind: userID), \(bind: notificationID.uuidString), \(bind: now))")
                }
                try await session.sql.raw(
                    "INSERT INTO user_sends (app_id, user_id, notification_id, sent_at) VALUES \(values.joined(separator: ", ")) ON CONFLICT DO NOTHING"
                ).run()
                try await session.sql.raw(
                    "DELETE FROM user_sends WHERE app_id = \(bind: appID) AND user_id IN (\(binds: Array(Set(chunk.map(\.userID))))) AND sent_at < \(bind: now - 86_400_000)"
                ).run()
            }
        }
    }

    /// How long a node may stay silent before its claims are taken back: heartbeats come every
    /// 5 s, so a killed node's deliveries are queued again within 30 s.
    package static let nodeDeadAfter: TimeInterval = 20

    /// Says this node is alive (the outbox loop calls it every few seconds).
    package func heartbeat() async throws {
        let now = nowMilliseconds
        try await exclusive { session in try await touchNode(now: now, session) }
        lastHeartbeat.store(now, ordering: .relaxed)
    }

    /// This node's row, with `now` as its last heartbeat.
    private func touchNode(now: Int64, _ session: Session) async throws {
        try await session.sql.raw(
            "INSERT INTO nodes (id, started_at, heartbeat_at) VALUES (\(bind: nodeID), \(bind: now), \(bind: now)) ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at"
        ).run()
    }

    /// Takes back the claims of nodes not heard from for `deadAfter` seconds (killed, or
    /// frozen): their deliveries are queued again (at-least-once: those sent but unanswered may
    /// arrive twice) and counted in `resent_after_restart`. Never touches a live node's claims,
    /// so a second process on the same database resends nothing. On PostgreSQL one node at a
    /// time does it (a transaction advisory lock; the others skip this round). Returns how many.
    package func rescueDeadClaims(deadAfter: TimeInterval = HeraldStore.nodeDeadAfter) async throws -> Int {
        try await transaction { session in
            if dialect == .postgres {
                let locked = try await session.query("SELECT pg_try_advisory_xact_lock(\(Self.rescueLock))").first?
                    .first
                guard locked == .integer(1) else { return 0 }
            }
            let now = nowMilliseconds
            let alive = now - Int64(deadAfter * 1000)
            let rows = try await session.query(Self.requeueSQL, [.integer(now), .integer(alive), .text(nodeID)])
            let pages = try await session.query(Self.rescuePagesSQL, [.integer(alive), .text(nodeID)])
            // Timers the dead node was firing: fired at most once (their outcome is fenced).
            let timers = try await session.query(
                Self.requeueTimersSQL, [.integer(now), .integer(alive), .text(nodeID)])
            if !timers.isEmpty {
                logger.notice(
                    "Timers of a node that stopped answering are pending again",
                    metadata: ["herald.timers": "\(timers.count)"])
            }
            let rescued = rows.count + Int(pages.reduce(0) { $0 + ($1.first?.integer ?? 0) })
            if !pages.isEmpty { noBroadcastsSince.store(0, ordering: .relaxed) }
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
        lastHeartbeat.store(0, ordering: .relaxed)
    }

    /// Puts this node's claimed deliveries back in the queue unsent (a broadcast's: their page).
    package func unclaim(_ claimed: [ClaimedDelivery]) async throws {
        guard !claimed.isEmpty else { return }
        let ids = claimed.filter { $0.broadcast == nil }.map(\.id)
        let pages = Set(claimed.compactMap { $0.broadcast?.page })
        if !pages.isEmpty { noBroadcastsSince.store(0, ordering: .relaxed) }
        try await transaction { session in
            try await returnPages(pages, session)
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
            let rows = try await session.query(Self.queueDepthSQL, now).first?.first?.integer ?? 0
            let devices = try await session.query(Self.broadcastDepthSQL, now).first?.first?.integer ?? 0
            return Int(rows + devices)
        }
    }

    /// What an operator watches of the outbox: deliveries due now, deliveries deferred by the
    /// policy engine, and how long the oldest due delivery has waited past its time.
    /// `appIDs`: the configured apps. Every figure is read as one range of the outbox index per
    /// (status, app, lane), the index's prefix: without the apps a million deferred rows not yet
    /// due were all read (150 ms for each health check and scrape), and PostgreSQL 15 took
    /// `lane IN (…)` as a filter over every row of the app (48 ms for 200,000 deferred; 1 ms as
    /// ranges). `deferredLimit`: stop counting deferred rows there, per range (the dashboard
    /// shows "100000+"; the metric counts them all).
    package func outboxGauges(appIDs: [String], deferredLimit: Int? = nil) async throws -> (
        due: Int, deferred: Int, oldestDueAge: TimeInterval
    ) {
        let now = nowMilliseconds
        let apps = appIDs.sorted()
        /// The conditions of each range of `status`, the apps bound from `$first` on.
        func ranges(_ status: DeliveryStatus, first: Int) -> [String] {
            apps.indices.flatMap { app in
                DeliveryLane.allCases.map { lane in
                    "\(Self.outboxIndexTerm) AND status = '\(status.rawValue)' AND app_id = $\(app + first) AND lane = \(lane.rawValue)"
                }
            }
        }
        let appBinds = apps.map { Session.Value.text($0) }
        // Counting visits every due row: off the writer's connection.
        return try await reading { session in
            let dueDevices = try await session.query(Self.broadcastDepthSQL, [.integer(now)]).first?.first?.integer ?? 0
            guard !apps.isEmpty else { return (Int(dueDevices), 0, 0) }
            let dueCounts = [DeliveryStatus.queued, .deferred, .sending].flatMap { ranges($0, first: 2) }.map {
                "(SELECT COUNT(*) FROM deliveries WHERE \($0) AND due_at <= $1)"
            }
            let dueRows =
                try await session.query("SELECT \(dueCounts.joined(separator: " + ")) AS n", [.integer(now)] + appBinds)
                .first?.first?.integer ?? 0
            let deferredCounts = ranges(.deferred, first: 1).map {
                "(SELECT COUNT(*) FROM (SELECT 1 FROM deliveries WHERE \($0)\(deferredLimit.map { " LIMIT \($0)" } ?? "")) counted)"
            }
            let deferred =
                try await session.query("SELECT \(deferredCounts.joined(separator: " + ")) AS n", appBinds).first?
                .first?.integer ?? 0
            let oldestRanges = ranges(.queued, first: 2).map {
                "SELECT MIN(due_at) AS m FROM deliveries WHERE \($0) AND due_at <= $1"
            }
            let oldestRow = try await session.query(
                "SELECT MIN(m) AS m FROM (\(oldestRanges.joined(separator: " UNION ALL "))) oldest",
                [.integer(now)] + appBinds
            ).first?.first?.integer
            let oldestBroadcast = try await session.query(
                "SELECT MIN(due_at) AS m FROM broadcasts WHERE due_at <= $1", [.integer(now)]
            ).first?.first?.integer
            let oldest = [oldestRow, oldestBroadcast].compactMap { $0 }.min()
            return (Int(dueRows + dueDevices), Int(deferred), oldest.map { max(0, Double(now - $0) / 1000) } ?? 0)
        }
    }
}

extension Array {
    /// Consecutive slices of at most `size` elements.
    func chunked(_ size: Int) -> [[Element]] {
        stride(from: 0, to: count, by: size).map { Array(self[$0..<Swift.min(count, $0 + size)]) }
    }
}
