import Foundation
package import HTTPTypes
package import HeraldEngine
import HeraldStore
package import NIOCore

/// `POST /v1/apps/{app}/opened` and `…/received` answered without the router: the calls every
/// device makes about every delivery (a campaign's opens, a receipt per arrival), so thousands
/// a second. A channel handler hands over a whole request; this checks it by the same functions
/// the routes use (`HeraldAPI.authorize`, the bodies' decoders, the checks and answers of
/// `HeraldAPI+Engagement`), adds it to the same batch, and answers once the batch is on disk —
/// without a task, a router or a middleware chain per request, which were about a quarter of
/// an open's CPU. What the routes do that this does not is left to them: a call with the admin
/// key (it is logged) and an open of an app whose triggers answer `app.opened` (recorded alone).
package struct DeviceReports: Sendable {
    package enum Route: Sendable {
        case opened, received

        /// The route's path as the router names it (the metrics' `route` label).
        var pattern: String {
            switch self {
            case .opened: "/v1/apps/{app}/opened"
            case .received: "/v1/apps/{app}/received"
            }
        }
    }

    /// An answer: its status, its JSON body, and `Retry-After` for a 429.
    package struct Answer: Sendable {
        package var status: HTTPResponse.Status
        package var body: [UInt8]
        package var retryAfter: Int?
    }

    /// The largest body taken here; a larger one (or one of unknown length) goes to the router.
    package static let bodyLimit = 64 << 10

    let runtime: HeraldRuntime

    package init(runtime: HeraldRuntime) { self.runtime = runtime }

    /// The route and the app of `path` when it is one of the two, exactly (no query, no
    /// trailing slash: the router answers those).
    package static func route(_ path: String) -> (route: Route, app: String)? {
        let utf8 = path.utf8
        let prefix = "/v1/apps/".utf8
        guard utf8.starts(with: prefix) else { return nil }
        let rest = utf8.dropFirst(prefix.count)
        guard let slash = rest.firstIndex(of: UInt8(ascii: "/")), slash != rest.startIndex else { return nil }
        let tail = rest[rest.index(after: slash)...]
        let route: Route
        if tail.elementsEqual("opened".utf8) {
            route = .opened
        } else if tail.elementsEqual("received".utf8) {
            route = .received
        } else {
            return nil
        }
        guard let app = String(rest[..<slash]), !app.contains("?") else { return nil }
        return (route, app)
    }

    /// Answers a call to `route` of app `appID`: false when the router must (nothing was done
    /// then); else `completion` gets the answer once it is known, on whichever thread wrote
    /// the batch (or at once, for a call refused before it).
    package func answer(
        _ route: Route, app appID: String, headers: HTTPFields, peer: String, body: ByteBuffer,
        completion: @escaping @Sendable (Answer) -> Void
    ) -> Bool {
        let key = HeraldAPI.presentedKey(headers)
        if let key, HeraldAPI.isAdmin(key, runtime) { return false }
        if route == .opened, let app = runtime.apps[appID], HeraldAPI.opensFireTriggers(app) { return false }
        let finish: @Sendable (Result<[UInt8], any Error>) -> Void = { result in
            let answer = Self.answer(result)
            runtime.metrics.apiRequest(route: route.pattern, method: "POST", status: Int(answer.status.code))
            completion(answer)
        }
        do {
            let caller = try HeraldAPI.authorize(
                .clientWrite, key: key, appID: appID, userToken: HeraldAPI.userToken(headers), peer: peer,
                runtime: runtime)
            let data = Data(body.readableBytesView)
            let now = runtime.store.now
            switch route {
            case .opened:
                let open = try HeraldAPI.decodeJSON(OpenedBody.self, data).validated(now: now)
                runtime.store.tracks.reportOpen(HeraldAPI.openReport(open, caller)) { result in
                    finish(
                        Result {
                            guard let reported = try result.get() else { throw HeraldAPI.noDelivery(open.deliveryID) }
                            return JSONResponse.bytes(
                                HeraldAPI.openedView(reported.delivery, reported.recorded, caller, runtime))
                        })
                }
            case .received:
                let (reports, batch) = try HeraldAPI.decodeJSON(ReceivedBody.self, data).validated(now: now)
                runtime.store.tracks.recordReceipts(appID: caller.app.id, userID: caller.tokenUser, reports) {
                    result in
                    finish(
                        Result {
                            try HeraldAPI.receivedAnswer(reports, try result.get(), batch: batch, caller, runtime)
                        })
                }
            }
        } catch {
            finish(.failure(error))
        }
        return true
    }

    /// An outcome as the router would answer it (`ListenerMiddleware`): an error that names
    /// its status, else a 500 with no body.
    private static func answer(_ result: Result<[UInt8], any Error>) -> Answer {
        switch result {
        case .success(let body): return Answer(status: .ok, body: body)
        case .failure(let error):
            guard let error = APIError.answering(error) else { return Answer(status: .internalServerError, body: []) }
            return Answer(status: error.status, body: error.body, retryAfter: error.retryAfter)
        }
    }
}
