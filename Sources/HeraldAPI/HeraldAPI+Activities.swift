import Foundation
import HeraldCore
import HeraldEngine
import HeraldStore
import Hummingbird

/// Live Activities: the tokens devices report (push-to-start per attributes type, update per
/// activity), and starts, updates and ends, sent at once to each device's activity token.
extension HeraldAPI {
    static func addActivityRoutes(to routes: AppRoutes, runtime: HeraldRuntime) {
        let service = ActivityService(store: runtime.store)
        routes.clientWrite.put("devices/:device/activity-tokens/start/:type") { request, context in
            let caller = try context.authorized()
            let deviceID = try pathParameter(context, "device", field: "device_id")
            let type = try ActivityNames.attributesType(pathParameter(context, "type", field: "attributes_type"))
            let token = try await decode(ActivityTokenBody.self, request).validToken()
            try check(
                try await runtime.store.activities.setStartToken(
                    appID: caller.app.id, deviceID: deviceID, attributesType: type, token: token,
                    ownedBy: caller.tokenUser))
            return try JSONResponse.make(["device_id": deviceID, "attributes_type": type])
        }
        routes.clientWrite.put("activities/:activity/tokens/:device") { request, context in
            let caller = try context.authorized()
            let activityID = try ActivityNames.activityID(pathParameter(context, "activity", field: "activity_id"))
            let deviceID = try pathParameter(context, "device", field: "device_id")
            let body = try await decode(ActivityTokenBody.self, request)
            let token = try body.validToken()
            let type = try body.attributesType.map { text throws(APIError) in try ActivityNames.attributesType(text) }
            try check(
                try await runtime.store.activities.setUpdateToken(
                    appID: caller.app.id, activityID: activityID, deviceID: deviceID, token: token,
                    attributesType: type, ownedBy: caller.tokenUser))
            return try JSONResponse.make(["activity_id": activityID, "device_id": deviceID])
        }
        routes.server.post("activities") { request, context in
            let app = try context.authorized().app
            let start = try await decode(ActivityStartBody.self, request).validated(catalog: app.catalog)
            try apnsReady(app)
            let outcome = try await refusing { try await service.start(app: app, start) }
            return try JSONResponse.make(ActivityOutcomeView(outcome), status: .created)
        }
        for event in [LiveActivityEvent.update, .end] {
            routes.server.post("activities/:activity/\(event.rawValue)") { request, context in
                let app = try context.authorized().app
                let activityID = try ActivityNames.activityID(pathParameter(context, "activity", field: "activity_id"))
                let change = try await decode(ActivityChangeBody.self, request).validated(
                    event, catalog: app.catalog)
                try apnsReady(app)
                let outcome = try await refusing { try await service.change(app: app, activityID: activityID, change) }
                return try JSONResponse.make(ActivityOutcomeView(outcome))
            }
        }
        routes.server.post("channels") { request, context in
            let app = try context.authorized().app
            let body = try await decode(ChannelBody.self, request).validated(
                defaultEnvironment: app.configuration.apns?.environment ?? "production")
            try apnsReady(app)
            let channel = try await refusing(notFound: noChannel()) {
                try await service.createChannel(
                    app: app, eventKey: body.eventKey, storage: body.storage, environment: body.environment)
            }
            return try JSONResponse.make(ChannelView(channel: channel), status: .created)
        }
        routes.server.get("channels") { request, context in
            let app = try context.authorized().app
            let eventKey = request.uri.queryParameters.get("event_key")
            let limit = try queryNumber(request, "limit", default: 1000, in: 1...10_000)
            let channels = try await runtime.store.activities.channels(appID: app.id, eventKey: eventKey, limit: limit)
            return try JSONResponse.make(["channels": channels.map(ChannelView.init)])
        }
        routes.server.delete("channels/:channel") { request, context in
            let app = try context.authorized().app
            let id = try pathParameter(context, "channel", field: "channel_id")
            try apnsReady(app)
            try await refusing(notFound: noChannel()) { try await service.deleteChannel(app: app, id: id) }
            return Response(status: .noContent)
        }
        routes.server.get("activities/:activity") { request, context in
            let app = try context.authorized().app
            let activityID = try ActivityNames.activityID(pathParameter(context, "activity", field: "activity_id"))
            let limit = try queryNumber(request, "limit", default: 100, in: 1...1000)
            guard let activity = try await runtime.store.activities.activity(appID: app.id, activityID: activityID)
            else { throw noActivity() }
            return try JSONResponse.make(
                ActivityView(
                    activity: activity,
                    devices: try await runtime.store.activities.devices(appID: app.id, activityID: activityID),
                    pushes: try await runtime.store.activities.pushes(
                        appID: app.id, activityID: activityID, limit: limit), now: runtime.store.now))
        }
    }

    /// A token report's outcome as an answer: a missing device 404, another user's 403.
    private static func check(_ outcome: ActivityRepository.TokenOutcome) throws(APIError) {
        switch outcome {
        case .stored: return
        case .noDevice:
            throw APIError(
                .notFound, code: "not_found", message: "no device with this device_id: register it first",
                field: "device_id")
        case .otherUser:
            throw APIError(
                .forbidden, code: "forbidden",
                message: "the device is registered to another user than the user token's",
                field: "device_id")
        }
    }

    /// Live Activities need the app's APNs credential (a token-based key: Apple takes no
    /// certificate for them).
    private static func apnsReady(_ app: AppRuntime) throws(APIError) {
        if let reason = app.apnsDisabledReason {
            throw APIError(
                .conflict, code: "apns_unavailable",
                message: "Live Activities go through APNs, which is off: \(reason)",
                field: "app")
        }
    }

    private static func noActivity() -> APIError {
        APIError(.notFound, code: "not_found", message: "no activity with this activity_id", field: "activity_id")
    }

    /// Runs a start, update, end or channel operation; its refusals as answers (`notFound`: what
    /// a missing activity or channel answers).
    private static func refusing<Result>(notFound: APIError = noActivity(), _ body: () async throws -> Result)
        async throws -> Result
    {
        do {
            return try await body()
        } catch let refusal as ActivityService.Refusal {
            if case .notFound = refusal { throw notFound }
            throw error(refusal)
        }
    }

    private static func noChannel() -> APIError {
        APIError(.notFound, code: "not_found", message: "no channel with this channel_id", field: "channel_id")
    }

    private static func error(_ refusal: ActivityService.Refusal) -> APIError {
        switch refusal {
        case .exists:
            APIError(
                .conflict, code: "conflict", message: "an activity with this activity_id exists already",
                field: "activity_id")
        case .notFound: noActivity()
        case .ended:
            APIError(
                .conflict, code: "activity_ended", message: "the activity has ended: nothing more goes to it",
                field: "activity_id")
        case .staleTimestamp(let last):
            APIError(
                .conflict, code: "stale_timestamp",
                message: "timestamp must be after the activity's last push (\(last)): the device would ignore it",
                field: "timestamp")
        case .payloadTooLarge(let bytes):
            APIError(
                .contentTooLarge, code: "payload_too_large",
                message: "the push would be \(bytes) bytes; APNs takes at most 4096", field: "content_state")
        case .apnsUnavailable(let reason):
            APIError(.conflict, code: "apns_unavailable", message: reason, field: "app")
        case .unknownChannel:
            APIError(
                .notFound, code: "not_found", message: "no channel with this id: create it with POST …/channels",
                field: "channel")
        case .channelLimit:
            APIError(
                .conflict, code: "channel_limit",
                message:
                    "the app has \(ActivityService.channelLimit) channels in this environment, Apple's limit: delete some",
                field: "event_key")
        case .apple(let status, let reason):
            APIError(
                .badGateway, code: "apns_refused",
                message: status == 0 ? "APNs could not be reached: \(reason)" : "APNs answered \(status) \(reason)",
                field: "channel_id")
        }
    }
}
