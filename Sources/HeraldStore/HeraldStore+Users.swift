package import Foundation
import HeraldCore
import SQLKit

/// A user's state: time zone, locale, free attributes and notification preferences.
package struct UserRecord: Sendable, Hashable {
    package var userID: String
    package var timeZone: String?
    package var locale: String?
    /// A JSON object.
    package var attributes: Data
    /// A JSON object (`UserPreferences` in HeraldServer).
    package var preferences: Data
    package var createdAt: Date
    package var updatedAt: Date
}

extension UserRepository {
    /// Creates or updates a user's time zone, locale and attributes; preferences are kept.
    package func upsertUser(
        appID: String, userID: String, timeZone: String?, locale: String?, attributes: Data
    ) async throws -> UserRecord {
        try await transaction { session in
            let now = nowMilliseconds
            try await session.sql.raw(
                """
                INSERT INTO users (app_id, user_id, time_zone, locale, attributes, preferences, created_at, updated_at)
                VALUES (\(bind: appID), \(bind: userID), \(bind: timeZone), \(bind: locale), \(bind: String(decoding: attributes, as: UTF8.self)), '{}', \(bind: now), \(bind: now))
                ON CONFLICT (app_id, user_id) DO UPDATE SET time_zone = excluded.time_zone, locale = excluded.locale,
                    attributes = excluded.attributes, updated_at = excluded.updated_at
                """
            ).run()
            return try await fetchUser(appID: appID, userID: userID, session)!
        }
    }

    /// Replaces a user's preferences, creating the user if needed.
    package func setPreferences(appID: String, userID: String, preferences: Data) async throws -> UserRecord {
        try await transaction { session in
            let now = nowMilliseconds
            let text = String(decoding: preferences, as: UTF8.self)
            try await session.sql.raw(
                """
                INSERT INTO users (app_id, user_id, attributes, preferences, created_at, updated_at)
                VALUES (\(bind: appID), \(bind: userID), '{}', \(bind: text), \(bind: now), \(bind: now))
                ON CONFLICT (app_id, user_id) DO UPDATE SET preferences = excluded.preferences, updated_at = excluded.updated_at
                """
            ).run()
            return try await fetchUser(appID: appID, userID: userID, session)!
        }
    }

    /// A user, if known.
    package func user(appID: String, userID: String) async throws -> UserRecord? {
        try await exclusive { session in try await fetchUser(appID: appID, userID: userID, session) }
    }

    /// Several users at once (the dispatcher's policy step), by user id; unknown ones are absent.
    package func users(appID: String, ids: [String]) async throws -> [String: UserRecord] {
        guard !ids.isEmpty else { return [:] }
        // On the reading connection: the dispatcher's batches do not wait for the writer. One
        // statement, the ids one bound JSON array: a batch of 5,000 users took 44 ms as ten
        // 500-value IN lists decoded through SQLKit.
        return try await reading { session in
            let rows = try await session.query(
                "SELECT \(Self.userColumns) FROM users WHERE app_id = $1 AND user_id IN \(database.outbox.jsonList("$2"))",
                [.text(appID), .text(SQLText.jsonArray(strings: ids))])
            var result: [String: UserRecord] = [:]
            result.reserveCapacity(rows.count)
            for columns in rows {
                let user = try Self.user(from: columns)
                result[user.userID] = user
            }
            return result
        }
    }

    private func fetchUser(appID: String, userID: String, _ session: Session) async throws -> UserRecord? {
        try await session.query(
            "SELECT \(Self.userColumns) FROM users WHERE app_id = $1 AND user_id = $2", [.text(appID), .text(userID)]
        )
        .first.map(Self.user(from:))
    }

    /// What `user(from:)` reads, in its order.
    private static let userColumns = "user_id, time_zone, locale, attributes, preferences, created_at, updated_at"

    private static func user(from columns: [Session.Value]) throws -> UserRecord {
        guard columns.count == 7, let userID = columns[0].text, let attributes = columns[3].text,
            let preferences = columns[4].text,
            let created = columns[5].integer, let updated = columns[6].integer
        else { throw StoreError(.corrupt, "users: a row Herald cannot read") }
        return UserRecord(
            userID: userID, timeZone: columns[1].text, locale: columns[2].text, attributes: Data(attributes.utf8),
            preferences: Data(preferences.utf8), createdAt: SQLText.date(created),
            updatedAt: SQLText.date(updated))
    }
}
