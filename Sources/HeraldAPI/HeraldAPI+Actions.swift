import Foundation
import HeraldCore
import HeraldEngine
import HeraldPayload
import HeraldStore
import Hummingbird
import Logging

/// Quick actions: a device commits an action from the lock screen with the
/// token its payload carried; the commit is forwarded to the app's webhook (first try at once,
/// so the device gets the backend's answer) and kept as an audit row.
extension HeraldAPI {
    static func addActionRoutes(to routes: AppRoutes, runtime: HeraldRuntime) {
        routes.keyless.post("actions") { request, context in
            // No key: the token is the capability. An unknown app answers as a bad token does.
            // The app is looked up before the body is read, and the body is small (a token of
            // ≤ 200 bytes and a reply of ≤ 1,000 characters): a stranger cannot make it buffer more.
            let appID = try context.parameters.require("app")
            guard let app = runtime.apps[appID] else {
                throw APIError(
                    .unauthorized, code: "unauthorized", message: "the action token is not a token Herald issued",
                    field: "token")
            }
            let body = try await decode(ActionBody.self, request, limit: actionBodyLimit).validated()
            let now = runtime.store.now
            var verified: ActionToken?
            var failure: ActionToken.Failure?
            for key in try await runtime.actionVerificationKeys(app) where verified == nil {
                do throws(ActionToken.Failure) {
                    verified = try ActionToken.verify(body.token, appID: app.id, key: key, now: now)
                } catch {
                    failure = failure ?? error
                }
            }
            guard let token = verified else {
                throw APIError(
                    .unauthorized, code: "unauthorized", message: failure?.message ?? "the action token is not valid",
                    field: "token")
            }
            guard
                let delivery = try await runtime.store.tracks.deliveryReference(
                    appID: app.id, deliveryID: token.deliveryID)
            else {
                throw APIError(
                    .notFound, code: "not_found",
                    message:
                        "the token's delivery has no row yet (it is written once its provider answered): commit again shortly",
                    field: "token")
            }
            guard delivery.deviceID == body.deviceID else {
                throw APIError(
                    .forbidden, code: "forbidden",
                    message: "the token is another delivery's: it was sent to another device", field: "device_id")
            }
            // Resolved on another device already (the user dealt with it there): refused, saying where.
            if let userID = delivery.userID,
                let resolution = try await runtime.store.actions.resolution(
                    appID: app.id, notificationID: delivery.notificationID, userID: userID),
                resolution.deviceID != delivery.deviceID
            {
                throw APIError(
                    .conflict, code: "resolved_elsewhere", message: "already resolved: \(resolution.label)",
                    field: "token")
            }
            let commit = ActionRepository.ActionCommit(
                deliveryID: delivery.id, action: token.action, notificationID: delivery.notificationID,
                deviceID: delivery.deviceID,
                userID: delivery.userID, turnID: body.turnID, text: body.text, status: .queued, createdAt: now,
                updatedAt: now)
            let (stored, new, backlog) = try await runtime.store.actions.beginCommit(appID: app.id, commit)
            guard new else {
                // Replayed (a retry from the device): the first answer. Another action of the
                // same delivery: refused, with what was committed.
                guard stored.action == token.action else {
                    throw APIError(
                        .conflict, code: "already_committed",
                        message: "this delivery's \(stored.action) was committed first (\(stored.status.rawValue))",
                        field: "token")
                }
                runtime.metrics.action(app: app.id, outcome: "replay")
                return try ActionView(stored, replay: true).response()
            }
            guard let webhook = app.configuration.webhook else {
                // No backend to tell: the commit is the audit row.
                try await runtime.store.actions.finishCommit(
                    appID: app.id, deliveryID: delivery.id, status: .committed, result: nil, latencyMilliseconds: 0)
                runtime.metrics.action(app: app.id, outcome: "committed")
                var done = stored
                done.status = .committed
                return try ActionView(done, replay: false).response()
            }
            let type = delivery.type.flatMap { app.catalog?.type($0)?.name }
            let messageID = "msg_" + UUID.random().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
            let payload = WebhookEvent.actionCommitted(appID: app.id, commit: stored, type: type, at: now)
            let idempotencyKey = "\(delivery.id):\(token.action)"
            var answered = stored
            if backlog {
                // The user's earlier messages go first: this one queues behind them.
                try await runtime.store.actions.queueWebhook(
                    appID: app.id, messageID: messageID, userID: delivery.userID,
                    event: WebhookEvent.actionCommittedType, idempotencyKey: idempotencyKey,
                    body: payload, attempts: 0, dueAt: now, lastStatus: nil, lastError: nil, commitDelivery: delivery.id
                )
                runtime.webhookWake.signal()
            } else {
                let attempt = await runtime.webhooks.send(
                    webhook, messageID: messageID, body: Data(payload.utf8), idempotencyKey: idempotencyKey,
                    timeout: webhook.timeout)
                if attempt.delivered {
                    answered.status = .committed
                    answered.result = WebhookSender.deviceResult(attempt.body)
                    answered.latencyMilliseconds = attempt.milliseconds
                } else if attempt.abort {
                    answered.status = .failed
                    answered.latencyMilliseconds = attempt.milliseconds
                } else {
                    // Queued: tried again on the schedule, the first retry in 5 s.
                    try await runtime.store.actions.queueWebhook(
                        appID: app.id, messageID: messageID, userID: delivery.userID,
                        event: WebhookEvent.actionCommittedType,
                        idempotencyKey: idempotencyKey, body: payload, attempts: 1,
                        dueAt: now.addingTimeInterval(WebhookSender.retryDelay(afterAttempts: 1) ?? 5),
                        lastStatus: attempt.status,
                        lastError: attempt.error, commitDelivery: delivery.id)
                }
                if answered.status != .queued {
                    // Kept as sent (or aborted), for the audit and a replay.
                    try await runtime.store.actions.queueWebhook(
                        appID: app.id, messageID: messageID, userID: delivery.userID,
                        event: WebhookEvent.actionCommittedType,
                        idempotencyKey: idempotencyKey, body: payload, attempts: 1, dueAt: now,
                        lastStatus: attempt.status, lastError: nil,
                        commitDelivery: delivery.id, status: answered.status == .committed ? "delivered" : "aborted")
                    try await runtime.store.actions.finishCommit(
                        appID: app.id, deliveryID: delivery.id, status: answered.status, result: answered.result,
                        latencyMilliseconds: answered.latencyMilliseconds)
                }
            }
            runtime.metrics.action(app: app.id, outcome: answered.status.rawValue)
            // The user's other devices learn it is dealt with (unless the backend refused it).
            if answered.status != .failed, let userID = delivery.userID {
                let action = delivery.type.flatMap { app.catalog?.type($0) }?.actions.first { $0.id == token.action }
                let name =
                    try await runtime.store.devices.device(appID: app.id, deviceID: delivery.deviceID)?.name
                    ?? "another device"
                let label = (action?.resolvedLabel ?? "✓ \(action?.title ?? token.action) on {device}")
                    .replacingOccurrences(of: "{device}", with: name)
                // The commit stands whatever happens here: a failed replacement is logged, not answered.
                do {
                    _ = try await Resolutions.resolve(
                        app: app, notificationID: delivery.notificationID, userID: userID, deviceID: delivery.deviceID,
                        label: label, runtime: runtime)
                } catch {
                    runtime.logger.error(
                        "A committed action's notification could not be resolved on the user's other devices",
                        metadata: [
                            "herald.delivery.id": "\(delivery.id)", "error": "\(String(describing: error).prefix(300))",
                        ])
                }
            }
            runtime.logger.info(
                "Quick action committed",
                metadata: [
                    "herald.app": "\(app.id)", "herald.delivery.id": "\(delivery.id)",
                    "herald.action": "\(token.action)",
                    "herald.status": "\(answered.status.rawValue)",
                ])
            return try ActionView(answered, replay: false).response()
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
            let resolution = try await Resolutions.resolve(
                app: app, notificationID: id, userID: device.userID, deviceID: deviceID, label: label, runtime: runtime)
            return try JSONResponse.make(ResolutionView(resolution))
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
