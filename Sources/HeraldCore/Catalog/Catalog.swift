import Foundation

/// An app's notification catalog: app-wide settings and the notification types.
public struct Catalog: Sendable {
    public var app: CatalogApp
    public var types: [CatalogType]
    /// Lifecycle tracks.
    public var tracks: [CatalogTrack]
    /// What events do, in the catalog's order.
    public var triggers: [CatalogTrigger]
    /// Time-based jobs over user attributes.
    public var jobs: [CatalogJob]

    public init(
        app: CatalogApp, types: [CatalogType], tracks: [CatalogTrack] = [], triggers: [CatalogTrigger] = [],
        jobs: [CatalogJob] = []
    ) {
        self.app = app
        self.types = types
        self.tracks = tracks
        self.triggers = triggers
        self.jobs = jobs
    }

    /// A track by name.
    public func track(_ name: String) -> CatalogTrack? {
        tracks.first { $0.name == name }
    }

    /// A type by its name or external id (`thought`, `PN-02`).
    public func type(_ key: String) -> CatalogType? {
        types.first { $0.name == key || $0.id == key }
    }
}

/// App-level catalog settings.
public struct CatalogApp: Sendable {
    public var payloadKey: String?
    public var defaultLocale: String = "en"
    public var quietHours: QuietHours?
    /// At most this many notifications per user per rolling hour; 0 turns pacing off.
    public var pacingLimit: Int = 5
    /// Grouping is on when the catalog has a `grouping` section; its threshold defaults to 5.
    public var groupingThreshold: Int?
    public var groupThreadID: String = "group"
    public var groupSummaryFormat: String = "{app} · {count} updates"
    public var name: String = "App"
    /// Extra PII patterns by name, besides the built-in detectors.
    public var piiPatterns: [String: String] = [:]
    public var copyRules = CopyRules()
    /// The app-wide opaque text used when the PII guard fires and a type has none of its own.
    public var opaqueTitle: String = "New notification"
    public var opaqueBody: String = "Open the app to view"
    /// The Android notification channel FCM messages use when a type names none.
    public var androidChannel: String?

    public init() {}

    /// The policy engine's view of these settings; custom PII patterns join the built-in detectors.
    public var policyApp: PolicyApp {
        var detectors = PIIDetector.builtIn
        for (name, pattern) in piiPatterns.sorted(by: { $0.key < $1.key }) {
            if let detector = try? PIIDetector(name: name, pattern: pattern) { detectors.append(detector) }
        }
        return PolicyApp(
            name: name, pacingLimit: pacingLimit > 0 ? pacingLimit : nil,
            groupingThreshold: groupingThreshold.flatMap { $0 > 0 ? $0 : nil }, groupThreadID: groupThreadID,
            groupSummaryFormat: groupSummaryFormat, piiDetectors: detectors)
    }
}

/// Copy rules checked when the catalog loads.
public struct CopyRules: Sendable {
    public var titleMaximum: Int = 50
    public var bodyMaximum: Int = 178
    /// Phrases that must not appear (case-insensitive), e.g. "upgrade now".
    public var bannedPhrases: [String] = []
    /// LucidPal's "never ask for money": currency amounts are refused.
    public var noMoney: Bool = false

    public init() {}
}

/// One notification type.
public struct CatalogType: Sendable {
    public var name: String
    /// The external id, e.g. `PN-02`.
    public var id: String?
    public var transactional = false
    public var userControllable = true
    public var defaultEnabled = true
    public var stakes: Stakes = .low
    public var pushType: APNSPushType = .alert
    public var priority: APNSPriority?
    public var sound: String?
    /// `mutable-content: 1`, for a notification service extension (rich content).
    public var mutableContent = false
    public var interruptionLevel: APSInterruptionLevel?
    public var category: String?
    public var threadID: String?
    public var collapseID: String?
    public var deepLink: String?
    /// The Android notification channel (`android.notification.channel_id`) of FCM messages.
    public var androidChannel: String?
    /// Data fields the copy and templates may use as `{placeholders}`.
    public var placeholders: [String] = []
    /// Copy per locale (`en`, `fr`, `fr-CA`).
    public var copy: [String: CatalogCopy] = [:]
    /// Deterministic body used when a placeholder's data is missing.
    public var fallbackBody: String?
    /// Shown instead of title and body when they contain personal data; the app's
    /// opaque text when `nil`.
    public var opaqueTitle: String?
    public var opaqueBody: String?
    public var actions: [CatalogAction] = []
    /// Click-through goal, a fraction.
    public var goalCTR: Double?
    /// Where the type starts in its file, for error messages.
    public var line: Int?

    public init(name: String) { self.name = name }

    /// The policy view of this type; `app` supplies the opaque text the type does not set.
    public func policyType(app: CatalogApp) -> PolicyType {
        PolicyType(
            id: name, transactional: transactional, userControllable: userControllable,
            defaultEnabled: defaultEnabled, stakes: stakes, opaqueTitle: opaqueTitle ?? app.opaqueTitle,
            opaqueBody: opaqueBody ?? app.opaqueBody)
    }
}

/// Copy for one locale.
public struct CatalogCopy: Sendable, Hashable {
    public var title: String?
    public var subtitle: String?
    public var body: String?
    public var line: Int?

    public init(title: String? = nil, subtitle: String? = nil, body: String? = nil, line: Int? = nil) {
        self.title = title
        self.subtitle = subtitle
        self.body = body
        self.line = line
    }
}

/// A quick action.
public struct CatalogAction: Sendable, Hashable {
    public var id: String
    public var title: String
    public var authenticationRequired = false
    public var destructive = false
    public var textInput = false
    /// What the user's other devices show once this action is committed, with
    /// `{device}` the committing device's name: `"✓ Approved on {device}"`.
    public var resolvedLabel: String?

    public init(id: String, title: String) {
        self.id = id
        self.title = title
    }
}
