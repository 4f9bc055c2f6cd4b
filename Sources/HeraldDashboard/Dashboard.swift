import Foundation
import HTTPTypes
package import HeraldAPI
import HeraldCore
package import HeraldEngine
import HeraldStore
package import Hummingbird
import Logging
import Mustache
import NIOCore
import Synchronization

/// The dashboard: server-rendered pages under `/dashboard` (on the API's listener or one of its
/// own), signed in with the admin key or an app's server key (a signed HttpOnly, SameSite=Strict,
/// Secure cookie; a CSRF token in every form). Nothing secret is rendered: keys never, device
/// tokens by their first 8 characters.
package enum Dashboard {
    static let library: MustacheLibrary = {
        var library = MustacheLibrary()
        // The templates are constants compiled in; a syntax error in one is caught by the tests.
        for (name, text) in DashboardTemplates.all { try? library.register(text, named: name) }
        return library
    }()

    /// The router of the dashboard's own listener (`dashboard.port`): its pages, and `/livez`.
    package static func router(runtime: HeraldRuntime) -> Router<HeraldRequestContext> {
        let router = Router(context: HeraldRequestContext.self)
        HeraldAPI.addTracing(to: router, runtime: runtime)
        router.add(middleware: RequestMetricsMiddleware(metrics: runtime.metrics))
        router.add(middleware: ListenerMiddleware(runtime: runtime))
        router.get("/livez") { _, _ in HeraldAPI.alive() }
        addRoutes(to: router, runtime: runtime)
        return router
    }

    package static func addRoutes(to router: Router<HeraldRequestContext>, runtime: HeraldRuntime) {
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
}
