import Foundation
import HeraldCore
import HeraldPayload
import HeraldStore

/// Events and their triggers and badges on the server: what an event does,
/// prepared (rendered, checked) before the transaction that stores it and applies it.
enum Triggers {
    /// The effects of `event` for its user, their attributes read from the store only when a
    /// trigger of the catalog answers the event (most `app.opened` events have none).
    static func effects(app: AppRuntime, event: EventBody.Checked, runtime: HeraldRuntime, now: Date) async throws -> HeraldStore.EventEffects {
        guard let catalog = app.catalog, catalog.triggers.contains(where: { $0.event == event.name }) else { return HeraldStore.EventEffects() }
        let stored = try await runtime.store.user(appID: app.id, userID: event.userID)?.attributes
        let attributes = stored.flatMap { try? JSONDecoder().decode(JSONValue.self, from: $0).objectValue } ?? [:]
        return try effects(app: app, event: event, attributes: attributes, now: now)
    }

    /// The effects of the triggers `event` drives, in the catalog's order within each kind.
    static func effects(app: AppRuntime, event: EventBody.Checked, attributes: [String: JSONValue], now: Date) throws(APIError)
        -> HeraldStore.EventEffects
    {
        var effects = HeraldStore.EventEffects()
        guard let catalog = app.catalog else { return effects }
        let data = (try? JSONDecoder().decode(JSONValue.self, from: Data(event.data.utf8)).objectValue) ?? [:]
        var values: [String: String] = [:]
        for (key, value) in data { values[key] = TriggerCondition.text(value) }
        for trigger in catalog.triggers where trigger.event == event.name && trigger.matches(data: data, user: attributes) {
            for (name, template) in trigger.attributes.sorted(by: { $0.key < $1.key }) {
                if let value = Placeholders.render(template, data: values) { effects.attributes[name] = value }
            }
            effects.cancels += trigger.cancel.compactMap { Placeholders.render($0, data: values) }
            if let badge = trigger.badge { effects.badges.append(badge) }
            guard let type = trigger.type else { continue }
            // The event's data, unless the trigger maps it (a missing value leaves its field out).
            let sent: [String: JSONValue] = trigger.data.map { mapping in
                mapping.compactMapValues { Placeholders.render($0, data: values).map(JSONValue.string) }
            } ?? data
            let cancelKey = trigger.cancelKey.flatMap { Placeholders.render($0, data: values) }
            if let cancelKey, cancelKey.isEmpty || cancelKey.utf8.count > NotificationBody.maximumCancelKey {
                throw APIError.invalid("data", "the trigger's cancel key \"\(cancelKey.prefix(40))\" is not 1 to 128 bytes")
            }
            let body = NotificationBody(to: .init(userIDs: [event.userID]), data: .object(sent), cancelKey: cancelKey, type: type)
            let prepared = try body.prepared(payloadKey: app.configuration.payloadKey, catalog: catalog, fcm: app.configuration.fcm != nil, now: now)
            let content: Data
            do { content = try JSONEncoder().encode(prepared.content) } catch { throw APIError.invalid("data", "the send cannot be stored") }
            effects.sends.append((UUID.random(), content, body.lane(catalog: catalog), cancelKey))
        }
        return effects
    }

    /// The badge-only push for a new total: `aps.badge` with the absolute total (and `badge` in
    /// the data, for FCM devices), no alert, priority 5, one collapse id so only the latest counts.
    static func badgeContent(app: AppRuntime) -> HeraldStore.BadgeContent {
        let payloadKey = app.configuration.payloadKey
        let fcm = app.configuration.fcm != nil
        return { total in
            let body = NotificationBody(
                to: .init(userIDs: ["badge"]), data: .object(["badge": .int(Int(total))]), priority: 5, collapseID: "herald-badge",
                badge: Int(total))
            return try JSONEncoder().encode(try body.prepared(payloadKey: payloadKey, catalog: nil, fcm: fcm, now: Date()).content)
        }
    }
}

/// `POST /v1/apps/{app}/users/{user_id}/badges`: `{"counter", "delta"}` or `{"counter", "value"}`.
struct BadgeBody: Decodable {
    var counter: String?
    var delta: Int?
    var value: Int?

    func validated() throws(APIError) -> BadgeChange {
        guard let counter else { throw APIError.missing("counter") }
        guard !counter.isEmpty, counter.utf8.count <= 64 else { throw APIError.invalid("counter", "counter is 1 to 64 bytes") }
        switch (delta, value) {
        case (let delta?, nil):
            guard abs(delta) <= 1_000_000 else { throw APIError.invalid("delta", "delta is -1000000 to 1000000") }
            return BadgeChange(counter: counter, delta: Int64(delta))
        case (nil, let value?):
            guard (0...1_000_000).contains(value) else { throw APIError.invalid("value", "value is 0 to 1000000") }
            return BadgeChange(counter: counter, value: Int64(value))
        default: throw APIError.invalid("delta", "send one of delta (a change) or value (the counter's new value)")
        }
    }
}

/// A user's badge: the total the devices show, and its counters.
struct BadgeView: Encodable {
    var badge: Int64
    var counters: [String: Int64]
    var notificationID: String?

    enum CodingKeys: String, CodingKey { case badge, counters, notificationID = "notification_id" }

    init(_ counters: [String: Int64], notification: UUID? = nil) {
        badge = counters.values.reduce(0, +)
        self.counters = counters
        notificationID = notification?.uuidString.lowercased()
    }
}

/// `POST /v1/apps/{app}/users/{user_id}/sync`: `{"origin_device_id", "cursor"}`.
struct SyncBody: Decodable {
    var originDeviceID: String?
    var cursor: String?

    enum CodingKeys: String, CodingKey { case cursor, originDeviceID = "origin_device_id" }

    /// The longest cursor, in bytes (it rides in a 4 KB payload).
    static let maximumCursor = 1_024

    func validated() throws(APIError) -> (origin: String?, cursor: String) {
        guard let cursor else { throw APIError.missing("cursor") }
        guard !cursor.isEmpty, cursor.utf8.count <= Self.maximumCursor else {
            throw APIError.invalid("cursor", "cursor is 1 to \(Self.maximumCursor) bytes")
        }
        if let originDeviceID, originDeviceID.isEmpty || originDeviceID.utf8.count > 256 {
            throw APIError.invalid("origin_device_id", "origin_device_id is 1 to 256 bytes")
        }
        return (originDeviceID, cursor)
    }
}

/// What a sync scheduled: per other device, when its push is due, and whether it joined one
/// already waiting (coalesced) or waits for the device's hourly budget (held).
struct SyncView: Encodable {
    struct Device: Encodable {
        var deviceID: String
        var dueAt: String
        var coalesced: Bool
        var held: Bool
        enum CodingKeys: String, CodingKey { case coalesced, held, deviceID = "device_id", dueAt = "due_at" }
    }

    var devices: [Device]

    init(_ plans: [HeraldStore.SyncPlan]) {
        devices = plans.map { Device(deviceID: $0.deviceID, dueAt: HeraldTime.format($0.dueAt), coalesced: $0.coalesced, held: $0.held) }
    }
}
