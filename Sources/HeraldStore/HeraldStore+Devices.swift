import Foundation
import SQLKit

extension HeraldStore {
    private static let deviceColumns =
        "device_id, user_id, platform, token, environment, name, model, locale, time_zone, app_version, authorization_status, active, inactive_reason, inactive_since, created_at, updated_at"

    /// Registers or updates a device by `device_id` (U2). A token held by another device moves to
    /// this one (K1); a new token replaces the old (K2); registering makes the device active again.
    /// Returns the stored device and whether it was new.
    package func upsertDevice(appID: String, _ device: DeviceRecord) async throws -> (DeviceRecord, created: Bool) {
        try await transaction {
            let existed = try await database.raw(
                "SELECT 1 AS one FROM devices WHERE app_id = \(bind: appID) AND device_id = \(bind: device.deviceID)"
            ).first() != nil
            try await writeDevices(appID: appID, [device])
            let stored = try await database.raw(
                "SELECT \(unsafeRaw: Self.deviceColumns) FROM devices WHERE app_id = \(bind: appID) AND device_id = \(bind: device.deviceID)"
            ).first().map(Self.device(from:))
            guard let stored else { throw StoreError(.notFound, "device vanished during upsert") }
            return (stored, !existed)
        }
    }

    /// Upserts many devices in one transaction with multi-row statements; returns how many.
    package func importDevices(appID: String, _ devices: [DeviceRecord]) async throws -> Int {
        guard !devices.isEmpty else { return 0 }
        return try await transaction {
            var start = 0
            while start < devices.count {
                let end = min(devices.count, start + Self.batchSize)
                try await writeDevices(appID: appID, Array(devices[start..<end]))
                start = end
            }
            return devices.count
        }
    }

    /// Inside a transaction: frees the batch's tokens from other devices, then upserts the batch.
    private func writeDevices(appID: String, _ devices: [DeviceRecord]) async throws {
        // Later rows win within a batch, like a sequence of single upserts would.
        var byID: [String: DeviceRecord] = [:]
        var order: [String] = []
        for device in devices {
            if byID.updateValue(device, forKey: device.deviceID) == nil { order.append(device.deviceID) }
        }
        var byToken: [String: String] = [:]
        for id in order { byToken[byID[id]!.platform + ":" + byID[id]!.token] = id }
        let unique = order.compactMap { id -> DeviceRecord? in
            let device = byID[id]!
            return byToken[device.platform + ":" + device.token] == id ? device : nil
        }
        let now = nowMilliseconds
        let pairs = unique.map { SQLQueryString("(\(bind: $0.platform), \(bind: $0.token))") }.joined(separator: ", ")
        try await database.raw(
            """
            DELETE FROM devices WHERE app_id = \(bind: appID)
            AND (platform, token) IN (VALUES \(pairs))
            AND device_id NOT IN (\(binds: unique.map(\.deviceID)))
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
        try await database.raw(
            """
            INSERT INTO devices (app_id, \(unsafeRaw: Self.deviceColumns)) VALUES \(rows)
            ON CONFLICT (app_id, device_id) DO UPDATE SET
                user_id = excluded.user_id, platform = excluded.platform, token = excluded.token,
                environment = excluded.environment,
                name = COALESCE(excluded.name, devices.name), model = COALESCE(excluded.model, devices.model),
                locale = COALESCE(excluded.locale, devices.locale), time_zone = COALESCE(excluded.time_zone, devices.time_zone),
                app_version = COALESCE(excluded.app_version, devices.app_version),
                authorization_status = COALESCE(excluded.authorization_status, devices.authorization_status),
                active = 1, inactive_reason = NULL, inactive_since = NULL, updated_at = excluded.updated_at
            """
        ).run()
    }

    /// Removes a device (logout, K1). Its queued deliveries fail as `DeviceUnregistered` when claimed.
    package func deleteDevice(appID: String, deviceID: String) async throws -> Bool {
        try await exclusive {
            let rows = try await database.raw(
                "DELETE FROM devices WHERE app_id = \(bind: appID) AND device_id = \(bind: deviceID) RETURNING device_id"
            ).all()
            return !rows.isEmpty
        }
    }

    /// A user's devices, active and inactive, oldest first.
    package func devices(appID: String, userID: String) async throws -> [DeviceRecord] {
        try await exclusive {
            try await database.raw(
                "SELECT \(unsafeRaw: Self.deviceColumns) FROM devices WHERE app_id = \(bind: appID) AND user_id = \(bind: userID) ORDER BY created_at, device_id"
            ).all().map(Self.device(from:))
        }
    }

    /// One device.
    package func device(appID: String, deviceID: String) async throws -> DeviceRecord? {
        try await exclusive {
            try await database.raw(
                "SELECT \(unsafeRaw: Self.deviceColumns) FROM devices WHERE app_id = \(bind: appID) AND device_id = \(bind: deviceID)"
            ).first().map(Self.device(from:))
        }
    }

    /// How many devices an app has.
    package func deviceCount(appID: String) async throws -> Int {
        try await exclusive {
            try await database.raw("SELECT COUNT(*) AS n FROM devices WHERE app_id = \(bind: appID)").first()?
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
