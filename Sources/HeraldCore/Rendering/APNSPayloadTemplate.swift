package import Foundation
import HeraldPayload

/// A notification's APNs payload with a place for each delivery's `herald` stamp
/// (`HeraldStamp`): rendered once per notification (and locale and policy decision), filled per
/// delivery by joining bytes, so a fan-out does not encode its payload once per device.
package struct APNSPayloadTemplate: Sendable, Hashable {
    /// The payload up to the stamp's value, and after it.
    package let head: [UInt8]
    package let tail: [UInt8]
    /// The notification's id as the stamp carries it (a lowercase UUID).
    package let notificationID: String
    /// The largest payload a delivery gets: with the longest delivery id and action tokens of
    /// the lengths the template was made for.
    package let maximumSize: Int

    /// The bytes around the delivery id of a stamp without action tokens (`…{"d":` and
    /// `,"n":"…"}…`): a fan-out's payloads are these and the id's digits, one allocation each.
    private let plainHead: [UInt8]
    private let plainTail: [UInt8]

    package init(head: [UInt8], tail: [UInt8], notificationID: String, maximumSize: Int) {
        self.head = head
        self.tail = tail
        self.notificationID = notificationID
        self.maximumSize = maximumSize
        // {"d":<id>,"n":"<notification>"} as HeraldStamp.json() writes it (keys sorted).
        let stamp = HeraldStamp(notificationID: notificationID, deliveryID: 0).json()
        let digit = stamp.firstIndex(of: UInt8(ascii: "0"))!
        plainHead = head + stamp[..<digit]
        plainTail = Array(stamp[(digit + 1)...]) + tail
    }

    /// The payload of one delivery.
    package func payload(deliveryID: Int64, actionTokens: [String: String]? = nil) -> Data {
        if let actionTokens, !actionTokens.isEmpty {
            let stamp = HeraldStamp(notificationID: notificationID, deliveryID: deliveryID, actionTokens: actionTokens)
                .json()
            var data = Data(capacity: head.count + stamp.count + tail.count)
            data.append(contentsOf: head)
            data.append(contentsOf: stamp)
            data.append(contentsOf: tail)
            return data
        }
        var data = Data(capacity: plainHead.count + 20 + plainTail.count)
        data.append(contentsOf: plainHead)
        // The id's decimal digits, written backwards into a small buffer.
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { buffer in
            var value = deliveryID.magnitude
            var start = 20
            repeat {
                start -= 1
                buffer[start] = UInt8(ascii: "0") + UInt8(value % 10)
                value /= 10
            } while value > 0
            if deliveryID < 0 {
                start -= 1
                buffer[start] = UInt8(ascii: "-")
            }
            data.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[start..<20]))
        }
        data.append(contentsOf: plainTail)
        return data
    }
}

extension APNSRenderer {
    /// The payload of `content` for the deliveries of notification `notificationID`, with a
    /// place for each one's stamp under the payload key (beside the app's data, which may not
    /// use the key `herald`: the stamp replaces it). `actionTokens`: the byte lengths of each
    /// action's id and token, counted in `maximumSize`.
    package static func template(
        _ content: NotificationContent, payloadKey: String, notificationID: UUID,
        actionTokens: [(id: Int, token: Int)] = []
    ) throws(RenderingError) -> APNSPayloadTemplate {
        // A marker no data can hold (random, and its quotes would be escaped inside a string)
        // shows where the stamp goes once the payload is encoded with sorted keys.
        let marker = "herald-" + UUID.random().uuidString
        var marked = content
        marked.data = (content.data ?? [:]).merging([HeraldStamp.key: .string(marker)]) { $1 }
        let bytes = Array(try encoded(marked, payloadKey: payloadKey))
        let needle = Array("\"\(marker)\"".utf8)
        guard let start = firstRange(of: needle, in: bytes) else {
            throw RenderingError(.notEncodable, field: "data", message: "the APNs payload cannot be encoded")
        }
        let id = notificationID.uuidString.lowercased()
        let head = Array(bytes[..<start.lowerBound])
        let tail = Array(bytes[start.upperBound...])
        return APNSPayloadTemplate(
            head: head, tail: tail, notificationID: id,
            maximumSize: head.count + tail.count
                + HeraldStamp.maximumJSONLength(notificationID: id, actionTokens: actionTokens))
    }

    /// Where `needle` first occurs in `bytes` (the generic `firstRange(of:)` cost tens of
    /// microseconds per single send).
    static func firstRange(of needle: [UInt8], in bytes: [UInt8]) -> Range<Int>? {
        guard let first = needle.first, needle.count <= bytes.count else { return nil }
        return bytes.withUnsafeBufferPointer { haystack in
            needle.withUnsafeBufferPointer { needle in
                for index in 0...(haystack.count - needle.count) where haystack[index] == first {
                    if memcmp(haystack.baseAddress! + index, needle.baseAddress!, needle.count) == 0 {
                        return index..<(index + needle.count)
                    }
                }
                return nil
            }
        }
    }

    /// Refuses a template whose largest delivery would be over the push type's limit.
    package static func check(_ template: APNSPayloadTemplate, pushType: APNSPushType, field: String)
        throws(RenderingError)
    {
        guard template.maximumSize <= pushType.payloadLimit else {
            throw RenderingError(
                .payloadTooLarge, field: field,
                message:
                    "the APNs payload is \(template.maximumSize) bytes with Herald's ids; \(pushType.rawValue) allows \(pushType.payloadLimit)"
            )
        }
    }
}
