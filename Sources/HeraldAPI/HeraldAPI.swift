import Foundation
import HeraldCore
package import HeraldEngine
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
    /// Builds the API's router over a runtime (`HeraldServices.apiRouter` adds the dashboard when
    /// it shares the listener).
    package static func router(runtime: HeraldRuntime) -> Router<HeraldRequestContext> {
        let router = Router(context: HeraldRequestContext.self)
        addTracing(to: router, runtime: runtime)
        router.add(middleware: RequestMetricsMiddleware(metrics: runtime.metrics))
        router.add(middleware: ListenerMiddleware(runtime: runtime))
        addOperatorRoutes(to: router, runtime: runtime)

        let apps = AppRoutes(router, runtime: runtime)
        addDeviceRoutes(to: apps, runtime: runtime)
        addNotificationRoutes(to: apps, runtime: runtime)
        addScheduleRoutes(to: apps, runtime: runtime)
        addEngagementRoutes(to: apps, runtime: runtime)
        addActionRoutes(to: apps, runtime: runtime)
        addTestSendRoutes(to: apps, runtime: runtime)
        addActivityRoutes(to: apps, runtime: runtime)
        return router
    }

    // MARK: Helpers

    /// With `telemetry`, a server span per request (its route the span's name), joining the
    /// trace a `traceparent` header names; first, so its time covers the whole answer.
    package static func addTracing(to router: Router<HeraldRequestContext>, runtime: HeraldRuntime) {
        guard runtime.traces != nil else { return }
        router.add(
            middleware: TracingMiddleware<HeraldRequestContext>(
                redactingQueryParameters: ["token", "key", "access_token"]))
    }

    /// The keyless answers of `/livez`, `/readyz` and `/healthz`.
    package static let readyBody = ByteBuffer(string: #"{"status":"ok"}"#)
    package static let notReadyBody = ByteBuffer(string: #"{"status":"unhealthy"}"#)

    /// `/livez`'s answer on every listener: the process serves requests.
    package static func alive() -> Response {
        Response(status: .ok, headers: [.contentType: "application/json"], body: ResponseBody(byteBuffer: readyBody))
    }

    /// `POST …/notifications`: checks the request and stores the notification.
    static func send(_ body: NotificationBody, app: AppRuntime, runtime: HeraldRuntime) async throws
        -> NotificationAccepted
    {
        let request = try body.sendRequest()
        let accepted: NotificationRepository.Accepted
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
    static func caller(_ key: String?, appID: String, _ runtime: HeraldRuntime) throws -> (AppRuntime, CallerRole) {
        guard let key else { throw noKey() }
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
        app: AppRuntime, role: CallerRole, user: String?, peer: String, runtime: HeraldRuntime
    ) throws {
        guard role == .client else { return }
        if let wait = runtime.rateLimiter.take(appID: app.id, userID: user, peer: peer, now: Date()) {
            runtime.metrics.rateLimited(app: app.id)
            throw APIError(
                .tooManyRequests, code: "rate_limited", message: "too many client-key writes: try again in \(wait) s",
                field: "authorization",
                retryAfter: wait)
        }
    }

    /// Whether `key` is the admin key (compared in constant time).
    static func isAdmin(_ key: String, _ runtime: HeraldRuntime) -> Bool {
        runtime.configuration.adminKey.map { constantTimeEquals($0, key) } ?? false
    }

    /// The key in `Authorization: Bearer <key>`, or nil when there is none.
    static func presentedKey(_ request: Request) -> String? { presentedKey(request.headers) }

    /// The key in `Authorization: Bearer <key>` of `headers`, or nil when there is none.
    static func presentedKey(_ headers: HTTPFields) -> String? {
        guard let header = headers[.authorization] else { return nil }
        // "Bearer" in any case, a space, then the key: the rest, not empty.
        let utf8 = header.utf8
        guard utf8.count > 7, let space = utf8.firstIndex(of: UInt8(ascii: " ")),
            utf8.distance(from: utf8.startIndex, to: space) == 6,
            zip(utf8[..<space], "bearer".utf8).allSatisfy({ $0 | 0x20 == $1 })
        else { return nil }
        return String(header[header.index(after: space)...])
    }

    /// The 401 of a call without a key.
    static func noKey() -> APIError {
        APIError(
            .unauthorized, code: "unauthorized", message: "send Authorization: Bearer <key>", field: "authorization")
    }

    /// The value of `X-Herald-User-Token` in `headers`, if any.
    static func userToken(_ headers: HTTPFields) -> String? {
        let name = UserToken.header.lowercased()
        return headers.first(where: { $0.name.canonicalName == name })?.value
    }

    /// For a client-key call: the user the `X-Herald-User-Token` proves (nil when the app's
    /// client registration is unverified). Missing, malformed, expired or forged → 401.
    static func verifiedUser(_ token: String?, app: AppRuntime, runtime: HeraldRuntime) throws -> String? {
        guard app.configuration.clientRegistration == .verified else { return nil }
        let secrets = app.configuration.userTokenSecrets
        guard !secrets.isEmpty else {
            // Refused at start; kept closed should a configuration bypass the check.
            throw APIError(
                .unauthorized, code: "unauthorized", message: "the app has no user_token_secret",
                field: UserToken.header)
        }
        guard let token, !token.isEmpty else {
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

    package static func constantTimeEquals(_ left: String, _ right: String) -> Bool {
        var left = left
        var right = right
        return left.withUTF8 { a in
            right.withUTF8 { b in
                var difference = UInt8(a.count == b.count ? 0 : 1)
                for index in 0..<max(a.count, b.count) {
                    difference |= (index < a.count ? a[index] : 0) ^ (index < b.count ? b[index] : 0)
                }
                return difference == 0
            }
        }
    }

    static func decode<Body: Decodable>(_ type: Body.Type, _ request: Request, limit: Int = bodyLimit) async throws
        -> Body
    {
        try decodeJSON(type, try await body(request, limit: limit), prefix: "")
    }

    /// A body with a fast path (`FlatDecodable`): read from the bytes when it is a flat object,
    /// else by JSONDecoder, whose errors name the field.
    static func decode<Body: FlatDecodable>(_ type: Body.Type, _ request: Request, limit: Int = bodyLimit)
        async throws -> Body
    {
        try decodeJSON(type, try await body(request, limit: limit))
    }

    static func decodeJSON<Body: FlatDecodable>(_ type: Body.Type, _ data: Data) throws -> Body {
        if let body = data.withUnsafeBytes({ Body(flat: $0) }) { return body }
        return try decodeJSON(type, data, prefix: "")
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
            store: runtime.store, appID: app.id, rules: app.registrationRules(client: false),
            endpoints: app.webpushEndpoints)
        do {
            for try await chunk in request.body {
                try await importer.feed(buffer: chunk)
            }
            try await importer.finish()
        } catch let error as DeviceImportError {
            throw APIError(.badRequest, code: error.code, message: error.message, field: error.field)
        } catch {
            await importer.abandon()
            throw error
        }
        return importer.imported
    }
}
