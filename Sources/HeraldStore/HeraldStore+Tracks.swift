package import Foundation
package import HeraldCore

/// Lifecycle tracks: enrolments, and their steps as timers, rows with a due time
/// that a timer loop claims (fenced like deliveries) and fires into notifications.
extension TrackRepository {
    /// A step of a user's track: when it is due and what became of it.
    package struct StepRecord: Sendable, Hashable {
        package var timerID: Int64
        package var track: String
        package var step: String
        package var dueAt: Date
        /// `pending`, `firing`, `fired`, `skipped`, `cancelled` or `failed`.
        package var status: String
        package var reason: String?
        package var notificationID: String?
        package var trace: String?
    }

    /// A user's enrolment in a track, with its steps.
    package struct EnrolmentRecord: Sendable, Hashable {
        package var track: String
        package var anchorAt: Date
        package var data: String
        package var testSeconds: Int?
        package var enrolledAt: Date
        package var steps: [StepRecord]
    }

    /// How far in the past a step may be due at enrolment and still be sent (later ones are
    /// skipped: an anchor a week ago does not send a week of reminders at once).
    package static let pastStepGrace: TimeInterval = 60

    /// Enrols a user in a track, in one durable transaction. Already enrolled: nothing changes
    /// (`enrolled == false`, the enrolment as it is) unless `restart`, which cancels what has not
    /// been sent of the last enrolment (its steps, and their deliveries not yet sent: the track's
    /// cancel key, for this user) and schedules the steps anew. Steps due before now (less
    /// `pastStepGrace`) are `skipped`.
    package func enrol(
        appID: String, userID: String, track: String, cancelKey: String, anchorAt: Date, data: String,
        testSeconds: Int?,
        steps: [PlannedStep], restart: Bool
    ) async throws -> (enrolled: Bool, enrolment: EnrolmentRecord) {
        try await transaction(durable: true) { [self] session in
            var now = nowMilliseconds
            let existing = try await session.query(
                "SELECT enrolled_at FROM enrolments WHERE app_id = $1 AND user_id = $2 AND track = $3",
                [.text(appID), .text(userID), .text(track)])
            if let previous = existing.first?.first?.integer {
                guard restart else {
                    return (false, try await enrolment(appID: appID, userID: userID, track: track, session)!)
                }
                _ = try await database.notifications.cancel(
                    appID: appID, cancelKey: cancelKey, userIDs: [userID], now: now, session)
                // Steps of the last enrolment under another key (the catalog changed) go too.
                _ = try await cancelSteps(
                    appID: appID, userID: userID, track: track, reason: "Restarted", now: now, session)
                _ = try await session.query(
                    "DELETE FROM enrolments WHERE app_id = $1 AND user_id = $2 AND track = $3",
                    [.text(appID), .text(userID), .text(track)])
                // The new enrolment's steps are those created from its start on: after the last one's.
                now = max(now, previous + 1)
            }
            _ = try await session.query(
                """
                INSERT INTO enrolments (app_id, user_id, track, anchor_at, data, test_seconds, enrolled_at, updated_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $7)
                """,
                [
                    .text(appID), .text(userID), .text(track), .integer(Self.milliseconds(anchorAt)), .text(data),
                    testSeconds.map { .integer(Int64($0)) } ?? .null, .integer(now),
                ])
            try await insertSteps(
                appID: appID, track: track, cancelKey: cancelKey, [(userID, steps)], now: now, session)
            try await database.nodes.notifyOutbox(session)
            return (true, try await enrolment(appID: appID, userID: userID, track: track, session)!)
        }
    }

    /// Takes a user out of a track: its steps not fired and their deliveries not yet sent are
    /// cancelled (one transaction), and the enrolment goes (enrolling again starts afresh).
    /// Returns what was cancelled; nil when the user was not enrolled.
    package func unenrol(appID: String, userID: String, track: String, cancelKey: String) async throws
        -> NotificationRepository.Cancellation?
    {
        try await transaction(durable: true) { [self] session in
            let removed = try await session.query(
                "DELETE FROM enrolments WHERE app_id = $1 AND user_id = $2 AND track = $3 RETURNING track",
                [.text(appID), .text(userID), .text(track)])
            guard !removed.isEmpty else { return nil }
            let now = nowMilliseconds
            var result = try await database.notifications.cancel(
                appID: appID, cancelKey: cancelKey, userIDs: [userID], now: now, session)
            result.steps += try await cancelSteps(
                appID: appID, userID: userID, track: track, reason: NotificationRepository.cancelledReason, now: now,
                session)
            return result
        }
    }

    /// Cancels a user's steps of a track that have not fired; returns how many.
    private func cancelSteps(
        appID: String, userID: String, track: String, reason: String, now: Int64, _ session: Session
    ) async throws -> Int {
        try await session.query(
            """
            UPDATE timers SET status = 'cancelled', reason = $5, claimed_by = NULL, updated_at = $1
            WHERE app_id = $2 AND user_id = $3 AND kind = 'step' AND name = $4 AND status IN ('pending', 'firing')
            RETURNING id
            """, [.integer(now), .text(appID), .text(userID), .text(track), .text(reason)]
        ).count
    }

    /// A user's enrolments, each with its steps in due order.
    package func enrolments(appID: String, userID: String) async throws -> [EnrolmentRecord] {
        try await exclusive { [self] session in
            var records: [EnrolmentRecord] = []
            for row in try await session.query(
                "SELECT track FROM enrolments WHERE app_id = $1 AND user_id = $2 ORDER BY track",
                [.text(appID), .text(userID)])
            {
                guard let track = row.first?.text,
                    let record = try await enrolment(appID: appID, userID: userID, track: track, session)
                else { continue }
                records.append(record)
            }
            return records
        }
    }

    private func enrolment(appID: String, userID: String, track: String, _ session: Session) async throws
        -> EnrolmentRecord?
    {
        guard
            let row = try await session.query(
                "SELECT anchor_at, data, test_seconds, enrolled_at FROM enrolments WHERE app_id = $1 AND user_id = $2 AND track = $3",
                [.text(appID), .text(userID), .text(track)]
            ).first, row.count == 4, let anchor = row[0].integer, let enrolled = row[3].integer
        else { return nil }
        // The steps of this enrolment: those created since it began.
        let steps = try await session.query(
            """
            SELECT id, step, due_at, status, reason, notification_id, trace FROM timers
            WHERE app_id = $1 AND user_id = $2 AND kind = 'step' AND name = $3 AND created_at >= $4
            ORDER BY due_at, id
            """, [.text(appID), .text(userID), .text(track), .integer(enrolled)]
        ).compactMap { columns -> StepRecord? in
            guard columns.count == 7, let id = columns[0].integer, let step = columns[1].text,
                let due = columns[2].integer,
                let status = columns[3].text
            else { return nil }
            return StepRecord(
                timerID: id, track: track, step: step, dueAt: SQLText.date(due), status: status,
                reason: columns[4].text,
                notificationID: columns[5].text, trace: columns[6].text)
        }
        return EnrolmentRecord(
            track: track, anchorAt: SQLText.date(anchor), data: row[1].text ?? "{}",
            testSeconds: row[2].integer.map(Int.init),
            enrolledAt: SQLText.date(enrolled), steps: steps)
    }

    // MARK: Re-planning

    /// The user's pending wall-clock-able steps with what planning them needs.
    package struct PendingStep: Sendable, Hashable {
        package var timerID: Int64
        package var track: String
        package var step: String
        package var dueAt: Date
        package var anchorAt: Date
        package var testSeconds: Int?
        package var trace: String?
    }

    /// A user's steps not yet claimed, to re-plan (a time-zone change).
    package func pendingSteps(appID: String, userID: String) async throws -> [PendingStep] {
        try await exclusive { session in
            try await session.query(
                """
                SELECT t.id, t.name, t.step, t.due_at, e.anchor_at, e.test_seconds, t.trace FROM timers t
                JOIN enrolments e ON e.app_id = t.app_id AND e.user_id = t.user_id AND e.track = t.name
                WHERE t.app_id = $1 AND t.user_id = $2 AND t.kind = 'step' AND t.status = 'pending'
                ORDER BY t.due_at, t.id
                """, [.text(appID), .text(userID)]
            ).compactMap { columns in
                guard columns.count == 7, let id = columns[0].integer, let track = columns[1].text,
                    let step = columns[2].text,
                    let due = columns[3].integer, let anchor = columns[4].integer
                else { return nil }
                return PendingStep(
                    timerID: id, track: track, step: step, dueAt: SQLText.date(due), anchorAt: SQLText.date(anchor),
                    testSeconds: columns[5].integer.map(Int.init), trace: columns[6].text)
            }
        }
    }

    /// Moves steps still pending to new due times, with their new traces. Returns how many moved
    /// (a step claimed meanwhile is not moved: it fires as planned).
    package func moveSteps(_ moves: [(timerID: Int64, dueAt: Date, trace: String?)]) async throws -> Int {
        guard !moves.isEmpty else { return 0 }
        return try await transaction { [self] session in
            var moved = 0
            for move in moves {
                moved += try await session.query(
                    "UPDATE timers SET due_at = $1, trace = $2, updated_at = $3 WHERE id = $4 AND status = 'pending' RETURNING id",
                    [
                        .integer(Self.milliseconds(move.dueAt)), move.trace.map { .text($0) } ?? .null,
                        .integer(nowMilliseconds), .integer(move.timerID),
                    ]
                ).count
            }
            try await database.nodes.notifyOutbox(session)
            return moved
        }
    }
}

extension TrackRepository {
    /// One user's enrolment in a bulk enrolment.
    package struct BulkEnrolment: Sendable {
        package var userID: String
        package var anchorAt: Date
        package var data: String
        package var steps: [PlannedStep]
        package init(userID: String, anchorAt: Date, data: String, steps: [PlannedStep]) {
            self.userID = userID
            self.anchorAt = anchorAt
            self.data = data
            self.steps = steps
        }
    }

    /// Enrols many users in a track in one transaction (`on_conflict: ignore`: a user enrolled
    /// already is left as is). Returns how many were enrolled now. The enrolments, then their
    /// steps, are one statement each (`BulkRows`).
    package func enrolMany(appID: String, track: String, cancelKey: String, _ entries: [BulkEnrolment]) async throws
        -> Int
    {
        guard !entries.isEmpty else { return 0 }
        return try await transaction { [self] session in
            let now = nowMilliseconds
            let byUser = Dictionary(entries.map { ($0.userID, $0) }, uniquingKeysWith: { first, _ in first })
            // In user order: concurrent imports on PostgreSQL take the rows' locks in one order.
            let sorted = byUser.values.sorted(by: { $0.userID < $1.userID })
            var rows = BulkRows([("user_id", .text), ("anchor_at", .integer), ("data", .text)], capacity: sorted.count)
            for entry in sorted {
                rows.append(.text(entry.userID))
                rows.append(.integer(Self.milliseconds(entry.anchorAt)))
                rows.append(.text(entry.data))
            }
            let fresh = try await session.query([.text(appID), .text(track), .integer(now)], rows: rows) { source in
                """
                INSERT INTO enrolments (app_id, track, enrolled_at, updated_at, user_id, anchor_at, data)
                SELECT $1, $2, $3, $3, r.user_id, r.anchor_at, r.data FROM \(source) WHERE true
                ON CONFLICT (app_id, user_id, track) DO NOTHING RETURNING user_id
                """
            }.compactMap { $0.first?.text }
            try await insertSteps(
                appID: appID, track: track, cancelKey: cancelKey,
                fresh.sorted().compactMap { user in byUser[user].map { (user, $0.steps) } },
                now: now, session)
            return fresh.count
        }
    }

    /// The steps of new enrolments as timers, in one statement (`BulkRows`): `pending`, or
    /// `skipped` (`PastAtEnrolment`) when due more than `pastStepGrace` before `now`.
    private func insertSteps(
        appID: String, track: String, cancelKey: String, _ enrolments: [(userID: String, steps: [PlannedStep])],
        now: Int64, _ session: Session
    ) async throws {
        var rows = BulkRows(
            [("user_id", .text), ("step", .text), ("due_at", .integer)],
            capacity: enrolments.reduce(0) { $0 + $1.steps.count })
        for (user, steps) in enrolments {
            for step in steps {
                rows.append(.text(user))
                rows.append(.text(step.id))
                rows.append(.integer(Self.milliseconds(step.dueAt)))
            }
        }
        guard !rows.isEmpty else { return }
        let earliest = now - Int64(Self.pastStepGrace * 1000)
        // $1 app, $2 track, $3 cancel key, $4 now, $5 the earliest due time still sent.
        _ = try await session.query(
            [.text(appID), .text(track), .text(cancelKey), .integer(now), .integer(earliest)], rows: rows
        ) { source in
            """
            INSERT INTO timers (app_id, kind, name, cancel_key, created_at, updated_at, user_id, step, due_at, status, reason)
            SELECT $1, 'step', $2, $3, $4, $4, r.user_id, r.step, r.due_at,
                CASE WHEN r.due_at < $5 THEN 'skipped' ELSE 'pending' END, CASE WHEN r.due_at < $5 THEN 'PastAtEnrolment' END
            FROM \(source)
            """
        }
    }

    /// The time zones of these users: theirs, else one of their devices'; absent: neither has one.
    package func zones(appID: String, userIDs: [String]) async throws -> [String: String] {
        guard !userIDs.isEmpty else { return [:] }
        return try await exclusive { session in
            var zones: [String: String] = [:]
            for chunk in userIDs.chunked(Self.batchSize) {
                let list = SQLText.placeholders(chunk.count, from: 2)
                let binds: [Session.Value] = [.text(appID)] + chunk.map { .text($0) }
                for row in try await session.query(
                    "SELECT user_id, time_zone FROM devices WHERE app_id = $1 AND user_id IN (\(list)) AND time_zone IS NOT NULL",
                    binds)
                {
                    if let user = row[0].text, let zone = row[1].text { zones[user] = zone }
                }
                for row in try await session.query(
                    "SELECT user_id, time_zone FROM users WHERE app_id = $1 AND user_id IN (\(list)) AND time_zone IS NOT NULL",
                    binds)
                {
                    if let user = row[0].text, let zone = row[1].text { zones[user] = zone }
                }
            }
            return zones
        }
    }
}
