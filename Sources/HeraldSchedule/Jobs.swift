import Foundation
import HeraldCore
package import HeraldEngine
import HeraldPayload
import HeraldStore
import Logging
import Synchronization

/// Runs the catalogs' jobs: for each app, job and time zone its users have, once
/// the job's local time has passed today, the zone's users are read a page at a time and those
/// whose attribute the job selects get its type, each user once per occurrence (the job and the
/// local day). Users without a `time_zone` run in UTC. A day missed while no node ran is not
/// replayed; a run cut short by a restart continues where the occurrence rows say.
package final class JobRunner: Sendable {
    let runtime: HeraldRuntime
    /// The store's minute last looked at: jobs are checked once per minute of the clock (and
    /// at once when the dev clock moves it).
    let lastMinute = Mutex<Int64>(-1)

    package init(runtime: HeraldRuntime) { self.runtime = runtime }

    /// Users read per page.
    static let pageSize = 1_000

    /// Runs what is due now, if the clock has reached another minute since the last check.
    package func runIfDue() async throws {
        let now = runtime.store.now
        let minute = Int64(now.timeIntervalSince1970 / 60)
        guard
            lastMinute.withLock({ last in
                defer { last = minute }
                return last != minute
            })
        else { return }
        for app in runtime.apps.values.sorted(by: { $0.id < $1.id }) {
            guard let catalog = app.catalog, !catalog.jobs.isEmpty else { continue }
            for zoneName in try await runtime.store.timers.userZones(appID: app.id) {
                guard let zone = TimeZone(identifier: zoneName ?? "UTC") else { continue }
                for job in catalog.jobs {
                    guard let occurrence = job.occurrence(now: now, zone: zone) else { continue }
                    let zoneKey = zoneName ?? ""
                    guard
                        try await runtime.store.timers.claimJobRun(
                            appID: app.id, job: job.name, zone: zoneKey, occurrence: occurrence)
                    else { continue }
                    try await run(
                        job, app: app, catalog: catalog, zone: zone, zoneName: zoneName, occurrence: occurrence,
                        now: now)
                }
            }
        }
    }

    private func run(
        _ job: CatalogJob, app: AppRuntime, catalog: Catalog, zone: TimeZone, zoneName: String?, occurrence: String,
        now: Date
    ) async throws {
        let prepared: (content: Data, lane: DeliveryLane)
        do {
            let composed = try NotificationComposer.compose(
                NotificationDraft(type: job.type), payloadKey: app.configuration.payloadKey, catalog: catalog,
                platforms: app.configuration.platforms,
                now: now)
            prepared = (try JSONEncoder().encode(composed.content), DeliveryLane(urgent: composed.urgent))
        } catch {
            runtime.logger.error(
                "A job's type cannot be rendered; the job is skipped",
                metadata: ["herald.job": "\(job.name)", "error": "\(error)"])
            return
        }
        var cursor = ""
        var users = 0
        var sent = 0
        while true {
            let page = try await runtime.store.timers.zoneUsers(
                appID: app.id, zone: zoneName, after: cursor, limit: Self.pageSize)
            guard let last = page.last else { break }
            cursor = last.userID
            users += page.count
            let selected = page.filter { user in
                guard
                    let attributes = try? JSONDecoder().decode(JSONValue.self, from: Data(user.attributes.utf8))
                        .objectValue,
                    let text = attributes[job.attribute]?.stringValue, let time = HeraldTime.parse(text)
                else { return false }
                return job.selects(time, now: now, zone: zone)
            }.map(\.userID)
            sent += try await runtime.store.timers.sendJobOccurrence(
                appID: app.id, job: job.name, occurrence: occurrence, userIDs: selected, notification: UUID.random(),
                content: prepared.content,
                lane: prepared.lane)
        }
        try await runtime.store.timers.finishJobRun(
            appID: app.id, job: job.name, zone: zoneName ?? "", occurrence: occurrence, users: users, sent: sent)
        if sent > 0 { runtime.wake.signal(outbox: true) }
        runtime.metrics.jobSends(app: app.id, job: job.name, sent)
        runtime.logger.info(
            "Job ran",
            metadata: [
                "herald.app": "\(app.id)", "herald.job": "\(job.name)", "herald.zone": "\(zoneName ?? "UTC")",
                "herald.occurrence": "\(occurrence)",
                "herald.users": "\(users)", "herald.sent": "\(sent)",
            ])
    }
}
