package import Foundation
package import HeraldCore

/// The engagement loop: opens reported by devices, one per delivery however
/// often reported, and the counters per (catalog type, day of sending) that analytics read.
/// The counters are kept by a trigger on the notifications' counters (migration 16): every
/// path that counts a delivery — results, cancels, pages, opens — counts it per type too, in
/// the same transaction, and the analytics read a row per type and day, never the deliveries.
extension TrackRepository {
    /// A typed notification's analytics cohort, from its stored content: its catalog type and
    /// the day (UTC, days since 1970) it goes — when it was scheduled for, else `now`.
    static func cohort(_ content: Data, now: Int64) -> (type: String, day: Int64)? {
        struct Header: Decodable {
            struct Typed: Decodable {
                var type: String
                var test: Bool?
            }
            var typed: Typed?
            var deliverAt: Int64?
            enum CodingKeys: String, CodingKey {
                case typed
                case deliverAt = "deliver_at_ms"
            }
        }
        // A plain notification (most single sends) is not decoded at all.
        guard content.range(of: Self.typedKey) != nil,
            let header = try? JSONDecoder().decode(Header.self, from: content),
            let type = header.typed?.type,
            header.typed?.test != true  // a test send is not in its type's figures
        else { return nil }
        return (type, max(header.deliverAt ?? now, 0) / Self.dayMilliseconds)
    }

    private static let typedKey = Data(#""typed""#.utf8)

    /// A delivery of an app, as the device reports' look-ups key it.
    struct DeliveryKey: Hashable, Sendable {
        var app: String
        var delivery: Int64
    }

    /// What an open is checked against: one delivery of an app, with its notification's type.
    package struct DeliveryReference: Sendable, Equatable {
        package var id: Int64
        package var notificationID: UUID
        package var deviceID: String
        package var userID: String?
        package var status: DeliveryStatus
        /// The notification's catalog type (nil for a notification not sent by type).
        package var type: String?
        /// The device's build now ("" and nil when the device is gone or reported none).
        package var platform = ""
        package var appVersion: String?
    }

    /// The delivery `deliveryID` of `appID`, nil when there is none (or not yet: the deliveries
    /// of a broadcast's or a step's page have their row once their provider answered).
    package func deliveryReference(appID: String, deliveryID: Int64) async throws -> DeliveryReference? {
        try await reading { session in
            guard
                let row = try await session.query(
                    """
                    SELECT d.notification_id, d.device_id, d.user_id, d.status, n.type, v.platform, v.app_version
                    FROM deliveries d JOIN notifications n ON n.id = d.notification_id
                    LEFT JOIN devices v ON v.app_id = d.app_id AND v.device_id = d.device_id
                    WHERE d.id = $1 AND d.app_id = $2
                    """, [.integer(deliveryID), .text(appID)]
                ).first, row.count == 7,
                let notification = row[0].text.flatMap(UUID.init(uuidString:)), let device = row[1].text,
                let status = row[3].text.flatMap(DeliveryStatus.init(rawValue:))
            else { return nil }
            return DeliveryReference(
                id: deliveryID, notificationID: notification, deviceID: device, userID: row[2].text, status: status,
                type: row[4].text, platform: row[5].text ?? "", appVersion: row[6].text)
        }
    }

    /// The `app.opened` event an open emits, prepared before its transaction.
    package struct OpenEvent: Sendable {
        package var id: UUID
        package var userID: String
        package var data: String
        package var effects: DeviceRepository.EventEffects
        package var badgePush: BadgePush
        package init(
            id: UUID, userID: String, data: String, effects: DeviceRepository.EventEffects, badgePush: BadgePush
        ) {
            self.id = id
            self.userID = userID
            self.data = data
            self.effects = effects
            self.badgePush = badgePush
        }
    }

    /// What recording an open did.
    package struct OpenRecorded: Sendable, Equatable {
        /// True the first time this delivery's open is reported: it counted.
        package var counted: Bool
        /// How often it has been reported, this time included.
        package var reports: Int64
        /// The action of the first report (what counted).
        package var action: String
        /// The `app.opened` event's id (the first report's), and the notifications its triggers sent.
        package var eventID: String?
        package var notifications: [String]

        package init(counted: Bool, reports: Int64, action: String, eventID: String?, notifications: [String]) {
            self.counted = counted
            self.reports = reports
            self.action = action
            self.eventID = eventID
            self.notifications = notifications
        }
    }

    /// Records an open of `delivery` durably: the first report of a delivery counts (its
    /// notification's `opened_count`, and so its type's day), later ones only add to `reports`.
    /// The first also stores `event` (`app.opened`) and applies its triggers; the event's
    /// idempotency key is the delivery's, so it is stored once however often reported. On
    /// SQLite the opens that arrive within `openLinger` of each other share one transaction and
    /// one fsync (`SQLiteCommitGroup`).
    package func recordOpen(
        appID: String, _ delivery: DeliveryReference, action: String, openedAt: Date, event: OpenEvent?
    ) async throws -> OpenRecorded {
        let body: @Sendable (Session) async throws -> OpenRecorded = { [self] session in
            let now = nowMilliseconds
            let row = try await session.query(
                """
                INSERT INTO opens (app_id, delivery_id, notification_id, device_id, user_id, action, opened_at, received_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                ON CONFLICT (app_id, delivery_id) DO UPDATE SET reports = opens.reports + 1
                RETURNING reports, action
                """,
                [
                    .text(appID), .integer(delivery.id), .text(delivery.notificationID.uuidString),
                    .text(delivery.deviceID),
                    delivery.userID.map { .text($0) } ?? .null, .text(action), .integer(Self.milliseconds(openedAt)),
                    .integer(now),
                ]
            ).first
            let reports = row?[0].integer ?? 1
            var recorded = OpenRecorded(
                counted: reports == 1, reports: reports, action: row?[1].text ?? action, eventID: nil, notifications: []
            )
            let eventKey = Self.openedEventKey(delivery.id)
            guard recorded.counted else {
                recorded.eventID = try await session.query(
                    "SELECT id FROM events WHERE app_id = $1 AND idempotency_key = $2", [.text(appID), .text(eventKey)]
                ).first?.first?.text
                return recorded
            }
            _ = try await session.query(
                "UPDATE notifications SET opened_count = opened_count + 1 WHERE id = $1",
                [.text(delivery.notificationID.uuidString)])
            if let event {
                let applied = try await database.devices.applyEvent(
                    appID: appID, id: event.id, userID: event.userID, name: Self.openedEvent, data: event.data,
                    occurredAt: openedAt,
                    idempotencyKey: eventKey, effects: event.effects, badgePush: event.badgePush, session)
                recorded.eventID = applied.id
                recorded.notifications = applied.notifications
            }
            // Last: the sums per type, day and build are rows every open of the type shares.
            var builds = BuildTally()
            builds.addOpened(delivery)
            try await addToNotificationBuilds(builds, session)
            return recorded
        }
        return dialect == .sqlite
            ? try await commitGroup.run(database, linger: Self.openLinger, body)
            : try await transaction(durable: true, body)
    }

    /// One device's report of an open, for `reportOpen`.
    package struct OpenReport: Sendable {
        package var appID: String
        package var deliveryID: Int64
        package var action: String
        package var openedAt: Date
        /// Checks the delivery against the report (its device, its user, the action) and answers
        /// the `app.opened` event's data, nil for no event (a delivery to no user). Throwing
        /// refuses this report alone, with that error.
        package var check: @Sendable (DeliveryReference) throws -> String?

        package init(
            appID: String, deliveryID: Int64, action: String, openedAt: Date,
            check: @escaping @Sendable (DeliveryReference) throws -> String?
        ) {
            self.appID = appID
            self.deliveryID = deliveryID
            self.action = action
            self.openedAt = openedAt
            self.check = check
        }
    }

    /// A report `reportOpen` recorded: the delivery it names, and what recording it did.
    package struct ReportedOpen: Sendable, Equatable {
        package var delivery: DeliveryReference
        package var recorded: OpenRecorded
    }

    /// Records an open reported for an app whose catalog has no trigger on `app.opened` (its
    /// event has no effects to prepare): the delivery is read, checked and recorded in one
    /// transaction shared with the opens reported within the same few milliseconds, each
    /// statement taking the whole batch (`WriteBatcher`). Counted and stored as `recordOpen`
    /// does; nil when the app has no such delivery (yet).
    package func reportOpen(_ report: OpenReport) async throws -> ReportedOpen? {
        try await withCheckedThrowingContinuation { continuation in
            reportOpen(report) { continuation.resume(with: $0) }
        }
    }

    /// The same for a caller that cannot wait (an event loop): `completion` gets the outcome on
    /// the thread that wrote the batch.
    package func reportOpen(
        _ report: OpenReport, completion: @escaping @Sendable (Result<ReportedOpen?, any Error>) -> Void
    ) {
        let database = database
        database.openBatcher.submit(
            report, database,
            lookUp: { session, reports in try await Self.lookUpOpens(reports, session) },
            { session, reports, references in
                try await TrackRepository(database: database).recordOpens(reports, references, session)
            },
            completion: completion)
    }

    /// The deliveries a batch's opens speak of, in one read (on a reading connection, before
    /// the writer is taken).
    private static func lookUpOpens(_ reports: [OpenReport], _ session: Session) async throws
        -> [DeliveryKey: DeliveryReference]
    {
        var wanted = BulkRows([("app_id", .text), ("delivery_id", .integer)], capacity: reports.count)
        var seen = Set<DeliveryKey>()
        for report in reports where seen.insert(DeliveryKey(app: report.appID, delivery: report.deliveryID)).inserted {
            wanted.append(.text(report.appID))
            wanted.append(.integer(report.deliveryID))
        }
        var references: [DeliveryKey: DeliveryReference] = [:]
        for row in try await session.query(
            [], rows: wanted,
            { source in
                """
                SELECT r.app_id, d.id, d.notification_id, d.device_id, d.user_id, d.status, n.type, v.platform,
                    v.app_version
                FROM \(source)
                JOIN deliveries d ON d.id = r.delivery_id AND d.app_id = r.app_id
                JOIN notifications n ON n.id = d.notification_id
                LEFT JOIN devices v ON v.app_id = d.app_id AND v.device_id = d.device_id
                """
            })
        {
            guard row.count == 9, let app = row[0].text, let id = row[1].integer,
                let notification = row[2].text.flatMap(UUID.init(uuidString:)), let device = row[3].text,
                let status = row[5].text.flatMap(DeliveryStatus.init(rawValue:))
            else { continue }
            references[DeliveryKey(app: app, delivery: id)] = DeliveryReference(
                id: id, notificationID: notification, deviceID: device, userID: row[4].text, status: status,
                type: row[6].text, platform: row[7].text ?? "", appVersion: row[8].text)
        }
        return references
    }

    /// `reportOpen`'s batch, with its deliveries read (`lookUpOpens`): the opens in one upsert
    /// (repeats of a delivery within the batch folded into one row, the first report's action
    /// kept); the notifications' `opened_count` in one update; the events of the counted opens
    /// in one insert; the event ids of the others in one read.
    private func recordOpens(
        _ reports: [OpenReport], _ references: [DeliveryKey: DeliveryReference], _ session: Session
    ) async throws -> [Result<ReportedOpen?, any Error>] {
        let now = nowMilliseconds
        // The checked reports, grouped by delivery in the order of their first report.
        struct Group {
            var key: DeliveryKey
            var reference: DeliveryReference
            var first: OpenReport
            var event: String?
            var indexes: [Int] = []
            var stored: (reports: Int64, action: String)?
            var eventID: String?
            var counted: Bool { stored?.reports == Int64(indexes.count) }
            var eventKey: String { TrackRepository.openedEventKey(key.delivery) }
        }
        var outcomes: [Result<ReportedOpen?, any Error>] = Array(repeating: .success(nil), count: reports.count)
        var groups: [Group] = []
        var position: [DeliveryKey: Int] = [:]
        for (index, report) in reports.enumerated() {
            let key = DeliveryKey(app: report.appID, delivery: report.deliveryID)
            guard let reference = references[key] else { continue }
            do {
                let event = try report.check(reference)
                if position[key] == nil {
                    position[key] = groups.count
                    groups.append(Group(key: key, reference: reference, first: report, event: event))
                }
                if let at = position[key] { groups[at].indexes.append(index) }
            } catch {
                outcomes[index] = .failure(error)
            }
        }
        guard !groups.isEmpty else { return outcomes }
        /// Event ids read back as (app, idempotency key, id) rows.
        func takeEventIDs(_ rows: [[Session.Value]]) {
            for row in rows {
                guard let app = row[0].text, let key = row[1].text, let id = row[2].text,
                    let delivery = Self.openedDelivery(key),
                    let at = position[DeliveryKey(app: app, delivery: delivery)]
                else { continue }
                groups[at].eventID = id
            }
        }
        var opens = BulkRows(
            [
                ("app_id", .text), ("delivery_id", .integer), ("notification_id", .text), ("device_id", .text),
                ("user_id", .text), ("action", .text), ("opened_at", .integer), ("reports", .integer),
            ], capacity: groups.count)
        for group in groups {
            for cell: BulkRows.Cell in [
                .text(group.key.app), .integer(group.key.delivery), .text(group.reference.notificationID.uuidString),
                .text(group.reference.deviceID), .text(group.reference.userID ?? ""), .text(group.first.action),
                .integer(Self.milliseconds(group.first.openedAt)), .integer(Int64(group.indexes.count)),
            ] { opens.append(cell) }
        }
        for row in try await session.query(
            [.integer(now)], rows: opens,
            { source in
                """
                INSERT INTO opens (app_id, delivery_id, notification_id, device_id, user_id, action, opened_at, received_at, reports)
                SELECT r.app_id, r.delivery_id, r.notification_id, r.device_id, NULLIF(r.user_id, ''), r.action, r.opened_at, $1, r.reports
                FROM \(source) WHERE true
                ON CONFLICT (app_id, delivery_id) DO UPDATE SET reports = opens.reports + excluded.reports
                RETURNING app_id, delivery_id, reports, action
                """
            })
        {
            guard let app = row[0].text, let id = row[1].integer, let count = row[2].integer, let action = row[3].text,
                let at = position[DeliveryKey(app: app, delivery: id)]
            else { continue }
            groups[at].stored = (count, action)
        }
        // A delivery's first report ever is in this batch when its row holds just this batch's.
        let counted = groups.filter(\.counted)
        if !counted.isEmpty {
            var perNotification: [String: Int64] = [:]
            for group in counted { perNotification[group.reference.notificationID.uuidString, default: 0] += 1 }
            try await Self.addToNotifications("opened_count", perNotification, session)
            var builds = BuildTally()
            for group in counted { builds.addOpened(group.reference) }
            try await addToNotificationBuilds(builds, session)
            var inserted = BulkRows(
                [
                    ("id", .text), ("app_id", .text), ("user_id", .text), ("data", .text), ("occurred_at", .integer),
                    ("idempotency_key", .text),
                ], capacity: counted.count)
            for group in counted {
                guard let data = group.event, let user = group.reference.userID else { continue }
                for cell: BulkRows.Cell in [
                    .text(UUID.timeOrdered().uuidString.lowercased()), .text(group.key.app), .text(user), .text(data),
                    .integer(Self.milliseconds(group.first.openedAt)), .text(group.eventKey),
                ] { inserted.append(cell) }
            }
            if !inserted.isEmpty {
                takeEventIDs(
                    try await session.query([.text(Self.openedEvent), .integer(now)], rows: inserted) { source in
                        """
                        INSERT INTO events (id, app_id, user_id, name, data, occurred_at, received_at, idempotency_key)
                        SELECT r.id, r.app_id, r.user_id, $1, r.data, r.occurred_at, $2, r.idempotency_key FROM \(source)
                        WHERE true ON CONFLICT (app_id, idempotency_key) DO NOTHING
                        RETURNING app_id, idempotency_key, id
                        """
                    })
            }
        }
        // The event of a delivery counted before: the first report's.
        var looked = BulkRows([("app_id", .text), ("idempotency_key", .text)], capacity: groups.count)
        for group in groups where group.eventID == nil && group.reference.userID != nil {
            looked.append(.text(group.key.app))
            looked.append(.text(group.eventKey))
        }
        if !looked.isEmpty {
            takeEventIDs(
                try await session.query([], rows: looked) { source in
                    """
                    SELECT e.app_id, e.idempotency_key, e.id FROM \(source)
                    JOIN events e ON e.app_id = r.app_id AND e.idempotency_key = r.idempotency_key
                    """
                })
        }
        for group in groups {
            guard let stored = group.stored else { continue }
            for (order, index) in group.indexes.enumerated() {
                outcomes[index] = .success(
                    ReportedOpen(
                        delivery: group.reference,
                        recorded: OpenRecorded(
                            counted: order == 0 && group.counted,
                            reports: stored.reports - Int64(group.indexes.count) + 1 + Int64(order),
                            action: stored.action, eventID: group.eventID, notifications: [])))
            }
        }
        return outcomes
    }

    /// Adds `counts` (by notification id) to each notification's `column` (`opened_count`,
    /// `received_count`) in one statement, in id order (two writers take the rows alike).
    static func addToNotifications(_ column: String, _ counts: [String: Int64], _ session: Session) async throws {
        guard !counts.isEmpty else { return }
        var increments = BulkRows([("id", .text), ("n", .integer)], capacity: counts.count)
        for (id, count) in counts.sorted(by: { $0.key < $1.key }) {
            increments.append(.text(id))
            increments.append(.integer(count))
        }
        _ = try await session.query([], rows: increments) { source in
            """
            UPDATE notifications SET \(column) = notifications.\(column) + r.n FROM \(source)
            WHERE notifications.id = r.id
            """
        }
    }

    /// The idempotency key of the `app.opened` event of delivery `id`: one event per delivery.
    private static func openedEventKey(_ id: Int64) -> String { openedEventPrefix + String(id) }

    /// The delivery an `app.opened` event's idempotency key names.
    private static func openedDelivery(_ key: String) -> Int64? {
        key.hasPrefix(openedEventPrefix) ? Int64(key.dropFirst(openedEventPrefix.count)) : nil
    }

    private static let openedEventPrefix = "opened:"

    /// How long an open that would commit alone waits for others to share its commit (SQLite).
    static let openLinger = Duration.milliseconds(10)

    /// The built-in event an open emits.
    package static let openedEvent = "app.opened"

    /// One type's counters on one day of sending.
    package struct TypeDayCounts: Sendable, Equatable {
        package var type: String
        /// Days since 1970 (UTC).
        package var day: Int64
        package var sent: Int64
        package var failed: Int64
        package var deferred: Int64
        package var suppressed: Int64
        package var cancelled: Int64
        package var opened: Int64
        /// Receipts reported by devices (one per delivery).
        package var received: Int64 = 0
        /// Accepted more than a day ago without a receipt, to builds that report receipts
        /// (`acceptedNotReceived`; filled in by the caller that asks for it).
        package var acceptedNotReceived: Int64 = 0
    }

    /// The counters of an app's types on the days `days` (days since 1970, UTC), of one type
    /// when `type` is given; in type and day order, days without sends left out.
    package func typeCounts(appID: String, days: ClosedRange<Int64>, type: String? = nil) async throws
        -> [TypeDayCounts]
    {
        try await reading { session in
            var binds: [Session.Value] = [.text(appID), .integer(days.lowerBound), .integer(days.upperBound)]
            if let type { binds.append(.text(type)) }
            return try await session.query(
                """
                SELECT type, day, sent, failed, deferred, suppressed, cancelled, opened, received FROM type_stats
                WHERE app_id = $1 AND day >= $2 AND day <= $3\(type == nil ? "" : " AND type = $4") ORDER BY type, day
                """, binds
            ).compactMap { row in
                guard let type = row[0].text, let day = row[1].integer else { return nil }
                return TypeDayCounts(
                    type: type, day: day, sent: row[2].integer ?? 0, failed: row[3].integer ?? 0,
                    deferred: row[4].integer ?? 0,
                    suppressed: row[5].integer ?? 0, cancelled: row[6].integer ?? 0, opened: row[7].integer ?? 0,
                    received: row.count > 8 ? row[8].integer ?? 0 : 0)
            }
        }
    }

    /// Active devices that reported a notification permission, by platform, app version and status.
    package struct PermissionCount: Sendable, Equatable {
        package var platform: String
        package var appVersion: String?
        package var status: String
        package var devices: Int64
    }

    /// The app's active devices by platform, app version and reported permission (devices that
    /// reported none are left out), from the counters the devices' triggers keep (migration 18).
    package func permissionCounts(appID: String) async throws -> [PermissionCount] {
        try await reading { session in
            try await session.query(
                "SELECT platform, app_version, permission, devices FROM permission_stats WHERE app_id = $1 AND devices > 0",
                [.text(appID)]
            ).compactMap { row in
                guard let platform = row[0].text, let version = row[1].text, let status = row[2].text else {
                    return nil
                }
                return PermissionCount(
                    platform: platform, appVersion: version.isEmpty ? nil : version, status: status,
                    devices: row[3].integer ?? 0)
            }
        }
    }
}
