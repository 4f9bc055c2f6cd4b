import Foundation
import HeraldCore
package import HeraldEngine
import HeraldStore
package import Hummingbird
import Logging

/// What every answer of Herald's listeners gets: `Strict-Transport-Security` when Herald serves
/// TLS itself; and a notice in the log for every call made with the admin key (route, method,
/// app, status and the peer's address; never the key).
package struct ListenerMiddleware: RouterMiddleware {
    let runtime: HeraldRuntime

    package init(runtime: HeraldRuntime) { self.runtime = runtime }

    package func handle(
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
        } catch {
            // An error that is the caller's (`APIError.answering`): 400 or 413; any other goes on.
            guard let answer = APIError.answering(error) else { throw error }
            response = try answer.response(from: request, context: context)
        }
        status = UInt16(response.status.code)
        if runtime.configuration.tls != nil { response.headers[.strictTransportSecurity] = "max-age=31536000" }
        return response
    }
}

/// Counts API requests by route pattern (never the raw path: ids stay out of labels) and status.
package struct RequestMetricsMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: HeraldMetrics

    package init(metrics: HeraldMetrics) { self.metrics = metrics }

    package func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response)
        async throws
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
