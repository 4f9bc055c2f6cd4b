import Foundation
package import HeraldCore
import HeraldPayload
package import HeraldStore
package import Logging

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The providers' answers as they arrive, appended to files of this process's own until the
/// write that takes them commits: what a crash (`kill -9`, an out-of-memory kill) would
/// otherwise send again because it was answered and not yet in the database. The next start
/// reads a stopped process's journal back and writes its answers under the claims that
/// process held (`OutboxRepository.recordAnswers(of:_:)`) before any of them is queued again.
///
/// Appends are plain `write(2)`s, at most `pendingBytes` or `pendingTime` apart, never synced:
/// the kernel keeps what a killed process wrote, and a power cut (which loses the page cache)
/// costs only the resends there would have been without the journal. A journal that cannot be
/// written turns itself off and says so; sending never waits for it.
///
/// Files, in the journal's directory: `answers-NODE.lock` (held with `flock` while the process
/// lives: a journal whose lock can be taken belongs to a process that is gone; read back at a
/// start and, by a running process, at each heartbeat) and segments
/// `answers-NODE-N.jsonl`, one JSON object per answer and line. A segment is deleted once every
/// answer in it is committed and a newer one is being written.
package struct AnswerJournal {
    package let directory: String
    package let node: String
    private let logger: Logger
    private var lockDescriptor: Int32
    /// The segment being appended to, and its file.
    package private(set) var segment = 0
    private var descriptor: Int32 = -1
    private var segmentStarted = ContinuousClock.now
    private var segmentBytes = 0
    private var pending = JSONWriter(capacity: AnswerJournal.pendingBytes + 512)
    private var pendingSince: ContinuousClock.Instant?
    /// Per segment, its answers not yet committed.
    private var outstanding: [Int: Int] = [:]
    private(set) var broken = false

    /// Bytes of answers kept in memory before they are written out.
    static let pendingBytes = 16 * 1024
    /// The longest an answer is kept in memory before it is written out (under load; a lone
    /// answer is written out when its database write starts).
    static let pendingTime: Duration = .milliseconds(2)
    /// A segment this big or old is closed when the next database write takes its answers.
    static let segmentBytesLimit = 4 * 1024 * 1024
    static let segmentAge: Duration = .seconds(1)

    /// Opens a journal for `node` in `directory` (made if missing).
    package init(directory: String, node: String, logger: Logger) throws {
        self.directory = directory
        self.node = node
        self.logger = logger
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        // The lock is taken under a name no reader looks at and then renamed into place, so a
        // process reading back stopped processes' journals never finds this one's lock free.
        let staging = "\(directory)/.answers-\(node).lock-new"
        lockDescriptor = open(staging, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard lockDescriptor >= 0 else { throw JournalError("cannot create \(staging)") }
        guard flock(lockDescriptor, LOCK_EX | LOCK_NB) == 0, rename(staging, Self.lockPath(directory, node)) == 0
        else {
            close(lockDescriptor)
            unlink(staging)
            throw JournalError("cannot lock \(Self.lockPath(directory, node))")
        }
        guard openSegment() else {
            close(lockDescriptor)
            throw JournalError("cannot create \(Self.segmentPath(directory, node, segment))")
        }
    }

    package static func lockPath(_ directory: String, _ node: String) -> String { "\(directory)/answers-\(node).lock" }
    package static func segmentPath(_ directory: String, _ node: String, _ segment: Int) -> String {
        "\(directory)/answers-\(node)-\(segment).jsonl"
    }

    private mutating func openSegment() -> Bool {
        descriptor = open(
            Self.segmentPath(directory, node, segment), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0o600)
        segmentStarted = .now
        segmentBytes = 0
        return descriptor >= 0
    }

    /// Appends a provider's answer; returns the segment it went to (nil when the journal is off).
    package mutating func append(_ result: DeliveryResult, now: ContinuousClock.Instant) -> Int? {
        guard !broken else { return nil }
        Self.encode(result, into: &pending)
        outstanding[segment, default: 0] += 1
        if pendingSince == nil { pendingSince = now }
        if pending.bytes.count >= Self.pendingBytes || now - (pendingSince ?? now) >= Self.pendingTime {
            writePending()
        }
        return segment
    }

    /// A database write takes every answer waiting: what is in memory goes to the file, and a
    /// segment grown big or old is closed (it goes once its answers are committed).
    package mutating func taking() {
        guard !broken else { return }
        writePending()
        guard
            !broken,
            segmentBytes >= Self.segmentBytesLimit || ContinuousClock.now - segmentStarted >= Self.segmentAge
        else { return }
        close(descriptor)
        if outstanding[segment, default: 0] == 0 { remove(segment) }
        segment += 1
        if !openSegment() { fail("cannot create \(Self.segmentPath(directory, node, segment))") }
    }

    /// The answers of `runs` (segment, count) are committed: segments left with none
    /// outstanding, other than the one being written, are deleted.
    package mutating func committed(_ runs: [(segment: Int, count: Int)]) {
        for run in runs {
            let left = outstanding[run.segment, default: 0] - run.count
            if left > 0 {
                outstanding[run.segment] = left
                continue
            }
            outstanding[run.segment] = nil
            if run.segment != segment { remove(run.segment) }
        }
    }

    /// Stops the journal: with every answer committed its files go; otherwise they stay for the
    /// next start to write.
    package mutating func finish() {
        if !broken { writePending() }
        if descriptor >= 0 { close(descriptor) }
        descriptor = -1
        if outstanding.values.allSatisfy({ $0 == 0 }) {
            for segment in Set(outstanding.keys).union([segment]) { remove(segment) }
            unlink(Self.lockPath(directory, node))
        }
        if lockDescriptor >= 0 { close(lockDescriptor) }
        lockDescriptor = -1
        broken = true
    }

    private mutating func writePending() {
        pendingSince = nil
        guard !pending.bytes.isEmpty else { return }
        let total = pending.bytes.count
        let written = pending.bytes.withUnsafeBytes { bytes -> Int in
            var offset = 0
            while offset < total {
                let count = write(descriptor, bytes.baseAddress! + offset, total - offset)
                if count < 0 && errno == EINTR { continue }
                guard count > 0 else { break }
                offset += count
            }
            return offset
        }
        pending = JSONWriter(capacity: Self.pendingBytes + 512)
        segmentBytes += written
        if written < total { fail("cannot write \(Self.segmentPath(directory, node, segment)): errno \(errno)") }
    }

    private func remove(_ segment: Int) { unlink(Self.segmentPath(directory, node, segment)) }

    /// Turns the journal off (its files stay: what they hold is still written at the next start).
    private mutating func fail(_ message: String) {
        broken = true
        if descriptor >= 0 { close(descriptor) }
        descriptor = -1
        logger.warning(
            "Answer journal off: answers are no longer journaled, so a crash resends those not yet written",
            metadata: ["herald.journal": "\(directory)", "error": "\(message)"])
    }

    struct JournalError: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }
}

// MARK: - Lines

extension AnswerJournal {
    /// One answer as a line: `d` the delivery, `c` its claim, `n` the notification, `a` the app,
    /// `v` the device, `p` the platform, `t` the row's creation (Unix seconds), `k` the attempts,
    /// `o` the outcome with its `r` reason, `u` due time and `s` time of death, `x` the trace,
    /// and `b` the page slot of a delivery without its own row.
    static func encode(_ result: DeliveryResult, into json: inout JSONWriter) {
        json.raw("{\"d\":")
        json.integer(result.deliveryID)
        json.raw(",\"c\":")
        json.integer(result.claim)
        json.raw(",\"n\":")
        json.uuid(result.notificationID)
        json.raw(",\"a\":")
        json.string(result.appID)
        json.raw(",\"v\":")
        json.string(result.deviceID)
        json.raw(",\"p\":")
        json.string(result.platform)
        if let version = result.appVersion {
            json.raw(",\"e\":")
            json.string(version)
        }
        json.raw(",\"t\":")
        json.number(result.createdAt.timeIntervalSince1970)
        json.raw(",\"k\":")
        json.integer(Int64(result.attempts))
        switch result.outcome {
        case .sent: json.raw(",\"o\":\"sent\"")
        case .failed(let reason):
            json.raw(",\"o\":\"failed\",\"r\":")
            json.string(reason)
        case .tokenDead(let reason, let since):
            json.raw(",\"o\":\"dead\",\"r\":")
            json.string(reason)
            if let since {
                json.raw(",\"s\":")
                json.number(since.timeIntervalSince1970)
            }
        case .retry(let reason, let due):
            json.raw(",\"o\":\"retry\",\"r\":")
            json.string(reason)
            json.raw(",\"u\":")
            json.number(due.timeIntervalSince1970)
        case .deferred(let reason, let until):
            json.raw(",\"o\":\"deferred\",\"r\":")
            json.string(reason)
            json.raw(",\"u\":")
            json.number(until.timeIntervalSince1970)
        case .suppressed(let reason):
            json.raw(",\"o\":\"suppressed\",\"r\":")
            json.string(reason)
        }
        if let trace = result.trace {
            json.raw(",\"x\":")
            json.string(trace)
        }
        if let slot = result.broadcast {
            json.raw(",\"b\":{\"g\":")
            json.integer(slot.page)
            json.raw(",\"l\":")
            json.integer(Int64(slot.lane))
            json.raw(",\"u\":")
            json.integer(slot.dueAt)
            json.raw(",\"a\":")
            json.integer(slot.acceptedAt)
            json.raw(",\"i\":")
            json.string(slot.userID)
            json.raw(",\"k\":")
            json.integer(Int64(slot.attempts))
            if let trace = slot.trace {
                json.raw(",\"x\":")
                json.string(trace)
            }
            json.raw("}")
        }
        json.raw("}\n")
    }

    private struct Line: Decodable {
        struct Slot: Decodable {
            var g: Int64, l: Int, u: Int64, a: Int64, i: String, k: Int, x: String?
        }
        var d: Int64, c: Int64, n: UUID, a: String, v: String, p: String, t: Double, k: Int, o: String
        var r: String?, u: Double?, s: Double?, x: String?, b: Slot?, e: String?
    }

    /// A line read back; nil for one that is not an answer this version writes (a torn last
    /// line of a killed process, a damaged file).
    static func decode(_ line: Data, decoder: JSONDecoder) -> DeliveryResult? {
        guard let line = try? decoder.decode(Line.self, from: line), line.t.isFinite else { return nil }
        func date(_ seconds: Double?) -> Date? {
            guard let seconds, seconds.isFinite else { return nil }
            return Date(timeIntervalSince1970: seconds)
        }
        let outcome: DeliveryResult.Outcome
        switch (line.o, line.r, date(line.u)) {
        case ("sent", _, _): outcome = .sent
        case ("failed", let reason?, _): outcome = .failed(reason: reason)
        case ("dead", let reason?, _): outcome = .tokenDead(reason: reason, since: date(line.s))
        case ("retry", let reason?, let due?): outcome = .retry(reason: reason, dueAt: due)
        case ("deferred", let reason?, let until?): outcome = .deferred(reason: reason, until: until)
        case ("suppressed", let reason?, _): outcome = .suppressed(reason: reason)
        default: return nil
        }
        let slot = line.b.map {
            BroadcastSlot(
                page: $0.g, lane: $0.l, dueAt: $0.u, acceptedAt: $0.a, userID: $0.i, attempts: $0.k, trace: $0.x)
        }
        return DeliveryResult(
            deliveryID: line.d, claim: line.c, notificationID: line.n, appID: line.a, deviceID: line.v,
            outcome: outcome, attempts: line.k, trace: line.x, broadcast: slot,
            createdAt: Date(timeIntervalSince1970: line.t), platform: line.p, appVersion: line.e)
    }
}

// MARK: - Reading back

extension AnswerJournal {
    /// What a start read back from the journals of stopped processes.
    package struct Replayed: Sendable, Equatable {
        package var journals = 0
        package var answers = JournaledAnswers()
        /// Lines that were not an answer (a torn last line, a damaged file): left out.
        package var unreadable = 0

        package init() {}
    }
    package typealias JournaledAnswers = OutboxRepository.JournaledAnswers

    /// Writes the answers in the journals of stopped processes in `directory` (those whose lock
    /// can be taken; never `except`'s, this process's own) under the claims those processes
    /// held, then deletes the journals. A store error is thrown with the journal left whole,
    /// for the next try.
    package static func replay(directory: String, except: String, store: HeraldStore) async throws -> Replayed {
        var replayed = Replayed()
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        var nodes: [String: [Int]] = [:]
        for name in names where name.hasPrefix("answers-") {
            if name.hasSuffix(".lock") {
                let node = String(name.dropFirst("answers-".count).dropLast(".lock".count))
                if nodes[node] == nil { nodes[node] = [] }
            } else if name.hasSuffix(".jsonl"), let dash = name.lastIndex(of: "-") {
                let node = String(name[name.index(name.startIndex, offsetBy: "answers-".count)..<dash])
                guard !node.isEmpty, let segment = Int(name[name.index(after: dash)...].dropLast(".jsonl".count))
                else { continue }
                nodes[node, default: []].append(segment)
            }
        }
        for (node, segments) in nodes.sorted(by: { $0.key < $1.key }) where node != except && !node.isEmpty {
            let lock = open(lockPath(directory, node), O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            guard lock >= 0 else { continue }
            defer { close(lock) }
            // Held: that process is alive (a sibling on this machine) and writes its own.
            guard flock(lock, LOCK_EX | LOCK_NB) == 0 else { continue }
            var results: [DeliveryResult] = []
            let decoder = JSONDecoder()
            for segment in segments.sorted() {
                guard let data = FileManager.default.contents(atPath: segmentPath(directory, node, segment)) else {
                    continue
                }
                for line in data.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true) {
                    if let result = decode(Data(line), decoder: decoder) {
                        results.append(result)
                    } else {
                        replayed.unreadable += 1
                    }
                }
            }
            let answers = try await store.outbox.recordAnswers(of: node, results)
            replayed.journals += 1
            replayed.answers.written += answers.written
            replayed.answers.skipped += answers.skipped
            for segment in segments { unlink(segmentPath(directory, node, segment)) }
            unlink(lockPath(directory, node))
        }
        return replayed
    }
}
