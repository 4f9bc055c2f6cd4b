import Foundation
import HeraldCore
import HeraldStore
import Logging
import Synchronization

/// Says when a type misses its click-through goal: a type with a `goal_ctr`,
/// at least 200 sends over the last 7 days (UTC, today included) and a rate under the goal is
/// logged as a warning once a day (per process), from the retention loop.
package final class GoalWatch: Sendable {
    /// The UTC day each (app, type) was last reported on.
    private let reported = Mutex<[String: Int64]>([:])

    /// Days looked back, today included.
    static let window: Int64 = 7

    package init() {}

    /// Checks every app with goals; returns the `app/type` pairs it reported now.
    @discardableResult
    package func check(_ runtime: HeraldRuntime) async -> [String] {
        let today = Int64((runtime.store.now.timeIntervalSince1970 / 86_400).rounded(.down))
        var now: [String] = []
        for app in runtime.apps.values.sorted(by: { $0.id < $1.id }) {
            guard let catalog = app.catalog, catalog.types.contains(where: { $0.goalCTR != nil }),
                let rows = try? await runtime.store.tracks.typeCounts(
                    appID: app.id, days: (today - Self.window + 1)...today)
            else { continue }
            var totals: [String: AnalyticsView.Counts] = [:]
            for row in rows { totals[row.type, default: AnalyticsView.Counts()].add(row) }
            for type in catalog.types {
                guard let goal = type.goalCTR, let counts = totals[type.name] else { continue }
                let entry = AnalyticsView.TypeEntry(type: type.name, id: type.id, counts: counts, goal: goal)
                guard entry.belowGoal else { continue }
                let key = app.id + "/" + type.name
                let first = reported.withLock { reported in
                    guard reported[key] != today else { return false }
                    reported[key] = today
                    return true
                }
                guard first else { continue }
                now.append(key)
                runtime.logger.warning(
                    "A type's click-through rate is below its goal",
                    metadata: [
                        "herald.app": "\(app.id)", "herald.type": "\(type.name)", "herald.type_id": "\(type.id ?? "")",
                        "herald.ctr": "\(AnalyticsView.rounded(counts.ctr ?? 0))", "herald.goal_ctr": "\(goal)",
                        "herald.sent": "\(counts.sent)", "herald.days": "\(Self.window)",
                    ])
            }
        }
        return now
    }
}
