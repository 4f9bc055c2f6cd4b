import Foundation
import HTTPTypes
import HeraldCore
import HeraldEngine
import HeraldSimulator
import HeraldStore
import HeraldTesting
import Logging
import Synchronization
import Testing

/// A crash loses the answers a process received and had not written; its answer journal keeps
/// them, and the next start writes them under the claims the stopped process held instead of
/// sending them again.
@Suite("Answer journal")
struct AnswerJournalTests {
    @Test(
        "a stopped process's journaled answers are written once at the next start: those it had written are not counted twice, a torn line is left out, a live process's journal is not read"
    )
    func replayWritesWhatWasUnwritten() async throws {
        let url = try await TestDatabase.url("journal-replay")
        let directory = try makeTemporaryDirectory("herald-journal")
        let first = try await HeraldStore.open(url: url)
        #expect(try await first.devices.importDevices(appID: "a", makeDeviceRecords(10)) == 10)
        let (notification, _) = try await first.notifications.createNotification(
            appID: "a", id: UUID(), idempotencyKey: nil, content: Data("{}".utf8), recipients: .all,
            excludeDeviceIDs: [], dueAt: Date())
        let held = try await first.outbox.claimDueDeliveries(limit: 10)
        #expect(held.count == 10)
        // Seven answers arrive (one a dead token); the first write, of three, commits; the
        // process dies with four unwritten and a line half written.
        var journal = try AnswerJournal(directory: directory, node: first.nodeID, logger: Logger(label: "test"))
        let answers = held.prefix(7).enumerated().map { index, delivery in
            DeliveryResult(
                delivery, index == 6 ? .tokenDead(reason: "Unregistered", since: Date()) : .sent, attempts: 1)
        }
        for answer in answers { #expect(journal.append(answer, now: .now) == 0) }
        journal.taking()
        #expect(try await first.outbox.recordResults(Array(answers.prefix(3))) == 3)
        journal.committed([(segment: 0, count: 3)])
        journal.finish()
        let segment = AnswerJournal.segmentPath(directory, first.nodeID, 0)
        let torn = try FileHandle(forWritingTo: URL(fileURLWithPath: segment))
        try torn.seekToEnd()
        try torn.write(contentsOf: Data(#"{"d":12,"c":"#.utf8))
        try torn.close()
        await first.close()
        // A process still running beside it: its journal stays its own.
        var live = try AnswerJournal(directory: directory, node: "live-node", logger: Logger(label: "test"))
        _ = live.append(DeliveryResult(held[9], .sent, attempts: 1), now: .now)
        live.taking()
        defer { live.finish() }

        let second = try await HeraldStore.open(url: url)
        defer { Task { await second.close() } }
        let replayed = try await AnswerJournal.replay(directory: directory, except: second.nodeID, store: second)
        #expect(replayed.journals == 1)
        #expect(replayed.answers == .init(written: 4, skipped: 3))
        #expect(replayed.unreadable == 1)
        // The rows, and the notification's counters (not counted twice).
        let rows = try await second.notifications.deliveries(notificationID: notification.id, limit: 100, offset: 0)
        #expect(rows.filter { $0.status == .sent }.count == 6 && rows.filter { $0.status == .failed }.count == 1)
        let counts = try await second.notifications.deliveryCounts(notificationID: notification.id)
        #expect(counts[.sent] == 6 && counts[.failed] == 1)
        #expect(try await second.devices.device(appID: "a", deviceID: "d6")?.active == false)
        // The journal is gone; the live one is not; a second start writes nothing.
        #expect(!FileManager.default.fileExists(atPath: segment))
        #expect(FileManager.default.fileExists(atPath: AnswerJournal.segmentPath(directory, "live-node", 0)))
        #expect(
            try await AnswerJournal.replay(directory: directory, except: second.nodeID, store: second)
                == AnswerJournal.Replayed())
        // The three never answered are what the stopped node's claim still sends.
        #expect(try await second.nodes.rescueDeadClaims(deadAfter: 0) == 3)
        let again = try await second.outbox.claimDueDeliveries(limit: 100)
        #expect(again.map(\.deviceID) == ["d7", "d8", "d9"])
    }

    @Test(
        "a page taken back by another node keeps what that node does: a stopped node's journaled answers under the old claim are not written"
    )
    func replayIsFencedByTheClaim() async throws {
        let url = try await TestDatabase.url("journal-fenced")
        let directory = try makeTemporaryDirectory("herald-journal")
        let first = try await HeraldStore.open(url: url)
        #expect(try await first.devices.importDevices(appID: "a", makeDeviceRecords(4)) == 4)
        _ = try await first.notifications.createNotification(
            appID: "a", id: UUID(), idempotencyKey: nil, content: Data("{}".utf8), recipients: .all,
            excludeDeviceIDs: [], dueAt: Date())
        let held = try await first.outbox.claimDueDeliveries(limit: 4)
        var journal = try AnswerJournal(directory: directory, node: first.nodeID, logger: Logger(label: "test"))
        for delivery in held { _ = journal.append(DeliveryResult(delivery, .sent, attempts: 1), now: .now) }
        journal.finish()
        await first.close()
        let second = try await HeraldStore.open(url: url)
        defer { Task { await second.close() } }
        // Another node took the page back before the journal was read.
        #expect(try await second.nodes.rescueDeadClaims(deadAfter: 0) == 4)
        #expect(try await second.outbox.claimDueDeliveries(limit: 100).count == 4)
        let replayed = try await AnswerJournal.replay(directory: directory, except: second.nodeID, store: second)
        #expect(replayed.answers == .init(written: 0, skipped: 4))
    }
}

/// The journal under `herald serve`: the witness is the simulator's inbox.
@Suite("Answer journal at a restart")
struct AnswerJournalRestartTests {
    /// Six devices registered and a notification to all accepted, nothing sent (no dispatcher).
    static func sendToSixDevices(_ url: String) async throws -> [String] {
        let tokens = makeDeviceTokens(6)
        try await withServer(configure: { $0.databaseURL = url }, dispatcher: false) { server in
            for (index, token) in tokens.enumerated() {
                #expect(try await server.register("d\(index)", user: "u\(index)", token: token) == .created)
            }
            let sent = try await server.send(#"{"to":{"all":true},"alert":{"body":"Your trial ends tomorrow"}}"#)
            #expect(sent.status == .accepted)
        }
        return tokens
    }

    /// The stopped process's three unanswered claims are queued again and sent; the devices
    /// whose answers were journaled get nothing, and all six count as sent.
    static func expectOnlyUnansweredSent(
        _ server: ServerHarness, tokens: [String], answered: Set<String>, notification id: String
    ) async throws {
        // (A start's own rescue may hold PostgreSQL's rescue lock a moment: asked again.)
        let rescued = Mutex(0)
        try await eventually {
            let more = try await server.runtime.store.nodes.rescueDeadClaims(deadAfter: 0)
            return rescued.withLock {
                $0 += more
                return $0 >= 3
            }
        }
        #expect(rescued.withLock { $0 } == 3)
        server.runtime.wake.signal()
        try await eventually { server.simulator.state.inboxSummary().total == 3 }
        let view = try await server.settled(id)
        #expect((view["counts"] as? [String: Int])?["sent"] == 6)
        for (index, token) in tokens.enumerated() {
            #expect(server.simulator.state.inbox(for: token).count == (answered.contains("d\(index)") ? 0 : 1))
        }
    }

    @Test(
        "killed with answers unwritten: the next start writes them from the journal, and only the unanswered devices get the notification again"
    )
    func restartSendsOnlyTheUnanswered() async throws {
        let url = try await TestDatabase.migratedURL("journal-restart")
        let directory = try makeTemporaryDirectory("herald-journal")
        // On SQLite the journal's default place is beside the file; PostgreSQL needs one named.
        let place: DispatcherConfiguration.AnswerJournalPlace =
            TestDatabase.kind == .sqlite ? .besideDatabase : .directory(directory)
        let journalDirectory = try #require(place.directory(databaseURL: url, stateDirectory: nil))
        let tokens = try await Self.sendToSixDevices(url)
        // The process that claimed the six and had three answers when it was killed.
        let killed = try await HeraldStore.open(url: url)
        let held = try await killed.outbox.claimDueDeliveries(limit: 10)
        #expect(held.count == 6)
        var journal = try AnswerJournal(
            directory: journalDirectory, node: killed.nodeID, logger: Logger(label: "test"))
        for delivery in held.prefix(3) { _ = journal.append(DeliveryResult(delivery, .sent, attempts: 1), now: .now) }
        journal.finish()
        await killed.close()
        let answered = Set(held.prefix(3).map(\.deviceID))
        let id = held[0].notificationID.uuidString.lowercased()

        try await withServer(
            configure: {
                $0.databaseURL = url
                $0.outbox.answerJournal = place
            }
        ) { server in
            // Written at the start, before any claim of the killed process is queued again.
            try await eventually {
                !FileManager.default.fileExists(atPath: AnswerJournal.lockPath(journalDirectory, killed.nodeID))
            }
            try await Self.expectOnlyUnansweredSent(server, tokens: tokens, answered: answered, notification: id)
            #expect(try await server.metricsText().contains("herald_journaled_answers_total 3"))
        }
    }

    @Test(
        "a process that stops beside a running one: the running one writes its journaled answers at its next heartbeat, before the stopped one's claims are queued again"
    )
    func survivorWritesAStoppedSiblingsAnswers() async throws {
        let url = try await TestDatabase.migratedURL("journal-sibling")
        let directory = try makeTemporaryDirectory("herald-journal")
        let tokens = try await Self.sendToSixDevices(url)
        // A sibling that claimed the six and has three answers journaled, alive while the
        // other starts (its lock held: the start leaves its journal alone).
        let sibling = try await HeraldStore.open(url: url)
        let held = try await sibling.outbox.claimDueDeliveries(limit: 10)
        #expect(held.count == 6)
        var journal = try AnswerJournal(directory: directory, node: sibling.nodeID, logger: Logger(label: "test"))
        for delivery in held.prefix(3) { _ = journal.append(DeliveryResult(delivery, .sent, attempts: 1), now: .now) }
        journal.taking()
        let running = Mutex(journal)
        let answered = Set(held.prefix(3).map(\.deviceID))
        let id = held[0].notificationID.uuidString.lowercased()
        let lock = AnswerJournal.lockPath(directory, sibling.nodeID)

        try await withServer(
            configure: {
                $0.databaseURL = url
                $0.outbox.answerJournal = .directory(directory)
            }
        ) { server in
            try await eventually { try await server.metricsText().contains("herald_outbox_in_flight") }
            #expect(FileManager.default.fileExists(atPath: lock))
            // The sibling stops (its lock is released, its unwritten answers stay).
            running.withLock { $0.finish() }
            await sibling.close()
            // Within a heartbeat (5 s), well before its claims are judged dead (20 s).
            var waited = 0
            while FileManager.default.fileExists(atPath: lock) && waited < 600 {
                try await Task.sleep(for: .milliseconds(50))
                waited += 1
            }
            #expect(!FileManager.default.fileExists(atPath: lock))
            #expect(try await server.metricsText().contains("herald_journaled_answers_total 3"))
            try await Self.expectOnlyUnansweredSent(server, tokens: tokens, answered: answered, notification: id)
        }
    }
}
