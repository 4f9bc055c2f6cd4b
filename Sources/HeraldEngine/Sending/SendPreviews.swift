import Foundation
import HeraldCore
import HeraldPayload
import HeraldStore

/// What one device of a composition would be sent now, as the dashboard's composer shows it.
package struct SendPreview: Sendable {
    package var user: String
    package var device: String?
    package var platform = ""
    package var locale = ""
    package var title: String?
    package var body: String?
    /// The request body as the provider gets it, pretty-printed.
    package var payload = ""
    package var size = 0
    package var limit = 0
    package var over = false
    /// Why there is nothing to show (no device), or why it is not sent (inactive).
    package var note: String?

    package init(user: String, note: String?) {
        self.user = user
        self.note = note
    }
}

/// Previews of a send per device, rendered by the same renderer as the send step.
package enum SendPreviews {
    /// What each device of the named users would be sent now: the copy in its locale, the
    /// request as the provider gets it (a delivery's stamp with id 0; tokens by 8 characters)
    /// and its size against the limit. Quiet hours, pacing and preferences decide when it is
    /// sent; the preview shows what is sent.
    package static func preview(
        _ send: SendRequest, app: AppRuntime, runtime: HeraldRuntime, maximumDevices: Int
    ) async throws -> [SendPreview] {
        let id = UUID.random()
        let now = runtime.store.now
        let stored = try NotificationComposer.compose(
            send.draft, payloadKey: app.configuration.payloadKey, catalog: app.catalog,
            platforms: app.configuration.platforms, now: now, id: id
        ).content
        guard case .users(let userIDs) = send.recipients else { return [] }
        var devices: [SendPreview] = []
        for userID in userIDs {
            let user = try await runtime.store.users.user(appID: app.id, userID: userID)
            let found = try await runtime.store.devices.devices(
                appID: app.id, userID: userID, limit: maximumDevices)
            if found.isEmpty {
                devices.append(SendPreview(user: userID, note: "no device registered"))
                continue
            }
            for device in found {
                guard devices.count < maximumDevices else { return devices }
                devices.append(try self.device(stored, device: device, user: user, app: app, id: id, now: now))
            }
        }
        return devices
    }

    static func device(
        _ stored: StoredNotificationContent, device: DeviceRecord, user: UserRecord?, app: AppRuntime, id: UUID,
        now: Date
    ) throws -> SendPreview {
        var content = stored.content
        var actionTokens: [(id: Int, token: Int)] = []
        let locale = device.locale ?? user?.locale
        if let typed = stored.typed, let catalog = app.catalog, let type = catalog.type(typed.type) {
            // As the planner renders it.
            let copy = stored.copy(of: type, locale: locale, defaultLocale: catalog.app.defaultLocale)
            content = stored.deviceContent(copy: copy, decided: stored.policyContent(copy: copy))
            actionTokens = type.actionTokenLengths
        }
        var view = SendPreview(
            user: device.userID,
            note: device.active ? nil : "inactive: not sent (\(device.inactiveReason ?? "unregistered"))")
        view.device = device.deviceID
        view.platform = device.platform
        view.locale = locale ?? "default"
        view.title = content.title
        view.body = content.body
        // Rendered as the send step renders it, for a delivery id of 0.
        var renderer = DeviceRenderer(now: now)
        let target = DeviceRenderer.Target(
            notificationID: id, deliveryID: 0, platform: device.platform, token: DeviceTokenText.redacted(device.token))
        let variant = DeviceRenderer.Variant(notificationID: id)
        let bytes: Data
        if device.platform == "webpush" {
            // What the service worker reads, before encryption (the limit is the plaintext's).
            let message = renderer.webpush(content, variant: variant, to: target, app: app.rendering)
            view.size = message.payload.count
            view.limit = WebPushEncryptionLimit.plaintext
            bytes = message.payload
        } else if device.platform == "fcm" {
            let message = renderer.fcm(content, variant: variant, to: target)
            view.size = FCMRenderer.payloadSize(message)
            view.limit = FCMMessage.sizeLimit
            bytes = try message.requestBody()
        } else {
            let template = try APNSRenderer.template(
                content, payloadKey: app.configuration.payloadKey, notificationID: id, actionTokens: actionTokens)
            view.size = template.maximumSize
            view.limit = content.pushType.payloadLimit
            bytes = try renderer.apns(content, variant: variant, template: template, to: target, app: app.rendering)
                .payload
        }
        view.over = view.size > view.limit
        view.payload = pretty(bytes)
        return view
    }

    static func pretty(_ json: Data) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        guard let value = try? JSONDecoder().decode(JSONValue.self, from: json), let text = try? encoder.encode(value)
        else {
            return String(decoding: json, as: UTF8.self)
        }
        return String(decoding: text, as: UTF8.self)
    }
}
