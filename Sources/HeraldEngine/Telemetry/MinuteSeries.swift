import Foundation

/// One minute of a per-minute series kept in memory (`DeliveryActivity`, `StageActivity`).
protocol MinuteBucket {
    /// Minutes since 1970.
    var start: Int64 { get }
    /// An empty minute.
    init(start: Int64)
}

extension Array where Element: MinuteBucket {
    /// Makes `minute` the last bucket (a new, empty one when it is not), dropping the buckets
    /// `window` minutes or more before it; returns its index.
    mutating func current(_ minute: Int64, window: Int) -> Int {
        if last?.start != minute {
            append(Element(start: minute))
            removeAll { $0.start <= minute - Int64(window) }
        }
        return count - 1
    }

    /// The last `count` minutes up to `now`, oldest first: the kept bucket of each minute, or
    /// an empty one.
    func series(now: Date, count: Int) -> [Element] {
        let current = Int64(now.timeIntervalSince1970 / 60)
        let byStart = Dictionary(map { ($0.start, $0) }, uniquingKeysWith: { $1 })
        return (0..<count).reversed().map { back in
            byStart[current - Int64(back)] ?? Element(start: current - Int64(back))
        }
    }
}
