package import Crypto
package import Foundation
package import HeraldCore
package import _CryptoExtras

/// A signing key the simulator trusts: the public half of a `.p8` key with its ids.
package struct SimulatorKey: Sendable {
    package var keyID: String
    package var teamID: String
    package var publicKey: P256.Signing.PublicKey

    package init(keyID: String, teamID: String, publicKey: P256.Signing.PublicKey) {
        self.keyID = keyID
        self.teamID = teamID
        self.publicKey = publicKey
    }
}

/// A Google service account the simulator's FCM token endpoint trusts.
package struct SimulatorFCMAccount: Sendable {
    package var projectID: String
    package var clientEmail: String
    package var publicKey: _RSA.Signing.PublicKey

    package init(projectID: String, clientEmail: String, publicKey: _RSA.Signing.PublicKey) {
        self.projectID = projectID
        self.clientEmail = clientEmail
        self.publicKey = publicKey
    }

    /// The account a Google service-account key file describes (`project_id`, `client_email` and
    /// the public half of `private_key`). The private key is used for nothing else.
    package init(serviceAccountFile path: String) throws(SimulatorConfigurationError) {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw SimulatorConfigurationError("cannot read the service account file \(path)")
        }
        guard let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] else {
            throw SimulatorConfigurationError("\(path) is not a JSON object")
        }
        func field(_ name: String) throws(SimulatorConfigurationError) -> String {
            guard let value = object[name] as? String, !value.isEmpty else {
                throw SimulatorConfigurationError("\(path): `\(name)` is missing")
            }
            return value
        }
        let pem = try field("private_key")
        guard let key = try? _RSA.Signing.PrivateKey(pemRepresentation: pem) else {
            throw SimulatorConfigurationError("\(path): `private_key` is not an RSA private key in PEM")
        }
        self.init(projectID: try field("project_id"), clientEmail: try field("client_email"), publicKey: key.publicKey)
    }

    /// The simulator's demo service account: `demo-service-account.json` in `directory`, made once
    /// (RSA 2048, project `herald-demo`) and kept, with its `token_uri` rewritten to `tokenURI` so
    /// the file works as it is with `herald send --fcm --service-account`.
    package static func demo(
        in directory: String, tokenURI: String
    ) throws -> (account: SimulatorFCMAccount, file: String) {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let path = directory + "/demo-service-account.json"
        var object =
            FileManager.default.contents(atPath: path)
            .flatMap { (try? JSONSerialization.jsonObject(with: $0)) as? [String: Any] } ?? [:]
        let existing = (object["private_key"] as? String).flatMap {
            try? _RSA.Signing.PrivateKey(pemRepresentation: $0)
        }
        let key = try existing ?? _RSA.Signing.PrivateKey(keySize: .bits2048)
        if existing == nil || object["token_uri"] as? String != tokenURI {
            object = [
                "type": "service_account", "project_id": "herald-demo", "private_key_id": "demo0000000000000000",
                "private_key": key.pemRepresentation, "client_email": "herald-demo@herald-demo.iam.gserviceaccount.com",
                "client_id": "000000000000000000000", "token_uri": tokenURI,
            ]
            let data = try JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys])
            try SecretFile.write(data, to: path)
        }
        return (try SimulatorFCMAccount(serviceAccountFile: path), path)
    }
}

/// A simulator option that cannot be used (an unreadable or malformed key file).
package struct SimulatorConfigurationError: Error, Sendable, CustomStringConvertible {
    package var message: String
    package init(_ message: String) { self.message = message }
    package var description: String { message }
}

/// Faults the simulator injects; changeable while it runs (`PUT /faults`).
package struct SimulatorFaults: Sendable, Hashable, Codable {
    /// Fraction of valid requests answered 500 `InternalServerError`.
    package var internalServerErrorRate: Double = 0
    /// Fraction answered 503 `ServiceUnavailable`.
    package var serviceUnavailableRate: Double = 0
    /// Fraction answered 429 `TooManyRequests`.
    package var tooManyRequestsRate: Double = 0
    /// Added to every answer, in milliseconds.
    package var latencyMilliseconds: Int = 0
    /// After this many streams on one connection the simulator sends GOAWAY (`Shutdown`) and closes it.
    package var goAwayAfterStreams: Int?
    /// `SETTINGS_MAX_CONCURRENT_STREAMS` advertised once a connection has sent a valid JWT.
    package var maximumConcurrentStreams: Int = 1000
    /// Tokens whose requests are never answered (to test deadlines).
    package var hangTokens: Set<String> = []

    package init() {}

    enum CodingKeys: String, CodingKey {
        case internalServerErrorRate = "fail_500"
        case serviceUnavailableRate = "fail_503"
        case tooManyRequestsRate = "fail_429"
        case latencyMilliseconds = "latency_ms"
        case goAwayAfterStreams = "goaway_after_streams"
        case maximumConcurrentStreams = "max_concurrent_streams"
        case hangTokens = "hang_tokens"
    }

    package init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        let defaults = SimulatorFaults()
        internalServerErrorRate =
            try container.decodeIfPresent(Double.self, forKey: .internalServerErrorRate)
            ?? defaults.internalServerErrorRate
        serviceUnavailableRate =
            try container.decodeIfPresent(Double.self, forKey: .serviceUnavailableRate)
            ?? defaults.serviceUnavailableRate
        tooManyRequestsRate =
            try container.decodeIfPresent(Double.self, forKey: .tooManyRequestsRate) ?? defaults.tooManyRequestsRate
        latencyMilliseconds = try container.decodeIfPresent(Int.self, forKey: .latencyMilliseconds) ?? 0
        goAwayAfterStreams = try container.decodeIfPresent(Int.self, forKey: .goAwayAfterStreams)
        maximumConcurrentStreams =
            try container.decodeIfPresent(Int.self, forKey: .maximumConcurrentStreams)
            ?? defaults.maximumConcurrentStreams
        hangTokens = try container.decodeIfPresent(Set<String>.self, forKey: .hangTokens) ?? []
    }
}

/// How an `APNSSimulator` runs.
package struct SimulatorConfiguration: Sendable {
    /// Address to bind; loopback by default.
    package var host: String = "127.0.0.1"
    /// The APNs (HTTP/2 + TLS) port; 0 picks a free one.
    package var port: Int = 0
    /// The control API (HTTP/1.1, JSON: inbox, faults, counters) port; 0 picks a free one, `nil` disables it.
    package var controlPort: Int? = 0
    /// Where the CA and server certificate live (`sim-ca.pem` is the file clients trust).
    package var tlsDirectory: String
    /// Keys whose provider tokens are accepted.
    package var keys: [SimulatorKey] = []
    /// Service accounts whose FCM assertions the token endpoint (`POST /token`) accepts.
    package var fcmAccounts: [SimulatorFCMAccount] = []
    /// Lifetime of the FCM access tokens it issues (`expires_in`).
    package var fcmAccessTokenLifetime: TimeInterval = 3599
    /// FCM's per-device rate (protocols.md §13: 240 messages a minute to one Android device):
    /// more in a minute is 429 `QUOTA_EXCEEDED` with a `QuotaFailure` naming the device. 0 = off.
    package var fcmDeviceRateLimit: Int = 240
    /// Bundle ids the keys may push to; empty accepts any.
    package var bundleIDs: Set<String> = []
    /// `sandbox` adds `apns-unique-id` to answers, as Apple's sandbox does.
    package var isSandbox: Bool = true
    /// Provider tokens older than this are `ExpiredProviderToken` (Apple: one hour).
    package var tokenMaximumAge: TimeInterval = 3600
    /// A connection may change its provider token at most once per this interval (Apple: 20 minutes).
    package var tokenUpdateInterval: TimeInterval = 20 * 60
    /// Event loop threads.
    package var threads: Int = 1
    /// Inbox entries kept at most; past it, requests are still answered and counted, their
    /// notifications not kept.
    package var inboxLimit: Int = 2_000_000
    package var faults = SimulatorFaults()
    /// The clock JWT ages are measured with.
    package var clock: HeraldClock = .system

    package init(tlsDirectory: String) { self.tlsDirectory = tlsDirectory }
}
