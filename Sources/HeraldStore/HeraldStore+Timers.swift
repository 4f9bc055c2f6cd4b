package import Foundation
package import HeraldCore
import Synchronization

/// Timers: what fires later (a track's step, a silent sync) as a row with a due time. A timer
/// loop takes due rows, decides what each becomes (the server's code, run outside any
/// transaction), and writes that in one transaction (`fireDueTimers`): the notification and its
/// deliveries, or why it was skipped. A cancel that commits first (the timer is `cancelled`)
/// wins: there is nothing left to fire. A timer fires at most once. On PostgreSQL the rows are
/// first claimed (`firing`, `claimed_by` the node) so other nodes take others; a dead node's
/// claims go back to `pending` (`rescueDeadClaims`).
extension TimerRepository {
    /// A due timer taken to fire, with its enrolment's anchor and data.
    package struct DueTimer: Sendable, Hashable {
        package var id: Int64
        package var appID: String
        package var userID: String
        package var kind: String
        package var name: String
        package var step: String
        package var dueAt: Date
        package var cancelKey: String?
        package var trace: String?
        package var anchorAt: Date?
        /// A step's enrolment data; a sync's cursor.
        package var data: String?
    }

    /// What due timers become.
    package enum TimerOutcome: Sendable {
        /// One notification for these timers' users (timers with the same content fire together).
        case send(
            appID: String, notification: UUID, content: Data, lane: DeliveryLane, cancelKey: String?, trace: String?,
            timers: [Int64])
        case skipped(timers: [Int64], reason: String)
        case failed(timers: [Int64], reason: String)
    }

    /// What the timer loop reads while it decides: on a connection of its own on PostgreSQL, on
    /// the timer loop's reading connection on SQLite (`planDueTimers`); never in a transaction.
    package struct TimerReads {
        let store: HeraldStore
        let session: Session

        /// When each of these users last did `name` (users who never did are absent).
        package func lastEvents(appID: String, name: String, userIDs: [String]) async throws -> [String: Date] {
            try await store.timers.lastEvents(appID: appID, name: name, userIDs: userIDs, session)
        }
    }

    /// What one firing transaction did.
    package struct FiredTimers: Sendable {
        /// The due timers taken (fired, skipped or failed), by id.
        package var timers: [Int64: DueTimer] = [:]
        /// What `decide` made of them.
        package var outcomes: [TimerOutcome] = []
        /// Due timers taken.
        package var taken: Int { timers.count }
        package var notifications = 0
        /// Timers that became a notification.
        package var fired = 0
        /// Deliveries claimed for this node's dispatcher as they were written (`directUpTo`).
        package var claimed: [ClaimedDelivery] = []
    }

    /// Fires up to `limit` due timers: takes them in due order, asks `decide` what each
    /// becomes, and writes that in one transaction: the notifications and their deliveries, or
    /// why a timer was skipped. A cancel or an unenrolment is ordered with the write by the
    /// database: one that commits first leaves nothing to fire (the write fires only the timers
    /// still pending, or still claimed by this node), one that comes after finds the notification
    /// the step became.
    ///
    /// On SQLite, the due timers, `decide`'s reads and the devices the steps go to are read on
    /// a reading connection of their own, beside the writer (in WAL mode it neither waits for
    /// the writer nor holds it up): the writer is held only to write. On PostgreSQL the due
    /// timers are claimed in a short transaction of their own (`FOR UPDATE SKIP LOCKED`: nodes
    /// firing at once take different timers), decided and read for on a connection outside any
    /// transaction, then written; a claim `decide` fails on goes back to `pending`, and a node
    /// that dies holding claims has them queued again by the others.
    ///
    /// With `directUpTo > 0`, the deliveries of as many steps as fit in that many devices are
    /// handed to this node as they are written, in pages (`handOutStep`), and returned for its
    /// dispatcher.
    package func fireDueTimers(
        limit: Int, directUpTo: Int = 0, decide: (TimerReads, [DueTimer]) async throws -> [TimerOutcome]
    ) async throws -> FiredTimers {
        guard dialect == .sqlite else {
            let unreleased = database.unreleasedTimerClaims.withLock { claims in
                defer { claims = [] }
                return claims
            }
            if !unreleased.isEmpty { try await handBack(unreleased) }
            guard
                let (timers, last) = try await transaction({ [self] session in
                    try await claimDue(limit: limit, session)
                })
            else { return FiredTimers() }
            do {
                let decided = try await exclusive { [self] session in
                    try await plan(timers, last: last, directUpTo: directUpTo, decide: decide, session)
                }
                return try await transaction { [self] session in
                    try await writeFire(decided, directUpTo: directUpTo, claimed: true, session)
                }
            } catch {
                try? await handBack(timers.map(\.id))
                throw error
            }
        }
        guard let plan = try await planDueTimers(limit: limit, directUpTo: directUpTo, decide: decide) else {
            return FiredTimers()
        }
        return try await writeDueTimers(plan, directUpTo: directUpTo)
    }

    /// What a batch of due timers becomes, read and decided before it is written
    /// (`planDueTimers`, SQLite).
    package struct FirePlan: Sendable {
        /// The timers taken, by id.
        package var timers: [Int64: DueTimer]
        package var outcomes: [TimerOutcome]
        /// The devices each step's notification goes to, read for as many steps as fit in
        /// `directUpTo` devices.
        var devices: [UUID: [[Session.Value]]]
        /// Where the next batch starts: after this timer (its due time and id) in due order.
        package var last: TimerCursor
        /// The devices read for the steps.
        package var devicesRead: Int { devices.values.reduce(0) { $0 + $1.count } }
    }

    /// A place in the due order of timers.
    package struct TimerCursor: Sendable, Hashable {
        var dueAt: Int64
        var id: Int64
    }

    /// SQLite: the first half of `fireDueTimers`, on a reading connection of its own (beside
    /// the writer): up to `limit` due timers after `after` in due order, what `decide` makes of
    /// them, and the devices of as many steps as fit in `directUpTo` devices. The timer loop
    /// reads the next batch while it writes this one (`writeDueTimers`); nil when none is due.
    package func planDueTimers(
        limit: Int, directUpTo: Int, after: TimerCursor? = nil,
        decide: (TimerReads, [DueTimer]) async throws -> [TimerOutcome]
    ) async throws -> FirePlan? {
        precondition(dialect == .sqlite, "PostgreSQL fires due timers in one transaction (fireDueTimers)")
        return try await reading(.timers) { [self] session in
            try await planFire(limit: limit, directUpTo: directUpTo, after: after, decide: decide, session)
        }
    }

    /// SQLite: the second half of `fireDueTimers`, in one transaction: what `plan` decided, for
    /// the timers still pending (a cancel that committed since it was read wins), with the
    /// deliveries of as many steps as fit in `directUpTo` devices handed to this node.
    package func writeDueTimers(_ plan: FirePlan, directUpTo: Int) async throws -> FiredTimers {
        try await transaction { [self] session in
            try await writeFire(plan, directUpTo: directUpTo, claimed: false, session)
        }
    }

    /// Reads the due timers, asks `decide`, and reads the devices of the steps the dispatcher
    /// has room for; nil when none is due.
    private func planFire(
        limit: Int, directUpTo: Int, after: TimerCursor? = nil,
        decide: (TimerReads, [DueTimer]) async throws -> [TimerOutcome], _ session: Session
    ) async throws -> FirePlan? {
        guard let (timers, last) = try await dueTimers(limit: limit, after: after, session) else { return nil }
        return try await plan(timers, last: last, directUpTo: directUpTo, decide: decide, session)
    }

    /// PostgreSQL: up to `limit` due timers, claimed for this node (`firing`) in one statement:
    /// the due rows locked (rows another transaction holds are skipped), marked and returned
    /// with their enrolments. Nil when none is due.
    private func claimDue(limit: Int, _ session: Session) async throws -> (timers: [DueTimer], last: TimerCursor)? {
        try dueTimers(
            try await session.query(
                """
                WITH due AS (
                  SELECT t.id FROM timers t WHERE t.status = 'pending' AND t.\(Self.timerIndexTerm) AND t.due_at <= $1
                  ORDER BY t.due_at, t.id LIMIT $2 FOR UPDATE SKIP LOCKED
                ), claimed AS (
                  UPDATE timers t SET status = 'firing', claimed_by = $3, updated_at = $1 FROM due WHERE t.id = due.id
                  RETURNING t.id, t.app_id, t.user_id, t.kind, t.name, t.step, t.due_at, t.cancel_key, t.trace, t.data
                )
                SELECT c.id, c.app_id, c.user_id, c.kind, c.name, c.step, c.due_at, c.cancel_key, c.trace, e.anchor_at, COALESCE(c.data, e.data)
                FROM claimed c LEFT JOIN enrolments e ON c.kind = 'step' AND e.app_id = c.app_id AND e.user_id = c.user_id AND e.track = c.name
                ORDER BY c.due_at, c.id
                """, [.integer(nowMilliseconds), .integer(Int64(limit)), .text(nodeID)]))
    }

    /// PostgreSQL: this node's claims `ids` go back to `pending` in a transaction of their own;
    /// when the database refuses, they are kept for the next `fireDueTimers` to hand back first.
    private func handBack(_ ids: [Int64]) async throws {
        do {
            try await transaction { [self] session in try await releaseClaims(ids, session) }
        } catch {
            database.unreleasedTimerClaims.withLock { $0 += ids }
            throw error
        }
    }

    /// PostgreSQL: this node's claims among `ids` that nothing fired go back to `pending`.
    private func releaseClaims(_ ids: [Int64], _ session: Session) async throws {
        _ = try await setStatus(
            of: ids, "status = 'pending', claimed_by = NULL", [], dueBy: .max, returning: false, claimed: true,
            session)
    }

    /// SQLite: up to `limit` due timers after `after` in due order; nil when none is due.
    private func dueTimers(limit: Int, after: TimerCursor?, _ session: Session) async throws -> (
        timers: [DueTimer], last: TimerCursor
    )? {
        let now = nowMilliseconds
        var binds: [Session.Value] = [.integer(now), .integer(Int64(limit))]
        var range = ""
        if let after {
            range = " AND t.due_at >= $3 AND (t.due_at > $3 OR t.id > $4)"
            binds += [.integer(after.dueAt), .integer(after.id)]
        }
        return try dueTimers(
            try await session.query(
                """
                SELECT t.id, t.app_id, t.user_id, t.kind, t.name, t.step, t.due_at, t.cancel_key, t.trace, e.anchor_at, COALESCE(t.data, e.data)
                FROM timers t LEFT JOIN enrolments e ON t.kind = 'step' AND e.app_id = t.app_id AND e.user_id = t.user_id AND e.track = t.name
                WHERE t.status = 'pending' AND t.\(Self.timerIndexTerm) AND t.due_at <= $1\(range)
                ORDER BY t.due_at, t.id LIMIT $2
                """, binds))
    }

    /// Due timers from their rows (id, app, user, kind, name, step, due, cancel key, trace,
    /// anchor, data), in order; nil when there are none.
    private func dueTimers(_ rows: [[Session.Value]]) throws -> (timers: [DueTimer], last: TimerCursor)? {
        var timers: [DueTimer] = []
        var last = TimerCursor(dueAt: 0, id: 0)
        for columns in rows {
            guard columns.count == 11, let id = columns[0].integer, let app = columns[1].text,
                let user = columns[2].text,
                let kind = columns[3].text, let name = columns[4].text, let step = columns[5].text,
                let due = columns[6].integer
            else { throw StoreError(.corrupt, "timers: a row the timer loop cannot read") }
            timers.append(
                DueTimer(
                    id: id, appID: app, userID: user, kind: kind, name: name, step: step,
                    dueAt: SQLText.date(due),
                    cancelKey: columns[7].text, trace: columns[8].text,
                    anchorAt: columns[9].integer.map(SQLText.date),
                    data: columns[10].text))
            last = TimerCursor(dueAt: due, id: id)
        }
        guard !timers.isEmpty else { return nil }
        return (timers, last)
    }

    /// What `decide` makes of `timers`, and the devices of as many steps as fit in `directUpTo`.
    private func plan(
        _ timers: [DueTimer], last: TimerCursor, directUpTo: Int,
        decide: (TimerReads, [DueTimer]) async throws -> [TimerOutcome], _ session: Session
    ) async throws -> FirePlan {
        let taken = Dictionary(timers.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        let outcomes = try await decide(TimerReads(store: database, session: session), timers)
        var devices: [UUID: [[Session.Value]]] = [:]
        var room = directUpTo
        for case .send(let appID, let notification, _, _, _, _, let ids) in outcomes where room > 0 {
            let members = ids.compactMap { taken[$0] }
            guard !members.isEmpty, members.allSatisfy({ $0.kind != "sync" }) else { continue }
            let rows = try await database.broadcasts.stepDevices(
                appID: appID, users: Set(members.map(\.userID)).sorted(), session)
            guard rows.count <= room else { continue }
            devices[notification] = rows
            room -= rows.count
        }
        return FirePlan(timers: taken, outcomes: outcomes, devices: devices, last: last)
    }

    /// Writes what a batch of due timers became: only the timers still pending (`claimed`: still
    /// claimed by this node) fire; a cancel that committed since the plan was read wins. Claimed
    /// timers no outcome names go back to `pending`.
    private func writeFire(_ plan: FirePlan, directUpTo: Int, claimed: Bool, _ session: Session) async throws
        -> FiredTimers
    {
        let now = nowMilliseconds
        var result = FiredTimers(timers: plan.timers, outcomes: plan.outcomes)
        var room = directUpTo
        var queued = false
        for outcome in plan.outcomes {
            switch outcome {
            case .send(let appID, let notification, let content, let lane, let cancelKey, let trace, let ids):
                // A step goes to its user's devices; a sync to its device (`name`).
                let fired = try await setStatus(
                    of: ids, "status = 'fired', notification_id = $1, claimed_by = NULL, updated_at = $2",
                    [.text(notification.uuidString), .integer(now)], dueBy: now, returning: true, claimed: claimed,
                    session)
                var users: [String] = []
                var devices: [String] = []
                for id in ids where fired.contains(id) {
                    guard let timer = plan.timers[id] else { continue }
                    if timer.kind == "sync" { devices.append(timer.name) } else { users.append(timer.userID) }
                }
                guard !users.isEmpty || !devices.isEmpty else { continue }
                result.fired += users.count + devices.count
                result.notifications += 1
                // A step's deliveries the dispatcher has room for are handed out in pages, each
                // row written once, by its result.
                if devices.isEmpty, var rows = plan.devices[notification], rows.count <= room {
                    if fired.count < ids.count {
                        let live = Set(users)
                        rows = rows.filter {
                            $0.count == BroadcastRepository.handOutColumnCount && $0[4].text.map(live.contains) == true
                        }
                    }
                    let handed = try await database.broadcasts.handOutStep(
                        appID: appID, notification: notification, content: content, cancelKey: cancelKey, lane: lane,
                        trace: trace, devices: rows,
                        now: now, session)
                    result.claimed += handed
                    room -= handed.count
                    continue
                }
                let (count, direct) = try await database.notifications.writeNotification(
                    appID: appID, id: notification, idempotencyKey: nil, cancelKey: cancelKey, content: content,
                    recipients: devices.isEmpty ? .users(Array(Set(users)).sorted()) : .devices(devices.sorted()),
                    excludeDeviceIDs: [],
                    due: now, lane: lane, now: now, directUpTo: room, trace: trace, session)
                if !direct { queued = true }
                if direct, count > 0 {
                    let rows = try await database.notifications.directClaims(
                        notification: notification, appID: appID, trace: trace, now: now, session)
                    result.claimed += rows
                    room = max(0, room - rows.count)
                }
            case .skipped(let timers, let reason), .failed(let timers, let reason):
                let status: String
                if case .skipped = outcome { status = "skipped" } else { status = "failed" }
                _ = try await setStatus(
                    of: timers, "status = $1, reason = $2, claimed_by = NULL, updated_at = $3",
                    [.text(status), .text(reason), .integer(now)],
                    dueBy: now, returning: false, claimed: claimed, session)
            }
        }
        if claimed {
            // Claims no outcome names (the others were fired, skipped, failed or cancelled).
            var unnamed = Set(plan.timers.keys)
            for outcome in plan.outcomes {
                switch outcome {
                case .send(_, _, _, _, _, _, let ids), .skipped(let ids, _), .failed(let ids, _):
                    unnamed.subtract(ids)
                }
            }
            if !unnamed.isEmpty { try await releaseClaims(unnamed.sorted(), session) }
        }
        if queued { try await database.nodes.notifyOutbox(session) }
        return result
    }

    /// Sets `assignments` (with `binds` as $1…) on the timers `ids` still pending (`claimed`:
    /// still claimed by this node) and due by `dueBy` (one re-planned later since it was read is
    /// not); returns those it set (with `returning`). On SQLite the ids are one bound JSON array
    /// (`json_each`), not thousands of values to parse and bind.
    private func setStatus(
        of ids: [Int64], _ assignments: String, _ binds: [Session.Value], dueBy: Int64, returning: Bool,
        claimed: Bool, _ session: Session
    ) async throws -> Set<Int64> {
        var binds = binds
        var condition = "status = 'pending'"
        if claimed {
            binds.append(.text(nodeID))
            condition = "status = 'firing' AND claimed_by = $\(binds.count)"
        }
        condition += " AND due_at <= \(dueBy)" + (returning ? " RETURNING id" : "")
        var set = Set<Int64>()
        switch dialect {
        case .sqlite:
            for row in try await session.query(
                "UPDATE timers SET \(assignments) WHERE id IN \(SQLText.jsonEach("$\(binds.count + 1)")) AND \(condition)",
                binds + [.text(SQLText.jsonArray(ids))])
            {
                if let id = row.first?.integer { set.insert(id) }
            }
        case .postgres:
            for chunk in ids.chunked(Self.batchSize) {
                for row in try await session.query(
                    "UPDATE timers SET \(assignments) WHERE id IN (\(SQLText.placeholders(chunk.count, from: binds.count + 1))) AND \(condition)",
                    binds + chunk.map { .integer($0) })
                {
                    if let id = row.first?.integer { set.insert(id) }
                }
            }
        }
        return set
    }

    /// Timers a dead node was firing go back to `pending` (`requeueStatement`).
    static let requeueTimersSQL = OutboxRepository.requeueStatement(
        table: "timers", claimed: "firing", back: "pending", indexTerm: timerIndexTerm)

    /// The partial timer index's condition (repeated verbatim for SQLite to use the index).
    static let timerIndexTerm = "status IN ('pending', 'firing')"

    // MARK: Events

    /// When each of these users last did `name` (users who never did are absent), in `session`.
    func lastEvents(appID: String, name: String, userIDs: [String], _ session: Session) async throws -> [String: Date] {
        var last: [String: Date] = [:]
        for chunk in userIDs.chunked(Self.batchSize) {
            for row in try await session.query(
                """
                SELECT user_id, MAX(occurred_at) FROM events
                WHERE app_id = $1 AND name = $2 AND user_id IN (\(SQLText.placeholders(chunk.count, from: 3))) GROUP BY user_id
                """, [.text(appID), .text(name)] + chunk.map { .text($0) })
            {
                if let user = row.first?.text, let at = row.last?.integer { last[user] = SQLText.date(at) }
            }
        }
        return last
    }
}
