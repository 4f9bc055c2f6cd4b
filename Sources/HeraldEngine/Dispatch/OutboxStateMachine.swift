import HeraldCore

/// The dispatcher's decisions, without I/O and without a clock of its own: how much it may
/// claim, whether the outbox itself is claimed or only what the API claimed at acceptance, how
/// many store errors came in a row. The loop
/// around it does what each answer says and reports what happened; the instants come from the
/// loop's clock (a `MockClock` in tests).
struct OutboxStateMachine<Instant: InstantProtocol> where Instant.Duration == Duration {
    struct Configuration {
        /// Deliveries sent and unanswered, across batches, before claiming waits.
        var maximumInFlight: Int
        var batchSize: Int
        /// While sends claimed at acceptance keep coming, the outbox is still claimed this often.
        var storeClaimInterval: Duration = .milliseconds(50)
    }

    /// What the loop does next about claiming.
    enum Room: Equatable {
        /// Too many deliveries wait for answers or to be written: wait a little and ask again.
        case full
        /// Claim at most this many.
        case claim(limit: Int)
    }

    let configuration: Configuration
    private var lastStoreClaim: Instant?
    /// The last outbox claim found deliveries: there may be more (a broadcast hands out a page at
    /// a time), so the next one claims the outbox again.
    private var storeBacklog = true
    private var failures = 0

    init(_ configuration: Configuration) {
        self.configuration = configuration
    }

    /// How much may be claimed with `inFlight` deliveries waiting for answers and `unwritten`
    /// answers waiting to be written. Answers not yet written count too, beyond a window's worth:
    /// when the database writes results slower than the providers answer, claiming waits
    /// instead of piling answers up in memory.
    func room(inFlight: Int, unwritten: Int) -> Room {
        let room = roomLeft(inFlight: inFlight, unwritten: unwritten)
        return room > 0 ? .claim(limit: min(configuration.batchSize, room)) : .full
    }

    /// The room left, negative when over (the API's direct claims read it).
    func roomLeft(inFlight: Int, unwritten: Int) -> Int {
        configuration.maximumInFlight - inFlight - max(0, unwritten - configuration.maximumInFlight)
    }

    /// After `direct` deliveries were taken from the API's claims toward `limit`: how many to claim
    /// from the outbox itself, or nil to go without. The outbox is claimed when work was stored
    /// there (`outboxWork`: an accept not claimed directly, another node's NOTIFY), until a claim
    /// comes back empty, and otherwise at least every `storeClaimInterval`, so sends claimed at
    /// acceptance neither each cost a claim nor hold back what is due in the outbox.
    func storeClaim(direct: Int, limit: Int, outboxWork: Bool, now: Instant) -> Int? {
        guard direct < limit else { return nil }
        let due =
            outboxWork || storeBacklog
            || lastStoreClaim.map { $0.duration(to: now) >= configuration.storeClaimInterval } ?? true
        return due ? limit - direct : nil
    }

    /// An outbox claim came back with `found` deliveries.
    mutating func storeClaimed(found: Int, at now: Instant) {
        lastStoreClaim = now
        storeBacklog = found > 0
    }

    /// A pass got through the store without an error.
    mutating func storeWorked() {
        failures = 0
    }

    /// A store error: the number of failures in a row, for `StoreBackoff`.
    mutating func storeFailed() -> Int {
        failures += 1
        return failures
    }
}

/// The deadlines of the batches in flight: each gets `deadline` from its start; what a batch
/// past it still waits for is handed back. `Batch` is what the caller keeps per batch.
struct BatchDeadlines<Instant: InstantProtocol, Batch> where Instant.Duration == Duration {
    let deadline: Duration
    private var next = 0
    private var batches: [Int: (deadline: Instant, batch: Batch)] = [:]

    init(deadline: Duration) {
        self.deadline = deadline
    }

    /// A batch starts at `now`: its number, for `finished`.
    mutating func started(_ batch: Batch, at now: Instant) -> Int {
        next += 1
        batches[next] = (now.advanced(by: deadline), batch)
        return next
    }

    /// A batch has every answer (or was handed back).
    mutating func finished(_ id: Int) {
        batches[id] = nil
    }

    /// The batches past their deadline at `now`, in the order they started. They stay until
    /// `finished`: a late batch still ends the usual way.
    func expired(at now: Instant) -> [Batch] {
        batches.filter { $0.value.deadline <= now }.sorted { $0.key < $1.key }.map(\.value.batch)
    }

    /// Every batch in flight, in the order they started.
    package var all: [Batch] { batches.sorted { $0.key < $1.key }.map(\.value.batch) }

    var isEmpty: Bool { batches.isEmpty }
}

/// The judgement of one provider's held answers in a batch: a refused credential or topic, or
/// "bad token" for more than half of at least `suspectMinimum` answers, pauses the provider and
/// turns those answers into retries at its next try; a probe that was not refused resumes it.
enum ProviderJudgement: Equatable {
    /// Nothing blames the configuration: every held answer is recorded as it came.
    case record
    /// Pause the provider (`kind`, for `reason`); the answers of `paused` deliveries wait for its next try.
    case pause(kind: ProviderPause.Kind, reason: String, paused: Set<Int64>)

    /// `held`: the answers held for judgement; `answered`: all answers of the provider in the
    /// batch; `delivered`: whether any went through; `probe`: the pause this batch probed, if any.
    static func judge(
        held: [ProviderAnswer], answered: Int, delivered: Bool, probe: ProviderPause?, suspectMinimum: Int
    ) -> ProviderJudgement {
        let credential = held.filter { $0.disposition == .providerPaused }
        let suspects = held.filter(\.suspect)
        let blamed: (ProviderPause.Kind, [ProviderAnswer])
        if !credential.isEmpty {
            blamed = (.credential, credential)
        } else if suspects.count * 2 > answered, answered >= suspectMinimum {
            blamed = (.tokensRejected, suspects)
        } else if let probe, probe.kind == .tokensRejected, !delivered, !suspects.isEmpty {
            // Too few answers to judge by count: the probe is judged by whether anything went through.
            blamed = (.tokensRejected, suspects)
        } else {
            return .record
        }
        return .pause(kind: blamed.0, reason: mostCommonReason(blamed.1), paused: Set(blamed.1.map(\.deliveryID)))
    }

    /// The reason most answers gave (ties: the first in alphabetical order).
    static func mostCommonReason(_ answers: [ProviderAnswer]) -> String {
        var counts: [String: Int] = [:]
        for answer in answers { counts[answer.reason ?? "unknown", default: 0] += 1 }
        return counts.max { ($0.value, $1.key) < ($1.value, $0.key) }?.key ?? "unknown"
    }
}

/// How long a loop waits after its `failures`-th store error in a row (1 s doubling to 30 s),
/// and whether it says so (the first and every tenth time).
package enum StoreBackoff {
    package static func wait(failures: Int) -> Duration {
        .milliseconds(Int64(min(30, 0.5 * Double(1 << min(max(failures, 0), 6))) * 1000))
    }

    package static func reports(failures: Int) -> Bool { failures == 1 || failures % 10 == 0 }
}
