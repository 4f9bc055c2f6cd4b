package import Foundation

/// Time-based jobs over user attributes. A job runs once per (time zone, local
/// day): the run is claimed by one node (a `job_runs` row, taken over if its node dies), which
/// pages through the zone's users, and each selected user's occurrence is a unique row written
/// in the transaction that writes the notification: a user gets each occurrence at most once,
/// across restarts and nodes.
extension TimerRepository {
    /// The time zones the app's users have (nil: users without one, run in UTC). Read off the
    /// writer's connection, as the pages of users are: a job's scan holds no write up.
    package func userZones(appID: String) async throws -> [String?] {
        try await reading { session in
            try await session.query("SELECT DISTINCT time_zone FROM users WHERE app_id = $1", [.text(appID)]).map {
                $0.first?.text
            }
        }
    }

    /// Claims the run of a job for a zone and local day: true when this node is to run it (no
    /// one has, or its node stopped answering); false when it is done or another node runs it.
    package func claimJobRun(appID: String, job: String, zone: String, occurrence: String) async throws -> Bool {
        try await transaction { [self] session in
            let now = nowMilliseconds
            let inserted = try await session.query(
                """
                INSERT INTO job_runs (app_id, job, zone, occurrence, status, claimed_by, started_at) VALUES ($1, $2, $3, $4, 'running', $5, $6)
                ON CONFLICT (app_id, job, zone, occurrence) DO NOTHING RETURNING job
                """, [.text(appID), .text(job), .text(zone), .text(occurrence), .text(nodeID), .integer(now)])
            if !inserted.isEmpty { return true }
            let alive = now - Int64(NodeRepository.nodeDeadAfter * 1000)
            return
                !(try await session.query(
                    """
                    UPDATE job_runs SET claimed_by = $5, started_at = $6
                    WHERE app_id = $1 AND job = $2 AND zone = $3 AND occurrence = $4 AND status = 'running'
                      AND claimed_by <> $5 AND claimed_by NOT IN (SELECT id FROM nodes WHERE heartbeat_at >= $7)
                    RETURNING job
                    """,
                    [
                        .text(appID), .text(job), .text(zone), .text(occurrence), .text(nodeID), .integer(now),
                        .integer(alive),
                    ]
                ).isEmpty)
        }
    }

    /// A page of a zone's users with their attributes (JSON), after `cursor` in id order.
    package func zoneUsers(appID: String, zone: String?, after cursor: String, limit: Int) async throws -> [(
        userID: String, attributes: String
    )] {
        try await reading { session in
            let zoneTerm = zone == nil ? "time_zone IS NULL" : "time_zone = $4"
            var binds: [Session.Value] = [.text(appID), .text(cursor), .integer(Int64(limit))]
            if let zone { binds.append(.text(zone)) }
            return try await session.query(
                "SELECT user_id, attributes FROM users WHERE app_id = $1 AND \(zoneTerm) AND user_id > $2 ORDER BY user_id LIMIT $3",
                binds
            ).compactMap { row in row[0].text.map { ($0, row[1].text ?? "{}") } }
        }
    }

    /// Sends a job's occurrence to the users who have not had it: their occurrence rows and the
    /// notification in one transaction. Returns how many were sent to.
    package func sendJobOccurrence(
        appID: String, job: String, occurrence: String, userIDs: [String], notification: UUID, content: Data,
        lane: DeliveryLane
    ) async throws -> Int {
        guard !userIDs.isEmpty else { return 0 }
        return try await transaction { [self] session in
            let now = nowMilliseconds
            var fresh: [String] = []
            for chunk in userIDs.chunked(Self.batchSize) {
                var values: [String] = []
                var binds: [Session.Value] = [
                    .text(appID), .text(job), .text(occurrence), .text(notification.uuidString), .integer(now),
                ]
                for user in chunk {
                    binds.append(.text(user))
                    values.append("($1, $2, $\(binds.count), $3, $4, $5)")
                }
                fresh += try await session.query(
                    """
                    INSERT INTO job_occurrences (app_id, job, user_id, occurrence, notification_id, created_at) VALUES \(values.joined(separator: ", "))
                    ON CONFLICT (app_id, job, user_id, occurrence) DO NOTHING RETURNING user_id
                    """, binds
                ).compactMap { $0.first?.text }
            }
            guard !fresh.isEmpty else { return 0 }
            _ = try await database.notifications.writeNotification(
                appID: appID, id: notification, idempotencyKey: nil, cancelKey: "job:" + job, content: content,
                recipients: .users(fresh.sorted()),
                excludeDeviceIDs: [], due: now, lane: lane, now: now, session)
            try await database.nodes.notifyOutbox(session)
            return fresh.count
        }
    }

    /// Marks a job's run for a zone and day done, with how many users it looked at and sent to.
    package func finishJobRun(appID: String, job: String, zone: String, occurrence: String, users: Int, sent: Int)
        async throws
    {
        try await exclusive { [self] session in
            _ = try await session.query(
                """
                UPDATE job_runs SET status = 'done', users = $5, sent = $6, finished_at = $7
                WHERE app_id = $1 AND job = $2 AND zone = $3 AND occurrence = $4 AND claimed_by = $8
                """,
                [
                    .text(appID), .text(job), .text(zone), .text(occurrence), .integer(Int64(users)),
                    .integer(Int64(sent)), .integer(nowMilliseconds),
                    .text(nodeID),
                ])
        }
    }
}
