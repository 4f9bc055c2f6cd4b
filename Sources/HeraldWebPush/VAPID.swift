package import Crypto
package import Foundation
import HeraldCore

/// RFC 8292 Voluntary Application Server Identification: an ES256 JWT naming the push
/// service's origin (`aud`), an expiry at most 24 hours away (`exp`) and a contact (`sub`), sent
/// as `Authorization: vapid t=<jwt>, k=<public key>`. Safari's push service refuses a JWT whose
/// `sub` is not a `mailto:` or `https:` URL, whose `aud` is not its origin, or whose `exp` is
/// more than a day away; so does Herald's simulator.
package enum VAPID {
    /// The longest a JWT may live (RFC 8292 §2).
    package static let maximumLifetime: TimeInterval = 24 * 3_600

    /// What the JWT says.
    package struct Claims: Sendable, Equatable {
        package var audience: String
        package var expiration: Int64
        package var subject: String

        package init(audience: String, expiration: Int64, subject: String) {
            self.audience = audience
            self.expiration = expiration
            self.subject = subject
        }
    }

    /// Why an `Authorization` header is refused (the simulator answers 401/403 with it).
    package enum Refusal: Error, Equatable, CustomStringConvertible {
        case missing
        case malformed(String)
        case badSignature
        case wrongKey
        case audience(String)
        case expired
        case tooLong
        case subject(String)

        package var description: String {
            switch self {
            case .missing: "no Authorization: vapid header"
            case .malformed(let what): "malformed VAPID header: \(what)"
            case .badSignature: "the JWT's signature does not verify with k"
            case .wrongKey: "k is not the key the subscription was made with"
            case .audience(let aud): "aud \(aud) is not this push service's origin"
            case .expired: "the JWT has expired"
            case .tooLong: "exp is more than 24 hours away"
            case .subject(let sub): "sub \(sub) is not a mailto: or https: URL"
            }
        }
    }

    /// A subject a push service takes: `mailto:` an address without spaces or angle brackets,
    /// or an `https:` URL.
    package static func isValidSubject(_ subject: String) -> Bool {
        if subject.hasPrefix("mailto:") {
            let address = subject.dropFirst("mailto:".count)
            return address.contains("@") && !address.hasPrefix("@") && !address.hasSuffix("@")
                && !address.contains { $0 == " " || $0 == "<" || $0 == ">" }
        }
        guard subject.hasPrefix("https://"), let url = URL(string: subject), let host = url.host, !host.isEmpty
        else { return false }
        return host != "localhost"
    }

    /// The origin of an endpoint (`https://host[:port]`), the JWT's audience; nil for a URL
    /// that is not absolute https.
    package static func audience(of endpoint: String) -> String? {
        guard let components = URLComponents(string: endpoint), components.scheme?.lowercased() == "https",
            let host = components.host, !host.isEmpty
        else { return nil }
        let port = components.port.map { $0 == 443 ? "" : ":\($0)" } ?? ""
        return "https://\(host.lowercased())\(port)"
    }

    /// The VAPID private key in a PEM file (`herald webpush keygen` writes one); the error says
    /// what is wrong in the words `herald serve` and `herald config check` report.
    package static func key(file: String) throws(KeyFileError) -> P256.Signing.PrivateKey {
        guard let pem = try? String(contentsOfFile: file, encoding: .utf8) else { throw KeyFileError(file: file) }
        guard let key = try? P256.Signing.PrivateKey(pemRepresentation: pem) else { throw KeyFileError(file: file) }
        return key
    }

    /// A VAPID key file that cannot be read, or is not a P-256 private key in PEM.
    package struct KeyFileError: Error, CustomStringConvertible {
        package var file: String
        package var description: String {
            "\(file) is not a readable P-256 private key in PEM (herald webpush keygen)"
        }
    }

    /// The public key as a push service and a browser's `applicationServerKey` want it:
    /// base64url of the 65-byte uncompressed point.
    package static func publicKeyText(_ key: P256.Signing.PublicKey) -> String {
        Base64URL.encode(key.x963Representation)
    }

    /// The `Authorization` header value for a message to `audience`, valid until `expiration`.
    package static func authorization(
        key: P256.Signing.PrivateKey, audience: String, subject: String, expiration: Int64
    ) throws -> String {
        let header = Base64URL.encode(Data(#"{"typ":"JWT","alg":"ES256"}"#.utf8))
        let claims = Base64URL.encode(
            Data(
                #"{"aud":\#(jsonString(audience)),"exp":\#(expiration),"sub":\#(jsonString(subject))}"#.utf8))
        let input = header + "." + claims
        let signature = try key.signature(for: Data(input.utf8)).rawRepresentation
        return "vapid t=\(input).\(Base64URL.encode(signature)), k=\(publicKeyText(key.publicKey))"
    }

    /// Verifies an `Authorization` header for `audience` at `now` (Unix seconds): the JWT signed
    /// by `k`, which must be `expectedKey` when the subscription was made with one.
    package static func verify(
        _ header: String?, audience: String, now: Int64, expectedKey: Data? = nil
    ) throws(Refusal) -> (claims: Claims, key: Data) {
        guard let header, !header.isEmpty else { throw .missing }
        let trimmed = header.trimmingCharacters(in: .whitespaces)
        guard trimmed.lowercased().hasPrefix("vapid ") else { throw .malformed("the scheme is not vapid") }
        var token: String?
        var keyText: String?
        for part in trimmed.dropFirst("vapid ".count).split(separator: ",") {
            let pair = part.trimmingCharacters(in: .whitespaces)
            if pair.hasPrefix("t=") { token = String(pair.dropFirst(2)) }
            if pair.hasPrefix("k=") { keyText = String(pair.dropFirst(2)) }
        }
        guard let token, let keyText else { throw .malformed("t= and k= are both required") }
        guard let keyBytes = Base64URL.decode(keyText), keyBytes.count == 65,
            let key = try? P256.Signing.PublicKey(x963Representation: keyBytes)
        else { throw .malformed("k is not a base64url P-256 public key") }
        let pieces = token.split(separator: ".", omittingEmptySubsequences: false)
        guard pieces.count == 3, let signatureBytes = Base64URL.decode(pieces[2]),
            let headerBytes = Base64URL.decode(pieces[0]), let claimBytes = Base64URL.decode(pieces[1])
        else { throw .malformed("t is not a JWT") }
        guard let headerObject = try? JSONSerialization.jsonObject(with: headerBytes) as? [String: Any],
            headerObject["alg"] as? String == "ES256"
        else { throw .malformed("the JWT's alg is not ES256") }
        guard let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureBytes),
            key.isValidSignature(signature, for: Data("\(pieces[0]).\(pieces[1])".utf8))
        else { throw .badSignature }
        if let expectedKey, expectedKey != keyBytes { throw .wrongKey }
        guard let object = try? JSONSerialization.jsonObject(with: claimBytes) as? [String: Any] else {
            throw .malformed("the JWT's claims are not a JSON object")
        }
        guard let aud = object["aud"] as? String else { throw .malformed("aud is missing") }
        guard let exp = (object["exp"] as? Int).map(Int64.init) else {
            throw .malformed("exp is not a whole number of seconds")
        }
        guard let sub = object["sub"] as? String else { throw .subject("(none)") }
        guard aud == audience else { throw .audience(aud) }
        guard exp > now else { throw .expired }
        guard exp <= now + Int64(maximumLifetime) else { throw .tooLong }
        guard isValidSubject(sub) else { throw .subject(sub) }
        return (Claims(audience: aud, expiration: exp, subject: sub), keyBytes)
    }

    private static func jsonString(_ text: String) -> String {
        let data = (try? JSONSerialization.data(withJSONObject: [text], options: [.withoutEscapingSlashes])) ?? Data()
        return String(decoding: data.dropFirst().dropLast(), as: UTF8.self)
    }
}
