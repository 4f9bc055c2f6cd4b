package import Foundation

/// Quick actions and webhooks: the keys Herald makes for an app, each delivery's
/// commit (its audit row), and the webhook messages still to deliver — retried on a schedule,
/// in order per user without one user's backlog holding up the others.
extension ActionRepository {
    /// A secret Herald keeps for an app (`purpose`: what it is for), made at first use: 32
    /// random bytes, the same for every node (the first node's wins).
    package func appSecret(appID: String, purpose: String) async throws -> Data {
        let made = Data((0..<32).map { _ in UInt8.random(in: .min ... .max) }).base64EncodedString()
        let stored = try await transaction(durable: true) { [self] session in
            _ = try await session.query(
                "INSERT INTO app_secrets (app_id, purpose, secret, created_at) VALUES ($1, $2, $3, $4) ON CONFLICT (app_id, purpose) DO NOTHING",
                [.text(appID), .text(purpose), .text(made), .integer(nowMilliseconds)])
            return try await session.query(
                "SELECT secret FROM app_secrets WHERE app_id = $1 AND purpose = $2", [.text(appID), .text(purpose)]
            ).first?.first?.text
        }
        guard let stored, let secret = Data(base64Encoded: stored) else {
            throw StoreError(.corrupt, "app_secrets: a secret that is not base64")
        }
        return secret
    }

    /// A quick action's commit: one per delivery, its audit row.
    package struct ActionCommit: Sendable, Equatable {
        package enum Status: String, Sendable {
            /// The app's backend took it (`result` is its answer).
            case committed
            /// Its webhook is queued: retried until the backend takes it.
            case queued
            /// The backend refused it, or every retry failed.
            case failed
        }

        package var deliveryID: Int64
        package var action: String
        package var notificationID: UUID
        package var deviceID: String
        package var userID: String?
        package var turnID: String?
        package var text: String?
        package var status: Status
        /// The backend's answer (JSON text), once it answered.
        package var result: String?
        /// From the commit's arrival to the backend's answer.
        package var latencyMilliseconds: Int64?
        /// The webhook message that carries it.
        package var messageID: String?
        package var createdAt: Date
        package var updatedAt: Date

        package init(
            deliveryID: Int64, action: String, notificationID: UUID, deviceID: String, userID: String?, turnID: String?,
            text: String?,
            status: Status, result: String? = nil, latencyMilliseconds: Int64? = nil, messageID: String? = nil,
            createdAt: Date, updatedAt: Date
        ) {
            self.deliveryID = deliveryID
            self.action = action
            self.notificationID = notificationID
            self.deviceID = deviceID
            self.userID = userID
            self.turnID = turnID
            self.text = text
            self.status = status
            self.result = result
            self.latencyMilliseconds = latencyMilliseconds
            self.messageID = messageID
            self.createdAt = createdAt
            self.updatedAt = updatedAt
        }
    }

    static let commitColumns =
        "delivery_id, action, notification_id, device_id, user_id, turn_id, text, status, result, latency_ms, message_id, created_at, updated_at"

    static func commit(_ row: [Session.Value]) -> ActionCommit? {
        guard row.count == 13, let delivery = row[0].integer, let action = row[1].text,
            let notification = row[2].text.flatMap(UUID.init(uuidString:)),
            let device = row[3].text, let status = row[7].text.flatMap(ActionCommit.Status.init(rawValue:)),
            let created = row[11].integer,
            let updated = row[12].integer
        else { return nil }
        return ActionCommit(
            deliveryID: delivery, action: action, notificationID: notification, deviceID: device, userID: row[4].text,
            turnID: row[5].text,
            text: row[6].text, status: status, result: row[8].text, latencyMilliseconds: row[9].integer,
            messageID: row[10].text,
            createdAt: SQLText.date(created), updatedAt: SQLText.date(updated))
    }

    /// Records `commit` as its delivery's commit unless the delivery has one already: returns
    /// the stored commit and whether it is this one (false: a replay, or another action of the
    /// same delivery, which the first answers). Also says whether the user has webhook messages
    /// waiting (a new one must queue behind them, in order).
    package func beginCommit(appID: String, _ commit: ActionCommit) async throws -> (
        stored: ActionCommit, new: Bool, userBacklog: Bool
    ) {
        try await transaction(durable: true) { session in
            let inserted = try await session.query(
                """
                INSERT INTO action_commits (app_id, \(Self.commitColumns))
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
                ON CONFLICT (app_id, delivery_id) DO NOTHING RETURNING delivery_id
                """,
                [
                    .text(appID), .integer(commit.deliveryID), .text(commit.action),
                    .text(commit.notificationID.uuidString), .text(commit.deviceID),
                    commit.userID.map { .text($0) } ?? .null, commit.turnID.map { .text($0) } ?? .null,
                    commit.text.map { .text($0) } ?? .null,
                    .text(commit.status.rawValue), commit.result.map { .text($0) } ?? .null,
                    commit.latencyMilliseconds.map { .integer($0) } ?? .null,
                    commit.messageID.map { .text($0) } ?? .null, .integer(Self.milliseconds(commit.createdAt)),
                    .integer(Self.milliseconds(commit.updatedAt)),
                ])
            guard
                let row = try await session.query(
                    "SELECT \(Self.commitColumns) FROM action_commits WHERE app_id = $1 AND delivery_id = $2",
                    [.text(appID), .integer(commit.deliveryID)]
                ).first, let stored = Self.commit(row)
            else { throw StoreError(.corrupt, "action_commits: a commit that cannot be read back") }
            let backlog = try await !session.query(
                "SELECT 1 FROM webhook_messages WHERE app_id = $1 AND user_id = $2 AND status = 'pending' LIMIT 1",
                [.text(appID), .text(commit.userID ?? "")]
            ).isEmpty
            return (stored, !inserted.isEmpty, backlog)
        }
    }

    /// Ends a commit: the backend's answer (or its refusal).
    package func finishCommit(
        appID: String, deliveryID: Int64, status: ActionCommit.Status, result: String?, latencyMilliseconds: Int64?
    ) async throws {
        try await transaction(durable: true) { [self] session in
            _ = try await session.query(
                "UPDATE action_commits SET status = $1, result = $2, latency_ms = $3, updated_at = $4 WHERE app_id = $5 AND delivery_id = $6",
                [
                    .text(status.rawValue), result.map { .text($0) } ?? .null,
                    latencyMilliseconds.map { .integer($0) } ?? .null,
                    .integer(nowMilliseconds), .text(appID), .integer(deliveryID),
                ])
        }
    }

    /// An app's commits since `since`, of one user when `userID` is given, newest first.
    package func commits(appID: String, userID: String?, since: Date, limit: Int) async throws -> [ActionCommit] {
        try await reading { session in
            var binds: [Session.Value] = [.text(appID), .integer(Self.milliseconds(since)), .integer(Int64(limit))]
            if let userID { binds.append(.text(userID)) }
            return try await session.query(
                """
                SELECT \(Self.commitColumns) FROM action_commits WHERE app_id = $1 AND created_at >= $2\(userID == nil ? "" : " AND user_id = $4")
                ORDER BY created_at DESC, delivery_id DESC LIMIT $3
                """, binds
            ).compactMap(Self.commit)
        }
    }

    /// A webhook message: what the app's backend is told, retried until it answers 2xx.
    package struct WebhookMessage: Sendable, Equatable {
        package var id: Int64
        /// `webhook-id`: the same on every try.
        package var messageID: String
        package var appID: String
        /// Messages of one user go in order ("" for none).
        package var userID: String
        package var event: String
        package var idempotencyKey: String?
        package var body: String
        /// Tries made before this one.
        package var attempts: Int
    }

    /// Stores a message: `pending` (queued) due at `dueAt`, `attempts` tries already made (the
    /// synchronous first try of a commit counts), or already `delivered` or `aborted` by that
    /// try (kept for the replay). When it carries a commit, the commit's row names it.
    package func queueWebhook(
        appID: String, messageID: String, userID: String?, event: String, idempotencyKey: String?, body: String,
        attempts: Int, dueAt: Date,
        lastStatus: Int?, lastError: String?, commitDelivery: Int64? = nil, status: String = "pending"
    ) async throws {
        try await transaction(durable: true) { [self] session in
            let now = nowMilliseconds
            _ = try await session.query(
                """
                INSERT INTO webhook_messages (message_id, app_id, user_id, event, idempotency_key, body, status, attempts, next_at, last_status, last_error, created_at, updated_at)
                VALUES ($1, $2, $3, $4, $5, $6, $12, $7, $8, $9, $10, $11, $11)
                """,
                [
                    .text(messageID), .text(appID), .text(userID ?? ""), .text(event),
                    idempotencyKey.map { .text($0) } ?? .null, .text(body),
                    .integer(Int64(attempts)), .integer(Self.milliseconds(dueAt)),
                    lastStatus.map { .integer(Int64($0)) } ?? .null,
                    lastError.map { .text(String($0.prefix(500))) } ?? .null, .integer(now), .text(status),
                ])
            if let commitDelivery {
                _ = try await session.query(
                    "UPDATE action_commits SET message_id = $1, updated_at = $2 WHERE app_id = $3 AND delivery_id = $4",
                    [.text(messageID), .integer(now), .text(appID), .integer(commitDelivery)])
            }
        }
    }

    /// Takes up to `limit` due messages for this node for `lease` seconds: each the oldest
    /// pending one of its user (the next of a user waits until the one before it ends).
    package func claimWebhooks(limit: Int, lease: TimeInterval) async throws -> [WebhookMessage] {
        let now = nowMilliseconds
        // Asked on the reading connection first: an idle poll does not take the writer.
        let due = try await reading { session in
            try await session.query(
                "SELECT 1 FROM webhook_messages WHERE status = 'pending' AND next_at <= $1 LIMIT 1", [.integer(now)]
            ).isEmpty == false
        }
        guard due else { return [] }
        return try await transaction { [self] session in
            let rows = try await session.query(
                """
                SELECT m.id, m.message_id, m.app_id, m.user_id, m.event, m.idempotency_key, m.body, m.attempts FROM webhook_messages m
                WHERE m.status = 'pending' AND m.next_at <= $1 AND (m.claimed_until IS NULL OR m.claimed_until < $1)
                AND NOT EXISTS (
                    SELECT 1 FROM webhook_messages o WHERE o.app_id = m.app_id AND o.user_id = m.user_id AND o.status = 'pending' AND o.id < m.id)
                ORDER BY m.next_at, m.id LIMIT $2\(dialect == .postgres ? " FOR UPDATE OF m SKIP LOCKED" : "")
                """, [.integer(now), .integer(Int64(limit))])
            let messages = rows.compactMap { row -> WebhookMessage? in
                guard row.count == 8, let id = row[0].integer, let messageID = row[1].text, let app = row[2].text,
                    let user = row[3].text,
                    let event = row[4].text, let body = row[6].text, let attempts = row[7].integer
                else { return nil }
                return WebhookMessage(
                    id: id, messageID: messageID, appID: app, userID: user, event: event, idempotencyKey: row[5].text,
                    body: body, attempts: Int(attempts))
            }
            guard !messages.isEmpty else { return [] }
            let ids =
                dialect == .sqlite
                ? SQLText.jsonEach("$3") : "(SELECT json_array_elements_text($3::json)::bigint)"
            _ = try await session.query(
                "UPDATE webhook_messages SET claimed_by = $1, claimed_until = $2 WHERE id IN \(ids)",
                [
                    .text(nodeID), .integer(now + Int64(lease * 1000)),
                    .text(SQLText.jsonArray(messages.map(\.id))),
                ])
            return messages
        }
    }

    /// How a message's try ended.
    package enum WebhookOutcome: Sendable, Equatable {
        /// 2xx: `result` is the answer's body.
        case delivered(status: Int, result: String?)
        /// Tried again at `at` (the try's status or error kept).
        case retry(at: Date, status: Int?, error: String?)
        /// No more tries: every retry failed, or the receiver answered `webhook-delivery: abort`.
        case failed(status: Int?, error: String?, aborted: Bool)
        /// Not tried (its app has no webhook now): looked at again at `at`, no try counted.
        case postponed(at: Date, error: String)
    }

    /// Records a try of `message`; a commit it carries ends with it (delivered: committed with
    /// the answer; failed: failed).
    package func recordWebhook(_ message: WebhookMessage, _ outcome: WebhookOutcome, latencyMilliseconds: Int64?)
        async throws
    {
        try await transaction(durable: true) { [self] session in
            let now = nowMilliseconds
            let (status, next, code, error): (String, Int64, Int?, String?)
            var commit: (ActionCommit.Status, String?)?
            var tried = 1
            switch outcome {
            case .delivered(let httpStatus, let result):
                (status, next, code, error) = ("delivered", now, httpStatus, nil)
                commit = (.committed, result)
            case .retry(let at, let httpStatus, let text):
                (status, next, code, error) = ("pending", Self.milliseconds(at), httpStatus, text)
            case .failed(let httpStatus, let text, let aborted):
                (status, next, code, error) = (aborted ? "aborted" : "failed", now, httpStatus, text)
                commit = (.failed, nil)
            case .postponed(let at, let text):
                (status, next, code, error) = ("pending", Self.milliseconds(at), nil, text)
                tried = 0
            }
            _ = try await session.query(
                """
                UPDATE webhook_messages SET status = $1, attempts = attempts + $7, next_at = $2, last_status = $3, last_error = $4,
                    claimed_by = NULL, claimed_until = NULL, updated_at = $5
                WHERE id = $6
                """,
                [
                    .text(status), .integer(next), code.map { .integer(Int64($0)) } ?? .null,
                    error.map { .text(String($0.prefix(500))) } ?? .null,
                    .integer(now), .integer(message.id), .integer(Int64(tried)),
                ])
            if let (commitStatus, result) = commit {
                _ = try await session.query(
                    """
                    UPDATE action_commits SET status = $1, result = COALESCE($2, result), latency_ms = COALESCE($3, latency_ms), updated_at = $4
                    WHERE app_id = $5 AND message_id = $6 AND status = 'queued'
                    """,
                    [
                        .text(commitStatus.rawValue), result.map { .text($0) } ?? .null,
                        latencyMilliseconds.map { .integer($0) } ?? .null,
                        .integer(now), .text(message.appID), .text(message.messageID),
                    ])
            }
        }
    }

    /// Queues again, from their first try, an app's messages created since `since` that are no
    /// longer pending (delivered, failed or aborted); returns how many.
    package func replayWebhooks(appID: String, since: Date) async throws -> Int {
        try await transaction(durable: true) { [self] session in
            let now = nowMilliseconds
            return try await session.query(
                """
                UPDATE webhook_messages SET status = 'pending', attempts = 0, next_at = $1, claimed_by = NULL, claimed_until = NULL, updated_at = $1
                WHERE app_id = $2 AND created_at >= $3 AND status <> 'pending' RETURNING 1
                """, [.integer(now), .text(appID), .integer(Self.milliseconds(since))]
            ).count
        }
    }

    /// Messages of an app by status (what the operator watches).
    package func webhookCounts(appID: String) async throws -> [String: Int] {
        try await reading { session in
            var counts: [String: Int] = [:]
            for row in try await session.query(
                "SELECT status, count(*) FROM webhook_messages WHERE app_id = $1 GROUP BY status", [.text(appID)])
            {
                if let status = row[0].text { counts[status] = Int(row[1].integer ?? 0) }
            }
            return counts
        }
    }
}
