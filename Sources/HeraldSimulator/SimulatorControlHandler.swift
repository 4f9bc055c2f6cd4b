import Foundation
import HeraldCore
import NIOCore
import NIOHTTP1

/// The simulator's control API (HTTP/1.1, JSON):
///
/// | route | what |
/// | --- | --- |
/// | `GET /inbox` | `{"total","tokens","duplicates","shown"}`: `shown` leaves out what replaced an earlier notification of the same token with the same collapse id (FCM: tag) |
/// | `GET /inbox/{token}` | `{"token","notifications":[…]}`: what was accepted for a token, payload included |
/// | `DELETE /inbox` | empties the inbox |
/// | `GET /counters` | requests, accepted, by status, by reason, connections, GOAWAYs, FCM token exchanges and sends |
/// | `GET /faults`, `PUT /faults` | the fault settings (`fail_500`, `fail_503`, `fail_429`, `latency_ms`, `goaway_after_streams`, `max_concurrent_streams`, `hang_tokens`) |
/// | `POST /tokens/{token}/unregister` | answer the token 410 `Unregistered` from now on (`{"reason":"ExpiredToken"}` optional) |
/// | `DELETE /tokens/{token}/unregister` | make it live again |
/// | `POST /webpush/subscriptions` | a new web push subscription `{"id","endpoint","keys":{"p256dh","auth"}}` (`{"application_server_key"}` optional: VAPID must then use that key); its messages land in the inbox under `id` |
/// | `PUT /tokens/{token}/script` | answer the token `{"status":400,"reason":"BadTopic"}` from now on (FCM: optional `"retry_after"` header text, sent as given); `DELETE` removes it |
final class SimulatorControlHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let state: SimulatorState
    private var head: HTTPRequestHead?
    private var body = ByteBuffer()

    init(state: SimulatorState) { self.state = state }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            body.clear()
        case .body(var part):
            body.writeBuffer(&part)
        case .end:
            guard let head else { return }
            let (status, json) = route(head: head, body: Data(body.readableBytesView))
            var headers = HTTPHeaders()
            headers.add(name: "content-type", value: "application/json")
            headers.add(name: "content-length", value: String(json.utf8.count))
            context.write(
                wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: status, headers: headers))),
                promise: nil)
            context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: json)))), promise: nil)
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
            self.head = nil
        }
    }

    private func route(head: HTTPRequestHead, body: Data) -> (HTTPResponseStatus, String) {
        let path = head.uri.split(separator: "?").first.map(String.init) ?? head.uri
        let parts = path.split(separator: "/").map(String.init)
        switch (head.method, parts.first, parts.count) {
        case (.GET, "inbox", 1):
            let summary = state.inboxSummary()
            return (
                .ok,
                #"{"total":\#(summary.total),"tokens":\#(summary.tokens),"duplicates":\#(summary.duplicates),"shown":\#(summary.shown)}"#
            )
        case (.DELETE, "inbox", 1):
            state.clearInbox()
            return (.ok, #"{"cleared":true}"#)
        case (.GET, "inbox", 2):
            let token = parts[1].lowercased()
            let entries = state.inbox(for: token).map(Self.json(for:))
            return (.ok, #"{"token":\#(Self.quote(token)),"notifications":[\#(entries.joined(separator: ","))]}"#)
        case (.GET, "counters", 1):
            return (.ok, Self.json(for: state.counters))
        case (.GET, "faults", 1):
            return (.ok, Self.encode(state.faults))
        case (.PUT, "faults", 1):
            do {
                state.faults = try JSONDecoder().decode(SimulatorFaults.self, from: body)
                return (.ok, Self.encode(state.faults))
            } catch {
                return (
                    .badRequest,
                    #"{"error":{"code":"invalid_faults","message":"the body is not a faults object","field":"body"}}"#
                )
            }
        case (.POST, "tokens", 3) where parts[2] == "unregister":
            let object = (try? JSONSerialization.jsonObject(with: body)) as? [String: Any]
            let reason = object?["reason"] as? String ?? "Unregistered"
            guard reason == "Unregistered" || reason == "ExpiredToken" else {
                return (
                    .badRequest,
                    #"{"error":{"code":"invalid_reason","message":"reason is Unregistered or ExpiredToken","field":"reason"}}"#
                )
            }
            state.markDead(parts[1], reason: reason)
            return (.ok, #"{"token":\#(Self.quote(parts[1].lowercased())),"reason":\#(Self.quote(reason))}"#)
        case (.DELETE, "tokens", 3) where parts[2] == "unregister":
            state.revive(parts[1])
            return (.ok, #"{"token":\#(Self.quote(parts[1].lowercased())),"revived":true}"#)
        case (.PUT, "tokens", 3) where parts[2] == "script":
            guard let object = (try? JSONSerialization.jsonObject(with: body)) as? [String: Any],
                let status = object["status"] as? Int, let reason = object["reason"] as? String
            else {
                return (
                    .badRequest,
                    #"{"error":{"code":"invalid_script","message":"body needs status (number) and reason (string)","field":"status"}}"#
                )
            }
            state.script(parts[1], status: status, reason: reason, retryAfter: object["retry_after"] as? String)
            return (
                .ok,
                #"{"token":\#(Self.quote(parts[1].lowercased())),"status":\#(status),"reason":\#(Self.quote(reason))}"#
            )
        case (.GET, "activities", 1):
            let activities = state.activities
            let ignored = activities.ignored.sorted { $0.key < $1.key }.map { #"\#(Self.quote($0.key)):\#($0.value)"# }
            return (
                .ok,
                #"{"activities":[\#(activities.all.map(Self.json(for:)).joined(separator: ","))],"publishes":\#(activities.publishes),"ignored":{\#(ignored.joined(separator: ","))}}"#
            )
        case (.POST, "activities", 3) where parts[2] == "rotate":
            guard let token = state.activities.rotate(updateToken: parts[1], state: state) else {
                return (
                    .notFound,
                    #"{"error":{"code":"not_found","message":"no activity has this update token","field":"token"}}"#
                )
            }
            return (.ok, #"{"token":\#(Self.quote(token))}"#)
        case (.POST, "webpush", 2) where parts[1] == "subscriptions":
            var serverKey: Data?
            if !body.isEmpty {
                guard let object = (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] else {
                    return (
                        .badRequest,
                        #"{"error":{"code":"invalid_field","message":"the body is a JSON object","field":"body"}}"#
                    )
                }
                if let text = object["application_server_key"] {
                    guard let text = text as? String, let key = Base64URL.decode(text), key.count == 65 else {
                        return (
                            .badRequest,
                            #"{"error":{"code":"invalid_field","message":"application_server_key is base64url of a 65-byte P-256 point","field":"application_server_key"}}"#
                        )
                    }
                    serverKey = key
                }
            }
            return (.created, state.webpush.subscribe(applicationServerKey: serverKey).json)
        case (.DELETE, "tokens", 3) where parts[2] == "script":
            state.removeScript(parts[1])
            return (.ok, #"{"token":\#(Self.quote(parts[1].lowercased())),"scripted":false}"#)
        default:
            return (
                .notFound,
                #"{"error":{"code":"not_found","message":"no such route: \#(head.method) \#(path)","field":"path"}}"#
            )
        }
    }

    static func json(for entry: SimulatorInboxEntry) -> String {
        var fields = [
            #""apns_id":\#(quote(entry.apnsID))"#,
            #""push_type":\#(quote(entry.pushType))"#,
            #""topic":\#(quote(entry.topic))"#,
            #""priority":\#(entry.priority)"#,
            #""received_at":\#(quote(entry.receivedAt.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))))"#,
            #""received_at_us":\#(Int64((entry.receivedAt.timeIntervalSince1970 * 1_000_000).rounded()))"#,
        ]
        if let expiration = entry.expiration { fields.append(#""expiration":\#(expiration)"#) }
        if let collapseID = entry.collapseID { fields.append(#""collapse_id":\#(quote(collapseID))"#) }
        // The payload was checked to be a JSON object when it was accepted: embed it as is.
        fields.append(#""payload":\#(String(decoding: entry.payload, as: UTF8.self))"#)
        return "{" + fields.joined(separator: ",") + "}"
    }

    /// An activity as a device holds it; tokens in full (the simulator's own, for tests).
    static func json(for activity: SimulatorLiveActivity) -> String {
        var fields = [
            #""start_token":\#(quote(activity.startToken))"#, #""status":\#(quote(activity.status))"#,
            #""last_timestamp":\#(activity.lastTimestamp)"#, #""applied":\#(activity.applied)"#,
            #""last_priority":\#(activity.lastPriority)"#,
            #""alerts":[\#(activity.alerts.map(quote).joined(separator: ","))]"#,
        ]
        if let token = activity.updateToken { fields.append(#""update_token":\#(quote(token))"#) }
        if let type = activity.attributesType { fields.append(#""attributes_type":\#(quote(type))"#) }
        if let state = activity.contentState { fields.append(#""content_state":\#(state)"#) }
        if let stale = activity.staleDate { fields.append(#""stale_date":\#(stale)"#) }
        if let dismissal = activity.dismissalDate { fields.append(#""dismissal_date":\#(dismissal)"#) }
        if let channel = activity.channel { fields.append(#""channel":\#(quote(channel))"#) }
        return "{" + fields.joined(separator: ",") + "}"
    }

    static func json(for counters: SimulatorCounters) -> String {
        let statuses = counters.byStatus.sorted { $0.key < $1.key }.map { #""\#($0.key)":\#($0.value)"# }
        let reasons = counters.byReason.sorted { $0.key < $1.key }.map { #"\#(quote($0.key)):\#($0.value)"# }
        return
            #"{"requests":\#(counters.requests),"accepted":\#(counters.accepted),"by_status":{\#(statuses.joined(separator: ","))},"by_reason":{\#(reasons.joined(separator: ","))},"connections":\#(counters.connections),"goaways":\#(counters.goAways),"signature_verifications":\#(counters.signatureVerifications),"token_changes":\#(counters.tokenChanges),"refused_streams":\#(counters.refusedStreams),"fcm_token_exchanges":\#(counters.fcmTokenExchanges),"fcm_requests":\#(counters.fcmRequests)}"#
    }

    static func encode(_ faults: SimulatorFaults) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return (try? encoder.encode(faults)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }

    static func quote(_ text: String) -> String {
        let data = try? JSONSerialization.data(withJSONObject: [text], options: [.fragmentsAllowed])
        guard let data else { return "\"\"" }
        return String(String(decoding: data, as: UTF8.self).dropFirst().dropLast())
    }
}
