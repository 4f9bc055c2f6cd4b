package import Foundation
import HeraldCore

/// Confirmed delivery: receipts devices report when a delivery reaches them (the app's
/// notification service extension, or its foreground handler), between the provider's
/// acceptance and the open. One per delivery counts, however often it is reported.
extension TrackRepository {
    /// A device's report that a delivery reached it.
    package struct ReceiptReport: Sendable {
        package var deliveryID: Int64
        package var deviceID: String
        /// When the device got it (its own clock, already bounded by the API).
        package var receivedAt: Date
        /// Whether the system showed it (false for a silent or suppressed one).
        package var displayed: Bool

        package init(deliveryID: Int64, deviceID: String, receivedAt: Date, displayed: Bool) {
            self.deliveryID = deliveryID
            self.deviceID = deviceID
            self.receivedAt = receivedAt
            self.displayed = displayed
        }
    }

    /// What a receipt did.
    package enum ReceiptOutcome: Sendable, Equatable {
        /// Recorded: `counted` the first time the delivery's receipt is reported.
        case recorded(ReceiptRecorded)
        /// No delivery of that id was accepted by its provider for that device in this app (or
        /// not yet: a page's delivery has its row once its provider answered).
        case notFound
        /// The delivery went to another user than the one the report speaks for.
        case otherUser
    }

    package struct ReceiptRecorded: Sendable, Equatable {
        package var deliveryID: Int64
        package var counted: Bool
        package var reports: Int64
        package var platform: String
        /// When its provider accepted the delivery (its row's last write), for the latency to
        /// the receipt.
        package var acceptedAt: Date
        package var receivedAt: Date
    }

    /// A call's receipts, as the batcher takes them.
    struct ReceiptCall: Sendable {
        var appID: String
        var userID: String?
        var reports: [ReceiptReport]
    }

    /// Records `reports` (one call's, at most a few hundred), each checked against its delivery:
    /// sent (accepted by its provider) to that device of `appID`, and, with `userID` (a user
    /// token's), to that user. The first report of a delivery counts (its notification's
    /// `received_count`, and so its type's day); later ones add to `reports`. A receipt never
    /// comes before its acceptance: its time is taken as at least that. Calls arriving
    /// together share one durable transaction (`WriteBatcher`); one that fails fails alone.
    package func recordReceipts(appID: String, userID: String?, _ reports: [ReceiptReport]) async throws
        -> [ReceiptOutcome]
    {
        try await withCheckedThrowingContinuation { continuation in
            recordReceipts(appID: appID, userID: userID, reports) { continuation.resume(with: $0) }
        }
    }

    /// The same for a caller that cannot wait (an event loop): `completion` gets the outcomes
    /// on the thread that wrote the batch.
    package func recordReceipts(
        appID: String, userID: String?, _ reports: [ReceiptReport],
        completion: @escaping @Sendable (Result<[ReceiptOutcome], any Error>) -> Void
    ) {
        guard !reports.isEmpty else { return completion(.success([])) }
        let database = database
        database.receiptBatcher.submit(
            ReceiptCall(appID: appID, userID: userID, reports: reports), database,
            lookUp: { session, calls in try await Self.lookUpReceipts(calls, session) },
            { session, calls, deliveries in
                try await TrackRepository(database: database).writeReceipts(calls, deliveries, session)
            },
            completion: completion)
    }

    /// A receipt's delivery, as `lookUpReceipts` reads it.
    struct ReceiptDelivery: Sendable {
        var notification: String
        var device: String
        var user: String?
        var acceptedAt: Int64
        var platform: String
        var appVersion: String?
    }

    /// The sent deliveries a batch's receipts speak of, in one read (on a reading connection,
    /// before the writer is taken: a delivery once sent stays so until retention deletes it, and
    /// a receipt for one deleted meanwhile only adds a row nothing counts).
    private static func lookUpReceipts(_ calls: [ReceiptCall], _ session: Session) async throws
        -> [DeliveryKey: ReceiptDelivery]
    {
        var wanted = BulkRows([("app_id", .text), ("delivery_id", .integer)], capacity: calls.count)
        var seen = Set<DeliveryKey>()
        for call in calls {
            for report in call.reports
            where seen.insert(DeliveryKey(app: call.appID, delivery: report.deliveryID)).inserted {
                wanted.append(.text(call.appID))
                wanted.append(.integer(report.deliveryID))
            }
        }
        var deliveries: [DeliveryKey: ReceiptDelivery] = [:]
        for row in try await session.query(
            [], rows: wanted,
            { source in
                """
                SELECT r.app_id, d.id, d.notification_id, d.device_id, d.user_id, d.updated_at, v.platform, v.app_version
                FROM \(source)
                JOIN deliveries d ON d.id = r.delivery_id AND d.app_id = r.app_id AND d.status = 'sent'
                LEFT JOIN devices v ON v.app_id = d.app_id AND v.device_id = d.device_id
                """
            })
        {
            guard row.count == 8, let app = row[0].text, let id = row[1].integer, let notification = row[2].text,
                let device = row[3].text, let acceptedAt = row[5].integer
            else { continue }
            deliveries[DeliveryKey(app: app, delivery: id)] = ReceiptDelivery(
                notification: notification, device: device, user: row[4].text, acceptedAt: acceptedAt,
                platform: row[6].text ?? "unknown", appVersion: row[7].text)
        }
        return deliveries
    }

    /// `recordReceipts`' batch, a few statements whatever its size, with its deliveries read
    /// (`lookUpReceipts`): the receipts in one upsert (repeats of a delivery within the batch
    /// folded into one row), the notifications' `received_count` in one update.
    private func writeReceipts(
        _ calls: [ReceiptCall], _ deliveries: [DeliveryKey: ReceiptDelivery], _ session: Session
    ) async throws -> [Result<[ReceiptOutcome], any Error>] {
        let now = nowMilliseconds
        // The checked receipts, grouped by delivery in the order of their first report.
        struct Group {
            var key: DeliveryKey
            var delivery: ReceiptDelivery
            var receivedAt: Int64
            var displayed: Bool
            var reports: [(call: Int, index: Int)] = []
            var stored: (reports: Int64, receivedAt: Int64)?
        }
        var outcomes = calls.map { [ReceiptOutcome](repeating: .notFound, count: $0.reports.count) }
        var groups: [Group] = []
        var position: [DeliveryKey: Int] = [:]
        for (callIndex, call) in calls.enumerated() {
            for (index, report) in call.reports.enumerated() {
                let key = DeliveryKey(app: call.appID, delivery: report.deliveryID)
                guard let delivery = deliveries[key], delivery.device == report.deviceID else { continue }
                if let userID = call.userID, delivery.user != userID {
                    outcomes[callIndex][index] = .otherUser
                    continue
                }
                if position[key] == nil {
                    position[key] = groups.count
                    groups.append(
                        Group(
                            key: key, delivery: delivery,
                            receivedAt: max(Self.milliseconds(report.receivedAt), delivery.acceptedAt),
                            displayed: report.displayed))
                }
                if let at = position[key] { groups[at].reports.append((callIndex, index)) }
            }
        }
        guard !groups.isEmpty else { return outcomes.map { .success($0) } }
        var receipts = BulkRows(
            [
                ("app_id", .text), ("delivery_id", .integer), ("notification_id", .text), ("device_id", .text),
                ("platform", .text), ("app_version", .text), ("accepted_at", .integer), ("received_at", .integer),
                ("displayed", .integer), ("reports", .integer),
            ], capacity: groups.count)
        for group in groups {
            for cell: BulkRows.Cell in [
                .text(group.key.app), .integer(group.key.delivery), .text(group.delivery.notification),
                .text(group.delivery.device), .text(group.delivery.platform), .text(group.delivery.appVersion ?? ""),
                .integer(group.delivery.acceptedAt), .integer(group.receivedAt), .integer(group.displayed ? 1 : 0),
                .integer(Int64(group.reports.count)),
            ] { receipts.append(cell) }
        }
        for row in try await session.query(
            [.integer(now)], rows: receipts,
            { source in
                """
                INSERT INTO receipts (app_id, delivery_id, notification_id, device_id, platform, app_version, accepted_at, received_at, recorded_at, displayed, reports)
                SELECT r.app_id, r.delivery_id, r.notification_id, r.device_id, r.platform, NULLIF(r.app_version, ''), r.accepted_at,
                    r.received_at, $1, r.displayed, r.reports
                FROM \(source) WHERE true
                ON CONFLICT (app_id, delivery_id) DO UPDATE SET reports = receipts.reports + excluded.reports
                RETURNING app_id, delivery_id, reports, received_at
                """
            })
        {
            guard row.count == 4, let app = row[0].text, let id = row[1].integer, let reports = row[2].integer,
                let receivedAt = row[3].integer, let at = position[DeliveryKey(app: app, delivery: id)]
            else { continue }
            groups[at].stored = (reports, receivedAt)
        }
        // A delivery's first receipt ever is in this batch when its row holds just this batch's.
        var perNotification: [String: Int64] = [:]
        var platformHours: [PlatformHour: PlatformHourCounts] = [:]
        for group in groups where group.stored?.reports == Int64(group.reports.count) {
            perNotification[group.delivery.notification, default: 0] += 1
            let hour = PlatformHour(
                app: group.key.app, platform: group.delivery.platform,
                hour: PlatformHour.hour(ofMilliseconds: group.delivery.acceptedAt))
            platformHours[hour, default: .init()].received += 1
        }
        try await Self.addToNotifications("received_count", perNotification, session)
        var builds = BuildTally()
        for group in groups where group.stored?.reports == Int64(group.reports.count) {
            guard let notification = UUID(uuidString: group.delivery.notification) else { continue }
            builds.addReceived(
                notification: notification, platform: group.delivery.platform, version: group.delivery.appVersion)
        }
        try await addToNotificationBuilds(builds, session)
        try await addToPlatformHours(platformHours, session)
        for group in groups {
            guard let stored = group.stored else { continue }
            let earlier = stored.reports - Int64(group.reports.count)
            for (order, report) in group.reports.enumerated() {
                outcomes[report.call][report.index] = .recorded(
                    ReceiptRecorded(
                        deliveryID: group.key.delivery, counted: earlier == 0 && order == 0,
                        reports: earlier + Int64(order) + 1, platform: group.delivery.platform,
                        acceptedAt: SQLText.date(group.delivery.acceptedAt), receivedAt: SQLText.date(stored.receivedAt)
                    ))
            }
        }
        return outcomes.map { .success($0) }
    }

    /// Deliveries of an app's types on `days` accepted by their provider more than `olderThan`
    /// before now without a receipt, per type and day: only those to devices whose build
    /// (platform and app version) has reported receipts, so an app build without a service
    /// extension is not counted as losing what it never reports. Read from the sums per type, day
    /// and build and the notifications sent within the window (`unreceived`), not from their
    /// deliveries.
    package func acceptedNotReceived(
        appID: String, days: ClosedRange<Int64>, type: String? = nil, olderThan: TimeInterval
    ) async throws -> [String: [Int64: Int64]] {
        let before = nowMilliseconds - Int64(olderThan * 1000)
        return try await reading { session in
            var counts: [String: [Int64: Int64]] = [:]
            for (key, missing) in try await unreceived(appID: appID, days: days, type: type, before: before, session) {
                counts[key.type, default: [:]][key.day, default: 0] += missing
            }
            return counts
        }
    }

    /// A type's answered deliveries of one day to one build: the funnel's counts per platform
    /// and app version.
    package struct BuildDayCounts: Sendable, Equatable {
        /// The device's platform.
        package var platform: String
        /// The device's app version when each was sent, received or opened.
        package var appVersion: String?
        package var counts: TypeDayCounts
    }

    /// The answered deliveries (sent or failed) of an app's types on `days`, per type, day and
    /// build (platform and app version), with their receipts and opens; `acceptedNotReceived`
    /// as `acceptedNotReceived` counts it. Read from the sums per type, day and build
    /// (`type_builds`) and the candidates for accepted, not received.
    package func buildCounts(appID: String, days: ClosedRange<Int64>, type: String? = nil) async throws
        -> [BuildDayCounts]
    {
        let before = nowMilliseconds - Int64(Self.receiptWindow * 1000)
        return try await reading { session in
            struct Key: Hashable {
                var type: String
                var day: Int64
                var platform: String
                var version: String?
            }
            var grouped: [Key: TypeDayCounts] = [:]
            let (binds, terms) = Self.typeBuildsScope(appID: appID, days: days, type: type)
            for row in try await session.query(
                "SELECT type, day, platform, app_version, sent, failed, received, opened FROM type_builds t WHERE \(terms)",
                binds)
            {
                guard row.count == 8, let type = row[0].text, let day = row[1].integer, let platform = row[2].text,
                    let version = row[3].text
                else { continue }
                let key = Key(type: type, day: day, platform: platform, version: version.isEmpty ? nil : version)
                grouped[key] = TypeDayCounts(
                    type: type, day: day, sent: row[4].integer ?? 0, failed: row[5].integer ?? 0, deferred: 0,
                    suppressed: 0, cancelled: 0, opened: row[7].integer ?? 0, received: row[6].integer ?? 0)
            }
            for (key, missing) in try await unreceived(appID: appID, days: days, type: type, before: before, session) {
                let key = Key(type: key.type, day: key.day, platform: key.build.platform, version: key.build.version)
                grouped[key]?.acceptedNotReceived += missing
            }
            return grouped.sorted {
                ($0.key.type, $0.key.day, $0.key.platform, $0.key.version ?? "")
                    < ($1.key.type, $1.key.day, $1.key.platform, $1.key.version ?? "")
            }.map { BuildDayCounts(platform: $0.key.platform, appVersion: $0.key.version, counts: $0.value) }
        }
    }

    /// How long after its acceptance a delivery without a receipt counts as not received.
    package static let receiptWindow: TimeInterval = 86_400

    /// `typeCounts`, each day with its deliveries accepted more than `receiptWindow` ago and
    /// not received (`acceptedNotReceived`); with `builds` (`buildCounts` of the same days and
    /// type), those are their sums rather than read again.
    package func funnelCounts(
        appID: String, days: ClosedRange<Int64>, type: String? = nil, builds: [BuildDayCounts]? = nil
    ) async throws -> [TypeDayCounts] {
        var counts = try await typeCounts(appID: appID, days: days, type: type)
        var missing: [String: [Int64: Int64]] = [:]
        if let builds {
            for build in builds where build.counts.acceptedNotReceived > 0 {
                missing[build.counts.type, default: [:]][build.counts.day, default: 0] +=
                    build.counts.acceptedNotReceived
            }
        } else {
            missing = try await acceptedNotReceived(
                appID: appID, days: days, type: type, olderThan: Self.receiptWindow)
        }
        for index in counts.indices {
            counts[index].acceptedNotReceived = missing[counts[index].type]?[counts[index].day] ?? 0
        }
        return counts
    }
}
