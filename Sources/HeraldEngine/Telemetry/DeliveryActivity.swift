package import Foundation
import Synchronization

/// What this node sent lately, per app (the dashboard's overview): finished
/// deliveries per minute over the last hour, and failures by reason since the process started.
/// Kept in memory by the metrics' delivery counter; each node shows its own.
package final class DeliveryActivity: Sendable {
    package struct Minute: Sendable, Equatable, MinuteBucket {
        var start: Int64
        package var sent = 0
        package var failed = 0

        init(start: Int64) { self.start = start }
    }

    private struct App {
        var minutes: [Minute] = []
        var failures: [String: Int] = [:]
    }

    static let window = 60
    private let apps = Mutex<[String: App]>([:])

    /// Counts of one batch (status `sent` and `failed`; others are not sends).
    func record(_ counts: [DeliveryCountKey: Int], at date: Date) {
        let minute = Int64(date.timeIntervalSince1970 / 60)
        apps.withLock { apps in
            for (key, count) in counts where key.status == "sent" || key.status == "failed" {
                var app = apps[key.app] ?? App()
                let index = app.minutes.current(minute, window: Self.window)
                if key.status == "sent" {
                    app.minutes[index].sent += count
                } else {
                    app.minutes[index].failed += count
                    app.failures[key.reason, default: 0] += count
                }
                apps[key.app] = app
            }
        }
    }

    /// The last `minutes` minutes up to `now` (empty minutes included, oldest first), and the
    /// failures by reason, most first.
    package func snapshot(app: String, now: Date, minutes: Int = 30) -> (
        minutes: [Minute], failures: [(reason: String, count: Int)]
    ) {
        let state = apps.withLock { $0[app] } ?? App()
        let series = state.minutes.series(now: now, count: minutes)
        let failures = state.failures.sorted { ($0.value, $1.key) > ($1.value, $0.key) }.map {
            (reason: $0.key, count: $0.value)
        }
        return (series, failures)
    }
}
