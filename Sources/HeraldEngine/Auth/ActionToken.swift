package import Crypto
package import Foundation
import HeraldCore

/// A quick action's token: the capability to commit one action of one delivery
/// without opening the app (`POST /v1/apps/{app}/actions`, no key), carried in the delivery's
/// payload (`herald.a`). Base64url of
/// `0x01 | delivery id (8 bytes) | expiry (4 bytes, unix seconds) | action id (UTF-8) | tag`,
/// where the tag is the first 16 bytes of HMAC-SHA256 under the app's action key over the app
/// id, a zero byte and everything before the tag. At most 124 bytes (action ids are at most 64).
/// Single use is the store's: the first commit of a delivery is kept, and a replay answers it.
package struct ActionToken: Sendable, Equatable {
    package var deliveryID: Int64
    package var action: String
    package var expiresAt: Date

    package init(deliveryID: Int64, action: String, expiresAt: Date) {
        self.deliveryID = deliveryID
        self.action = action
        self.expiresAt = expiresAt
    }

    static let version: UInt8 = 1
    static let tagBytes = ActionTokenLayout.tagBytes
    /// The longest action id a token carries (the catalog refuses longer ones).
    package static let maximumActionBytes = ActionTokenLayout.maximumActionBytes
    /// How long a token is good for when the notification does not expire sooner.
    package static let lifetime: TimeInterval = 7 * 86_400

    /// Why a token was refused; never repeats the token.
    package struct Failure: Error, Sendable, Equatable, CustomStringConvertible {
        package var message: String
        package var description: String { message }
    }

    /// The length of a token for `action` (every token for it has this length).
    package static func length(action: String) -> Int { ActionTokenLayout.length(action: action) }

    /// The token, signed for `appID` with `key`.
    package func signed(appID: String, key: SymmetricKey) -> String {
        var bytes: [UInt8] = [Self.version]
        bytes.reserveCapacity(1 + 8 + 4 + action.utf8.count + Self.tagBytes)
        withUnsafeBytes(of: UInt64(bitPattern: deliveryID).bigEndian) { bytes.append(contentsOf: $0) }
        let expiry = UInt32(clamping: Int64(expiresAt.timeIntervalSince1970.rounded(.down)))
        withUnsafeBytes(of: expiry.bigEndian) { bytes.append(contentsOf: $0) }
        bytes.append(contentsOf: action.utf8)
        bytes.append(contentsOf: Self.tag(bytes, appID: appID, key: key))
        return Base64URL.encode(Data(bytes))
    }

    /// Checks a token's tag and expiry at `now`; returns what it allows.
    package static func verify(_ token: String, appID: String, key: SymmetricKey, now: Date) throws(Failure)
        -> ActionToken
    {
        guard token.utf8.count <= 200, let data = Base64URL.decode(Substring(token)) else {
            throw Failure(message: "the action token is not a token Herald issued")
        }
        let bytes = [UInt8](data)
        guard bytes.count > 1 + 8 + 4 + tagBytes, bytes[0] == version else {
            throw Failure(message: "the action token is not a token Herald issued")
        }
        let body = Array(bytes[..<(bytes.count - tagBytes)])
        let tag = Array(bytes[(bytes.count - tagBytes)...])
        // Compared in constant time.
        let expected = Self.tag(body, appID: appID, key: key)
        guard expected.count == tag.count, zip(expected, tag).reduce(0, { $0 | ($1.0 ^ $1.1) }) == 0 else {
            throw Failure(message: "the action token's signature does not match: it was not issued for this app")
        }
        let delivery = body[1..<9].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        let expiry = body[9..<13].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        guard let action = String(bytes: body[13...], encoding: .utf8), !action.isEmpty else {
            throw Failure(message: "the action token is not a token Herald issued")
        }
        let expiresAt = Date(timeIntervalSince1970: Double(expiry))
        guard expiresAt > now else { throw Failure(message: "the action token has expired") }
        return ActionToken(deliveryID: Int64(bitPattern: delivery), action: action, expiresAt: expiresAt)
    }

    private static func tag(_ body: [UInt8], appID: String, key: SymmetricKey) -> [UInt8] {
        var message = Data(appID.utf8)
        message.append(0)
        message.append(contentsOf: body)
        return Array(HMAC<SHA256>.authenticationCode(for: message, using: key)).prefix(tagBytes).map { $0 }
    }
}
