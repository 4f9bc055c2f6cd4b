import Foundation
import HeraldCore
import HeraldEngine
import HeraldPayload
import HeraldSchedule
import HeraldStore
import Hummingbird

/// The engagement loop's routes: opens reported by devices and the analytics per
/// type they feed.
extension HeraldAPI {
    static func addEngagementRoutes(to routes: AppRoutes, runtime: HeraldRuntime) {
        routes.clientWrite.post("opened") { request, context in
            let caller = try context.authorized()
            let (app, tokenUser) = (caller.app, caller.tokenUser)
            // A client key speaks for the user its token proves; the delivery must be theirs.
            let now = runtime.store.now
            let open = try await decode(OpenedBody.self, request).validated(now: now)
            guard
                let delivery = try await runtime.store.tracks.deliveryReference(
                    appID: app.id, deliveryID: open.deliveryID)
            else {
                throw APIError(
                    .notFound, code: "not_found",
                    message:
                        "no delivery \(open.deliveryID) in this app (a delivery being sent has its row once its provider answered: report again shortly)",
                    field: "delivery_id")
            }
            guard delivery.deviceID == open.deviceID else {
                throw APIError(
                    .forbidden, code: "forbidden", message: "the delivery went to another device than device_id",
                    field: "device_id")
            }
            if let tokenUser, delivery.userID != tokenUser {
                throw APIError(
                    .forbidden, code: "forbidden", message: "the delivery is another user's than the user token's",
                    field: UserToken.header)
            }
            let type = delivery.type.flatMap { app.catalog?.type($0) }
            if open.action != OpenedBody.defaultAction, let type,
                !type.actions.contains(where: { $0.id == open.action })
            {
                let known = ([OpenedBody.defaultAction] + type.actions.map(\.id)).joined(separator: ", ")
                throw APIError.invalid("action", "action is one of \(known) for \(type.name)")
            }
            // The built-in app.opened event, for a delivery to a user's device: what a step's
            // `unless` and the catalog's triggers read.
            var event: TrackRepository.OpenEvent?
            if let userID = delivery.userID {
                var data: [String: JSONValue] = [
                    "delivery_id": .int(Int(delivery.id)),
                    "notification_id": .string(delivery.notificationID.uuidString.lowercased()),
                    "action": .string(open.action),
                ]
                if let type { data["type"] = .string(type.name) }
                let text = String(decoding: try JSONEncoder().encode(JSONValue.object(data)), as: UTF8.self)
                let checked = UserEvent(
                    name: TrackRepository.openedEvent, userID: userID, data: text, occurredAt: open.at,
                    idempotencyKey: nil)
                event = TrackRepository.OpenEvent(
                    id: UUID.random(), userID: userID, data: text,
                    effects: try await Triggers.effects(app: app, event: checked, runtime: runtime, now: now),
                    badgePush: Triggers.badgePush(app: app))
            }
            let recorded = try await runtime.store.tracks.recordOpen(
                appID: app.id, delivery, action: open.action, openedAt: open.at, event: event)
            if recorded.counted {
                runtime.metrics.opened(app: app.id, type: type?.name)
                if !recorded.notifications.isEmpty {
                    runtime.wake.signal(outbox: true)
                    for _ in recorded.notifications { runtime.metrics.notificationCreated(app: app.id) }
                }
            }
            return try JSONResponse.make(OpenedView(deliveryID: delivery.id, recorded: recorded))
        }
        routes.server.get("analytics") { request, context in
            let app = try context.authorized().app
            let query = try AnalyticsQuery(request.uri.queryParameters, today: runtime.store.now, catalog: app.catalog)
            let counts = try await runtime.store.tracks.typeCounts(
                appID: app.id, days: query.days, type: query.type?.name)
            let permissions = try await runtime.store.tracks.permissionCounts(appID: app.id)
            return try JSONResponse.make(
                AnalyticsView(
                    days: query.days, type: query.type, counts: counts, permissions: permissions, catalog: app.catalog))
        }
    }
}
