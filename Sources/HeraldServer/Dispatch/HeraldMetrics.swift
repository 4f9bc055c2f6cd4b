import Synchronization

/// Counters exposed at `/metrics` in Prometheus' text format.
package final class HeraldMetrics: Sendable {
    private struct State {
        var deliveries: [DeliveryKey: Int] = [:]
        var notifications: [String: Int] = [:]
        var apnsBatchSeconds: [Double] = Array(repeating: 0, count: HeraldMetrics.buckets.count)
        var apnsBatchCount = 0
        var apnsBatchSum = 0.0
        var apnsRequestBuckets: [Int] = Array(repeating: 0, count: HeraldMetrics.requestBuckets.count)
        var apnsRequestCount = 0
        var apnsRequestSum = 0.0
    }

    struct DeliveryKey: Hashable {
        var app: String
        var status: String
        var reason: String
    }

    static let buckets: [Double] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
    static let requestBuckets: [Double] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
    private let state = Mutex(State())

    package init() {}

    func delivery(app: String, status: String, reason: String?) {
        state.withLock { $0.deliveries[DeliveryKey(app: app, status: status, reason: reason ?? ""), default: 0] += 1 }
    }

    func notificationCreated(app: String) {
        state.withLock { $0.notifications[app, default: 0] += 1 }
    }

    /// Time from submitting a batch to APNs until its last answer.
    func apnsBatch(seconds: Double) {
        state.withLock { state in
            state.apnsBatchCount += 1
            state.apnsBatchSum += seconds
            for (index, bound) in Self.buckets.enumerated() where seconds <= bound { state.apnsBatchSeconds[index] += 1 }
        }
    }

    /// APNs request latencies (write to answer), recorded per batch to keep the lock cold.
    func apnsRequests(latencies: [Double]) {
        guard !latencies.isEmpty else { return }
        var buckets = Array(repeating: 0, count: Self.requestBuckets.count)
        var sum = 0.0
        for latency in latencies {
            sum += latency
            if let index = Self.requestBuckets.firstIndex(where: { latency <= $0 }) { buckets[index] += 1 }
        }
        state.withLock { state in
            state.apnsRequestCount += latencies.count
            state.apnsRequestSum += sum
            for index in buckets.indices { state.apnsRequestBuckets[index] += buckets[index] }
        }
    }

    /// The exposition text; `queueDepth` is read from the store and `openConnections` from the clients by the caller.
    package func render(queueDepth: Int, openConnections: Int = 0) -> String {
        state.withLock { state in
            var lines: [String] = []
            lines.append("# HELP herald_deliveries_total Deliveries finished, by app, status and reason.")
            lines.append("# TYPE herald_deliveries_total counter")
            for (key, value) in state.deliveries.sorted(by: { "\($0.key)" < "\($1.key)" }) {
                lines.append(#"herald_deliveries_total{app="\#(key.app)",status="\#(key.status)",reason="\#(key.reason)"} \#(value)"#)
            }
            lines.append("# HELP herald_notifications_total Notifications accepted by the API, by app.")
            lines.append("# TYPE herald_notifications_total counter")
            for (app, value) in state.notifications.sorted(by: { $0.key < $1.key }) {
                lines.append(#"herald_notifications_total{app="\#(app)"} \#(value)"#)
            }
            lines.append("# HELP herald_queue_depth Deliveries due and not yet answered.")
            lines.append("# TYPE herald_queue_depth gauge")
            lines.append("herald_queue_depth \(queueDepth)")
            lines.append("# HELP herald_apns_batch_seconds Time for a dispatcher batch to get every APNs answer.")
            lines.append("# TYPE herald_apns_batch_seconds histogram")
            for (index, bound) in Self.buckets.enumerated() {
                lines.append(#"herald_apns_batch_seconds_bucket{le="\#(bound)"} \#(Int(state.apnsBatchSeconds[index]))"#)
            }
            lines.append(#"herald_apns_batch_seconds_bucket{le="+Inf"} \#(state.apnsBatchCount)"#)
            lines.append("herald_apns_batch_seconds_sum \(state.apnsBatchSum)")
            lines.append("herald_apns_batch_seconds_count \(state.apnsBatchCount)")
            lines.append("# HELP herald_apns_request_seconds APNs request latency, from writing a request to its answer.")
            lines.append("# TYPE herald_apns_request_seconds histogram")
            var cumulative = 0
            for (index, bound) in Self.requestBuckets.enumerated() {
                cumulative += state.apnsRequestBuckets[index]
                lines.append(#"herald_apns_request_seconds_bucket{le="\#(bound)"} \#(cumulative)"#)
            }
            lines.append(#"herald_apns_request_seconds_bucket{le="+Inf"} \#(state.apnsRequestCount)"#)
            lines.append("herald_apns_request_seconds_sum \(state.apnsRequestSum)")
            lines.append("herald_apns_request_seconds_count \(state.apnsRequestCount)")
            lines.append("# HELP herald_apns_open_connections HTTP/2 connections open to APNs.")
            lines.append("# TYPE herald_apns_open_connections gauge")
            lines.append("herald_apns_open_connections \(openConnections)")
            return lines.joined(separator: "\n") + "\n"
        }
    }
}
