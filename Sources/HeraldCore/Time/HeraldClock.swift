public import Foundation
import Synchronization

/// The wall clock every time-dependent rule reads, injected so tests control time.
public struct HeraldClock: Sendable {
    private let read: @Sendable () -> Date

    public init(_ read: @escaping @Sendable () -> Date) { self.read = read }

    /// The current time.
    public func now() -> Date { read() }

    /// The system clock.
    public static let system = HeraldClock { Date() }

    /// A clock that stands still until moved: for tests.
    public static func manual(_ clock: ManualClock) -> HeraldClock { HeraldClock { clock.now } }
}

/// A clock moved by hand. Thread-safe.
public final class ManualClock: Sendable {
    private let current: Mutex<Date>

    public init(_ start: Date = Date(timeIntervalSince1970: 1_800_000_000)) { current = Mutex(start) }

    public var now: Date { current.withLock { $0 } }

    /// Moves the clock forward.
    public func advance(by seconds: TimeInterval) { current.withLock { $0 += seconds } }

    /// Sets the clock.
    public func set(_ date: Date) { current.withLock { $0 = date } }

    /// A `HeraldClock` reading this clock.
    public var clock: HeraldClock { .manual(self) }
}

extension Duration {
    /// The duration in seconds, as a `Double`.
    package var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
