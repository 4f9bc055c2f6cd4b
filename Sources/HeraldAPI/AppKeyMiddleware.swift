import Foundation
import HeraldEngine
import Hummingbird

/// Who a `/v1/apps/{app}` request speaks for, as `AppKeyMiddleware` resolved it.
struct Caller: Sendable {
    let app: AppRuntime
    let role: CallerRole
    /// For a client key where the app verifies users: the user its user token proves.
    let tokenUser: String?
}

/// What a group of app routes lets in; every route of `/v1/apps/{app}` is registered on one.
struct AppRoutes {
    /// The app's server keys and the admin key.
    let server: RouterGroup<HeraldRequestContext>
    /// Client keys too (reads a device makes: the catalog's categories and tracks).
    let clientRead: RouterGroup<HeraldRequestContext>
    /// Client keys with the user token the app asks for; each such call takes a token from its
    /// user's and its address's rate-limit buckets.
    let clientWrite: RouterGroup<HeraldRequestContext>
    /// Client keys with the user token, not rate-limited (a device removing itself).
    let clientOwned: RouterGroup<HeraldRequestContext>
    /// No key: the route checks a capability of its own (an action token).
    let keyless: RouterGroup<HeraldRequestContext>

    init(_ router: Router<HeraldRequestContext>, runtime: HeraldRuntime) {
        let path: RouterPath = "/v1/apps/:app"
        server = router.group(path).add(middleware: AppKeyMiddleware(runtime: runtime, access: .server))
        clientRead = router.group(path).add(middleware: AppKeyMiddleware(runtime: runtime, access: .clientRead))
        clientWrite = router.group(path).add(middleware: AppKeyMiddleware(runtime: runtime, access: .clientWrite))
        clientOwned = router.group(path).add(middleware: AppKeyMiddleware(runtime: runtime, access: .clientOwned))
        keyless = router.group(path)
    }
}

/// Resolves a request's app and role from its `Authorization` key before the route runs: an
/// unknown app and a wrong key get the same 401 (only the admin key learns that an app does not
/// exist); a client key on a server route is a 403; a client write needs its user token and
/// passes the rate limits. The route reads the result with `context.authorized()`.
struct AppKeyMiddleware: RouterMiddleware {
    enum Access {
        case server, clientRead, clientWrite, clientOwned
    }

    let runtime: HeraldRuntime
    let access: Access

    func handle(
        _ request: Request, context: HeraldRequestContext,
        next: (Request, HeraldRequestContext) async throws -> Response
    ) async throws -> Response {
        var context = context
        context.caller = try HeraldAPI.authorize(
            access, key: HeraldAPI.presentedKey(request), appID: try context.parameters.require("app"),
            userToken: HeraldAPI.userToken(request.headers), peer: context.peer, runtime: runtime)
        return try await next(request, context)
    }
}

extension HeraldAPI {
    /// Who a call to app `appID` with `key` speaks for, checked for `access` (see
    /// `AppKeyMiddleware`): what the middleware and the event loop's answers of device reports
    /// (`DeviceReports`) both decide by.
    static func authorize(
        _ access: AppKeyMiddleware.Access, key: String?, appID: String, userToken: String?, peer: String,
        runtime: HeraldRuntime
    ) throws -> Caller {
        let (app, role) = try caller(key, appID: appID, runtime)
        var tokenUser: String?
        if role == .client {
            switch access {
            case .server:
                throw APIError(
                    .forbidden, code: "forbidden", message: "a client key may only register and unregister devices",
                    field: "authorization")
            case .clientRead:
                break
            case .clientWrite:
                tokenUser = try verifiedUser(userToken, app: app, runtime: runtime)
                try limitClientWrite(app: app, role: role, user: tokenUser, peer: peer, runtime: runtime)
            case .clientOwned:
                tokenUser = try verifiedUser(userToken, app: app, runtime: runtime)
            }
        }
        return Caller(app: app, role: role, tokenUser: tokenUser)
    }
}

extension HeraldRequestContext {
    /// The caller `AppKeyMiddleware` resolved; a 401 on a route registered without it.
    func authorized() throws -> Caller {
        guard let caller else { throw HeraldAPI.noKey() }
        return caller
    }
}
