import AsyncHTTPClient
package import Crypto
package import Foundation
package import HeraldCore
package import Logging
import NIOCore
import NIOHTTP1
import NIOSSL
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What a web push client needs: the VAPID key that signs (and older ones for subscriptions
/// made with them — Herald cannot tell which a subscription has, so it signs with the current
/// key), the contact, and where endpoints may be.
package struct WebPushClientConfiguration: Sendable {
    package var key: P256.Signing.PrivateKey
    /// Keys rotated out: a subscription made with one is signed with it.
    package var deprecatedKeys: [P256.Signing.PrivateKey] = []
    package var subject: String
    package var endpoints: WebPushEndpointPolicy
    /// PEM of a CA to trust beside the system's (a simulator's).
    package var caFile: String?
    /// Requests in flight at once.
    package var concurrency = 64
    /// Seconds a request may take, connection included.
    package var timeout: TimeInterval = 30

    package init(key: P256.Signing.PrivateKey, subject: String, endpoints: WebPushEndpointPolicy, caFile: String?) {
        self.key = key
        self.subject = subject
        self.endpoints = endpoints
        self.caFile = caFile
    }
}

/// Sends web push messages: each encrypted for its subscription (RFC 8291), signed with VAPID
/// (one JWT per push service origin, renewed an hour before it expires), POSTed to the endpoint
/// with `TTL`, `Urgency` and `Topic`; redirects are never followed and an endpoint whose host
/// is not allowed, or resolves to a non-public address, is not called.
package final class WebPushClient: Sendable {
    /// What became of one message.
    package struct Result: Sendable, Equatable {
        package var status: Int
        package var reason: String?
        package var retryAfter: TimeInterval?
        package var latency: Double?
    }

    private let configuration: WebPushClientConfiguration
    private let http: HTTPClient
    private let logger: Logger
    /// Signed headers per audience, with their expiry.
    private let headers = Mutex<[String: (value: String, expires: Int64)]>([:])
    /// Resolutions per host, with when they were made.
    private let resolved = Mutex<[String: (problem: String?, at: Date)]>([:])
    /// Cleared by a refused key until `enable`.
    private let paused = Atomic<Bool>(false)

    package init(configuration: WebPushClientConfiguration, logger: Logger) throws {
        self.configuration = configuration
        self.logger = logger
        var tls = TLSConfiguration.makeClientConfiguration()
        if let caFile = configuration.caFile {
            tls.additionalTrustRoots = [.file(caFile)]
        }
        var client = HTTPClient.Configuration(
            tlsConfiguration: tls, redirectConfiguration: .disallow,
            timeout: .init(
                connect: .seconds(Int64(min(configuration.timeout, 10))),
                read: .seconds(Int64(configuration.timeout))))
        client.httpVersion = .automatic
        http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: client)
    }

    package func enable() { paused.store(false, ordering: .relaxed) }

    package func shutdown() async {
        try? await http.shutdown()
    }

    /// Sends every message (up to `concurrency` at once), answering in the order given.
    package func send(_ messages: [WebPushMessage]) async -> [Result] {
        var results = [Result](repeating: Result(status: 0), count: messages.count)
        await withTaskGroup(of: (Int, Result).self) { group in
            var next = 0
            func add() {
                guard next < messages.count else { return }
                let index = next
                next += 1
                group.addTask { (index, await self.send(messages[index])) }
            }
            for _ in 0..<min(configuration.concurrency, messages.count) { add() }
            for await (index, result) in group {
                results[index] = result
                add()
            }
        }
        return results
    }

    private func send(_ message: WebPushMessage) async -> Result {
        guard !paused.load(ordering: .relaxed) else { return Result(status: 0, reason: "WebPushPaused") }
        guard let subscription = WebPushSubscription(token: message.token) else {
            return Result(status: 0, reason: "BadSubscription")
        }
        if let problem = configuration.endpoints.problem(subscription.endpoint) {
            logger.warning("web push endpoint refused", metadata: ["webpush.reason": "\(problem)"])
            return Result(status: 0, reason: "EndpointNotAllowed")
        }
        guard let audience = VAPID.audience(of: subscription.endpoint),
            let host = URLComponents(string: subscription.endpoint)?.host
        else { return Result(status: 0, reason: "EndpointNotAllowed") }
        if let problem = await addressProblem(host: host) {
            logger.warning("web push endpoint refused", metadata: ["webpush.reason": "\(problem)"])
            return Result(status: 0, reason: "EndpointNotAllowed")
        }
        let body: Data
        do {
            body = try WebPushEncryption.encrypt(message.payload, p256dh: subscription.p256dh, auth: subscription.auth)
        } catch .plaintextTooLarge {
            return Result(status: 0, reason: "PayloadTooLarge")
        } catch {
            return Result(status: 0, reason: "BadSubscription")
        }
        guard let signer = signingKey(for: subscription) else { return Result(status: 0, reason: "VAPIDKeyUnknown") }
        guard let authorization = authorization(audience: audience, key: signer) else {
            return Result(status: 0, reason: "VAPIDSigningFailed")
        }
        var request = HTTPClientRequest(url: subscription.endpoint)
        request.method = .POST
        request.headers.add(name: "TTL", value: String(max(0, message.ttl)))
        request.headers.add(name: "Content-Encoding", value: "aes128gcm")
        request.headers.add(name: "Content-Type", value: "application/octet-stream")
        request.headers.add(name: "Urgency", value: message.urgency)
        if let topic = Self.topic(message.topic) { request.headers.add(name: "Topic", value: topic) }
        request.headers.add(name: "Authorization", value: authorization)
        request.body = .bytes(ByteBuffer(bytes: body))
        let started = ContinuousClock.now
        do {
            let response = try await http.execute(request, timeout: .seconds(Int64(configuration.timeout)))
            let text = try? await response.body.collect(upTo: 16_384)
            let latency = Self.seconds(ContinuousClock.now - started)
            let status = Int(response.status.code)
            let retryAfter = response.headers.first(name: "retry-after").flatMap(Self.retryAfter)
            if (200..<300).contains(status) {
                return Result(status: status, reason: nil, retryAfter: nil, latency: latency)
            }
            let reason = text.flatMap { Self.reason(Data($0.readableBytesView)) } ?? "HTTP \(status)"
            if status == 400 || status == 401 || status == 403 { paused.store(true, ordering: .relaxed) }
            return Result(status: status, reason: reason, retryAfter: retryAfter, latency: latency)
        } catch {
            return Result(status: 0, reason: "Unreachable", latency: Self.seconds(ContinuousClock.now - started))
        }
    }

    /// The key a subscription was made with: the one whose public half it names (the current
    /// key or a deprecated one), else the current key; nil when it names a key the app lacks.
    private func signingKey(for subscription: WebPushSubscription) -> P256.Signing.PrivateKey? {
        guard let wanted = subscription.applicationServerKey else { return configuration.key }
        return ([configuration.key] + configuration.deprecatedKeys).first { $0.publicKey.x963Representation == wanted }
    }

    /// The VAPID header for `audience` and `key`, signed once and reused until an hour before it expires.
    private func authorization(audience: String, key: P256.Signing.PrivateKey) -> String? {
        let now = Int64(Date().timeIntervalSince1970)
        let cacheKey = audience + " " + VAPID.publicKeyText(key.publicKey)
        if let cached = headers.withLock({ $0[cacheKey] }), cached.expires - 3_600 > now { return cached.value }
        let expires = now + 12 * 3_600
        guard
            let value = try? VAPID.authorization(
                key: key, audience: audience, subject: configuration.subject, expiration: expires)
        else { return nil }
        headers.withLock { $0[cacheKey] = (value, expires) }
        return value
    }

    /// Why `host`'s addresses may not be called (kept for five minutes per host), or nil.
    private func addressProblem(host: String) async -> String? {
        if let cached = resolved.withLock({ $0[host] }), Date().timeIntervalSince(cached.at) < 300 {
            return cached.problem
        }
        let endpoints = configuration.endpoints
        let problem = await Task.detached {
            endpoints.resolvedProblem(host: host, addresses: Self.addresses(of: host))
        }.value
        resolved.withLock { $0[host] = (problem, Date()) }
        return problem
    }

    /// The addresses `host` resolves to (getaddrinfo), as text.
    static func addresses(of host: String) -> [String] {
        if IPAddressRange.parse(host) != nil { return [host] }
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, nil, &hints, &list) == 0, let first = list else { return [] }
        defer { freeaddrinfo(first) }
        var addresses: [String] = []
        var cursor: UnsafeMutablePointer<addrinfo>? = first
        while let entry = cursor {
            var buffer = [CChar](repeating: 0, count: Int(NI_MAXHOST))
            if let address = entry.pointee.ai_addr,
                getnameinfo(
                    address, entry.pointee.ai_addrlen, &buffer, socklen_t(buffer.count), nil, 0, NI_NUMERICHOST) == 0
            {
                addresses.append(
                    String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
            }
            cursor = entry.pointee.ai_next
        }
        return addresses
    }

    /// A collapse identity as a `Topic`: kept when it is 1–32 URL-safe characters; a UUID
    /// without its hyphens (32 hex digits); anything else the first 24 bytes of its SHA-256 in
    /// base64url, so the same identity always gives the same topic.
    package static func topic(_ identity: String?) -> String? {
        guard let identity, !identity.isEmpty else { return nil }
        func safe(_ text: String) -> Bool {
            text.count <= 32
                && text.unicodeScalars.allSatisfy {
                    ($0.isASCII && CharacterSet.alphanumerics.contains($0)) || $0 == "-" || $0 == "_"
                }
        }
        if safe(identity) { return identity }
        if UUID(uuidString: identity) != nil { return identity.replacingOccurrences(of: "-", with: "") }
        return Base64URL.encode(Data(SHA256.hash(data: Data(identity.utf8))).prefix(24))
    }

    /// `Retry-After` as seconds (a number, or an HTTP date); nil for anything else.
    static func retryAfter(_ text: String) -> TimeInterval? {
        if let seconds = Int(text.trimmingCharacters(in: .whitespaces)), seconds >= 0 {
            return TimeInterval(min(seconds, 86_400))
        }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: text) else { return nil }
        return min(max(0, date.timeIntervalSinceNow), 86_400)
    }

    /// A push service's reason (`{"reason": …}` as Apple's, or Mozilla's `errno`/`message`).
    static func reason(_ body: Data) -> String? {
        guard let object = (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] else { return nil }
        if let reason = object["reason"] as? String, !reason.isEmpty { return String(reason.prefix(64)) }
        if let message = object["message"] as? String, !message.isEmpty { return String(message.prefix(64)) }
        return nil
    }

    private static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}

/// `PushProvider` over a `WebPushClient`: each answer in the dispatcher's terms — 2xx sent;
/// 404/410 the subscription is gone; 413 too large; 429 and 5xx retried (Retry-After
/// honoured); 400/401/403 a key problem that pauses the app's web push, losing nothing.
package struct WebPushProvider: PushProvider {
    package let client: WebPushClient

    package init(client: WebPushClient) { self.client = client }

    package var id: ObjectIdentifier { ObjectIdentifier(client) }

    package func send(
        _ batch: [ProviderRequest<WebPushMessage>], submitted: @escaping @Sendable () -> Void,
        answer: @escaping @Sendable (ProviderAnswer) -> Void
    ) async {
        submitted()
        guard !batch.isEmpty else { return }
        let results = await client.send(batch.map(\.message))
        for (request, result) in zip(batch, results) {
            answer(Self.answer(result, deliveryID: request.deliveryID))
        }
    }

    package func enable() async { client.enable() }

    package static func answer(_ result: WebPushClient.Result, deliveryID: Int64) -> ProviderAnswer {
        let disposition: DeliveryDisposition
        switch (result.status, result.reason) {
        case (200..<300, _): disposition = .delivered
        case (404, _), (410, _): disposition = .tokenDead(since: nil)
        case (413, _): disposition = .failed
        case (429, _), (500..<600, _): disposition = .retry(after: result.retryAfter)
        case (400, _), (401, _), (403, _), (0, "WebPushPaused"): disposition = .providerPaused
        case (0, "Unreachable"): disposition = .retry(after: nil)
        default: disposition = .failed
        }
        let attempts = result.status == 0 && result.reason != "Unreachable" ? 0 : 1
        return ProviderAnswer(
            deliveryID: deliveryID, disposition: disposition,
            reason: disposition == .delivered ? nil : result.reason ?? "HTTP \(result.status)", attempts: attempts,
            latency: result.latency)
    }
}
