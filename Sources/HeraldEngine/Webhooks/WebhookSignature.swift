import Crypto
package import Foundation

/// Standard Webhooks signing (https://www.standardwebhooks.com, what Svix and Novu use): each
/// call carries `webhook-id` (the message's id, the same on every retry: the receiver's
/// idempotency key), `webhook-timestamp` (unix seconds of this try) and `webhook-signature`:
/// `v1,<base64 HMAC-SHA256 of "id.timestamp.body">` under each secret, space separated (during a
/// rotation the receiver knows one of them).
package enum WebhookSignature {
    /// The `webhook-signature` value of a message for `secrets`.
    package static func header(id: String, timestamp: Int, body: Data, secrets: [Data]) -> String {
        secrets.map { "v1," + signature(id: id, timestamp: timestamp, body: body, secret: $0) }.joined(separator: " ")
    }

    /// One signature (base64).
    package static func signature(id: String, timestamp: Int, body: Data, secret: Data) -> String {
        var message = Data("\(id).\(timestamp).".utf8)
        message.append(body)
        return Data(HMAC<SHA256>.authenticationCode(for: message, using: SymmetricKey(data: secret)))
            .base64EncodedString()
    }

    /// What a receiver does: whether one of `header`'s `v1` signatures is the message's under
    /// `secret`, and the timestamp within `tolerance` of `now` (replays are refused).
    package static func verify(
        id: String, timestamp: String, body: Data, header: String, secret: Data, now: Date,
        tolerance: TimeInterval = 300
    ) -> Bool {
        guard let seconds = Int(timestamp), abs(now.timeIntervalSince1970 - Double(seconds)) <= tolerance else {
            return false
        }
        let expected = Data(signature(id: id, timestamp: seconds, body: body, secret: secret).utf8)
        return header.split(separator: " ").contains { part in
            guard part.hasPrefix("v1,") else { return false }
            let given = Data(part.dropFirst(3).utf8)
            return given.count == expected.count && zip(given, expected).reduce(0) { $0 | ($1.0 ^ $1.1) } == 0
        }
    }
}
