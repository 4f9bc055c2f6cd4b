package import Crypto
package import Foundation
import HeraldCore
import HeraldWebPush
import NIOHPACK
import Synchronization

/// The simulator's Web Push service: subscriptions it hands out (a P-256 key pair and an auth
/// secret each, as a browser makes them), and what a push service does with a message — VAPID
/// checked (signature, `aud` = this origin, `exp` within 24 hours, `sub`, the key the
/// subscription was made with), the body decrypted with RFC 8291 — before the plaintext goes
/// to the same inbox as APNs and FCM, under the subscription's id.
package final class SimulatorWebPush: Sendable {
    /// One subscription: what the browser keeps.
    package struct Subscription: Sendable {
        package var id: String
        package var endpoint: String
        package var privateKey: P256.KeyAgreement.PrivateKey
        package var auth: Data
        /// The `applicationServerKey` it was made with, when one was given: VAPID must use it.
        package var applicationServerKey: Data?

        /// `{"endpoint", "keys": {"p256dh", "auth"}}`, as `PushSubscription.toJSON()` gives it.
        package var json: String {
            let p256dh = Base64URL.encode(privateKey.publicKey.x963Representation)
            return
                #"{"id":"\#(id)","endpoint":"\#(endpoint)","keys":{"p256dh":"\#(p256dh)","auth":"\#(Base64URL.encode(auth))"}}"#
        }
    }

    private let subscriptions = Mutex<[String: Subscription]>([:])
    /// `https://host:port` of the simulator's TLS listener, once it listens.
    private let origin = Mutex<String>("")

    package init() {}

    func setOrigin(_ url: String) { origin.withLock { $0 = url } }

    /// A new subscription (optionally bound to an application server key, base64url).
    package func subscribe(applicationServerKey: Data? = nil) -> Subscription {
        var bytes = [UInt8](repeating: 0, count: 16)
        for index in bytes.indices { bytes[index] = UInt8.random(in: 0...255) }
        let id = bytes.map { String(format: "%02x", $0) }.joined()
        let subscription = Subscription(
            id: id, endpoint: origin.withLock { $0 } + "/push/" + id, privateKey: P256.KeyAgreement.PrivateKey(),
            auth: Data((0..<16).map { _ in UInt8.random(in: 0...255) }), applicationServerKey: applicationServerKey)
        subscriptions.withLock { $0[id] = subscription }
        return subscription
    }

    package func subscription(_ id: String) -> Subscription? { subscriptions.withLock { $0[id] } }

    static func handles(path: String) -> Bool { path.hasPrefix("/push/") }

    /// What the push service answers a `POST /push/{id}`: 201 with a Location, or the status a
    /// push service gives (400 headers, 401/403 VAPID, 404/410 gone, 413 too large, 429 with
    /// Retry-After when scripted or over the fault rate).
    func evaluate(headers: HPACKHeaders, body: Data, state: SimulatorState, now: Date) -> FCMAnswer {
        let path = headers.first(name: ":path") ?? ""
        guard headers.first(name: ":method") == "POST" else {
            return FCMAnswer(status: 405, body: #"{"reason":"MethodNotAllowed"}"#, reason: "MethodNotAllowed")
        }
        let id = String(path.dropFirst("/push/".count).prefix { $0 != "?" }).lowercased()
        guard let subscription = subscription(id) else {
            return FCMAnswer(status: 404, body: #"{"reason":"NoSuchSubscription"}"#, reason: "NoSuchSubscription")
        }
        if let dead = state.deadEntry(for: id) {
            return FCMAnswer(status: 410, body: #"{"reason":"\#(dead.reason)"}"#, reason: dead.reason)
        }
        if let scripted = state.scripted(for: id) {
            return FCMAnswer(
                status: scripted.status, headers: scripted.retryAfter.map { [("retry-after", $0)] } ?? [],
                body: #"{"reason":"\#(scripted.reason)"}"#, reason: scripted.reason)
        }
        guard let ttlText = headers.first(name: "ttl"), let ttl = Int(ttlText), ttl >= 0 else {
            return FCMAnswer(status: 400, body: #"{"reason":"MissingTTL"}"#, reason: "MissingTTL")
        }
        guard headers.first(name: "content-encoding")?.lowercased() == "aes128gcm" else {
            return FCMAnswer(status: 415, body: #"{"reason":"UnsupportedEncoding"}"#, reason: "UnsupportedEncoding")
        }
        if let urgency = headers.first(name: "urgency"), !["very-low", "low", "normal", "high"].contains(urgency) {
            return FCMAnswer(status: 400, body: #"{"reason":"BadUrgency"}"#, reason: "BadUrgency")
        }
        let topic = headers.first(name: "topic")
        if let topic,
            topic.count > 32
                || !topic.unicodeScalars.allSatisfy({
                    CharacterSet.alphanumerics.contains($0) && $0.isASCII || $0 == "-" || $0 == "_"
                })
        {
            return FCMAnswer(status: 400, body: #"{"reason":"BadTopic"}"#, reason: "BadTopic")
        }
        let audience = "https://" + (headers.first(name: ":authority") ?? "")
        do {
            _ = try VAPID.verify(
                headers.first(name: "authorization"), audience: audience,
                now: Int64(now.timeIntervalSince1970.rounded(.down)), expectedKey: subscription.applicationServerKey)
        } catch {
            let status = error == .missing ? 401 : 403
            return FCMAnswer(
                status: status, body: #"{"reason":"BadJwtToken","detail":"\#(error)"}"#, reason: "BadJwtToken")
        }
        guard body.count <= 4_096 else {
            return FCMAnswer(status: 413, body: #"{"reason":"PayloadTooLarge"}"#, reason: "PayloadTooLarge")
        }
        let plaintext: Data
        do {
            plaintext = try WebPushEncryption.decrypt(
                body, privateKey: subscription.privateKey, auth: subscription.auth)
        } catch {
            return FCMAnswer(status: 400, body: #"{"reason":"DecryptionFailed"}"#, reason: "DecryptionFailed")
        }
        let urgency = headers.first(name: "urgency") ?? "normal"
        state.accept(
            SimulatorInboxEntry(
                deviceToken: id, apnsID: UUID().uuidString, pushType: "webpush", topic: topic ?? "",
                priority: urgency == "high" ? 10 : urgency == "normal" ? 5 : 1, expiration: ttl, collapseID: topic,
                payload: plaintext, receivedAt: now, replaceKey: topic))
        return FCMAnswer(
            status: 201,
            headers: [("location", "\(audience)/message/\(UUID().uuidString.lowercased())"), ("ttl", "\(ttl)")],
            body: "")
    }
}
