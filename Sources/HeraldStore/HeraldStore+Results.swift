package import Foundation
package import HeraldCore
import HeraldPayload
import PostgresNIO
import SQLKit
import SQLiteNIO

/// The outbox's results: answers written back in batches (with their counters and webhooks),
/// and the pacing records the policy engine reads.
extension OutboxRepository {
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
    package func recordResults(
        _ results: [DeliveryResult], webhooks: ActionRepository.ResultWebhooks = ActionRepository.ResultWebhooks()
    ) async throws
        -> Int
    {
        guard !results.isEmpty else { return 0 }
        let broadcastNow = nowMilliseconds
        let broadcast =
            results.contains { $0.broadcast != nil }
            ? BroadcastRepository.broadcastWrites(
                results.filter { $0.broadcast != nil }, now: broadcastNow, dialect: dialect,
                deferredPages: database.deferredPages) : []
        return try await transaction { session in
            let now = nowMilliseconds
            var classes: [DeliveryStatus: [ResultRow]] = [:]
            var dead: [Int64: (reason: String, since: Date?)] = [:]
            for result in results where result.broadcast == nil {
                let (status, reason, due, attempts) = Self.row(for: result)
                classes[status, default: []].append((result, reason, due, attempts))
                if case .tokenDead(let reason, let since) = result.outcome { dead[result.deliveryID] = (reason, since) }
            }
            // What the broadcast pages, the rows and those cancelled in flight add per platform and
            // build is written last, once: those rows are shared by every notification of an hour
            // or of a type and day, and a transaction that takes them takes no other lock after.
            var broadcastPlatforms = PlatformTally()
            var builds = BuildTally()
            var written =
                broadcast.isEmpty
                ? 0
                : try await database.broadcasts.writeBroadcastResults(
                    broadcast, now: broadcastNow, platforms: &broadcastPlatforms, builds: &builds, session)
            var platforms = PlatformTally()
            switch session.raw {
            case .sqlite(let connection):
                written += try await writeResults(
                    classes, dead: dead, now: now, connection, session, platforms: &platforms, builds: &builds)
            case .postgres(let connection):
                written += try await writeResults(
                    classes, dead: dead, now: now, connection, platforms: &platforms, builds: &builds)
            }
            if written < results.count {
                // Rows cancelled while being sent (`HeraldStore.cancel`) took no fenced write.
                written += try await database.notifications.writeCancelledInFlight(
                    results, now: now, builds: &builds, session)
            }
            try await addToNotificationBuilds(builds, session)
            var hours = broadcastPlatforms.hours(at: PlatformHour.hour(ofMilliseconds: broadcastNow))
            hours.merge(platforms.hours(at: PlatformHour.hour(ofMilliseconds: now)), uniquingKeysWith: +)
            try await addToPlatformHours(hours, session)
            if !webhooks.isEmpty, results.contains(where: webhooks.wants) {
                _ = try await database.actions.queueResultWebhooks(
                    results, webhooks, since: min(now, broadcastNow), now: now, session)
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
    package static func row(for result: DeliveryResult) -> (
        status: DeliveryStatus, reason: String?, due: Int64?, attempts: Int
    ) {
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
        _ connection: SQLiteConnection, _ session: Session, platforms: inout PlatformTally, builds: inout BuildTally
    ) async throws -> Int {
        var written = 0
        var finished: [UUID: (sent: Int, failed: Int, deferred: Int, suppressed: Int)] = [:]
        // `applied` results written with `status`, each of `result`'s notification, app and build:
        // its notification's counters, its platform's hour and its build.
        func count(_ status: DeliveryStatus, like result: DeliveryResult, _ applied: Int) {
            let notificationID = result.notificationID
            switch status {
            case .sent: finished[notificationID, default: (0, 0, 0, 0)].sent += applied
            case .failed: finished[notificationID, default: (0, 0, 0, 0)].failed += applied
            case .deferred: finished[notificationID, default: (0, 0, 0, 0)].deferred += applied
            case .suppressed: finished[notificationID, default: (0, 0, 0, 0)].suppressed += applied
            default: break
            }
            platforms.add(app: result.appID, platform: result.platform, status, applied)
            builds.add(
                notification: notificationID, platform: result.platform, version: result.appVersion, status, applied,
                at: now)
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
                            notificationID: row.result.notificationID, claim: row.result.claim, attempts: row.attempts,
                            platform: row.result.platform, appVersion: row.result.appVersion),
                        default: []
                    ]
                    .append(row)
                } else {
                    rows.append(row)
                }
            }
            for (key, group) in plain where group.count <= SQLText.boundListLimit {
                rows += group
                plain[key] = nil
            }
            for (key, group) in plain {
                let ids = group.map(\.result.deliveryID)
                for chunk in ids.chunked(Self.plainResultsPerStatement) {
                    _ = try await connection.query(
                        """
                        UPDATE deliveries SET status = '\(status.rawValue)', reason = NULL, attempts = attempts + ?, claimed_by = NULL, updated_at = ?
                        WHERE id IN \(SQLText.jsonEach("?")) AND claim = ? AND status = 'sending'
                        """,
                        [
                            .integer(key.attempts), .integer(Int(now)), .text(SQLText.jsonArray(chunk)),
                            .integer(Int(key.claim)),
                        ])
                    let applied =
                        try await connection.query("SELECT changes() AS n", []).first?.column("n")?.integer ?? 0
                    written += applied
                    count(status, like: group[0].result, applied)
                }
            }
            let grouped = Dictionary(grouping: rows, by: \.result.notificationID).values.flatMap { $0 }
            for chunk in grouped.chunked(Self.resultRowsPerStatement) {
                // The rows as one bound JSON array of `[id, claim, attempts, reason, due, trace]`:
                // one statement text whatever their number (a multi-row VALUES list of six
                // parameters a row had SQLite parse 6,000 of them for each 1,000 results of a
                // due wave, whose rows carry their deferral's trace).
                var json = JSONWriter(capacity: chunk.count * 48 + 2)
                json.raw("[")
                for (index, row) in chunk.enumerated() {
                    json.raw(index == 0 ? "[" : ",[")
                    json.integer(row.result.deliveryID)
                    json.raw(",")
                    json.integer(row.result.claim)
                    json.raw(",")
                    json.integer(Int64(row.attempts))
                    json.raw(",")
                    if let reason = row.reason { json.string(reason) } else { json.raw("null") }
                    json.raw(",")
                    if let due = row.due { json.integer(due) } else { json.raw("null") }
                    json.raw(",")
                    if let trace = row.result.trace { json.string(trace) } else { json.raw("null") }
                    json.raw("]")
                }
                json.raw("]")
                let sql = """
                    WITH v(id, claim, attempts, reason, due, trace) AS (
                        SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, value ->> 5 FROM json_each(?))
                    UPDATE deliveries SET status = '\(status.rawValue)', reason = v.reason, attempts = deliveries.attempts + v.attempts,
                        due_at = COALESCE(v.due, deliveries.due_at), trace = COALESCE(v.trace, deliveries.trace),
                        claimed_by = NULL, updated_at = ?
                    FROM v WHERE deliveries.id = v.id AND deliveries.claim = v.claim AND deliveries.status = 'sending'
                    """
                let binds: [SQLiteData] = [.text(String(decoding: json.bytes, as: UTF8.self)), .integer(Int(now))]
                let first = chunk[0].result
                let hasDead = status == .failed && chunk.contains(where: { dead[$0.result.deliveryID] != nil })
                guard
                    hasDead
                        || chunk.contains(where: {
                            $0.result.notificationID != first.notificationID || $0.result.platform != first.platform
                                || $0.result.appVersion != first.appVersion
                        })
                else {
                    _ = try await connection.query(sql, binds)
                    let applied =
                        try await connection.query("SELECT changes() AS n", []).first?.column("n")?.integer ?? 0
                    written += applied
                    count(status, like: first, applied)
                    continue
                }
                let resultOf = Dictionary(
                    chunk.map { ($0.result.deliveryID, $0.result) }, uniquingKeysWith: { first, _ in first })
                let returned = try await connection.query(
                    sql + " RETURNING deliveries.id, deliveries.app_id, deliveries.device_id", binds)
                written += returned.count
                for row in returned {
                    let columns = row.columns.map(\.data)
                    guard columns.count == 3, case .integer(let id) = columns[0], let result = resultOf[Int64(id)]
                    else { continue }
                    count(status, like: result, 1)
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
            // `deferred_count` is set only when something was deferred: its trigger (the
            // deferred totals) then runs for those notifications alone, not for every
            // notification of a track wave.
            let deferred =
                chunk.contains { $0.1.deferred != 0 } ? "deferred_count = deferred_count + c.deferred, " : ""
            sql += """
                ) UPDATE notifications SET sent_count = sent_count + c.sent, failed_count = failed_count + c.failed,
                    \(deferred)suppressed_count = suppressed_count + c.suppressed
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
        _ connection: PostgresConnection, platforms: inout PlatformTally, builds: inout BuildTally
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
                var platformNames: [String] = []
                var versions: [String] = []
                for row in chunk {
                    created.append(Self.milliseconds(row.result.createdAt))
                    platformNames.append(row.result.platform)
                    versions.append(row.result.appVersion ?? "")
                    ids.append(row.result.deliveryID)
                    claims.append(row.result.claim)
                    attempts.append(Int64(row.attempts))
                    reasons.append(row.reason ?? "")
                    dues.append(row.due ?? -1)
                    traces.append(row.result.trace ?? "")
                    deadSince.append(
                        dead[row.result.deliveryID].map { Self.milliseconds($0.since ?? clock.now()) } ?? -1)
                }
                var bindings = PostgresBindings(capacity: 11)
                bindings.append(ids)
                bindings.append(claims)
                bindings.append(attempts)
                bindings.append(reasons)
                bindings.append(dues)
                bindings.append(traces)
                bindings.append(deadSince)
                bindings.append(now)
                bindings.append(created)
                bindings.append(platformNames)
                bindings.append(versions)
                let counter =
                    Self.counterColumn[status].map { column in
                        """
                        , counted AS (SELECT notification_id, count(*) AS n FROM upd GROUP BY notification_id),
                        bumped AS (UPDATE notifications n SET \(column) = n.\(column) + counted.n FROM counted WHERE n.id = counted.notification_id RETURNING 1)
                        """
                    } ?? ""
                let sql = """
                    WITH v AS (
                        SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], $5::bigint[], $6::text[], $7::bigint[], $9::bigint[], $10::text[], $11::text[])
                        AS v(id, claim, attempts, reason, due, trace, dead_since, created_at, platform, version)
                    ), upd AS (
                        UPDATE deliveries d SET status = '\(status.rawValue)', reason = NULLIF(v.reason, ''), attempts = d.attempts + v.attempts,
                            due_at = COALESCE(NULLIF(v.due, -1), d.due_at), trace = COALESCE(NULLIF(v.trace, ''), d.trace),
                            claimed_by = NULL, updated_at = $8
                        FROM v WHERE d.id = v.id AND d.created_at = v.created_at AND d.claim = v.claim AND d.status = 'sending'
                        RETURNING d.notification_id, d.app_id, d.device_id, v.reason, v.dead_since, v.platform, v.version
                    ), dead AS (
                        UPDATE devices x SET active = 0, inactive_reason = upd.reason, inactive_since = upd.dead_since, updated_at = $8
                        FROM upd WHERE upd.dead_since >= 0 AND x.app_id = upd.app_id AND x.device_id = upd.device_id
                        RETURNING 1
                    )\(counter)
                    SELECT (SELECT count(*) FROM upd) AS written, (SELECT count(*) FROM dead) AS dead,
                        (SELECT json_agg(json_build_array(app_id, platform, n))::text
                            FROM (SELECT app_id, platform, count(*) AS n FROM upd GROUP BY app_id, platform) p) AS platforms,
                        (SELECT json_agg(json_build_array(notification_id, platform, version, n))::text
                            FROM (SELECT notification_id, platform, version, count(*) AS n FROM upd
                                GROUP BY notification_id, platform, version) b) AS builds
                    """
                let answer = try await Session.query(connection, sql, bindings)
                written += Int(answer.first?.first?.integer ?? 0)
                if let first = answer.first, first.count == 4 {
                    for (app, platform, count) in PlatformTally.pairs(fromJSON: first[2].text) {
                        platforms.add(app: app, platform: platform, status, count)
                    }
                    for (notification, platform, version, count) in BuildTally.rows(fromJSON: first[3].text) {
                        builds.add(
                            notification: notification, platform: platform, version: version, status, count, at: now)
                    }
                }
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

    /// Plain results written together: one notification's, to one platform, under one claim,
    /// after as many attempts.
    struct PlainResults: Hashable {
        var notificationID: UUID
        var claim: Int64
        var attempts: Int
        /// Apart so each statement's count of rows is its build's.
        var platform: String
        var appVersion: String?
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
}
