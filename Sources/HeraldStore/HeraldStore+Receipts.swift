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

    /// Records `reports` (at most a few hundred) in one transaction, each checked against its
    /// delivery: sent (accepted by its provider) to that device of `appID`, and, with `userID`
    /// (a user token's), to that user. The first report of a delivery counts (its
    /// notification's `received_count`, and so its type's day); later ones add to `reports`.
    /// A receipt never comes before its acceptance: its time is taken as at least that.
    package func recordReceipts(appID: String, userID: String?, _ reports: [ReceiptReport]) async throws
        -> [ReceiptOutcome]
    {
        guard !reports.isEmpty else { return [] }
        let now = nowMilliseconds
        return try await transaction { session in
            var outcomes: [ReceiptOutcome] = []
            outcomes.reserveCapacity(reports.count)
            for report in reports {
                guard
                    let row = try await session.query(
                        """
                        SELECT d.notification_id, d.user_id, d.updated_at, v.platform, v.app_version FROM deliveries d
                        LEFT JOIN devices v ON v.app_id = d.app_id AND v.device_id = d.device_id
                        WHERE d.id = $1 AND d.app_id = $2 AND d.device_id = $3 AND d.status = 'sent'
                        """, [.integer(report.deliveryID), .text(appID), .text(report.deviceID)]
                    ).first, row.count == 5, let notification = row[0].text, let acceptedAt = row[2].integer
                else {
                    outcomes.append(.notFound)
                    continue
                }
                if let userID, row[1].text != userID {
                    outcomes.append(.otherUser)
                    continue
                }
                let platform = row[3].text ?? "unknown"
                let receivedAt = max(Self.milliseconds(report.receivedAt), acceptedAt)
                let written = try await session.query(
                    """
                    INSERT INTO receipts (app_id, delivery_id, notification_id, device_id, platform, app_version, accepted_at, received_at, recorded_at, displayed)
                    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
                    ON CONFLICT (app_id, delivery_id) DO UPDATE SET reports = receipts.reports + 1
                    RETURNING reports, received_at
                    """,
                    [
                        .text(appID), .integer(report.deliveryID), .text(notification), .text(report.deviceID),
                        .text(platform), row[4], .integer(acceptedAt), .integer(receivedAt), .integer(now),
                        .integer(report.displayed ? 1 : 0),
                    ]
                ).first
                let reports = written?.first?.integer ?? 1
                if reports == 1 {
                    _ = try await session.query(
                        "UPDATE notifications SET received_count = received_count + 1 WHERE id = $1",
                        [.text(notification)])
                }
                outcomes.append(
                    .recorded(
                        ReceiptRecorded(
                            deliveryID: report.deliveryID, counted: reports == 1, reports: reports, platform: platform,
                            acceptedAt: Self.date(acceptedAt),
                            receivedAt: Self.date(written.flatMap { $0.count == 2 ? $0[1].integer : nil } ?? receivedAt)
                        )))
            }
            return outcomes
        }
    }

    /// Deliveries of an app's types on `days` accepted by their provider more than `olderThan`
    /// before now without a receipt, per type and day: only those to devices whose build
    /// (platform and app version) has reported receipts, so an app build without a service
    /// extension is not counted as losing them. Reads the deliveries of those days.
    package func acceptedNotReceived(
        appID: String, days: ClosedRange<Int64>, type: String? = nil, olderThan: TimeInterval
    ) async throws -> [String: [Int64: Int64]] {
        let before = nowMilliseconds - Int64(olderThan * 1000)
        return try await reading { session in
            var binds: [Session.Value] = [
                .text(appID), .integer(days.lowerBound), .integer(days.upperBound), .integer(before),
            ]
            if let type { binds.append(.text(type)) }
            var counts: [String: [Int64: Int64]] = [:]
            for row in try await session.query(
                """
                SELECT n.type, n.day, count(*) FROM notifications n
                JOIN deliveries d ON d.notification_id = n.id
                JOIN devices v ON v.app_id = d.app_id AND v.device_id = d.device_id
                WHERE n.app_id = $1 AND n.type IS NOT NULL AND n.day >= $2 AND n.day <= $3\(type == nil ? "" : " AND n.type = $5")
                    AND d.status = 'sent' AND d.updated_at < $4
                    AND NOT EXISTS (SELECT 1 FROM receipts r WHERE r.app_id = d.app_id AND r.delivery_id = d.id)
                    AND EXISTS (
                        SELECT 1 FROM receipts r WHERE r.app_id = v.app_id AND r.platform = v.platform
                        AND (r.app_version = v.app_version OR (r.app_version IS NULL AND v.app_version IS NULL)))
                GROUP BY n.type, n.day
                """, binds)
            {
                guard row.count == 3, let type = row[0].text, let day = row[1].integer, let count = row[2].integer
                else { continue }
                counts[type, default: [:]][day] = count
            }
            return counts
        }
    }

    /// How long after its acceptance a delivery without a receipt counts as not received.
    package static let receiptWindow: TimeInterval = 86_400

    /// `typeCounts`, each day with its deliveries accepted more than `receiptWindow` ago and
    /// not received (`acceptedNotReceived`).
    package func funnelCounts(appID: String, days: ClosedRange<Int64>, type: String? = nil) async throws
        -> [TypeDayCounts]
    {
        var counts = try await typeCounts(appID: appID, days: days, type: type)
        let missing = try await acceptedNotReceived(appID: appID, days: days, type: type, olderThan: Self.receiptWindow)
        for index in counts.indices {
            counts[index].acceptedNotReceived = missing[counts[index].type]?[counts[index].day] ?? 0
        }
        return counts
    }

    private static func date(_ milliseconds: Int64) -> Date {
        Date(timeIntervalSince1970: Double(milliseconds) / 1000)
    }
}
