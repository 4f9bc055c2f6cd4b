package import Foundation
import Synchronization

/// The wall clock every time-dependent rule reads, injected so tests control time.
package struct HeraldClock: Sendable {
    private let read: @Sendable () -> Date

    package init(_ read: @escaping @Sendable () -> Date) { self.read = read }

    /// The current time.
    package func now() -> Date { read() }

    /// The system clock.
    package static let system = HeraldClock { Date() }

    /// A clock that stands still until moved: for tests.
    package static func manual(_ clock: ManualClock) -> HeraldClock { HeraldClock { clock.now } }
}

/// A clock moved by hand. Thread-safe.
package final class ManualClock: Sendable {
    private let current: Mutex<Date>

    package init(_ start: Date = Date(timeIntervalSince1970: 1_800_000_000)) { current = Mutex(start) }

    package var now: Date { current.withLock { $0 } }

    /// Moves the clock forward.
    package func advance(by seconds: TimeInterval) { current.withLock { $0 += seconds } }

    /// Sets the clock.
    package func set(_ date: Date) { current.withLock { $0 = date } }

    /// A `HeraldClock` reading this clock.
    package var clock: HeraldClock { .manual(self) }
}

extension Duration {
    /// The duration in seconds, as a `Double`.
    package var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
