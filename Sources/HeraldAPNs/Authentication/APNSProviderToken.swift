package import Crypto
package import Foundation
package import HeraldCore
import Synchronization

/// An APNs signing key: the `.p8` P-256 key with its key id and team id (protocols.md §6).
package struct APNSSigningKey: Sendable {
    package var keyID: String
    package var teamID: String
    package var privateKey: P256.Signing.PrivateKey

    package init(keyID: String, teamID: String, privateKey: P256.Signing.PrivateKey) {
        self.keyID = keyID
        self.teamID = teamID
        self.privateKey = privateKey
    }

    /// Reads a PKCS#8 (`BEGIN PRIVATE KEY`) or SEC1 PEM key, as Apple's `.p8` files are.
    package init(pem: String, keyID: String, teamID: String) throws(APNSConfigurationError) {
        do {
            privateKey = try P256.Signing.PrivateKey(pemRepresentation: pem)
        } catch {
            throw APNSConfigurationError(
                code: .invalidKey, message: "the key is not a P-256 private key in PEM form (an Apple .p8 file)")
        }
        guard !keyID.isEmpty else {
            throw APNSConfigurationError(code: .invalidKey, message: "the key id is empty")
        }
        guard !teamID.isEmpty else {
            throw APNSConfigurationError(code: .invalidKey, message: "the team id is empty")
        }
        self.keyID = keyID
        self.teamID = teamID
    }

    /// Reads the key from a `.p8` file.
    package init(file: String, keyID: String, teamID: String) throws(APNSConfigurationError) {
        let pem: String
        do {
            pem = try String(contentsOfFile: file, encoding: .utf8)
        } catch {
            throw APNSConfigurationError(code: .invalidKey, message: "cannot read the key file \(file)")
        }
        try self.init(pem: pem, keyID: keyID, teamID: teamID)
    }

    /// Signs a provider token issued at `issuedAt`: `{"alg":"ES256","kid"}` + `{"iss","iat"}`, R‖S signature.
    package func makeToken(issuedAt: Date) -> String {
        let header = #"{"alg":"ES256","kid":"\#(keyID)"}"#
        let claims = #"{"iss":"\#(teamID)","iat":\#(Int(issuedAt.timeIntervalSince1970))}"#
        let signingInput = Base64URL.encode(Data(header.utf8)) + "." + Base64URL.encode(Data(claims.utf8))
        // Signing P-256 over a few bytes cannot fail for a valid key.
        let signature = try! privateKey.signature(for: Data(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature.rawRepresentation)
    }
}

/// A provider token with its issue time and generation number.
package struct APNSProviderToken: Sendable, Hashable {
    package var value: String
    package var issuedAt: Date
    /// Counts regenerations; a connection compares generations, not strings.
    package var generation: Int
}

/// One provider token per key shared by every connection (protocols.md §6): reused for
/// `reuseInterval` (50 minutes), regenerated early only after `ExpiredProviderToken` on the
/// current generation, never more often than `minimumRegenerationInterval` (20 minutes).
package final class APNSProviderTokenManager: Sendable {
    package static let reuseInterval: TimeInterval = 50 * 60
    package static let minimumRegenerationInterval: TimeInterval = 20 * 60
    /// A token younger than this that APNs calls expired means the clocks disagree.
    package static let clockSkewSuspicionAge: TimeInterval = 60

    private let key: APNSSigningKey
    private let clock: HeraldClock
    private let state = Mutex<APNSProviderToken?>(nil)

    package init(key: APNSSigningKey, clock: HeraldClock) {
        self.key = key
        self.clock = clock
    }

    /// The token to send now, regenerated when it is 50 minutes old.
    package func current() -> APNSProviderToken {
        let now = clock.now()
        return state.withLock { token in
            if let existing = token, now.timeIntervalSince(existing.issuedAt) < Self.reuseInterval,
                now >= existing.issuedAt
            {
                return existing
            }
            let next = APNSProviderToken(
                value: key.makeToken(issuedAt: now), issuedAt: now, generation: (token?.generation ?? 0) + 1)
            token = next
            return next
        }
    }

    /// What to do after APNs answered `ExpiredProviderToken` to a request signed with `generation`.
    package enum ExpiredAnswer: Equatable {
        /// A new token was made (or already had been by another request): resend with it.
        case regenerated
        /// The token was fresh by our clock: the clocks disagree; resending cannot help.
        case clockSkew
    }

    /// Regenerates the token after `ExpiredProviderToken`, once per generation.
    package func tokenExpired(generation: Int) -> ExpiredAnswer {
        let now = clock.now()
        return state.withLock { token in
            guard let existing = token else { return .regenerated }
            if existing.generation != generation { return .regenerated }
            if now.timeIntervalSince(existing.issuedAt) < Self.clockSkewSuspicionAge { return .clockSkew }
            token = APNSProviderToken(
                value: key.makeToken(issuedAt: now), issuedAt: now, generation: existing.generation + 1)
            return .regenerated
        }
    }
}

/// A configuration problem found before anything was sent: a bad key, endpoint or CA file.
package struct APNSConfigurationError: Error, Sendable, CustomStringConvertible {
    package struct Code: Sendable, Hashable, RawRepresentable {
        package var rawValue: String
        package init(rawValue: String) { self.rawValue = rawValue }
        package static let invalidKey = Code(rawValue: "invalid_key")
        package static let invalidEndpoint = Code(rawValue: "invalid_endpoint")
        package static let invalidCAFile = Code(rawValue: "invalid_ca_file")
    }

    package var code: Code
    package var message: String

    package init(code: Code, message: String) {
        self.code = code
        self.message = message
    }

    package var description: String { message }
}
