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

    /// The payload of one delivery.
    package func payload(deliveryID: Int64, actionTokens: [String: String]? = nil) -> Data {
        let stamp = HeraldStamp(notificationID: notificationID, deliveryID: deliveryID, actionTokens: actionTokens).json()
        var data = Data(capacity: head.count + stamp.count + tail.count)
        data.append(contentsOf: head)
        data.append(contentsOf: stamp)
        data.append(contentsOf: tail)
        return data
    }
}

extension APNSRenderer {
    /// The payload of `content` for the deliveries of notification `notificationID`, with a
    /// place for each one's stamp under the payload key (beside the app's data, which may not
    /// use the key `herald`: the stamp replaces it). `actionTokens`: the byte lengths of each
    /// action's id and token, counted in `maximumSize`.
    package static func template(
        _ content: NotificationContent, payloadKey: String, notificationID: UUID, actionTokens: [(id: Int, token: Int)] = []
    ) throws(RenderingError) -> APNSPayloadTemplate {
        // A marker no data can hold (random, and its quotes would be escaped inside a string)
        // shows where the stamp goes once the payload is encoded with sorted keys.
        let marker = "herald-" + UUID.random().uuidString
        var marked = content
        marked.data = (content.data ?? [:]).merging([HeraldStamp.key: .string(marker)]) { $1 }
        let bytes = Array(try encoded(marked, payloadKey: payloadKey))
        let needle = Array("\"\(marker)\"".utf8)
        guard let start = bytes.firstRange(of: needle) else {
            throw RenderingError(.notEncodable, field: "data", message: "the APNs payload cannot be encoded")
        }
        let id = notificationID.uuidString.lowercased()
        let head = Array(bytes[..<start.lowerBound])
        let tail = Array(bytes[start.upperBound...])
        return APNSPayloadTemplate(
            head: head, tail: tail, notificationID: id,
            maximumSize: head.count + tail.count + HeraldStamp.maximumJSONLength(notificationID: id, actionTokens: actionTokens))
    }

    /// Refuses a template whose largest delivery would be over the push type's limit.
    package static func check(_ template: APNSPayloadTemplate, pushType: APNSPushType, field: String) throws(RenderingError) {
        guard template.maximumSize <= pushType.payloadLimit else {
            throw RenderingError(
                .payloadTooLarge, field: field,
                message: "the APNs payload is \(template.maximumSize) bytes with Herald's ids; \(pushType.rawValue) allows \(pushType.payloadLimit)")
        }
    }
}
