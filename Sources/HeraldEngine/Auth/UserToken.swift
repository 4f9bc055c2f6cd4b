import Crypto
package import Foundation
import HeraldCore
import HeraldPayload

/// A user token: the proof, signed by the app's backend, that a client-key call speaks for one
/// user. A JWT (RFC 7519) signed with HS256 under the app's `user_token_secret`:
/// `{"alg":"HS256","typ":"JWT"}.{"sub":"<user id>","exp":<unix seconds>[,"iat":<unix seconds>]}`.
///
/// Only HS256 is accepted (never `none`, never another algorithm named by the header); `exp` is
/// required and may lie at most ``maximumLifetime`` ahead; `iat`, when present, may not lie in
/// the future. ``clockLeeway`` absorbs small clock differences with the backend.
package struct UserToken: Sendable, Equatable {
    /// The user id (`sub`).
    package var userID: String
    /// When the token stops being accepted (`exp`).
    package var expiresAt: Date
    /// When it was made (`iat`), when it says.
    package var issuedAt: Date?

    /// The longest a token may be valid for: 24 hours.
    package static let maximumLifetime: TimeInterval = 24 * 3600
    /// Clock difference tolerated between Herald and the signing backend.
    package static let clockLeeway: TimeInterval = 60
    /// The shortest `user_token_secret` accepted, in bytes.
    package static let minimumSecretBytes = 32
    /// The request header that carries it.
    package static let header = "X-Herald-User-Token"

    package init(userID: String, expiresAt: Date, issuedAt: Date? = nil) {
        self.userID = userID
        self.expiresAt = expiresAt
        self.issuedAt = issuedAt
    }

    /// Why a token was refused. The message never repeats the token or the secret.
    package struct Failure: Error, Sendable, Equatable, CustomStringConvertible {
        package var message: String
        package var description: String { message }
    }

    /// Signs the token with `secret` (what an app's backend does; `herald token` uses it).
    package func signed(secret: some DataProtocol) -> String {
        var object: [String: JSONValue] = [
            "sub": .string(userID), "exp": .int(Int(expiresAt.timeIntervalSince1970.rounded(.down))),
        ]
        if let issuedAt { object["iat"] = .int(Int(issuedAt.timeIntervalSince1970.rounded(.down))) }
        let claims = JSONWriter.encode(.object(object))
        let input =
            Base64URL.encode(Data(#"{"alg":"HS256","typ":"JWT"}"#.utf8)) + "." + Base64URL.encode(Data(claims.utf8))
        let mac = HMAC<SHA256>.authenticationCode(for: Data(input.utf8), using: SymmetricKey(data: Data(secret)))
        return input + "." + Base64URL.encode(Data(mac))
    }

    /// Checks a token's signature and claims at `now`; returns what it proves.
    package static func verify(_ token: String, secret: some DataProtocol, now: Date) throws(Failure) -> UserToken {
        guard token.utf8.count <= 4096 else { throw Failure(message: "the user token is longer than 4096 bytes") }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerData = Base64URL.decode(parts[0]),
            let claimsData = Base64URL.decode(parts[1]),
            let signature = Base64URL.decode(parts[2])
        else { throw Failure(message: "the user token is not a JWT (header.claims.signature, base64url)") }
        guard let header = try? JSONDecoder().decode(Header.self, from: headerData) else {
            throw Failure(message: "the user token's header is not a JSON object with alg")
        }
        guard header.alg == "HS256" else { throw Failure(message: "the user token must be signed with HS256") }
        let input = Data(parts[0].utf8) + Data(".".utf8) + Data(parts[1].utf8)
        guard
            HMAC<SHA256>.isValidAuthenticationCode(
                signature, authenticating: input, using: SymmetricKey(data: Data(secret)))
        else { throw Failure(message: "the user token's signature does not match the app's user_token_secret") }
        let claims: Claims
        do {
            claims = try JSONDecoder().decode(Claims.self, from: claimsData)
        } catch {
            throw Failure(message: "the user token needs sub (the user id) and exp (unix seconds) as numbers")
        }
        let subject = claims.sub
        guard !subject.isEmpty, subject.utf8.count <= 256 else {
            throw Failure(message: "the user token's sub, the user id, is 1 to 256 bytes")
        }
        let now = now.timeIntervalSince1970
        guard claims.exp.isFinite, claims.exp > now - clockLeeway else {
            throw Failure(message: "the user token has expired")
        }
        guard claims.exp <= now + maximumLifetime + clockLeeway else {
            throw Failure(message: "the user token's exp is more than 24 hours ahead")
        }
        var issuedAt: Date?
        if let issued = claims.iat {
            guard issued.isFinite, issued <= now + clockLeeway else {
                throw Failure(message: "the user token's iat is in the future")
            }
            issuedAt = Date(timeIntervalSince1970: issued)
        }
        let expiry = claims.exp
        return UserToken(userID: subject, expiresAt: Date(timeIntervalSince1970: expiry), issuedAt: issuedAt)
    }

    private struct Header: Decodable { var alg: String }
    private struct Claims: Decodable {
        var sub: String
        var exp: Double
        var iat: Double?
    }
}
