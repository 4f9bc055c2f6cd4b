package import Foundation
import Synchronization

/// Where this node's outbox spent its time lately (the dashboard's overview): per minute and
/// per stage, the passes, their total and longest time, and a count per latency bucket for the
/// median and the 99th percentile. Kept in memory beside `herald_outbox_stage_seconds`, which
/// Prometheus keeps for longer; each node shows its own.
package final class StageActivity: Sendable {
    /// The stages in the order a delivery meets them.
    package static let stages = ["timer_fire", "room", "claim", "prepare", "provider", "record"]
    /// Upper bounds of the latency buckets, in seconds (the last bucket is open).
    static let bounds: [Double] = [
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
    ]

    /// One stage's passes over some minutes.
    package struct Totals: Sendable, Equatable {
        package var passes = 0
        package var seconds = 0.0
        package var longest = 0.0
        var buckets = [Int](repeating: 0, count: StageActivity.bounds.count + 1)

        package init() {}

        mutating func add(_ other: Totals) {
            passes += other.passes
            seconds += other.seconds
            longest = max(longest, other.longest)
            for index in buckets.indices { buckets[index] += other.buckets[index] }
        }

        /// The upper bound of the bucket holding the `fraction` quantile (the longest pass for
        /// the open bucket), 0 without passes.
        package func quantile(_ fraction: Double) -> Double {
            guard passes > 0 else { return 0 }
            let rank = max(1, Int((Double(passes) * fraction).rounded(.up)))
            var seen = 0
            for (index, count) in buckets.enumerated() {
                seen += count
                if seen >= rank {
                    return index < StageActivity.bounds.count ? min(StageActivity.bounds[index], longest) : longest
                }
            }
            return longest
        }
    }

    /// One minute: the totals of each stage that had a pass in it.
    package struct Minute: Sendable, Equatable, MinuteBucket {
        package var start: Int64
        package var stages: [String: Totals] = [:]

        init(start: Int64) { self.start = start }
    }

    static let window = 60
    private let minutes = Mutex<[Minute]>([])

    /// One pass through `stage` that took `seconds`, finished at `date`.
    func record(_ stage: String, seconds: Double, at date: Date) {
        let minute = Int64(date.timeIntervalSince1970 / 60)
        let bucket = Self.bounds.firstIndex { seconds <= $0 } ?? Self.bounds.count
        minutes.withLock { minutes in
            let index = minutes.current(minute, window: Self.window)
            var totals = minutes[index].stages[stage] ?? Totals()
            totals.passes += 1
            totals.seconds += seconds
            totals.longest = max(totals.longest, seconds)
            totals.buckets[bucket] += 1
            minutes[index].stages[stage] = totals
        }
    }

    /// The last `count` minutes up to `now` (empty minutes included, oldest first).
    package func snapshot(now: Date, minutes count: Int = 15) -> [Minute] {
        minutes.withLock { $0 }.series(now: now, count: count)
    }

    /// Each stage's totals over `minutes`.
    package static func totals(_ minutes: [Minute]) -> [String: Totals] {
        var totals: [String: Totals] = [:]
        for minute in minutes {
            for (stage, value) in minute.stages { totals[stage, default: Totals()].add(value) }
        }
        return totals
    }
}
