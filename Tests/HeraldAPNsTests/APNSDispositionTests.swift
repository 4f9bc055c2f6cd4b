import Crypto
import Foundation
import HeraldAPNs
import HeraldCore
import Testing

@Suite("Reasons, retries and provider tokens (pure)")
struct APNSDispositionTests {
    /// Apple's table (protocols.md §5.1) with the one action each reason calls for.
    static let expected: [String: APNSDisposition] = [
        "BadCollapseId": .badRequest, "BadDeviceToken": .tokenDead, "BadExpirationDate": .badRequest,
        "BadMessageId": .badRequest, "BadPriority": .badRequest, "BadTopic": .configurationError,
        "DeviceTokenNotForTopic": .tokenDead, "DuplicateHeaders": .badRequest, "IdleTimeout": .resendOnNewConnection,
        "InvalidPushType": .badRequest, "MissingDeviceToken": .badRequest, "MissingTopic": .configurationError,
        "PayloadEmpty": .badRequest, "TopicDisallowed": .configurationError, "BadCertificate": .configurationError,
        "BadCertificateEnvironment": .configurationError, "ExpiredProviderToken": .resendOnNewConnection,
        "Forbidden": .badRequest, "InvalidProviderToken": .configurationError,
        "MissingProviderToken": .configurationError, "UnrelatedKeyIdInToken": .resendOnNewConnection,
        "BadEnvironmentKeyIdInToken": .configurationError, "BadPath": .badRequest, "MethodNotAllowed": .badRequest,
        "ExpiredToken": .tokenDead, "Unregistered": .tokenDead, "PayloadTooLarge": .badRequest,
        "TooManyProviderTokenUpdates": .resendOnNewConnection, "TooManyRequests": .retryTokenLater,
        "InternalServerError": .retryWithBackoff, "ServiceUnavailable": .retryWithBackoff,
        "Shutdown": .resendOnNewConnection,
    ]

    @Test("every documented reason maps to exactly the expected disposition")
    func documentedReasons() {
        #expect(APNSReason.documented.count == Self.expected.count)
        for (status, reason) in APNSReason.documented {
            #expect(APNSDisposition(status: status, reason: reason) == Self.expected[reason.rawValue], "\(reason)")
        }
        #expect(APNSDisposition(status: 200, reason: nil) == .delivered)
    }

    @Test("unknown reasons are kept and classified by status")
    func unknownReasons() {
        let reason = APNSReason("SomethingNew")
        #expect(reason.rawValue == "SomethingNew")
        #expect(APNSDisposition(status: 500, reason: reason) == .retryWithBackoff)
        #expect(APNSDisposition(status: 502, reason: nil) == .retryWithBackoff)
        #expect(APNSDisposition(status: 429, reason: reason) == .retryTokenLater)
        #expect(APNSDisposition(status: 410, reason: reason) == .tokenDead)
        #expect(APNSDisposition(status: 400, reason: reason) == .badRequest)
    }

    @Test("backoff doubles per attempt with jitter inside [step/2, step], capped")
    func backoff() {
        let policy = APNSRetryPolicy(
            maximumAttempts: 6, baseDelay: 1, maximumDelay: 8, tooManyRequestsDelay: 5, maximumResends: 3)
        #expect(policy.decide(after: .retryWithBackoff, attempt: 1, random: { 0 }) == .retry(after: 0.5))
        guard case .retry(let almostFull) = policy.decide(after: .retryWithBackoff, attempt: 1, random: { 0.999_999 })
        else {
            Issue.record("no retry")
            return
        }
        #expect(abs(almostFull - 0.9999995) < 1e-9)
        #expect(policy.decide(after: .retryWithBackoff, attempt: 3, random: { 0.5 }) == .retry(after: 3))
        #expect(policy.decide(after: .retryWithBackoff, attempt: 5, random: { 1 }) == .retry(after: 8))
        #expect(policy.decide(after: .retryTokenLater, attempt: 1, random: { 0 }) == .retry(after: 2.5))
        #expect(policy.decide(after: .retryTokenLater, attempt: 2, random: { 1 }) == .retry(after: 8))
        #expect(policy.decide(after: .resendOnNewConnection, attempt: 2, random: { 0.3 }) == .retry(after: 0))
        #expect(policy.decide(after: .retryWithBackoff, attempt: 6, random: { 0 }) == .giveUp)
        for final in [APNSDisposition.delivered, .tokenDead, .configurationError, .badRequest] {
            #expect(policy.decide(after: final, attempt: 1, random: { 0 }) == .giveUp)
        }
    }

    @Test("under a retry deadline a token answered 429 every time gets about 8 tries, not 5, before giving up")
    func retryDeadlineTries() {
        let policy = APNSRetryPolicy(maximumAttempts: .max, tooManyRequestsDelay: 5, retryDeadline: 60)
        var elapsed: TimeInterval = 0
        var attempt = 1
        var waits: [TimeInterval] = []
        while case .retry(let delay) = policy.decide(
            after: .retryTokenLater, attempt: attempt, elapsed: elapsed, random: { 1 })
        {
            waits.append(delay)
            elapsed += delay
            attempt += 1
        }
        #expect(attempt >= 9, "\(attempt) answers in \(elapsed) s: \(waits)")
        #expect(waits.allSatisfy { $0 <= 60 / APNSRetryPolicy.triesPerDeadline })
        #expect(elapsed <= 60)
    }

    @Test("retries under a mock clock: the schedule of a token that keeps failing")
    func retryScheduleUnderMockClock() {
        let clock = ManualClock()
        let start = clock.now
        let policy = APNSRetryPolicy(maximumAttempts: 4, baseDelay: 2, maximumDelay: 60, tooManyRequestsDelay: 5)
        var sendTimes: [TimeInterval] = [0]
        var attempt = 1
        while case .retry(let delay) = policy.decide(after: .retryWithBackoff, attempt: attempt, random: { 0.5 }) {
            clock.advance(by: delay)
            sendTimes.append(clock.now.timeIntervalSince(start))
            attempt += 1
        }
        // 2·0.75, then 4·0.75, then 8·0.75 after each previous send; the fourth answer is final.
        #expect(sendTimes == [0, 1.5, 4.5, 10.5])
    }

    @Test("one provider token is reused for 50 minutes, then regenerated")
    func tokenReuse() throws {
        let clock = ManualClock()
        let key = APNSSigningKey(keyID: "KEY1234567", teamID: "TEAM123456", privateKey: P256.Signing.PrivateKey())
        let manager = APNSProviderTokenManager(key: key, clock: clock.clock)
        let first = manager.current()
        clock.advance(by: 49 * 60)
        #expect(manager.current() == first)
        clock.advance(by: 60)
        let second = manager.current()
        #expect(second.generation == first.generation + 1)
        #expect(second.value != first.value)
        #expect(second.issuedAt == clock.now)
    }

    @Test("ExpiredProviderToken regenerates once per generation and spots a clock problem")
    func tokenExpiry() {
        let clock = ManualClock()
        let key = APNSSigningKey(keyID: "KEY1234567", teamID: "TEAM123456", privateKey: P256.Signing.PrivateKey())
        let manager = APNSProviderTokenManager(key: key, clock: clock.clock)
        let first = manager.current()
        clock.advance(by: 30 * 60)
        #expect(manager.tokenExpired(generation: first.generation) == .regenerated)
        let second = manager.current()
        #expect(second.generation == first.generation + 1)
        // A second request signed with the old token reports the same expiry: no new token.
        #expect(manager.tokenExpired(generation: first.generation) == .regenerated)
        #expect(manager.current() == second)
        // The fresh token called expired at once: the clocks disagree.
        #expect(manager.tokenExpired(generation: second.generation) == .clockSkew)
    }

    @Test("the provider token is ES256 over {alg,kid}.{iss,iat} and verifies with the public key")
    func tokenFormat() throws {
        let privateKey = P256.Signing.PrivateKey()
        let key = APNSSigningKey(keyID: "KEY1234567", teamID: "TEAM123456", privateKey: privateKey)
        let token = key.makeToken(issuedAt: Date(timeIntervalSince1970: 1_800_000_000))
        let parts = token.split(separator: ".")
        #expect(parts.count == 3)
        let header = try #require(Base64URL.decode(parts[0]))
        let claims = try #require(Base64URL.decode(parts[1]))
        #expect(String(decoding: header, as: UTF8.self) == #"{"alg":"ES256","kid":"KEY1234567"}"#)
        #expect(String(decoding: claims, as: UTF8.self) == #"{"iss":"TEAM123456","iat":1800000000}"#)
        let signature = try P256.Signing.ECDSASignature(rawRepresentation: try #require(Base64URL.decode(parts[2])))
        #expect(privateKey.publicKey.isValidSignature(signature, for: Data("\(parts[0]).\(parts[1])".utf8)))
    }

    @Test("a .p8 PEM key loads; garbage is a clear configuration error")
    func keyLoading() throws {
        let pem = P256.Signing.PrivateKey().pemRepresentation
        let key = try APNSSigningKey(pem: pem, keyID: "K", teamID: "T")
        #expect(key.keyID == "K")
        do {
            _ = try APNSSigningKey(pem: "not a key", keyID: "K", teamID: "T")
            Issue.record("garbage accepted")
        } catch {
            #expect(error.code == .invalidKey)
            #expect(!error.message.contains("not a key"))
        }
    }

    @Test("endpoints parse and default to 443")
    func endpoints() throws {
        #expect(try APNSEndpoint(url: "https://127.0.0.1:8443") == APNSEndpoint(host: "127.0.0.1", port: 8443))
        #expect(try APNSEndpoint(url: "https://api.push.apple.com") == .production)
        #expect(APNSEnvironment.sandbox.endpoint.host == "api.sandbox.push.apple.com")
        #expect(throws: APNSConfigurationError.self) { try APNSEndpoint(url: "http://x") }
    }
}
