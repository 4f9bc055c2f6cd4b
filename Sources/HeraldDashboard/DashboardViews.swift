import Foundation
import HeraldCore
import HeraldEngine
import HeraldStore
import Mustache

// What the dashboard's templates read (Mustache reads the stored properties by name).

struct LayoutView {
    /// A tab of an app's pages.
    struct Tab {
        var label: String
        var href: String
        var current: Bool
    }

    var title: String
    var content: String
    var signedIn: Bool
    var tabs: [Tab]
    var csrf: String
    var who: String
}

struct LoginPage {
    var csrf: String
    var error: String?
}

struct MessagePage {
    var heading: String
    var text: String
}

struct OverviewPage {
    /// One outbox stage's passes over the chart's minutes (this node).
    struct Stage {
        var name: String
        var what: String
        var passes: Int
        var median: String
        var p99: String
        var longest: String
        var total: String

        /// What each stage is, as the overview's table says it.
        static let descriptions = [
            "timer_fire": "a due track step or silent sync made into a notification",
            "room": "the window full: waiting for answers before claiming more",
            "claim": "due deliveries read from the outbox",
            "prepare": "contents read and the policy step",
            "provider": "submitted to APNs or FCM until the batch's last answer",
            "record": "an answer waiting until it was written",
        ]

        /// A row per stage, in the order a delivery meets them; stages without a pass included.
        static func rows(_ totals: [String: StageActivity.Totals]) -> [Stage] {
            StageActivity.stages.map { name in
                let value = totals[name] ?? StageActivity.Totals()
                return Stage(
                    name: name, what: descriptions[name] ?? "", passes: value.passes,
                    median: duration(value.quantile(0.5)), p99: duration(value.quantile(0.99)),
                    longest: duration(value.longest), total: duration(value.seconds))
            }
        }

        /// "0.8 ms", "120 ms", "3.2 s"; "–" for none.
        static func duration(_ seconds: Double) -> String {
            if seconds <= 0 { return "–" }
            if seconds < 0.01 { return String(format: "%.1f ms", seconds * 1000) }
            if seconds < 1 { return String(format: "%.0f ms", seconds * 1000) }
            return String(format: "%.1f s", seconds)
        }
    }

    var queueDepth: Int
    var deferred: Int
    var scope: String
    var oldest: String?
    var apps: [OverviewApp]
    var stages: [Stage]
    var stageChart: String
}

struct OverviewApp {
    struct Provider {
        var name: String
        var label: String
        /// The pill's class: `ok`, `bad` (paused: shown in red) or none (off).
        var state: String
        var detail: String
    }

    struct Failure {
        var reason: String
        var count: Int
    }

    var id: String
    var providers: [Provider]
    var sentLastMinute: Int
    var sentLastHour: Int
    var failedLastHour: Int
    var chart: String
    /// Deliveries due now in each lane, and those held by the policy engine.
    var urgentDue: Int
    var normalDue: Int
    var deferred: Int
    var failures: [Failure]
    /// Accepted and received per platform: the current hour and the last 24 hours (all nodes).
    var platforms: [Platform]

    struct Platform {
        var name: String
        var acceptedHour: Int64
        var receivedHour: Int64
        var rateHour: String
        var accepted: Int64
        var received: Int64
        var rate: String
        /// `bad` when the current hour's rate fell well below the day's (`PlatformRates.Platform.falling`).
        var state: String

        init(_ platform: PlatformRates.Platform) {
            name = platform.platform.uppercased()
            acceptedHour = platform.current.accepted
            receivedHour = platform.current.received
            rateHour = Self.percent(platform.currentRate, receipts: platform.total.received > 0)
            accepted = platform.total.accepted
            received = platform.total.received
            rate = Self.percent(platform.receivedRate, receipts: platform.total.received > 0)
            state = platform.falling ? "bad" : ""
        }

        /// "97.5%"; "no receipts" for a platform whose devices reported none; "–" before any delivery.
        static func percent(_ rate: Double?, receipts: Bool) -> String {
            guard receipts else { return "no receipts" }
            guard let rate else { return "–" }
            return String(format: "%.1f%%", rate * 100)
        }
    }
}

struct UsersPage {
    struct User {
        struct Device {
            var id: String
            var name: String?
            var platform: String
            var environment: String
            /// The first 8 characters and an ellipsis.
            var token: String
            var permission: String
            var active: Bool
            var reason: String
        }

        struct Badge {
            var name: String
            var value: Int64
        }

        struct Step {
            var track: String
            var step: String
            var due: String
        }

        struct Waiting {
            var notification: String
            var type: String
            var device: String
            var status: String
            var due: String
            /// The decision trace's last line ("deferred: quiet hours until 09:00 Europe/Paris").
            var why: String
        }

        var id: String
        var zone: String
        var locale: String
        var badge: Int64?
        var devices: [Device]
        var preferences: String?
        var badges: [Badge]
        var steps: [Step]
        var waiting: [Waiting]
        /// The Live Activities on the user's devices: one row per activity and device.
        var activities: [Activity]

        struct Activity {
            var id: String
            var type: String
            var status: String
            /// The last content state, as JSON.
            var state: String
            var device: String
            /// The activity on that device: starting, active, ended (with why).
            var onDevice: String
            /// The last push to the device (or its channel): event, priority, result, when.
            var lastPush: String
        }
    }

    var app: String
    var query: String
    var notFound: Bool
    var user: User?
}

struct NotificationsPage {
    struct Option {
        var name: String
        var selected: Bool
    }

    struct Row {
        var id: String
        var created: String
        var type: String
        var recipients: Int
        var sent: Int
        var failed: Int
        var deferred: Int
        var suppressed: Int
        var opened: Int
    }

    var app: String
    var types: [Option]
    var statuses: [Option]
    var rows: [Row]
    var filtered: Bool
    var next: String?
}

/// One notification: its counts and every delivery with its decision trace as a timeline.
struct NotificationPage {
    struct Count {
        var status: String
        var count: Int
        /// Drawn muted (a red "0 failed" would alarm for nothing); the live script keeps it so.
        var zero: Bool
    }

    struct Delivery {
        struct Step {
            var rule: String
            var message: String
            var at: String
        }

        var id: Int64
        var device: String
        var status: String
        var reason: String?
        var attempts: Int
        var due: String
        var updated: String
        var trace: [Step]
    }

    /// What the page's script polls (`…/live`): counts and each delivery's status, read
    /// without decoding the content or the traces the page shows.
    struct Live: Encodable {
        struct Item: Encodable {
            var id: Int64
            var status: String
        }

        var counts: [String: Int]
        var deliveries: [Item]

        init(counts: [DeliveryStatus: Int], deliveries: [DeliveryRecord]) {
            self.counts = Dictionary(
                uniqueKeysWithValues: DeliveryStatus.allCases.map { ($0.rawValue, counts[$0] ?? 0) })
            self.deliveries = deliveries.map { Item(id: $0.id, status: $0.status.rawValue) }
        }

        static func load(app: String, id: UUID, runtime: HeraldRuntime) async throws -> Live? {
            guard try await runtime.store.notifications.notification(appID: app, id: id) != nil else { return nil }
            return Live(
                counts: try await runtime.store.notifications.deliveryCounts(notificationID: id),
                deliveries: try await runtime.store.notifications.deliveries(
                    notificationID: id, limit: deliveryLimit, offset: 0))
        }
    }

    var app: String
    var id: String
    var type: String
    var created: String
    var recipients: Int
    var cancelKey: String?
    /// The OpenTelemetry trace its deliveries joined (`telemetry`), when the send was sampled.
    var traceID: String?
    /// Every status, zeros too: the live counts update the ones shown.
    var counts: [Count]
    var deliveries: [Delivery]

    static let deliveryLimit = 200

    /// The timeline's last step for a delivery that ended at a provider or was cancelled (the
    /// stored trace holds the policy engine's decisions only).
    static func outcome(_ delivery: DeliveryRecord) -> [Delivery.Step] {
        let at = Format.utc(delivery.updatedAt)
        let attempts = delivery.attempts == 1 ? "1 attempt" : "\(delivery.attempts) attempts"
        return switch delivery.status {
        case .sent: [.init(rule: "sent", message: "accepted by the provider after \(attempts)", at: at)]
        case .failed: [.init(rule: "failed", message: "\(delivery.reason ?? "failed") after \(attempts)", at: at)]
        case .cancelled:
            [
                .init(
                    rule: "cancelled",
                    message: delivery.reason.map { "cancelled: \($0)" } ?? "cancelled before it was sent", at: at)
            ]
        case .queued, .sending, .deferred, .suppressed: []
        }
    }

    static func load(app: String, id: UUID, runtime: HeraldRuntime) async throws -> NotificationPage? {
        guard let record = try await runtime.store.notifications.notification(appID: app, id: id) else { return nil }
        let counts = try await runtime.store.notifications.deliveryCounts(notificationID: id)
        let deliveries = try await runtime.store.notifications.deliveries(
            notificationID: id, limit: deliveryLimit, offset: 0)
        let content = try? JSONDecoder().decode(StoredNotificationContent.self, from: record.content)
        return NotificationPage(
            app: app, id: id.uuidString.lowercased(), type: content?.typed?.type ?? "custom",
            created: Format.utc(record.createdAt),
            recipients: record.recipients, cancelKey: record.cancelKey, traceID: content?.traceID,
            counts: DeliveryStatus.allCases.map {
                Count(status: $0.rawValue, count: counts[$0] ?? 0, zero: (counts[$0] ?? 0) == 0)
            },
            deliveries: deliveries.map { delivery in
                let trace =
                    DecisionTrace.entries(delivery.trace).map {
                        Delivery.Step(
                            rule: $0.rule, message: $0.message, at: HeraldTime.parse($0.at).map(Format.utc) ?? $0.at)
                    } + outcome(delivery)
                return Delivery(
                    id: delivery.id, device: delivery.deviceID, status: delivery.status.rawValue,
                    reason: delivery.reason, attempts: delivery.attempts,
                    due: Format.utc(delivery.dueAt), updated: Format.utc(delivery.updatedAt), trace: trace)
            })
    }
}

/// Charts drawn on the server as SVG (no script, no CDN).
enum Charts {
    /// One part of a stacked bar: its CSS class, its value and its tooltip.
    typealias Part = (css: String, value: Double, title: String)

    /// Bars of sent (green) and failed (red) per minute.
    static func activity(_ minutes: [DeliveryActivity.Minute]) -> String {
        stacked(
            minutes.map { minute in
                [
                    ("sent", Double(minute.sent), "\(minute.sent) sent"),
                    ("failed", Double(minute.failed), "\(minute.failed) failed"),
                ]
            }, label: "Sends per minute, last \(minutes.count) minutes")
    }

    /// Stacked bars of the time each outbox stage took per minute (passes overlap, so a
    /// minute may hold more than 60 s): the tallest part is the stage that held a wave.
    static func stages(_ minutes: [StageActivity.Minute]) -> String {
        stacked(
            minutes.map { minute in
                StageActivity.stages.compactMap { stage -> Part? in
                    guard let totals = minute.stages[stage] else { return nil }
                    return (
                        "stage-\(stage)", totals.seconds,
                        "\(stage): \(OverviewPage.Stage.duration(totals.seconds)) in \(totals.passes) passes"
                    )
                }
            }, label: "Time per outbox stage per minute, last \(minutes.count) minutes")
    }

    /// An SVG of one bar per column, its parts stacked from the bottom in order (parts of 0
    /// are left out), scaled to the tallest column.
    static func stacked(_ columns: [[Part]], label: String) -> String {
        let width = 600.0
        let height = 80.0
        let top = max(0.001, columns.map { $0.reduce(0) { $0 + $1.value } }.max() ?? 0)
        let step = width / Double(max(1, columns.count))
        var bars = ""
        for (index, parts) in columns.enumerated() {
            let x = Double(index) * step
            var base = height
            for part in parts where part.value > 0 {
                let size = part.value / top * (height - 2)
                base -= size
                bars +=
                    #"<rect class="\#(part.css)" x="\#(fmt(x))" y="\#(fmt(base))" width="\#(fmt(step * 0.8))" height="\#(fmt(size))"><title>\#(part.title)</title></rect>"#
            }
        }
        return
            #"<svg class="chart" viewBox="0 0 \#(Int(width)) \#(Int(height))" preserveAspectRatio="none" role="img" aria-label="\#(label)">\#(bars)</svg>"#
    }

    static func fmt(_ value: Double) -> String { String(format: "%.1f", value) }
}

// A notification's page repeats these up to `deliveryLimit` times: looked up by name here
// rather than through Mirror (which reflected every field for each lookup: ~70 ms for 200).
extension NotificationPage.Delivery: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "id": id
        case "device": device
        case "status": status
        case "reason": reason as Any?
        case "attempts": attempts
        case "due": due
        case "updated": updated
        case "trace": trace
        default: nil
        }
    }
}

extension NotificationPage.Delivery.Step: MustacheParent {
    func child(named name: String) -> Any? {
        switch name {
        case "rule": rule
        case "message": message
        case "at": at
        default: nil
        }
    }
}
