import Foundation
import HeraldCore
import HeraldPayload
import HeraldStore
package import Hummingbird
import NIOCore

/// Who a request speaks for.
enum CallerRole {
    case admin
    case server
    case client
}

/// The HTTP API (`/v1`, `/healthz`, `/metrics`, `/openapi.yaml`).
package enum HeraldAPI {
    /// Builds the router over a runtime.
    package static func router(runtime: HeraldRuntime) -> Router<HeraldRequestContext> {
        let router = Router(context: HeraldRequestContext.self)
        router.add(middleware: RequestMetricsMiddleware(metrics: runtime.metrics))
        router.add(middleware: ListenerMiddleware(runtime: runtime))
        // Probes for load balancers and orchestrators. /livez: the process answers (no I/O).
        // /readyz (and its alias /healthz): the database takes writes and the dispatcher keeps
        // up; the details (problems, queue, paused providers) only for the admin or metrics key.
        router.get("/livez") { _, _ in alive() }
        for path in ["/readyz", "/healthz"] {
            router.get(RouterPath(path)) { request, _ in
                let report = await runtime.health()
                let ok = report.status == "ok"
                guard isOperator(request, runtime) else {
                    // The stranger's answer is one of two constant bodies: nothing to encode.
                    return Response(
                        status: ok ? .ok : .serviceUnavailable, headers: [.contentType: "application/json"],
                        body: ResponseBody(byteBuffer: ok ? Self.readyBody : Self.notReadyBody))
                }
                return try JSONResponse.make(report, status: ok ? .ok : .serviceUnavailable)
            }
        }
        router.get("/metrics") { request, _ in
            guard isOperator(request, runtime) else {
                throw APIError(
                    .unauthorized, code: "unauthorized",
                    message: "send Authorization: Bearer <admin_key or metrics_key>",
                    field: "authorization")
            }
            let outbox = try await runtime.store.outboxGauges(appIDs: Array(runtime.apps.keys))
            return Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4"],
                body: ResponseBody(
                    byteBuffer: ByteBuffer(
                        string: runtime.metrics.render(
                            queueDepth: outbox.due, deferred: outbox.deferred, oldestQueuedAge: outbox.oldestDueAge,
                            openConnections: runtime.apps.values.reduce(0) { $0 + $1.openConnections },
                            pauses: runtime.pauses.all))))
        }
        router.get("/openapi.yaml") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "application/yaml"],
                body: ResponseBody(byteBuffer: ByteBuffer(string: OpenAPIDocument.yaml)))
        }

        router.post("/v1/dev/clock") { request, _ in
            // Only where the clock may move (--dev, clock: manual): anywhere else the path does not exist.
            guard let devClock = runtime.devClock else {
                throw APIError(
                    .notFound, code: "not_found", message: "the clock moves only under --dev or clock: manual",
                    field: "path")
            }
            guard let key = presentedKey(request), isAdmin(key, runtime) else {
                throw APIError(
                    .unauthorized, code: "unauthorized", message: "send Authorization: Bearer <admin_key>",
                    field: "authorization")
            }
            let body = try await decode(ClockBody.self, request)
            guard let text = body.advance else { throw APIError.missing("advance") }
            guard let seconds = HeraldDuration.seconds(text), seconds > 0, seconds <= DevClock.maximumAdvance else {
                throw APIError.invalid(
                    "advance", "advance is a duration such as 30s, 15m, 48h or 2d, more than 0 and at most 366d")
            }
            guard devClock.advance(by: seconds) else {
                throw APIError.invalid("advance", "the clock goes at most 3650 days past where it started")
            }
            // What fell due meanwhile goes now, not at the dispatcher's next idle wake-up.
            runtime.wake.signal(outbox: true)
            runtime.timerWake.signal()
            let now = HeraldTime.format(devClock.now)
            runtime.logger.notice(
                "Clock moved forward", metadata: ["herald.seconds": "\(seconds)", "herald.now": "\(now)"])
            return try JSONResponse.make(ClockView(now: now, advancedSeconds: seconds))
        }

        let apps = router.group("/v1/apps/:app")
        apps.post("devices") { request, context in
            let (app, role) = try caller(request, context, runtime)
            let tokenUser = role == .client ? try verifiedUser(request, app: app, runtime: runtime) : nil
            try limitClientWrite(app: app, role: role, user: tokenUser, context: context, runtime: runtime)
            let body = try await decode(DeviceBody.self, request)
            let device = try body.validated()
            if let tokenUser, tokenUser != device.userID {
                throw APIError(
                    .forbidden, code: "forbidden", message: "the user token is for another user than user_id",
                    field: "user_id")
            }
            do {
                let (stored, created) = try await runtime.store.upsertDevice(
                    appID: app.id, device, rules: app.registrationRules(client: role == .client))
                return try JSONResponse.make(DeviceView(device: stored), status: created ? .created : .ok)
            } catch let error as StoreError where error.code == .conflict {
                throw APIError(
                    .forbidden, code: "forbidden",
                    message:
                        "device_id is registered to another user: only that device, presenting the token it holds, can sign in as a new user",
                    field: "device_id")
            }
        }
        apps.post("devices/import") { request, context in
            let app = try authorize(request, context, runtime, allowClient: false)
            let imported = try await importDevices(request, app: app, runtime: runtime)
            return try JSONResponse.make(["imported": imported])
        }
        apps.delete("devices/:device") { request, context in
            let (app, role) = try caller(request, context, runtime)
            let deviceID = try pathParameter(context, "device", field: "device_id")
            let owner = role == .client ? try verifiedUser(request, app: app, runtime: runtime) : nil
            let removal = try await runtime.store.removeDevice(appID: app.id, deviceID: deviceID, ownedBy: owner)
            guard removal != .ownedByAnotherUser else {
                throw APIError(
                    .forbidden, code: "forbidden",
                    message: "the device is registered to another user than the user token's",
                    field: "device_id")
            }
            return Response(status: .noContent)
        }
        apps.get("users/:user/devices") { request, context in
            let app = try authorize(request, context, runtime, allowClient: false)
            let userID = try validUserID(context)
            let parameters = request.uri.queryParameters
            let limit = try queryNumber(request, "limit", default: 100, in: 1...1000)
            var after: HeraldStore.DeviceCursor?
            if let text = parameters.get("cursor"), !text.isEmpty {
                guard let cursor = DeviceCursorText.decode(text) else {
                    throw APIError.invalid("cursor", "cursor is the next_cursor of an earlier page")
                }
                after = cursor
            }
            let page = try await runtime.store.devicePage(appID: app.id, userID: userID, limit: limit, after: after)
            return try JSONResponse.make(
                DevicePageView(
                    devices: page.devices.map(DeviceView.init), nextCursor: page.next.map(DeviceCursorText.encode)))
        }
        apps.get("catalog/categories") { request, context in
            let app = try authorize(request, context, runtime, allowClient: true)
            guard let catalog = app.catalog else {
                throw APIError(.notFound, code: "no_catalog", message: "app \"\(app.id)\" has no catalog", field: "app")
            }
            return try JSONResponse.make(CategoryCatalog(catalog: catalog))
        }
        apps.get("catalog/tracks") { request, context in
            let app = try authorize(request, context, runtime, allowClient: true)
            guard let catalog = app.catalog else {
                throw APIError(.notFound, code: "no_catalog", message: "app \"\(app.id)\" has no catalog", field: "app")
            }
            let locale = request.uri.queryParameters.get("locale")
            return try JSONResponse.make(TrackCatalog(catalog: catalog, locale: locale))
        }
        apps.put("users/:user") { request, context in
            let app = try authorize(request, context, runtime, allowClient: false)
            let userID = try validUserID(context)
            let body = try await decode(UserBody.self, request)
            try body.validate()
            let attributes = try JSONEncoder().encode(body.attributes ?? .object([:]))
            let before = try await runtime.store.user(appID: app.id, userID: userID)?.timeZone
            let record = try await runtime.store.upsertUser(
                appID: app.id, userID: userID, timeZone: body.timeZone, locale: body.locale, attributes: attributes)
            if record.timeZone != before, let name = record.timeZone, let zone = TimeZone(identifier: name) {
                // Wall-clock track steps follow the user to the new zone.
                try await Tracks.replan(
                    app: app, userID: userID, from: before.flatMap(TimeZone.init(identifier:)), to: zone,
                    runtime: runtime)
            }
            return try JSONResponse.make(UserView(record: record))
        }
        apps.get("users/:user") { request, context in
            let app = try authorize(request, context, runtime, allowClient: false)
            guard let record = try await runtime.store.user(appID: app.id, userID: try validUserID(context)) else {
                throw APIError(.notFound, code: "not_found", message: "no such user", field: "user_id")
            }
            return try JSONResponse.make(UserView(record: record))
        }
        apps.put("users/:user/preferences") { request, context in
            let app = try authorize(request, context, runtime, allowClient: false)
            let userID = try validUserID(context)
            let preferences = try await decode(UserPreferences.self, request)
            try preferences.validate(catalog: app.catalog)
            let record = try await runtime.store.setPreferences(
                appID: app.id, userID: userID, preferences: try JSONEncoder().encode(preferences))
            let stored = try JSONDecoder().decode(UserPreferences.self, from: record.preferences)
            return try JSONResponse.make(stored.withDefaults(from: app.catalog))
        }
        apps.get("users/:user/preferences") { request, context in
            let app = try authorize(request, context, runtime, allowClient: false)
            let record = try await runtime.store.user(appID: app.id, userID: try validUserID(context))
            let preferences = record.flatMap { try? JSONDecoder().decode(UserPreferences.self, from: $0.preferences) }
            return try JSONResponse.make((preferences ?? UserPreferences()).withDefaults(from: app.catalog))
        }
        apps.post("notifications") { request, context in
            let app = try authorize(request, context, runtime, allowClient: false)
            let body = try await decode(NotificationBody.self, request, limit: largeBodyLimit)
            return try JSONResponse.make(try await send(body, app: app, runtime: runtime), status: .accepted)
        }
        apps.post("cancel") { request, context in
            let app = try authorize(request, context, runtime, allowClient: false)
            let (key, users) = try await decode(CancelBody.self, request, limit: largeBodyLimit).validated()
            let done = try await runtime.store.cancel(appID: app.id, cancelKey: key, userIDs: users)
            runtime.metrics.cancelled(app: app.id, done.cancelled)
            return try JSONResponse.make(
                CancelView(
                    cancelled: done.cancelled + done.steps, inFlight: done.inFlight,
                    broadcastsSkipped: done.broadcastsSkipped, steps: done.steps))
        }
        apps.put("users/:user/tracks/:track") { request, context in
            let app = try authorize(request, context, runtime, allowClient: false)
            let userID = try validUserID(context)
            let (catalog, track) = try trackParameter(app, context)
            let body = try await decode(EnrolBody.self, request, limit: largeBodyLimit)
            let now = runtime.store.now
            let (anchor, data, restart, testSeconds) = try body.validated(now: now)
            let zone = try await Tracks.zone(appID: app.id, userID: userID, runtime: runtime)
            let plan = track.plan(anchor: anchor, zone: zone, testSeconds: testSeconds, now: now)
            let (enrolled, record) = try await runtime.store.enrol(
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
        apps.post("tracks/:track/enrolments") { request, context in
            let app = try authorize(request, context, runtime, allowClient: false)
            let (_, track) = try trackParameter(app, context)
            let importer = EnrolmentLineImporter(runtime: runtime, app: app, track: track)
            for try await chunk in request.body { try await importer.feed(chunk.readableBytesView) }
            try await importer.finish()
            if importer.enrolled > 0 { runtime.timerWake.signal() }
            runtime.logger.info(
                "Enrolled in a track in bulk",
                metadata: [
                    "herald.app": "\(app.id)", "herald.track": "\(track.name)",
                    "herald.enrolled": "\(importer.enrolled)", "herald.lines": "\(importer.lines)",
                ])
            return try JSONResponse.make(["enrolled": importer.enrolled, "already": importer.lines - importer.enrolled])
        }
        apps.delete("users/:user/tracks/:track") { request, context in
            let app = try authorize(request, context, runtime, allowClient: false)
            let userID = try validUserID(context)
            let (_, track) = try trackParameter(app, context)
            guard
                let done = try await runtime.store.unenrol(
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
        apps.get("users/:user/tracks") { request, context in
            let app = try authorize(request, context, runtime, allowClient: false)
            let userID = try validUserID(context)
            let zone = try await Tracks.zone(appID: app.id, userID: userID, runtime: runtime)
            let records = try await runtime.store.enrolments(appID: app.id, userID: userID)
            return try JSONResponse.make([
                "tracks": records.map { EnrolmentView($0, enrolled: nil, catalog: app.catalog, zone: zone) }
            ])
        }
        apps.post("events") { request, context in
            let app = try authorize(request, context, runtime, allowClient: false)
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
            let badgeContent = Triggers.badgeContent(app: app)
            for event in checked {
                // Each event in its own transaction, in order: a batch's second event sees the first's effects.
                let effects = try await Triggers.effects(app: app, event: event, runtime: runtime, now: now)
                let (id, duplicate, notifications) = try await runtime.store.applyEvent(
                    appID: app.id, id: UUID.random(), userID: event.userID, name: event.name, data: event.data,
                    occurredAt: event.occurredAt,
                    idempotencyKey: event.idempotencyKey, effects: effects, badgeContent: badgeContent)
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
        apps.post("users/:user/sync") { request, context in
            let app = try authorize(request, context, runtime, allowClient: false)
            let userID = try validUserID(context)
            let (origin, cursor) = try await decode(SyncBody.self, request).validated()
            let at = runtime.store.now
            let plans = try await runtime.store.scheduleSync(
                appID: app.id, userID: userID, origin: origin, cursor: cursor, debounce: app.configuration.syncDebounce,
                hourlyBudget: app.configuration.syncHourlyBudget
            ) { message, previous in
                DecisionTrace.appending([PolicyStep(rule: "sync", message: message)], at: at, to: previous)
            }
            if plans.contains(where: { !$0.coalesced }) { runtime.timerWake.signal() }
            return try JSONResponse.make(SyncView(plans), status: .accepted)
        }
        apps.post("users/:user/badges") { request, context in
            let app = try authorize(request, context, runtime, allowClient: false)
            let userID = try validUserID(context)
            let change = try await decode(BadgeBody.self, request).validated()
            let (counters, notification) = try await runtime.store.changeBadges(
                appID: app.id, userID: userID, [change], content: Triggers.badgeContent(app: app))
            if notification != nil { runtime.wake.signal(outbox: true) }
            return try JSONResponse.make(BadgeView(counters, notification: notification))
        }
        apps.get("users/:user/badges") { request, context in
            let app = try authorize(request, context, runtime, allowClient: false)
            return try JSONResponse.make(
                BadgeView(try await runtime.store.badges(appID: app.id, userID: try validUserID(context))))
        }
        apps.get("notifications/:id") { request, context in
            let app = try authorize(request, context, runtime, allowClient: false)
            let id = try notificationParameter(context)
            guard let record = try await runtime.store.notification(appID: app.id, id: id) else {
                throw APIError(.notFound, code: "not_found", message: "no such notification", field: "id")
            }
            let limit = try queryNumber(request, "limit", default: 1000, in: 1...10_000)
            let offset = try queryNumber(request, "offset", default: 0, in: 0...1_000_000_000)
            let counts = try await runtime.store.deliveryCounts(notificationID: id)
            let deliveries = try await runtime.store.deliveries(notificationID: id, limit: limit, offset: offset)
            return try JSONResponse.make(NotificationView(record: record, counts: counts, deliveries: deliveries))
        }
        addEngagementRoutes(to: apps, runtime: runtime)
        addActionRoutes(to: apps, runtime: runtime)
        addTestSendRoutes(to: apps, runtime: runtime)
        if runtime.configuration.dashboard.onAPIListener { Dashboard.addRoutes(to: router, runtime: runtime) }
        return router
    }

    // MARK: Helpers

    /// The keyless answers of `/livez`, `/readyz` and `/healthz`.
    static let readyBody = ByteBuffer(string: #"{"status":"ok"}"#)
    static let notReadyBody = ByteBuffer(string: #"{"status":"unhealthy"}"#)

    /// `/livez`'s answer on every listener: the process serves requests.
    static func alive() -> Response {
        Response(status: .ok, headers: [.contentType: "application/json"], body: ResponseBody(byteBuffer: readyBody))
    }

    /// `POST …/notifications`: checks the request and stores the notification.
    static func send(_ body: NotificationBody, app: AppRuntime, runtime: HeraldRuntime) async throws
        -> NotificationAccepted
    {
        let request = try body.sendRequest()
        let accepted: HeraldStore.Accepted
        do {
            accepted = try await NotificationSends.accept(request, app: app, runtime: runtime)
        } catch let error as CompositionError {
            throw APIError(composition: error)
        }
        let record = accepted.record
        return NotificationAccepted(
            id: record.id.uuidString.lowercased(), recipients: record.recipients, duplicate: !accepted.created)
    }

    /// The app's catalog and the track the path names (404 naming `track` when there is none).
    static func trackParameter(_ app: AppRuntime, _ context: HeraldRequestContext) throws -> (Catalog, CatalogTrack) {
        let name = try pathParameter(context, "track", field: "track")
        guard let catalog = app.catalog, let track = catalog.track(name) else {
            let known = app.catalog?.tracks.map(\.name).joined(separator: ", ") ?? ""
            throw APIError(
                .notFound, code: "not_found",
                message: known.isEmpty
                    ? "the app's catalog has no tracks" : "no track \"\(name)\"; the catalog has \(known)",
                field: "track")
        }
        return (catalog, track)
    }

    /// A whole-number query parameter: `default` when absent; digits only, within `range`, else a
    /// 400 naming it (`abc`, `-1`, `1e3` and out-of-range values are refused, not defaulted).
    static func queryNumber(_ request: Request, _ name: String, default value: Int, in range: ClosedRange<Int>) throws
        -> Int
    {
        guard let text = request.uri.queryParameters.get(name) else { return value }
        guard let number = DecimalText.int64(text), number <= Int64(range.upperBound), range.contains(Int(number))
        else {
            throw APIError.invalid(name, "\(name) is a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return Int(number)
    }

    /// Whether the request carries the admin key or the metrics key.
    static func isOperator(_ request: Request, _ runtime: HeraldRuntime) -> Bool {
        guard let key = presentedKey(request) else { return false }
        let keys = [runtime.configuration.adminKey, runtime.configuration.metricsKey].compactMap { $0 }
        return keys.map { constantTimeEquals($0, key) }.contains(true)
    }

    /// The app and role a request's key gives. An unknown app and a wrong key get the same 401,
    /// so app ids cannot be probed; only the admin key learns that an app does not exist.
    static func caller(
        _ request: Request, _ context: HeraldRequestContext, _ runtime: HeraldRuntime
    ) throws -> (AppRuntime, CallerRole) {
        let key = try bearerKey(request)
        let appID = try context.parameters.require("app")
        let app = runtime.apps[appID]
        if isAdmin(key, runtime) {
            guard let app else {
                throw APIError(.notFound, code: "not_found", message: "no app \"\(appID)\"", field: "app")
            }
            return (app, .admin)
        }
        if let app {
            // Every key is compared (constant time each), so timing does not tell which matched.
            let server = app.configuration.serverKeys.map { constantTimeEquals($0, key) }.contains(true)
            let client = app.configuration.clientKeys.map { constantTimeEquals($0, key) }.contains(true)
            if server { return (app, .server) }
            if client { return (app, .client) }
        }
        throw APIError(
            .unauthorized, code: "unauthorized", message: "the key is not valid for this app", field: "authorization")
    }

    /// A client-key write (registration, open, response, resolve) takes a token from its user's
    /// bucket and its address's (`limits.*`); an empty one is a 429 with `Retry-After`.
    static func limitClientWrite(
        app: AppRuntime, role: CallerRole, user: String?, context: HeraldRequestContext, runtime: HeraldRuntime
    ) throws {
        guard role == .client else { return }
        if let wait = runtime.rateLimiter.take(appID: app.id, userID: user, peer: context.peer, now: Date()) {
            runtime.metrics.rateLimited(app: app.id)
            throw APIError(
                .tooManyRequests, code: "rate_limited", message: "too many client-key writes: try again in \(wait) s",
                field: "authorization",
                retryAfter: wait)
        }
    }

    /// The app a request may act on; client keys only where `allowClient`.
    static func authorize(
        _ request: Request, _ context: HeraldRequestContext, _ runtime: HeraldRuntime, allowClient: Bool
    ) throws -> AppRuntime {
        let (app, role) = try caller(request, context, runtime)
        if role == .client && !allowClient {
            throw APIError(
                .forbidden, code: "forbidden", message: "a client key may only register and unregister devices",
                field: "authorization")
        }
        return app
    }

    /// Whether `key` is the admin key (compared in constant time).
    static func isAdmin(_ key: String, _ runtime: HeraldRuntime) -> Bool {
        runtime.configuration.adminKey.map { constantTimeEquals($0, key) } ?? false
    }

    /// The key in `Authorization: Bearer <key>`, or nil when there is none.
    static func presentedKey(_ request: Request) -> String? {
        guard let header = request.headers[.authorization] else { return nil }
        let parts = header.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
        return String(parts[1])
    }

    /// The key in `Authorization: Bearer <key>`; a 401 without one.
    static func bearerKey(_ request: Request) throws -> String {
        guard let key = presentedKey(request) else {
            throw APIError(
                .unauthorized, code: "unauthorized", message: "send Authorization: Bearer <key>", field: "authorization"
            )
        }
        return key
    }

    /// For a client-key call: the user the `X-Herald-User-Token` proves (nil when the app's
    /// client registration is unverified). Missing, malformed, expired or forged → 401.
    static func verifiedUser(_ request: Request, app: AppRuntime, runtime: HeraldRuntime) throws -> String? {
        guard app.configuration.clientRegistration == .verified else { return nil }
        let secrets = app.configuration.userTokenSecrets
        guard !secrets.isEmpty else {
            // Refused at start; kept closed should a configuration bypass the check.
            throw APIError(
                .unauthorized, code: "unauthorized", message: "the app has no user_token_secret",
                field: UserToken.header)
        }
        let name = UserToken.header.lowercased()
        guard let token = request.headers.first(where: { $0.name.canonicalName == name })?.value, !token.isEmpty else {
            throw APIError(
                .unauthorized, code: "unauthorized",
                message:
                    "a client key needs \(UserToken.header): a user token (JWT HS256, sub = user id) signed by the app's backend",
                field: UserToken.header)
        }
        // While the secret rotates, a token signed with either verifies.
        var failure: UserToken.Failure?
        for secret in secrets {
            do throws(UserToken.Failure) {
                return try UserToken.verify(token, secret: Data(secret.utf8), now: runtime.store.now).userID
            } catch {
                failure = failure ?? error
            }
        }
        throw APIError(
            .unauthorized, code: "unauthorized", message: failure?.message ?? "the user token is not valid",
            field: UserToken.header)
    }

    /// A path parameter, percent-decoded (`jos%C3%A9` is `josé`); a bad encoding is a 400 naming `field`.
    static func pathParameter(_ context: HeraldRequestContext, _ name: String, field: String) throws -> String {
        let raw = try context.parameters.require(name)
        guard let decoded = raw.removingPercentEncoding else {
            throw APIError.invalid(field, "\(field) in the path is not valid percent-encoding")
        }
        guard !decoded.unicodeScalars.contains("\u{0}") else {
            throw APIError.invalid(field, "\(field) holds a NUL character")
        }
        return decoded
    }

    static func validUserID(_ context: HeraldRequestContext) throws -> String {
        let userID = try pathParameter(context, "user", field: "user_id")
        guard !userID.isEmpty, userID.utf8.count <= 256 else {
            throw APIError.invalid("user_id", "user_id is 1 to 256 bytes")
        }
        return userID
    }

    static func constantTimeEquals(_ left: String, _ right: String) -> Bool {
        let a = Array(left.utf8)
        let b = Array(right.utf8)
        var difference = UInt8(a.count == b.count ? 0 : 1)
        for index in 0..<max(a.count, b.count) {
            difference |= (index < a.count ? a[index] : 0) ^ (index < b.count ? b[index] : 0)
        }
        return difference == 0
    }

    static func decode<Body: Decodable>(_ type: Body.Type, _ request: Request, limit: Int = bodyLimit) async throws
        -> Body
    {
        try decodeJSON(type, try await body(request, limit: limit), prefix: "")
    }

    /// The body most routes read at most: a device, a user's attributes or preferences, an open.
    static let bodyLimit = 256 << 10
    /// What sends, cancels, enrolments and event batches may read: a send may name 10,000 users
    /// and exclude 10,000 devices of up to 256 bytes each.
    static let largeBodyLimit = 8 << 20
    /// A quick action's body (no key: the token is the capability).
    static let actionBodyLimit = 4 << 10

    /// The request's body, at most `limit` bytes (more: a JSON 413 naming `body`).
    static func body(_ request: Request, limit: Int) async throws -> Data {
        do {
            return Data(try await request.body.collect(upTo: limit).readableBytesView)
        } catch is NIOTooManyBytesError {
            let size = limit >= 1 << 20 ? "\(limit >> 20) MB" : "\(limit >> 10) KB"
            throw APIError(
                .contentTooLarge, code: "body_too_large", message: "the body is larger than \(size)", field: "body")
        }
    }

    static func decodeJSON<Body: Decodable>(_ type: Body.Type, _ data: Data, prefix: String) throws -> Body {
        do {
            return try JSONDecoder().decode(type, from: data)
        } catch let DecodingError.typeMismatch(_, context), let DecodingError.valueNotFound(_, context) {
            let field = context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(
                separator: ".")
            throw APIError.invalid(prefix + field, "\(field.isEmpty ? "the body" : field) has the wrong type")
        } catch let DecodingError.keyNotFound(key, _) {
            throw APIError.missing(prefix + key.stringValue)
        } catch {
            throw APIError(
                .badRequest, code: "invalid_json", message: "the body is not valid JSON",
                field: prefix.isEmpty ? "body" : String(prefix.dropLast()))
        }
    }

    /// Streams JSON lines into the store in batches: a million lines never sit in memory.
    static func importDevices(_ request: Request, app: AppRuntime, runtime: HeraldRuntime) async throws -> Int {
        let importer = DeviceLineImporter(
            store: runtime.store, appID: app.id, rules: app.registrationRules(client: false))
        for try await chunk in request.body {
            try await importer.feed(buffer: chunk)
        }
        try await importer.finish()
        return importer.imported
    }
}

/// `GET …/users/{user}/devices`: a page of devices and where the next starts.
struct DevicePageView: Encodable {
    var devices: [DeviceView]
    var nextCursor: String?
    enum CodingKeys: String, CodingKey {
        case devices
        case nextCursor = "next_cursor"
    }
}

/// A page cursor as the API shows it: `<created ms>.<base64url device id>`, opaque to callers.
enum DeviceCursorText {
    static func encode(_ cursor: HeraldStore.DeviceCursor) -> String {
        "\(cursor.createdAt)." + Base64URL.encode(Data(cursor.deviceID.utf8))
    }

    static func decode(_ text: String) -> HeraldStore.DeviceCursor? {
        guard text.utf8.count <= 1_024 else { return nil }
        let parts = text.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, let created = DecimalText.int64(parts[0], maximumDigits: 16),
            let id = Base64URL.decode(parts[1]).flatMap({ String(validating: $0, as: UTF8.self) })
        else { return nil }
        return HeraldStore.DeviceCursor(createdAt: created, deviceID: id)
    }
}

struct NotificationAccepted: Encodable {
    var id: String
    var recipients: Int
    /// True when an earlier notification with the same idempotency key was returned.
    var duplicate: Bool
}

struct NotificationView: Encodable {
    var record: NotificationRecord
    var counts: [DeliveryStatus: Int]
    var deliveries: [DeliveryRecord]

    enum CodingKeys: String, CodingKey {
        case id
        case createdAt = "created_at"
        case recipients, counts, deliveries
    }
    enum DeliveryKeys: String, CodingKey {
        case id
        case deviceID = "device_id"
        case status, reason
        case apnsID = "apns_id"
        case attempts, until
        case createdAt = "created_at"
        case updatedAt = "updated_at"
        case trace
    }
    enum ExtraKeys: String, CodingKey { case cancelKey = "cancel_key" }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(record.id.uuidString.lowercased(), forKey: .id)
        try container.encode(record.createdAt, forKey: .createdAt)
        try container.encode(record.recipients, forKey: .recipients)
        var extra = encoder.container(keyedBy: ExtraKeys.self)
        try extra.encodeIfPresent(record.cancelKey, forKey: .cancelKey)
        var countsObject: [String: Int] = [:]
        for status in [DeliveryStatus.queued, .sent, .failed, .deferred, .suppressed, .cancelled] {
            countsObject[status.rawValue] = counts[status] ?? 0
        }
        // Being sent right now counts as queued: it has no answer yet.
        countsObject["queued", default: 0] += counts[.sending] ?? 0
        try container.encode(countsObject, forKey: .counts)
        var list = container.nestedUnkeyedContainer(forKey: .deliveries)
        for delivery in deliveries {
            var item = list.nestedContainer(keyedBy: DeliveryKeys.self)
            // The delivery's id: its payload's herald.d, what an open is reported with.
            try item.encode(delivery.id, forKey: .id)
            try item.encode(delivery.deviceID, forKey: .deviceID)
            try item.encode(delivery.status == .sending ? "queued" : delivery.status.rawValue, forKey: .status)
            try item.encodeIfPresent(delivery.reason, forKey: .reason)
            try item.encode(
                UUID.apnsID(notification: record.id, delivery: delivery.id).uuidString.lowercased(), forKey: .apnsID)
            try item.encode(delivery.attempts, forKey: .attempts)
            if delivery.status == .deferred || delivery.status == .queued {
                try item.encode(delivery.dueAt, forKey: .until)
            }
            try item.encode(delivery.createdAt, forKey: .createdAt)
            try item.encode(delivery.updatedAt, forKey: .updatedAt)
            let trace = DecisionTrace.entries(delivery.trace)
            if !trace.isEmpty { try item.encode(trace, forKey: .trace) }
        }
    }
}

/// What every answer of Herald's listeners gets: `Strict-Transport-Security` when Herald serves
/// TLS itself; and a notice in the log for every call made with the admin key (route, method,
/// app, status and the peer's address; never the key).
struct ListenerMiddleware: RouterMiddleware {
    let runtime: HeraldRuntime

    func handle(
        _ request: Request, context: HeraldRequestContext,
        next: (Request, HeraldRequestContext) async throws -> Response
    ) async throws -> Response {
        let admin = HeraldAPI.presentedKey(request).map { HeraldAPI.isAdmin($0, runtime) } ?? false
        var status: UInt16 = 500
        defer {
            if admin {
                runtime.logger.notice(
                    "Admin key used",
                    metadata: [
                        "herald.route": "\(context.endpointPath ?? "unmatched")",
                        "herald.method": "\(request.method.rawValue)",
                        "herald.app": "\((context.parameters.get("app") ?? "-").prefix(64))",
                        "herald.status": "\(status)", "herald.peer": "\(context.peer)",
                    ])
            }
        }
        var response: Response
        do {
            response = try await next(request, context)
        } catch let error as any HTTPResponseError {
            response = try error.response(from: request, context: context)
        } catch let error as StoreError where error.code == .unstorableText {
            // Input the database refuses (a NUL character in a text field) is the caller's: a 400.
            response = try APIError(.badRequest, code: "invalid_text", message: error.message, field: "body").response(
                from: request, context: context)
        } catch let error as CompositionError {
            // A notification the composer refused, from any route that sends one: 400 or 413.
            response = try APIError(composition: error).response(from: request, context: context)
        }
        status = UInt16(response.status.code)
        if runtime.configuration.tls != nil { response.headers[.strictTransportSecurity] = "max-age=31536000" }
        return response
    }
}

/// Counts API requests by route pattern (never the raw path: ids stay out of labels) and status.
struct RequestMetricsMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: HeraldMetrics

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws
        -> Response
    {
        do {
            let response = try await next(request, context)
            metrics.apiRequest(
                route: context.endpointPath ?? "unmatched", method: request.method.rawValue,
                status: response.status.code)
            return response
        } catch {
            let status = (error as? any HTTPResponseError)?.status.code ?? 500
            metrics.apiRequest(
                route: context.endpointPath ?? "unmatched", method: request.method.rawValue, status: status)
            throw error
        }
    }
}
