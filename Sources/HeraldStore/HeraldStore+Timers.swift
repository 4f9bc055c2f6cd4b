package import Foundation

/// Timers: what fires later (a track's step) as a row with a due time. A timer loop claims due
/// rows for this node (`pending` → `firing`, under a batch number every outcome must match, as a
/// delivery's claim), decides what each becomes, and writes that in one transaction: the
/// notification and its deliveries, or why it was skipped. A cancel that lands first (the
/// timer is `cancelled`) wins: the fence finds nothing to fire. A dead node's claims go back to
/// `pending` (`rescueDeadClaims`); a timer fires at most once however often it is claimed.
extension HeraldStore {
    /// A timer claimed to fire, with its enrolment's anchor and data.
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

    /// What claimed timers become.
    package enum TimerOutcome: Sendable {
        /// One notification for these timers' users (timers with the same content fire together).
        case send(appID: String, notification: UUID, content: Data, lane: DeliveryLane, cancelKey: String?, trace: String?, timers: [Int64])
        case skipped(timers: [Int64], reason: String)
        case failed(timers: [Int64], reason: String)
    }

    /// Claims up to `limit` due timers for this node: the batch number their outcomes carry, and
    /// the timers in due order.
    package func claimDueTimers(limit: Int) async throws -> (batch: Int64, timers: [DueTimer]) {
        let batch = Int64.random(in: 1...Int64.max)
        let timers = try await transaction { [self] session -> [DueTimer] in
            let now = nowMilliseconds
            let ids: [Int64]
            switch dialect {
            case .sqlite:
                ids = try await session.query(
                    "SELECT id FROM timers WHERE status = 'pending' AND \(Self.timerIndexTerm) AND due_at <= $1 ORDER BY due_at, id LIMIT $2",
                    [.integer(now), .integer(Int64(limit))]
                ).compactMap { $0.first?.integer }
                for chunk in ids.chunked(Self.batchSize) {
                    _ = try await session.query(
                        "UPDATE timers SET status = 'firing', claimed_by = $1, claim = $2, updated_at = $3 WHERE id IN (\(Self.placeholders(chunk.count, from: 4)))",
                        [.text(nodeID), .integer(batch), .integer(now)] + chunk.map { .integer($0) })
                }
            case .postgres:
                ids = try await session.query(
                    """
                    UPDATE timers SET status = 'firing', claimed_by = $3, claim = $4, updated_at = $1
                    WHERE id IN (
                        SELECT id FROM timers WHERE status = 'pending' AND \(Self.timerIndexTerm) AND due_at <= $1
                        ORDER BY due_at, id LIMIT $2 FOR UPDATE SKIP LOCKED)
                    RETURNING id
                    """, [.integer(now), .integer(Int64(limit)), .text(nodeID), .integer(batch)]
                ).compactMap { $0.first?.integer }
            }
            var timers: [DueTimer] = []
            for chunk in ids.chunked(Self.batchSize) {
                for columns in try await session.query(
                    """
                    SELECT t.id, t.app_id, t.user_id, t.kind, t.name, t.step, t.due_at, t.cancel_key, t.trace, e.anchor_at, COALESCE(t.data, e.data)
                    FROM timers t LEFT JOIN enrolments e ON t.kind = 'step' AND e.app_id = t.app_id AND e.user_id = t.user_id AND e.track = t.name
                    WHERE t.id IN (\(Self.placeholders(chunk.count, from: 1)))
                    """, chunk.map { .integer($0) })
                {
                    guard columns.count == 11, let id = columns[0].integer, let app = columns[1].text, let user = columns[2].text,
                        let kind = columns[3].text, let name = columns[4].text, let step = columns[5].text, let due = columns[6].integer
                    else { throw StoreError(.corrupt, "timers: a row the timer loop cannot read") }
                    timers.append(
                        DueTimer(
                            id: id, appID: app, userID: user, kind: kind, name: name, step: step, dueAt: Self.date(due),
                            cancelKey: columns[7].text, trace: columns[8].text, anchorAt: columns[9].integer.map(Self.date), data: columns[10].text))
                }
            }
            return timers.sorted { ($0.dueAt, $0.id) < ($1.dueAt, $1.id) }
        }
        return (batch, timers)
    }

    /// Writes what claimed timers became, in one transaction; only timers still `firing` under
    /// `batch` count (one cancelled meanwhile is not sent to). Returns the notifications written
    /// and the timers fired.
    /// With `directUpTo > 0`, the deliveries of notifications to at most that many users or
    /// devices are claimed for this node as they are written (as a send's accept does, `acceptNotification`),
    /// up to that many in all, and returned for its dispatcher: a due wave skips a claim.
    @discardableResult
    package func fireTimers(
        batch: Int64, _ outcomes: [TimerOutcome], directUpTo: Int = 0
    ) async throws -> (notifications: Int, fired: Int, claimed: [ClaimedDelivery]) {
        guard !outcomes.isEmpty else { return (0, 0, []) }
        return try await transaction { [self] session in
            let now = nowMilliseconds
            var notifications = 0
            var fired = 0
            var claimed: [ClaimedDelivery] = []
            var room = directUpTo
            var queued = false
            for outcome in outcomes {
                switch outcome {
                case .send(let appID, let notification, let content, let lane, let cancelKey, let trace, let timers):
                    // A step goes to its user's devices; a sync to its device (`name`).
                    var users: [String] = []
                    var devices: [String] = []
                    for chunk in timers.chunked(Self.batchSize) {
                        for row in try await session.query(
                            """
                            UPDATE timers SET status = 'fired', notification_id = $1, claimed_by = NULL, updated_at = $2
                            WHERE id IN (\(Self.placeholders(chunk.count, from: 4))) AND claim = $3 AND status = 'firing'
                            RETURNING user_id, kind, name
                            """, [.text(notification.uuidString), .integer(now), .integer(batch)] + chunk.map { .integer($0) })
                        {
                            guard row.count == 3, let user = row[0].text, let name = row[2].text else { continue }
                            if row[1].text == "sync" { devices.append(name) } else { users.append(user) }
                        }
                    }
                    guard !users.isEmpty || !devices.isEmpty else { continue }
                    fired += users.count + devices.count
                    notifications += 1
                    let (count, direct) = try await writeNotification(
                        appID: appID, id: notification, idempotencyKey: nil, cancelKey: cancelKey, content: content,
                        recipients: devices.isEmpty ? .users(Array(Set(users)).sorted()) : .devices(devices.sorted()), excludeDeviceIDs: [],
                        due: now, lane: lane, now: now, directUpTo: room, trace: trace, session)
                    if !direct { queued = true }
                    if direct, count > 0 {
                        let rows = try await session.query(Self.directClaimSQL, [.text(notification.uuidString)]).compactMap {
                            try Self.claimedDelivery($0, claimOffset: 0)
                        }
                        claimed += rows
                        room = max(0, room - rows.count)
                    }
                case .skipped(let timers, let reason), .failed(let timers, let reason):
                    let status: String
                    if case .skipped = outcome { status = "skipped" } else { status = "failed" }
                    for chunk in timers.chunked(Self.batchSize) {
                        _ = try await session.query(
                            """
                            UPDATE timers SET status = $1, reason = $2, claimed_by = NULL, updated_at = $3
                            WHERE id IN (\(Self.placeholders(chunk.count, from: 5))) AND claim = $4 AND status = 'firing'
                            """, [.text(status), .text(reason), .integer(now), .integer(batch)] + chunk.map { .integer($0) })
                    }
                }
            }
            if queued { try await notifyOutbox(session) }
            return (notifications, fired, claimed)
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

    /// When each of these users last did `name` (users who never did are absent).
    package func lastEvents(appID: String, name: String, userIDs: [String]) async throws -> [String: Date] {
        guard !userIDs.isEmpty else { return [:] }
        return try await exclusive { session in
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
}
