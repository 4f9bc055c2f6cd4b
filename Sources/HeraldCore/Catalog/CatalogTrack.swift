package import Foundation
import HeraldPayload

/// A lifecycle track: steps that fire at offsets from an anchor (a
/// trial's start, onboarding's end), each a send of a catalog type to the enrolled user.
package struct CatalogTrack: Sendable {
    package var name: String
    /// What the anchor is (`trial_started`): documentation for the catalog's reader.
    package var anchor: String
    /// The cancel key of its steps and of the notifications they become (`track:NAME` unless
    /// the catalog names one): `POST …/cancel` with it stops the track for everyone (or the users named).
    package var cancelKey: String
    package var steps: [CatalogStep]
    package var line: Int?

    package init(name: String, anchor: String, steps: [CatalogStep] = [], cancelKey: String? = nil, line: Int? = nil) {
        self.name = name
        self.anchor = anchor
        self.steps = steps
        self.cancelKey = cancelKey ?? "track:" + name
        self.line = line
    }

    package func step(_ id: String) -> CatalogStep? { steps.first { $0.id == id } }
}

/// One step: a send of `type` `after` the anchor, at a wall-clock time in the user's zone when
/// `at` is set, skipped when the user did `unless` (an event, such as `app.opened`) since the anchor.
package struct CatalogStep: Sendable {
    package var id: String
    package var type: String
    /// Seconds after the anchor (`2d` is 172,800).
    package var after: TimeInterval
    /// A local time of day: the step fires on the day `after` reaches, at this time.
    package var at: LocalTime?
    package var unless: String?
    /// Data defaults; the enrolment's data overrides them.
    package var data: [String: String]
    package var line: Int?

    package init(
        id: String, type: String, after: TimeInterval, at: LocalTime? = nil, unless: String? = nil,
        data: [String: String] = [:],
        line: Int? = nil
    ) {
        self.id = id
        self.type = type
        self.after = after
        self.at = at
        self.unless = unless
        self.data = data
        self.line = line
    }

    /// When the step is due for an anchor, in the user's zone (`StepTime.due`, which HeraldKit's
    /// local tracks share).
    package func due(anchor: Date, zone: TimeZone) -> Date {
        StepTime.due(anchor: anchor, after: after, at: at.map { ($0.hour, $0.minute) }, zone: zone)
    }
}

/// A step planned for one user: its due time, or that it is already past.
package struct PlannedStep: Sendable, Hashable {
    package var id: String
    package var dueAt: Date

    package init(id: String, dueAt: Date) {
        self.id = id
        self.dueAt = dueAt
    }
}

extension CatalogTrack {
    /// The steps' due times for an anchor in `zone`; with `testSeconds`, every step that many
    /// seconds after the one before, from `now` (a test of the whole track in seconds).
    package func plan(anchor: Date, zone: TimeZone, testSeconds: Int? = nil, now: Date) -> [PlannedStep] {
        steps.enumerated().map { index, step in
            if let testSeconds {
                return PlannedStep(id: step.id, dueAt: now.addingTimeInterval(Double((index + 1) * testSeconds)))
            }
            return PlannedStep(id: step.id, dueAt: step.due(anchor: anchor, zone: zone))
        }
    }
}
