package import Foundation
import HeraldPayload

/// A user as the policy step sees them.
package struct PlanningUser: Sendable, Hashable {
    package var timeZone: String?
    package var locale: String?
    package var preferences: UserPreferences

    package init(timeZone: String? = nil, locale: String? = nil, preferences: UserPreferences = UserPreferences()) {
        self.timeZone = timeZone
        self.locale = locale
        self.preferences = preferences
    }
}

/// What the policy step needs of an app: its catalog, the engine's terms (computed once when
/// the app is loaded) and where its data goes in an APNs payload.
package struct PlanningApp: Sendable {
    package var catalog: Catalog
    package var policy: PolicyApp
    package var payloadKey: String

    package init(catalog: Catalog, policy: PolicyApp, payloadKey: String) {
        self.catalog = catalog
        self.policy = policy
        self.payloadKey = payloadKey
    }

    /// Whether plans read and write what each user received in the last hour: pacing and
    /// grouping need it; an app with neither does no I/O for it.
    package var countsSends: Bool { policy.pacingLimit != nil || policy.groupingThreshold != nil }
}

/// A typed delivery the policy engine let through: its own content and the trace to store.
package struct PlannedDelivery: Sendable {
    /// In the device's locale, after the policy engine and the PII guard.
    package var content: NotificationContent
    package var trace: String?
    /// `content` as its APNs payload (shared by the deliveries whose content is the same), but
    /// for each one's stamp.
    package var apnsPayload: APNSPayloadTemplate?
    /// The type's quick actions: each gets a token in the delivery's stamp.
    package var actions: [String] = []
    /// Which of its notification's contents this is: deliveries with the same variant share
    /// their rendering (`DeviceRenderer`).
    package var variant: Int = 0

    package init(
        content: NotificationContent, trace: String?, apnsPayload: APNSPayloadTemplate?, actions: [String] = [],
        variant: Int = 0
    ) {
        self.content = content
        self.trace = trace
        self.apnsPayload = apnsPayload
        self.actions = actions
        self.variant = variant
    }
}

/// A zone's quiet hours, for the policy step's memo.
private struct QuietKey: Hashable {
    var hours: QuietHours
    var zone: String
}

/// The steps of a delivery without a trace of its own, for the policy step's memo.
private struct TraceKey: Hashable {
    var steps: [PolicyStep]
}

/// What the policy step decided of a batch: what is held back (deferred, suppressed or failed),
/// what goes now, and the sends to count for pacing and grouping.
package struct DeliveryPlan: Sendable {
    package var held: [DeliveryResult] = []
    package var planned: [Int64: PlannedDelivery] = [:]
    /// The sends decided now, to be recorded before they go: a send in flight (or on another
    /// node) already counts for the next decision.
    package var paced: [(userID: String, notificationID: UUID)] = []

    package init() {}
}

/// The policy step as a pure function: per delivery of a typed notification, renders the copy
/// in the device's locale and asks the engine whether it goes now, later or not at all. Users
/// are taken in claim order, and each send decided counts at once for the next decisions, so
/// pacing and grouping hold within a batch. The stage around it reads the users and their
/// history and records `paced`.
package enum DeliveryPlanning {
    /// How far back a user's sends count for pacing and grouping.
    package static let historyWindow: TimeInterval = 3600

    /// The first step of a test send's trace.
    package static let testStep = PolicyStep(rule: "test", message: "test send: quiet hours and pacing do not apply")

    /// Plans `deliveries` of one app. `users` by user id (missing users have no preferences);
    /// `history`: what each user received within `historyWindow` (notification, when).
    package static func plan(
        _ deliveries: [ClaimedDelivery], contents: [UUID: StoredNotificationContent], users: [String: PlanningUser],
        history: [String: [(UUID, Date)]], app: PlanningApp, now: Date
    ) -> DeliveryPlan {
        var plan = DeliveryPlan()
        plan.planned.reserveCapacity(deliveries.count)
        let catalog = app.catalog
        let engine = PolicyEngine(clock: HeraldClock { now })
        var history = history
        var policyUsers: [String: PolicyUser] = [:]
        // A fan-out's devices mostly share a locale and a decision: their copy and payload are
        // rendered once (JSON encoding per device was a quarter of a typed fan-out's CPU),
        // found by what makes them differ (the notification, the locale, what the engine
        // decided), not by hashing the whole content and its data for every device. Deliveries
        // in id order come in runs of those: each memo answers a run without hashing.
        var notifications = RunMemo<UUID, NotificationEntry?>()
        var copies = RunMemo<CopyKey, CatalogCopy?>()
        var sizes = RunMemo<DeviceKey, Int>()
        var renderings = RunMemo<DeviceKey, DeviceRendering>()
        var variants = 0
        // A night-time fan-out defers most devices: the deferral of a zone's users (a calendar
        // search and a formatted date) and their decision trace (a JSON encoding) are the same
        // for all of them, so each is made once per batch.
        var deferrals = RunMemo<QuietKey, QuietDeferral?>()
        let quietHours = { (hours: QuietHours, zone: TimeZone) -> QuietDeferral? in
            deferrals.value(QuietKey(hours: hours, zone: zone.identifier)) {
                PolicyEngine.quietHoursDeferral(hours, at: now, in: zone)
            }
        }
        var traces = RunMemo<TraceKey, String?>()
        func appendTrace(_ steps: [PolicyStep], to stored: String?) -> String? {
            // Nothing to add, or a trace of the delivery's own (a track step's): no memo to share.
            guard !steps.isEmpty else { return stored }
            guard stored == nil else { return DecisionTrace.appending(steps, at: now, to: stored) }
            return traces.value(TraceKey(steps: steps)) { DecisionTrace.appending(steps, at: now, to: nil) }
        }
        for delivery in deliveries.sorted(by: { $0.id < $1.id }) {
            guard
                let notification = notifications.value(
                    delivery.notificationID, { NotificationEntry(contents[delivery.notificationID], catalog: catalog) })
            else {
                plan.held.append(DeliveryResult(delivery, .failed(reason: "TypeNotInCatalog"), attempts: 0))
                continue
            }
            let content = notification.content
            let type = notification.type
            let user = users[delivery.userID]
            let policyUser =
                policyUsers[delivery.userID]
                ?? {
                    var policyUser = (user?.preferences ?? UserPreferences()).policyUser(
                        timeZone: user?.timeZone ?? delivery.timeZone, defaultQuietHours: catalog.app.quietHours)
                    // Preferences may name a type by its external id; the engine uses names.
                    policyUser.typeEnabled = Dictionary(
                        policyUser.typeEnabled.map { (catalog.type($0.key)?.name ?? $0.key, $0.value) },
                        uniquingKeysWith: { _, last in last })
                    policyUsers[delivery.userID] = policyUser
                    return policyUser
                }()
            let pushType = content.content.pushType
            let locale = delivery.locale ?? user?.locale
            let copy = copies.value(CopyKey(notification: delivery.notificationID, locale: locale)) {
                content.copy(of: type, locale: locale, defaultLocale: catalog.app.defaultLocale)
            }
            let recent = (history[delivery.userID] ?? []).filter { $0.0 != delivery.notificationID }.map(\.1)
            // A test send goes through quiet hours and pacing as a transactional type does;
            // preferences, vacation and the guards still apply.
            let test = notification.test
            let decision = engine.decide(
                type: notification.policyType, user: policyUser, app: app.policy,
                content: content.policyContent(copy: copy), recent: recent, payloadLimit: pushType.payloadLimit,
                payloadSize: { decided in
                    sizes.value(DeviceKey(notification: delivery.notificationID, locale: locale, decided: decided)) {
                        (try? APNSRenderer.template(
                            content.deviceContent(copy: copy, decided: decided), payloadKey: app.payloadKey,
                            notificationID: delivery.notificationID, actionTokens: type.actionTokenLengths))?
                            .maximumSize ?? .max
                    }
                }, quietHours: quietHours)
            let trace = appendTrace((test ? [Self.testStep] : []) + decision.trace, to: delivery.trace)
            switch decision.outcome {
            case .send:
                let entry = renderings.value(
                    DeviceKey(notification: delivery.notificationID, locale: locale, decided: decision.content)
                ) {
                    var device = content.deviceContent(copy: copy, decided: decision.content)
                    var found = Set<String>()
                    // Every data value, at any depth (the deep link included), is scanned too.
                    if let data = device.data {
                        let scrub = PIIDetector.scrubbed(.object(data), detectors: app.policy.piiDetectors)
                        found = scrub.1
                        if !found.isEmpty { device.data = scrub.0.objectValue }
                    }
                    variants += 1
                    return DeviceRendering(
                        content: device, found: found,
                        payload: try? APNSRenderer.template(
                            device, payloadKey: app.payloadKey, notificationID: delivery.notificationID,
                            actionTokens: type.actionTokenLengths),
                        variant: variants)
                }
                var trace = trace
                if !entry.found.isEmpty {
                    trace = DecisionTrace.appending(
                        [
                            PolicyStep(
                                rule: "pii",
                                message: "data values left out: \(entry.found.sorted().joined(separator: ", ")) found")
                        ],
                        at: now, to: trace)
                }
                guard let payload = entry.payload else {
                    plan.held.append(
                        DeliveryResult(delivery, .failed(reason: "PayloadNotEncodable"), attempts: 0, trace: trace))
                    continue
                }
                plan.planned[delivery.id] = PlannedDelivery(
                    content: entry.content, trace: trace, apnsPayload: payload, actions: type.actions.map(\.id),
                    variant: entry.variant)
                if !test, !(history[delivery.userID] ?? []).contains(where: { $0.0 == delivery.notificationID }) {
                    history[delivery.userID, default: []].append((delivery.notificationID, now))
                    plan.paced.append((delivery.userID, delivery.notificationID))
                }
            case .deferred(let until):
                let reason = decision.trace.last?.rule ?? "deferred"
                plan.held.append(
                    DeliveryResult(delivery, .deferred(reason: reason, until: until), attempts: 0, trace: trace))
            case .suppressed(let reason):
                plan.held.append(DeliveryResult(delivery, .suppressed(reason: reason), attempts: 0, trace: trace))
            }
        }
        return plan
    }
}

/// What the policy step needs of a notification, found once per batch: its content, its
/// catalog type and that type's policy terms (a test send's as a transactional type's).
private struct NotificationEntry {
    var content: StoredNotificationContent
    var type: CatalogType
    var policyType: PolicyType
    var test: Bool

    /// Nil when the notification is not typed or its type is not in the catalog.
    init?(_ content: StoredNotificationContent?, catalog: Catalog) {
        guard let content, let typed = content.typed, let type = catalog.type(typed.type) else { return nil }
        self.content = content
        self.type = type
        test = typed.test == true
        policyType = type.policyType(app: catalog.app)
        if test { policyType.transactional = true }
    }
}

/// A device's content the policy engine let through, rendered once for the deliveries that share
/// it: the content, the data values the PII guard left out, its APNs payload and its variant.
private struct DeviceRendering {
    var content: NotificationContent
    var found: Set<String>
    var payload: APNSPayloadTemplate?
    var variant: Int
}

/// A notification's copy in one locale.
private struct CopyKey: Hashable {
    var notification: UUID
    var locale: String?
}

/// What a device's content is made of: its notification, its locale's copy and what the engine
/// decided (`StoredNotificationContent.deviceContent`).
private struct DeviceKey: Hashable {
    var notification: UUID
    var locale: String?
    var decided: PolicyContent
}
