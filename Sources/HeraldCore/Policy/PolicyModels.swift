package import Foundation
package import HeraldPayload

/// How much is at stake in a notification: the wire type HeraldKit shares.
package typealias Stakes = HeraldPayload.Stakes

/// A time of day, minutes after midnight.
package struct LocalTime: Sendable, Hashable, Codable, CustomStringConvertible {
    package var hour: Int
    package var minute: Int

    package init(hour: Int, minute: Int = 0) {
        self.hour = hour
        self.minute = minute
    }

    /// Parses `HH:MM`.
    package init?(_ text: String) {
        guard let time = StepTime.clockTime(text) else { return nil }
        self.init(hour: time.hour, minute: time.minute)
    }

    var minutes: Int { hour * 60 + minute }
    package var description: String { String(format: "%02d:%02d", hour, minute) }
}

/// A daily quiet window in the user's time zone, e.g. 22:00–09:00. It may wrap midnight.
package struct QuietHours: Sendable, Hashable, Codable {
    package var start: LocalTime
    package var end: LocalTime

    package init(start: LocalTime, end: LocalTime) {
        self.start = start
        self.end = end
    }

    package static let syncWellDefault = QuietHours(start: LocalTime(hour: 22), end: LocalTime(hour: 9))
}

/// What the catalog says about a notification type, as far as policy is concerned.
package struct PolicyType: Sendable, Hashable {
    package var id: String
    /// Transactional types ignore quiet hours.
    package var transactional: Bool
    /// Only user-controllable types can be switched off.
    package var userControllable: Bool
    package var defaultEnabled: Bool
    package var stakes: Stakes
    /// The opaque text used when the PII guard fires.
    package var opaqueTitle: String
    package var opaqueBody: String

    package init(
        id: String, transactional: Bool = false, userControllable: Bool = true, defaultEnabled: Bool = true,
        stakes: Stakes = .low, opaqueTitle: String = "New notification", opaqueBody: String = "Open the app to view"
    ) {
        self.id = id
        self.transactional = transactional
        self.userControllable = userControllable
        self.defaultEnabled = defaultEnabled
        self.stakes = stakes
        self.opaqueTitle = opaqueTitle
        self.opaqueBody = opaqueBody
    }
}

/// A user's settings.
package struct PolicyUser: Sendable, Hashable {
    package var timeZone: TimeZone
    /// Per-type on/off; types missing here use the catalog default.
    package var typeEnabled: [String: Bool]
    /// `nil`: quiet hours off.
    package var quietHours: QuietHours?
    package var vacation: Bool
    /// Stakes levels the user allowed to break through Do-Not-Disturb.
    package var dndBypass: Set<Stakes>

    package init(
        timeZone: TimeZone = TimeZone(identifier: "UTC")!, typeEnabled: [String: Bool] = [:],
        quietHours: QuietHours? = nil, vacation: Bool = false, dndBypass: Set<Stakes> = []
    ) {
        self.timeZone = timeZone
        self.typeEnabled = typeEnabled
        self.quietHours = quietHours
        self.vacation = vacation
        self.dndBypass = dndBypass
    }
}

/// App-wide policy settings.
package struct PolicyApp: Sendable {
    package var name: String
    /// At most this many notifications per user per rolling hour; `nil` turns pacing off (default 5).
    package var pacingLimit: Int?
    /// From this many notifications within a rolling hour, the group thread and summary are used (default 5).
    package var groupingThreshold: Int?
    package var groupThreadID: String
    /// `{app}` and `{count}` are filled in: "Cocotte · {count} updates".
    package var groupSummaryFormat: String
    package var piiDetectors: [PIIDetector]

    package init(
        name: String, pacingLimit: Int? = 5, groupingThreshold: Int? = nil, groupThreadID: String = "group",
        groupSummaryFormat: String = "{app} · {count} updates", piiDetectors: [PIIDetector] = PIIDetector.builtIn
    ) {
        self.name = name
        self.pacingLimit = pacingLimit
        self.groupingThreshold = groupingThreshold
        self.groupThreadID = groupThreadID
        self.groupSummaryFormat = groupSummaryFormat
        self.piiDetectors = piiDetectors
    }
}

/// The rendered notification the policy may adjust.
package struct PolicyContent: Sendable, Hashable {
    package var title: String?
    package var body: String?
    package var threadID: String?
    /// The rendered `apns-collapse-id` / FCM collapse key, checked by the PII guard.
    package var collapseID: String?
    package var summary: String?
    package var interruptionLevel: APSInterruptionLevel?

    package init(
        title: String? = nil, body: String? = nil, threadID: String? = nil, collapseID: String? = nil,
        summary: String? = nil, interruptionLevel: APSInterruptionLevel? = nil
    ) {
        self.title = title
        self.body = body
        self.threadID = threadID
        self.collapseID = collapseID
        self.summary = summary
        self.interruptionLevel = interruptionLevel
    }
}

/// One step of the decision trace: which rule changed the outcome, and how, in words.
package struct PolicyStep: Sendable, Hashable, CustomStringConvertible {
    package var rule: String
    package var message: String
    package var description: String { "\(rule): \(message)" }

    package init(rule: String, message: String) {
        self.rule = rule
        self.message = message
    }
}

/// The outcome for one recipient device at one moment.
package enum PolicyOutcome: Sendable, Hashable {
    case send
    case deferred(until: Date)
    case suppressed(reason: String)
}

/// The decision: outcome, the content as it will be sent, and the trace of every rule that acted.
package struct PolicyDecision: Sendable, Hashable {
    package var outcome: PolicyOutcome
    package var content: PolicyContent
    package var trace: [PolicyStep]
}
