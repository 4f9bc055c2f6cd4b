import Foundation
import HeraldCore
import HeraldStore

/// The policy step's stage: per app, reads the batch's users and what they received in the last
/// hour, plans with `DeliveryPlanning` (no I/O) and records the sends it decided before they
/// go, so pacing and grouping hold across batches in flight together and across nodes.
struct DeliveryPlanner {
    let runtime: HeraldRuntime

    func plan(
        _ deliveries: [ClaimedDelivery], contents: [UUID: StoredNotificationContent]
    ) async throws -> (held: [DeliveryResult], planned: [Int64: PlannedDelivery]) {
        var held: [DeliveryResult] = []
        var planned: [Int64: PlannedDelivery] = [:]
        planned.reserveCapacity(deliveries.count)
        let now = runtime.store.now
        for (appID, appDeliveries) in Dictionary(grouping: deliveries, by: \.appID) {
            guard let planning = runtime.apps[appID]?.planning else {
                held += appDeliveries.map { DeliveryResult($0, .failed(reason: "CatalogNotConfigured"), attempts: 0) }
                continue
            }
            let userIDs = Array(Set(appDeliveries.map(\.userID)))
            let decoder = JSONDecoder()
            let users = try await runtime.store.users.users(appID: appID, ids: userIDs).mapValues { record in
                PlanningUser(
                    timeZone: record.timeZone, locale: record.locale,
                    preferences: Self.preferences(record.preferences, decoder))
            }
            let history =
                planning.countsSends
                ? try await runtime.store.outbox.recentSends(
                    appID: appID, userIDs: userIDs, since: now.addingTimeInterval(-DeliveryPlanning.historyWindow))
                : [:]
            let plan = DeliveryPlanning.plan(
                appDeliveries, contents: contents, users: users, history: history, app: planning, now: now)
            held += plan.held
            planned.merge(plan.planned) { first, _ in first }
            if planning.countsSends {
                try await runtime.store.outbox.recordUserSends(appID: appID, sends: plan.paced, at: now)
            }
        }
        return (held, planned)
    }

    /// A user's stored preferences; none set (the common case) without a JSON decoding.
    static func preferences(_ data: Data, _ decoder: JSONDecoder) -> UserPreferences {
        if data.isEmpty || data.elementsEqual("{}".utf8) { return UserPreferences() }
        return (try? decoder.decode(UserPreferences.self, from: data)) ?? UserPreferences()
    }
}
