import Foundation
import HeraldCore
import HeraldTesting
import Synchronization
import Testing

@testable import HeraldEngine

/// The dispatcher's decisions without a database, a provider or real time: the instants come
/// from a `MockClock` the test moves.
@Suite struct OutboxStateMachineTests {
    typealias Machine = OutboxStateMachine<MockClock.Instant>

    static func machine() -> Machine { Machine(.init(maximumInFlight: 1000, batchSize: 300)) }

    @Test("room: a batch at most, less when answers wait, none when the window is full")
    func room() {
        let machine = Self.machine()
        #expect(machine.room(inFlight: 0, unwritten: 0) == .claim(limit: 300))
        #expect(machine.room(inFlight: 900, unwritten: 0) == .claim(limit: 100))
        #expect(machine.room(inFlight: 1000, unwritten: 0) == .full)
        // Unwritten answers count beyond a window's worth: the database is behind.
        #expect(machine.room(inFlight: 0, unwritten: 1000) == .claim(limit: 300))
        #expect(machine.room(inFlight: 0, unwritten: 1900) == .claim(limit: 100))
        #expect(machine.room(inFlight: 500, unwritten: 1600) == .full)
        #expect(machine.roomLeft(inFlight: 500, unwritten: 1600) == -100)
    }

    @Test("the outbox is claimed until it comes back empty, then every 50 ms or when work is stored there")
    func storeClaims() {
        let clock = MockClock()
        var machine = Self.machine()
        // First pass: the outbox may hold work from before the start.
        #expect(machine.storeClaim(direct: 10, limit: 300, outboxWork: false, now: clock.now) == 290)
        machine.storeClaimed(found: 290, at: clock.now)
        // It found some: there may be more.
        #expect(machine.storeClaim(direct: 0, limit: 300, outboxWork: false, now: clock.now) == 300)
        machine.storeClaimed(found: 0, at: clock.now)
        clock.advance(by: .milliseconds(10))
        // Empty a moment ago, and the API's claims fill the batch: the outbox waits.
        #expect(machine.storeClaim(direct: 5, limit: 300, outboxWork: false, now: clock.now) == nil)
        // Work stored in the outbox (another node's NOTIFY) is claimed at once.
        #expect(machine.storeClaim(direct: 5, limit: 300, outboxWork: true, now: clock.now) == 295)
        clock.advance(by: .milliseconds(40))
        #expect(machine.storeClaim(direct: 5, limit: 300, outboxWork: false, now: clock.now) == 295)
        // A full batch from the API never waits for the outbox.
        #expect(machine.storeClaim(direct: 300, limit: 300, outboxWork: true, now: clock.now) == nil)
    }

    @Test("store errors back off 1 s doubling to 30 s and are reported the first and every tenth time")
    func backoff() {
        var machine = Self.machine()
        let failures = (1...12).map { _ in machine.storeFailed() }
        #expect(failures == Array(1...12))
        #expect(failures.prefix(7).map(StoreBackoff.wait) == [1, 2, 4, 8, 16, 30, 30].map { Duration.seconds($0) })
        #expect(failures.filter(StoreBackoff.reports) == [1, 10])
        machine.storeWorked()
        #expect(machine.storeFailed() == 1)
    }

    @Test("a batch is late at its deadline on the mock clock and stays until it finishes")
    func deadlines() {
        let clock = MockClock()
        var deadlines = BatchDeadlines<MockClock.Instant, String>(deadline: .seconds(30))
        let first = deadlines.started("first", at: clock.now)
        clock.advance(by: .seconds(10))
        let second = deadlines.started("second", at: clock.now)
        clock.advance(by: .seconds(19))
        #expect(deadlines.expired(at: clock.now).isEmpty)
        clock.advance(by: .seconds(1))
        #expect(deadlines.expired(at: clock.now) == ["first"])
        clock.advance(by: .seconds(10))
        #expect(deadlines.expired(at: clock.now) == ["first", "second"])
        deadlines.finished(first)
        #expect(deadlines.all == ["second"])
        deadlines.finished(second)
        #expect(deadlines.isEmpty)
    }

    static func answer(_ id: Int64, _ disposition: DeliveryDisposition, _ reason: String?, suspect: Bool = false)
        -> ProviderAnswer
    {
        ProviderAnswer(deliveryID: id, disposition: disposition, reason: reason, attempts: 1, suspect: suspect)
    }

    static func pause(_ kind: ProviderPause.Kind) -> ProviderPause {
        ProviderPause(
            kind: kind, reason: "BadDeviceToken", since: Date(timeIntervalSince1970: 0),
            retryAt: Date(timeIntervalSince1970: 60), failures: 1)
    }

    @Test("a refused credential pauses; bad tokens pause only as the majority of enough answers")
    func judgement() {
        let credential = ProviderJudgement.judge(
            held: [Self.answer(1, .providerPaused, "InvalidProviderToken")], answered: 40, delivered: true,
            probe: nil, suspectMinimum: 50)
        #expect(credential == .pause(kind: .credential, reason: "InvalidProviderToken", paused: [1]))
        let suspects = (1...30).map { Self.answer($0, .tokenDead(since: nil), "BadDeviceToken", suspect: true) }
        #expect(
            ProviderJudgement.judge(held: suspects, answered: 50, delivered: true, probe: nil, suspectMinimum: 50)
                == .pause(kind: .tokensRejected, reason: "BadDeviceToken", paused: Set(1...30)))
        // A minority, or too few answers to say: recorded as they came.
        #expect(
            ProviderJudgement.judge(held: suspects, answered: 61, delivered: true, probe: nil, suspectMinimum: 50)
                == .record)
        #expect(
            ProviderJudgement.judge(
                held: Array(suspects.prefix(20)), answered: 20, delivered: false, probe: nil, suspectMinimum: 50)
                == .record)
        // A probe of a bad-token pause is judged by whether anything went through.
        let probe = Self.pause(.tokensRejected)
        #expect(
            ProviderJudgement.judge(
                held: Array(suspects.prefix(3)), answered: 3, delivered: false, probe: probe, suspectMinimum: 50)
                == .pause(kind: .tokensRejected, reason: "BadDeviceToken", paused: [1, 2, 3]))
        #expect(
            ProviderJudgement.judge(
                held: Array(suspects.prefix(2)), answered: 3, delivered: true, probe: probe, suspectMinimum: 50)
                == .record)
    }

    @Test("the most common reason names a pause; ties go to the first alphabetically")
    func mostCommonReason() {
        #expect(
            ProviderJudgement.mostCommonReason([
                Self.answer(1, .failed, "TopicDisallowed"), Self.answer(2, .failed, "BadTopic"),
            ]) == "BadTopic")
        #expect(
            ProviderJudgement.mostCommonReason([
                Self.answer(1, .failed, "B"), Self.answer(2, .failed, "A"), Self.answer(3, .failed, "B"),
            ]) == "B")
    }

    @Test("MockClock wakes a sleeper only when advanced past its deadline")
    func mockClock() async throws {
        let clock = MockClock()
        let woke = Mutex(false)
        let sleeper = Task {
            try await clock.sleep(for: .seconds(5))
            woke.withLock { $0 = true }
        }
        while clock.sleepers == 0 { await Task.yield() }
        clock.advance(by: .seconds(4))
        #expect(!woke.withLock { $0 })
        clock.advance(by: .seconds(1))
        try await sleeper.value
        #expect(woke.withLock { $0 })
        #expect(clock.now == MockClock.Instant(offset: .seconds(5)))
    }
}
