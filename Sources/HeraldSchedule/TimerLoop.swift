import Foundation
import HeraldCore
package import HeraldEngine
import HeraldPayload
import HeraldStore
import Logging
import ServiceLifecycle

/// Fires due timers (a track's steps) into notifications, beside the dispatcher: claims a batch,
/// skips the steps whose `unless` event happened since the anchor, renders each step once for
/// all the users whose data is the same (a wave of a million trial nudges is a few thousand
/// notifications, not a million), and writes the outcomes in one transaction. The steps fan out
/// to the devices the users have when they fire.
package struct TimerLoop: Service {
    let runtime: HeraldRuntime
    /// The longest wait between passes when nothing wakes the loop.
    var interval: Duration = .milliseconds(200)

    package init(runtime: HeraldRuntime, interval: Duration = .milliseconds(200)) {
        self.runtime = runtime
        self.interval = interval
    }
    /// Timers claimed per batch (a notification per distinct step and data among them).
    static let batchSize = 5_000

    /// Runs until graceful shutdown; the wait between passes ends at once when it comes.
    package func run() async throws {
        let stopping = OneWayFlag()
        await withGracefulShutdownHandler {
            await run(stopping: stopping, interval: interval)
        } onGracefulShutdown: {
            stopping.set()
            runtime.timerWake.signal()
        }
    }

    /// Runs until `stopping`: fires what is due, then waits for a signal (an enrolment, the
    /// clock moved) or `interval`.
    func run(stopping: OneWayFlag, interval: Duration) async {
        var failures = 0
        var backlog = false
        var next: NextPlan?
        let jobs = JobRunner(runtime: runtime)
        while !stopping.isSet && !Task.isCancelled {
            do {
                try await jobs.runIfDue()
                backlog = try await fireOnce(backlog: backlog, next: &next)
                failures = 0
                if backlog { continue }
            } catch {
                await Self.join(next)
                next = nil
                failures += 1
                if StoreBackoff.reports(failures: failures) {
                    runtime.logger.error(
                        "Timers or jobs cannot run; trying again",
                        metadata: [
                            "error": "\(String(describing: error).prefix(300))", "herald.failures": "\(failures)",
                        ])
                }
            }
            runtime.passes.timerPassed()
            await runtime.timerWake.wait(timeout: failures > 0 ? .seconds(1) : interval)
        }
        await Self.join(next)
    }

    /// Cancels the batch being read ahead and waits for it: no read outlives the loop (the
    /// store closes after it).
    private static func join(_ next: NextPlan?) async {
        guard let next else { return }
        next.cancel()
        _ = try? await next.value
    }

    /// Timers per SQLite batch: `batchSize`, at most a quarter of the dispatcher's capacity
    /// (`outbox.max_in_flight`; 2,500 at its default). A batch is written once the dispatcher has
    /// room for all its steps' devices; with batches of half the capacity, the loop waited for
    /// that room for half of a 300k wave (6.0 s of 12.8 s), and the dispatcher had at most
    /// two batches to work on.
    private var batchLimit: Int {
        guard let capacity = runtime.direct.bulkRoom?.capacity else { return Self.batchSize }
        return min(Self.batchSize, max(1, capacity / 4))
    }

    /// The next batch, being read while this one is written (SQLite).
    typealias NextPlan = Task<TimerRepository.FirePlan?, any Error>

    /// Fires one batch of due timers; returns whether it was full (more may be due).
    ///
    /// The steps' deliveries are handed to this node's dispatcher as they are written, as many
    /// as it has room for: a wave of due steps costs no claim transaction. During a wave
    /// (`backlog`: the last batch was full), steps are written only as fast as the dispatcher
    /// takes their deliveries: the loop waits up to a second for room for them, so they are
    /// handed out, not queued to be claimed again.
    ///
    /// On SQLite a batch is read and decided beside the writer (`planDueTimers`), then written
    /// (`writeDueTimers`); during a wave the next batch is read (`next`) while this one is
    /// written and sent. On PostgreSQL a batch is claimed, decided and written
    /// (`fireDueTimers`): the decision runs outside any transaction, no row locked meanwhile.
    func fireOnce(backlog: Bool, next: inout NextPlan?) async throws -> Bool {
        let store = runtime.store
        guard store.dialect == .sqlite else { return try await fireClaimed(backlog: backlog) }
        let limit = batchLimit
        let planned: TimerRepository.FirePlan?
        if let task = next {
            next = nil
            planned = try await task.value
        } else {
            planned = try await store.timers.planDueTimers(limit: limit, directUpTo: .max, decide: decide)
        }
        guard let plan = planned else { return false }
        let full = plan.timers.count == limit
        if full {
            let decide = self.decide
            next = Task {
                try await store.timers.planDueTimers(limit: limit, directUpTo: .max, after: plan.last, decide: decide)
            }
        }
        var directUpTo = 0
        if let (free, capacity) = runtime.direct.bulkRoom {
            directUpTo = backlog || full ? await room(atLeast: min(plan.devicesRead, capacity), from: free) : free
        }
        let started = ContinuousClock.now
        let result = try await store.timers.writeDueTimers(plan, directUpTo: directUpTo)
        await finish(result, started: started)
        return full
    }

    /// The dispatcher's room, once it is `needed` (from `free`), or after a second.
    private func room(atLeast needed: Int, from free: Int) async -> Int {
        var room = free
        let waitUntil = ContinuousClock.now + .seconds(1)
        while room < needed, ContinuousClock.now < waitUntil, !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(5))
            guard let now = runtime.direct.bulkRoom?.room else { break }
            room = now
        }
        return room
    }

    /// PostgreSQL: one batch claimed, decided and written (`fireDueTimers`), as many steps as
    /// the dispatcher has room for during a wave.
    private func fireClaimed(backlog: Bool) async throws -> Bool {
        var limit = Self.batchSize
        var directUpTo = 0
        if let (free, capacity) = runtime.direct.bulkRoom {
            directUpTo = free
            if backlog {
                let enough = max(1, capacity / 10)
                directUpTo = await room(atLeast: enough, from: free)
                limit = min(Self.batchSize, max(directUpTo, enough))
            }
        }
        let started = ContinuousClock.now
        let result = try await runtime.store.timers.fireDueTimers(limit: limit, directUpTo: directUpTo, decide: decide)
        guard result.taken > 0 else { return false }
        await finish(result, started: started)
        return result.taken == limit
    }

    /// What due timers become, app by app.
    @Sendable private func decide(_ reads: TimerRepository.TimerReads, _ timers: [TimerRepository.DueTimer])
        async throws
        -> [TimerRepository.TimerOutcome]
    {
        var outcomes: [TimerRepository.TimerOutcome] = []
        for (appID, appTimers) in Dictionary(grouping: timers, by: \.appID).sorted(by: { $0.key < $1.key }) {
            outcomes += try await self.outcomes(appID: appID, appTimers, reads: reads)
        }
        return outcomes
    }

    /// A written batch's metrics and logs, and its deliveries to the dispatcher.
    private func finish(_ result: TimerRepository.FiredTimers, started: ContinuousClock.Instant) async {
        let seconds = (ContinuousClock.now - started).seconds
        runtime.metrics.outboxStore("timer_fire", seconds: seconds)
        runtime.metrics.outboxStage("timer_fire", seconds: seconds)
        let timers = result.timers
        var counts: [String: [String: Int]] = [:]
        for outcome in result.outcomes {
            switch outcome {
            case .send(let appID, _, _, _, _, _, let ids): counts[appID, default: [:]]["fired", default: 0] += ids.count
            case .skipped(let ids, _):
                for id in ids { counts[timers[id]?.appID ?? "", default: [:]]["skipped", default: 0] += 1 }
            case .failed(let ids, let reason):
                var byApp: [String: Int] = [:]
                for id in ids { byApp[timers[id]?.appID ?? "", default: 0] += 1 }
                for (appID, count) in byApp.sorted(by: { $0.key < $1.key }) {
                    counts[appID, default: [:]]["failed", default: 0] += count
                    runtime.logger.error(
                        "Track steps could not be sent",
                        metadata: ["herald.app": "\(appID)", "herald.steps": "\(count)", "herald.reason": "\(reason)"])
                }
            }
        }
        for (appID, byOutcome) in counts {
            for (outcome, count) in byOutcome { runtime.metrics.timers(app: appID, outcome: outcome, count) }
        }
        // The steps' deliveries go straight to this node's dispatcher while it has room.
        let stopped = runtime.direct.add(result.claimed)
        if !stopped.isEmpty { try? await runtime.store.nodes.unclaim(stopped) }
        if result.notifications > 0 {
            runtime.wake.signal(outbox: result.claimed.isEmpty)
            runtime.logger.debug(
                "Timers fired",
                metadata: ["herald.timers": "\(result.fired)", "herald.notifications": "\(result.notifications)"])
        }
    }

    /// What each of an app's due timers becomes.
    private func outcomes(appID: String, _ all: [TimerRepository.DueTimer], reads: TimerRepository.TimerReads)
        async throws
        -> [TimerRepository.TimerOutcome]
    {
        let syncs = all.filter { $0.kind == "sync" }
        let timers = all.filter { $0.kind != "sync" }
        var outcomes = syncOutcomes(appID: appID, syncs)
        guard !timers.isEmpty else { return outcomes }
        guard let app = runtime.apps[appID], let catalog = app.catalog else {
            return outcomes + [
                .failed(timers: timers.map(\.id), reason: "the app has no catalog (apps[].catalog) with its tracks")
            ]
        }
        var live: [(TimerRepository.DueTimer, CatalogTrack, CatalogStep)] = []
        var missing: [Int64] = []
        for timer in timers {
            guard let track = catalog.track(timer.name), let step = track.step(timer.step) else {
                missing.append(timer.id)
                continue
            }
            live.append((timer, track, step))
        }
        if !missing.isEmpty { outcomes.append(.failed(timers: missing, reason: "StepNotInCatalog")) }
        // `unless`: the users who did the event since their anchor skip the step.
        var skipped: [String: [Int64]] = [:]
        for event in Set(live.compactMap { $0.2.unless }).sorted() {
            let users = live.filter { $0.2.unless == event }.map(\.0.userID)
            let last = try await reads.lastEvents(appID: appID, name: event, userIDs: Array(Set(users)))
            for (timer, _, step) in live where step.unless == event {
                if let at = last[timer.userID], at >= (timer.anchorAt ?? .distantPast) {
                    skipped[event, default: []].append(timer.id)
                }
            }
        }
        for (event, ids) in skipped.sorted(by: { $0.key < $1.key }) {
            outcomes.append(.skipped(timers: ids, reason: "unless \(event)"))
        }
        let skippedIDs = Set(skipped.values.joined())
        // One notification per (track, step, data, trace): the same content for all its users.
        struct Key: Hashable {
            var track: String
            var step: String
            package var data: String
            var trace: String?
        }
        var groups: [Key: [TimerRepository.DueTimer]] = [:]
        var order: [Key] = []
        for (timer, _, _) in live where !skippedIDs.contains(timer.id) {
            let key = Key(track: timer.name, step: timer.step, data: timer.data ?? "{}", trace: timer.trace)
            if groups[key] == nil { order.append(key) }
            groups[key, default: []].append(timer)
        }
        for key in order {
            guard let members = groups[key], let track = catalog.track(key.track), let step = track.step(key.step)
            else { continue }
            var data: [String: JSONValue] = step.data.mapValues { .string($0) }
            if let enrolled = try? JSONDecoder().decode(JSONValue.self, from: Data(key.data.utf8)).objectValue {
                data.merge(enrolled) { _, new in new }
            }
            let draft = NotificationDraft(data: .object(data), type: step.type)
            do {
                let composed = try NotificationComposer.compose(
                    draft, payloadKey: app.configuration.payloadKey, catalog: catalog,
                    platforms: app.configuration.platforms, now: runtime.store.now)
                let content = try JSONEncoder().encode(composed.content)
                outcomes.append(
                    .send(
                        appID: appID, notification: UUID.random(), content: content,
                        lane: DeliveryLane(urgent: composed.urgent),
                        cancelKey: track.cancelKey, trace: key.trace, timers: members.map(\.id)))
            } catch let error as CompositionError {
                outcomes.append(.failed(timers: members.map(\.id), reason: "\(error.field): \(error.message)"))
            }
        }
        return outcomes
    }

    /// Silent syncs: `content-available`, push type background, priority 5, the
    /// cursor under the payload key; one notification per cursor (and trace) for its devices.
    private func syncOutcomes(appID: String, _ timers: [TimerRepository.DueTimer]) -> [TimerRepository.TimerOutcome] {
        guard !timers.isEmpty else { return [] }
        guard let app = runtime.apps[appID] else {
            return [.failed(timers: timers.map(\.id), reason: "the app is no longer configured")]
        }
        struct Key: Hashable {
            var cursor: String
            var trace: String?
        }
        var groups: [Key: [TimerRepository.DueTimer]] = [:]
        for timer in timers { groups[Key(cursor: timer.data ?? "", trace: timer.trace), default: []].append(timer) }
        return groups.sorted { $0.key.cursor < $1.key.cursor }.map { key, members in
            let draft = NotificationDraft(
                data: .object(["cursor": .string(key.cursor)]), pushType: "background", priority: 5,
                contentAvailable: true)
            do {
                let composed = try NotificationComposer.compose(
                    draft, payloadKey: app.configuration.payloadKey, catalog: nil,
                    platforms: app.configuration.platforms,
                    now: runtime.store.now)
                return .send(
                    appID: appID, notification: UUID.random(), content: try JSONEncoder().encode(composed.content),
                    lane: .normal, cancelKey: nil,
                    trace: key.trace, timers: members.map(\.id))
            } catch {
                return .failed(timers: members.map(\.id), reason: "\(error)")
            }
        }
    }
}
