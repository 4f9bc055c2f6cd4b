package import Foundation
import PostgresNIO
import SQLKit

extension DeviceRepository {
    private static let deviceColumns =
        "device_id, user_id, platform, token, environment, name, model, locale, time_zone, app_version, authorization_status, active, inactive_reason, inactive_since, created_at, updated_at"

    /// Registers or updates a device by `device_id`. A token held by another device moves to
    /// this one; a new token replaces the old; registering makes the device active again.
    /// Returns the stored device and whether it was new.
    ///
    /// - `rules.keepUserUnlessSameToken`: a `device_id` registered to another user moves to this
    ///   user only when the request presents the token the device holds (the same physical
    ///   device, e.g. a shared iPad); otherwise `StoreError(.conflict)` and nothing changes.
    /// - An empty `environment` keeps the stored one; a new device gets `rules.defaultEnvironment`.
    /// - More than `rules.maxDevicesPerUser` active devices deactivate the user's least recently
    ///   registered ones (`DeviceLimit`).
    package func upsertDevice(
        appID: String, _ device: DeviceRecord, rules: DeviceRegistrationRules = DeviceRegistrationRules()
    ) async throws -> (DeviceRecord, created: Bool) {
        try await transaction { session in
            let existing = try await session.sql.raw(
                "SELECT user_id, platform, token FROM devices WHERE app_id = \(bind: appID) AND device_id = \(bind: device.deviceID)"
            ).first()
            if rules.keepUserUnlessSameToken, let existing,
                try existing.decode(column: "user_id", as: String.self) != device.userID,
                try existing.decode(column: "platform", as: String.self) != device.platform
                    || existing.decode(column: "token", as: String.self) != device.token
            {
                throw StoreError(.conflict, "device_id is registered to another user")
            }
            try await writeDevices(appID: appID, [device], rules: rules, session)
            let stored = try await session.sql.raw(
                "SELECT \(unsafeRaw: Self.deviceColumns) FROM devices WHERE app_id = \(bind: appID) AND device_id = \(bind: device.deviceID)"
            ).first().map(Self.device(from:))
            guard let stored else { throw StoreError(.notFound, "device vanished during upsert") }
            return (stored, existing == nil)
        }
    }

    /// Upserts many devices in one transaction with multi-row statements; returns how many.
    package func importDevices(
        appID: String, _ devices: [DeviceRecord], rules: DeviceRegistrationRules = DeviceRegistrationRules()
    ) async throws -> Int {
        guard !devices.isEmpty else { return 0 }
        return try await transaction { session in
            try await writeDevices(appID: appID, devices, rules: rules, session)
            return devices.count
        }
    }

    /// Brings PostgreSQL's statistics of the devices table up to date (`ANALYZE`); nothing on
    /// SQLite. A bulk import that grows the table from a few rows to millions leaves the planner
    /// believing it is small, and it then filters the app's devices row by row instead of looking
    /// tokens up (42 ms per 500-row statement at 100,000 devices, growing with the table).
    package func refreshDeviceStatistics() async throws {
        guard dialect == .postgres else { return }
        try await exclusive { session in try await session.sql.raw("ANALYZE devices").run() }
    }

    /// Inside a transaction: frees the batch's tokens from other devices, then upserts the batch
    /// (any size; statements of `batchSize` rows).
    private func writeDevices(
        appID: String, _ devices: [DeviceRecord], rules: DeviceRegistrationRules, _ session: Session
    ) async throws {
        // Later rows win within a batch, like a sequence of single upserts would. Indices, not
        // copies: a record is ~400 bytes and a batch 10,000 of them.
        var last: [String: Int] = [:]
        last.reserveCapacity(devices.count)
        var order: [Int] = []
        for (index, device) in devices.enumerated() where last.updateValue(index, forKey: device.deviceID) == nil {
            order.append(index)
        }
        for position in order.indices { order[position] = last[devices[order[position]].deviceID]! }
        var tokenHolder: [DeviceTokenKey: Int] = [:]
        tokenHolder.reserveCapacity(order.count)
        for index in order { tokenHolder[DeviceTokenKey(devices[index])] = index }
        var unique: [DeviceRecord] = []
        unique.reserveCapacity(order.count)
        for index in order where tokenHolder[DeviceTokenKey(devices[index])] == index { unique.append(devices[index]) }
        // No environment given: keep the stored one, else the app's default.
        let unsetEnvironment = unique.filter { $0.environment.isEmpty }.map(\.deviceID)
        if !unsetEnvironment.isEmpty {
            var stored: [String: String] = [:]
            for chunk in unsetEnvironment.chunked(Self.batchSize) {
                for row in try await session.sql.raw(
                    "SELECT device_id, environment FROM devices WHERE app_id = \(bind: appID) AND device_id IN (\(binds: chunk))"
                ).all() {
                    stored[try row.decode(column: "device_id", as: String.self)] = try row.decode(
                        column: "environment", as: String.self)
                }
            }
            for index in unique.indices where unique[index].environment.isEmpty {
                unique[index].environment = stored[unique[index].deviceID] ?? rules.defaultEnvironment
            }
        }
        // In token order: each statement walks devices_token (the largest, most random index)
        // forward instead of all over it.
        unique.sort { ($0.platform, $0.token) < ($1.platform, $1.token) }
        // The batch's devices and the token each is given.
        var newToken: [String: String] = [:]
        for device in unique { newToken[device.deviceID] = device.token }
        // Who holds the batch's tokens now: a device outside the batch loses its token and is
        // removed; a device of the batch that holds a token another row of it takes (Z takes
        // X's token while X gets a new one) parks its own on a unique placeholder until the upsert.
        // A device that keeps its token is left alone (a re-import writes each row once).
        var removed: [String] = []
        var parked: [String] = []
        for platform in Set(unique.map(\.platform)).sorted() {
            let tokens = Array(unique.lazy.filter({ $0.platform == platform }).map(\.token))
            for (holder, held) in try await tokenHolders(appID: appID, platform: platform, tokens, session) {
                guard let token = newToken[holder] else {
                    removed.append(holder)
                    continue
                }
                if token != held { parked.append(holder) }
            }
        }
        for chunk in removed.chunked(Self.batchSize) {
            try await session.sql.raw(
                "DELETE FROM devices WHERE app_id = \(bind: appID) AND device_id IN (\(binds: chunk))"
            ).run()
        }
        for chunk in parked.chunked(Self.batchSize) {
            try await session.sql.raw(
                "UPDATE devices SET token = 'moving:' || device_id WHERE app_id = \(bind: appID) AND device_id IN (\(binds: chunk))"
            ).run()
        }
        let now = nowMilliseconds
        for chunk in unique.chunked(
            dialect == .postgres ? OutboxRepository.postgresResultRowsPerStatement : Self.batchSize)
        {
            try await upsertRows(appID: appID, chunk, now: now, session)
        }
        if let limit = rules.maxDevicesPerUser {
            for users in Array(Set(unique.map(\.userID))).chunked(Self.batchSize) {
                try await enforceDeviceLimit(appID: appID, users: users, limit: limit, now: now, session)
            }
        }
    }

    /// The devices holding any of `tokens` (device id, token), `batchSize` tokens per statement.
    /// (One PostgreSQL statement over a 15,000-token array was slower: 21.0 s vs 19.7 s for a
    /// million-line import.)
    private func tokenHolders(appID: String, platform: String, _ tokens: [String], _ session: Session) async throws
        -> [(String, String)]
    {
        var holders: [(String, String)] = []
        for chunk in tokens.chunked(Self.batchSize) {
            let list = SQLText.placeholders(chunk.count, from: 3)
            let rows = try await session.query(
                "SELECT device_id, token FROM devices WHERE app_id = $1 AND platform = $2 AND token IN (\(list))",
                [.text(appID), .text(platform)] + chunk.map(Session.Value.text))
            for row in rows { if let id = row[0].text, let token = row[1].text { holders.append((id, token)) } }
        }
        return holders
    }

    /// The columns an upsert writes from a record, in `deviceColumns` order (nil is NULL).
    private static let upsertColumns: [(name: String, value: @Sendable (DeviceRecord) -> String?)] = [
        ("device_id", { $0.deviceID }), ("user_id", { $0.userID }), ("platform", { $0.platform }),
        ("token", { $0.token }),
        ("environment", { $0.environment }), ("name", { $0.name }), ("model", { $0.model }), ("locale", { $0.locale }),
        ("time_zone", { $0.timeZone }), ("app_version", { $0.appVersion }),
        ("authorization_status", { $0.authorizationStatus }),
    ]

    /// One multi-row upsert, without SQLKit's per-value encoding: SQLite gets `VALUES` rows with
    /// positional binds (`batchSize` rows), PostgreSQL one statement over arrays (`unnest`, any
    /// number of rows; a bit mask per row marks the columns that are NULL).
    private func upsertRows(appID: String, _ devices: [DeviceRecord], now: Int64, _ session: Session) async throws {
        let columns = Self.upsertColumns
        var sql = "INSERT INTO devices (app_id, \(Self.deviceColumns)) "
        switch session.raw {
        case .sqlite:
            var binds: [Session.Value] = [.text(appID), .integer(now)]
            binds.reserveCapacity(2 + devices.count * columns.count)
            sql.reserveCapacity(sql.utf8.count + devices.count * 90 + 1_000)
            sql += "VALUES "
            for (index, device) in devices.enumerated() {
                sql += index == 0 ? "($1" : ", ($1"
                for column in columns {
                    binds.append(column.value(device).map(Session.Value.text) ?? .null)
                    sql += ", $\(binds.count)"
                }
                sql += ", 1, NULL, NULL, $2, $2)"
            }
            _ = try await session.query(sql + Self.deviceUpsertConflict, binds)
        case .postgres(let connection):
            var arrays = Array(repeating: [String](), count: columns.count)
            for index in arrays.indices { arrays[index].reserveCapacity(devices.count) }
            var nulls: [Int64] = []
            nulls.reserveCapacity(devices.count)
            for device in devices {
                var mask: Int64 = 0
                for (index, column) in columns.enumerated() {
                    let value = column.value(device)
                    if value == nil { mask |= 1 << index }
                    arrays[index].append(value ?? "")
                }
                nulls.append(mask)
            }
            var bindings = PostgresBindings(capacity: columns.count + 3)
            bindings.append(appID)
            bindings.append(now)
            for array in arrays { bindings.append(array) }
            bindings.append(nulls)
            sql += """
                SELECT $1, \(columns.enumerated().map { "CASE WHEN v.nulls & \(1 << $0.offset) = 0 THEN v.\($0.element.name) END" }.joined(separator: ", ")), \
                1, NULL::text, NULL::bigint, $2, $2
                FROM unnest(\(columns.indices.map { "$\($0 + 3)::text[]" }.joined(separator: ", ")), $\(columns.count + 3)::bigint[])
                AS v(\(columns.map(\.name).joined(separator: ", ")), nulls)
                """
            _ = try await Session.query(connection, sql + Self.deviceUpsertConflict, bindings)
        }
    }

    /// The upsert's conflict clause. A device that changes user keeps none of the old user's details.
    private static let deviceUpsertConflict = """

        ON CONFLICT (app_id, device_id) DO UPDATE SET
            platform = excluded.platform, token = excluded.token, environment = excluded.environment,
            name = \(keptForSameUser("name")), model = \(keptForSameUser("model")),
            locale = \(keptForSameUser("locale")), time_zone = \(keptForSameUser("time_zone")),
            app_version = \(keptForSameUser("app_version")),
            authorization_status = \(keptForSameUser("authorization_status")),
            user_id = excluded.user_id,
            active = 1, inactive_reason = NULL, inactive_since = NULL, updated_at = excluded.updated_at
        """

    /// Deactivates the least recently registered active devices of `users` beyond `limit` each.
    private func enforceDeviceLimit(appID: String, users: [String], limit: Int, now: Int64, _ session: Session)
        async throws
    {
        try await session.sql.raw(
            """
            UPDATE devices SET active = 0, inactive_reason = 'DeviceLimit', inactive_since = \(bind: now)
            WHERE app_id = \(bind: appID) AND active = 1 AND device_id IN (
                SELECT device_id FROM (
                    SELECT device_id, ROW_NUMBER() OVER (
                        PARTITION BY user_id ORDER BY updated_at DESC, created_at DESC, device_id DESC) AS position
                    FROM devices WHERE app_id = \(bind: appID) AND active = 1 AND user_id IN (\(binds: users))
                ) AS ranked WHERE position > \(bind: limit))
            """
        ).run()
        // Rows beyond the limit that have been inactive for `inactiveDeviceLifetime` are deleted:
        // a user registering device after device cannot grow the table without bound.
        try await session.sql.raw(
            """
            DELETE FROM devices
            WHERE app_id = \(bind: appID) AND active = 0 AND inactive_since <= \(bind: now - Self.inactiveDeviceLifetime) AND device_id IN (
                SELECT device_id FROM (
                    SELECT device_id, ROW_NUMBER() OVER (
                        PARTITION BY user_id ORDER BY updated_at DESC, created_at DESC, device_id DESC) AS position
                    FROM devices WHERE app_id = \(bind: appID) AND user_id IN (\(binds: users))
                ) AS ranked WHERE position > \(bind: limit))
            """
        ).run()
    }

    /// How long a device beyond its user's `max_devices_per_user` stays inactive before it is
    /// deleted (30 days, in milliseconds).
    static let inactiveDeviceLifetime: Int64 = 30 * 86_400_000

    /// `COALESCE(excluded.X, devices.X)` while the device stays with its user; the new value only
    /// when it moves to another user. (SQLite evaluates SET against the row before the update.)
    private static func keptForSameUser(_ column: String) -> String {
        "CASE WHEN devices.user_id = excluded.user_id THEN COALESCE(excluded.\(column), devices.\(column)) ELSE excluded.\(column) END"
    }

    /// Whether a device was removed, and if not why.
    package enum DeviceRemoval: Sendable, Equatable {
        case removed
        case notFound
        /// The device is registered to another user than the one the caller speaks for.
        case ownedByAnotherUser
    }

    /// Removes a device (logout), only when it belongs to `ownedBy` if that is given. Its
    /// queued deliveries fail as `DeviceUnregistered` when claimed.
    package func removeDevice(appID: String, deviceID: String, ownedBy userID: String?) async throws -> DeviceRemoval {
        try await transaction { session in
            guard
                let owner = try await session.sql.raw(
                    "SELECT user_id FROM devices WHERE app_id = \(bind: appID) AND device_id = \(bind: deviceID)"
                ).first()?.decode(column: "user_id", as: String.self)
            else { return .notFound }
            if let userID, owner != userID { return .ownedByAnotherUser }
            try await session.sql.raw(
                "DELETE FROM devices WHERE app_id = \(bind: appID) AND device_id = \(bind: deviceID)"
            ).run()
            // Its Live Activity push-to-start tokens go with it.
            try await session.sql.raw(
                "DELETE FROM activity_start_tokens WHERE app_id = \(bind: appID) AND device_id = \(bind: deviceID)"
            ).run()
            return .removed
        }
    }

    /// Makes devices active again that were deactivated for `reason` (at or after `since`, when
    /// given): undoes deactivations a misconfiguration caused (`herald devices reactivate`).
    /// Returns how many devices were reactivated.
    package func reactivateDevices(appID: String, reason: String, since: Date?) async throws -> Int {
        let now = Self.milliseconds(self.now)
        let from = since.map { Self.milliseconds($0) } ?? Int64.min
        return try await exclusive { session in
            try await session.sql.raw(
                """
                UPDATE devices SET active = 1, inactive_reason = NULL, inactive_since = NULL, updated_at = \(bind: now)
                WHERE app_id = \(bind: appID) AND active = 0 AND inactive_reason = \(bind: reason) AND updated_at >= \(bind: from)
                RETURNING device_id
                """
            ).all().count
        }
    }

    /// Removes a device (logout). Its queued deliveries fail as `DeviceUnregistered` when claimed.
    package func deleteDevice(appID: String, deviceID: String) async throws -> Bool {
        try await exclusive { session in
            let rows = try await session.sql.raw(
                "DELETE FROM devices WHERE app_id = \(bind: appID) AND device_id = \(bind: deviceID) RETURNING device_id"
            ).all()
            return !rows.isEmpty
        }
    }

    /// A user's devices, active and inactive, oldest first: at most `limit`, read where it holds
    /// up no writer (a reading connection on SQLite).
    package func devices(appID: String, userID: String, limit: Int = 1_000) async throws -> [DeviceRecord] {
        try await devicePage(appID: appID, userID: userID, limit: limit, after: nil).devices
    }

    /// Where a page of a user's devices continues: after this registration time and device id.
    package struct DeviceCursor: Sendable, Equatable {
        package var createdAt: Int64
        package var deviceID: String

        package init(createdAt: Int64, deviceID: String) {
            self.createdAt = createdAt
            self.deviceID = deviceID
        }
    }

    /// One page of a user's devices, oldest first, and where the next starts (nil: none).
    package func devicePage(
        appID: String, userID: String, limit: Int, after: DeviceCursor?
    ) async throws -> (devices: [DeviceRecord], next: DeviceCursor?) {
        let limit = max(1, limit)
        let rows = try await reading { session in
            let start =
                after.map {
                    SQLQueryString(
                        "AND (created_at > \(bind: $0.createdAt) OR (created_at = \(bind: $0.createdAt) AND device_id > \(bind: $0.deviceID)))"
                    )
                }
                ?? SQLQueryString("")
            return try await session.sql.raw(
                """
                SELECT \(unsafeRaw: Self.deviceColumns) FROM devices WHERE app_id = \(bind: appID) AND user_id = \(bind: userID) \(start)
                ORDER BY created_at, device_id LIMIT \(bind: limit + 1)
                """
            ).all().map(Self.device(from:))
        }
        let page = Array(rows.prefix(limit))
        let next =
            rows.count > limit
            ? page.last.map { DeviceCursor(createdAt: Self.milliseconds($0.createdAt), deviceID: $0.deviceID) } : nil
        return (page, next)
    }

    /// One device.
    package func device(appID: String, deviceID: String) async throws -> DeviceRecord? {
        try await exclusive { session in
            try await session.sql.raw(
                "SELECT \(unsafeRaw: Self.deviceColumns) FROM devices WHERE app_id = \(bind: appID) AND device_id = \(bind: deviceID)"
            ).first().map(Self.device(from:))
        }
    }

    /// How many devices an app has.
    package func deviceCount(appID: String) async throws -> Int {
        try await exclusive { session in
            try await session.sql.raw("SELECT COUNT(*) AS n FROM devices WHERE app_id = \(bind: appID)").first()?
                .decode(column: "n", as: Int.self) ?? 0
        }
    }

    static func device(from row: any SQLRow) throws -> DeviceRecord {
        func date(_ column: String) throws -> Date? {
            try row.decode(column: column, as: Int64?.self).map { Date(timeIntervalSince1970: Double($0) / 1000) }
        }
        return DeviceRecord(
            deviceID: try row.decode(column: "device_id", as: String.self),
            userID: try row.decode(column: "user_id", as: String.self),
            platform: try row.decode(column: "platform", as: String.self),
            token: try row.decode(column: "token", as: String.self),
            environment: try row.decode(column: "environment", as: String.self),
            name: try row.decode(column: "name", as: String?.self),
            model: try row.decode(column: "model", as: String?.self),
            locale: try row.decode(column: "locale", as: String?.self),
            timeZone: try row.decode(column: "time_zone", as: String?.self),
            appVersion: try row.decode(column: "app_version", as: String?.self),
            authorizationStatus: try row.decode(column: "authorization_status", as: String?.self),
            active: try row.decode(column: "active", as: Int.self) != 0,
            inactiveReason: try row.decode(column: "inactive_reason", as: String?.self),
            inactiveSince: try date("inactive_since"),
            createdAt: try date("created_at") ?? Date(timeIntervalSince1970: 0),
            updatedAt: try date("updated_at") ?? Date(timeIntervalSince1970: 0))
    }
}

/// A device's (platform, token): at most one device of an app holds it.
private struct DeviceTokenKey: Hashable {
    let platform: String
    let token: String
    init(_ device: DeviceRecord) { (platform, token) = (device.platform, device.token) }
}

/// What a registration may do beyond writing the device (the app's configuration decides).
package struct DeviceRegistrationRules: Sendable {
    /// The environment of a new device registered without one.
    package var defaultEnvironment = "production"
    /// Deactivate a user's least recently registered devices beyond this many active ones.
    package var maxDevicesPerUser: Int?
    /// A device registered to another user moves only with the token it holds (client calls).
    package var keepUserUnlessSameToken = false

    package init(
        defaultEnvironment: String = "production", maxDevicesPerUser: Int? = nil, keepUserUnlessSameToken: Bool = false
    ) {
        self.defaultEnvironment = defaultEnvironment
        self.maxDevicesPerUser = maxDevicesPerUser
        self.keepUserUnlessSameToken = keepUserUnlessSameToken
    }
}
