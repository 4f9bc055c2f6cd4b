package import Foundation
package import HeraldCore
import HeraldEngine
import HeraldPayload
import HeraldStore
package import Hummingbird

/// `POST /v1/apps/{app}/opened`: a device reports that a delivery was opened (tapped, or one of
/// its actions chosen), as often as it likes: one open per delivery counts.
struct OpenedBody: FlatDecodable {
    /// The stamp's `d`: a number (a string of digits is taken too).
    var deliveryID: JSONValue?
    var deviceID: String?
    var action: String?
    var at: String?

    enum CodingKeys: String, CodingKey {
        case deliveryID = "delivery_id"
        case deviceID = "device_id"
        case action, at
    }

    init?(flat bytes: UnsafeRawBufferPointer) {
        guard let members = FlatJSON.members(bytes) else { return nil }
        for (key, value) in members {
            if FlatJSON.key(key, in: bytes, is: "delivery_id") {
                guard let id = FlatJSON.deliveryID(value, in: bytes) else { return nil }
                deliveryID = id
            } else if FlatJSON.key(key, in: bytes, is: "device_id") {
                guard let text = FlatJSON.optionalText(value, in: bytes) else { return nil }
                deviceID = text
            } else if FlatJSON.key(key, in: bytes, is: "action") {
                guard let text = FlatJSON.optionalText(value, in: bytes) else { return nil }
                action = text
            } else if FlatJSON.key(key, in: bytes, is: "at") {
                guard let text = FlatJSON.optionalText(value, in: bytes) else { return nil }
                at = text
            }
        }
    }

    /// A tap on the notification itself (UNNotificationDefaultActionIdentifier).
    static let defaultAction = ActionTokenLayout.tapAction

    struct Checked {
        var deliveryID: Int64
        var deviceID: String
        var action: String
        var at: Date
    }

    /// Checked; the first problem names its field. `at` defaults to now; a device's clock may be
    /// off, so a time ahead is taken as now and one more than 30 days back is refused.
    func validated(now: Date) throws(APIError) -> Checked {
        let (id, deviceID, at) = try DeviceReport.checked(deliveryID, deviceID, at, now: now)
        let action = action ?? Self.defaultAction
        guard !action.isEmpty, action.utf8.count <= 64 else {
            throw APIError.invalid("action", "action is \"default\" or an action id of 1 to 64 bytes")
        }
        return Checked(deliveryID: id, deviceID: deviceID, action: action, at: at)
    }
}

/// What every report of a device about a delivery carries: the delivery (`herald.d`), the
/// device, and when (`at`, the device's clock: a time ahead is taken as now, one more than 30
/// days back is refused). `prefix` names the fields of a batch's item (`receipts[3].`).
enum DeviceReport {
    static func checked(
        _ deliveryID: JSONValue?, _ deviceID: String?, _ at: String?, now: Date, prefix: String = ""
    ) throws(APIError) -> (deliveryID: Int64, deviceID: String, at: Date) {
        let idField = prefix + "delivery_id"
        let id: Int64
        switch deliveryID {
        case nil: throw APIError.missing(idField)
        case .int(let value)?: id = Int64(value)
        case .string(let text)?:
            guard let value = Int64(text) else {
                throw APIError.invalid(idField, "\(idField) is the payload's herald.d, a number")
            }
            id = value
        default: throw APIError.invalid(idField, "\(idField) is the payload's herald.d, a number")
        }
        guard id > 0 else { throw APIError.invalid(idField, "\(idField) is the payload's herald.d, a number above 0") }
        guard let deviceID else { throw APIError.missing(prefix + "device_id") }
        guard !deviceID.isEmpty, deviceID.utf8.count <= 256 else {
            throw APIError.invalid(prefix + "device_id", "\(prefix)device_id is 1 to 256 bytes")
        }
        var date = now
        if let text = at {
            guard let parsed = HeraldTime.parse(text) else {
                throw APIError.invalid(prefix + "at", "\(prefix)at is an RFC 3339 time such as 2026-11-23T09:00:00Z")
            }
            guard parsed >= now.addingTimeInterval(-30 * 86_400) else {
                throw APIError.invalid(prefix + "at", "\(prefix)at is within the last 30 days")
            }
            date = min(parsed, now)
        }
        return (id, deviceID, date)
    }
}

/// `POST /v1/apps/{app}/received`: a device reports that a delivery reached it (from its
/// notification service extension, or as it arrived in the foreground), as often as it likes:
/// one receipt per delivery counts. One receipt, or `{"receipts": [...]}` with up to 100 for
/// an app that queues them.
struct ReceivedBody: FlatDecodable {
    struct Item: Decodable {
        var deliveryID: JSONValue? = nil
        var deviceID: String? = nil
        var at: String? = nil
        var displayed: Bool? = nil

        enum CodingKeys: String, CodingKey {
            case deliveryID = "delivery_id"
            case deviceID = "device_id"
            case at, displayed
        }

        func validated(now: Date, prefix: String = "") throws(APIError) -> TrackRepository.ReceiptReport {
            let (id, deviceID, at) = try DeviceReport.checked(deliveryID, deviceID, at, now: now, prefix: prefix)
            return TrackRepository.ReceiptReport(
                deliveryID: id, deviceID: deviceID, receivedAt: at, displayed: displayed ?? true)
        }
    }

    var item: Item
    var receipts: [Item]?

    /// One receipt as `FlatJSON` reads it; nil when the body must go through JSONDecoder (a
    /// batch always does).
    init?(flat bytes: UnsafeRawBufferPointer) {
        guard let members = FlatJSON.members(bytes) else { return nil }
        item = Item()
        for (key, value) in members {
            if FlatJSON.key(key, in: bytes, is: "delivery_id") {
                guard let id = FlatJSON.deliveryID(value, in: bytes) else { return nil }
                item.deliveryID = id
            } else if FlatJSON.key(key, in: bytes, is: "device_id") {
                guard let text = FlatJSON.optionalText(value, in: bytes) else { return nil }
                item.deviceID = text
            } else if FlatJSON.key(key, in: bytes, is: "at") {
                guard let text = FlatJSON.optionalText(value, in: bytes) else { return nil }
                item.at = text
            } else if FlatJSON.key(key, in: bytes, is: "displayed") {
                switch value {
                case .bool(let flag): item.displayed = flag
                case .null: item.displayed = nil
                case .string, .integer: return nil
                }
            } else if FlatJSON.key(key, in: bytes, is: "receipts") {
                // `null` is no batch, as JSONDecoder reads it; a batch is not flat.
                guard case .null = value else { return nil }
            }
        }
    }

    enum CodingKeys: String, CodingKey { case receipts }

    init(from decoder: any Decoder) throws {
        item = try Item(from: decoder)
        receipts = try decoder.container(keyedBy: CodingKeys.self).decodeIfPresent([Item].self, forKey: .receipts)
    }

    /// Receipts in one call at most.
    static let maximumReceipts = 100

    /// The receipts to record, checked; whether the body was a batch.
    func validated(now: Date) throws(APIError) -> (reports: [TrackRepository.ReceiptReport], batch: Bool) {
        guard let receipts else { return ([try item.validated(now: now)], false) }
        guard item.deliveryID == nil, item.deviceID == nil else {
            throw APIError.invalid("receipts", "a body is one receipt or {\"receipts\": [...]}, not both")
        }
        guard (1...Self.maximumReceipts).contains(receipts.count) else {
            throw APIError.invalid("receipts", "receipts holds 1 to \(Self.maximumReceipts) receipts")
        }
        var reports: [TrackRepository.ReceiptReport] = []
        for (index, receipt) in receipts.enumerated() {
            reports.append(try receipt.validated(now: now, prefix: "receipts[\(index)]."))
        }
        return (reports, true)
    }
}

/// What a receipt did (`status` 200, or 404 / 403 for a batch's item that was not recorded).
struct ReceivedView: JSONWritable {
    var deliveryID: Int64
    var status: Int
    var counted: Bool?
    var reports: Int64?

    enum CodingKeys: String, CodingKey {
        case deliveryID = "delivery_id"
        case status, counted, reports
    }

    func write(to writer: inout JSONWriter) {
        writer.raw("{")
        if let counted {
            writer.raw("\"counted\":")
            writer.bool(counted)
            writer.raw(",")
        }
        writer.raw("\"delivery_id\":")
        writer.integer(deliveryID)
        if let reports {
            writer.raw(",\"reports\":")
            writer.integer(reports)
        }
        writer.raw(",\"status\":")
        writer.integer(Int64(status))
        writer.raw("}")
    }
}

/// A batch of receipts' answer: `{"receipts": [...]}`.
struct ReceivedViews: JSONWritable {
    var receipts: [ReceivedView]

    func write(to writer: inout JSONWriter) {
        writer.raw("{\"receipts\":[")
        for (index, view) in receipts.enumerated() {
            if index > 0 { writer.raw(",") }
            view.write(to: &writer)
        }
        writer.raw("]}")
    }
}

/// What an open report did.
struct OpenedView: JSONWritable {
    var deliveryID: Int64
    var recorded: TrackRepository.OpenRecorded

    enum CodingKeys: String, CodingKey {
        case deliveryID = "delivery_id"
        case counted, reports, action
        case eventID = "event_id"
        case notifications
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(deliveryID, forKey: .deliveryID)
        try container.encode(recorded.counted, forKey: .counted)
        try container.encode(recorded.reports, forKey: .reports)
        try container.encode(recorded.action, forKey: .action)
        try container.encodeIfPresent(recorded.eventID, forKey: .eventID)
        if !recorded.notifications.isEmpty { try container.encode(recorded.notifications, forKey: .notifications) }
    }

    func write(to writer: inout JSONWriter) {
        writer.raw("{\"action\":")
        writer.string(recorded.action)
        writer.raw(",\"counted\":")
        writer.bool(recorded.counted)
        writer.raw(",\"delivery_id\":")
        writer.integer(deliveryID)
        if let eventID = recorded.eventID {
            writer.raw(",\"event_id\":")
            writer.string(eventID)
        }
        if !recorded.notifications.isEmpty {
            writer.raw(",\"notifications\":[")
            for (index, id) in recorded.notifications.enumerated() {
                if index > 0 { writer.raw(",") }
                writer.string(id)
            }
            writer.raw("]")
        }
        writer.raw(",\"reports\":")
        writer.integer(recorded.reports)
        writer.raw("}")
    }
}

/// `GET /v1/apps/{app}/analytics?from&to&type&by`: days of sending (UTC dates, `from` and `to`
/// included; the last 30 days by default, at most 366), of one type (name or external id),
/// each type's funnel also per platform or per build (platform and app version) with `by`.
package struct AnalyticsQuery {
    package var days: ClosedRange<Int64>
    package var type: CatalogType?
    var by: AnalyticsView.Breakdown?

    static let defaultDays: Int64 = 30
    static let maximumDays: Int64 = 366

    package init(_ parameters: Hummingbird.Parameters, today: Date, catalog: Catalog?) throws(APIError) {
        let todayDay = Int64((today.timeIntervalSince1970 / 86_400).rounded(.down))
        func day(_ name: String) throws(APIError) -> Int64? {
            guard let text = parameters.get(name) else { return nil }
            guard let day = Self.day(text) else {
                throw APIError.invalid(name, "\(name) is a date such as 2026-11-23 (UTC)")
            }
            return day
        }
        let to = try day("to") ?? todayDay
        let from = try day("from") ?? (to - Self.defaultDays + 1)
        guard from <= to else { throw APIError.invalid("from", "from is on or before to") }
        guard to - from < Self.maximumDays else {
            throw APIError.invalid("from", "from and to are at most \(Self.maximumDays) days apart")
        }
        days = from...to
        if let name = parameters.get("type") {
            guard let catalog, let found = catalog.type(name) else {
                throw APIError.invalid(
                    "type",
                    "unknown type \"\(name)\"; the catalog has \(catalog?.types.map(\.name).joined(separator: ", ") ?? "no types")"
                )
            }
            type = found
        }
        if let text = parameters.get("by") {
            guard let breakdown = AnalyticsView.Breakdown(rawValue: text) else {
                throw APIError.invalid("by", "by is platform or app_version")
            }
            by = breakdown
        }
    }

    /// Days since 1970 of a `YYYY-MM-DD` date (UTC).
    package static func day(_ text: String) -> Int64? {
        let parts = text.split(separator: "-")
        guard parts.count == 3, parts[0].count == 4, parts[1].count == 2, parts[2].count == 2,
            let year = Int(parts[0]), let month = Int(parts[1]), let dayOfMonth = Int(parts[2])
        else { return nil }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let components = DateComponents(year: year, month: month, day: dayOfMonth)
        guard components.isValidDate(in: calendar), let date = calendar.date(from: components) else { return nil }
        return Int64((date.timeIntervalSince1970 / 86_400).rounded(.down))
    }
}
