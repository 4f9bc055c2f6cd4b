import Foundation
import HeraldCore
import HeraldStore
import Logging
import Synchronization

/// Writes delivery results as they arrive: answers are buffered from any thread and written in
/// one transaction as soon as `writeAt` of them wait, or once the oldest has waited the
/// record interval (bounded groups), so one slow token never holds back the results of the
/// others. What is answered and not yet committed (waiting, or in a write under way) is what
/// a crash sends twice: under load a write starts as the one before it ends, so that window is
/// one write's answers and what arrives while it runs. With an `AnswerJournal`, providers'
/// answers are also appended to it as they arrive, and the next start writes those a crash left
/// unwritten. Counts them in the metrics once per write.
final class DeliveryRecorder: Sendable {
    private struct Buffer {
        var results: [DeliveryResult] = []
        var apnsLatencies: [Double] = []
        var fcmLatencies: [Double] = []
        /// When the oldest result waiting arrived.
        var oldest: ContinuousClock.Instant?
        /// The journal segments of `results`, in order (segment, how many): what their write
        /// commits there. Results not journaled (the policy's, deadlines') have none.
        var segments: [(segment: Int, count: Int)] = []

        /// Appends `more`; true when the writer is to be woken: the buffer stopped being empty
        /// (its deadline starts) or reached `writeAt`, not for every result in between.
        mutating func append(_ more: some Collection<DeliveryResult>, segment: Int? = nil) -> Bool {
            let before = results.count
            if before == 0 { oldest = .now }
            results.append(contentsOf: more)
            if let segment {
                if let last = segments.indices.last, segments[last].segment == segment {
                    segments[last].count += more.count
                } else {
                    segments.append((segment, more.count))
                }
            }
            return before == 0 || (before < DeliveryRecorder.writeAt && results.count >= DeliveryRecorder.writeAt)
        }

        /// How long until a write is due (`writeAt` results wait, or the oldest has waited
        /// `interval`): zero or less when due, nil when nothing waits.
        func untilDue(interval: Duration) -> Duration? {
            guard let oldest, !results.isEmpty else { return nil }
            return results.count >= DeliveryRecorder.writeAt ? .zero : interval - (ContinuousClock.now - oldest)
        }
    }

    /// Results waiting that start a write at once.
    static let writeAt = 256

    private struct State {
        var buffer = Buffer()
        var journal: AnswerJournal?
    }

    private let runtime: HeraldRuntime
    private let state: Mutex<State>
    /// Results taken by writes that have not committed yet.
    private let writing = Atomic<Int>(0)
    /// Signalled when the first result arrives in an empty buffer and when `writeAt` wait.
    private let arrivals = WakeSignal()

    init(runtime: HeraldRuntime, journal: AnswerJournal? = nil) {
        self.runtime = runtime
        state = Mutex(State(journal: journal))
    }

    /// Adds one provider answer's result (called on the clients' event loops).
    func add(_ result: DeliveryResult, latency: Double?, platform: String) {
        let wake = state.withLock { state in
            let segment = state.journal?.append(result, now: .now)
            let wake = state.buffer.append(CollectionOfOne(result), segment: segment)
            // APNs' and FCM's request histograms; web push has none of its own yet, and its
            // answers must not be counted as APNs'.
            if let latency {
                if platform == "fcm" {
                    state.buffer.fcmLatencies.append(latency)
                } else if platform == "apns" {
                    state.buffer.apnsLatencies.append(latency)
                }
            }
            return wake
        }
        if wake { arrivals.signal() }
    }

    /// Adds results decided without a provider (policy, pauses, configuration).
    func add(_ results: [DeliveryResult]) {
        guard !results.isEmpty else { return }
        if state.withLock({ $0.buffer.append(results) }) { arrivals.signal() }
    }

    /// Answers not yet committed: waiting, and in writes under way.
    var count: Int { state.withLock { $0.buffer.results.count } + writing.load(ordering: .relaxed) }

    /// Whether a write is due: `writeAt` results wait, or the oldest has waited `interval`.
    func writeDue(interval: Duration) -> Bool {
        state.withLock { $0.buffer.untilDue(interval: interval) }.map { $0 <= .zero } ?? false
    }

    /// Returns when a write may be due (see `writeDue`), or after `limit` at the latest.
    func waitForWrite(interval: Duration, limit: Duration) async {
        let wait = min(limit, state.withLock { $0.buffer.untilDue(interval: interval) } ?? limit)
        guard wait > .zero else { return }
        await arrivals.wait(timeout: wait)
    }

    /// Writes everything buffered. On a store error the results go back to the buffer (ahead of
    /// newer ones) and the error is thrown; what was sent stays `sending` until it is written.
    func flush() async throws {
        // Counted as being written under the same lock that takes them, so `count` never sees
        // them in neither place.
        let taken = state.withLock { state -> Buffer in
            let taken = state.buffer
            state.buffer = Buffer()
            // What the write takes is in the journal's file before the write starts.
            if !taken.segments.isEmpty { state.journal?.taking() }
            writing.add(taken.results.count, ordering: .relaxed)
            return taken
        }
        guard !taken.results.isEmpty else { return }
        defer { writing.subtract(taken.results.count, ordering: .relaxed) }
        let started = ContinuousClock.now
        do {
            try await runtime.store.outbox.recordResults(taken.results, webhooks: runtime.resultWebhooks)
            if !taken.segments.isEmpty { state.withLock { $0.journal?.committed(taken.segments) } }
            let written = ContinuousClock.now
            runtime.metrics.outboxStore("record", seconds: (written - started).seconds)
            if let oldest = taken.oldest { runtime.metrics.outboxStage("record", seconds: (written - oldest).seconds) }
            runtime.traces?.recorded(taken.results)
            if !runtime.resultWebhooks.failed.isEmpty || !runtime.resultWebhooks.deactivated.isEmpty,
                taken.results.contains(where: runtime.resultWebhooks.wants)
            {
                runtime.webhookWake.signal()
            }
        } catch {
            state.withLock { state in
                state.buffer.results = taken.results + state.buffer.results
                state.buffer.segments = taken.segments + state.buffer.segments
                state.buffer.oldest = taken.oldest ?? state.buffer.oldest
            }
            throw error
        }
        count(taken)
    }

    /// Stops the journal (once the last write is done): its files go when every answer in them
    /// is committed, and stay for the next start otherwise.
    func finishJournal() {
        state.withLock { state in
            state.journal?.finish()
            state.journal = nil
        }
    }

    /// Counted once per write, by app, status and reason; dead tokens by app for one log line
    /// per app and write, not one per token.
    private func count(_ written: Buffer) {
        runtime.metrics.apnsRequests(latencies: written.apnsLatencies)
        runtime.metrics.fcmRequests(latencies: written.fcmLatencies)
        var counts: [DeliveryCountKey: Int] = [:]
        var dead: [String: [String: Int]] = [:]
        for result in written.results {
            let key: DeliveryCountKey
            switch result.outcome {
            case .sent: key = DeliveryCountKey(app: result.appID, status: "sent", reason: nil)
            case .failed(let reason): key = DeliveryCountKey(app: result.appID, status: "failed", reason: reason)
            case .tokenDead(let reason, _):
                key = DeliveryCountKey(app: result.appID, status: "failed", reason: reason)
                dead[result.appID, default: [:]][reason, default: 0] += 1
            case .retry(let reason, _): key = DeliveryCountKey(app: result.appID, status: "retry", reason: reason)
            case .deferred(let reason, _): key = DeliveryCountKey(app: result.appID, status: "deferred", reason: reason)
            case .suppressed(let reason):
                key = DeliveryCountKey(app: result.appID, status: "suppressed", reason: reason)
            }
            counts[key, default: 0] += 1
        }
        runtime.metrics.deliveries(counts)
        runtime.metrics.batchFinished(at: runtime.store.now)
        for (app, reasons) in dead.sorted(by: { $0.key < $1.key }) {
            runtime.logger.info(
                "Devices deactivated: their tokens are dead",
                metadata: [
                    "herald.app": "\(app)", "herald.devices": "\(reasons.values.reduce(0, +))",
                    "herald.reasons":
                        "\(reasons.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ","))",
                ])
        }
    }
}
