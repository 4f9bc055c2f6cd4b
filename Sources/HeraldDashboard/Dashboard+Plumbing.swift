import Foundation
import HTTPTypes
import HeraldAPI
import HeraldCore
import HeraldEngine
import HeraldStore
import Hummingbird
import Logging
import Mustache
import NIOCore
import Synchronization

/// What every page uses: the app and session of a request, CSRF, forms, rendering, responses
/// and the formats of times and tokens.
extension Dashboard {
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

/// Times as the dashboard shows them.
enum Format {
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
