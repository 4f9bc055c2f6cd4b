import Foundation
import HeraldPayload

/// An app's notification catalog: app-wide settings and the notification types.
package struct Catalog: Sendable {
    package var app: CatalogApp
    package var types: [CatalogType]
    /// Lifecycle tracks.
    package var tracks: [CatalogTrack]
    /// What events do, in the catalog's order.
    package var triggers: [CatalogTrigger]
    /// Time-based jobs over user attributes.
    package var jobs: [CatalogJob]
    /// Live Activity types: their alerts localized like notifications' copy.
    package var activities: [CatalogActivity]

    package init(
        app: CatalogApp, types: [CatalogType], tracks: [CatalogTrack] = [], triggers: [CatalogTrigger] = [],
        jobs: [CatalogJob] = [], activities: [CatalogActivity] = []
    ) {
        self.app = app
        self.types = types
        self.tracks = tracks
        self.triggers = triggers
        self.jobs = jobs
        self.activities = activities
    }

    /// A Live Activity type by name.
    package func activity(_ name: String) -> CatalogActivity? {
        activities.first { $0.name == name }
    }

    /// A track by name.
    package func track(_ name: String) -> CatalogTrack? {
        tracks.first { $0.name == name }
    }

    /// A type by its name or external id (`thought`, `PN-02`).
    package func type(_ key: String) -> CatalogType? {
        types.first { $0.name == key || $0.id == key }
    }
}

/// App-level catalog settings.
package struct CatalogApp: Sendable {
    package var payloadKey: String?
    package var defaultLocale: String = "en"
    package var quietHours: QuietHours?
    /// At most this many notifications per user per rolling hour; 0 turns pacing off.
    package var pacingLimit: Int = 5
    /// Grouping is on when the catalog has a `grouping` section; its threshold defaults to 5.
    package var groupingThreshold: Int?
    package var groupThreadID: String = "group"
    package var groupSummaryFormat: String = "{app} · {count} updates"
    package var name: String = "App"
    /// Extra PII patterns by name, besides the built-in detectors.
    package var piiPatterns: [String: String] = [:]
    package var copyRules = CopyRules()
    /// The app-wide opaque text used when the PII guard fires and a type has none of its own.
    package var opaqueTitle: String = "New notification"
    package var opaqueBody: String = "Open the app to view"
    /// The Android notification channel FCM messages use when a type names none.
    package var androidChannel: String?

    package init() {}

    /// The policy engine's view of these settings; custom PII patterns join the built-in detectors.
    package var policyApp: PolicyApp {
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
package struct CopyRules: Sendable {
    package var titleMaximum: Int = 50
    package var bodyMaximum: Int = 178
    /// Phrases that must not appear (case-insensitive), e.g. "upgrade now".
    package var bannedPhrases: [String] = []
    /// LucidPal's "never ask for money": currency amounts are refused.
    package var noMoney: Bool = false

    package init() {}
}

/// One notification type.
package struct CatalogType: Sendable {
    package var name: String
    /// The external id, e.g. `PN-02`.
    package var id: String?
    package var transactional = false
    package var userControllable = true
    package var defaultEnabled = true
    package var stakes: Stakes = .low
    package var pushType: APNSPushType = .alert
    package var priority: APNSPriority?
    package var sound: String?
    /// `mutable-content: 1`, for a notification service extension (rich content).
    package var mutableContent = false
    package var interruptionLevel: APSInterruptionLevel?
    package var category: String?
    package var threadID: String?
    package var collapseID: String?
    package var deepLink: String?
    /// The Android notification channel (`android.notification.channel_id`) of FCM messages.
    package var androidChannel: String?
    /// Data fields the copy and templates may use as `{placeholders}`.
    package var placeholders: [String] = []
    /// Copy per locale (`en`, `fr`, `fr-CA`).
    package var copy: [String: CatalogCopy] = [:]
    /// Deterministic body used when a placeholder's data is missing.
    package var fallbackBody: String?
    /// Shown instead of title and body when they contain personal data; the app's
    /// opaque text when `nil`.
    package var opaqueTitle: String?
    package var opaqueBody: String?
    package var actions: [CatalogAction] = []
    /// Click-through goal, a fraction.
    package var goalCTR: Double?
    /// Where the type starts in its file, for error messages.
    package var line: Int?

    package init(name: String) { self.name = name }

    /// The policy view of this type; `app` supplies the opaque text the type does not set.
    package func policyType(app: CatalogApp) -> PolicyType {
        PolicyType(
            id: name, transactional: transactional, userControllable: userControllable,
            defaultEnabled: defaultEnabled, stakes: stakes, opaqueTitle: opaqueTitle ?? app.opaqueTitle,
            opaqueBody: opaqueBody ?? app.opaqueBody)
    }
}

/// A Live Activity type (`activities.NAME`): the app's ActivityAttributes type, the stakes that
/// decide its alerts' priority (low: 5, a routine update; medium and above: 10, within the
/// activity's budget), and its alert copy per locale (title required; subtitle is not shown by
/// ActivityKit, so it is not taken).
package struct CatalogActivity: Sendable {
    package var name: String
    package var attributesType = ""
    package var stakes: Stakes = .medium
    package var sound: String?
    /// Data fields the copy may use as `{placeholders}`.
    package var placeholders: [String] = []
    package var copy: [String: CatalogCopy] = [:]
    package var line: Int?

    package init(name: String) { self.name = name }

    /// The alert for a device locale (`fr-CA`, then `fr`, then the default) with `data` filled
    /// in; a placeholder without data is left out (callers check the data first).
    package func alert(locale: String?, defaultLocale: String, data: [String: String]) -> LiveActivityAlert? {
        guard
            let chosen = Template.localeChain(locale, defaultLocale: defaultLocale).lazy.compactMap({ self.copy[$0] })
                .first,
            let title = chosen.title.map({ Placeholders.title($0, data: data) }), !title.isEmpty
        else { return nil }
        return LiveActivityAlert(
            title: title, body: chosen.body.map { Placeholders.title($0, data: data) }, sound: sound)
    }
}

/// Copy for one locale.
package struct CatalogCopy: Sendable, Hashable {
    package var title: String?
    package var subtitle: String?
    package var body: String?
    package var line: Int?

    package init(title: String? = nil, subtitle: String? = nil, body: String? = nil, line: Int? = nil) {
        self.title = title
        self.subtitle = subtitle
        self.body = body
        self.line = line
    }
}

/// A quick action.
package struct CatalogAction: Sendable, Hashable {
    package var id: String
    package var title: String
    package var authenticationRequired = false
    package var destructive = false
    package var textInput = false
    /// What the user's other devices show once this action is committed, with
    /// `{device}` the committing device's name: `"✓ Approved on {device}"`.
    package var resolvedLabel: String?

    package init(id: String, title: String) {
        self.id = id
        self.title = title
    }
}
