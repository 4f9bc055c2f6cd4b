package import Foundation
package import HeraldCore
package import HeraldEngine
package import HeraldPayload
package import HeraldStore

/// Events and their triggers and badges on the server: what an event does,
/// prepared (rendered, checked) before the transaction that stores it and applies it.
package enum Triggers {
    /// The effects of `event` for its user, their attributes read from the store only when a
    /// trigger of the catalog answers the event (most `app.opened` events have none).
    package static func effects(app: AppRuntime, event: UserEvent, runtime: HeraldRuntime, now: Date) async throws
        -> DeviceRepository.EventEffects
    {
        guard let catalog = app.catalog, catalog.triggers.contains(where: { $0.event == event.name }) else {
            return DeviceRepository.EventEffects()
        }
        let stored = try await runtime.store.users.user(appID: app.id, userID: event.userID)?.attributes
        let attributes = stored.flatMap { try? JSONDecoder().decode(JSONValue.self, from: $0).objectValue } ?? [:]
        return try effects(app: app, event: event, attributes: attributes, now: now)
    }

    /// The effects of the triggers `event` drives, in the catalog's order within each kind.
    package static func effects(app: AppRuntime, event: UserEvent, attributes: [String: JSONValue], now: Date)
        throws(CompositionError)
        -> DeviceRepository.EventEffects
    {
        var effects = DeviceRepository.EventEffects()
        guard let catalog = app.catalog else { return effects }
        let data = (try? JSONDecoder().decode(JSONValue.self, from: Data(event.data.utf8)).objectValue) ?? [:]
        var values: [String: String] = [:]
        for (key, value) in data { values[key] = TriggerCondition.text(value) }
        for trigger in catalog.triggers
        where trigger.event == event.name && trigger.matches(data: data, user: attributes) {
            for (name, template) in trigger.attributes.sorted(by: { $0.key < $1.key }) {
                if let value = Placeholders.render(template, data: values) { effects.attributes[name] = value }
            }
            effects.cancels += trigger.cancel.compactMap { Placeholders.render($0, data: values) }
            if let badge = trigger.badge { effects.badges.append(badge) }
            guard let type = trigger.type else { continue }
            // The event's data, unless the trigger maps it (a missing value leaves its field out).
            let sent: [String: JSONValue] =
                trigger.data.map { mapping in
                    mapping.compactMapValues { Placeholders.render($0, data: values).map(JSONValue.string) }
                } ?? data
            let cancelKey = trigger.cancelKey.flatMap { Placeholders.render($0, data: values) }
            if let cancelKey, !SendLimits.isValidCancelKey(cancelKey) {
                throw .invalid(
                    "data",
                    "the trigger's cancel key \"\(cancelKey.prefix(40))\" is not 1 to \(SendLimits.maximumCancelKey) bytes"
                )
            }
            let composed = try NotificationComposer.compose(
                NotificationDraft(data: .object(sent), type: type), payloadKey: app.configuration.payloadKey,
                catalog: catalog,
                platforms: app.configuration.platforms, now: now)
            let content: Data
            do { content = try JSONEncoder().encode(composed.content) } catch {
                throw .invalid("data", "the send cannot be stored")
            }
            effects.sends.append((UUID.random(), content, DeliveryLane(urgent: composed.urgent), cancelKey))
        }
        return effects
    }

    /// The app's badge-only push, for the store to render at the new total.
    package static func badgePush(app: AppRuntime) -> BadgePush {
        BadgePush(payloadKey: app.configuration.payloadKey, platforms: app.configuration.platforms)
    }
}

/// An event a user did, checked: what triggers and `unless` read.
package struct UserEvent: Sendable {
    package var name: String
    package var userID: String
    /// The event's data, a JSON object as text.
    package var data: String
    package var occurredAt: Date
    package var idempotencyKey: String?

    package init(name: String, userID: String, data: String, occurredAt: Date, idempotencyKey: String?) {
        self.name = name
        self.userID = userID
        self.data = data
        self.occurredAt = occurredAt
        self.idempotencyKey = idempotencyKey
    }
}
