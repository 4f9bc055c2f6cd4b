import Foundation
import HeraldCore
import HeraldPayload
import HeraldStore

/// The policy step: per delivery of a typed notification, renders the copy in the
/// device's locale and asks the engine whether it goes now, later or not at all. Users are
/// taken in claim order, and sends decided count at once for the next decisions (recorded in
/// the store before sending), so pacing and grouping hold within a batch, across batches in
/// flight together, and across nodes.
struct DeliveryPlanner {
    let runtime: HeraldRuntime

    func plan(
        _ deliveries: [ClaimedDelivery], contents: [UUID: StoredNotificationContent]
    ) async throws -> (held: [DeliveryResult], planned: [Int64: PlannedDelivery]) {
        var held: [DeliveryResult] = []
        var planned: [Int64: PlannedDelivery] = [:]
        planned.reserveCapacity(deliveries.count)
        let now = runtime.store.now
        let engine = PolicyEngine(clock: HeraldClock { now })
        for (appID, appDeliveries) in Dictionary(grouping: deliveries, by: \.appID) {
            guard let app = runtime.apps[appID], let catalog = app.catalog, let policyApp = app.policyApp else {
                for delivery in appDeliveries {
                    held.append(DeliveryResult(delivery, .failed(reason: "CatalogNotConfigured"), attempts: 0))
                }
                continue
            }
            let userIDs = Array(Set(appDeliveries.map(\.userID)))
            let users = try await runtime.store.users(appID: appID, ids: userIDs)
            // What each user received in the last hour matters to pacing and grouping alone: an
            // app with neither neither reads nor writes it.
            let counting = policyApp.pacingLimit != nil || policyApp.groupingThreshold != nil
            var history =
                counting
                ? try await runtime.store.recentSends(
                    appID: appID, userIDs: userIDs, since: now.addingTimeInterval(-3600)) : [:]
            var policyUsers: [String: PolicyUser] = [:]
            policyUsers.reserveCapacity(userIDs.count)
            var paced: [(String, UUID)] = []
            let payloadKey = app.configuration.payloadKey
            // A fan-out's devices mostly share a locale and a decision: their copy and payload are
            // rendered once (JSON encoding per device was a quarter of a typed fan-out's CPU),
            // found by what makes them differ (the notification, the locale, what the engine
            // decided), not by hashing the whole content and its data for every device. Deliveries
            // in id order come in runs of those: each memo answers a run without hashing.
            var notifications = RunMemo<UUID, NotificationEntry?>()
            var copies = RunMemo<CopyKey, CatalogCopy?>()
            var sizes = RunMemo<DeviceKey, Int>()
            var renderings = RunMemo<DeviceKey, DeviceRendering>()
            for delivery in appDeliveries.sorted(by: { $0.id < $1.id }) {
                guard
                    let notification = notifications.value(
                        delivery.notificationID,
                        {
                            NotificationEntry(contents[delivery.notificationID], catalog: catalog)
                        })
                else {
                    held.append(DeliveryResult(delivery, .failed(reason: "TypeNotInCatalog"), attempts: 0))
                    continue
                }
                let content = notification.content
                let type = notification.type
                let user = users[delivery.userID]
                let policyUser =
                    policyUsers[delivery.userID]
                    ?? {
                        let preferences =
                            user.flatMap { try? JSONDecoder().decode(UserPreferences.self, from: $0.preferences) }
                            ?? UserPreferences()
                        var policyUser = preferences.policyUser(
                            timeZone: user?.timeZone ?? delivery.timeZone, defaultQuietHours: catalog.app.quietHours)
                        // Preferences may name a type by its external id (PN-01); the engine uses names.
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
                // A test send (`POST …/test`) goes through quiet hours and pacing as a
                // transactional type does; preferences, vacation and the guards still apply.
                let test = notification.test
                let decision = engine.decide(
                    type: notification.policyType, user: policyUser, app: policyApp,
                    content: content.policyContent(copy: copy), recent: recent, payloadLimit: pushType.payloadLimit,
                    payloadSize: { decided in
                        sizes.value(DeviceKey(notification: delivery.notificationID, locale: locale, decided: decided))
                        {
                            (try? APNSRenderer.template(
                                content.deviceContent(copy: copy, decided: decided), payloadKey: payloadKey,
                                notificationID: delivery.notificationID,
                                actionTokens: type.actionTokenLengths))?
                                .maximumSize ?? .max
                        }
                    })
                let trace = DecisionTrace.appending(
                    (test ? [Self.testStep] : []) + decision.trace, at: now, to: delivery.trace)
                switch decision.outcome {
                case .send:
                    let entry = renderings.value(
                        DeviceKey(notification: delivery.notificationID, locale: locale, decided: decision.content)
                    ) {
                        var device = content.deviceContent(copy: copy, decided: decision.content)
                        var found = Set<String>()
                        // Every data value, at any depth (the deep link included), is scanned too.
                        if let data = device.data {
                            let scrub = PIIDetector.scrubbed(.object(data), detectors: policyApp.piiDetectors)
                            found = scrub.1
                            if !found.isEmpty { device.data = scrub.0.objectValue }
                        }
                        return DeviceRendering(
                            content: device, found: found,
                            payload: try? APNSRenderer.template(
                                device, payloadKey: payloadKey, notificationID: delivery.notificationID,
                                actionTokens: type.actionTokenLengths))
                    }
                    let (device, found, payload) = (entry.content, entry.found, entry.payload)
                    var trace = trace
                    if !found.isEmpty {
                        trace = DecisionTrace.appending(
                            [
                                PolicyStep(
                                    rule: "pii",
                                    message: "data values left out: \(found.sorted().joined(separator: ", ")) found")
                            ],
                            at: now, to: trace)
                    }
                    guard let payload else {
                        held.append(
                            DeliveryResult(delivery, .failed(reason: "PayloadNotEncodable"), attempts: 0, trace: trace))
                        continue
                    }
                    planned[delivery.id] = PlannedDelivery(
                        content: device, trace: trace, apnsPayload: payload, actions: type.actions.map(\.id))
                    if !test, !(history[delivery.userID] ?? []).contains(where: { $0.0 == delivery.notificationID }) {
                        history[delivery.userID, default: []].append((delivery.notificationID, now))
                        paced.append((delivery.userID, delivery.notificationID))
                    }
                case .deferred(let until):
                    let reason = decision.trace.last?.rule ?? "deferred"
                    held.append(
                        DeliveryResult(delivery, .deferred(reason: reason, until: until), attempts: 0, trace: trace))
                case .suppressed(let reason):
                    held.append(DeliveryResult(delivery, .suppressed(reason: reason), attempts: 0, trace: trace))
                }
            }
            // Counted for pacing and grouping when decided, not when answered: a send in flight
            // (or on another node) already counts for the next decision.
            if counting { try await runtime.store.recordUserSends(appID: appID, sends: paced, at: now) }
        }
        return (held, planned)
    }

    /// The first step of a test send's trace.
    static let testStep = PolicyStep(rule: "test", message: "test send: quiet hours and pacing do not apply")
}

/// A typed delivery the policy engine let through: its own content and the trace to store.
struct PlannedDelivery: Sendable {
    /// In the device's locale, after the policy engine and the PII guard.
    var content: NotificationContent
    var trace: String?
    /// `content` as its APNs payload (shared by the deliveries whose content is the same), but
    /// for each one's stamp.
    var apnsPayload: APNSPayloadTemplate?
    /// The type's quick actions: each gets a token in the delivery's stamp.
    var actions: [String] = []
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
/// it: the content, the data values the PII guard left out, and its APNs payload.
private struct DeviceRendering {
    var content: NotificationContent
    var found: Set<String>
    var payload: APNSPayloadTemplate?
}

/// A dictionary that keeps the last entry it answered beside it: a run of lookups of one key
/// (deliveries in id order come in runs of one notification and locale) is answered without
/// hashing the key. Values are made once per key, by `make`.
private struct RunMemo<Key: Hashable, Value> {
    private var values: [Key: Value] = [:]
    private var last: (key: Key, value: Value)?

    mutating func value(_ key: Key, _ make: () -> Value) -> Value {
        if let last, last.key == key { return last.value }
        let value =
            values[key]
            ?? {
                let value = make()
                values[key] = value
                return value
            }()
        last = (key, value)
        return value
    }
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
