package import Foundation
import HeraldAPNs
package import HeraldStore
import Metrics
import Prometheus
import Synchronization

/// What `/metrics` shows, in Prometheus' text format: swift-metrics objects over this runtime's
/// own swift-prometheus registry (not the process-wide bootstrap, so several servers can run in
/// one process, as the tests do). swift-prometheus escapes label values; reasons from APNs and
/// FCM outside the known set are counted as `other`, so a peer cannot grow the label set.
///
/// The hot path stays cold: the dispatcher counts a batch's outcomes itself and adds them here
/// once per batch.
package final class HeraldMetrics: Sendable {
    private let registry = PrometheusCollectorRegistry()
    private let factory: PrometheusMetricsFactory
    private let handles = Mutex<[String: any AnyObject & Sendable]>([:])

    private let apnsBatch: CoreMetrics.Timer
    private let apnsRequest: CoreMetrics.Timer
    private let fcmRequest: CoreMetrics.Timer
    private let lastBatch: CoreMetrics.Gauge
    private let lastBatchAt = Atomic<Int64>(0)
    private let outboxProbe = Mutex<(@Sendable () -> (inFlight: Int, unwritten: Int))?>(nil)
    /// Sends per minute and failures by reason per app, for the dashboard.
    package let activity = DeliveryActivity()
    /// Time per outbox stage per minute, for the dashboard.
    package let stages = StageActivity()

    static let batchBuckets: [Double] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
    static let requestBuckets: [Double] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
    /// A receipt comes within a second of the acceptance when the device is online, hours later
    /// when it was off.
    static let receiptBuckets: [Double] = [0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3_600, 21_600, 86_400]

    package init() {
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.durationHistogramBuckets = [
            "herald_apns_batch_seconds": Self.batchBuckets.map { .nanoseconds(Int64($0 * 1e9)) },
            "herald_apns_request_seconds": Self.requestBuckets.map { .nanoseconds(Int64($0 * 1e9)) },
            "herald_fcm_request_seconds": Self.requestBuckets.map { .nanoseconds(Int64($0 * 1e9)) },
            "herald_outbox_store_seconds": Self.requestBuckets.map { .nanoseconds(Int64($0 * 1e9)) },
            "herald_outbox_stage_seconds": Self.requestBuckets.map { .nanoseconds(Int64($0 * 1e9)) },
            "herald_receipt_latency_seconds": Self.receiptBuckets.map { .nanoseconds(Int64($0 * 1e9)) },
        ]
        self.factory = factory
        apnsBatch = Timer(label: "herald_apns_batch_seconds", dimensions: [], factory: factory)
        apnsRequest = Timer(label: "herald_apns_request_seconds", dimensions: [], factory: factory)
        fcmRequest = Timer(label: "herald_fcm_request_seconds", dimensions: [], factory: factory)
        lastBatch = Gauge(label: "herald_last_batch_timestamp_seconds", dimensions: [], factory: factory)
        for name in ["herald_restart_resends_total", "herald_journaled_answers_total"] {
            counter(name, []).increment(by: 0)
        }
    }

    /// The swift-metrics object for a label and dimensions, made once and kept.
    private func handle<Metric: AnyObject & Sendable>(
        _ label: String, _ dimensions: [(String, String)], make: () -> Metric
    ) -> Metric {
        let key = Self.key(label, dimensions)
        return handles.withLock { handles in
            if let existing = handles[key] as? Metric { return existing }
            let metric = make()
            handles[key] = metric
            return metric
        }
    }

    private static func key(_ label: String, _ dimensions: [(String, String)]) -> String {
        var key = label
        for (name, value) in dimensions {
            key.append("\u{1}")
            key.append(name)
            key.append("=")
            key.append(value)
        }
        return key
    }

    private func counter(_ label: String, _ dimensions: [(String, String)]) -> CoreMetrics.Counter {
        handle(label, dimensions) { Counter(label: label, dimensions: dimensions, factory: factory) }
    }

    /// Totals kept elsewhere and read at scrape time, as the last scrape read them: a counter is
    /// advanced by what is new since.
    private let scraped = Mutex<[String: Double]>([:])

    /// Advances the counter `label` to `total`, a total read at scrape time.
    private func advance(_ label: String, _ dimensions: [(String, String)], to total: Double) {
        let key = Self.key(label, dimensions)
        let new = scraped.withLock { scraped in
            defer { scraped[key] = max(total, scraped[key] ?? 0) }
            return total - (scraped[key] ?? 0)
        }
        let counter = handle(label, dimensions) {
            FloatingPointCounter(label: label, dimensions: dimensions, factory: factory)
        }
        counter.increment(by: max(new, 0))
    }

    private func gauge(_ label: String, _ dimensions: [(String, String)] = []) -> CoreMetrics.Gauge {
        handle(label, dimensions) { Gauge(label: label, dimensions: dimensions, factory: factory) }
    }

    /// Finished deliveries of one batch, counted by app, status and reason.
    func deliveries(_ counts: [DeliveryCountKey: Int]) {
        activity.record(counts, at: Date())
        for (key, count) in counts {
            counter("herald_deliveries_total", [("app", key.app), ("status", key.status), ("reason", key.reason)])
                .increment(by: count)
        }
    }

    package func notificationCreated(app: String) {
        counter("herald_notifications_total", [("app", app)]).increment()
    }

    /// Deliveries cancelled by their cancel key before they were sent.
    package func cancelled(app: String, _ count: Int) {
        counter("herald_deliveries_cancelled_total", [("app", app)]).increment(by: count)
    }

    /// Users a job's occurrence was sent to.
    package func jobSends(app: String, job: String, _ count: Int) {
        counter("herald_job_sends_total", [("app", app), ("job", job)]).increment(by: count)
    }

    /// Events received.
    package func events(app: String, _ count: Int) {
        counter("herald_events_total", [("app", app)]).increment(by: count)
    }

    /// Webhook tries by outcome: delivered, retry, failed, aborted.
    func webhook(app: String, outcome: ActionRepository.WebhookOutcome) {
        let name: String
        switch outcome {
        case .delivered: name = "delivered"
        case .retry: name = "retry"
        case .failed(_, _, let aborted): name = aborted ? "aborted" : "failed"
        case .postponed: return  // not a try
        }
        counter("herald_webhook_attempts_total", [("app", app), ("outcome", name)]).increment()
    }

    /// Quick actions committed, by how they ended at once: committed, queued, failed, replay.
    package func action(app: String, outcome: String) {
        counter("herald_actions_total", [("app", app), ("outcome", outcome)]).increment()
    }

    /// A device's first receipt of a delivery, and the time from its provider's acceptance to
    /// the device (as the device tells it).
    package func received(app: String, platform: String, latency: TimeInterval) {
        counter("herald_deliveries_received_total", [("app", app), ("platform", platform)]).increment()
        handle("herald_receipt_latency_seconds", [("platform", platform)]) {
            Timer(label: "herald_receipt_latency_seconds", dimensions: [("platform", platform)], factory: factory)
        }.recordNanoseconds(Int64(max(0, min(latency, 30 * 86_400)) * 1e9))
    }

    /// Opens counted (the first report of each delivery), by catalog type (`none`: not sent by type).
    package func opened(app: String, type: String?) {
        counter("herald_opened_total", [("app", app), ("type", type ?? "none")]).increment()
    }

    /// Timers (track steps) by what they became: fired, skipped (`unless`), failed.
    package func timers(app: String, outcome: String, _ count: Int) {
        counter("herald_timers_total", [("app", app), ("outcome", outcome)]).increment(by: count)
    }

    /// Deliveries claimed before a crash and queued again at start (they may arrive twice).
    func restartResends(_ count: Int) {
        counter("herald_restart_resends_total", []).increment(by: count)
    }

    /// Answers a stopped process received and had not written, written at start from its
    /// answer journal (not sent again).
    func journaledAnswers(_ count: Int) {
        counter("herald_journaled_answers_total", []).increment(by: count)
    }

    /// Rows the retention clean-up deleted, by kind.
    func retentionDeleted(_ pruned: HeraldStore.Pruned) {
        for (kind, count) in [
            ("deliveries", pruned.deliveries), ("notifications", pruned.notifications),
            ("user_sends", pruned.userSends), ("history", pruned.history),
        ] {
            counter("herald_retention_deleted_total", [("kind", kind)]).increment(by: count)
        }
    }

    /// Time from submitting a batch to the providers until its last answer.
    func apnsBatch(seconds: Double) {
        apnsBatch.recordNanoseconds(Int64(seconds * 1e9))
    }

    /// One outbox transaction (`operation`: `accept`, `claim`, `record`, `timer_fire`), from asking the store until
    /// it committed: waiting for the writer included, which is what an operator watches.
    package func outboxStore(_ operation: String, seconds: Double) {
        handle("herald_outbox_store_seconds", [("operation", operation)]) {
            Timer(label: "herald_outbox_store_seconds", dimensions: [("operation", operation)], factory: factory)
        }.recordNanoseconds(Int64(seconds * 1e9))
    }

    /// One pass of a delivery batch through an outbox stage, in seconds: `claim`, `prepare` (the
    /// contents read and the policy step), `provider` (submitted until the batch's last answer),
    /// `record` (the oldest answer of a write until it was committed: how long an answer may
    /// wait unwritten), `timer_fire`, `room` (a full window until there was room to claim).
    package func outboxStage(_ stage: String, seconds: Double) {
        handle("herald_outbox_stage_seconds", [("stage", stage)]) {
            Timer(label: "herald_outbox_stage_seconds", dimensions: [("stage", stage)], factory: factory)
        }.recordNanoseconds(Int64(seconds * 1e9))
        stages.record(stage, seconds: seconds, at: Date())
    }

    /// Reads the dispatcher's window at each scrape: deliveries sent and unanswered, answers not
    /// yet written (together, what a crash now would send again). Nil while no dispatcher runs.
    package func observeOutbox(_ probe: (@Sendable () -> (inFlight: Int, unwritten: Int))?) {
        outboxProbe.withLock { $0 = probe }
    }

    /// A batch finished and its results were written.
    func batchFinished(at date: Date) {
        lastBatch.record(date.timeIntervalSince1970)
        lastBatchAt.store(Int64(date.timeIntervalSince1970 * 1000), ordering: .relaxed)
    }

    /// When the dispatcher last finished a batch (nil before the first).
    package var lastBatchFinished: Date? {
        let milliseconds = lastBatchAt.load(ordering: .relaxed)
        return milliseconds == 0 ? nil : Date(timeIntervalSince1970: Double(milliseconds) / 1000)
    }

    /// APNs request latencies (write to answer), recorded per batch.
    func apnsRequests(latencies: [Double]) {
        for latency in latencies { apnsRequest.recordNanoseconds(Int64(latency * 1e9)) }
    }

    /// FCM request latencies (write to answer), recorded per batch.
    func fcmRequests(latencies: [Double]) {
        for latency in latencies { fcmRequest.recordNanoseconds(Int64(latency * 1e9)) }
    }

    /// One API request, by route (the pattern, never the path) and status.
    package func apiRequest(route: String, method: String, status: Int) {
        counter("herald_api_requests_total", [("route", route), ("method", method), ("status", "\(status)")])
            .increment()
    }

    /// A client-key write refused by its rate limit.
    package func rateLimited(app: String) {
        counter("herald_rate_limited_total", [("app", app)]).increment()
    }

    /// The last write probe's answer: 1 when the database took its write, 0 when it did not.
    func databaseWritable(_ writable: Bool) {
        gauge("herald_database_writable").record(writable ? 1 : 0)
    }

    /// A dashboard sign-in refused (`reason`: wrong_key, throttled).
    package func signInRefused(reason: String) {
        counter("herald_dashboard_signin_refused_total", [("reason", reason)]).increment()
    }

    /// The exposition text. Gauges read at scrape time (queue, pauses, connections) are set first.
    /// `apps`: the configured apps, each exported per lane even when its queue is empty.
    /// `writer`: SQLite's writer's use so far (nil on PostgreSQL).
    package func render(
        outbox: OutboxGauges, apps: [String], openConnections: Int, pauses: [ProviderKey: ProviderPause],
        writer: (foreground: HeraldStore.WriterUse, background: HeraldStore.WriterUse)? = nil
    ) -> String {
        if let writer {
            for (work, use) in [("foreground", writer.foreground), ("background", writer.background)] {
                advance("herald_sqlite_writer_holds_total", [("work", work)], to: Double(use.holds))
                advance("herald_sqlite_writer_wait_seconds_total", [("work", work)], to: use.waitedSeconds)
                advance("herald_sqlite_writer_held_seconds_total", [("work", work)], to: use.heldSeconds)
            }
        }
        gauge("herald_queue_depth").record(outbox.totalDue)
        gauge("herald_deferred_deliveries").record(outbox.totalDeferred)
        gauge("herald_oldest_queued_age_seconds").record(outbox.oldestDueAge)
        for app in apps {
            for lane in DeliveryLane.allCases {
                gauge("herald_app_queue_depth", [("app", app), ("lane", lane.label)])
                    .record(outbox.due[AppLane(app: app, lane: lane)] ?? 0)
            }
            gauge("herald_app_deferred_deliveries", [("app", app)]).record(outbox.deferred[app] ?? 0)
        }
        gauge("herald_apns_open_connections").record(openConnections)
        let window = outboxProbe.withLock { $0 }?() ?? (inFlight: 0, unwritten: 0)
        gauge("herald_outbox_in_flight").record(window.inFlight)
        gauge("herald_outbox_unwritten_answers").record(window.unwritten)
        // Every pause this process has seen stays listed, at 0 once resumed.
        let seen = handles.withLock { $0.filter { $0.key.hasPrefix("herald_provider_paused\u{1}") } }
        var current = Set<String>()
        for (key, pause) in pauses {
            let dimensions = [
                ("app", key.app), ("platform", key.platform), ("reason", MetricReason.label(pause.reason)),
            ]
            current.insert(Self.key("herald_provider_paused", dimensions))
            gauge("herald_provider_paused", dimensions).record(1)
        }
        for (key, gauge) in seen where !current.contains(key) {
            (gauge as? CoreMetrics.Gauge)?.record(0)
        }
        return registry.emitToString()
    }
}

/// A delivery outcome as counted in `herald_deliveries_total`.
struct DeliveryCountKey: Hashable {
    var app: String
    var status: String
    var reason: String

    init(app: String, status: String, reason: String?) {
        self.app = app
        self.status = status
        // Deferred and suppressed reasons are the policy engine's rule names: Herald's own words.
        self.reason =
            status == "deferred" || status == "suppressed" ? reason ?? "" : reason.map(MetricReason.label) ?? ""
    }
}

/// Reasons as metric labels: the documented APNs and FCM reasons and Herald's own, else `other`.
enum MetricReason {
    static let known: Set<String> = {
        var known = Set(APNSReason.documented.map(\.reason.rawValue))
        known.formUnion([
            // APNs reasons Herald gives itself.
            "Timeout", "ConnectionFailed", "CredentialDisabled", "ClientShutdown", "InvalidNotification", "Shutdown",
            "ExpiredToken", "UnrelatedKeyIdInToken", "BadEnvironmentKeyIdInToken", "BadEnvironmentKeyInToken",
            // FCM error codes and Google statuses (protocols.md §12).
            "UNREGISTERED", "SENDER_ID_MISMATCH", "INVALID_ARGUMENT", "UNSPECIFIED_ERROR", "THIRD_PARTY_AUTH_ERROR",
            "APNS_AUTH_ERROR", "QUOTA_EXCEEDED", "UNAVAILABLE", "INTERNAL", "UNAUTHENTICATED", "PERMISSION_DENIED",
            "NOT_FOUND", "RESOURCE_EXHAUSTED", "OAuth2", "Unanswered", "ConnectFailed", "ResponseTooLarge",
            "TokenExchangeFailed",
            "InvalidMessage", "MessageTooBig", "ReservedDataKey",
            // Herald's.
            OutboxLoop.pausedReason, "Shutdown", "DeviceReassigned", "AppNotConfigured", "FCMNotConfigured",
            "APNsNotConfigured", "CatalogNotConfigured",
            "TypeNotInCatalog", "PayloadNotEncodable", "DeviceUnregistered", "DeviceLimit", "Expired",
            "ActionKeyUnavailable",
        ])
        return known
    }()

    /// `reason` when known (`ReservedDataKey:x` and `OAuth2:invalid_grant` by their prefix), else `other`.
    static func label(_ reason: String) -> String {
        if known.contains(reason) { return reason }
        if let prefix = reason.split(separator: ":", maxSplits: 1).first, known.contains(String(prefix)) {
            return String(prefix)
        }
        if reason.hasPrefix("HTTP"), reason.count <= 8, reason.dropFirst(4).allSatisfy({ $0.isNumber || $0 == " " }) {
            return reason
        }
        return "other"
    }
}
