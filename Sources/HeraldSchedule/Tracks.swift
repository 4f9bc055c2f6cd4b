package import Foundation
import HeraldCore
package import HeraldEngine
import HeraldPayload
import HeraldStore
import Logging

/// Lifecycle tracks on the server: a user's zone, enrolment, re-planning when the
/// zone changes.
package enum Tracks {
    /// The zone a user's wall-clock steps are planned in: the user's `time_zone`, else one of
    /// their devices', else UTC.
    package static func zone(appID: String, userID: String, runtime: HeraldRuntime) async throws -> TimeZone {
        if let name = try await runtime.store.users.user(appID: appID, userID: userID)?.timeZone,
            let zone = TimeZone(identifier: name)
        {
            return zone
        }
        let devices = try await runtime.store.devices.devices(appID: appID, userID: userID)
        if let name = devices.sorted(by: { $0.updatedAt > $1.updatedAt }).compactMap(\.timeZone).first,
            let zone = TimeZone(identifier: name)
        {
            return zone
        }
        return TimeZone(identifier: "UTC")!
    }

    /// Re-plans a user's pending wall-clock steps for a new zone (the user's `time_zone`
    /// changed), each move written to the step's trace, which its deliveries start with.
    package static func replan(
        app: AppRuntime, userID: String, from old: TimeZone?, to new: TimeZone, runtime: HeraldRuntime
    )
        async throws
    {
        guard let catalog = app.catalog, !catalog.tracks.isEmpty else { return }
        var moves: [(timerID: Int64, dueAt: Date, trace: String?)] = []
        for pending in try await runtime.store.tracks.pendingSteps(appID: app.id, userID: userID)
        where pending.testSeconds == nil {
            guard let step = catalog.track(pending.track)?.step(pending.step), let at = step.at else { continue }
            let due = step.due(anchor: pending.anchorAt, zone: new)
            guard due != pending.dueAt else { continue }
            let message =
                "time zone \(old?.identifier ?? "unknown") → \(new.identifier): step \(pending.track).\(pending.step) at \(at) local moves from \(HeraldTime.format(pending.dueAt)) to \(HeraldTime.format(due))"
            let trace = DecisionTrace.appending(
                [PolicyStep(rule: "schedule", message: message)], at: runtime.store.now, to: pending.trace)
            moves.append((pending.timerID, due, trace))
        }
        let moved = try await runtime.store.tracks.moveSteps(moves)
        if moved > 0 {
            runtime.timerWake.signal()
            runtime.logger.info(
                "Track steps re-planned for a new time zone",
                metadata: [
                    "herald.app": "\(app.id)", "herald.steps": "\(moved)", "herald.time_zone": "\(new.identifier)",
                ])
        }
    }
}
