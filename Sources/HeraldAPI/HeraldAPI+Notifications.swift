import Foundation
import HeraldCore
import HeraldEngine
import HeraldPayload
import HeraldStore
import Hummingbird
import NIOCore

/// Sends: a notification stored, read back with its deliveries, cancelled by key.
extension HeraldAPI {
    static func addNotificationRoutes(to routes: AppRoutes, runtime: HeraldRuntime) {
        routes.server.post("notifications") { request, context in
            let app = try context.authorized().app
            let body = try await decode(NotificationBody.self, request, limit: largeBodyLimit)
            return try JSONResponse.make(try await send(body, app: app, runtime: runtime), status: .accepted)
        }
        routes.server.post("cancel") { request, context in
            let app = try context.authorized().app
            let (key, users) = try await decode(CancelBody.self, request, limit: largeBodyLimit).validated()
            let done = try await runtime.store.notifications.cancel(appID: app.id, cancelKey: key, userIDs: users)
            runtime.metrics.cancelled(app: app.id, done.cancelled)
            return try JSONResponse.make(
                CancelView(
                    cancelled: done.cancelled + done.steps, inFlight: done.inFlight,
                    broadcastsSkipped: done.broadcastsSkipped, steps: done.steps))
        }
        routes.server.get("notifications/:id") { request, context in
            let app = try context.authorized().app
            let id = try notificationParameter(context)
            guard let record = try await runtime.store.notifications.notification(appID: app.id, id: id) else {
                throw APIError(.notFound, code: "not_found", message: "no such notification", field: "id")
            }
            let limit = try queryNumber(request, "limit", default: 1000, in: 1...10_000)
            let offset = try queryNumber(request, "offset", default: 0, in: 0...1_000_000_000)
            let counts = try await runtime.store.notifications.deliveryCounts(notificationID: id)
            let deliveries = try await runtime.store.notifications.deliveries(
                notificationID: id, limit: limit, offset: offset)
            return try JSONResponse.make(NotificationView(record: record, counts: counts, deliveries: deliveries))
        }
    }
}
