import Foundation
import HeraldStore
import Logging
import ServiceLifecycle

/// Deletes history older than `outbox.retention` and keeps PostgreSQL's delivery partitions
/// ahead, every `retentionInterval` (a minute); after each pass it checks the types' click-through
/// goals. A service of its own beside the dispatcher: it stops at graceful shutdown.
package struct RetentionService: Service {
    let runtime: HeraldRuntime
    let configuration: DispatcherConfiguration

    package init(runtime: HeraldRuntime, configuration: DispatcherConfiguration) {
        self.runtime = runtime
        self.configuration = configuration
    }

    package func run() async throws {
        let stopping = OneWayFlag()
        await withGracefulShutdownHandler {
            await run(stopping: stopping)
        } onGracefulShutdown: {
            stopping.set()
        }
    }

    /// Every `retentionInterval` until `stopping`: deletes history older than `outbox.retention`,
    /// `pruneStep` rows of each kind per transaction, until none is left.
    func run(stopping: OneWayFlag) async {
        var failures = 0
        while !stopping.isSet && !Task.isCancelled {
            var pruned = HeraldStore.Pruned()
            let cutoff = runtime.store.now.addingTimeInterval(-configuration.retention)
            do {
                let upkeep = try await runtime.store.maintainPartitions(before: cutoff)
                pruned.deliveries += upkeep.droppedRows
                logPartitions(upkeep)
                while !stopping.isSet {
                    let step = try await runtime.store.pruneHistory(before: cutoff, limit: Self.pruneStep)
                    pruned += step
                    guard step.reached(Self.pruneStep) else { break }
                    await Task.yield()
                }
                failures = 0
            } catch {
                failures += 1
                if StoreBackoff.reports(failures: failures) {
                    runtime.logger.error(
                        "Retention cannot delete old history; trying again later",
                        metadata: [
                            "error": "\(String(describing: error).prefix(300))", "herald.failures": "\(failures)",
                        ])
                }
            }
            if pruned.total > 0 {
                runtime.metrics.retentionDeleted(pruned)
                runtime.logger.info(
                    "Retention deleted history older than outbox.retention",
                    metadata: [
                        "herald.deliveries": "\(pruned.deliveries)", "herald.notifications": "\(pruned.notifications)",
                        "herald.user_sends": "\(pruned.userSends)", "herald.history": "\(pruned.history)",
                        "herald.retention_seconds": "\(Int(configuration.retention))",
                    ])
            }
            await runtime.goalWatch.check(runtime)
            let next = ContinuousClock.now + configuration.retentionInterval
            while !stopping.isSet && !Task.isCancelled && ContinuousClock.now < next {
                try? await Task.sleep(for: .milliseconds(100))
            }
        }
    }

    /// Says what the partition upkeep (PostgreSQL) created, dropped, or could not create.
    private func logPartitions(_ upkeep: HeraldStore.PartitionUpkeep) {
        let logger = runtime.logger
        if !upkeep.created.isEmpty {
            logger.info(
                "Deliveries partitions created ahead",
                metadata: ["herald.partitions": "\(upkeep.created.joined(separator: ","))"])
        }
        if !upkeep.dropped.isEmpty {
            logger.info(
                "Deliveries partitions past outbox.retention dropped",
                metadata: [
                    "herald.partitions": "\(upkeep.dropped.joined(separator: ","))",
                    "herald.deliveries": "\(upkeep.droppedRows)",
                ])
        }
        if !upkeep.skipped.isEmpty {
            logger.warning(
                "No partition for these days: the DEFAULT partition already holds their deliveries (they are deleted row by row)",
                metadata: ["herald.partitions": "\(upkeep.skipped.joined(separator: ","))"])
        }
    }

    /// Rows of each kind the retention clean-up deletes per transaction.
    static let pruneStep = 5_000
}
