package import Foundation
package import HeraldCore
import Synchronization

/// The clock `POST /v1/dev/clock` moves: under `herald serve --dev` the system time plus what
/// was added (time flows), under `clock: manual` a time that stands still until moved (tests
/// that must not race the wall clock). Schedules, quiet hours, pacing and the outbox's due
/// times read it through the store.
package final class DevClock: Sendable {
    private struct State {
        var offset: TimeInterval = 0
        var frozenAt: Date?
    }

    private let state: Mutex<State>

    /// A flowing clock (`frozenAt` nil) or one standing at `frozenAt`.
    package init(frozenAt: Date? = nil) {
        state = Mutex(State(frozenAt: frozenAt))
    }

    /// The clock a server runs on: movable under `--dev` or `clock: manual`, else none.
    package static func make(dev: Bool, setting: HeraldConfiguration.ClockSetting) -> DevClock? {
        switch setting {
        case .manual: DevClock(frozenAt: Date())
        case .system: dev ? DevClock() : nil
        }
    }

    package var now: Date {
        state.withLock { state in (state.frozenAt ?? Date()).addingTimeInterval(state.offset) }
    }

    /// Moves the clock forward by `seconds`; false (and unmoved) when that would take it more
    /// than `maximumOffset` past where it started.
    package func advance(by seconds: TimeInterval) -> Bool {
        state.withLock { state in
            guard state.offset + seconds <= Self.maximumOffset else { return false }
            state.offset += seconds
            return true
        }
    }

    package var clock: HeraldClock { HeraldClock { [self] in now } }

    /// The most one call may move it: a year.
    package static let maximumAdvance: TimeInterval = 366 * 86_400
    /// The farthest it may get from where it started: ten years (dates stay ordinary).
    package static let maximumOffset: TimeInterval = 3_650 * 86_400
}
