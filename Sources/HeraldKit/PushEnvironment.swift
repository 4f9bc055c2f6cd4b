public import Foundation

/// Which APNs host a device's token belongs to: the development builds' (`sandbox`) or the App
/// Store's and TestFlight's (`production`). A token of one is refused by the other.
public enum PushEnvironment: String, Sendable, Codable {
    case sandbox, production

    /// From the build: a debug build is signed for development (sandbox), a release build for
    /// distribution (production). Set it explicitly for a release build installed from Xcode.
    public static var fromBuild: PushEnvironment {
        #if DEBUG
            .sandbox
        #else
            .production
        #endif
    }
}

/// A device token as Herald stores it: lowercase hex of the raw bytes the OS gave, not
/// `description` of the `Data` (which is `"32 bytes"` since iOS 13).
public enum DeviceToken {
    private static let digits = Array("0123456789abcdef".utf8)

    public static func hex(_ raw: Data) -> String {
        var bytes = [UInt8]()
        bytes.reserveCapacity(raw.count * 2)
        for byte in raw {
            bytes.append(digits[Int(byte >> 4)])
            bytes.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The first 8 characters: what a log line may show of a token.
    public static func redacted(_ token: String) -> String { String(token.prefix(8)) + "…" }
}
