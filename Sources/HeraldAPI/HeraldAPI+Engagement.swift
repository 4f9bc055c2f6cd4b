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
            let now = runtime.store.now
            let open = try await decode(OpenedBody.self, request).validated(now: now)
            let opened: (delivery: TrackRepository.DeliveryReference, recorded: TrackRepository.OpenRecorded)
            if opensFireTriggers(caller.app) {
                opened = try await recordOpen(
                    open, app: caller.app, tokenUser: caller.tokenUser, runtime: runtime, now: now)
            } else {
                // No trigger answers the open: read, check and write it with the opens reported
                // beside it, in one batch.
                guard let reported = try await runtime.store.tracks.reportOpen(openReport(open, caller)) else {
                    throw noDelivery(open.deliveryID)
                }
                opened = (reported.delivery, reported.recorded)
            }
            return JSONResponse.make(openedView(opened.delivery, opened.recorded, caller, runtime))
        }
        routes.clientWrite.post("received") { request, context in
            let caller = try context.authorized()
            let (reports, batch) = try await decode(ReceivedBody.self, request).validated(now: runtime.store.now)
            let outcomes = try await runtime.store.tracks.recordReceipts(
                appID: caller.app.id, userID: caller.tokenUser, reports)
            return JSONResponse.make(bytes: try receivedAnswer(reports, outcomes, batch: batch, caller, runtime))
        }
        routes.server.get("analytics") { request, context in
            let app = try context.authorized().app
            let query = try AnalyticsQuery(request.uri.queryParameters, today: runtime.store.now, catalog: app.catalog)
            let builds =
                query.by == nil
                ? nil
                : try await runtime.store.tracks.buildCounts(appID: app.id, days: query.days, type: query.type?.name)
            let counts = try await runtime.store.tracks.funnelCounts(
                appID: app.id, days: query.days, type: query.type?.name, builds: builds)
            let permissions = try await runtime.store.tracks.permissionCounts(appID: app.id)
            var view = AnalyticsView(
                days: query.days, type: query.type, counts: counts, permissions: permissions, catalog: app.catalog)
            if let by = query.by, let builds { view.add(builds, by: by) }
            return try JSONResponse.make(view)
        }
        routes.server.get("analytics/platforms") { request, context in
            let app = try context.authorized().app
            var hours = PlatformRates.defaultHours
            if let text = request.uri.queryParameters.get("hours") {
                guard let value = Int(text), (1...PlatformRates.maximumHours).contains(value) else {
                    throw APIError.invalid("hours", "hours is a whole number from 1 to \(PlatformRates.maximumHours)")
                }
                hours = value
            }
            let now = runtime.store.now
            let counts = try await runtime.store.tracks.platformHours(
                appIDs: [app.id], since: PlatformRates.firstHour(now: now, hours: hours))
            return try JSONResponse.make(PlatformRates(app: app.id, counts: counts, now: now, hours: hours))
        }
    }

    /// Whether `app`'s catalog has triggers on `app.opened`: its opens are recorded one by one
    /// (`recordOpen`), not in the batch.
    static func opensFireTriggers(_ app: AppRuntime) -> Bool {
        app.catalog?.triggers.contains(where: { $0.event == TrackRepository.openedEvent }) == true
    }

    /// An open for the batch (`TrackRepository.reportOpen`), checked against its delivery there.
    static func openReport(_ open: OpenedBody.Checked, _ caller: Caller) -> TrackRepository.OpenReport {
        TrackRepository.OpenReport(
            appID: caller.app.id, deliveryID: open.deliveryID, action: open.action, openedAt: open.at,
            check: { delivery in try checkOpen(open, of: delivery, app: caller.app, tokenUser: caller.tokenUser) })
    }

    /// A recorded open's answer; its metrics counted, and the outbox woken for what its
    /// triggers sent.
    static func openedView(
        _ delivery: TrackRepository.DeliveryReference, _ recorded: TrackRepository.OpenRecorded, _ caller: Caller,
        _ runtime: HeraldRuntime
    ) -> OpenedView {
        let app = caller.app
        if recorded.counted {
            runtime.metrics.opened(app: app.id, type: delivery.type.flatMap { app.catalog?.type($0) }?.name)
            if !recorded.notifications.isEmpty {
                runtime.wake.signal(outbox: true)
                for _ in recorded.notifications { runtime.metrics.notificationCreated(app: app.id) }
            }
        }
        return OpenedView(deliveryID: delivery.id, recorded: recorded)
    }

    /// A receipts call's answer (one receipt's view, or a batch's); what counted is counted in
    /// the metrics. A lone receipt not recorded is its error.
    static func receivedAnswer(
        _ reports: [TrackRepository.ReceiptReport], _ outcomes: [TrackRepository.ReceiptOutcome], batch: Bool,
        _ caller: Caller, _ runtime: HeraldRuntime
    ) throws -> [UInt8] {
        var views: [ReceivedView] = []
        for (report, outcome) in zip(reports, outcomes) {
            switch outcome {
            case .recorded(let recorded):
                if recorded.counted {
                    runtime.metrics.received(
                        app: caller.app.id, platform: recorded.platform,
                        latency: recorded.receivedAt.timeIntervalSince(recorded.acceptedAt))
                }
                views.append(
                    ReceivedView(
                        deliveryID: report.deliveryID, status: 200, counted: recorded.counted,
                        reports: recorded.reports))
            case .notFound:
                guard batch else { throw notSent(report.deliveryID) }
                views.append(ReceivedView(deliveryID: report.deliveryID, status: 404))
            case .otherUser:
                guard batch else { throw otherUsersDelivery() }
                views.append(ReceivedView(deliveryID: report.deliveryID, status: 403))
            }
        }
        guard batch else { return JSONResponse.bytes(views[0]) }
        return JSONResponse.bytes(ReceivedViews(receipts: views))
    }

    /// An open of an app with triggers on `app.opened`: their effects read the user's attributes
    /// before the transaction, so it is read, checked and recorded on its own.
    private static func recordOpen(
        _ open: OpenedBody.Checked, app: AppRuntime, tokenUser: String?, runtime: HeraldRuntime, now: Date
    ) async throws -> (delivery: TrackRepository.DeliveryReference, recorded: TrackRepository.OpenRecorded) {
        guard
            let delivery = try await runtime.store.tracks.deliveryReference(appID: app.id, deliveryID: open.deliveryID)
        else { throw noDelivery(open.deliveryID) }
        var event: TrackRepository.OpenEvent?
        if let data = try checkOpen(open, of: delivery, app: app, tokenUser: tokenUser), let userID = delivery.userID {
            let checked = UserEvent(
                name: TrackRepository.openedEvent, userID: userID, data: data, occurredAt: open.at, idempotencyKey: nil)
            event = TrackRepository.OpenEvent(
                id: UUID.timeOrdered(), userID: userID, data: data,
                effects: try await Triggers.effects(app: app, event: checked, runtime: runtime, now: now),
                badgePush: Triggers.badgePush(app: app))
        }
        return (
            delivery,
            try await runtime.store.tracks.recordOpen(
                appID: app.id, delivery, action: open.action, openedAt: open.at, event: event)
        )
    }

    /// Checks a reported open against its delivery: it went to `device_id`, to the user token's
    /// user (client keys), and the action is its type's. Answers the built-in `app.opened`
    /// event's data for a delivery to a user's device (what a step's `unless` and the catalog's
    /// triggers read), nil for a delivery to no user.
    private static func checkOpen(
        _ open: OpenedBody.Checked, of delivery: TrackRepository.DeliveryReference, app: AppRuntime,
        tokenUser: String?
    ) throws -> String? {
        guard delivery.deviceID == open.deviceID else {
            throw APIError(
                .forbidden, code: "forbidden", message: "the delivery went to another device than device_id",
                field: "device_id")
        }
        if let tokenUser, delivery.userID != tokenUser { throw otherUsersDelivery() }
        let type = delivery.type.flatMap { app.catalog?.type($0) }
        if open.action != OpenedBody.defaultAction, let type, !type.actions.contains(where: { $0.id == open.action }) {
            let known = ([OpenedBody.defaultAction] + type.actions.map(\.id)).joined(separator: ", ")
            throw APIError.invalid("action", "action is one of \(known) for \(type.name)")
        }
        guard delivery.userID != nil else { return nil }
        var data: [String: JSONValue] = [
            "delivery_id": .int(Int(delivery.id)),
            "notification_id": .string(delivery.notificationID.uuidString.lowercased()),
            "action": .string(open.action),
        ]
        if let type { data["type"] = .string(type.name) }
        return JSONWriter.encode(.object(data))
    }

    /// A device's report about a delivery made with another user's token.
    private static func otherUsersDelivery() -> APIError {
        APIError(
            .forbidden, code: "forbidden", message: "the delivery is another user's than the user token's",
            field: UserToken.header)
    }

    private static func notSent(_ deliveryID: Int64) -> APIError {
        APIError(
            .notFound, code: "not_found",
            message:
                "no delivery \(deliveryID) accepted for that device in this app (a delivery being sent has its row once its provider answered: report again shortly)",
            field: "delivery_id")
    }

    static func noDelivery(_ deliveryID: Int64) -> APIError {
        APIError(
            .notFound, code: "not_found",
            message:
                "no delivery \(deliveryID) in this app (a delivery being sent has its row once its provider answered: report again shortly)",
            field: "delivery_id")
    }
}
