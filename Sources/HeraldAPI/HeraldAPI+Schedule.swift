import Foundation
import HeraldCore
import HeraldEngine
import HeraldPayload
import HeraldSchedule
import HeraldStore
import Hummingbird
import Logging
import NIOCore

/// Lifecycle tracks (enrol, bulk enrolments, leave, list), events and their triggers, badges
/// and silent sync.
extension HeraldAPI {
    static func addScheduleRoutes(to routes: AppRoutes, runtime: HeraldRuntime) {
        routes.server.put("users/:user/tracks/:track") { request, context in
            let app = try context.authorized().app
            let userID = try validUserID(context)
            let (catalog, track) = try trackParameter(app, context)
            let body = try await decode(EnrolBody.self, request, limit: largeBodyLimit)
            let now = runtime.store.now
            let (anchor, data, restart, testSeconds) = try body.validated(now: now)
            let zone = try await Tracks.zone(appID: app.id, userID: userID, runtime: runtime)
            let plan = track.plan(anchor: anchor, zone: zone, testSeconds: testSeconds, now: now)
            let (enrolled, record) = try await runtime.store.tracks.enrol(
                appID: app.id, userID: userID, track: track.name, cancelKey: track.cancelKey, anchorAt: anchor,
                data: data,
                testSeconds: testSeconds, steps: plan, restart: restart)
            if enrolled {
                runtime.timerWake.signal()
                runtime.logger.info(
                    "Enrolled in a track",
                    metadata: [
                        "herald.app": "\(app.id)", "herald.track": "\(track.name)", "herald.steps": "\(plan.count)",
                        "herald.restart": "\(restart)",
                    ])
            }
            return try JSONResponse.make(EnrolmentView(record, enrolled: enrolled, catalog: catalog, zone: zone))
        }
        routes.server.post("tracks/:track/enrolments") { request, context in
            let app = try context.authorized().app
            let (_, track) = try trackParameter(app, context)
            let importer = EnrolmentLineImporter(runtime: runtime, app: app, track: track)
            do {
                for try await chunk in request.body { try await importer.feed(chunk.readableBytesView) }
                try await importer.finish()
            } catch {
                await importer.abandon()
                throw error
            }
            if importer.enrolled > 0 { runtime.timerWake.signal() }
            runtime.logger.info(
                "Enrolled in a track in bulk",
                metadata: [
                    "herald.app": "\(app.id)", "herald.track": "\(track.name)",
                    "herald.enrolled": "\(importer.enrolled)", "herald.lines": "\(importer.lines)",
                ])
            return try JSONResponse.make(["enrolled": importer.enrolled, "already": importer.lines - importer.enrolled])
        }
        routes.server.delete("users/:user/tracks/:track") { request, context in
            let app = try context.authorized().app
            let userID = try validUserID(context)
            let (_, track) = try trackParameter(app, context)
            guard
                let done = try await runtime.store.tracks.unenrol(
                    appID: app.id, userID: userID, track: track.name, cancelKey: track.cancelKey)
            else {
                throw APIError(
                    .notFound, code: "not_enrolled", message: "the user is not enrolled in \(track.name)",
                    field: "track")
            }
            runtime.metrics.cancelled(app: app.id, done.cancelled)
            return try JSONResponse.make(
                [
                    "cancelled": done.steps + done.cancelled, "steps": done.steps, "deliveries": done.cancelled,
                    "in_flight": done.inFlight,
                ])
        }
        routes.server.get("users/:user/tracks") { request, context in
            let app = try context.authorized().app
            let userID = try validUserID(context)
            let zone = try await Tracks.zone(appID: app.id, userID: userID, runtime: runtime)
            let records = try await runtime.store.tracks.enrolments(appID: app.id, userID: userID)
            return try JSONResponse.make([
                "tracks": records.map { EnrolmentView($0, enrolled: nil, catalog: app.catalog, zone: zone) }
            ])
        }
        routes.server.post("events") { request, context in
            let app = try context.authorized().app
            // One event, or the batch form {"events": [...]}: one parse either way.
            let decoded = try await decode(EventBody.self, request, limit: largeBodyLimit)
            let batch = decoded.events != nil
            let events = decoded.events ?? [decoded]
            guard !events.isEmpty, events.count <= EventBody.maximumBatch else {
                throw APIError.invalid("events", "events holds 1 to \(EventBody.maximumBatch) events")
            }
            let now = runtime.store.now
            let checked = try events.enumerated().map { index, event throws(APIError) in
                try event.validated(now: now, prefix: batch ? "events[\(index)]." : "")
            }
            var views: [EventAccepted] = []
            let badgePush = Triggers.badgePush(app: app)
            for event in checked {
                // Each event in its own transaction, in order: a batch's second event sees the first's effects.
                let effects = try await Triggers.effects(app: app, event: event, runtime: runtime, now: now)
                let (id, duplicate, notifications) = try await runtime.store.devices.applyEvent(
                    appID: app.id, id: UUID.timeOrdered(), userID: event.userID, name: event.name, data: event.data,
                    occurredAt: event.occurredAt,
                    idempotencyKey: event.idempotencyKey, effects: effects, badgePush: badgePush)
                if !notifications.isEmpty, !duplicate {
                    runtime.wake.signal(outbox: true)
                    for _ in notifications { runtime.metrics.notificationCreated(app: app.id) }
                }
                views.append(EventAccepted(id: id, notifications: notifications, duplicate: duplicate))
            }
            runtime.metrics.events(app: app.id, checked.count)
            if batch { return try JSONResponse.make(["events": views], status: .accepted) }
            return try JSONResponse.make(views[0], status: .accepted)
        }
        routes.server.post("users/:user/sync") { request, context in
            let app = try context.authorized().app
            let userID = try validUserID(context)
            let (origin, cursor) = try await decode(SyncBody.self, request).validated()
            let plans = try await runtime.store.nodes.scheduleSync(
                appID: app.id, userID: userID, origin: origin, cursor: cursor, debounce: app.configuration.syncDebounce,
                hourlyBudget: app.configuration.syncHourlyBudget)
            if plans.contains(where: { !$0.coalesced }) { runtime.timerWake.signal() }
            return try JSONResponse.make(SyncView(plans), status: .accepted)
        }
        routes.server.post("users/:user/badges") { request, context in
            let app = try context.authorized().app
            let userID = try validUserID(context)
            let change = try await decode(BadgeBody.self, request).validated()
            let (counters, notification) = try await runtime.store.devices.changeBadges(
                appID: app.id, userID: userID, [change], push: Triggers.badgePush(app: app))
            if notification != nil { runtime.wake.signal(outbox: true) }
            return try JSONResponse.make(BadgeView(counters, notification: notification))
        }
        routes.server.get("users/:user/badges") { request, context in
            let app = try context.authorized().app
            return try JSONResponse.make(
                BadgeView(try await runtime.store.devices.badges(appID: app.id, userID: try validUserID(context))))
        }
    }
}
