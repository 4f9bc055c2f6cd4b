package import Foundation

/// A registered device.
package struct DeviceRecord: Sendable, Hashable, Codable {
    package var deviceID: String
    package var userID: String
    package var platform: String
    package var token: String
    package var environment: String
    package var name: String?
    package var model: String?
    package var locale: String?
    package var timeZone: String?
    package var appVersion: String?
    package var authorizationStatus: String?
    package var active: Bool
    /// Why the device stopped receiving (`Unregistered`…), and when APNs said so.
    package var inactiveReason: String?
    package var inactiveSince: Date?
    package var createdAt: Date
    package var updatedAt: Date

    package init(
        deviceID: String, userID: String, platform: String, token: String, environment: String, name: String? = nil,
        model: String? = nil, locale: String? = nil, timeZone: String? = nil, appVersion: String? = nil,
        authorizationStatus: String? = nil, active: Bool = true, inactiveReason: String? = nil,
        inactiveSince: Date? = nil, createdAt: Date = Date(), updatedAt: Date = Date()
    ) {
        self.deviceID = deviceID
        self.userID = userID
        self.platform = platform
        self.token = token
        self.environment = environment
        self.name = name
        self.model = model
        self.locale = locale
        self.timeZone = timeZone
        self.appVersion = appVersion
        self.authorizationStatus = authorizationStatus
        self.active = active
        self.inactiveReason = inactiveReason
        self.inactiveSince = inactiveSince
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }
}

/// Who a notification goes to.
package enum RecipientSelector: Sendable, Hashable {
    case users([String])
    case devices([String])
    case all
}

/// A notification as stored: the rendered request once, the recipients as delivery rows.
package struct NotificationRecord: Sendable, Hashable {
    package var id: UUID
    package var appID: String
    package var idempotencyKey: String?
    /// What `POST …/cancel` names to cancel it (`HeraldStore.cancel`).
    package var cancelKey: String? = nil
    /// The wire request: push type, priority, headers and payload, JSON (`StoredNotificationContent`).
    package var content: Data
    package var recipients: Int
    package var createdAt: Date
}

/// Delivery states (a notification's `counts`). `cancelled`: by its cancel key before it was sent
/// (`HeraldStore.cancel`).
package enum DeliveryStatus: String, Sendable, Hashable, CaseIterable, Codable {
    case queued, sending, sent, failed, deferred, suppressed, cancelled
}

/// The claim order between deliveries due at once: urgent ones (a transactional type, or
/// priority 10 asked for) before normal ones (a bulk fan-out's).
package enum DeliveryLane: Int, Sendable, Hashable, CaseIterable {
    case urgent = 0
    case normal = 1

    package init(urgent: Bool) { self = urgent ? .urgent : .normal }

    /// The lane's name in metrics and on the dashboard.
    package var label: String {
        switch self {
        case .urgent: "urgent"
        case .normal: "normal"
        }
    }
}

/// One row of the outbox: a notification for one device.
package struct DeliveryRecord: Sendable, Hashable {
    package var id: Int64
    package var deviceID: String
    package var status: DeliveryStatus
    package var reason: String?
    package var attempts: Int
    /// The decision trace (a JSON array of `{rule, message}`), when the policy engine ran.
    package var trace: String?
    package var dueAt: Date
    package var createdAt: Date
    package var updatedAt: Date
    /// When the device reported it got it (its receipt) and when it was opened.
    package var receivedAt: Date? = nil
    package var openedAt: Date? = nil
}

/// A store failure: the message never carries SQL or secrets.
package struct StoreError: Error, Sendable, CustomStringConvertible {
    package struct Code: Sendable, Hashable, RawRepresentable {
        package var rawValue: String
        package init(rawValue: String) { self.rawValue = rawValue }
        package static let invalidURL = Code(rawValue: "invalid_database_url")
        package static let unsupported = Code(rawValue: "unsupported_database")
        package static let conflict = Code(rawValue: "conflict")
        package static let notFound = Code(rawValue: "not_found")
        /// A stored row that does not have the shape the code expects.
        package static let corrupt = Code(rawValue: "corrupt_row")
        /// The database's files could not be opened or synced.
        package static let io = Code(rawValue: "io_error")
        /// A text value the database cannot store (PostgreSQL: a NUL character, or bytes not in
        /// its encoding): the caller's input, not a fault of the store.
        package static let unstorableText = Code(rawValue: "unstorable_text")
        /// Another writer changed a row between a transaction's check and its write: the
        /// transaction is run again (`HeraldStore.transaction`), and sees the change.
        package static let raceLost = Code(rawValue: "race_lost")
    }

    package var code: Code
    package var message: String

    package init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    package var description: String { message }
}
