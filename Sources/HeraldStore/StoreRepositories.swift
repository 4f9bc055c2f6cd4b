package import Foundation
import HeraldCore
import Logging

/// A part of the store that works on one aggregate (devices, the outbox, timers …): its
/// queries and transactions go through `database`, the one connection set every part shares.
package protocol StoreRepository: Sendable {
    var database: HeraldStore { get }
}

extension StoreRepository {
    var backend: HeraldStore.Backend { database.backend }
    package var dialect: HeraldStore.Dialect { database.dialect }
    var clock: HeraldClock { database.clock }
    var logger: Logger { database.logger }
    package var nodeID: String { database.nodeID }
    package var now: Date { database.now }
    var nowMilliseconds: Int64 { database.nowMilliseconds }
    var commitGroup: SQLiteCommitGroup { database.commitGroup }
    func serves(_ app: String) -> Bool { database.serves(app) }

    /// `(…)` of the strings of the JSON array bound at `placeholder`, for `IN`.
    func jsonList(_ placeholder: String) -> String {
        dialect == .sqlite ? SQLText.jsonEach(placeholder) : "(SELECT json_array_elements_text(\(placeholder)::json))"
    }

    func syncCommits() async throws { try await database.syncCommits() }

    func exclusive<Result: Sendable>(_ body: (Session) async throws -> Result) async throws -> Result {
        try await database.exclusive(body)
    }

    func reading<Result: Sendable>(
        _ use: ReadingUse = .general, _ body: (Session) async throws -> Result
    ) async throws -> Result {
        try await database.reading(use, body)
    }

    func transaction<Result: Sendable>(durable: Bool = false, _ body: (Session) async throws -> Result) async throws
        -> Result
    {
        try await database.transaction(durable: durable, body)
    }

    func inTransaction<Result: Sendable>(_ session: Session, _ body: (Session) async throws -> Result) async throws
        -> Result
    {
        try await database.inTransaction(session, body)
    }

    func addToCounter(_ name: String, _ amount: Int, _ session: Session) async throws {
        try await database.addToCounter(name, amount, session)
    }

    static func milliseconds(_ date: Date, rounding: FloatingPointRoundingRule = .toNearestOrAwayFromZero) -> Int64 {
        HeraldStore.milliseconds(date, rounding: rounding)
    }

    static var uptimeMilliseconds: Int64 { HeraldStore.uptimeMilliseconds }
    static var dayMilliseconds: Int64 { HeraldStore.dayMilliseconds }
    static var batchSize: Int { HeraldStore.batchSize }
    static var rescueLock: String { HeraldStore.rescueLock }
}

/// Devices and their badges: registration, import, deactivation, pages.
package struct DeviceRepository: StoreRepository {
    package let database: HeraldStore
}

/// Users: time zone, locale, attributes and preferences.
package struct UserRepository: StoreRepository {
    package let database: HeraldStore
}

/// Notifications: acceptance with their deliveries, reads, cancellation.
package struct NotificationRepository: StoreRepository {
    package let database: HeraldStore
}

/// The outbox: claiming due deliveries, recording results, provider pauses.
package struct OutboxRepository: StoreRepository {
    package let database: HeraldStore
}

/// Nodes: heartbeats, rescuing dead nodes' claims, sync plans.
package struct NodeRepository: StoreRepository {
    package let database: HeraldStore
}

/// Broadcasts to all devices, handed out a page at a time, and their results.
package struct BroadcastRepository: StoreRepository {
    package let database: HeraldStore
}

/// Timers and jobs: scheduled sends, track steps and repeating work.
package struct TimerRepository: StoreRepository {
    package let database: HeraldStore
}

/// Tracks and engagement: enrolments, steps, opens and their counts.
package struct TrackRepository: StoreRepository {
    package let database: HeraldStore
}

/// Quick actions and their resolutions, and the webhook queue.
package struct ActionRepository: StoreRepository {
    package let database: HeraldStore
}

/// The dashboard's reads and sign-in sessions.
package struct DashboardQueries: StoreRepository {
    package let database: HeraldStore
}

extension HeraldStore {
    package var devices: DeviceRepository { DeviceRepository(database: self) }
    package var users: UserRepository { UserRepository(database: self) }
    package var notifications: NotificationRepository { NotificationRepository(database: self) }
    package var outbox: OutboxRepository { OutboxRepository(database: self) }
    package var nodes: NodeRepository { NodeRepository(database: self) }
    package var broadcasts: BroadcastRepository { BroadcastRepository(database: self) }
    package var timers: TimerRepository { TimerRepository(database: self) }
    package var tracks: TrackRepository { TrackRepository(database: self) }
    package var actions: ActionRepository { ActionRepository(database: self) }
    package var dashboard: DashboardQueries { DashboardQueries(database: self) }
}
