import Foundation
import HeraldCore
import PostgresNIO

/// A broadcast's answers: each device's delivery row written once, with its result.
extension BroadcastRepository {
    /// A page's results, ready to write: built before the transaction, so the writer is not
    /// held while statements are assembled.
    struct BroadcastWrite: Sendable {
        var page: Int64
        var claim: Int64
        var count: Int
        var notificationID: UUID
        var appID: String
        var statements: [(sql: String, binds: [Session.Value])]
        /// PostgreSQL: the rows as arrays, for one `unnest` insert.
        var arrays: PostgresRows?
        var counts: [DeliveryStatus: Int64]
        var dead: [(appID: String, deviceID: String, reason: String, since: Date?)]
        /// The rows that go back to the queue (a retry) or are deferred: those of a page
        /// cancelled while this node held it (or of its users cancelled) end cancelled instead.
        var unanswered: [(id: Int64, userID: String, deferred: Bool)] = []
        /// What the page's results add per platform, and per build, once written.
        var platforms = PlatformTally()
        var builds = BuildTally()
        /// Deliveries deferred together, kept as pages of their own instead of rows
        /// (`HeraldStore+DeferredPages`).
        var deferred: [DeferredGroup] = []
    }

    /// Groups broadcast results by page and builds each page's insert, with the page's
    /// constants (now, notification, app, acceptance, lane) bound once.
    ///
    /// SQLite takes the rows as JSON arrays bound once (`json_each`): a statement of a few
    /// hundred bytes that SQLite parses once, where a thousand-row VALUES list was 8,000 bound
    /// values and a statement of 13,000 parameters to parse (measured: 19 µs per row). Rows
    /// with neither reason nor trace (a fan-out's sent ones) go in one statement per (status,
    /// attempts, due time), bound once: three values per row for SQLite to read out of the
    /// JSON, not eight (each `->>` parses its element). PostgreSQL takes them as arrays
    /// (`unnest`).
    ///
    /// With `deferredPages`, deliveries deferred to the same time for the same reason, at least
    /// `deferredPageMinimum` of a page's, are kept as a page of their own (`DeferredGroup`)
    /// instead of a row each.
    static func broadcastWrites(
        _ results: [DeliveryResult], now: Int64, dialect: HeraldStore.Dialect, deferredPages: Bool = false
    ) -> [BroadcastWrite] {
        Dictionary(grouping: results, by: { $0.broadcast?.page ?? 0 }).sorted(by: { $0.key < $1.key }).compactMap {
            page, group in
            guard let slot = group.first?.broadcast else { return nil }
            var write = BroadcastWrite(
                page: page, claim: group[0].claim, count: group.count, notificationID: group[0].notificationID,
                appID: group[0].appID, statements: [], counts: [:], dead: [])
            write.platforms.add(group)
            write.builds.add(group, at: now)
            let constants: [Session.Value] = [
                .integer(now), .text(group[0].notificationID.uuidString), .text(group[0].appID),
                .integer(slot.acceptedAt), .integer(Int64(slot.lane)),
            ]
            var shared: [SharedRowsKey: [DeliveryResult]] = [:]
            var full: [DeliveryResult] = []
            var arrays = PostgresRows(constants: constants)
            let rows = group.map { Self.row(for: $0) }
            let paged = deferredPages ? Self.deferredGroups(group, rows: rows, slot: slot) : [:]
            write.deferred = paged.values.sorted { $0.entries[0].id < $1.entries[0].id }
            for (result, (status, reason, due, attempts)) in zip(group, rows) {
                if OutboxRepository.counterColumn[status] != nil { write.counts[status, default: 0] += 1 }
                if status == .deferred, let reason, paged[DeferralKey(due: due ?? slot.dueAt, reason: reason)] != nil {
                    continue
                }
                if status == .queued || status == .deferred {
                    write.unanswered.append((result.deliveryID, result.broadcast?.userID ?? "", status == .deferred))
                }
                if case .tokenDead(let reason, let since) = result.outcome {
                    write.dead.append((result.appID, result.deviceID, reason, since))
                }
                switch dialect {
                case .postgres:
                    arrays.append(result, status: status, reason: reason, attempts: attempts, due: due ?? slot.dueAt)
                case .sqlite:
                    let key = SharedRowsKey(
                        status: status, attempts: attempts, due: due ?? slot.dueAt, reason: reason,
                        trace: result.trace ?? result.broadcast?.trace)
                    shared[key, default: []].append(result)
                }
            }
            if dialect == .postgres {
                write.arrays = arrays
                return write
            }
            for (key, rows) in shared.sorted(by: { $0.value[0].deliveryID < $1.value[0].deliveryID }) {
                // Rows that share their outcome, reason, due time and trace (a zone's users
                // deferred by quiet hours, say) are one statement with those as constants; a
                // reason or trace of a few rows goes with the rows of their own.
                guard (key.reason == nil && key.trace == nil) || rows.count >= Self.sharedRowsMinimum else {
                    full += rows
                    continue
                }
                let json = jsonRows(rows) { _, _ in }
                write.statements.append(
                    (
                        sqliteSharedBroadcastInsertSQL,
                        constants + [
                            .text(key.status.rawValue), .integer(Int64(key.attempts)), .integer(key.due),
                            key.reason.map { .text($0) } ?? .null, key.trace.map { .text($0) } ?? .null, .text(json),
                        ]
                    ))
            }
            if !full.isEmpty {
                let json = jsonRows(full) { result, json in
                    let (status, reason, due, attempts) = Self.row(for: result)
                    json += ",\"" + status.rawValue + "\","
                    if let reason { SQLText.appendJSON(reason, to: &json) } else { json += "null" }
                    json += "," + String(attempts) + "," + String(due ?? slot.dueAt) + ","
                    if let trace = result.trace ?? result.broadcast?.trace {
                        SQLText.appendJSON(trace, to: &json)
                    } else {
                        json += "null"
                    }
                }
                write.statements.append((sqliteBroadcastInsertSQL, constants + [.text(json)]))
            }
            return write
        }
    }

    /// A result's row as a page's insert writes it (`OutboxRepository.row(for:)`): the attempts
    /// with those the row had before it was moved into its page.
    static func row(for result: DeliveryResult) -> (
        status: DeliveryStatus, reason: String?, due: Int64?, attempts: Int
    ) {
        let row = OutboxRepository.row(for: result)
        return (row.status, row.reason, row.due, row.attempts + (result.broadcast?.attempts ?? 0))
    }

    /// A JSON array with one array per result: [id, device, user, then what `more` appends].
    private static func jsonRows(_ results: [DeliveryResult], more: (DeliveryResult, inout String) -> Void) -> String {
        var json = "["
        json.reserveCapacity(results.count * 48)
        for (index, result) in results.enumerated() {
            json += index == 0 ? "[" : ",["
            json += String(result.deliveryID)
            json += ","
            SQLText.appendJSON(result.deviceID, to: &json)
            json += ","
            SQLText.appendJSON(result.broadcast?.userID ?? "", to: &json)
            more(result, &json)
            json += "]"
        }
        return json + "]"
    }

    /// SQLite's insert of a page's rows: $1…$5 the constants, $6 the rows as a JSON array of
    /// [id, device, user, status, reason, attempts, due, trace] (`WHERE true`: SQLite's parser
    /// needs it before an upsert clause after a SELECT).
    static let sqliteBroadcastInsertSQL = """
        INSERT INTO deliveries (notification_id, app_id, created_at, lane, updated_at, id, device_id, user_id, status, reason, attempts, due_at, trace)
        SELECT $2, $3, $4, $5, $1, r.value ->> 0, r.value ->> 1, r.value ->> 2, r.value ->> 3, r.value ->> 4, r.value ->> 5, r.value ->> 6, r.value ->> 7
        FROM json_each($6) r WHERE true
        ON CONFLICT (id) DO NOTHING
        """

    /// SQLite's insert of rows that share all but their ids: $1…$5 the constants, $6 the status,
    /// $7 the attempts, $8 the due time, $9 the reason, $10 the trace, $11 the rows as a JSON
    /// array of [id, device, user].
    static let sqliteSharedBroadcastInsertSQL = """
        INSERT INTO deliveries (notification_id, app_id, created_at, lane, updated_at, status, attempts, due_at, reason, trace, id, device_id, user_id)
        SELECT $2, $3, $4, $5, $1, $6, $7, $8, $9, $10, r.value ->> 0, r.value ->> 1, r.value ->> 2
        FROM json_each($11) r WHERE true
        ON CONFLICT (id) DO NOTHING
        """

    /// What a page's rows written by one statement share.
    struct SharedRowsKey: Hashable {
        var status: DeliveryStatus
        var attempts: Int
        var due: Int64
        var reason: String?
        var trace: String?
    }

    /// Rows with a reason or trace that share it and are written as one statement; fewer go
    /// with the rows of their own (one statement per distinct reason would cost more).
    static let sharedRowsMinimum = 8

    /// PostgreSQL's insert of a page's rows, only while the page's claim is this node's: $1…$5
    /// the constants, then one array per column, then the page, its claim and the node ($14…$16).
    /// Returns how many rows it inserted (the claim is not locked: the page's update fences it again).
    static let postgresBroadcastInsertSQL = """
        WITH written AS (
            INSERT INTO deliveries (notification_id, app_id, created_at, lane, updated_at, id, device_id, user_id, status, reason, attempts, due_at, trace)
            SELECT $2, $3, $4, $5, $1, r.id, r.device_id, r.user_id, r.status, NULLIF(r.reason, ''), r.attempts, r.due_at, NULLIF(r.trace, '')
            FROM unnest($6::bigint[], $7::text[], $8::text[], $9::text[], $10::text[], $11::bigint[], $12::bigint[], $13::text[])
                AS r(id, device_id, user_id, status, reason, attempts, due_at, trace)
            WHERE EXISTS (SELECT 1 FROM broadcast_pages WHERE id = $14 AND claim = $15 AND claimed_by = $16)
            ON CONFLICT (id, created_at) DO NOTHING
            RETURNING 1
        )
        SELECT count(*) FROM written
        """

    /// A page's rows as PostgreSQL arrays (empty text for no reason or trace).
    struct PostgresRows: Sendable {
        var constants: [Session.Value]
        var ids: [Int64] = [], devices: [String] = [], users: [String] = [], statuses: [String] = []
        var reasons: [String] = [], attempts: [Int64] = [], dues: [Int64] = [], traces: [String] = []

        mutating func append(
            _ result: DeliveryResult, status: DeliveryStatus, reason: String?, attempts count: Int, due: Int64
        ) {
            ids.append(result.deliveryID)
            devices.append(result.deviceID)
            users.append(result.broadcast?.userID ?? "")
            statuses.append(status.rawValue)
            reasons.append(reason ?? "")
            attempts.append(Int64(count))
            dues.append(due)
            traces.append(result.trace ?? result.broadcast?.trace ?? "")
        }

        var bindings: PostgresBindings {
            var bindings = PostgresBindings(capacity: 13)
            for constant in constants {
                switch constant {
                case .integer(let value): bindings.append(value)
                case .text(let value): bindings.append(value)
                case .null: bindings.appendNull()
                }
            }
            bindings.append(ids)
            bindings.append(devices)
            bindings.append(users)
            bindings.append(statuses)
            bindings.append(reasons)
            bindings.append(attempts)
            bindings.append(dues)
            bindings.append(traces)
            return bindings
        }
    }

    /// Writes broadcast results (`broadcastWrites`): each page's claim must still be this
    /// node's (else its results are dropped: the page was handed to another), each device's row
    /// is inserted with its outcome, and the page's count of unanswered devices goes down (an
    /// answered page is deleted). Returns how many rows were written.
    ///
    /// The page rows are updated after every insert, so a write holds their locks only for its
    /// last statements: on PostgreSQL writes of one page that overlap insert side by side and
    /// wait for each other only at the end, where taking the page first had the second wait for
    /// the first's whole write. The claim is checked by the insert and fenced again by the
    /// update; a page taken from this node in between (its heartbeat judged stale) fails the
    /// write as a lost race, and the write runs again without it.
    func writeBroadcastResults(
        _ writes: [BroadcastWrite], now: Int64, platforms: inout PlatformTally, builds: inout BuildTally,
        _ session: Session
    ) async throws -> Int {
        var written = 0
        var finished: [UUID: [DeliveryStatus: Int64]] = [:]
        // Each write with whether it inserted rows.
        var inserted: [(write: BroadcastWrite, rows: Bool)] = []
        for write in writes {
            switch session.raw {
            case .postgres(let connection):
                guard var bindings = write.arrays?.bindings else { continue }
                bindings.append(write.page)
                bindings.append(write.claim)
                bindings.append(nodeID)
                let rows = try await Session.query(connection, Self.postgresBroadcastInsertSQL, bindings)
                inserted.append((write, (rows.first?.first?.integer ?? 0) > 0))
            case .sqlite:
                // One writer: the claim cannot change between this check and the update.
                guard
                    try await !session.query(
                        "SELECT 1 FROM broadcast_pages WHERE id = $1 AND claim = $2 AND claimed_by = $3",
                        [.integer(write.page), .integer(write.claim), .text(nodeID)]
                    ).isEmpty
                else { continue }
                for statement in write.statements { _ = try await session.query(statement.sql, statement.binds) }
                inserted.append((write, true))
            }
        }
        for (write, rows) in inserted {
            let left = try await session.query(
                "UPDATE broadcast_pages SET remaining = remaining - $1 WHERE id = $2 AND claim = $3 AND claimed_by = $4 RETURNING remaining, cancelled, cancelled_users",
                [.integer(Int64(write.count)), .integer(write.page), .integer(write.claim), .text(nodeID)])
            guard let remaining = left.first?.first?.integer else {
                // Not this node's page: its results are dropped, unless its rows went in before
                // the page was handed to another.
                guard rows else { continue }
                throw StoreError(
                    .raceLost, "broadcast_pages: page \(write.page) was handed to another node during a write")
            }
            if remaining <= 0 {
                _ = try await session.query("DELETE FROM broadcast_pages WHERE id = $1", [.integer(write.page)])
            }
            var counts = write.counts
            // The page was cancelled while this node held it (or some of its users were): what
            // would be tried again ends.
            var ending = write.unanswered
            let cancelled = left.first?[1].integer == 1
            let users = cancelled ? [] : Set(SQLText.jsonStrings(left.first?[2].text))
            if !cancelled {
                ending = users.isEmpty ? [] : ending.filter { users.contains($0.userID) }
            }
            if !write.deferred.isEmpty {
                let ended = try await writeDeferredPages(
                    write.deferred, notification: write.notificationID.uuidString, app: write.appID,
                    cancelled: cancelled, users: users, now: now, session)
                counts[.cancelled, default: 0] += ended
                counts[.deferred, default: 0] -= ended
            }
            if !ending.isEmpty {
                for chunk in ending.chunked(Self.batchSize) {
                    let cancelled = try await session.query(
                        """
                        UPDATE deliveries SET status = 'cancelled', reason = '\(NotificationRepository.cancelledInFlightReason)'
                        WHERE notification_id = $1 AND id IN (\(SQLText.placeholders(chunk.count, from: 2))) AND \(OutboxRepository.outboxIndexTerm)
                        RETURNING status
                        """, [.text(write.notificationID.uuidString)] + chunk.map { .integer($0.id) })
                    counts[.cancelled, default: 0] += Int64(cancelled.count)
                }
                counts[.deferred, default: 0] -= Int64(ending.filter(\.deferred).count)
            }
            finished[write.notificationID, default: [:]].merge(counts, uniquingKeysWith: +)
            platforms.merge(write.platforms)
            builds.merge(write.builds)
            for dead in write.dead {
                try await deactivateDevice(
                    appID: dead.appID, deviceID: dead.deviceID, reason: dead.reason, since: dead.since, now: now,
                    session)
            }
            written += write.count
        }
        // In the notifications' order, as every other writer of their counters: two nodes writing
        // pages of the same broadcasts lock them in one order (a dictionary's differs by process).
        for (notification, counts) in finished.sorted(by: { $0.key.uuidString < $1.key.uuidString }) {
            let sets = counts.sorted { $0.key.rawValue < $1.key.rawValue }.compactMap { status, count in
                OutboxRepository.counterColumn[status].map { "\($0) = \($0) + \(count)" }
            }
            guard !sets.isEmpty else { continue }
            _ = try await session.query(
                "UPDATE notifications SET \(sets.joined(separator: ", ")) WHERE id = $1",
                [.text(notification.uuidString)])
        }
        return written
    }

    /// A dead token's device becomes inactive, with the provider's timestamp (else now).
    func deactivateDevice(appID: String, deviceID: String, reason: String, since: Date?, now: Int64, _ session: Session)
        async throws
    {
        _ = try await session.query(
            "UPDATE devices SET active = 0, inactive_reason = $1, inactive_since = $2, updated_at = $3 WHERE app_id = $4 AND device_id = $5",
            [
                .text(reason), .integer(Self.milliseconds(since ?? clock.now())), .integer(now), .text(appID),
                .text(deviceID),
            ])
    }

    /// Gives pages back unsent (their deliveries' results will never come from this node).
    func returnPages(_ pages: Set<Int64>, _ session: Session) async throws {
        guard !pages.isEmpty else { return }
        for page in pages.sorted() {
            _ = try await session.query(
                "UPDATE broadcast_pages SET claimed_by = NULL WHERE id = $1 AND claimed_by = $2",
                [.integer(page), .text(nodeID)])
        }
    }

    /// Pages of nodes not heard from since $1 go back to be handed out again (never those of
    /// $2, the node asking); returns their unanswered devices.
    static let rescuePagesSQL = """
        UPDATE broadcast_pages SET claimed_by = NULL
        WHERE claimed_by IS NOT NULL AND claimed_by <> $2 AND claimed_by NOT IN (SELECT id FROM nodes WHERE heartbeat_at >= $1)
        RETURNING remaining
        """

    /// Devices of due broadcasts not yet answered, per app and lane (`app_id`, `lane`, `n`): those
    /// after the cursors and those of pages due (a page deferred together waits for its time,
    /// counted deferred until then). `$1`: now.
    static let broadcastWaitingSQL = """
        SELECT app_id, lane, expected - handed AS n FROM broadcasts WHERE due_at <= $1
        UNION ALL SELECT app_id, lane, remaining AS n FROM broadcast_pages WHERE due_at <= $1
        """

    /// All devices of due broadcasts not yet answered (`broadcastWaitingSQL` summed).
    static let broadcastDepthSQL = "SELECT COALESCE(SUM(n), 0) FROM (\(broadcastWaitingSQL)) waiting"
}
