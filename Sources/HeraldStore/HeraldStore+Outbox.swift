import Foundation
package import HeraldCore
import PostgresNIO
import SQLKit
import SQLiteNIO
import Synchronization

/// The outbox's claims: what is due, shared fairly between apps and lanes, taken for this node.
extension OutboxRepository {
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

    /// Claims up to `limit` due deliveries (`queued` or `deferred` → `sending`; on PostgreSQL,
    /// deferred rows are moved into pages instead, `HeraldStore+DeferredPages`) for this node,
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
        let touch = now - database.lastHeartbeat.load(ordering: .relaxed) >= 1_000
        // The quiet second is measured on the monotonic clock: under a manual clock (tests,
        // `clock: manual`) `now` stands still, and a second measured with it never ends.
        let uptime = Self.uptimeMilliseconds
        let quiet = database.noBroadcastsSince.load(ordering: .relaxed)
        let deferredDue = database.deferredPageDue.load(ordering: .relaxed)
        let lookForBroadcasts =
            dialect == .postgres || quiet == 0 || uptime - quiet >= 1_000 || uptime < quiet || now >= deferredDue
        let prefetched =
            lookForBroadcasts ? try await database.broadcasts.prefetchBroadcastPages(limit: limit, now: now) : [:]
        // SQLite: asked first on the reading connection whether anything is due, so a claim
        // that would find nothing does not wait for the writer (during a due wave, the timer
        // loop's transactions): the dispatcher goes on taking what was claimed for it. (Its
        // heartbeat is written apart, every few seconds.)
        if dialect == .sqlite, prefetched.isEmpty, try await !hasDueWork(now: now, broadcasts: lookForBroadcasts) {
            if lookForBroadcasts {
                _ = database.noBroadcastsSince.compareExchange(expected: quiet, desired: uptime, ordering: .relaxed)
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
            if touch { try await database.nodes.touchNode(now: now, session) }
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
                    page = try await database.broadcasts.claimBroadcastPages(
                        limit: rowsDue ? (room + 1) / 2 : room, now: now, prefetched: prefetched, session)
                    if page.isEmpty, dialect == .sqlite {
                        _ = database.noBroadcastsSince.compareExchange(
                            expected: quiet, desired: uptime, ordering: .relaxed)
                        // Pages due later than this are looked for after the quiet second.
                        if now >= deferredDue {
                            _ = database.deferredPageDue.compareExchange(
                                expected: deferredDue, desired: .max, ordering: .relaxed)
                        }
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
            // PostgreSQL deleted the deferred rows it can send: they go into pages first.
            let moved =
                dialect == .postgres
                ? try await database.broadcasts.moveIntoPages(
                    rows.filter { Self.sendable($0) && $0[5].text == DeliveryStatus.deferred.rawValue },
                    now: now, session) : [:]
            var notificationIDs = RunMemo<String, UUID?>()
            for columns in rows {
                // Columns by position, in the SELECT's order.
                guard columns.count == Self.claimColumnCount, let id = columns[0].integer,
                    let notificationText = columns[1].text
                else { throw StoreError(.corrupt, "deliveries: a row the outbox cannot read") }
                if columns[5].text == DeliveryStatus.deferred.rawValue {
                    undeferredByNotification[notificationText, default: 0] += 1
                }
                if let failure = Self.unsendable(columns) {
                    unsendable[failure].ids.append(id)
                    failedByNotification[notificationText, default: 0] += 1
                    continue
                }
                if let delivery = moved[id] {
                    claimed.append(delivery)
                } else if let delivery = try Self.claimedDelivery(
                    columns, claimOffset: claimOffset, notifications: &notificationIDs)
                {
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
            // One update per notification, in their order: claims on several nodes lock them in
            // one order.
            for notificationID in Set(failedByNotification.keys).union(undeferredByNotification.keys).sorted() {
                let (failed, undeferred) = (
                    failedByNotification[notificationID] ?? 0, undeferredByNotification[notificationID] ?? 0
                )
                try await session.sql.raw(
                    "UPDATE notifications SET failed_count = failed_count + \(bind: failed), deferred_count = deferred_count - \(bind: undeferred) WHERE id = \(bind: notificationID)"
                ).run()
            }
            if dialect == .sqlite, !claimed.isEmpty {
                // The ids as one bound JSON array: no statement of hundreds of parameters to parse.
                _ = try await session.query(
                    "UPDATE deliveries SET status = 'sending', claimed_by = $1, claim = claim + 1, updated_at = $2 WHERE id IN \(SQLText.jsonEach("$3"))",
                    [.text(nodeID), .integer(now), .text(SQLText.jsonArray(claimed.map(\.id)))])
            }
            return claimed + page
        }
        if touch { database.lastHeartbeat.store(now, ordering: .relaxed) }
        return claimed
    }

    /// Why a claimed row cannot be sent, as an index into the claim's reasons (0 its device is
    /// gone, 1 inactive, 2 another user's now), or nil when it can. PostgreSQL's claim of
    /// deferred rows decides the same in SQL (`postgresClaimDeferredSQL`).
    static func unsendable(_ columns: [Session.Value]) -> Int? {
        if columns[7].text == nil || columns[8].text == nil || columns[9].text == nil { return 0 }
        if columns[10].integer == 0 { return 1 }
        if let planned = columns[14].text, planned != columns[11].text { return 2 }
        return nil
    }

    static func sendable(_ columns: [Session.Value]) -> Bool {
        columns.count == claimColumnCount && unsendable(columns) == nil
    }

    /// A sendable delivery from a claim's columns (`claimColumns`); `claimOffset` added to the
    /// row's claim number (SQLite reads the rows before marking them); `page`: the page a
    /// deferred row was moved into (`moveIntoPages`), under its first claim.
    /// nil when the row names no device to send to (its device is gone) or no notification id.
    /// `notifications`: the ids parsed so far, by their text. Foundation parses a UUID with
    /// `sscanf`, which cost a 09:00 wave's claims about 3% of the writer's thread when each of
    /// its rows was parsed anew; a claim's rows come in runs of one notification.
    static func claimedDelivery(
        _ columns: [Session.Value], claimOffset: Int64, page: Int64? = nil,
        notifications: inout RunMemo<String, UUID?>
    ) throws -> ClaimedDelivery? {
        guard columns.count == claimColumnCount, let id = columns[0].integer, let notificationText = columns[1].text,
            let appID = columns[2].text, let deviceID = columns[3].text, let attempts = columns[4].integer,
            let claim = columns[15].integer, let createdAt = columns[16].integer
        else { throw StoreError(.corrupt, "deliveries: a row the outbox cannot read") }
        guard let notificationID = notifications.value(notificationText, { UUID(uuidString: notificationText) }),
            let platform = columns[7].text,
            let token = columns[8].text, let environment = columns[9].text
        else { return nil }
        let slot = page.map { page in
            BroadcastSlot(
                page: page, lane: Int(columns[18].integer ?? 1), dueAt: columns[17].integer ?? createdAt,
                acceptedAt: createdAt, userID: columns[14].text ?? columns[11].text ?? "", attempts: Int(attempts),
                trace: columns[6].text)
        }
        return ClaimedDelivery(
            id: id, notificationID: notificationID, appID: appID, deviceID: deviceID, platform: platform,
            token: token, environment: environment, attempts: Int(attempts), userID: columns[11].text ?? "",
            locale: columns[12].text, timeZone: columns[13].text, trace: columns[6].text,
            claim: page == nil ? claim + claimOffset : 1,
            createdAt: Date(timeIntervalSince1970: Double(createdAt) / 1000), broadcast: slot,
            appVersion: columns[19].text)
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
                let rows =
                    try await status == .deferred
                    ? session.query(
                        ClaimDeferred.self,
                        [.integer(now), .integer(Int64(limit)), .text(app), .integer(Int64(lane.rawValue))])
                    : session.query(
                        ClaimQueued.self,
                        [
                            .integer(now), .integer(Int64(limit)), .text(nodeID), .text(app),
                            .integer(Int64(lane.rawValue)),
                        ])
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
    enum AppsWithWork: PreparedSQL { static let sql = OutboxRepository.appsWithWorkSQL }
    enum ClaimQueued: PreparedSQL { static let sql = OutboxRepository.postgresClaimSQL(.queued) }
    enum ClaimDeferred: PreparedSQL { static let sql = OutboxRepository.postgresClaimDeferredSQL }

    /// (status, app) pairs with deliveries queued or deferred (one index seek per app), and
    /// whether each lane has rows due by $1 (one seek per lane). The lane checks are scalar
    /// subqueries with `LIMIT 1`, not `EXISTS`: PostgreSQL may run an `EXISTS` as a hashed
    /// subplan that reads every row of the status (205,000 deferred rows, 150–240 ms a claim
    /// during a 09:00 wave), where a `LIMIT 1` subquery stops at the first due row.
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
            COALESCE((SELECT 1 FROM deliveries d WHERE d.status = apps.status AND d.\(outboxIndexTerm) AND d.app_id = apps.app_id AND d.lane = 0 AND d.due_at <= $1 LIMIT 1), 0),
            COALESCE((SELECT 1 FROM deliveries d WHERE d.status = apps.status AND d.\(outboxIndexTerm) AND d.app_id = apps.app_id AND d.lane = 1 AND d.due_at <= $1 LIMIT 1), 0)
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
        v.platform, v.token, v.environment, v.active, v.user_id, v.locale, v.time_zone, d.user_id, d.claim, d.created_at, d.due_at,
        d.lane, v.app_version
        """
    }

    /// How many columns `claimColumns` has.
    static let claimColumnCount = 20

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

    /// PostgreSQL's claim of deferred rows whose time has come: the oldest due rows of app $3 and
    /// lane $4 that no other node holds locked, read with their device and deleted when they can
    /// be sent (`claimDueDeliveries` moves them into pages: their results insert them again).
    /// Deleting a row only marks it, where marking it `sending` wrote it anew with an entry in
    /// each index, and its result wrote it once more: a 09:00 wave of deferred rows then cost
    /// twice a fan-out's writes. The rows locked are deleted where they lie (their partition and
    /// `ctid`: no index lookup per row). Rows whose device cannot be sent to (the same test as the
    /// claim's: gone, inactive, or another user's now) stay, for the claim to fail them.
    static let postgresClaimDeferredSQL = """
        WITH due AS (
            SELECT d.id, d.notification_id, d.app_id, d.device_id, d.attempts, d.status, d.trace,
                v.platform, v.token, v.environment, v.active, v.user_id AS device_user, v.locale, v.time_zone,
                d.user_id, d.claim, d.created_at, d.due_at, d.lane, v.app_version, d.tableoid AS part, d.ctid AS tid
            FROM deliveries d LEFT JOIN devices v ON v.app_id = d.app_id AND v.device_id = d.device_id
            WHERE d.status = 'deferred' AND d.\(outboxIndexTerm) AND d.app_id = $3 AND d.lane = $4 AND d.due_at <= $1
            ORDER BY d.due_at, d.id LIMIT $2
            FOR UPDATE OF d SKIP LOCKED
        ), moved AS (
            DELETE FROM deliveries d USING due
            WHERE d.tableoid = due.part AND d.ctid = due.tid AND d.created_at = due.created_at
              AND due.platform IS NOT NULL AND due.token IS NOT NULL AND due.environment IS NOT NULL AND due.active <> 0
              AND (due.user_id IS NULL OR due.user_id = due.device_user)
        )
        SELECT id, notification_id, app_id, device_id, attempts, status, trace, platform, token, environment, active,
            device_user, locale, time_zone, user_id, claim, created_at, due_at, lane, app_version
        FROM due
        """

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
}
