import Foundation
import HeraldCore
import HeraldEngine
import HeraldPayload
import HeraldSchedule
import HeraldStore

// The bodies and answers of the routes for tracks, events, badges and silent sync.

/// `PUT /v1/apps/{app}/users/{user_id}/tracks/{track}`.
struct EnrolBody: Decodable {
    var anchorAt: String?
    var data: JSONValue?
    var onConflict: String?
    var testSeconds: Int?

    enum CodingKeys: String, CodingKey {
        case data
        case anchorAt = "anchor_at"
        case onConflict = "on_conflict"
        case testSeconds = "test_seconds"
    }

    /// The anchor, data (a JSON object's text), restart and test seconds, checked; the first
    /// problem names its field.
    func validated(now: Date) throws(APIError) -> (anchor: Date, data: String, restart: Bool, testSeconds: Int?) {
        var anchor = now
        if let anchorAt {
            guard let date = HeraldTime.parse(anchorAt) else {
                throw APIError.invalid("anchor_at", "anchor_at is an RFC 3339 time such as 2026-11-23T09:00:00Z")
            }
            guard abs(date.timeIntervalSince(now)) <= 366 * 86_400 else {
                throw APIError.invalid("anchor_at", "anchor_at is within a year of now")
            }
            anchor = date
        }
        if let data {
            guard data.objectValue != nil else { throw APIError.invalid("data", "data must be a JSON object") }
            guard data.depth <= NotificationDraft.maximumDataDepth else {
                throw APIError.invalid(
                    "data", "data nests objects and arrays more than \(NotificationDraft.maximumDataDepth) levels deep")
            }
        }
        // No data is "{}" without an encoder: a bulk enrolment checks a million lines.
        let text = data.flatMap { try? JSONEncoder().encode($0) }.map { String(decoding: $0, as: UTF8.self) } ?? "{}"
        guard text.utf8.count <= 16_384 else { throw APIError.invalid("data", "data is at most 16 KB") }
        let restart: Bool
        switch onConflict ?? "ignore" {
        case "ignore": restart = false
        case "restart": restart = true
        default: throw APIError.invalid("on_conflict", "on_conflict is ignore (keep the enrolment) or restart")
        }
        if let testSeconds, !(1...86_400).contains(testSeconds) {
            throw APIError.invalid("test_seconds", "test_seconds is 1 to 86400")
        }
        return (anchor, text, restart, testSeconds)
    }
}

/// An enrolment as the API shows it.
struct EnrolmentView: Encodable {
    struct Step: Encodable {
        package var id: String
        package var type: String?
        var dueAt: String
        var localTime: String?
        var status: String
        var reason: String?
        var notificationID: String?
        var trace: [DecisionTrace.Entry]?

        enum CodingKeys: String, CodingKey {
            case id, type, status, reason, trace
            case dueAt = "due_at"
            case localTime = "local_time"
            case notificationID = "notification_id"
        }
    }

    var enrolled: Bool?
    var track: String
    var anchorAt: String
    var enrolledAt: String
    var testSeconds: Int?
    var steps: [Step]

    enum CodingKeys: String, CodingKey {
        case enrolled, track, steps
        case anchorAt = "anchor_at"
        case enrolledAt = "enrolled_at"
        case testSeconds = "test_seconds"
    }

    init(_ record: TrackRepository.EnrolmentRecord, enrolled: Bool?, catalog: Catalog?, zone: TimeZone) {
        self.enrolled = enrolled
        track = record.track
        anchorAt = HeraldTime.format(record.anchorAt)
        enrolledAt = HeraldTime.format(record.enrolledAt)
        testSeconds = record.testSeconds
        let formatter = ISO8601DateFormatter()
        formatter.timeZone = zone
        formatter.formatOptions = [.withFullDate, .withTime, .withColonSeparatorInTime, .withDashSeparatorInDate]
        steps = record.steps.map { step in
            let trace = DecisionTrace.entries(step.trace)
            return Step(
                id: step.step, type: catalog?.track(record.track)?.step(step.step)?.type,
                dueAt: HeraldTime.format(step.dueAt),
                localTime: formatter.string(from: step.dueAt) + " " + zone.identifier, status: step.status,
                reason: step.reason,
                notificationID: step.notificationID?.lowercased(), trace: trace.isEmpty ? nil : trace)
        }
    }
}

/// `POST /v1/apps/{app}/events`: one event a user did (`app.opened` is built in: what a step's
/// `unless` reads), or the batch form `{"events": [...]}` (then the other fields are not read).
struct EventBody: Decodable {
    var name: String?
    var userID: String?
    var data: JSONValue?
    var occurredAt: String?
    var idempotencyKey: String?
    var events: [EventBody]?

    enum CodingKeys: String, CodingKey {
        case name, data, events
        case userID = "user_id"
        case occurredAt = "occurred_at"
        case idempotencyKey = "idempotency_key"
    }

    /// The most events in one batch.
    static let maximumBatch = 1_000

    /// Checked; the first problem names its field (after `prefix`, `events[3].` in a batch).
    func validated(now: Date, prefix: String) throws(APIError) -> UserEvent {
        guard let name else { throw APIError.missing(prefix + "name") }
        guard !name.isEmpty, name.utf8.count <= 128 else {
            throw APIError.invalid(prefix + "name", "name is 1 to 128 bytes")
        }
        guard let userID else { throw APIError.missing(prefix + "user_id") }
        guard !userID.isEmpty, userID.utf8.count <= 256 else {
            throw APIError.invalid(prefix + "user_id", "user_id is 1 to 256 bytes")
        }
        if let data {
            guard data.objectValue != nil else { throw APIError.invalid(prefix + "data", "data must be a JSON object") }
            guard data.depth <= NotificationDraft.maximumDataDepth else {
                throw APIError.invalid(
                    prefix + "data",
                    "data nests objects and arrays more than \(NotificationDraft.maximumDataDepth) levels deep")
            }
        }
        var occurred = now
        if let occurredAt {
            guard let date = HeraldTime.parse(occurredAt) else {
                throw APIError.invalid(
                    prefix + "occurred_at", "occurred_at is an RFC 3339 time such as 2026-11-23T09:00:00Z")
            }
            guard date <= now.addingTimeInterval(300), date >= now.addingTimeInterval(-366 * 86_400) else {
                throw APIError.invalid(
                    prefix + "occurred_at", "occurred_at is in the last year, and not more than 5 minutes ahead")
            }
            occurred = date
        }
        if let idempotencyKey, idempotencyKey.isEmpty || idempotencyKey.utf8.count > 256 {
            throw APIError.invalid(prefix + "idempotency_key", "idempotency_key is 1 to 256 bytes")
        }
        let text = (try? JSONEncoder().encode(data ?? .object([:]))).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
        guard text.utf8.count <= 16_384 else { throw APIError.invalid(prefix + "data", "data is at most 16 KB") }
        return UserEvent(name: name, userID: userID, data: text, occurredAt: occurred, idempotencyKey: idempotencyKey)
    }
}

/// An event stored: its id, the notifications it sent, whether it was a repeat of an idempotency key.
struct EventAccepted: Encodable {
    package var id: String
    var notifications: [String]
    var duplicate: Bool
}

/// `POST /v1/apps/{app}/tracks/{track}/enrolments`: JSON lines `{"user_id", "anchor_at", "data"}`,
/// each an enrolment as `PUT …/tracks/{track}` with `on_conflict: ignore`, written 5,000 per
/// transaction (a million users in flat memory). A bad line stops with a 400 naming `line N:
/// field`; the lines before it stay enrolled. One batch is written while the next is parsed (as
/// the device import does): on two cores, JSON and SQLite at once.
final class EnrolmentLineImporter {
    let runtime: HeraldRuntime
    let app: AppRuntime
    let track: CatalogTrack
    private var pending = Data()
    private var batch: [(userID: String, anchor: Date, data: String)] = []
    private var lineNumber = 0
    private(set) var enrolled = 0
    private(set) var lines = 0
    /// The batch being written, if any.
    private var writing: Task<Int, any Error>?
    static let batchSize = 5_000

    init(runtime: HeraldRuntime, app: AppRuntime, track: CatalogTrack) {
        self.runtime = runtime
        self.app = app
        self.track = track
    }

    struct Line: Decodable {
        var userID: String?
        var anchorAt: String?
        var data: JSONValue?
        enum CodingKeys: String, CodingKey {
            case data
            case userID = "user_id"
            case anchorAt = "anchor_at"
        }
    }

    func feed(_ bytes: some Sequence<UInt8>) async throws {
        pending.append(contentsOf: bytes)
        var start = pending.startIndex
        while let newline = pending[start...].firstIndex(of: 0x0a) {
            do {
                try await handle(pending[start..<newline])
            } catch {
                // The lines before a bad one stay enrolled: written before the 400.
                try await flush()
                try await awaitWrite()
                throw error
            }
            start = pending.index(after: newline)
        }
        pending.removeSubrange(pending.startIndex..<start)
        guard pending.count <= 1 << 16 else {
            throw APIError.invalid("line \(lineNumber + 1)", "a line is longer than 64 KiB")
        }
    }

    func finish() async throws {
        if !pending.isEmpty {
            do {
                try await handle(pending)
            } catch {
                try await flush()
                try await awaitWrite()
                throw error
            }
        }
        pending.removeAll()
        try await flush()
        try await awaitWrite()
    }

    /// Waits for the batch being written when the import stops early (its input failed): no
    /// write outlives the import. Its error is dropped; the input's is the one to report.
    func abandon() async {
        guard let task = writing else { return }
        writing = nil
        _ = try? await task.value
    }

    /// Waits for the batch being written (its error, if any, is the import's).
    private func awaitWrite() async throws {
        guard let writing else { return }
        self.writing = nil
        enrolled += try await writing.value
    }

    private func handle(_ line: Data) async throws {
        lineNumber += 1
        guard line.contains(where: { $0 != 0x20 && $0 != 0x09 && $0 != 0x0d }) else { return }
        let prefix = "line \(lineNumber): "
        let decoded = try HeraldAPI.decodeJSON(Line.self, line, prefix: prefix)
        guard let userID = decoded.userID else { throw APIError.missing(prefix + "user_id") }
        guard !userID.isEmpty, userID.utf8.count <= 256 else {
            throw APIError.invalid(prefix + "user_id", "user_id is 1 to 256 bytes")
        }
        let body = EnrolBody(anchorAt: decoded.anchorAt, data: decoded.data)
        do {
            let (anchor, data, _, _) = try body.validated(now: runtime.store.now)
            batch.append((userID, anchor, data))
        } catch {
            throw APIError.invalid(prefix + (error.field ?? "line"), error.message)
        }
        lines += 1
        if batch.count >= Self.batchSize { try await flush() }
    }

    private func flush() async throws {
        guard !batch.isEmpty else { return }
        let taken = batch
        batch.removeAll(keepingCapacity: true)
        // At most two batches held: this one waits for the one before to be written.
        try await awaitWrite()
        let (runtime, app, track) = (runtime, app, track)
        writing = Task {
            let wallClock = track.steps.contains { $0.at != nil }
            let zones =
                wallClock ? try await runtime.store.tracks.zones(appID: app.id, userIDs: taken.map(\.userID)) : [:]
            let utc = TimeZone(identifier: "UTC")!
            let now = runtime.store.now
            let entries = taken.map { entry in
                let zone = zones[entry.userID].flatMap(TimeZone.init(identifier:)) ?? utc
                return TrackRepository.BulkEnrolment(
                    userID: entry.userID, anchorAt: entry.anchor, data: entry.data,
                    steps: track.plan(anchor: entry.anchor, zone: zone, now: now))
            }
            return try await runtime.store.tracks.enrolMany(
                appID: app.id, track: track.name, cancelKey: track.cancelKey, entries)
        }
    }
}

/// `POST /v1/apps/{app}/users/{user_id}/badges`: `{"counter", "delta"}` or `{"counter", "value"}`.
struct BadgeBody: Decodable {
    var counter: String?
    var delta: Int?
    var value: Int?

    func validated() throws(APIError) -> BadgeChange {
        guard let counter else { throw APIError.missing("counter") }
        guard !counter.isEmpty, counter.utf8.count <= 64 else {
            throw APIError.invalid("counter", "counter is 1 to 64 bytes")
        }
        switch (delta, value) {
        case (let delta?, nil):
            guard abs(delta) <= 1_000_000 else { throw APIError.invalid("delta", "delta is -1000000 to 1000000") }
            return BadgeChange(counter: counter, delta: Int64(delta))
        case (nil, let value?):
            guard (0...1_000_000).contains(value) else { throw APIError.invalid("value", "value is 0 to 1000000") }
            return BadgeChange(counter: counter, value: Int64(value))
        default: throw APIError.invalid("delta", "send one of delta (a change) or value (the counter's new value)")
        }
    }
}

/// A user's badge: the total the devices show, and its counters.
struct BadgeView: Encodable {
    var badge: Int64
    var counters: [String: Int64]
    var notificationID: String?

    enum CodingKeys: String, CodingKey {
        case badge, counters
        case notificationID = "notification_id"
    }

    init(_ counters: [String: Int64], notification: UUID? = nil) {
        badge = counters.values.reduce(0, +)
        self.counters = counters
        notificationID = notification?.uuidString.lowercased()
    }
}

/// `POST /v1/apps/{app}/users/{user_id}/sync`: `{"origin_device_id", "cursor"}`.
struct SyncBody: Decodable {
    var originDeviceID: String?
    var cursor: String?

    enum CodingKeys: String, CodingKey {
        case cursor
        case originDeviceID = "origin_device_id"
    }

    /// The longest cursor, in bytes (it rides in a 4 KB payload).
    static let maximumCursor = 1_024

    func validated() throws(APIError) -> (origin: String?, cursor: String) {
        guard let cursor else { throw APIError.missing("cursor") }
        guard !cursor.isEmpty, cursor.utf8.count <= Self.maximumCursor else {
            throw APIError.invalid("cursor", "cursor is 1 to \(Self.maximumCursor) bytes")
        }
        if let originDeviceID, originDeviceID.isEmpty || originDeviceID.utf8.count > 256 {
            throw APIError.invalid("origin_device_id", "origin_device_id is 1 to 256 bytes")
        }
        return (originDeviceID, cursor)
    }
}

/// What a sync scheduled: per other device, when its push is due, and whether it joined one
/// already waiting (coalesced) or waits for the device's hourly budget (held).
struct SyncView: Encodable {
    struct Device: Encodable {
        var deviceID: String
        var dueAt: String
        var coalesced: Bool
        var held: Bool
        enum CodingKeys: String, CodingKey {
            case coalesced, held
            case deviceID = "device_id"
            case dueAt = "due_at"
        }
    }

    var devices: [Device]

    init(_ plans: [NodeRepository.SyncPlan]) {
        devices = plans.map {
            Device(deviceID: $0.deviceID, dueAt: HeraldTime.format($0.dueAt), coalesced: $0.coalesced, held: $0.held)
        }
    }
}
