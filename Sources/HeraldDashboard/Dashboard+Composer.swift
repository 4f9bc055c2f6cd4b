import Foundation
import HeraldAPI
import HeraldCore
import HeraldEngine
import HeraldPayload
import HeraldStore
import Hummingbird
import Logging

/// The composer: a catalog type or a plain alert to a few users, previewed per
/// device as the provider would get it (and its size against the limit), then sent or scheduled
/// through the same path as `POST …/notifications`, and followed on the notification's page.
extension Dashboard {
    /// How many users one composition may name (a campaign to everyone is the API's `to.all`).
    static let composerMaximumUsers = 100
    /// How many devices a preview shows.
    static let previewMaximumDevices = 50

    static func addComposerRoutes(to router: Router<HeraldRequestContext>, runtime: HeraldRuntime) {
        router.get("/dashboard/apps/:app/compose") { request, context in
            try await withApp(request, context, runtime) { session, app in
                var form = ComposeForm()
                form.userIDs = request.uri.queryParameters.get("user_id") ?? ""
                return composePage(form, previews: nil, error: nil, session: session, app: app, status: .ok)
            }
        }
        router.post("/dashboard/apps/:app/compose") { request, context in
            try await withApp(request, context, runtime) { session, app in
                let fields = try await form(request)
                guard checkCSRF(fields, session) else { return csrfRefused() }
                let form = ComposeForm(fields)
                do {
                    let send = try form.sendRequest()
                    if fields["action"] == "send" {
                        let accepted = try await NotificationSends.accept(send, app: app, runtime: runtime)
                        let id = accepted.record.id.uuidString.lowercased()
                        runtime.logger.notice(
                            "Dashboard send",
                            metadata: [
                                "herald.app": "\(app.id)", "herald.notification": "\(id)",
                                "herald.devices": "\(accepted.record.recipients)",
                                "herald.dashboard.role": "\(describe(session.role))", "herald.peer": "\(context.peer)",
                            ])
                        return redirect("/dashboard/apps/\(escaped(app.id))/notifications/\(id)")
                    }
                    let previews = try await preview(send, app: app, runtime: runtime)
                    return composePage(form, previews: previews, error: nil, session: session, app: app, status: .ok)
                } catch let error as CompositionError {
                    let message = "\(ComposeForm.label(of: error.field)): \(error.message)"
                    return composePage(
                        form, previews: nil, error: message, session: session, app: app, status: .badRequest)
                } catch let error as RenderingError {
                    return composePage(
                        form, previews: nil, error: error.message, session: session, app: app, status: .badRequest)
                }
            }
        }
    }

    static func composePage(
        _ form: ComposeForm, previews: [ComposePage.Device]?, error: String?, session: DashboardSession,
        app: AppRuntime,
        status: HTTPResponse.Status
    ) -> Response {
        let types = (app.catalog?.types ?? []).map {
            NotificationsPage.Option(
                name: $0.name, selected: $0.name == form.type || ($0.id != nil && $0.id == form.type))
        }
        let view = ComposePage(
            app: app.id, csrf: session.csrf, types: types, form: form, error: error, previewed: previews != nil,
            devices: previews ?? [], maximumUsers: composerMaximumUsers)
        var response = render("Compose", "compose", view, session: session, app: app.id, tab: "compose")
        response.status = status
        return response
    }

    /// What each device of the named users would be sent now: the copy in its locale, the
    /// request as the provider gets it (a delivery's stamp with id 0; tokens by 8 characters)
    /// and its size against the limit. Quiet hours, pacing and preferences decide when it is
    /// sent; the preview shows what is sent.
    static func preview(_ send: SendRequest, app: AppRuntime, runtime: HeraldRuntime) async throws -> [ComposePage
        .Device]
    {
        let id = UUID.random()
        let now = runtime.store.now
        let stored = try NotificationComposer.compose(
            send.draft, payloadKey: app.configuration.payloadKey, catalog: app.catalog,
            fcm: app.configuration.fcm != nil, now: now, id: id
        ).content
        guard case .users(let userIDs) = send.recipients else { return [] }
        var devices: [ComposePage.Device] = []
        for userID in userIDs {
            let user = try await runtime.store.users.user(appID: app.id, userID: userID)
            let found = try await runtime.store.devices.devices(
                appID: app.id, userID: userID, limit: previewMaximumDevices)
            if found.isEmpty {
                devices.append(ComposePage.Device(user: userID, note: "no device registered"))
                continue
            }
            for device in found {
                guard devices.count < previewMaximumDevices else { return devices }
                devices.append(try previewDevice(stored, device: device, user: user, app: app, id: id, now: now))
            }
        }
        return devices
    }

    static func previewDevice(
        _ stored: StoredNotificationContent, device: DeviceRecord, user: UserRecord?, app: AppRuntime, id: UUID,
        now: Date
    ) throws -> ComposePage.Device {
        var content = stored.content
        var actionTokens: [(id: Int, token: Int)] = []
        let locale = device.locale ?? user?.locale
        if let typed = stored.typed, let catalog = app.catalog, let type = catalog.type(typed.type) {
            // As the planner renders it.
            let copy = stored.copy(of: type, locale: locale, defaultLocale: catalog.app.defaultLocale)
            content = stored.deviceContent(copy: copy, decided: stored.policyContent(copy: copy))
            actionTokens = type.actionTokenLengths
        }
        var view = ComposePage.Device(
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
            notificationID: id, deliveryID: 0, platform: device.platform, token: Format.token(device.token))
        let variant = DeviceRenderer.Variant(notificationID: id)
        let bytes: Data
        if device.platform == "fcm" {
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

/// The composer's form as sent, kept to show it again.
struct ComposeForm {
    var type = ""
    var title = ""
    var body = ""
    var data = ""
    var userIDs = ""
    var deliverAt = ""
    var cancelKey = ""

    init() {}

    init(_ fields: [String: String]) {
        func field(_ name: String) -> String { fields[name]?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "" }
        type = field("type")
        title = field("title")
        body = field("body")
        data = field("data")
        userIDs = field("user_ids")
        deliverAt = field("deliver_at")
        cancelKey = field("cancel_key")
    }

    /// The form's label for an API field an error names.
    static func label(of field: String) -> String {
        switch field {
        case "to", "to.user_ids": "Users"
        case "alert", "alert.title": "Title"
        case "alert.body": "Body"
        case "deliver_at": "Deliver at"
        case "cancel_key": "Cancel key"
        case "type": "Type"
        default: field.hasPrefix("data") ? "Data (\(field))" : field
        }
    }

    /// The users named: separated by commas, spaces or lines.
    var users: [String] {
        var seen = Set<String>()
        return userIDs.split(whereSeparator: { $0 == "," || $0.isWhitespace }).map(String.init).filter {
            seen.insert($0).inserted
        }
    }

    /// The send the form asks for (what `POST …/notifications` would take); the first problem
    /// names its field.
    func sendRequest() throws(CompositionError) -> SendRequest {
        let users = self.users
        guard !users.isEmpty else {
            throw CompositionError(.missing, field: "to.user_ids", message: "to.user_ids is required")
        }
        guard users.count <= Dashboard.composerMaximumUsers else {
            throw .invalid("to.user_ids", "at most \(Dashboard.composerMaximumUsers) users; send to more with the API")
        }
        var draft = NotificationDraft()
        if !type.isEmpty { draft.type = type }
        if !title.isEmpty || !body.isEmpty {
            draft.alert = .init(title: title.isEmpty ? nil : title, body: body.isEmpty ? nil : body)
        } else if type.isEmpty {
            throw .invalid("alert.body", "pick a type or write a title or body")
        }
        if !data.isEmpty { draft.data = try parsedData() }
        if !deliverAt.isEmpty {
            // An RFC 3339 time, or the browser's date-time field (taken as UTC).
            draft.deliverAt =
                HeraldTime.parse(deliverAt) != nil ? deliverAt : deliverAt + (deliverAt.count == 16 ? ":00Z" : "Z")
        }
        if !cancelKey.isEmpty, !SendLimits.isValidCancelKey(cancelKey) {
            throw .invalid("cancel_key", "cancel_key is 1 to \(SendLimits.maximumCancelKey) bytes")
        }
        return SendRequest(recipients: .users(users), draft: draft, cancelKey: cancelKey.isEmpty ? nil : cancelKey)
    }

    /// `data`: a JSON object, or `key=value` lines.
    func parsedData() throws(CompositionError) -> JSONValue {
        if data.hasPrefix("{") {
            guard let value = try? JSONDecoder().decode(JSONValue.self, from: Data(data.utf8)), value.objectValue != nil
            else {
                throw .invalid("data", "data is a JSON object or key=value lines")
            }
            return value
        }
        var object: [String: JSONValue] = [:]
        for line in data.split(whereSeparator: \.isNewline) {
            let line = line.trimmingCharacters(in: .whitespaces)
            guard !line.isEmpty else { continue }
            guard let equals = line.firstIndex(of: "="), equals != line.startIndex else {
                throw .invalid("data", "\"\(line.prefix(40))\" is not key=value")
            }
            object[String(line[..<equals]).trimmingCharacters(in: .whitespaces)] = .string(
                String(line[line.index(after: equals)...]).trimmingCharacters(in: .whitespaces))
        }
        return .object(object)
    }
}

struct ComposePage {
    struct Device {
        var user: String
        var device: String?
        var platform = ""
        var locale = ""
        var title: String?
        var body: String?
        var payload = ""
        var size = 0
        var limit = 0
        var over = false
        /// Why there is nothing to show (no device), or why it is not sent (inactive).
        var note: String?

        init(user: String, note: String?) {
            self.user = user
            self.note = note
        }
    }

    var app: String
    var csrf: String
    var types: [NotificationsPage.Option]
    var form: ComposeForm
    var error: String?
    var previewed: Bool
    var devices: [Device]
    var maximumUsers: Int
}
