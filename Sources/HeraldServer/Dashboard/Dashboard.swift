import Foundation
import HTTPTypes
import HeraldCore
import HeraldStore
import Hummingbird
import Logging
import Mustache
import NIOCore
import Synchronization

/// The dashboard: server-rendered pages under `/dashboard` (on the API's listener or one of its
/// own), signed in with the admin key or an app's server key (a signed HttpOnly, SameSite=Strict,
/// Secure cookie; a CSRF token in every form). Nothing secret is rendered: keys never, device
/// tokens by their first 8 characters.
enum Dashboard {
    static let library: MustacheLibrary = {
        var library = MustacheLibrary()
        // The templates are constants compiled in; a syntax error in one is caught by the tests.
        for (name, text) in DashboardTemplates.all { try? library.register(text, named: name) }
        return library
    }()

    /// The router of the dashboard's own listener (`dashboard.port`): its pages, and `/livez`.
    static func router(runtime: HeraldRuntime) -> Router<HeraldRequestContext> {
        let router = Router(context: HeraldRequestContext.self)
        HeraldAPI.addTracing(to: router, runtime: runtime)
        router.add(middleware: RequestMetricsMiddleware(metrics: runtime.metrics))
        router.add(middleware: ListenerMiddleware(runtime: runtime))
        router.get("/livez") { _, _ in HeraldAPI.alive() }
        addRoutes(to: router, runtime: runtime)
        return router
    }

    static func addRoutes(to router: Router<HeraldRequestContext>, runtime: HeraldRuntime) {
        let secure = runtime.configuration.secureCookies
        router.get("/dashboard/assets/herald.css") { _, _ in
            asset(DashboardTemplates.css, type: "text/css; charset=utf-8")
        }
        router.get("/dashboard/assets/herald.js") { _, _ in
            asset(DashboardTemplates.script, type: "text/javascript; charset=utf-8")
        }
        router.get("/dashboard") { request, _ in
            guard let session = try await session(request, runtime) else { return redirect("/dashboard/login") }
            switch session.role {
            case .admin: return redirect("/dashboard/overview")
            case .app(let id): return redirect("/dashboard/apps/\(escaped(id))")
            }
        }
        router.get("/dashboard/login") { _, _ in
            try await loginPage(error: nil, status: .ok, runtime: runtime)
        }
        router.post("/dashboard/login") { request, context in
            let now = Date()
            if let wait = runtime.signInThrottle.wait(peer: context.peer, now: now) {
                runtime.metrics.signInRefused(reason: "throttled")
                runtime.logger.notice(
                    "Dashboard sign-in throttled",
                    metadata: ["herald.peer": "\(context.peer)", "herald.retry_after": "\(wait)"])
                var response = message(
                    "Too many attempts", "Too many failed sign-ins: try again in \(wait) s.", session: nil, app: nil,
                    status: .tooManyRequests)
                response.headers[.retryAfter] = "\(wait)"
                return response
            }
            let form = try await form(request)
            let secret = try await runtime.dashboardSecret()
            guard let token = request.cookies[DashboardSession.loginCookie(secure: secure)]?.value,
                let sent = form["csrf"],
                HeraldAPI.constantTimeEquals(token, sent),
                DashboardSession.checkLoginToken(sent, secret: secret, now: now)
            else {
                return try await loginPage(
                    error: "The form expired or was not sent from this page; try again.", status: .forbidden,
                    runtime: runtime)
            }
            guard
                let session = DashboardSession.signIn(
                    key: form["key"] ?? "", configuration: runtime.configuration, secret: secret, now: now)
            else {
                runtime.signInThrottle.failed(peer: context.peer, now: now)
                runtime.metrics.signInRefused(reason: "wrong_key")
                runtime.logger.notice(
                    "Dashboard sign-in refused: not the admin key nor an app's server key",
                    metadata: ["herald.peer": "\(context.peer)"])
                return try await loginPage(
                    error:
                        "That is not the admin key nor an app's server key of at least \(DashboardSession.minimumKeyLength) characters.",
                    status: .unauthorized, runtime: runtime)
            }
            runtime.signInThrottle.succeeded(peer: context.peer)
            runtime.logger.notice(
                "Dashboard sign-in",
                metadata: ["herald.dashboard.role": "\(describe(session.role))", "herald.peer": "\(context.peer)"])
            var response = redirect("/dashboard")
            response.setCookie(
                cookie(
                    DashboardSession.cookie(secure: secure), session.value, maxAge: Int(DashboardSession.lifetime),
                    secure: secure))
            response.setCookie(cookie(DashboardSession.loginCookie(secure: secure), "", maxAge: 0, secure: secure))
            return response
        }
        router.post("/dashboard/logout") { request, context in
            guard let session = try await session(request, runtime) else { return redirect("/dashboard/login") }
            let form = try await form(request)
            guard checkCSRF(form, session) else { return csrfRefused() }
            try await runtime.store.dashboard.recordSignOut(nonce: session.nonce, expiresAt: session.expiresAt)
            runtime.logger.notice(
                "Dashboard sign-out",
                metadata: ["herald.dashboard.role": "\(describe(session.role))", "herald.peer": "\(context.peer)"])
            var response = redirect("/dashboard/login")
            response.setCookie(cookie(DashboardSession.cookie(secure: secure), "", maxAge: 0, secure: secure))
            return response
        }
        router.get("/dashboard/overview") { request, _ in
            guard let session = try await session(request, runtime) else { return redirect("/dashboard/login") }
            let apps = runtime.apps.keys.sorted().filter { session.role.sees($0) }
            return try await overview(apps: apps, session: session, app: nil, runtime: runtime)
        }
        router.get("/dashboard/apps/:app") { request, context in
            try await withApp(request, context, runtime) { session, app in
                try await overview(
                    apps: [app.configuration.id], session: session, app: app.configuration.id, runtime: runtime)
            }
        }
        router.get("/dashboard/apps/:app/users") { request, context in
            try await withApp(request, context, runtime) { session, app in
                try await users(request, session: session, app: app, runtime: runtime)
            }
        }
        router.get("/dashboard/apps/:app/notifications") { request, context in
            try await withApp(request, context, runtime) { session, app in
                try await notifications(request, session: session, app: app, runtime: runtime)
            }
        }
        router.get("/dashboard/apps/:app/notifications/:id") { request, context in
            try await withApp(request, context, runtime) { session, app in
                guard let id = context.parameters.get("id").flatMap(UUID.init(uuidString:)),
                    let view = try await NotificationPage.load(app: app.configuration.id, id: id, runtime: runtime)
                else {
                    return message(
                        "Not found", "No such notification.", session: session, app: app.configuration.id,
                        status: .notFound)
                }
                return render(
                    "Notification", "notification", view, session: session, app: app.configuration.id,
                    tab: "notifications")
            }
        }
        router.get("/dashboard/apps/:app/notifications/:id/live") { request, context in
            try await withApp(request, context, runtime) { session, app in
                guard let id = context.parameters.get("id").flatMap(UUID.init(uuidString:)),
                    let live = try await NotificationPage.Live.load(app: app.configuration.id, id: id, runtime: runtime)
                else { throw APIError(.notFound, code: "not_found", message: "no such notification", field: "id") }
                return try JSONResponse.make(live)
            }
        }
        addComposerRoutes(to: router, runtime: runtime)
        addInsightRoutes(to: router, runtime: runtime)
    }

    // MARK: Pages

    /// Where the overview stops counting deferred deliveries (counting a million took 100 ms).
    static let deferredLimit = 100_000

    static func overview(apps: [String], session: DashboardSession, app: String?, runtime: HeraldRuntime) async throws
        -> Response
    {
        // An app's key sees its app's queue only; deferred rows are counted up to a limit.
        let gauges = try await runtime.store.nodes.outboxGauges(appIDs: apps, deferredLimit: deferredLimit)
        let now = Date()
        let pauses = runtime.pauses.all
        let views = apps.compactMap { id -> OverviewApp? in
            guard let app = runtime.apps[id] else { return nil }
            let (minutes, failures) = runtime.metrics.activity.snapshot(app: id, now: now)
            var providers: [OverviewApp.Provider] = []
            for platform in ["apns", "fcm"] {
                let disabled = platform == "apns" ? app.apnsDisabledReason : app.fcmDisabledReason
                if let pause = pauses[ProviderKey(app: id, platform: platform)] {
                    providers.append(
                        .init(
                            name: platform.uppercased(), label: "paused (\(pause.reason))", state: "bad",
                            detail:
                                "since \(HeraldTime.format(pause.since)); tried again at \(HeraldTime.format(pause.retryAt))"
                        ))
                } else if let disabled {
                    providers.append(.init(name: platform.uppercased(), label: "off", state: "", detail: disabled))
                } else {
                    providers.append(.init(name: platform.uppercased(), label: "ok", state: "ok", detail: "sending"))
                }
            }
            return OverviewApp(
                id: id, providers: providers, sentLastMinute: minutes.last?.sent ?? 0,
                sentLastHour: minutes.reduce(0) { $0 + $1.sent },
                failedLastHour: minutes.reduce(0) { $0 + $1.failed }, chart: Charts.activity(minutes),
                failures: failures.prefix(10).map { .init(reason: $0.reason, count: $0.count) })
        }
        let view = OverviewPage(
            queueDepth: gauges.due,
            deferred: gauges.deferred >= deferredLimit ? "\(deferredLimit)+" : "\(gauges.deferred)",
            scope: app == nil ? "all apps" : "this app",
            oldest: gauges.oldestDueAge > 0 ? "\(Int(gauges.oldestDueAge)) s" : nil, apps: views)
        return render("Overview", "overview", view, session: session, app: app, tab: "overview")
    }

    static func users(_ request: Request, session: DashboardSession, app: AppRuntime, runtime: HeraldRuntime)
        async throws -> Response
    {
        let appID = app.configuration.id
        let query = request.uri.queryParameters.get("user_id")?.trimmingCharacters(in: .whitespaces) ?? ""
        var view = UsersPage(app: appID, query: query, notFound: false, user: nil)
        if !query.isEmpty, query.utf8.count <= 256 {
            let record = try await runtime.store.users.user(appID: appID, userID: query)
            let devices = try await runtime.store.devices.devices(appID: appID, userID: query, limit: 100)
            if record == nil && devices.isEmpty {
                view.notFound = true
            } else {
                let zoneName = record?.timeZone ?? "UTC"
                let zone = TimeZone(identifier: zoneName) ?? .gmt
                let badges = try await runtime.store.devices.badges(appID: appID, userID: query)
                let steps = try await runtime.store.tracks.pendingSteps(appID: appID, userID: query)
                let waiting = try await runtime.store.dashboard.waitingDeliveries(
                    appID: appID, userID: query, limit: 50)
                let preferences = record.map { String(decoding: $0.preferences, as: UTF8.self) }.flatMap {
                    $0 == "{}" ? nil : $0
                }
                view.user = UsersPage.User(
                    id: query, zone: zoneName, locale: record?.locale ?? "—",
                    badge: badges.isEmpty ? nil : badges.values.reduce(0, +),
                    devices: devices.map {
                        .init(
                            id: $0.deviceID, name: $0.name, platform: $0.platform, environment: $0.environment,
                            token: Format.token($0.token),
                            permission: $0.authorizationStatus ?? "not reported", active: $0.active,
                            reason: [$0.inactiveReason, $0.inactiveSince.map { "since " + HeraldTime.format($0) }]
                                .compactMap { $0 }.joined(separator: " "))
                    },
                    preferences: preferences,
                    badges: badges.sorted { $0.key < $1.key }.map { .init(name: $0.key, value: $0.value) },
                    steps: steps.map { .init(track: $0.track, step: $0.step, due: Format.local($0.dueAt, zone)) },
                    waiting: waiting.map { item in
                        .init(
                            notification: item.notificationID.uuidString.lowercased(), type: item.type ?? "custom",
                            device: item.delivery.deviceID, status: item.delivery.status.rawValue,
                            due: Format.local(item.delivery.dueAt, zone),
                            why: DecisionTrace.entries(item.delivery.trace).last?.message ?? item.delivery.reason ?? "")
                    })
            }
        }
        return render("Users", "users", view, session: session, app: appID, tab: "users")
    }

    static func notifications(_ request: Request, session: DashboardSession, app: AppRuntime, runtime: HeraldRuntime)
        async throws -> Response
    {
        let appID = app.configuration.id
        let parameters = request.uri.queryParameters
        let type = parameters.get("type").flatMap { $0.isEmpty ? nil : $0 }
        let status = parameters.get("status").flatMap { DashboardQueries.summaryFilters[$0] == nil ? nil : $0 }
        let before = parameters.get("before").flatMap(HeraldTime.parse)
        let limit = 50
        let rows = try await runtime.store.dashboard.recentNotifications(
            appID: appID, type: type, status: status, before: before, limit: limit)
        var next: String?
        if rows.count == limit, let last = rows.last {
            var items = [URLQueryItem(name: "before", value: HeraldTime.format(last.createdAt))]
            if let type { items.append(URLQueryItem(name: "type", value: type)) }
            if let status { items.append(URLQueryItem(name: "status", value: status)) }
            var components = URLComponents()
            components.queryItems = items
            next = "/dashboard/apps/\(escaped(appID))/notifications?" + (components.percentEncodedQuery ?? "")
        }
        let view = NotificationsPage(
            app: appID, types: (app.catalog?.types.map(\.name) ?? []).map { .init(name: $0, selected: $0 == type) },
            statuses: DashboardQueries.summaryFilters.keys.sorted().map { .init(name: $0, selected: $0 == status) },
            rows: rows.map {
                .init(
                    id: $0.id.uuidString.lowercased(), created: Format.utc($0.createdAt), type: $0.type ?? "custom",
                    recipients: $0.recipients,
                    sent: $0.sent, failed: $0.failed, deferred: $0.deferred, suppressed: $0.suppressed,
                    opened: $0.opened)
            }, filtered: type != nil || status != nil, next: next)
        return render("Notifications", "notifications", view, session: session, app: appID, tab: "notifications")
    }

    // MARK: Plumbing

    /// Runs `body` for the app the path names when the session may see it; else a 404 page (an
    /// app key learns nothing about other apps, not even whether they exist).
    static func withApp(
        _ request: Request, _ context: HeraldRequestContext, _ runtime: HeraldRuntime,
        _ body: (DashboardSession, AppRuntime) async throws -> Response
    ) async throws -> Response {
        guard let session = try await session(request, runtime) else { return redirect("/dashboard/login") }
        let id = context.parameters.get("app")?.removingPercentEncoding ?? ""
        guard session.role.sees(id), let app = runtime.apps[id] else {
            return message("Not found", "No such app.", session: session, app: nil, status: .notFound)
        }
        return try await body(session, app)
    }

    /// The request's session: its cookie's MAC holds, it has not expired, and it has not signed out.
    static func session(_ request: Request, _ runtime: HeraldRuntime) async throws -> DashboardSession? {
        let secure = runtime.configuration.secureCookies
        guard let value = request.cookies[DashboardSession.cookie(secure: secure)]?.value else { return nil }
        let secret = try await runtime.dashboardSecret()
        guard
            let session = DashboardSession.verify(
                value, configuration: runtime.configuration, secret: secret, now: Date())
        else {
            return nil
        }
        return try await runtime.store.dashboard.isSignedOut(nonce: session.nonce) ? nil : session
    }

    static func checkCSRF(_ form: [String: String], _ session: DashboardSession) -> Bool {
        guard let sent = form["csrf"] else { return false }
        return HeraldAPI.constantTimeEquals(sent, session.csrf)
    }

    static func csrfRefused() -> Response {
        message(
            "Refused", "The form's CSRF token is missing or wrong: reload the page and try again.", session: nil,
            app: nil, status: .forbidden)
    }

    /// The largest form body the dashboard reads (the composer's data field included).
    static let maximumFormBody = 64 * 1024

    /// A form body: `application/x-www-form-urlencoded` only (a multipart or any other body is a
    /// 415), at most `maximumFormBody` bytes (413), parsed by `FormBody` (a bad escape or bytes
    /// that are not UTF-8 are a 400 naming `body`).
    static func form(_ request: Request) async throws -> [String: String] {
        let type = request.headers[.contentType]?.split(separator: ";", maxSplits: 1).first
            .map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        guard type == "application/x-www-form-urlencoded" else {
            throw APIError(
                .unsupportedMediaType, code: "unsupported_media_type",
                message: "dashboard forms are sent as application/x-www-form-urlencoded", field: "content-type")
        }
        let buffer: ByteBuffer
        do {
            buffer = try await request.body.collect(upTo: maximumFormBody)
        } catch is NIOTooManyBytesError {
            throw APIError(
                .contentTooLarge, code: "body_too_large", message: "the form is larger than 64 KB", field: "body")
        }
        switch FormBody.parse(buffer.readableBytesView) {
        case .success(let fields): return fields
        case .failure(let invalid):
            throw APIError(.badRequest, code: "invalid_form", message: invalid.message, field: "body")
        }
    }

    static func loginPage(error: String?, status: HTTPResponse.Status, runtime: HeraldRuntime) async throws -> Response
    {
        let secure = runtime.configuration.secureCookies
        let token = DashboardSession.loginToken(secret: try await runtime.dashboardSecret(), now: Date())
        var response = page(
            layout(
                title: "Sign in", content: render("login", LoginPage(csrf: token, error: error)), session: nil,
                app: nil, tab: nil),
            status: status)
        response.setCookie(cookie(DashboardSession.loginCookie(secure: secure), token, maxAge: 3600, secure: secure))
        return response
    }

    static func message(
        _ heading: String, _ text: String, session: DashboardSession?, app: String?, status: HTTPResponse.Status
    ) -> Response {
        page(
            layout(
                title: heading, content: render("message", MessagePage(heading: heading, text: text)), session: session,
                app: app, tab: nil), status: status)
    }

    static func render(
        _ title: String, _ template: String, _ view: Any, session: DashboardSession, app: String?, tab: String?
    ) -> Response {
        page(layout(title: title, content: render(template, view), session: session, app: app, tab: tab), status: .ok)
    }

    static func render(_ template: String, _ view: Any) -> String {
        library.render(view, withTemplate: template) ?? ""
    }

    /// An app's pages: the tab's name (the `tab` pages pass), its label and its path under the app.
    static let tabs: [(name: String, label: String, path: String)] = [
        ("overview", "Overview", ""), ("users", "Users", "/users"),
        ("notifications", "Notifications", "/notifications"),
        ("compose", "Compose", "/compose"), ("analytics", "Analytics", "/analytics"),
        ("catalog", "Catalog", "/catalog"),
    ]

    static func layout(title: String, content: String, session: DashboardSession?, app: String?, tab: String?) -> String
    {
        render(
            "layout",
            LayoutView(
                title: title, content: content, signedIn: session != nil,
                tabs: app.map { app in
                    tabs.map {
                        LayoutView.Tab(
                            label: $0.label, href: "/dashboard/apps/\(escaped(app))\($0.path)", current: $0.name == tab)
                    }
                } ?? [],
                csrf: session?.csrf ?? "", who: session.map { describe($0.role) } ?? ""))
    }

    static func describe(_ role: DashboardRole) -> String {
        switch role {
        case .admin: "admin"
        case .app(let id): "app \(id)"
        }
    }

    static func page(_ html: String, status: HTTPResponse.Status) -> Response {
        var headers = securityHeaders
        headers[.contentType] = "text/html; charset=utf-8"
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: html)))
    }

    static func asset(_ text: String, type: String) -> Response {
        var headers = securityHeaders
        headers[.contentType] = type
        headers[.cacheControl] = "public, max-age=3600"
        return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
    }

    static func redirect(_ location: String) -> Response {
        var headers = securityHeaders
        headers[.location] = location
        return Response(status: .seeOther, headers: headers)
    }

    static let securityHeaders: HTTPFields = [
        .contentSecurityPolicy:
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        .xContentTypeOptions: "nosniff", .cacheControl: "no-store", HTTPField.Name("Referrer-Policy")!: "same-origin",
        HTTPField.Name("X-Frame-Options")!: "DENY",
    ]

    /// A dashboard cookie: HttpOnly, SameSite=Strict; `Secure` with `Path=/` (what the
    /// `__Host-` prefix requires) unless over plain HTTP under `--dev`.
    static func cookie(_ name: String, _ value: String, maxAge: Int, secure: Bool) -> Cookie {
        Cookie(
            name: name, value: value, maxAge: maxAge, path: secure ? "/" : "/dashboard", secure: secure, httpOnly: true,
            sameSite: .strict)
    }

    static func escaped(_ component: String) -> String {
        component.addingPercentEncoding(
            withAllowedCharacters: .urlPathAllowed.subtracting(CharacterSet(charactersIn: "/"))) ?? component
    }
}

/// Times and tokens as the dashboard shows them.
enum Format {
    /// A device token: its first 8 characters, never more.
    static func token(_ token: String) -> String { String(token.prefix(8)) + "…" }

    static func utc(_ date: Date) -> String {
        date.formatted(
            Date.ISO8601FormatStyle(timeZone: .gmt).year().month().day().dateSeparator(.dash).time(
                includingFractionalSeconds: false
            ).timeSeparator(.colon)
        )
        .replacingOccurrences(of: "T", with: " ")
    }

    /// `2026-11-26 09:00` in `zone` (the zone is named in the column header).
    static func local(_ date: Date, _ zone: TimeZone) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = zone
        let parts = calendar.dateComponents([.year, .month, .day, .hour, .minute], from: date)
        return String(
            format: "%04d-%02d-%02d %02d:%02d", parts.year ?? 0, parts.month ?? 0, parts.day ?? 0, parts.hour ?? 0,
            parts.minute ?? 0)
    }
}
