import Foundation
import HeraldCore
import HeraldPayload
import HeraldStore

/// The policy step (issue #4): per delivery of a typed notification, renders the copy in the
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
            var history = counting
                ? try await runtime.store.recentSends(appID: appID, userIDs: userIDs, since: now.addingTimeInterval(-3600)) : [:]
            var policyUsers: [String: PolicyUser] = [:]
            var paced: [(String, UUID)] = []
            let payloadKey = app.configuration.payloadKey
            // A fan-out's devices mostly share a locale and a decision: their copy and payload are
            // rendered once (JSON encoding per device was a quarter of a typed fan-out's CPU),
            // found by what makes them differ (the notification, the locale, what the engine
            // decided), not by hashing the whole content and its data for every device.
            var copies: [CopyKey: CatalogCopy] = [:]
            var sizes: [DeviceKey: Int] = [:]
            var sendable: [DeviceKey: (content: NotificationContent, found: Set<String>, payload: APNSPayloadTemplate?)] = [:]
            for delivery in appDeliveries.sorted(by: { $0.id < $1.id }) {
                guard let typed = contents[delivery.notificationID]?.typed, let content = contents[delivery.notificationID],
                    let type = catalog.type(typed.type)
                else {
                    held.append(DeliveryResult(delivery, .failed(reason: "TypeNotInCatalog"), attempts: 0))
                    continue
                }
                let user = users[delivery.userID]
                let policyUser = policyUsers[delivery.userID] ?? {
                    let preferences = user.flatMap { try? JSONDecoder().decode(UserPreferences.self, from: $0.preferences) }
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
                let copy = copies[CopyKey(notification: delivery.notificationID, locale: locale)] ?? {
                    let copy = content.copy(of: type, locale: locale, defaultLocale: catalog.app.defaultLocale)
                    copies[CopyKey(notification: delivery.notificationID, locale: locale)] = copy
                    return copy
                }()
                let recent = (history[delivery.userID] ?? []).filter { $0.0 != delivery.notificationID }.map(\.1)
                // A test send (`POST …/test`) goes through quiet hours and pacing as a
                // transactional type does; preferences, vacation and the guards still apply.
                let test = typed.test == true
                var policyType = type.policyType(app: catalog.app)
                if test { policyType.transactional = true }
                let decision = engine.decide(
                    type: policyType, user: policyUser, app: policyApp,
                    content: content.policyContent(copy: copy), recent: recent, payloadLimit: pushType.payloadLimit,
                    payloadSize: { decided in
                        let key = DeviceKey(notification: delivery.notificationID, locale: locale, decided: decided)
                        if let size = sizes[key] { return size }
                        let size = (try? APNSRenderer.template(
                            content.deviceContent(copy: copy, decided: decided), payloadKey: payloadKey, notificationID: delivery.notificationID,
                            actionTokens: type.actionTokenLengths))?
                            .maximumSize ?? .max
                        sizes[key] = size
                        return size
                    })
                let trace = DecisionTrace.appending((test ? [Self.testStep] : []) + decision.trace, at: now, to: delivery.trace)
                switch decision.outcome {
                case .send:
                    let key = DeviceKey(notification: delivery.notificationID, locale: locale, decided: decision.content)
                    let (device, found, payload) = sendable[key] ?? {
                        var device = content.deviceContent(copy: copy, decided: decision.content)
                        var found = Set<String>()
                        // Every data value, at any depth (the deep link included), is scanned too.
                        if let data = device.data {
                            let scrub = PIIDetector.scrubbed(.object(data), detectors: policyApp.piiDetectors)
                            found = scrub.1
                            if !found.isEmpty { device.data = scrub.0.objectValue }
                        }
                        let entry = (
                            device, found,
                            try? APNSRenderer.template(
                                device, payloadKey: payloadKey, notificationID: delivery.notificationID, actionTokens: type.actionTokenLengths)
                        )
                        sendable[key] = entry
                        return entry
                    }()
                    var trace = trace
                    if !found.isEmpty {
                        trace = DecisionTrace.appending(
                            [PolicyStep(rule: "pii", message: "data values left out: \(found.sorted().joined(separator: ", ")) found")],
                            at: now, to: trace)
                    }
                    guard let payload else {
                        held.append(DeliveryResult(delivery, .failed(reason: "PayloadNotEncodable"), attempts: 0, trace: trace))
                        continue
                    }
                    planned[delivery.id] = PlannedDelivery(content: device, trace: trace, apnsPayload: payload, actions: type.actions.map(\.id))
                    if !test, !(history[delivery.userID] ?? []).contains(where: { $0.0 == delivery.notificationID }) {
                        history[delivery.userID, default: []].append((delivery.notificationID, now))
                        paced.append((delivery.userID, delivery.notificationID))
                    }
                case .deferred(let until):
                    let reason = decision.trace.last?.rule ?? "deferred"
                    held.append(DeliveryResult(delivery, .deferred(reason: reason, until: until), attempts: 0, trace: trace))
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

extension CatalogType {
    /// The byte lengths of each action's id and token (what a stamp's `a` adds to a payload).
    var actionTokenLengths: [(id: Int, token: Int)] {
        actions.map { ($0.id.utf8.count, ActionToken.length(action: $0.id)) }
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
