import Crypto
package import Foundation
package import HeraldAPNs
package import HeraldSimulator
package import HeraldStore
package import _CryptoExtras

/// A fresh APNs signing key with matching simulator trust, for tests and demos.
package struct TestSigningKey: Sendable {
    package var signingKey: APNSSigningKey
    package var simulatorKey: SimulatorKey
    /// The private key as an Apple-style `.p8` (PKCS#8 PEM).
    package var pem: String

    package init(keyID: String = "TESTKEY001", teamID: String = "TESTTEAM01") {
        let privateKey = P256.Signing.PrivateKey()
        signingKey = APNSSigningKey(keyID: keyID, teamID: teamID, privateKey: privateKey)
        simulatorKey = SimulatorKey(keyID: keyID, teamID: teamID, publicKey: privateKey.publicKey)
        pem = privateKey.pemRepresentation
    }
}

/// A new empty directory under the system's temporary directory.
package func makeTemporaryDirectory(_ prefix: String = "herald-test") throws -> String {
    let path = FileManager.default.temporaryDirectory
        .appendingPathComponent("\(prefix)-\(UUID().uuidString.prefix(8))").path
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

/// `count` APNs sandbox devices `d0`, `d1`, … of users `u0`, `u1`, …, each with a token of
/// `makeDeviceTokens`.
package func makeDeviceRecords(_ count: Int) -> [DeviceRecord] {
    makeDeviceTokens(count).enumerated().map {
        DeviceRecord(
            deviceID: "d\($0.offset)", userID: "u\($0.offset)", platform: "apns", token: $0.element,
            environment: "sandbox")
    }
}

/// Random device tokens: 32 bytes as 64 lowercase hex characters, distinct.
package func makeDeviceTokens(_ count: Int) -> [String] {
    var tokens = Set<String>()
    tokens.reserveCapacity(count)
    var generator = SystemRandomNumberGenerator()
    while tokens.count < count {
        var token = ""
        token.reserveCapacity(64)
        for _ in 0..<4 {
            let value = generator.next() as UInt64
            token += String(value, radix: 16).leftPadded(to: 16)
        }
        tokens.insert(token)
    }
    return Array(tokens)
}

extension String {
    fileprivate func leftPadded(to length: Int) -> String {
        count >= length ? self : String(repeating: "0", count: length - count) + self
    }
}

/// A Google service account for tests: an RSA key (made once per process), its key file JSON and
/// the simulator's view of it.
package struct TestServiceAccount: Sendable {
    package static let shared = TestServiceAccount()
    package let privateKey: _RSA.Signing.PrivateKey
    package let projectID = "herald-test"
    package let clientEmail = "herald@herald-test.iam.gserviceaccount.com"

    init() {
        privateKey = try! _RSA.Signing.PrivateKey(keySize: .bits2048)
    }

    /// The key file, pointing its `token_uri` at `tokenURI`.
    package func json(tokenURI: String) -> Data {
        let object: [String: Any] = [
            "type": "service_account", "project_id": projectID, "private_key_id": "0123456789abcdef",
            "private_key": privateKey.pemRepresentation, "client_email": clientEmail, "token_uri": tokenURI,
        ]
        return try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
    }

    package var simulatorAccount: SimulatorFCMAccount {
        SimulatorFCMAccount(projectID: projectID, clientEmail: clientEmail, publicKey: privateKey.publicKey)
    }
}
