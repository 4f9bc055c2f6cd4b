package import Foundation
package import HeraldCore

/// Live Activities: push-to-start tokens per device and attributes type, activities with their
/// last state and timestamp, each device's update token, and the pushes sent.
package struct ActivityRepository: StoreRepository {
    package let database: HeraldStore
}

extension HeraldStore {
    package var activities: ActivityRepository { ActivityRepository(database: self) }
}

extension ActivityRepository {
    /// What became of a token a device reported.
    package enum TokenOutcome: Sendable, Equatable {
        case stored
        case noDevice
        /// The device is registered to another user than the user token's.
        case otherUser
    }

    /// An activity as stored.
    package struct Activity: Sendable, Equatable {
        package var id: String
        package var attributesType: String?
        /// JSON objects as sent.
        package var attributes: String?
        package var contentState: String?
        /// `active` or `ended`.
        package var status: String
        /// Unix seconds.
        package var staleAt: Int64?
        package var dismissalAt: Int64?
        /// The last push's `timestamp` (Unix seconds); 0 before any.
        package var lastTimestamp: Int64
        package var channelID: String?
        package var createdAt: Date
        package var updatedAt: Date

        package init(
            id: String, attributesType: String?, attributes: String?, contentState: String?, status: String,
            staleAt: Int64?, dismissalAt: Int64?, lastTimestamp: Int64, channelID: String?, createdAt: Date,
            updatedAt: Date
        ) {
            self.id = id
            self.attributesType = attributesType
            self.attributes = attributes
            self.contentState = contentState
            self.status = status
            self.staleAt = staleAt
            self.dismissalAt = dismissalAt
            self.lastTimestamp = lastTimestamp
            self.channelID = channelID
            self.createdAt = createdAt
            self.updatedAt = updatedAt
        }
    }

    /// A device of an activity: its update token (nil until the device reported one) and state
    /// (`starting`, `active`, `ended`), with the device's environment.
    package struct ActivityDevice: Sendable, Equatable {
        package var deviceID: String
        package var token: String?
        package var status: String
        package var reason: String?
        package var environment: String
        package var updatedAt: Date
        /// The device's locale (a catalog activity type's alert is rendered in it).
        package var locale: String?
    }

    /// A device a start can go to: its push-to-start token for the attributes type, if it has one.
    package struct StartTarget: Sendable, Equatable {
        package var deviceID: String
        package var userID: String
        package var environment: String
        package var token: String?
        /// The device's locale (a catalog activity type's alert is rendered in it).
        package var locale: String?
    }

    /// One push of an activity as recorded (`device_id` nil for a channel's publish).
    package struct Push: Sendable, Equatable {
        package var deviceID: String?
        package var event: LiveActivityEvent
        package var timestamp: Int64
        package var priority: Int
        /// `sent`, `failed` or `skipped` (never sent: no token, over a budget).
        package var status: String
        package var reason: String?
        /// A JSON array of `{rule, message, at}` (`DecisionTrace`).
        package var trace: String?
        package var createdAt: Date

        package init(
            deviceID: String?, event: LiveActivityEvent, timestamp: Int64, priority: Int, status: String,
            reason: String?, trace: String?, createdAt: Date
        ) {
            self.deviceID = deviceID
            self.event = event
            self.timestamp = timestamp
            self.priority = priority
            self.status = status
            self.reason = reason
            self.trace = trace
            self.createdAt = createdAt
        }
    }

    /// What a push's answer does to the records besides its own row.
    package enum TokenEffect: Sendable, Equatable {
        case none
        /// A start went out: the device joins the activity, waiting for its update token.
        case started
        /// The provider said the push-to-start token is gone (410): it is forgotten.
        case startTokenGone
        /// The provider said the update token is gone (410): the activity ends on that device.
        case updateTokenGone(reason: String)
    }

    /// Whether `deviceID` exists and (for a client's call) is `userID`'s.
    private func checkDevice(appID: String, deviceID: String, ownedBy userID: String?, _ session: Session)
        async throws -> TokenOutcome?
    {
        guard
            let row = try await session.query(
                "SELECT user_id FROM devices WHERE app_id = $1 AND device_id = $2", [.text(appID), .text(deviceID)]
            ).first, let owner = row.first?.text
        else { return .noDevice }
        if let userID, owner != userID { return .otherUser }
        return nil
    }

    /// Runs `write` in a transaction once `deviceID` is found to exist and (for a client's call)
    /// to be `userID`'s; answers why not otherwise.
    private func storeToken(
        appID: String, deviceID: String, ownedBy userID: String?, _ write: (Session, Int64) async throws -> Void
    ) async throws -> TokenOutcome {
        let now = nowMilliseconds
        return try await transaction { session in
            if let refused = try await checkDevice(appID: appID, deviceID: deviceID, ownedBy: userID, session) {
                return refused
            }
            try await write(session, now)
            return .stored
        }
    }

    /// Stores a device's push-to-start token for `attributesType` (replacing the one before).
    package func setStartToken(
        appID: String, deviceID: String, attributesType: String, token: String, ownedBy userID: String?
    ) async throws -> TokenOutcome {
        try await storeToken(appID: appID, deviceID: deviceID, ownedBy: userID) { session, now in
            _ = try await session.query(
                """
                INSERT INTO activity_start_tokens (app_id, device_id, attributes_type, token, updated_at) VALUES ($1, $2, $3, $4, $5)
                ON CONFLICT (app_id, device_id, attributes_type) DO UPDATE SET token = excluded.token, updated_at = excluded.updated_at
                """, [.text(appID), .text(deviceID), .text(attributesType), .text(token), .integer(now)])
        }
    }

    /// Stores a device's update token for `activityID` (a rotated token replaces the one
    /// before). An activity Herald did not start (the app started it itself) is recorded here,
    /// with `attributesType` when given.
    package func setUpdateToken(
        appID: String, activityID: String, deviceID: String, token: String, attributesType: String?,
        ownedBy userID: String?
    ) async throws -> TokenOutcome {
        try await storeToken(appID: appID, deviceID: deviceID, ownedBy: userID) { session, now in
            _ = try await session.query(
                """
                INSERT INTO activities (app_id, activity_id, attributes_type, status, created_at, updated_at)
                VALUES ($1, $2, $3, 'active', $4, $4) ON CONFLICT (app_id, activity_id) DO NOTHING
                """, [.text(appID), .text(activityID), attributesType.map { .text($0) } ?? .null, .integer(now)])
            _ = try await session.query(
                """
                INSERT INTO activity_devices (app_id, activity_id, device_id, token, status, updated_at)
                SELECT $1, $2, $3, $4, CASE WHEN a.status = 'ended' THEN 'ended' ELSE 'active' END, $5
                FROM activities a WHERE a.app_id = $1 AND a.activity_id = $2
                ON CONFLICT (app_id, activity_id, device_id) DO UPDATE SET token = excluded.token,
                    status = CASE WHEN activity_devices.status = 'ended' THEN 'ended' ELSE 'active' END, updated_at = excluded.updated_at
                """, [.text(appID), .text(activityID), .text(deviceID), .text(token), .integer(now)])
        }
    }

    /// Records a new activity; false when `activity.id` exists already.
    package func createActivity(appID: String, _ activity: Activity) async throws -> Bool {
        try await transaction { session in
            try await !session.query(
                """
                INSERT INTO activities (app_id, activity_id, attributes_type, attributes, content_state, status, stale_at,
                    dismissal_at, last_timestamp, channel_id, created_at, updated_at)
                VALUES ($1, $2, $3, $4, $5, 'active', $6, NULL, $7, $8, $9, $9)
                ON CONFLICT (app_id, activity_id) DO NOTHING RETURNING 1
                """,
                [
                    .text(appID), .text(activity.id), activity.attributesType.map { .text($0) } ?? .null,
                    activity.attributes.map { .text($0) } ?? .null, activity.contentState.map { .text($0) } ?? .null,
                    activity.staleAt.map { .integer($0) } ?? .null, .integer(activity.lastTimestamp),
                    activity.channelID.map { .text($0) } ?? .null,
                    .integer(Self.milliseconds(activity.createdAt)),
                ]
            ).isEmpty
        }
    }

    /// The active devices of `userIDs` (or the devices `deviceIDs`) on APNs, each with its
    /// push-to-start token for `attributesType` when it has one; in device order.
    package func startTargets(appID: String, attributesType: String, userIDs: [String], deviceIDs: [String])
        async throws -> [StartTarget]
    {
        try await reading { session in
            var targets: [StartTarget] = []
            for (column, ids) in [("user_id", userIDs), ("device_id", deviceIDs)] where !ids.isEmpty {
                for chunk in ids.chunked(Self.batchSize) {
                    for row in try await session.query(
                        """
                        SELECT d.device_id, d.user_id, d.environment, t.token, d.locale FROM devices d
                        LEFT JOIN activity_start_tokens t ON t.app_id = d.app_id AND t.device_id = d.device_id AND t.attributes_type = $2
                        WHERE d.app_id = $1 AND d.platform = 'apns' AND d.active = 1
                            AND d.\(column) IN (\(SQLText.placeholders(chunk.count, from: 3)))
                        """, [.text(appID), .text(attributesType)] + chunk.map { .text($0) })
                    {
                        guard row.count == 5, let device = row[0].text, let user = row[1].text,
                            let environment = row[2].text
                        else { continue }
                        targets.append(
                            StartTarget(
                                deviceID: device, userID: user, environment: environment, token: row[3].text,
                                locale: row[4].text))
                    }
                }
            }
            var seen = Set<String>()
            return targets.filter { seen.insert($0.deviceID).inserted }.sorted { $0.deviceID < $1.deviceID }
        }
    }

    /// What `advance` found.
    package enum Advance: Sendable, Equatable {
        /// The activity with its new timestamp and state.
        case advanced(Activity)
        case notFound
        /// Ended already: nothing more goes to it.
        case ended
        /// The asked timestamp is not after the last one sent.
        case stale(last: Int64)
    }

    /// Takes the next timestamp of an activity for a push at `now` (Unix seconds): the asked
    /// one if it is after the last one sent, else the later of now and the last one + 1, so
    /// every push of an activity is newer than the one before, whichever node sends it. Stores
    /// the state the push carries (an `end` ends the activity, with its dismissal date).
    package func advance(
        appID: String, activityID: String, event: LiveActivityEvent, timestamp asked: Int64?, now: Int64,
        contentState: String?, staleAt: Int64?, dismissalAt: Int64?
    ) async throws -> Advance {
        let updated = nowMilliseconds
        return try await transaction { session in
            guard
                let row = try await session.query(
                    "SELECT status, last_timestamp FROM activities WHERE app_id = $1 AND activity_id = $2\(dialect == .postgres ? " FOR UPDATE" : "")",
                    [.text(appID), .text(activityID)]
                ).first, row.count == 2, let status = row[0].text, let last = row[1].integer
            else { return .notFound }
            if status == "ended" { return .ended }
            if let asked, asked <= last { return .stale(last: last) }
            let timestamp = asked ?? max(now, last + 1)
            let rows = try await session.query(
                """
                UPDATE activities SET last_timestamp = $3, content_state = COALESCE($4, content_state),
                    stale_at = COALESCE($5, stale_at), dismissal_at = COALESCE($6, dismissal_at),
                    status = $7, updated_at = $8
                WHERE app_id = $1 AND activity_id = $2
                RETURNING \(Self.activityColumns)
                """,
                [
                    .text(appID), .text(activityID), .integer(timestamp), contentState.map { .text($0) } ?? .null,
                    staleAt.map { .integer($0) } ?? .null, dismissalAt.map { .integer($0) } ?? .null,
                    .text(event == .end ? "ended" : "active"), .integer(updated),
                ])
            guard let activity = rows.first.flatMap(Self.activity) else { return .notFound }
            return .advanced(activity)
        }
    }

    static let activityColumns =
        "activity_id, attributes_type, attributes, content_state, status, stale_at, dismissal_at, last_timestamp, channel_id, created_at, updated_at"

    static func activity(_ row: [Session.Value]) -> Activity? {
        guard row.count == 11, let id = row[0].text, let status = row[4].text, let last = row[7].integer,
            let created = row[9].integer, let updated = row[10].integer
        else { return nil }
        return Activity(
            id: id, attributesType: row[1].text, attributes: row[2].text, contentState: row[3].text, status: status,
            staleAt: row[5].integer, dismissalAt: row[6].integer, lastTimestamp: last, channelID: row[8].text,
            createdAt: SQLText.date(created), updatedAt: SQLText.date(updated))
    }

    /// An activity, or nil.
    package func activity(appID: String, activityID: String) async throws -> Activity? {
        try await reading { session in
            try await session.query(
                "SELECT \(Self.activityColumns) FROM activities WHERE app_id = $1 AND activity_id = $2",
                [.text(appID), .text(activityID)]
            ).first.flatMap(Self.activity)
        }
    }

    /// The devices of an activity, in device order, with their environment (devices deleted
    /// since are left out).
    package func devices(appID: String, activityID: String) async throws -> [ActivityDevice] {
        try await reading { session in
            try await session.query(
                """
                SELECT a.device_id, a.token, a.status, a.reason, d.environment, a.updated_at, d.locale
                FROM activity_devices a
                JOIN devices d ON d.app_id = a.app_id AND d.device_id = a.device_id
                WHERE a.app_id = $1 AND a.activity_id = $2 ORDER BY a.device_id
                """, [.text(appID), .text(activityID)]
            ).compactMap { row in
                guard row.count == 7, let device = row[0].text, let status = row[2].text, let environment = row[4].text,
                    let updated = row[5].integer
                else { return nil }
                return ActivityDevice(
                    deviceID: device, token: row[1].text, status: status, reason: row[3].text, environment: environment,
                    updatedAt: SQLText.date(updated), locale: row[6].text)
            }
        }
    }

    /// Records pushes of an activity with what each answer does to the tokens, in one
    /// transaction: the pushes in one insert, the devices a start reached in another (a start
    /// or an update to 10,000 devices is a few statements, not 10,000).
    package func record(appID: String, activityID: String, _ pushes: [(push: Push, effect: TokenEffect)])
        async throws
    {
        guard !pushes.isEmpty else { return }
        let now = nowMilliseconds
        var rows = BulkRows(
            [
                ("device_id", .text), ("event", .text), ("timestamp", .integer), ("priority", .integer),
                ("status", .text), ("reason", .text), ("trace", .text), ("created_at", .integer),
            ], capacity: pushes.count)
        var started = BulkRows([("device_id", .text)], capacity: pushes.count)
        for (push, effect) in pushes {
            for cell: BulkRows.Cell in [
                .text(push.deviceID ?? ""), .text(push.event.rawValue), .integer(push.timestamp),
                .integer(Int64(push.priority)), .text(push.status), .text(push.reason ?? ""), .text(push.trace ?? ""),
                .integer(Self.milliseconds(push.createdAt)),
            ] { rows.append(cell) }
            if effect == .started, let device = push.deviceID { started.append(.text(device)) }
        }
        try await transaction { session in
            _ = try await session.query([.text(appID), .text(activityID)], rows: rows) { source in
                """
                INSERT INTO activity_pushes (app_id, activity_id, device_id, event, timestamp, priority, status, reason, trace, created_at)
                SELECT $1, $2, NULLIF(r.device_id, ''), r.event, r.timestamp, r.priority, r.status, NULLIF(r.reason, ''),
                    NULLIF(r.trace, ''), r.created_at
                FROM \(source)
                """
            }
            if !started.isEmpty {
                _ = try await session.query([.text(appID), .text(activityID), .integer(now)], rows: started) { source in
                    """
                    INSERT INTO activity_devices (app_id, activity_id, device_id, token, status, updated_at)
                    SELECT $1, $2, r.device_id, NULL, 'starting', $3 FROM \(source)
                    WHERE true ON CONFLICT (app_id, activity_id, device_id) DO NOTHING
                    """
                }
            }
            for (push, effect) in pushes {
                guard let device = push.deviceID else { continue }
                switch effect {
                case .none, .started:
                    break
                case .startTokenGone:
                    let type = try await session.query(
                        "SELECT attributes_type FROM activities WHERE app_id = $1 AND activity_id = $2",
                        [.text(appID), .text(activityID)]
                    ).first?.first?.text
                    _ = try await session.query(
                        "DELETE FROM activity_start_tokens WHERE app_id = $1 AND device_id = $2 AND attributes_type = $3",
                        [.text(appID), .text(device), .text(type ?? "")])
                case .updateTokenGone(let reason):
                    _ = try await session.query(
                        """
                        UPDATE activity_devices SET status = 'ended', reason = $4, updated_at = $5
                        WHERE app_id = $1 AND activity_id = $2 AND device_id = $3
                        """, [.text(appID), .text(activityID), .text(device), .text(reason), .integer(now)])
                }
            }
            if pushes.contains(where: { $0.push.event == .end }) {
                _ = try await session.query(
                    """
                    UPDATE activity_devices SET status = 'ended', reason = COALESCE(reason, 'ActivityEnded'), updated_at = $3
                    WHERE app_id = $1 AND activity_id = $2 AND status <> 'ended'
                    """, [.text(appID), .text(activityID), .integer(now)])
            }
        }
    }

    /// The pushes of an activity, newest first, at most `limit`.
    package func pushes(appID: String, activityID: String, limit: Int) async throws -> [Push] {
        try await reading { session in
            try await session.query(
                """
                SELECT device_id, event, timestamp, priority, status, reason, trace, created_at FROM activity_pushes
                WHERE app_id = $1 AND activity_id = $2 ORDER BY id DESC LIMIT $3
                """, [.text(appID), .text(activityID), .integer(Int64(limit))]
            ).compactMap { row in
                guard row.count == 8, let event = row[1].text.flatMap(LiveActivityEvent.init(rawValue:)),
                    let timestamp = row[2].integer, let priority = row[3].integer, let status = row[4].text,
                    let created = row[7].integer
                else { return nil }
                return Push(
                    deviceID: row[0].text, event: event, timestamp: timestamp, priority: Int(priority), status: status,
                    reason: row[5].text, trace: row[6].text, createdAt: SQLText.date(created))
            }
        }
    }

    /// Pushes of an activity sent at priority 10 since `since` (one per timestamp, however
    /// many devices it went to): what its priority budget has spent.
    package func priorityPushes(appID: String, activityID: String, since: Date) async throws -> Int {
        try await reading { session in
            Int(
                try await session.query(
                    """
                    SELECT count(DISTINCT timestamp) FROM activity_pushes
                    WHERE app_id = $1 AND activity_id = $2 AND priority = 10 AND status = 'sent' AND event <> 'start' AND created_at >= $3
                    """, [.text(appID), .text(activityID), .integer(Self.milliseconds(since))]
                ).first?.first?.integer ?? 0)
        }
    }

    /// Starts sent to each of `deviceIDs` since `since`, of any activity.
    package func recentStarts(appID: String, deviceIDs: [String], since: Date) async throws -> [String: Int] {
        guard !deviceIDs.isEmpty else { return [:] }
        return try await reading { session in
            var counts: [String: Int] = [:]
            for chunk in deviceIDs.chunked(Self.batchSize) {
                for row in try await session.query(
                    """
                    SELECT device_id, count(*) FROM activity_pushes
                    WHERE app_id = $1 AND event = 'start' AND status = 'sent' AND created_at >= $2
                        AND device_id IN (\(SQLText.placeholders(chunk.count, from: 3)))
                    GROUP BY device_id
                    """, [.text(appID), .integer(Self.milliseconds(since))] + chunk.map { .text($0) })
                {
                    guard row.count == 2, let device = row[0].text, let count = row[1].integer else { continue }
                    counts[device] = Int(count)
                }
            }
            return counts
        }
    }
}

/// APNs broadcast channels Herald made, per app.
extension ActivityRepository {
    package struct Channel: Sendable, Equatable {
        package var id: String
        package var environment: String
        package var eventKey: String
        /// 0: no message kept; 1: the latest, for late joiners.
        package var storage: Int
        package var createdAt: Date

        package init(id: String, environment: String, eventKey: String, storage: Int, createdAt: Date) {
            self.id = id
            self.environment = environment
            self.eventKey = eventKey
            self.storage = storage
            self.createdAt = createdAt
        }
    }

    /// Records channels Apple made, in one transaction.
    package func recordChannels(appID: String, _ channels: [Channel]) async throws {
        guard !channels.isEmpty else { return }
        var rows = BulkRows(
            [
                ("app_id", .text), ("environment", .text), ("channel_id", .text), ("event_key", .text),
                ("storage", .integer), ("created_at", .integer),
            ], capacity: channels.count)
        for channel in channels {
            for cell: BulkRows.Cell in [
                .text(appID), .text(channel.environment), .text(channel.id), .text(channel.eventKey),
                .integer(Int64(channel.storage)), .integer(Self.milliseconds(channel.createdAt)),
            ] { rows.append(cell) }
        }
        try await transaction { session in
            _ = try await session.query([], rows: rows) { source in
                """
                INSERT INTO channels (app_id, environment, channel_id, event_key, storage, created_at)
                SELECT r.app_id, r.environment, r.channel_id, r.event_key, r.storage, r.created_at FROM \(source)
                WHERE true ON CONFLICT (app_id, channel_id) DO NOTHING
                """
            }
        }
    }

    /// The app's channels in an environment.
    package func channelCount(appID: String, environment: String) async throws -> Int {
        try await reading { session in
            Int(
                try await session.query(
                    "SELECT count(*) FROM channels WHERE app_id = $1 AND environment = $2",
                    [.text(appID), .text(environment)]
                ).first?.first?.integer ?? 0)
        }
    }

    /// The app's channels, newest first (of one event key when given), at most `limit`.
    package func channels(appID: String, eventKey: String? = nil, limit: Int = 1_000) async throws -> [Channel] {
        try await reading { session in
            var binds: [Session.Value] = [.text(appID), .integer(Int64(limit))]
            if let eventKey { binds.append(.text(eventKey)) }
            return try await session.query(
                """
                SELECT channel_id, environment, event_key, storage, created_at FROM channels
                WHERE app_id = $1\(eventKey == nil ? "" : " AND event_key = $3") ORDER BY created_at DESC, channel_id LIMIT $2
                """, binds
            ).compactMap(Self.channel)
        }
    }

    package func channel(appID: String, id: String) async throws -> Channel? {
        try await reading { session in
            try await session.query(
                "SELECT channel_id, environment, event_key, storage, created_at FROM channels WHERE app_id = $1 AND channel_id = $2",
                [.text(appID), .text(id)]
            ).first.flatMap(Self.channel)
        }
    }

    /// Forgets a channel; false when it was not recorded.
    package func deleteChannel(appID: String, id: String) async throws -> Bool {
        try await transaction { session in
            try await !session.query(
                "DELETE FROM channels WHERE app_id = $1 AND channel_id = $2 RETURNING 1", [.text(appID), .text(id)]
            ).isEmpty
        }
    }

    private static func channel(_ row: [Session.Value]) -> Channel? {
        guard row.count == 5, let id = row[0].text, let environment = row[1].text, let key = row[2].text,
            let storage = row[3].integer, let created = row[4].integer
        else { return nil }
        return Channel(
            id: id, environment: environment, eventKey: key, storage: Int(storage), createdAt: SQLText.date(created))
    }
}

/// The dashboard's view of a user's Live Activities.
extension ActivityRepository {
    /// One device of one of the user's activities, with the activity's state and the last
    /// push that went to the device (or to the activity's channel).
    package struct UserActivity: Sendable, Equatable {
        package var activityID: String
        package var attributesType: String?
        package var status: String
        package var contentState: String?
        package var deviceID: String
        package var deviceStatus: String
        package var deviceReason: String?
        package var lastPush: (event: String, status: String, priority: Int64, reason: String?, at: Date)?

        package static func == (lhs: UserActivity, rhs: UserActivity) -> Bool {
            lhs.activityID == rhs.activityID && lhs.deviceID == rhs.deviceID && lhs.status == rhs.status
                && lhs.deviceStatus == rhs.deviceStatus && lhs.lastPush?.at == rhs.lastPush?.at
        }
    }

    /// The activities on `userID`'s devices, the most recently changed first, at most `limit` rows.
    package func userActivities(appID: String, userID: String, limit: Int) async throws -> [UserActivity] {
        try await reading { session in
            let last = { (column: String) in
                """
                (SELECT p.\(column) FROM activity_pushes p WHERE p.app_id = x.app_id AND p.activity_id = x.activity_id
                    AND (p.device_id = x.device_id OR p.device_id IS NULL) ORDER BY p.id DESC LIMIT 1)
                """
            }
            return try await session.query(
                """
                SELECT a.activity_id, a.attributes_type, a.status, a.content_state, x.device_id, x.status, x.reason,
                    \(last("event")), \(last("status")), \(last("priority")), \(last("reason")), \(last("created_at"))
                FROM activity_devices x
                JOIN devices d ON d.app_id = x.app_id AND d.device_id = x.device_id
                JOIN activities a ON a.app_id = x.app_id AND a.activity_id = x.activity_id
                WHERE x.app_id = $1 AND d.user_id = $2
                ORDER BY a.updated_at DESC, a.activity_id, x.device_id LIMIT $3
                """, [.text(appID), .text(userID), .integer(Int64(limit))]
            ).compactMap { row in
                guard row.count == 12, let id = row[0].text, let status = row[2].text, let device = row[4].text,
                    let deviceStatus = row[5].text
                else { return nil }
                var activity = UserActivity(
                    activityID: id, attributesType: row[1].text, status: status, contentState: row[3].text,
                    deviceID: device, deviceStatus: deviceStatus, deviceReason: row[6].text, lastPush: nil)
                if let event = row[7].text, let pushStatus = row[8].text, let priority = row[9].integer,
                    let at = row[11].integer
                {
                    activity.lastPush = (event, pushStatus, priority, row[10].text, SQLText.date(at))
                }
                return activity
            }
        }
    }
}
