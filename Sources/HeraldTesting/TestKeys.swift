import Crypto
import Foundation
package import HeraldAPNs
package import HeraldSimulator

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
