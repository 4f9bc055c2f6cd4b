public import Foundation
public import HeraldPayload

/// How much is at stake in a notification: the wire type HeraldKit shares.
public typealias Stakes = HeraldPayload.Stakes

/// A time of day, minutes after midnight.
public struct LocalTime: Sendable, Hashable, Codable, CustomStringConvertible {
    public var hour: Int
    public var minute: Int

    public init(hour: Int, minute: Int = 0) {
        self.hour = hour
        self.minute = minute
    }

    /// Parses `HH:MM`.
    public init?(_ text: String) {
        guard let time = StepTime.clockTime(text) else { return nil }
        self.init(hour: time.hour, minute: time.minute)
    }

    var minutes: Int { hour * 60 + minute }
    public var description: String { String(format: "%02d:%02d", hour, minute) }
}

/// A daily quiet window in the user's time zone, e.g. 22:00–09:00. It may wrap midnight.
public struct QuietHours: Sendable, Hashable, Codable {
    public var start: LocalTime
    public var end: LocalTime

    public init(start: LocalTime, end: LocalTime) {
        self.start = start
        self.end = end
    }

    public static let syncWellDefault = QuietHours(start: LocalTime(hour: 22), end: LocalTime(hour: 9))
}

/// What the catalog says about a notification type, as far as policy is concerned.
public struct PolicyType: Sendable, Hashable {
    public var id: String
    /// Transactional types ignore quiet hours.
    public var transactional: Bool
    /// Only user-controllable types can be switched off.
    public var userControllable: Bool
    public var defaultEnabled: Bool
    public var stakes: Stakes
    /// The opaque text used when the PII guard fires.
    public var opaqueTitle: String
    public var opaqueBody: String

    public init(
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
public struct PolicyUser: Sendable, Hashable {
    public var timeZone: TimeZone
    /// Per-type on/off; types missing here use the catalog default.
    public var typeEnabled: [String: Bool]
    /// `nil`: quiet hours off.
    public var quietHours: QuietHours?
    public var vacation: Bool
    /// Stakes levels the user allowed to break through Do-Not-Disturb.
    public var dndBypass: Set<Stakes>

    public init(
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
public struct PolicyApp: Sendable {
    public var name: String
    /// At most this many notifications per user per rolling hour; `nil` turns pacing off (default 5).
    public var pacingLimit: Int?
    /// From this many notifications within a rolling hour, the group thread and summary are used (default 5).
    public var groupingThreshold: Int?
    public var groupThreadID: String
    /// `{app}` and `{count}` are filled in: "Cocotte · {count} updates".
    public var groupSummaryFormat: String
    public var piiDetectors: [PIIDetector]

    public init(
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
public struct PolicyContent: Sendable, Hashable {
    public var title: String?
    public var body: String?
    public var threadID: String?
    /// The rendered `apns-collapse-id` / FCM collapse key, checked by the PII guard.
    public var collapseID: String?
    public var summary: String?
    public var interruptionLevel: APSInterruptionLevel?

    public init(
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
public struct PolicyStep: Sendable, Hashable, CustomStringConvertible {
    public var rule: String
    public var message: String
    public var description: String { "\(rule): \(message)" }

    public init(rule: String, message: String) {
        self.rule = rule
        self.message = message
    }
}

/// The outcome for one recipient device at one moment.
public enum PolicyOutcome: Sendable, Hashable {
    case send
    case deferred(until: Date)
    case suppressed(reason: String)
}

/// The decision: outcome, the content as it will be sent, and the trace of every rule that acted.
public struct PolicyDecision: Sendable, Hashable {
    public var outcome: PolicyOutcome
    public var content: PolicyContent
    public var trace: [PolicyStep]
}
