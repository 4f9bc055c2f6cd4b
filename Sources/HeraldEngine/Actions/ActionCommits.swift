package import Foundation
import HeraldCore
import HeraldPayload
package import HeraldStore
import Logging

/// Why a quick action (or a resolution) was refused; the API answers each with its status.
package enum ActionError: Error, Equatable {
    /// The token is not one Herald issued for this app, or it expired: why.
    case invalidToken(String)
    /// The token's delivery has no row yet: it is written once its provider answered.
    case notRecordedYet
    /// The token was sent to another device than the one committing it.
    case otherDevice
    /// The user dealt with the notification on another device: its label.
    case resolvedElsewhere(label: String)
    /// Another action of the same delivery was committed first: which, and its status.
    case alreadyCommitted(action: String, status: String)
    /// No such notification of the app.
    case noSuchNotification
    /// The device had no delivery of the notification.
    case noDeliveryToDevice
}

/// A device commits a quick action from the lock screen with the token its payload carried:
/// the commit is kept as an audit row and forwarded to the app's webhook (the first try at
/// once, so the device gets the backend's answer), and the user's other devices learn it is
/// dealt with.
package enum ActionCommits {
    /// Commits `token`'s action from `deviceID`: the commit as it stands (queued while the
    /// webhook is retried), and whether it is a replay of an earlier commit.
    package static func commit(
        app: AppRuntime, token text: String, deviceID: String, turnID: String?, text reply: String?,
        runtime: HeraldRuntime
    ) async throws -> (commit: ActionRepository.ActionCommit, replay: Bool) {
        let now = runtime.store.now
        let token = try await verify(text, app: app, now: now, runtime: runtime)
        guard
            let delivery = try await runtime.store.tracks.deliveryReference(
                appID: app.id, deliveryID: token.deliveryID)
        else { throw ActionError.notRecordedYet }
        guard delivery.deviceID == deviceID else { throw ActionError.otherDevice }
        // Resolved on another device already (the user dealt with it there): refused, saying where.
        if let userID = delivery.userID,
            let resolution = try await runtime.store.actions.resolution(
                appID: app.id, notificationID: delivery.notificationID, userID: userID),
            resolution.deviceID != delivery.deviceID
        {
            throw ActionError.resolvedElsewhere(label: resolution.label)
        }
        let commit = ActionRepository.ActionCommit(
            deliveryID: delivery.id, action: token.action, notificationID: delivery.notificationID,
            deviceID: delivery.deviceID, userID: delivery.userID, turnID: turnID, text: reply, status: .queued,
            createdAt: now, updatedAt: now)
        let (stored, new, backlog) = try await runtime.store.actions.beginCommit(appID: app.id, commit)
        guard new else {
            // Replayed (a retry from the device): the first answer. Another action of the
            // same delivery: refused, with what was committed.
            guard stored.action == token.action else {
                throw ActionError.alreadyCommitted(action: stored.action, status: stored.status.rawValue)
            }
            runtime.metrics.action(app: app.id, outcome: "replay")
            return (stored, true)
        }
        guard let webhook = app.configuration.webhook else {
            // No backend to tell: the commit is the audit row.
            try await runtime.store.actions.finishCommit(
                appID: app.id, deliveryID: delivery.id, status: .committed, result: nil, latencyMilliseconds: 0)
            runtime.metrics.action(app: app.id, outcome: "committed")
            var done = stored
            done.status = .committed
            return (done, false)
        }
        let answered = try await forward(
            stored, delivery: delivery, webhook: webhook, backlog: backlog, app: app, now: now, runtime: runtime)
        runtime.metrics.action(app: app.id, outcome: answered.status.rawValue)
        // The user's other devices learn it is dealt with (unless the backend refused it).
        if answered.status != .failed, let userID = delivery.userID {
            await resolveElsewhere(delivery, action: token.action, userID: userID, app: app, runtime: runtime)
        }
        runtime.logger.info(
            "Quick action committed",
            metadata: [
                "herald.app": "\(app.id)", "herald.delivery.id": "\(delivery.id)",
                "herald.action": "\(token.action)", "herald.status": "\(answered.status.rawValue)",
            ])
        return (answered, false)
    }

    /// The token, verified with the app's current key or the one rotating out.
    private static func verify(_ text: String, app: AppRuntime, now: Date, runtime: HeraldRuntime) async throws
        -> ActionToken
    {
        var failure: ActionToken.Failure?
        for key in try await runtime.actionVerificationKeys(app) {
            do throws(ActionToken.Failure) {
                return try ActionToken.verify(text, appID: app.id, key: key, now: now)
            } catch {
                failure = failure ?? error
            }
        }
        throw ActionError.invalidToken(failure?.message ?? "the action token is not valid")
    }

    /// Tells the app's webhook: at once, unless the user's earlier messages still wait (then
    /// behind them); a failed first try is queued for the retry schedule. The commit as it
    /// stands after.
    private static func forward(
        _ stored: ActionRepository.ActionCommit, delivery: TrackRepository.DeliveryReference,
        webhook: HeraldConfiguration.WebhookConfiguration, backlog: Bool, app: AppRuntime, now: Date,
        runtime: HeraldRuntime
    ) async throws -> ActionRepository.ActionCommit {
        let type = delivery.type.flatMap { app.catalog?.type($0)?.name }
        let messageID = "msg_" + UUID.random().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
        let payload = WebhookEvent.actionCommitted(appID: app.id, commit: stored, type: type, at: now)
        let idempotencyKey = "\(delivery.id):\(stored.action)"
        func queue(attempts: Int, dueAt: Date, status: Int?, error: String?, final: String? = nil) async throws {
            try await runtime.store.actions.queueWebhook(
                appID: app.id, messageID: messageID, userID: delivery.userID,
                event: WebhookEvent.actionCommittedType, idempotencyKey: idempotencyKey, body: payload,
                attempts: attempts, dueAt: dueAt, lastStatus: status, lastError: error, commitDelivery: delivery.id,
                status: final ?? "pending")
        }
        if backlog {
            // The user's earlier messages go first: this one queues behind them.
            try await queue(attempts: 0, dueAt: now, status: nil, error: nil)
            runtime.webhookWake.signal()
            return stored
        }
        let attempt = await runtime.webhooks.send(
            webhook, messageID: messageID, body: Data(payload.utf8), idempotencyKey: idempotencyKey,
            timeout: webhook.timeout)
        var answered = stored
        if attempt.delivered {
            answered.status = .committed
            answered.result = WebhookSender.deviceResult(attempt.body)
            answered.latencyMilliseconds = attempt.milliseconds
        } else if attempt.abort {
            answered.status = .failed
            answered.latencyMilliseconds = attempt.milliseconds
        } else {
            // Queued: tried again on the schedule, the first retry in 5 s.
            try await queue(
                attempts: 1, dueAt: now.addingTimeInterval(WebhookSender.retryDelay(afterAttempts: 1) ?? 5),
                status: attempt.status, error: attempt.error)
            return answered
        }
        // Kept as sent (or aborted), for the audit and a replay.
        try await queue(
            attempts: 1, dueAt: now, status: attempt.status, error: nil,
            final: answered.status == .committed ? "delivered" : "aborted")
        try await runtime.store.actions.finishCommit(
            appID: app.id, deliveryID: delivery.id, status: answered.status, result: answered.result,
            latencyMilliseconds: answered.latencyMilliseconds)
        return answered
    }

    /// The notification resolved on the user's other devices with the action's label. The
    /// commit stands whatever happens here: a failed replacement is logged.
    private static func resolveElsewhere(
        _ delivery: TrackRepository.DeliveryReference, action id: String, userID: String, app: AppRuntime,
        runtime: HeraldRuntime
    ) async {
        do {
            let action = delivery.type.flatMap { app.catalog?.type($0) }?.actions.first { $0.id == id }
            let name =
                try await runtime.store.devices.device(appID: app.id, deviceID: delivery.deviceID)?.name
                ?? "another device"
            let label = (action?.resolvedLabel ?? "✓ \(action?.title ?? id) on {device}")
                .replacingOccurrences(of: "{device}", with: name)
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
}

/// Resolved elsewhere: the replacement the user's other devices get.
package enum Resolutions {
    /// Resolves `notificationID` for `userID` from `deviceID`: its waiting deliveries to the user
    /// are cancelled and the other devices get `label` as a visible alert with the same collapse
    /// id (APNs `apns-collapse-id`, FCM `tag`): the type's, else the notification's id; no
    /// category (no actions), `content-available`, the same thread.
    package static func resolve(
        app: AppRuntime, notificationID: UUID, userID: String, deviceID: String, label: String, runtime: HeraldRuntime
    ) async throws -> ActionRepository.Resolution {
        guard let record = try await runtime.store.notifications.notification(appID: app.id, id: notificationID) else {
            throw ActionError.noSuchNotification
        }
        let stored = try? JSONDecoder().decode(StoredNotificationContent.self, from: record.content)
        let original = stored?.content
        let replacement = NotificationContent(
            pushType: .alert, priority: .immediate, body: label, threadID: original?.threadID, contentAvailable: true,
            collapseID: original?.collapseID ?? notificationID.uuidString.lowercased(),
            data: [
                "resolved": .object(["n": .string(notificationID.uuidString.lowercased()), "label": .string(label)])
            ],
            androidChannelID: original?.androidChannelID)
        let content = try JSONEncoder().encode(StoredNotificationContent(content: replacement))
        let resolution: ActionRepository.Resolution
        do {
            resolution = try await runtime.store.actions.resolve(
                appID: app.id, notificationID: notificationID, userID: userID, deviceID: deviceID, label: label,
                replacement: (UUID.random(), content))
        } catch let error as StoreError where error.code == .notFound {
            throw ActionError.noDeliveryToDevice
        }
        if resolution.first {
            if resolution.devices > 0 { runtime.wake.signal(outbox: true) }
            runtime.logger.info(
                "Notification resolved elsewhere",
                metadata: [
                    "herald.app": "\(app.id)", "herald.notification.id": "\(notificationID.uuidString.lowercased())",
                    "herald.cancelled": "\(resolution.cancelled)", "herald.devices": "\(resolution.devices)",
                ])
        }
        return resolution
    }
}

/// What the webhook receives.
package enum WebhookEvent {
    package static let actionCommittedType = "action.committed"

    /// `{"type", "timestamp", "data"}`, keys sorted.
    package static func actionCommitted(appID: String, commit: ActionRepository.ActionCommit, type: String?, at: Date)
        -> String
    {
        var data: [String: JSONValue] = [
            "app": .string(appID), "delivery_id": .int(Int(commit.deliveryID)),
            "notification_id": .string(commit.notificationID.uuidString.lowercased()),
            "device_id": .string(commit.deviceID), "action": .string(commit.action),
            "committed_at": .string(HeraldTime.format(at)),
        ]
        if let user = commit.userID { data["user_id"] = .string(user) }
        if let turn = commit.turnID { data["turn_id"] = .string(turn) }
        if let text = commit.text { data["text"] = .string(text) }
        if let type { data["type"] = .string(type) }
        return JSONWriter.encode(
            .object([
                "type": .string(actionCommittedType), "timestamp": .string(HeraldTime.format(at)),
                "data": .object(data),
            ]))
    }
}
