package import Foundation
package import HeraldPayload

/// What a Live Activity push does on the device (`aps.event`).
package enum LiveActivityEvent: String, Sendable, Hashable, Codable {
    case start, update, end
}

/// The alert a Live Activity push may carry: ActivityKit ignores an alert without a title (and
/// with it the sound), so a title is required.
package struct LiveActivityAlert: Sendable, Hashable {
    package var title: String
    package var body: String?
    package var sound: String?

    package init(title: String, body: String? = nil, sound: String? = nil) {
        self.title = title
        self.body = body
        self.sound = sound
    }
}

/// One Live Activity push's `aps` (Apple's "Starting and updating Live Activities with
/// ActivityKit push notifications"): the wire rules Herald owns — a `timestamp` on every push,
/// `dismissal-date` on `end` only, `attributes-type` and `attributes` on `start` only.
package struct LiveActivityPush: Sendable, Hashable {
    package var event: LiveActivityEvent
    /// UNIX seconds; the device ignores an update not newer than the last it applied.
    package var timestamp: Int64
    package var contentState: [String: JSONValue]?
    package var staleDate: Int64?
    package var dismissalDate: Int64?
    package var relevanceScore: Double?
    package var alert: LiveActivityAlert?
    package var attributesType: String?
    package var attributes: [String: JSONValue]?
    /// Start: ask the device for an update token (iOS 18's `input-push-token`).
    package var inputPushToken: Bool
    /// Start: the broadcast channel the activity listens on (`input-push-channel`).
    package var inputPushChannel: String?

    package init(
        event: LiveActivityEvent, timestamp: Int64, contentState: [String: JSONValue]? = nil, staleDate: Int64? = nil,
        dismissalDate: Int64? = nil, relevanceScore: Double? = nil, alert: LiveActivityAlert? = nil,
        attributesType: String? = nil, attributes: [String: JSONValue]? = nil, inputPushToken: Bool = false,
        inputPushChannel: String? = nil
    ) {
        self.event = event
        self.timestamp = timestamp
        self.contentState = contentState
        self.staleDate = staleDate
        self.dismissalDate = event == .end ? dismissalDate : nil
        self.relevanceScore = relevanceScore
        self.alert = alert
        self.attributesType = event == .start ? attributesType : nil
        self.attributes = event == .start ? attributes : nil
        self.inputPushToken = event == .start && inputPushToken
        self.inputPushChannel = event == .start ? inputPushChannel : nil
    }

    /// ActivityKit's limit on a content state's encoded size.
    package static let contentStateLimit = 4_096

    /// The bytes of a content state as the payload carries it.
    package static func encodedSize(_ state: [String: JSONValue]) -> Int {
        JSONWriter.encode(.object(state)).utf8.count
    }

    /// The payload: `{"aps": {...}}` with keys in a fixed order.
    package var payload: Data {
        var aps: [(String, JSONValue)] = [("event", .string(event.rawValue)), ("timestamp", .int(Int(timestamp)))]
        if let contentState { aps.append(("content-state", .object(contentState))) }
        if let staleDate { aps.append(("stale-date", .int(Int(staleDate)))) }
        if let dismissalDate { aps.append(("dismissal-date", .int(Int(dismissalDate)))) }
        if let relevanceScore { aps.append(("relevance-score", .double(relevanceScore))) }
        if let alert {
            var fields: [String: JSONValue] = ["title": .string(alert.title)]
            if let body = alert.body { fields["body"] = .string(body) }
            if let sound = alert.sound { fields["sound"] = .string(sound) }
            aps.append(("alert", .object(fields)))
        }
        if let attributesType { aps.append(("attributes-type", .string(attributesType))) }
        if let attributes { aps.append(("attributes", .object(attributes))) }
        if inputPushToken { aps.append(("input-push-token", .int(1))) }
        if let inputPushChannel { aps.append(("input-push-channel", .string(inputPushChannel))) }
        var json = #"{"aps":{"#
        for (index, (key, value)) in aps.enumerated() {
            if index > 0 { json += "," }
            json += JSONWriter.encode(.string(key)) + ":" + JSONWriter.encode(value)
        }
        json += "}}"
        return Data(json.utf8)
    }
}

/// A Live Activity push's alert from a catalog activity type: rendered in each device's locale
/// (a channel's publish, which every device shares, in the catalog's default locale).
package struct ActivityAlertCopy: Sendable {
    package var activity: CatalogActivity
    package var defaultLocale: String
    package var data: [String: String]

    package init(activity: CatalogActivity, defaultLocale: String, data: [String: String]) {
        self.activity = activity
        self.defaultLocale = defaultLocale
        self.data = data
    }

    /// The alert for `locale` (nil: the default locale's).
    package func alert(locale: String?) -> LiveActivityAlert? {
        activity.alert(locale: locale, defaultLocale: defaultLocale, data: data)
    }

    /// Every alert this copy can make, one per locale it has (for the size check before sending).
    package var alerts: [LiveActivityAlert] {
        activity.copy.keys.sorted().compactMap { alert(locale: $0) }
    }
}
