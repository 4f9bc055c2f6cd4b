import Foundation
import HeraldCore
import HeraldEngine
import HeraldPayload
import HeraldStore
import Hummingbird
import Logging
import NIOCore

/// The operator's routes: health probes, `/metrics`, `/openapi.yaml` and the movable clock.
extension HeraldAPI {
    static func addOperatorRoutes(to router: Router<HeraldRequestContext>, runtime: HeraldRuntime) {
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
            let outbox = try await runtime.store.nodes.outboxGauges(appIDs: Array(runtime.apps.keys))
            return Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4"],
                body: ResponseBody(
                    byteBuffer: ByteBuffer(
                        string: runtime.metrics.render(
                            outbox: outbox, apps: Array(runtime.apps.keys),
                            openConnections: runtime.apps.values.reduce(0) { $0 + $1.openConnections },
                            pauses: runtime.pauses.all, writer: runtime.store.writerUse))))
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
    }
}
