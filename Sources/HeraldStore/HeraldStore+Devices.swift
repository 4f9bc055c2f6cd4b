package import Foundation
import SQLKit

extension HeraldStore {
    private static let deviceColumns =
        "device_id, user_id, platform, token, environment, name, model, locale, time_zone, app_version, authorization_status, active, inactive_reason, inactive_since, created_at, updated_at"

    /// Registers or updates a device by `device_id` (U2). A token held by another device moves to
    /// this one (K1); a new token replaces the old (K2); registering makes the device active again.
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
            var start = 0
            while start < devices.count {
                let end = min(devices.count, start + Self.batchSize)
                try await writeDevices(appID: appID, Array(devices[start..<end]), rules: rules, session)
                start = end
            }
            return devices.count
        }
    }

    /// Inside a transaction: frees the batch's tokens from other devices, then upserts the batch.
    private func writeDevices(appID: String, _ devices: [DeviceRecord], rules: DeviceRegistrationRules, _ session: Session) async throws {
        // Later rows win within a batch, like a sequence of single upserts would.
        var byID: [String: DeviceRecord] = [:]
        var order: [String] = []
        for device in devices {
            if byID.updateValue(device, forKey: device.deviceID) == nil { order.append(device.deviceID) }
        }
        var byToken: [String: String] = [:]
        for id in order { byToken[byID[id]!.platform + ":" + byID[id]!.token] = id }
        var unique = order.compactMap { id -> DeviceRecord? in
            let device = byID[id]!
            return byToken[device.platform + ":" + device.token] == id ? device : nil
        }
        // No environment given: keep the stored one, else the app's default.
        let unsetEnvironment = unique.filter { $0.environment.isEmpty }.map(\.deviceID)
        if !unsetEnvironment.isEmpty {
            var stored: [String: String] = [:]
            for row in try await session.sql.raw(
                "SELECT device_id, environment FROM devices WHERE app_id = \(bind: appID) AND device_id IN (\(binds: unsetEnvironment))"
            ).all() {
                stored[try row.decode(column: "device_id", as: String.self)] = try row.decode(column: "environment", as: String.self)
            }
            for index in unique.indices where unique[index].environment.isEmpty {
                unique[index].environment = stored[unique[index].deviceID] ?? rules.defaultEnvironment
            }
        }
        let now = nowMilliseconds
        let pairs = unique.map { SQLQueryString("(\(bind: $0.platform), \(bind: $0.token))") }.joined(separator: ", ")
        let ids = unique.map(\.deviceID)
        // Devices outside the batch that hold its tokens lose them (K1) ...
        switch dialect {
        case .sqlite:
            try await session.sql.raw(
                """
                DELETE FROM devices WHERE app_id = \(bind: appID)
                AND (platform, token) IN (VALUES \(pairs))
                AND device_id NOT IN (\(binds: ids))
                """
            ).run()
        case .postgres:
            // A join, so that PostgreSQL looks each pair up in devices_token (the IN form scanned
            // the whole table per batch: 8.5 of the 17 s a 100k import took).
            try await session.sql.raw(
                """
                DELETE FROM devices d USING (VALUES \(pairs)) AS v(platform, token)
                WHERE d.app_id = \(bind: appID) AND d.platform = v.platform AND d.token = v.token
                AND d.device_id NOT IN (\(binds: ids))
                """
            ).run()
        }
        // ... and devices of the batch that hold a token another row of it takes (Z takes X's
        // token while X gets a new one) park theirs on a unique placeholder until the upsert.
        try await session.sql.raw(
            """
            UPDATE devices SET token = 'moving:' || device_id WHERE app_id = \(bind: appID)
            AND (platform, token) IN (VALUES \(pairs))
            AND device_id IN (\(binds: ids))
            """
        ).run()
        let rows = unique.map { device -> SQLQueryString in
            let status: String? = device.authorizationStatus
            return """
                (\(bind: appID), \(bind: device.deviceID), \(bind: device.userID), \(bind: device.platform), \
                \(bind: device.token), \(bind: device.environment), \(bind: device.name), \(bind: device.model), \
                \(bind: device.locale), \(bind: device.timeZone), \(bind: device.appVersion), \(bind: status), \
                1, NULL, NULL, \(bind: now), \(bind: now))
                """
        }.joined(separator: ", ")
        // A device that changes user keeps none of the old user's details.
        try await session.sql.raw(
            """
            INSERT INTO devices (app_id, \(unsafeRaw: Self.deviceColumns)) VALUES \(rows)
            ON CONFLICT (app_id, device_id) DO UPDATE SET
                platform = excluded.platform, token = excluded.token, environment = excluded.environment,
                name = \(unsafeRaw: Self.keptForSameUser("name")), model = \(unsafeRaw: Self.keptForSameUser("model")),
                locale = \(unsafeRaw: Self.keptForSameUser("locale")), time_zone = \(unsafeRaw: Self.keptForSameUser("time_zone")),
                app_version = \(unsafeRaw: Self.keptForSameUser("app_version")),
                authorization_status = \(unsafeRaw: Self.keptForSameUser("authorization_status")),
                user_id = excluded.user_id,
                active = 1, inactive_reason = NULL, inactive_since = NULL, updated_at = excluded.updated_at
            """
        ).run()
        if let limit = rules.maxDevicesPerUser {
            let users = Array(Set(unique.map(\.userID)))
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
        }
    }

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

    /// Removes a device (logout, K1), only when it belongs to `ownedBy` if that is given. Its
    /// queued deliveries fail as `DeviceUnregistered` when claimed.
    package func removeDevice(appID: String, deviceID: String, ownedBy userID: String?) async throws -> DeviceRemoval {
        try await transaction { session in
            guard let owner = try await session.sql.raw(
                "SELECT user_id FROM devices WHERE app_id = \(bind: appID) AND device_id = \(bind: deviceID)"
            ).first()?.decode(column: "user_id", as: String.self) else { return .notFound }
            if let userID, owner != userID { return .ownedByAnotherUser }
            try await session.sql.raw("DELETE FROM devices WHERE app_id = \(bind: appID) AND device_id = \(bind: deviceID)").run()
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

    /// Removes a device (logout, K1). Its queued deliveries fail as `DeviceUnregistered` when claimed.
    package func deleteDevice(appID: String, deviceID: String) async throws -> Bool {
        try await exclusive { session in
            let rows = try await session.sql.raw(
                "DELETE FROM devices WHERE app_id = \(bind: appID) AND device_id = \(bind: deviceID) RETURNING device_id"
            ).all()
            return !rows.isEmpty
        }
    }

    /// A user's devices, active and inactive, oldest first.
    package func devices(appID: String, userID: String) async throws -> [DeviceRecord] {
        try await exclusive { session in
            try await session.sql.raw(
                "SELECT \(unsafeRaw: Self.deviceColumns) FROM devices WHERE app_id = \(bind: appID) AND user_id = \(bind: userID) ORDER BY created_at, device_id"
            ).all().map(Self.device(from:))
        }
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

/// What a registration may do beyond writing the device (the app's configuration decides).
package struct DeviceRegistrationRules: Sendable {
    /// The environment of a new device registered without one.
    package var defaultEnvironment = "production"
    /// Deactivate a user's least recently registered devices beyond this many active ones.
    package var maxDevicesPerUser: Int?
    /// A device registered to another user moves only with the token it holds (client calls).
    package var keepUserUnlessSameToken = false

    package init(defaultEnvironment: String = "production", maxDevicesPerUser: Int? = nil, keepUserUnlessSameToken: Bool = false) {
        self.defaultEnvironment = defaultEnvironment
        self.maxDevicesPerUser = maxDevicesPerUser
        self.keepUserUnlessSameToken = keepUserUnlessSameToken
    }
}
