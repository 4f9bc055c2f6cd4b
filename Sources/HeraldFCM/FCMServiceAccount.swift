import Crypto
package import Foundation
import HeraldCore
import _CryptoExtras

/// A Google service account key file (`sa.json`): what signs the OAuth2 assertion. The private
/// key never leaves this value: `description` shows the e-mail and key id only.
package struct FCMServiceAccount: Sendable, CustomStringConvertible {
    package let projectID: String
    package let clientEmail: String
    package let privateKeyID: String
    package let tokenURI: String
    let privateKey: _RSA.Signing.PrivateKey

    /// The OAuth2 scope FCM sends need.
    package static let scope = "https://www.googleapis.com/auth/firebase.messaging"

    package init(json: Data) throws(FCMConfigurationError) {
        guard let object = (try? JSONSerialization.jsonObject(with: json)) as? [String: Any] else {
            throw FCMConfigurationError("the service account file is not a JSON object")
        }
        func field(_ name: String) throws(FCMConfigurationError) -> String {
            guard let value = object[name] as? String, !value.isEmpty else {
                throw FCMConfigurationError("the service account file has no \(name)")
            }
            return value
        }
        projectID = try field("project_id")
        clientEmail = try field("client_email")
        privateKeyID = try field("private_key_id")
        tokenURI = (object["token_uri"] as? String) ?? "https://oauth2.googleapis.com/token"
        do {
            privateKey = try _RSA.Signing.PrivateKey(pemRepresentation: try field("private_key"))
        } catch let error as FCMConfigurationError {
            throw error
        } catch {
            throw FCMConfigurationError("private_key is not an RSA private key in PEM form")
        }
    }

    package init(file: String) throws(FCMConfigurationError) {
        guard let data = FileManager.default.contents(atPath: file) else {
            throw FCMConfigurationError("cannot read the service account file \(file)")
        }
        try self.init(json: data)
    }

    package var description: String { "FCMServiceAccount(\(clientEmail), key \(privateKeyID))" }

    /// The RS256 JWT assertion exchanged at `tokenURI` for an access token: `iss` = client e-mail,
    /// `scope`, `aud` = the token URI, `iat`, `exp` = `iat` + 1 h.
    package func assertion(at date: Date) throws -> String {
        let header = #"{"alg":"RS256","typ":"JWT","kid":"\#(privateKeyID)"}"#
        let issuedAt = Int(date.timeIntervalSince1970)
        let claims = try JSONSerialization.data(
            withJSONObject: [
                "iss": clientEmail, "scope": Self.scope, "aud": tokenURI, "iat": issuedAt, "exp": issuedAt + 3600,
            ], options: [.sortedKeys])
        let input = Base64URL.encode(Data(header.utf8)) + "." + Base64URL.encode(claims)
        let signature = try privateKey.signature(for: SHA256.hash(data: Data(input.utf8)), padding: .insecurePKCS1v1_5)
        return input + "." + Base64URL.encode(signature.rawRepresentation)
    }
}

/// A problem with FCM credentials or endpoints; the message never carries key material.
package struct FCMConfigurationError: Error, Sendable, CustomStringConvertible {
    package var message: String
    package init(_ message: String) { self.message = message }
    package var description: String { message }
}
