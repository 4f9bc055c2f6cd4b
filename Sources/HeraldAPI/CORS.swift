package import HeraldEngine
package import Hummingbird
import NIOCore

/// The API's router behind CORS: a page from an origin an app lists (`apps[].cors_origins`) may
/// call that app's routes (`/v1/apps/{app}/…`) from a browser — a web app registering its push
/// subscription, a service worker reporting an open. Answers the browser's preflight
/// (`OPTIONS` with `Access-Control-Request-Method`) itself, as no route has `OPTIONS`, and
/// marks every answer to a listed origin as readable by it. Keys travel in `Authorization`,
/// never in cookies, so credentials are not allowed. A request without `Origin` (every server
/// and device) passes straight through.
package struct CORSRouter: HTTPResponderBuilder {
    let router: Router<HeraldRequestContext>
    let runtime: HeraldRuntime

    package init(router: Router<HeraldRequestContext>, runtime: HeraldRuntime) {
        self.router = router
        self.runtime = runtime
    }

    package func buildResponder() -> CORSResponder {
        CORSResponder(
            inner: router.buildResponder(), runtime: runtime,
            enabled: runtime.configuration.apps.contains { !$0.corsOrigins.isEmpty })
    }
}

package struct CORSResponder: HTTPResponder {
    let inner: RouterResponder<HeraldRequestContext>
    let runtime: HeraldRuntime
    /// Whether any app lists an origin (else nothing is looked at).
    let enabled: Bool

    /// The methods the app routes take and the request headers Herald reads.
    static let allowMethods = "GET, POST, PUT, PATCH, DELETE"
    static let allowHeaders =
        "Authorization, Content-Type, X-Herald-User-Token, Idempotency-Key, traceparent, tracestate"
    /// Answer headers a page may read besides the simple ones.
    static let exposeHeaders = "Retry-After"
    /// How long a browser may keep a preflight's answer (seconds).
    static let maxAge = "600"

    package func respond(to request: Request, context: HeraldRequestContext) async throws -> Response {
        guard enabled, let origin = request.headers[.origin] else {
            return try await inner.respond(to: request, context: context)
        }
        let allowed =
            Self.app(of: request.uri.path).flatMap { runtime.apps[$0] }?.configuration.corsOrigins
            .contains(origin) == true
        if request.method == .options, request.headers[.accessControlRequestMethod] != nil {
            guard allowed else {
                return try APIError(
                    .forbidden, code: "origin_not_allowed",
                    message: "this origin may not call the app from a browser (apps[].cors_origins)", field: "origin"
                ).response(from: request, context: context)
            }
            return Response(
                status: .noContent,
                headers: [
                    .accessControlAllowOrigin: origin, .vary: "Origin", .accessControlAllowMethods: Self.allowMethods,
                    .accessControlAllowHeaders: Self.allowHeaders, .accessControlMaxAge: Self.maxAge,
                ])
        }
        var response = try await inner.respond(to: request, context: context)
        response.headers[.vary] = "Origin"
        if allowed {
            response.headers[.accessControlAllowOrigin] = origin
            response.headers[.accessControlExposeHeaders] = Self.exposeHeaders
        }
        return response
    }

    /// The app id of an app route's path (`/v1/apps/{app}/…`), else nil.
    static func app(of path: String) -> String? {
        let parts = path.utf8.split(separator: UInt8(ascii: "/"), maxSplits: 3, omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0].isEmpty, parts[1].elementsEqual("v1".utf8), parts[2].elementsEqual("apps".utf8)
        else { return nil }
        let id = parts[3].prefix { $0 != UInt8(ascii: "/") }
        return id.isEmpty ? nil : String(decoding: id, as: UTF8.self)
    }
}
