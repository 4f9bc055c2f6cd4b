import Foundation
import HeraldCore
import HeraldPayload
import HeraldStore
import Hummingbird

/// `POST /v1/apps/{app}/opened`: a device reports that a delivery was opened (tapped, or one of
/// its actions chosen), as often as it likes: one open per delivery counts.
struct OpenedBody: Decodable {
    /// The stamp's `d`: a number (a string of digits is taken too).
    var deliveryID: JSONValue?
    var deviceID: String?
    var action: String?
    var at: String?

    enum CodingKeys: String, CodingKey {
        case deliveryID = "delivery_id"
        case deviceID = "device_id"
        case action, at
    }

    /// A tap on the notification itself (UNNotificationDefaultActionIdentifier).
    static let defaultAction = ActionTokenLayout.tapAction

    struct Checked {
        var deliveryID: Int64
        var deviceID: String
        var action: String
        var at: Date
    }

    /// Checked; the first problem names its field. `at` defaults to now; a device's clock may be
    /// off, so a time ahead is taken as now and one more than 30 days back is refused.
    func validated(now: Date) throws(APIError) -> Checked {
        let id: Int64
        switch deliveryID {
        case nil: throw APIError.missing("delivery_id")
        case .int(let value)?: id = Int64(value)
        case .string(let text)?:
            guard let value = Int64(text) else {
                throw APIError.invalid("delivery_id", "delivery_id is the payload's herald.d, a number")
            }
            id = value
        default: throw APIError.invalid("delivery_id", "delivery_id is the payload's herald.d, a number")
        }
        guard id > 0 else {
            throw APIError.invalid("delivery_id", "delivery_id is the payload's herald.d, a number above 0")
        }
        guard let deviceID else { throw APIError.missing("device_id") }
        guard !deviceID.isEmpty, deviceID.utf8.count <= 256 else {
            throw APIError.invalid("device_id", "device_id is 1 to 256 bytes")
        }
        let action = action ?? Self.defaultAction
        guard !action.isEmpty, action.utf8.count <= 64 else {
            throw APIError.invalid("action", "action is \"default\" or an action id of 1 to 64 bytes")
        }
        var at = now
        if let text = self.at {
            guard let date = HeraldTime.parse(text) else {
                throw APIError.invalid("at", "at is an RFC 3339 time such as 2026-11-23T09:00:00Z")
            }
            guard date >= now.addingTimeInterval(-30 * 86_400) else {
                throw APIError.invalid("at", "at is within the last 30 days")
            }
            at = min(date, now)
        }
        return Checked(deliveryID: id, deviceID: deviceID, action: action, at: at)
    }
}

/// What an open report did.
struct OpenedView: Encodable {
    var deliveryID: Int64
    var recorded: TrackRepository.OpenRecorded

    enum CodingKeys: String, CodingKey {
        case deliveryID = "delivery_id"
        case counted, reports, action
        case eventID = "event_id"
        case notifications
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(deliveryID, forKey: .deliveryID)
        try container.encode(recorded.counted, forKey: .counted)
        try container.encode(recorded.reports, forKey: .reports)
        try container.encode(recorded.action, forKey: .action)
        try container.encodeIfPresent(recorded.eventID, forKey: .eventID)
        if !recorded.notifications.isEmpty { try container.encode(recorded.notifications, forKey: .notifications) }
    }
}

/// `GET /v1/apps/{app}/analytics?from&to&type`: days of sending (UTC dates, `from` and `to`
/// included; the last 30 days by default, at most 366), of one type (name or external id).
struct AnalyticsQuery {
    var days: ClosedRange<Int64>
    var type: CatalogType?

    static let defaultDays: Int64 = 30
    static let maximumDays: Int64 = 366

    init(_ parameters: Hummingbird.Parameters, today: Date, catalog: Catalog?) throws(APIError) {
        let todayDay = Int64((today.timeIntervalSince1970 / 86_400).rounded(.down))
        func day(_ name: String) throws(APIError) -> Int64? {
            guard let text = parameters.get(name) else { return nil }
            guard let day = Self.day(text) else {
                throw APIError.invalid(name, "\(name) is a date such as 2026-11-23 (UTC)")
            }
            return day
        }
        let to = try day("to") ?? todayDay
        let from = try day("from") ?? (to - Self.defaultDays + 1)
        guard from <= to else { throw APIError.invalid("from", "from is on or before to") }
        guard to - from < Self.maximumDays else {
            throw APIError.invalid("from", "from and to are at most \(Self.maximumDays) days apart")
        }
        days = from...to
        if let name = parameters.get("type") {
            guard let catalog, let found = catalog.type(name) else {
                throw APIError.invalid(
                    "type",
                    "unknown type \"\(name)\"; the catalog has \(catalog?.types.map(\.name).joined(separator: ", ") ?? "no types")"
                )
            }
            type = found
        }
    }

    /// Days since 1970 of a `YYYY-MM-DD` date (UTC).
    static func day(_ text: String) -> Int64? {
        let parts = text.split(separator: "-")
        guard parts.count == 3, parts[0].count == 4, parts[1].count == 2, parts[2].count == 2,
            let year = Int(parts[0]), let month = Int(parts[1]), let dayOfMonth = Int(parts[2])
        else { return nil }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let components = DateComponents(year: year, month: month, day: dayOfMonth)
        guard components.isValidDate(in: calendar), let date = calendar.date(from: components) else { return nil }
        return Int64((date.timeIntervalSince1970 / 86_400).rounded(.down))
    }

    /// `YYYY-MM-DD` of days since 1970.
    static func date(_ day: Int64) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyy-MM-dd"
        return formatter.string(from: Date(timeIntervalSince1970: Double(day) * 86_400))
    }
}

/// The analytics per type and the opt-in rate.
struct AnalyticsView: Encodable {
    struct Counts: Encodable {
        var sent: Int64 = 0
        var accepted: Int64 = 0
        var failed: Int64 = 0
        var suppressed: Int64 = 0
        var deferred: Int64 = 0
        var cancelled: Int64 = 0
        var opened: Int64 = 0
        /// Opened ÷ accepted; nil before anything was accepted.
        var ctr: Double? { accepted > 0 ? Double(opened) / Double(accepted) : nil }

        mutating func add(_ row: TrackRepository.TypeDayCounts) {
            // Sent: every delivery that reached the provider's answer, accepted or failed.
            sent += row.sent + row.failed
            accepted += row.sent
            failed += row.failed
            suppressed += row.suppressed
            deferred += row.deferred
            cancelled += row.cancelled
            opened += row.opened
        }

        enum CodingKeys: String, CodingKey { case sent, accepted, failed, suppressed, deferred, cancelled, opened, ctr }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            for (key, value) in [
                (CodingKeys.sent, sent), (.accepted, accepted), (.failed, failed), (.suppressed, suppressed),
                (.deferred, deferred), (.cancelled, cancelled), (.opened, opened),
            ] {
                try container.encode(value, forKey: key)
            }
            if let ctr {
                try container.encode(AnalyticsView.rounded(ctr), forKey: .ctr)
            } else {
                try container.encodeNil(forKey: .ctr)
            }
        }
    }

    struct Day: Encodable {
        var day: String
        var counts: Counts
        func encode(to encoder: any Encoder) throws {
            try counts.encode(to: encoder)
            var container = encoder.container(keyedBy: DayKey.self)
            try container.encode(day, forKey: .day)
        }
        enum DayKey: String, CodingKey { case day }
    }

    struct TypeEntry: Encodable {
        var type: String
        var id: String?
        var counts = Counts()
        var goal: Double?
        var days: [Day] = []

        /// The types whose goal is judged: enough sends that the rate means something.
        static let minimumSends: Int64 = 200

        var goalMet: Bool? { goal.flatMap { goal in counts.ctr.map { $0 >= goal } } }
        var belowGoal: Bool { counts.sent >= Self.minimumSends && goalMet == false }

        enum CodingKeys: String, CodingKey {
            case type, id
            case goalCTR = "goal_ctr"
            case goalMet = "goal_met"
            case belowGoal = "below_goal"
            case days
        }

        func encode(to encoder: any Encoder) throws {
            try counts.encode(to: encoder)
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(type, forKey: .type)
            try container.encode(id, forKey: .id)
            try container.encode(goal, forKey: .goalCTR)
            try container.encode(goalMet, forKey: .goalMet)
            try container.encode(belowGoal, forKey: .belowGoal)
            try container.encode(days, forKey: .days)
        }
    }

    /// Opt-in: authorized + provisional ÷ every active device that reported a permission.
    struct OptIn: Encodable {
        struct Group: Encodable {
            var optedIn: Int64 = 0
            var reported: Int64 = 0
            var statuses: [String: Int64] = [:]
            var rate: Double? { reported > 0 ? Double(optedIn) / Double(reported) : nil }

            mutating func add(_ count: TrackRepository.PermissionCount) {
                reported += count.devices
                if AnalyticsView.optedIn.contains(count.status) { optedIn += count.devices }
                statuses[count.status, default: 0] += count.devices
            }

            enum CodingKeys: String, CodingKey {
                case rate
                case optedIn = "opted_in"
                case reported, statuses
            }
            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: CodingKeys.self)
                if let rate {
                    try container.encode(AnalyticsView.rounded(rate), forKey: .rate)
                } else {
                    try container.encodeNil(forKey: .rate)
                }
                try container.encode(optedIn, forKey: .optedIn)
                try container.encode(reported, forKey: .reported)
                try container.encode(statuses, forKey: .statuses)
            }
        }

        var all = Group()
        var platforms: [String: Group] = [:]
        var appVersions: [String: Group] = [:]

        enum CodingKeys: String, CodingKey {
            case platforms
            case appVersions = "app_versions"
        }
        enum NamedKeys: String, CodingKey {
            case platform
            case appVersion = "app_version"
        }

        func encode(to encoder: any Encoder) throws {
            try all.encode(to: encoder)
            var container = encoder.container(keyedBy: CodingKeys.self)
            var list = container.nestedUnkeyedContainer(forKey: .platforms)
            for (platform, group) in platforms.sorted(by: { $0.key < $1.key }) {
                try Named(key: .platform, name: platform, group: group).encode(to: list.superEncoder())
            }
            var versions = container.nestedUnkeyedContainer(forKey: .appVersions)
            for (version, group) in appVersions.sorted(by: { $0.key < $1.key }) {
                try Named(key: .appVersion, name: version, group: group).encode(to: versions.superEncoder())
            }
        }

        struct Named: Encodable {
            var key: NamedKeys
            var name: String
            var group: Group
            func encode(to encoder: any Encoder) throws {
                try group.encode(to: encoder)
                var container = encoder.container(keyedBy: NamedKeys.self)
                try container.encode(name, forKey: key)
            }
        }
    }

    /// Permission states that count as opted in.
    static let optedIn: Set<String> = ["authorized", "provisional"]

    var from: String
    var to: String
    var types: [TypeEntry]
    var optIn: OptIn

    enum CodingKeys: String, CodingKey {
        case from, to, types
        case optIn = "opt_in"
    }

    init(
        query: AnalyticsQuery, counts: [TrackRepository.TypeDayCounts], permissions: [TrackRepository.PermissionCount],
        catalog: Catalog?
    ) {
        from = AnalyticsQuery.date(query.days.lowerBound)
        to = AnalyticsQuery.date(query.days.upperBound)
        // Every type of the catalog (or the one asked for), then types no longer in it that have counts.
        var entries: [String: TypeEntry] = [:]
        var order: [String] = []
        for type in query.type.map({ [$0] }) ?? catalog?.types ?? [] {
            entries[type.name] = TypeEntry(type: type.name, id: type.id, goal: type.goalCTR)
            order.append(type.name)
        }
        for row in counts {
            if entries[row.type] == nil {
                entries[row.type] = TypeEntry(type: row.type, id: nil, goal: nil)
                order.append(row.type)
            }
            entries[row.type]!.counts.add(row)
            var day = Counts()
            day.add(row)
            entries[row.type]!.days.append(Day(day: AnalyticsQuery.date(row.day), counts: day))
        }
        types = order.map { entries[$0]! }
        optIn = OptIn()
        for count in permissions {
            optIn.all.add(count)
            optIn.platforms[count.platform, default: OptIn.Group()].add(count)
            optIn.appVersions[count.appVersion ?? "unknown", default: OptIn.Group()].add(count)
        }
    }

    /// Rates to 4 decimals (17% is 0.17, not 0.17000000000000001).
    static func rounded(_ value: Double) -> Double { (value * 10_000).rounded() / 10_000 }
}
