package import Foundation

/// Timers: what fires later (a track's step, a silent sync) as a row with a due time. A timer
/// loop takes due rows, decides what each becomes, and writes that, all in one transaction
/// (`fireDueTimers`): the notification and its deliveries, or why it was skipped. A cancel that
/// commits first (the timer is `cancelled`) wins: there is nothing left to take. A timer fires
/// at most once. (`firing`, a claim between two transactions, is what stores written before
/// session 12 may hold: a dead node's such claims go back to `pending`, `rescueDeadClaims`.)
extension HeraldStore {
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
        case send(appID: String, notification: UUID, content: Data, lane: DeliveryLane, cancelKey: String?, trace: String?, timers: [Int64])
        case skipped(timers: [Int64], reason: String)
        case failed(timers: [Int64], reason: String)
    }

    /// What the timer loop reads while it decides, inside the firing transaction.
    package struct TimerReads {
        let store: HeraldStore
        let session: Session

        /// When each of these users last did `name` (users who never did are absent).
        package func lastEvents(appID: String, name: String, userIDs: [String]) async throws -> [String: Date] {
            try await store.lastEvents(appID: appID, name: name, userIDs: userIDs, session)
        }
    }

    /// What one firing transaction did.
    package struct FiredTimers: Sendable {
        /// Due timers taken (fired, skipped or failed).
        package var taken = 0
        package var notifications = 0
        /// Timers that became a notification.
        package var fired = 0
        /// Deliveries claimed for this node's dispatcher as they were written (`directUpTo`).
        package var claimed: [ClaimedDelivery] = []
    }

    /// Fires up to `limit` due timers in one transaction: takes them in due order (on
    /// PostgreSQL locked, skipping those another node is firing), asks `decide` what each
    /// becomes, and writes that: the notifications and their deliveries, or why a timer was
    /// skipped. A cancel or an unenrolment is ordered with it by the database (SQLite's one
    /// writer; PostgreSQL's row locks, the cancel's timers first): one that commits first leaves
    /// nothing to take, one that comes after finds the notification the step became. A node
    /// that dies mid-way leaves its timers pending (nothing is committed).
    ///
    /// With `directUpTo > 0`, the deliveries of notifications to at most that many users or
    /// devices are claimed for this node as they are written (as a send's accept does,
    /// `acceptNotification`), up to that many in all, and returned for its dispatcher.
    package func fireDueTimers(
        limit: Int, directUpTo: Int = 0, decide: (TimerReads, [DueTimer]) async throws -> [TimerOutcome]
    ) async throws -> FiredTimers {
        try await transaction { [self] session in
            let now = nowMilliseconds
            let lock = dialect == .postgres ? " FOR UPDATE OF t SKIP LOCKED" : ""
            var timers: [DueTimer] = []
            for columns in try await session.query(
                """
                SELECT t.id, t.app_id, t.user_id, t.kind, t.name, t.step, t.due_at, t.cancel_key, t.trace, e.anchor_at, COALESCE(t.data, e.data)
                FROM timers t LEFT JOIN enrolments e ON t.kind = 'step' AND e.app_id = t.app_id AND e.user_id = t.user_id AND e.track = t.name
                WHERE t.status = 'pending' AND t.\(Self.timerIndexTerm) AND t.due_at <= $1
                ORDER BY t.due_at, t.id LIMIT $2\(lock)
                """, [.integer(now), .integer(Int64(limit))])
            {
                guard columns.count == 11, let id = columns[0].integer, let app = columns[1].text, let user = columns[2].text,
                    let kind = columns[3].text, let name = columns[4].text, let step = columns[5].text, let due = columns[6].integer
                else { throw StoreError(.corrupt, "timers: a row the timer loop cannot read") }
                timers.append(
                    DueTimer(
                        id: id, appID: app, userID: user, kind: kind, name: name, step: step, dueAt: Self.date(due),
                        cancelKey: columns[7].text, trace: columns[8].text, anchorAt: columns[9].integer.map(Self.date), data: columns[10].text))
            }
            var result = FiredTimers(taken: timers.count)
            guard !timers.isEmpty else { return result }
            let taken = Dictionary(timers.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
            let outcomes = try await decide(TimerReads(store: self, session: session), timers)
            var room = directUpTo
            var queued = false
            for outcome in outcomes {
                switch outcome {
                case .send(let appID, let notification, let content, let lane, let cancelKey, let trace, let ids):
                    // A step goes to its user's devices; a sync to its device (`name`). The rows
                    // are this transaction's (SQLite's one writer; locked on PostgreSQL): all of
                    // them fire, and what they were is known from the read.
                    var users: [String] = []
                    var devices: [String] = []
                    for id in ids {
                        guard let timer = taken[id] else { continue }
                        if timer.kind == "sync" { devices.append(timer.name) } else { users.append(timer.userID) }
                    }
                    guard !users.isEmpty || !devices.isEmpty else { continue }
                    try await setStatus(
                        of: ids, "status = 'fired', notification_id = $1, claimed_by = NULL, updated_at = $2",
                        [.text(notification.uuidString), .integer(now)], session)
                    result.fired += users.count + devices.count
                    result.notifications += 1
                    let (count, direct) = try await writeNotification(
                        appID: appID, id: notification, idempotencyKey: nil, cancelKey: cancelKey, content: content,
                        recipients: devices.isEmpty ? .users(Array(Set(users)).sorted()) : .devices(devices.sorted()), excludeDeviceIDs: [],
                        due: now, lane: lane, now: now, directUpTo: room, trace: trace, session)
                    if !direct { queued = true }
                    if direct, count > 0 {
                        let rows = try await directClaims(notification: notification, appID: appID, trace: trace, now: now, session)
                        result.claimed += rows
                        room = max(0, room - rows.count)
                    }
                case .skipped(let timers, let reason), .failed(let timers, let reason):
                    let status: String
                    if case .skipped = outcome { status = "skipped" } else { status = "failed" }
                    try await setStatus(
                        of: timers, "status = $1, reason = $2, claimed_by = NULL, updated_at = $3", [.text(status), .text(reason), .integer(now)],
                        session)
                }
            }
            if queued { try await notifyOutbox(session) }
            return result
        }
    }

    /// Sets `assignments` (with `binds` as $1…) on the timers `ids` still pending: on SQLite the
    /// ids are one bound JSON array (`json_each`), not thousands of values to parse and bind.
    private func setStatus(of ids: [Int64], _ assignments: String, _ binds: [Session.Value], _ session: Session) async throws {
        switch dialect {
        case .sqlite:
            _ = try await session.query(
                "UPDATE timers SET \(assignments) WHERE id IN \(Self.jsonEach("$\(binds.count + 1)")) AND status = 'pending'",
                binds + [.text(Self.jsonArray(ids))])
        case .postgres:
            for chunk in ids.chunked(Self.batchSize) {
                _ = try await session.query(
                    "UPDATE timers SET \(assignments) WHERE id IN (\(Self.placeholders(chunk.count, from: binds.count + 1))) AND status = 'pending'",
                    binds + chunk.map { .integer($0) })
            }
        }
    }

    /// Timers a dead node was firing go back to `pending` (`requeueStatement`).
    static let requeueTimersSQL = requeueStatement(table: "timers", claimed: "firing", back: "pending", indexTerm: timerIndexTerm)

    /// The partial timer index's condition (repeated verbatim for SQLite to use the index).
    static let timerIndexTerm = "status IN ('pending', 'firing')"

    /// `$from, $from+1, …` for `count` bound values.
    static func placeholders(_ count: Int, from first: Int) -> String {
        (0..<count).map { "$\(first + $0)" }.joined(separator: ", ")
    }

    // MARK: Events

    /// When each of these users last did `name` (users who never did are absent), in `session`.
    func lastEvents(appID: String, name: String, userIDs: [String], _ session: Session) async throws -> [String: Date] {
        var last: [String: Date] = [:]
        for chunk in userIDs.chunked(Self.batchSize) {
            for row in try await session.query(
                """
                SELECT user_id, MAX(occurred_at) FROM events
                WHERE app_id = $1 AND name = $2 AND user_id IN (\(Self.placeholders(chunk.count, from: 3))) GROUP BY user_id
                """, [.text(appID), .text(name)] + chunk.map { .text($0) })
            {
                if let user = row.first?.text, let at = row.last?.integer { last[user] = Self.date(at) }
            }
        }
        return last
    }
}
