import Foundation
import HeraldCore
import HeraldEngine
import HeraldPayload
import HeraldStore
import Hummingbird
import Logging

/// Quick actions (`ActionCommits` does the commit), resolutions, responses, the audit and
/// webhook replays.
extension HeraldAPI {
    static func addActionRoutes(to routes: AppRoutes, runtime: HeraldRuntime) {
        routes.keyless.post("actions") { request, context in
            // No key: the token is the capability. An unknown app answers as a bad token does.
            // The app is looked up before the body is read, and the body is small (a token of
            // ≤ 200 bytes and a reply of ≤ 1,000 characters): a stranger cannot make it buffer more.
            let appID = try context.parameters.require("app")
            guard let app = runtime.apps[appID] else {
                throw APIError(ActionError.invalidToken("the action token is not a token Herald issued"))
            }
            let body = try await decode(ActionBody.self, request, limit: actionBodyLimit).validated()
            do {
                let (commit, replay) = try await ActionCommits.commit(
                    app: app, token: body.token, deviceID: body.deviceID, turnID: body.turnID, text: body.text,
                    runtime: runtime)
                return try ActionView(commit, replay: replay).response()
            } catch let error as ActionError {
                throw APIError(error)
            }
        }
        routes.clientWrite.post("notifications/:id/resolve") { request, context in
            let caller = try context.authorized()
            let (app, tokenUser) = (caller.app, caller.tokenUser)
            let id = try notificationParameter(context)
            let body = try await decode(ResolveBody.self, request)
            guard let deviceID = body.deviceID else { throw APIError.missing("device_id") }
            guard let label = body.label else { throw APIError.missing("label") }
            guard !label.isEmpty, label.count <= 178 else {
                throw APIError.invalid("label", "label is 1 to 178 characters")
            }
            let device = try await ownedDevice(app: app, deviceID: deviceID, tokenUser: tokenUser, runtime: runtime)
            do {
                let resolution = try await Resolutions.resolve(
                    app: app, notificationID: id, userID: device.userID, deviceID: deviceID, label: label,
                    runtime: runtime)
                return try JSONResponse.make(ResolutionView(resolution))
            } catch let error as ActionError {
                throw APIError(error)
            }
        }
        routes.clientWrite.post("notifications/:id/responses") { request, context in
            let caller = try context.authorized()
            let (app, tokenUser) = (caller.app, caller.tokenUser)
            let id = try notificationParameter(context)
            let body = try await decode(RespondBody.self, request).validated()
            guard try await runtime.store.notifications.notification(appID: app.id, id: id) != nil else {
                throw APIError(.notFound, code: "not_found", message: "no such notification", field: "id")
            }
            let device = try await ownedDevice(
                app: app, deviceID: body.deviceID, tokenUser: tokenUser, runtime: runtime)
            let response = ActionRepository.NotificationResponse(
                id: UUID.random(), notificationID: id, userID: device.userID, deviceID: body.deviceID, text: body.text,
                energy: body.energy,
                mood: body.mood, focus: body.focus, createdAt: runtime.store.now)
            try await runtime.store.actions.addResponse(appID: app.id, response)
            return try JSONResponse.make(ResponseView(response), status: .created)
        }
        routes.server.get("notifications/:id/responses") { request, context in
            let app = try context.authorized().app
            let id = try notificationParameter(context)
            let limit = try queryNumber(request, "limit", default: 100, in: 1...1000)
            let responses = try await runtime.store.actions.responses(appID: app.id, notificationID: id, limit: limit)
            return try JSONResponse.make(["responses": responses.map(ResponseView.init)])
        }
        routes.server.get("audit") { request, context in
            let app = try context.authorized().app
            let parameters = request.uri.queryParameters
            let userID = parameters.get("user_id")
            if let userID, userID.isEmpty || userID.utf8.count > 256 {
                throw APIError.invalid("user_id", "user_id is 1 to 256 bytes")
            }
            var since = runtime.store.now.addingTimeInterval(-30 * 86_400)
            if let text = parameters.get("since") {
                guard let date = HeraldTime.parse(text) else {
                    throw APIError.invalid("since", "since is an RFC 3339 time such as 2026-11-23T09:00:00Z")
                }
                since = date
            }
            let limit = try queryNumber(request, "limit", default: 100, in: 1...1000)
            let commits = try await runtime.store.actions.commits(
                appID: app.id, userID: userID, since: since, limit: limit)
            return try JSONResponse.make(["commits": commits.map { AuditEntry($0) }])
        }
        routes.server.post("webhooks/replay") { request, context in
            let app = try context.authorized().app
            let body = try await decode(ReplayBody.self, request)
            guard let text = body.since else { throw APIError.missing("since") }
            guard let since = HeraldTime.parse(text) else {
                throw APIError.invalid("since", "since is an RFC 3339 time such as 2026-11-23T09:00:00Z")
            }
            guard app.configuration.webhook != nil else {
                throw APIError.invalid("app", "the app has no webhook (apps[].webhook.url): nothing to replay to")
            }
            let replayed = try await runtime.store.actions.replayWebhooks(appID: app.id, since: since)
            if replayed > 0 { runtime.webhookWake.signal() }
            runtime.logger.notice(
                "Webhook messages replayed", metadata: ["herald.app": "\(app.id)", "herald.messages": "\(replayed)"])
            return try JSONResponse.make(["replayed": replayed])
        }
    }
}

/// `POST /v1/apps/{app}/actions`.
struct ActionBody: Decodable {
    var token: String?
    var deviceID: String?
    var turnID: String?
    var text: String?

    enum CodingKeys: String, CodingKey {
        case token
        case deviceID = "device_id"
        case turnID = "turn_id"
        case text
    }

    func validated() throws(APIError) -> (token: String, deviceID: String, turnID: String?, text: String?) {
        guard let token else { throw APIError.missing("token") }
        guard let deviceID else { throw APIError.missing("device_id") }
        guard !deviceID.isEmpty, deviceID.utf8.count <= 256 else {
            throw APIError.invalid("device_id", "device_id is 1 to 256 bytes")
        }
        if let turnID, turnID.isEmpty || turnID.utf8.count > 128 {
            throw APIError.invalid("turn_id", "turn_id is 1 to 128 bytes")
        }
        if let text, text.count > 1000 { throw APIError.invalid("text", "text is at most 1000 characters") }
        return (token, deviceID, turnID, text)
    }
}

extension APIError {
    /// A refused action or resolution, with its status, code and field.
    init(_ error: ActionError) {
        switch error {
        case .invalidToken(let message):
            self.init(.unauthorized, code: "unauthorized", message: message, field: "token")
        case .notRecordedYet:
            self.init(
                .notFound, code: "not_found",
                message:
                    "the token's delivery has no row yet (it is written once its provider answered): commit again shortly",
                field: "token")
        case .otherDevice:
            self.init(
                .forbidden, code: "forbidden",
                message: "the token is another delivery's: it was sent to another device",
                field: "device_id")
        case .resolvedElsewhere(let label):
            self.init(.conflict, code: "resolved_elsewhere", message: "already resolved: \(label)", field: "token")
        case .alreadyCommitted(let action, let status):
            self.init(
                .conflict, code: "already_committed",
                message: "this delivery's \(action) was committed first (\(status))",
                field: "token")
        case .noSuchNotification:
            self.init(.notFound, code: "not_found", message: "no such notification", field: "id")
        case .noDeliveryToDevice:
            self.init(
                .forbidden, code: "forbidden", message: "device_id had no delivery of this notification",
                field: "device_id")
        }
    }
}
