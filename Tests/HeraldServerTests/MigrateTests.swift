import Foundation
import HTTPTypes
import HeraldCore
import HeraldEngine
import HeraldPayload
import HeraldSimulator
import HeraldStore
import HeraldTesting
import Synchronization
import Testing

/// `herald migrate`: a SQLite store with work in every state moved into PostgreSQL, where a
/// server picks up what SQLite left: the scheduled send goes at its time, the track's next step
/// fires, an action token sent from SQLite commits.
@Suite("herald migrate: SQLite to PostgreSQL", .enabled(if: TestDatabase.postgresAvailable))
struct MigrateTests {
    static let catalog = """
        app: { name: Migrate, payload_key: demo }
        types:
          nudge: { copy: { en: { title: "Day {day}", body: "Step {day} of your trial." } }, placeholders: [day] }
          approval:
            copy: { en: { title: "Approve?", body: "Card {card_id}" } }
            placeholders: [card_id]
            actions:
              - { id: APPROVE, title: "Approve", resolved: "Approved on {device}" }
          news: { copy: { en: { title: "News", body: "Scheduled news." } } }
        tracks:
          trial:
            anchor: trial_started
            steps:
              - { id: d1, type: nudge, after: 1d, data: { day: "1" } }
              - { id: d2, type: nudge, after: 2d, data: { day: "2" } }
        """

    /// A server on `database` with the test's catalog, its webhook at `webhook`, on a clock the
    /// test moves.
    static func withAppServer(
        database: String, catalog: String, webhook: String,
        _ body: @escaping @Sendable (ServerHarness) async throws -> Void
    ) async throws {
        try await withServer(
            app: {
                $0.catalogFile = catalog
                $0.webhook = .init(url: webhook, secrets: [WebhookReceiver.secret])
            },
            configure: {
                $0.databaseURL = database
                $0.clock = .manual
            }, { _ in }, body)
    }

    /// What the SQLite run left for the PostgreSQL run to check.
    struct Left: Sendable {
        var start = Date()
        var approveToken = ""
        var approval = ""
        var scheduledAt = Date()
    }

    @Test(
        "every kind of row moves; --verify matches; PostgreSQL sends the scheduled notification and the next track step when due, and commits an old action token"
    )
    func migrate() async throws {
        let directory = try makeTemporaryDirectory("herald-migrate")
        let catalogFile = directory + "/catalog.yaml"
        try Self.catalog.write(toFile: catalogFile, atomically: true, encoding: .utf8)
        let sqliteURL = "sqlite://\(directory)/herald.sqlite"
        let postgresURL = try await TestDatabase.url("migrate", kind: .postgres)
        let token = makeDeviceTokens(1)[0]
        let left = Mutex(Left())

        try await WebhookReceiver.with { receiver, url in
            receiver.answer { _ in .init(body: #"{"ok":true}"#) }
            // The SQLite server: a device, a user's zone, an enrolment with its first step sent, an
            // approval with action tokens, a send scheduled three hours ahead, opens, events.
            try await Self.withAppServer(database: sqliteURL, catalog: catalogFile, webhook: url) { server in
                let start = try #require(server.runtime.devClock?.now)
                #expect(try await server.register("ana-phone", user: "ana", token: token) == .created)
                #expect(
                    try await server.request(.put, "/v1/apps/demo/users/ana", json: #"{"time_zone":"Europe/Paris"}"#)
                        .status == .ok)
                let enrolled = try await server.request(
                    .put, "/v1/apps/demo/users/ana/tracks/trial",
                    json: #"{"anchor_at":"\#(HeraldTime.format(start))"}"#)
                #expect(enrolled.status == .ok)
                try await TrackTests.advance(server, to: start.addingTimeInterval(86_400))
                try await eventually { TrackTests.titles(server, token).contains("Day 1") }

                let approval = try await server.send(
                    #"{"to":{"user_ids":["ana"]},"type":"approval","data":{"card_id":"c1"}}"#)
                let approvalID = try #require(approval.body["id"] as? String)
                _ = try await server.settled(approvalID)
                let stamp = try #require(
                    EngagementTests.stamps(server, token, payloadKey: "demo").last { $0.actionTokens != nil })
                let approve = try #require(stamp.actionTokens?["APPROVE"])

                let scheduledAt = start.addingTimeInterval(86_400 + 3 * 3_600)
                let scheduled = try await server.send(
                    #"{"to":{"user_ids":["ana"]},"type":"news","deliver_at":"\#(HeraldTime.format(scheduledAt))"}"#)
                #expect(scheduled.status == .accepted)
                _ = try await server.request(
                    .post, "/v1/apps/demo/events", json: #"{"name":"signed_in","user_id":"ana"}"#)
                left.withLock {
                    $0 = Left(start: start, approveToken: approve, approval: approvalID, scheduledAt: scheduledAt)
                }
            }

            let run = try await runProcess(
                heraldExecutable,
                ["migrate", "--from", sqliteURL, "--to", postgresURL, "--verify", "--batch-size", "7"])
            #expect(run.status == 0, "\(run.stderr)")
            let summary = try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any]
            #expect(summary?["verified"] as? Bool == true)
            let tables = summary?["tables"] as? [String: Int] ?? [:]
            for table in ["devices", "users", "notifications", "deliveries", "enrolments", "timers", "app_secrets"] {
                #expect((tables[table] ?? 0) > 0, "\(table): \(tables)")
            }
            // Run again: nothing left to copy, and a database in use is never written into.
            let again = try await runProcess(heraldExecutable, ["migrate", "--from", sqliteURL, "--to", postgresURL])
            #expect(again.status == 0 && again.stderr.contains("already migrated"), "\(again.stderr)")

            // The PostgreSQL server, on a clock that starts now again.
            let left = left.withLock { $0 }
            try await Self.withAppServer(database: postgresURL, catalog: catalogFile, webhook: url) { server in
                let committed = try await ActionTests.commit(server, token: left.approveToken, device: "ana-phone")
                #expect(
                    committed.status == 200 && committed.body["status"] as? String == "committed", "\(committed.body)")
                // The commit resolved the notification for the user (a user with one device: no
                // replacement to send); resolving again answers that first resolution.
                let resolved = try await server.request(
                    .post, "/v1/apps/demo/notifications/\(left.approval)/resolve",
                    json: #"{"device_id":"ana-phone","label":"again"}"#)
                #expect(resolved.status == .ok && resolved.body["first"] as? Bool == false, "\(resolved.body)")
                #expect(resolved.body["devices"] as? Int == 0)

                try await TrackTests.advance(server, to: left.scheduledAt.addingTimeInterval(-60))
                try await server.settle()
                #expect(!TrackTests.titles(server, token).contains("News"))
                try await TrackTests.advance(server, to: left.scheduledAt)
                try await eventually { TrackTests.titles(server, token).contains("News") }
                try await TrackTests.advance(server, to: left.start.addingTimeInterval(2 * 86_400))
                try await eventually { TrackTests.titles(server, token).contains("Day 2") }
                #expect(
                    !TrackTests.titles(server, token).contains("Day 1"), "the step sent from SQLite is not sent again")
            }
        }
    }

    struct Interrupted: Error {}

    @Test("an interrupted migration resumes after its last batch: every row once, checksums equal")
    func resumes() async throws {
        let directory = try makeTemporaryDirectory("herald-migrate-resume")
        let sqliteURL = "sqlite://\(directory)/herald.sqlite"
        let postgresURL = try await TestDatabase.url("migrate-resume", kind: .postgres)
        try await withServer(configure: { $0.databaseURL = sqliteURL }, { _ in }) { server in
            for (index, token) in makeDeviceTokens(9).enumerated() {
                let status = try await server.register("d\(index)", user: "u\(index % 3)", token: token)
                #expect(status == .created)
            }
            let sent = try await server.send(#"{"to":{"all":true},"alert":{"body":"to all"}}"#)
            _ = try await server.settled(try #require(sent.body["id"] as? String))
        }
        let source = try await HeraldStore.open(url: sqliteURL)
        let target = try await HeraldStore.open(url: postgresURL)
        let migration = try StoreMigration(source: source, target: target, batchSize: 2)
        // Stopped in the middle of the deliveries, two batches of two rows written.
        await #expect(throws: Interrupted.self) {
            try await migration.run { progress in
                if progress.table == "deliveries" && progress.copied == 4 { throw Interrupted() }
            }
        }
        #expect(try await migration.state() == (started: true, finished: false))
        let tables = try await migration.run()
        #expect(tables.first { $0.table == "devices" }?.copied == 9)
        #expect(tables.first { $0.table == "deliveries" }?.copied == 9)
        let verified = try await migration.verify()
        #expect(!verified.isEmpty && verified.allSatisfy(\.matches), "\(verified.filter { !$0.matches })")
        #expect(try await migration.state() == (started: true, finished: true))
        await source.close()
        await target.close()
    }

    @Test("a PostgreSQL database already in use is refused, and nothing is written into it")
    func refusesADatabaseInUse() async throws {
        let directory = try makeTemporaryDirectory("herald-migrate-used")
        let sqliteURL = "sqlite://\(directory)/herald.sqlite"
        let postgresURL = try await TestDatabase.url("migrate-used", kind: .postgres)
        await (try await HeraldStore.open(url: sqliteURL)).close()
        try await withServer(configure: { $0.databaseURL = postgresURL }, dispatcher: false, { _ in }) { server in
            let token = makeDeviceTokens(1)[0]
            let status = try await server.register("bo-phone", user: "bo", token: token)
            #expect(status == .created)
        }
        let run = try await runProcess(heraldExecutable, ["migrate", "--from", sqliteURL, "--to", postgresURL])
        #expect(run.status == 2 && run.stderr.contains("not empty"), "\(run.stderr)")
        // Nothing was written: no migration record in the database in use.
        let resumed = try await runProcess(heraldExecutable, ["migrate", "--from", sqliteURL, "--to", postgresURL])
        #expect(resumed.status == 2 && resumed.stderr.contains("not empty"))
    }
}
