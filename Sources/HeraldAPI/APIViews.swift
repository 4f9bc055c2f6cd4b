import Foundation
import HeraldCore
import HeraldEngine
import HeraldPayload
import HeraldStore
import Hummingbird
import NIOCore

/// `GET …/users/{user}/devices`: a page of devices and where the next starts.
struct DevicePageView: Encodable {
    var devices: [DeviceView]
    var nextCursor: String?
    enum CodingKeys: String, CodingKey {
        case devices
        case nextCursor = "next_cursor"
    }
}

/// A page cursor as the API shows it: `<created ms>.<base64url device id>`, opaque to callers.
enum DeviceCursorText {
    static func encode(_ cursor: DeviceRepository.DeviceCursor) -> String {
        "\(cursor.createdAt)." + Base64URL.encode(Data(cursor.deviceID.utf8))
    }

    static func decode(_ text: String) -> DeviceRepository.DeviceCursor? {
        guard text.utf8.count <= 1_024 else { return nil }
        let parts = text.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, let created = DecimalText.int64(parts[0], maximumDigits: 16),
            let id = Base64URL.decode(parts[1]).flatMap({ String(validating: $0, as: UTF8.self) })
        else { return nil }
        return DeviceRepository.DeviceCursor(createdAt: created, deviceID: id)
    }
}

struct NotificationAccepted: Encodable {
    package var id: String
    var recipients: Int
    /// True when an earlier notification with the same idempotency key was returned.
    var duplicate: Bool
}

struct NotificationView: Encodable {
    var record: NotificationRecord
    package var counts: [DeliveryStatus: Int]
    var deliveries: [DeliveryRecord]

    enum CodingKeys: String, CodingKey {
        case id
        case createdAt = "created_at"
        case recipients, counts, deliveries
    }
    enum DeliveryKeys: String, CodingKey {
        case id
        case deviceID = "device_id"
        case status, reason
        case apnsID = "apns_id"
        case attempts, until
        case createdAt = "created_at"
        case updatedAt = "updated_at"
        case acceptedAt = "accepted_at"
        case receivedAt = "received_at"
        case openedAt = "opened_at"
        case trace
    }
    enum ExtraKeys: String, CodingKey {
        case cancelKey = "cancel_key"
        case traceID = "trace_id"
    }
    /// The one field of the stored content this view shows.
    private struct Traced: Decodable {
        // swift-format-ignore: AlwaysUseLowerCamelCase
        var trace_context: [String: String]?
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(record.id.uuidString.lowercased(), forKey: .id)
        try container.encode(record.createdAt, forKey: .createdAt)
        try container.encode(record.recipients, forKey: .recipients)
        var extra = encoder.container(keyedBy: ExtraKeys.self)
        try extra.encodeIfPresent(record.cancelKey, forKey: .cancelKey)
        let traced = try? JSONDecoder().decode(Traced.self, from: record.content)
        try extra.encodeIfPresent(TraceParent.traceID(in: traced?.trace_context), forKey: .traceID)
        var countsObject: [String: Int] = [:]
        for status in [DeliveryStatus.queued, .sent, .failed, .deferred, .suppressed, .cancelled] {
            countsObject[status.rawValue] = counts[status] ?? 0
        }
        // Being sent right now counts as queued: it has no answer yet.
        countsObject["queued", default: 0] += counts[.sending] ?? 0
        try container.encode(countsObject, forKey: .counts)
        var list = container.nestedUnkeyedContainer(forKey: .deliveries)
        for delivery in deliveries {
            var item = list.nestedContainer(keyedBy: DeliveryKeys.self)
            // The delivery's id: its payload's herald.d, what an open is reported with.
            try item.encode(delivery.id, forKey: .id)
            try item.encode(delivery.deviceID, forKey: .deviceID)
            try item.encode(delivery.status == .sending ? "queued" : delivery.status.rawValue, forKey: .status)
            try item.encodeIfPresent(delivery.reason, forKey: .reason)
            try item.encode(
                UUID.apnsID(notification: record.id, delivery: delivery.id).uuidString.lowercased(), forKey: .apnsID)
            try item.encode(delivery.attempts, forKey: .attempts)
            if delivery.status == .deferred || delivery.status == .queued {
                try item.encode(delivery.dueAt, forKey: .until)
            }
            try item.encode(delivery.createdAt, forKey: .createdAt)
            try item.encode(delivery.updatedAt, forKey: .updatedAt)
            // The funnel of this delivery: its provider's acceptance, the device's receipt, the open.
            if delivery.status == .sent { try item.encode(delivery.updatedAt, forKey: .acceptedAt) }
            try item.encodeIfPresent(delivery.receivedAt, forKey: .receivedAt)
            try item.encodeIfPresent(delivery.openedAt, forKey: .openedAt)
            let trace = DecisionTrace.entries(delivery.trace)
            if !trace.isEmpty { try item.encode(trace, forKey: .trace) }
        }
    }
}
