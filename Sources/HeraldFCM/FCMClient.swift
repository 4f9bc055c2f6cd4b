package import Foundation
package import HeraldCore
import HeraldHTTP2
package import Logging
package import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// How an `FCMClient` runs.
package struct FCMClientConfiguration: Sendable {
    /// `https://fcm.googleapis.com` unless pointed at a simulator.
    package var endpoint: String = "https://fcm.googleapis.com"
    /// The OAuth2 token endpoint; the service account's `token_uri` when `nil`.
    package var tokenEndpoint: String?
    /// An extra CA to trust (the simulator's).
    package var caFile: String?
    /// Long-lived HTTP/2 connections to the send endpoint; each carries as many streams as the server allows.
    package var connections: Int = 2
    /// Per request (protocols.md: ≥ 10 s).
    package var requestTimeout: TimeInterval = 10
    package var connectTimeout: TimeInterval = 10
    /// Answers per message before giving up on retryable errors.
    package var maximumAttempts: Int = 4
    /// When set, retryable errors are also retried only until this many seconds after the send
    /// began (`herald send --retry-deadline`).
    package var retryDeadline: TimeInterval?
    /// Exponential backoff for `UNAVAILABLE`/`INTERNAL`/no answer: base·2ⁿ with jitter, capped.
    package var baseDelay: TimeInterval = 1
    package var maximumDelay: TimeInterval = 120
    /// Wait after `QUOTA_EXCEEDED` without `Retry-After` (Google: 60 s).
    package var quotaDelay: TimeInterval = 60
    /// The access token is renewed this long before it expires.
    package var tokenRefreshMargin: TimeInterval = 300
    /// After a failed token exchange, sends fail fast with the same error for this long instead of
    /// each trying the token endpoint again (an OAuth2 outage must not be hammered).
    package var tokenFailureCooldown: TimeInterval = 5

    package init() {}
}

/// Sends to FCM HTTP v1 (protocols.md §10–§13): a service account's RS256 assertion is exchanged
/// for an OAuth2 access token (cached, renewed before expiry, one exchange in flight at a time);
/// messages go one request per token over long-lived HTTP/2 connections; answers are classified
/// per protocols.md §12 and retried with backoff, honouring `Retry-After`. A project-wide `QUOTA_EXCEEDED`
/// pauses every send; a per-device one slows only that message.
package final class FCMClient: Sendable {
    package let account: FCMServiceAccount
    package let configuration: FCMClientConfiguration
    private let endpoint: FCMEndpoint
    private let tokenEndpoint: FCMEndpoint
    private let tokenPath: String
    private let sslContext: NIOSSLContext
    private let group: any EventLoopGroup
    /// Whether this client made its event loop (and shuts it down), or was lent a group.
    private let ownsGroup: Bool
    private let pool: FCMConnectionPool
    private let tokens: FCMAccessTokenCache
    private let clock: HeraldClock
    private let logger: Logger
    private let state = Mutex<(pausedUntil: Date?, disabledReason: String?, exchanges: Int, exchangeAttempts: Int)>(
        (nil, nil, 0, 0))
    /// Devices FCM said are over their own rate, until when (per-device `QUOTA_EXCEEDED`).
    private let devicePauses = Mutex<[String: Date]>([:])
    private let isShutDown = Atomic<Bool>(false)

    /// `eventLoopGroup`: loops shared with other clients (the server's provider loops; their
    /// owner shuts them down); without it the client runs on one loop of its own.
    package init(
        account: FCMServiceAccount, configuration: FCMClientConfiguration = FCMClientConfiguration(),
        clock: HeraldClock = .system, eventLoopGroup: (any EventLoopGroup)? = nil,
        logger: Logger = Logger(label: "herald.fcm")
    ) throws(FCMConfigurationError) {
        self.account = account
        self.configuration = configuration
        self.clock = clock
        self.logger = logger
        endpoint = try FCMEndpoint(url: configuration.endpoint)
        let tokenURL = configuration.tokenEndpoint ?? account.tokenURI
        tokenEndpoint = try FCMEndpoint(url: tokenURL)
        tokenPath = tokenEndpoint.path.isEmpty ? "/" : tokenEndpoint.path
        sslContext = try NIOSSLContext.fcm(caFile: configuration.caFile)
        group = eventLoopGroup ?? MultiThreadedEventLoopGroup(numberOfThreads: 1)
        ownsGroup = eventLoopGroup == nil
        pool = FCMConnectionPool(size: max(1, configuration.connections))
        tokens = FCMAccessTokenCache()
    }

    /// The event loops the connections run on (lent by the server, or this client's own).
    package var eventLoopGroup: any EventLoopGroup { group }

    /// Why sends fail fast, after a configuration error (bad credentials).
    package var disabledReason: String? { state.withLock { $0.disabledReason } }

    /// Lets messages through again after the credential was refused (the server's provider
    /// pause tries it again this way); the next send gets a new access token.
    package func enable() async {
        state.withLock { $0.disabledReason = nil }
        await tokens.invalidate()
    }
    /// OAuth2 exchanges made so far (tests check reuse).
    package var tokenExchanges: Int { state.withLock { $0.exchanges } }
    /// Until when every send waits after a project-wide `QUOTA_EXCEEDED`; `nil` when not paused.
    package var projectPausedUntil: Date? {
        let now = clock.now()
        return state.withLock { $0.pausedUntil }.flatMap { $0 > now ? $0 : nil }
    }
    /// Token exchanges started, answered or not.
    package var tokenExchangeAttempts: Int { state.withLock { $0.exchangeAttempts } }

    /// Closes the connections and event loops; a second call returns at once.
    package func shutdown() async {
        guard !isShutDown.exchange(true, ordering: .acquiringAndReleasing) else { return }
        await pool.closeAll()
        if ownsGroup { try? await group.shutdownGracefully() }
    }

    /// Sends many messages concurrently (every one is its own request); results in input order.
    package func send(_ messages: [FCMMessage], concurrency: Int = 1000) async -> [FCMResult] {
        await withTaskGroup(of: (Int, FCMResult).self) { group in
            var results = [FCMResult?](repeating: nil, count: messages.count)
            var next = 0
            func add() {
                guard next < messages.count else { return }
                let index = next
                next += 1
                group.addTask { (index, await self.send(messages[index])) }
            }
            for _ in 0..<min(concurrency, messages.count) { add() }
            while let (index, result) = await group.next() {
                results[index] = result
                add()
            }
            return results.map { $0! }
        }
    }

    /// Sends one message, retrying what protocols.md §12 says to retry.
    package func send(_ message: FCMMessage) async -> FCMResult {
        var latency: TimeInterval?
        func result(
            _ status: Int?, _ reason: String?, _ disposition: FCMDisposition, _ attempts: Int, name: String? = nil,
            retryAfter: TimeInterval? = nil
        ) -> FCMResult {
            FCMResult(
                token: message.token, status: status, reason: reason, disposition: disposition, attempts: attempts,
                messageName: name,
                retryAfter: retryAfter, latency: latency)
        }
        if let reason = disabledReason { return result(nil, reason, .configurationError, 0) }
        let body: Data
        do {
            body = try message.requestBody()
        } catch {
            return result(nil, "InvalidMessage", .badRequest, 0)
        }
        guard body.count <= FCMMessage.sizeLimit + 64 else { return result(nil, "MessageTooBig", .badRequest, 0) }
        if let key = message.data.keys.first(where: FCMMessage.isReservedDataKey) {
            return result(nil, "ReservedDataKey:\(key)", .badRequest, 0)
        }
        if let until = devicePauses.withLock({ $0[message.token] }), until > clock.now() {
            // This device is over its own rate: not even tried; the caller sends again later.
            return result(429, "QUOTA_EXCEEDED", .retryLater, 0, retryAfter: until.timeIntervalSince(clock.now()))
        }
        let path = endpoint.path + "/v1/projects/\(account.projectID)/messages:send"
        var attempts = 0
        let began = ContinuousClock.now
        /// Another try is allowed: under the attempt cap and, with a retry deadline, before it.
        func mayTryAgain() -> Bool {
            attempts < configuration.maximumAttempts
                && (configuration.retryDeadline.map { (ContinuousClock.now - began).seconds < $0 } ?? true)
        }
        var refreshedForAuth = false
        var lastReason: String?
        var lastStatus: Int?
        var lastRetryAfter: TimeInterval?
        while mayTryAgain() {
            if let pause = state.withLock({ $0.pausedUntil }), pause > clock.now() {
                try? await Task.sleep(for: .seconds(pause.timeIntervalSince(clock.now())))
            }
            let accessToken: String
            do {
                accessToken = try await self.accessToken()
            } catch let error as FCMSendError {
                if error.disposition == .configurationError { disable(error.reason) }
                return result(error.status, error.reason, error.disposition, attempts)
            } catch {
                return result(nil, "TokenExchangeFailed", .retryLater, attempts)
            }
            let response: HTTP2Response
            do {
                let connection = try await pool.connection(using: connect)
                let sent = ContinuousClock.now
                defer { latency = (ContinuousClock.now - sent).seconds }
                response = try await connection.request(
                    path: path,
                    headers: [("authorization", "Bearer " + accessToken), ("content-type", "application/json")],
                    body: ByteBuffer(bytes: body), timeout: .nanoseconds(Int64(configuration.requestTimeout * 1e9)))
            } catch HTTP2RequestFailure.unanswered {
                // Never reached FCM: send again at once (bounded by the attempts).
                attempts += 1
                lastReason = "Unanswered"
                continue
            } catch {
                attempts += 1
                switch error as? HTTP2RequestFailure {
                case .timedOut?: lastReason = "Timeout"
                case .responseTooLarge?: lastReason = "ResponseTooLarge"
                default: lastReason = "ConnectFailed"
                }
                lastStatus = nil
                await backoff(attempts: attempts, retryAfter: nil)
                continue
            }
            attempts += 1
            if response.status == 200 {
                let name = response.body.flatMap { Self.messageName(in: $0) ?? Self.json($0)?["name"] as? String }
                return result(200, nil, .delivered, attempts, name: name)
            }
            let error = FCMErrorBody(response)
            lastStatus = response.status
            lastReason = error.errorCode ?? error.status ?? "HTTP\(response.status)"
            lastRetryAfter = Self.retryAfter(response.header("retry-after"))
            switch Self.classify(status: response.status, errorCode: error.errorCode, googleStatus: error.status) {
            case .delivered, .retryLater:
                if error.errorCode == "QUOTA_EXCEEDED" || response.status == 429 {
                    let wait = lastRetryAfter ?? configuration.quotaDelay
                    if error.isPerDevice {
                        // Only this device is over its rate: remember it, and hand the message
                        // back rather than hold up the others (protocols.md §12–§13).
                        let now = clock.now()
                        devicePauses.withLock { pauses in
                            pauses[message.token] = now.addingTimeInterval(wait)
                            Self.bound(&pauses, now: now)
                        }
                        return result(response.status, lastReason, .retryLater, attempts, retryAfter: wait)
                    }
                    // The project's quota: everything waits. Said once per pause, not per answer.
                    let now = clock.now()
                    let wasRunning = state.withLock { state -> Bool in
                        defer { state.pausedUntil = max(state.pausedUntil ?? now, now.addingTimeInterval(wait)) }
                        return (state.pausedUntil ?? .distantPast) <= now
                    }
                    if wasRunning {
                        logger.warning("FCM quota exceeded; pausing sends", metadata: ["fcm.wait_seconds": "\(wait)"])
                    }
                    // A long pause is the outbox's to wait, not this batch's.
                    guard mayTryAgain(), wait <= configuration.maximumDelay else {
                        return result(response.status, lastReason, .retryLater, attempts, retryAfter: wait)
                    }
                    try? await Task.sleep(for: .seconds(wait))
                } else if mayTryAgain() {
                    await backoff(attempts: attempts, retryAfter: lastRetryAfter)
                }
            case .tokenDead:
                return result(response.status, lastReason, .tokenDead, attempts)
            case .badRequest:
                return result(response.status, lastReason, .badRequest, attempts)
            case .configurationError:
                if response.status == 401, error.errorCode == nil, !refreshedForAuth {
                    // An expired or revoked access token: get a new one once.
                    refreshedForAuth = true
                    await tokens.invalidate()
                    continue
                }
                if !Self.perTokenAuthErrors.contains(error.errorCode ?? "") {
                    disable(lastReason ?? "UNAUTHENTICATED")
                }
                return result(response.status, lastReason, .configurationError, attempts)
            }
        }
        return result(lastStatus, lastReason, .retryLater, attempts, retryAfter: lastRetryAfter)
    }

    /// protocols.md §12's table.
    static func classify(status: Int, errorCode: String?, googleStatus: String?) -> FCMDisposition {
        switch errorCode {
        case "UNREGISTERED", "SENDER_ID_MISMATCH": return .tokenDead
        case "INVALID_ARGUMENT", "UNSPECIFIED_ERROR": return .badRequest
        case "THIRD_PARTY_AUTH_ERROR", "APNS_AUTH_ERROR": return .configurationError
        case "QUOTA_EXCEEDED", "UNAVAILABLE", "INTERNAL": return .retryLater
        default: break
        }
        switch status {
        case 200: return .delivered
        case 401, 403: return .configurationError
        case 404: return .tokenDead
        case 429, 500...599: return .retryLater
        default: return .badRequest
        }
    }

    private func disable(_ reason: String) {
        let first = state.withLock { state -> Bool in
            defer { state.disabledReason = reason }
            return state.disabledReason == nil
        }
        if first {
            logger.critical(
                "FCM credentials refused; FCM sends are disabled until the configuration is fixed",
                metadata: [
                    "fcm.reason": "\(reason)", "fcm.project": "\(account.projectID)",
                    "fcm.client_email": "\(account.clientEmail)",
                ])
        }
    }

    /// Auth errors that can be one token's (a web push or iOS token of an app whose APNs
    /// credential FCM holds): they do not disable the client; the caller judges them in bulk.
    package static let perTokenAuthErrors: Set<String> = ["THIRD_PARTY_AUTH_ERROR", "APNS_AUTH_ERROR"]

    /// The longest `Retry-After` believed: an hour. Larger, negative or non-numeric values
    /// (`inf`, `nan`, `1e300`) from a proxy or a wrong endpoint are clamped or ignored.
    static let maximumRetryAfter: TimeInterval = 3600
    /// The most devices remembered as over their rate at once.
    package static let maximumDevicePauses = 10_000

    /// `Retry-After` in seconds, within 0…``maximumRetryAfter``; `nil` when absent or not a number.
    package static func retryAfter(_ header: String?) -> TimeInterval? {
        guard let header, let seconds = TimeInterval(header.trimmingCharacters(in: .whitespaces)), seconds.isFinite
        else {
            return nil
        }
        return min(max(seconds, 0), maximumRetryAfter)
    }

    /// Keeps the per-device pause map within ``maximumDevicePauses``: expired entries go first,
    /// then those that end soonest.
    package static func bound(_ pauses: inout [String: Date], now: Date) {
        guard pauses.count > maximumDevicePauses else { return }
        pauses = pauses.filter { $0.value > now }
        guard pauses.count > maximumDevicePauses else { return }
        let keep = pauses.sorted { $0.value > $1.value }.prefix(maximumDevicePauses / 2)
        pauses = Dictionary(uniqueKeysWithValues: keep.map { ($0.key, $0.value) })
    }

    private func backoff(attempts: Int, retryAfter: TimeInterval?) async {
        // Under a retry deadline no wait is longer than an eighth of it (as for APNs): several tries fit.
        let cap = min(configuration.maximumDelay, configuration.retryDeadline.map { $0 / 8 } ?? .infinity)
        let exponential = min(cap, configuration.baseDelay * pow(2, Double(attempts - 1)))
        let delay = retryAfter ?? (exponential / 2 + Double.random(in: 0...(exponential / 2)))
        try? await Task.sleep(for: .seconds(delay))
    }

    private func connect() async throws -> FCMConnection {
        try await FCMConnection.connect(
            to: endpoint, sslContext: sslContext, eventLoop: group.next(),
            timeout: .nanoseconds(Int64(configuration.connectTimeout * 1e9)))
    }

    // MARK: OAuth2

    /// A valid access token: the cached one, or a new exchange (one at a time).
    func accessToken() async throws -> String {
        try await tokens.token(
            now: clock.now(), margin: configuration.tokenRefreshMargin, cooldown: configuration.tokenFailureCooldown
        ) { [self] in
            try await exchange()
        }
    }

    private func exchange() async throws -> (String, Date) {
        let now = clock.now()
        state.withLock { $0.exchangeAttempts += 1 }
        let assertion = try account.assertion(at: now)
        let form = "grant_type=" + "urn:ietf:params:oauth:grant-type:jwt-bearer".formEncoded + "&assertion=" + assertion
        let connection = try await FCMConnection.connect(
            to: tokenEndpoint, sslContext: sslContext, eventLoop: group.next(),
            timeout: .nanoseconds(Int64(configuration.connectTimeout * 1e9)))
        defer { connection.close() }
        let response = try await connection.request(
            path: tokenPath, headers: [("content-type", "application/x-www-form-urlencoded")],
            body: ByteBuffer(string: form), timeout: .nanoseconds(Int64(configuration.requestTimeout * 1e9)))
        state.withLock { $0.exchanges += 1 }
        let object = response.body.flatMap(Self.json) ?? [:]
        guard response.status == 200, let token = object["access_token"] as? String else {
            let reason = (object["error"] as? String) ?? "HTTP\(response.status)"
            // 4xx from the token endpoint: the service account is wrong (invalid_grant, unauthorized_client…).
            let disposition: FCMDisposition = (400..<500).contains(response.status) ? .configurationError : .retryLater
            throw FCMSendError(status: response.status, reason: "OAuth2:" + reason, disposition: disposition)
        }
        let lifetime = (object["expires_in"] as? NSNumber)?.doubleValue ?? 3600
        logger.debug("FCM access token obtained", metadata: ["fcm.expires_in": "\(Int(lifetime))"])
        return (token, now.addingTimeInterval(lifetime))
    }

    /// The `name` of a success answer (`{"name": "projects/p/messages/0:123…"}`) found by a scan of
    /// the bytes; `nil` when the answer does not look like that (the caller then parses it).
    static func messageName(in buffer: ByteBuffer) -> String? {
        let bytes = buffer.readableBytesView
        // `"name"` is near the start of the answer; a plain scan (the generic `firstRange(of:)` was 7% of a send).
        let key: [UInt8] = Array(#""name""#.utf8)
        var index = bytes.startIndex
        var found = false
        while index + key.count <= bytes.endIndex {
            if bytes[index] == key[0], bytes[index + 1] == key[1], bytes[index + 2] == key[2],
                bytes[index + 3] == key[3],
                bytes[index + 4] == key[4], bytes[index + 5] == key[5]
            {
                found = true
                break
            }
            index += 1
        }
        guard found else { return nil }
        index += key.count
        func skipSpace() {
            while index < bytes.endIndex, [0x20, 0x0A, 0x0D, 0x09].contains(bytes[index]) { index += 1 }
        }
        skipSpace()
        guard index < bytes.endIndex, bytes[index] == UInt8(ascii: ":") else { return nil }
        index += 1
        skipSpace()
        guard index < bytes.endIndex, bytes[index] == UInt8(ascii: "\"") else { return nil }
        let start = index + 1
        guard let end = bytes[start...].firstIndex(where: { $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }),
            bytes[end] == UInt8(ascii: "\"")
        else { return nil }
        return String(decoding: bytes[start..<end], as: UTF8.self)
    }

    static func json(_ buffer: ByteBuffer) -> [String: Any]? {
        (try? JSONSerialization.jsonObject(with: Data(buffer.readableBytesView))) as? [String: Any]
    }
}
