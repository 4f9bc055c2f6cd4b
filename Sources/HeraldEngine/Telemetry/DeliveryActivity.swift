package import Foundation
import Synchronization

/// What this node sent lately, per app (the dashboard's overview): finished
/// deliveries per minute over the last hour, and failures by reason since the process started.
/// Kept in memory by the metrics' delivery counter; each node shows its own.
package final class DeliveryActivity: Sendable {
    package struct Minute: Sendable, Equatable {
        var start: Int64
        package var sent = 0
        package var failed = 0
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
                if app.minutes.last?.start != minute { app.minutes.append(Minute(start: minute)) }
                if key.status == "sent" {
                    app.minutes[app.minutes.count - 1].sent += count
                } else {
                    app.minutes[app.minutes.count - 1].failed += count
                    app.failures[key.reason, default: 0] += count
                }
                app.minutes.removeAll { $0.start <= minute - Int64(Self.window) }
                apps[key.app] = app
            }
        }
    }

    /// The last `minutes` minutes up to `now` (empty minutes included, oldest first), and the
    /// failures by reason, most first.
    package func snapshot(app: String, now: Date, minutes: Int = 30) -> (
        minutes: [Minute], failures: [(reason: String, count: Int)]
    ) {
        let current = Int64(now.timeIntervalSince1970 / 60)
        let state = apps.withLock { $0[app] } ?? App()
        let byStart = Dictionary(state.minutes.map { ($0.start, $0) }, uniquingKeysWith: { $1 })
        let series = (0..<minutes).reversed().map { back in
            byStart[current - Int64(back)] ?? Minute(start: current - Int64(back))
        }
        let failures = state.failures.sorted { ($0.value, $1.key) > ($1.value, $0.key) }.map {
            (reason: $0.key, count: $0.value)
        }
        return (series, failures)
    }
}
