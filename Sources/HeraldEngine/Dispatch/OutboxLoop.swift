import Foundation
import HeraldCore
import HeraldStore
import Logging
import ServiceLifecycle
import Synchronization
import Tracing

/// Drains the outbox (the `Service` beside the HTTP server): claims due deliveries in batches,
/// plans them (`DeliveryPlanner`), sends them through each app's providers and hands every
/// answer to the `DeliveryRecorder` as it arrives. Batches overlap: a new one is claimed while
/// fewer than `maximumInFlight` deliveries wait for answers, so a slow token holds one place,
/// never the queue. Every batch has a deadline; graceful shutdown is bounded.
package struct OutboxLoop: Service {
    let runtime: HeraldRuntime
    package let configuration: DispatcherConfiguration
    /// `outbox.answer_journal`'s directory for this store (nil for none), resolved once: it is
    /// read back at every heartbeat.
    private let journalDirectory: String?

    package init(runtime: HeraldRuntime, configuration: DispatcherConfiguration = DispatcherConfiguration()) {
        self.runtime = runtime
        self.configuration = configuration
        journalDirectory = configuration.answerJournal.directory(
            databaseURL: runtime.configuration.databaseURL,
            stateDirectory: ProcessInfo.processInfo.environment["STATE_DIRECTORY"])
    }

    package func run() async throws {
        let logger = runtime.logger
        guard await start() else {
            try? await runtime.store.nodes.leave()
            return
        }
        let recorder = DeliveryRecorder(runtime: runtime, journal: openJournal())
        defer { recorder.finishJournal() }
        let window = InFlightWindow()
        let batches = BatchRegistry(deadline: .seconds(configuration.batchDeadline))
        let order = SubmissionOrder()
        let stopping = OneWayFlag()
        let finished = OneWayFlag()
        runtime.metrics.observeOutbox { (window.count, recorder.count) }
        defer { runtime.metrics.observeOutbox(nil) }
        await withDiscardingTaskGroup { listening in
            // Other nodes' enqueues wake this one at once (PostgreSQL NOTIFY; returns at once on SQLite).
            listening.addTask { await runtime.store.nodes.listenForDueDeliveries { runtime.wake.signal() } }
            await withGracefulShutdownHandler {
                await withDiscardingTaskGroup { group in
                    group.addTask {
                        await recordLoop(recorder, batches: batches, finished: finished)
                    }
                    var machine = OutboxStateMachine<ContinuousClock.Instant>(
                        .init(maximumInFlight: configuration.maximumInFlight, batchSize: configuration.batchSize))
                    // Since when the window has been full (the `room` stage).
                    var fullSince: ContinuousClock.Instant?
                    while !stopping.isSet && !Task.isCancelled {
                        let (inFlight, unwritten) = (window.count, recorder.count)
                        runtime.direct.setRoom(
                            machine.roomLeft(inFlight: inFlight, unwritten: unwritten),
                            capacity: configuration.maximumInFlight)
                        guard case .claim(let limit) = machine.room(inFlight: inFlight, unwritten: unwritten) else {
                            if fullSince == nil { fullSince = .now }
                            try? await Task.sleep(for: .milliseconds(5))
                            continue
                        }
                        if let since = fullSince {
                            runtime.metrics.outboxStage("room", seconds: (ContinuousClock.now - since).seconds)
                            fullSince = nil
                        }
                        // What the API claimed as it accepted, then the outbox's own claim when the
                        // machine says it is due.
                        let claimedAt = runtime.traces == nil ? nil : DefaultTracerClock.now
                        var claimed = runtime.direct.take(limit)
                        let outboxWork = runtime.wake.takeOutboxWork()
                        let prepared: PreparedBatch
                        do {
                            if let storeLimit = machine.storeClaim(
                                direct: claimed.count, limit: limit, outboxWork: outboxWork, now: .now)
                            {
                                // Answers waiting go first: a claim holds the writer for
                                // milliseconds, and an answer unwritten meanwhile is one a
                                // crash would send twice. (An error leaves them to the record loop.)
                                try? await recorder.flush()
                                let started = ContinuousClock.now
                                let fromStore = try await runtime.store.outbox.claimDueDeliveries(limit: storeLimit)
                                let seconds = (ContinuousClock.now - started).seconds
                                runtime.metrics.outboxStore("claim", seconds: seconds)
                                if !fromStore.isEmpty { runtime.metrics.outboxStage("claim", seconds: seconds) }
                                machine.storeClaimed(found: fromStore.count, at: .now)
                                claimed += fromStore
                            }
                            guard !claimed.isEmpty else {
                                machine.storeWorked()
                                runtime.passes.outboxWentIdle()
                                await runtime.wake.wait(timeout: configuration.idleInterval)
                                continue
                            }
                            let preparing = ContinuousClock.now
                            prepared = try await prepare(claimed, claimedAt: claimedAt)
                            runtime.metrics.outboxStage(
                                "prepare", seconds: (ContinuousClock.now - preparing).seconds)
                            machine.storeWorked()
                        } catch {
                            let failures = machine.storeFailed()
                            // Claimed but not sent: back to the queue, not left `sending` under a
                            // live node (which nobody would rescue).
                            if !claimed.isEmpty, (try? await runtime.store.nodes.unclaim(claimed)) == nil {
                                runtime.direct.putBack(claimed)
                            }
                            await waitOutStoreError(
                                error, failures: failures, "Dispatcher cannot use the database; trying again")
                            continue
                        }
                        let tracker = BatchTracker(prepared.claimed, window: window, turn: SubmissionTurn(order))
                        let id = batches.insert(tracker)
                        group.addTask {
                            await deliver(prepared, tracker: tracker, recorder: recorder)
                            batches.remove(id)
                        }
                    }
                    await drain(batches: batches, recorder: recorder)
                    // Claimed at acceptance and not sent: queued again for the next start or node.
                    let left = runtime.direct.close()
                    if !left.isEmpty { try? await runtime.store.nodes.unclaim(left) }
                    finished.set()
                }
            } onGracefulShutdown: {
                stopping.set()
                // New notifications are accepted queued from now on; what was handed over and not
                // taken is given back to the queue as the loop ends.
                runtime.direct.stopAccepting()
                runtime.wake.signal()
            }
            listening.cancelAll()
        }
        try? await runtime.store.nodes.leave()
        logger.info("Dispatcher stopped")
    }

    /// Joins the nodes (the heartbeat), queues again what dead nodes had claimed and releases
    /// what waited for a provider paused before the start. A store that refuses these writes
    /// (unreachable, read-only, full) is tried again with back-off until it takes them: the
    /// server keeps answering meanwhile, `/healthz` saying what is wrong, and never stops because
    /// the database did. Returns false when the server stops first.
    private func start() async -> Bool {
        var failures = 0
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            do {
                // Before any claim of a stopped process is queued again: the answers it had.
                try await replayJournals()
                try await runtime.store.nodes.heartbeat()
                try await rescue()
                // No pause is known after a start: what waits for a provider paused before it (a
                // fixed key or topic, say) is due now, so the first of it probes the provider
                // within seconds.
                let released = try await runtime.store.outbox.releasePausedDeliveries(
                    apps: runtime.apps.keys.sorted(), reason: Self.pausedReason, window: ProviderPauses.longestWait)
                if released > 0 {
                    runtime.logger.notice(
                        "Deliveries held for a paused provider are due again: the provider is probed now",
                        metadata: ["herald.deliveries": "\(released)"])
                }
                runtime.logger.info(
                    "Dispatcher started",
                    metadata: [
                        "herald.node": "\(runtime.store.nodeID)",
                        "herald.database": "\(runtime.store.dialect.rawValue)",
                    ])
                return true
            } catch {
                failures += 1
                await waitOutStoreError(
                    error, failures: failures, "Dispatcher cannot start: the database refuses its writes; trying again")
            }
        }
        return false
    }

    /// This process's answer journal; nil (said so) when there is none or it cannot be made.
    private func openJournal() -> AnswerJournal? {
        guard let directory = journalDirectory else { return nil }
        do {
            return try AnswerJournal(directory: directory, node: runtime.store.nodeID, logger: runtime.logger)
        } catch {
            runtime.logger.warning(
                "Answer journal off: a crash resends the answers not yet written",
                metadata: ["herald.journal": "\(directory)", "error": "\(error)"])
            return nil
        }
    }

    /// Writes what stopped processes journaled and never wrote (`AnswerJournal.replay`).
    private func replayJournals() async throws {
        guard let directory = journalDirectory else { return }
        let replayed = try await AnswerJournal.replay(
            directory: directory, except: runtime.store.nodeID, store: runtime.store)
        guard replayed.journals > 0 else { return }
        runtime.metrics.journaledAnswers(replayed.answers.written)
        runtime.logger.notice(
            "Answers a stopped process received and had not written were written from its journal (not sent again)",
            metadata: [
                "herald.journals": "\(replayed.journals)", "herald.written": "\(replayed.answers.written)",
                "herald.already_written": "\(replayed.answers.skipped)",
                "herald.unreadable_lines": "\(replayed.unreadable)",
            ])
    }

    /// Queues again the claims of nodes that stopped saying they are alive (a killed process,
    /// this one's predecessor included); never a live node's.
    private func rescue() async throws {
        let rescued = try await runtime.store.nodes.rescueDeadClaims()
        runtime.metrics.restartResends(rescued)
        if rescued > 0 {
            runtime.logger.warning(
                "Deliveries claimed by a node that stopped were queued again (at-least-once; some may arrive twice)",
                metadata: ["herald.requeued": "\(rescued)"])
        }
    }

    /// The record loop's longest wait without answers: how late it may see a batch past its
    /// deadline, a heartbeat due or the loop's end.
    static let choreInterval: Duration = .milliseconds(100)

    /// Seconds between heartbeats (and rescues of dead nodes' claims).
    static let heartbeatInterval: Int64 = 5

    /// Claims, sends and records one batch; returns how many deliveries it claimed.
    @discardableResult
    package func runOnce() async throws -> Int {
        let claimed = try await runtime.store.outbox.claimDueDeliveries(limit: configuration.batchSize)
        guard !claimed.isEmpty else { return 0 }
        let recorder = DeliveryRecorder(runtime: runtime)
        let prepared = try await prepare(claimed)
        let tracker = BatchTracker(claimed, window: InFlightWindow())
        await deliver(prepared, tracker: tracker, recorder: recorder)
        try await recorder.flush()
        return claimed.count
    }

    /// Writes answers as they become due (`DeliveryRecorder.writeDue`) and hands back what a
    /// batch past its deadline still waits for; after `finished`, writes what is left and stops.
    /// With `outbox.result_writes` above 1 (PostgreSQL), a due write starts while others are
    /// under way, up to that many, each as a task of its own; after a failed one, writes go one
    /// at a time with the back-off until one succeeds.
    private func recordLoop(_ recorder: DeliveryRecorder, batches: BatchRegistry, finished: OneWayFlag) async {
        // PostgreSQL writes of one page wait for each other only at their end; SQLite has one writer.
        let writers = runtime.store.dialect == .postgres ? configuration.resultWrites : 1
        let writes = OverlappingWrites()
        await withDiscardingTaskGroup { group in
            var failures = 0
            var lastHeartbeat = ContinuousClock.now
            while true {
                // Cancelled (not a graceful stop): one last write, then out; waiting would spin, as
                // every sleep returns at once.
                let last = finished.isSet || Task.isCancelled
                if !last {
                    // What is answered but unwritten is what a crash would send twice: written once
                    // `writeAt` answers wait or the oldest has waited `recordInterval`. The wait is
                    // bounded so heartbeats, deadlines and the end are seen without answers.
                    await recorder.waitForWrite(interval: configuration.recordInterval, limit: Self.choreInterval)
                }
                if ContinuousClock.now - lastHeartbeat >= .seconds(Self.heartbeatInterval) {
                    lastHeartbeat = .now
                    // The answers of a process that stopped beside this one (its journal's lock
                    // is free at once) are written before its claims are judged dead and queued
                    // again; every write is fenced by the claim, so a late one writes nothing.
                    do {
                        try await replayJournals()
                    } catch {
                        runtime.logger.warning(
                            "Answer journals of stopped processes could not be written yet; tried again at the next heartbeat",
                            metadata: ["error": "\(String(describing: error).prefix(300))"])
                    }
                    // Alive, and the claims of nodes that are not are taken back.
                    do {
                        try await runtime.store.nodes.heartbeat()
                        try await rescue()
                    } catch {
                        runtime.logger.error(
                            "Dispatcher cannot write its heartbeat",
                            metadata: ["error": "\(String(describing: error).prefix(300))"])
                    }
                }
                for tracker in batches.expired(at: .now) {
                    let late = tracker.expire()
                    guard !late.isEmpty else { continue }
                    runtime.logger.warning(
                        "Deliveries unanswered at their batch's deadline are queued again",
                        metadata: [
                            "herald.deliveries": "\(late.count)",
                            "herald.deadline_seconds": "\(configuration.batchDeadline)",
                        ])
                    recorder.add(late.map { outcome(unanswered: $0, reason: "Unanswered", attempts: 1) })
                }
                guard last || recorder.writeDue(interval: configuration.recordInterval) else { continue }
                if !last, failures == 0, writers > 1 {
                    if writes.active.load(ordering: .relaxed) >= writers {
                        await writes.done.wait(timeout: Self.choreInterval)
                        continue
                    }
                    writes.active.add(1, ordering: .relaxed)
                    group.addTask {
                        defer {
                            writes.active.subtract(1, ordering: .relaxed)
                            writes.done.signal()
                        }
                        do { try await recorder.flush() } catch { writes.failed.store(true, ordering: .relaxed) }
                    }
                    if writes.failed.exchange(false, ordering: .relaxed) { failures = 1 }
                    continue
                }
                do {
                    try await recorder.flush()
                    failures = 0
                } catch {
                    failures += 1
                    // What was sent stays `sending` if this never succeeds: a restart queues it again.
                    if last && failures >= 3 { return }
                    await waitOutStoreError(error, failures: failures, "Dispatcher cannot record answers; trying again")
                    continue
                }
                if last { return }
            }
        }
    }

    /// The result writes under way beside the record loop's own.
    private final class OverlappingWrites: Sendable {
        let active = Atomic<Int>(0)
        let failed = Atomic<Bool>(false)
        let done = WakeSignal()
    }

    /// Graceful shutdown: waits up to `shutdownGrace` for batches in flight, then hands their
    /// unanswered deliveries back to the queue and closes the provider clients so the sends
    /// waiting on them return.
    private func drain(batches: BatchRegistry, recorder: DeliveryRecorder) async {
        let deadline = ContinuousClock.now + .seconds(configuration.shutdownGrace)
        while !batches.isEmpty, ContinuousClock.now < deadline, !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(20))
        }
        let left = batches.all
        guard !left.isEmpty else { return }
        var handedBack: [DeliveryResult] = []
        for tracker in left {
            handedBack += tracker.expire().map { outcome(unanswered: $0, reason: "Shutdown", attempts: 0, now: true) }
        }
        runtime.logger.warning(
            "Stopping with deliveries unanswered: they are queued again",
            metadata: [
                "herald.deliveries": "\(handedBack.count)", "herald.grace_seconds": "\(configuration.shutdownGrace)",
            ])
        recorder.add(handedBack)
        await runtime.shutdown(gracePeriod: 0)
    }

    /// A delivery that got no answer: queued again after the retry schedule (or at once), or
    /// failed once its attempts are spent.
    func outcome(unanswered delivery: ClaimedDelivery, reason: String, attempts: Int, now: Bool = false)
        -> DeliveryResult
    {
        DeliveryResult(
            delivery, retryOutcome(delivery, reason: reason, attempts: attempts, immediately: now), attempts: attempts)
    }

    /// A delivery to try again after `attempts` more requests: queued at the retry schedule's
    /// time (no sooner than the provider asked; at once when `immediately`), or failed once it
    /// has had `outbox.max_attempts`.
    func retryOutcome(
        _ delivery: ClaimedDelivery, reason: String, attempts: Int, providerAsked: TimeInterval? = nil,
        immediately: Bool = false
    ) -> DeliveryResult.Outcome {
        let total = delivery.attempts + attempts
        guard total < configuration.maximumAttempts else { return .failed(reason: reason) }
        let delay = immediately ? 0 : configuration.retryDelay(attempts: total, providerAsked: providerAsked)
        return .retry(reason: reason, dueAt: runtime.store.now.addingTimeInterval(delay))
    }

    /// After the `failures`-th store error in a row: says so (the first and every tenth time)
    /// and waits 1 s doubling to 30 s, or until graceful shutdown.
    func waitOutStoreError(_ error: any Error, failures: Int, _ message: Logger.Message) async {
        let wait = StoreBackoff.wait(failures: failures)
        if StoreBackoff.reports(failures: failures) {
            runtime.logger.error(
                message,
                metadata: [
                    "error": "\(String(describing: error).prefix(300))", "herald.failures": "\(failures)",
                    "herald.retry_seconds": "\(wait.seconds)",
                ])
        }
        // Graceful shutdown ends the wait: a stop is never held up by a back-off.
        _ = try? await cancelWhenGracefulShutdown { try await Task.sleep(for: wait) }
    }
}

/// Deliveries sent and not yet answered, across the batches in flight.
final class InFlightWindow: Sendable {
    private let value = Atomic<Int>(0)
    var count: Int { value.load(ordering: .relaxed) }
    func add(_ count: Int) { value.add(count, ordering: .relaxed) }
    func release(_ count: Int) { if count > 0 { value.subtract(count, ordering: .relaxed) } }
}

/// The batches in flight, for the deadline sweep and shutdown.
final class BatchRegistry: Sendable {
    private let batches: Mutex<BatchDeadlines<ContinuousClock.Instant, BatchTracker>>

    init(deadline: Duration) {
        batches = Mutex(BatchDeadlines(deadline: deadline))
    }

    /// A batch starts now: its number, for `remove`.
    func insert(_ tracker: BatchTracker) -> Int { batches.withLock { $0.started(tracker, at: .now) } }
    func remove(_ id: Int) { batches.withLock { $0.finished(id) } }
    func expired(at now: ContinuousClock.Instant) -> [BatchTracker] { batches.withLock { $0.expired(at: now) } }
    package var all: [BatchTracker] { batches.withLock { $0.all } }
    var isEmpty: Bool { batches.withLock { $0.isEmpty } }
}
