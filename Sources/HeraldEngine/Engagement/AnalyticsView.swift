import Foundation
package import HeraldCore
package import HeraldStore

/// The analytics per type and the opt-in rate.
package struct AnalyticsView: Encodable {
    package struct Counts: Encodable {
        package var sent: Int64 = 0
        package var accepted: Int64 = 0
        package var failed: Int64 = 0
        var suppressed: Int64 = 0
        var deferred: Int64 = 0
        package var cancelled: Int64 = 0
        package var opened: Int64 = 0
        /// Receipts devices reported (one per delivery).
        package var received: Int64 = 0
        /// Accepted more than a day ago, no receipt, to a build that reports receipts.
        package var acceptedNotReceived: Int64 = 0
        /// Opened ÷ accepted; nil before anything was accepted.
        package var ctr: Double? { Self.rate(opened, accepted) }

        mutating func add(_ row: TrackRepository.TypeDayCounts) {
            // Sent: every delivery that reached the provider's answer, accepted or failed.
            sent += row.sent + row.failed
            accepted += row.sent
            failed += row.failed
            suppressed += row.suppressed
            deferred += row.deferred
            cancelled += row.cancelled
            opened += row.opened
            received += row.received
            acceptedNotReceived += row.acceptedNotReceived
        }

        package static func rate(_ part: Int64, _ whole: Int64) -> Double? {
            whole > 0 ? Double(part) / Double(whole) : nil
        }

        enum CodingKeys: String, CodingKey {
            case sent, accepted, failed, suppressed, deferred, cancelled, opened, received, ctr, funnel
            case acceptedNotReceived = "accepted_not_received"
        }

        /// The funnel's step rates: accepted ÷ sent, received ÷ accepted, opened ÷ received
        /// (nil where the step before is empty; `received` nil when no receipt was reported:
        /// an app without them is not counted as losing every delivery).
        enum FunnelKeys: String, CodingKey { case accepted, received, opened }

        package func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            for (key, value) in [
                (CodingKeys.sent, sent), (.accepted, accepted), (.failed, failed), (.suppressed, suppressed),
                (.deferred, deferred), (.cancelled, cancelled), (.opened, opened), (.received, received),
                (.acceptedNotReceived, acceptedNotReceived),
            ] {
                try container.encode(value, forKey: key)
            }
            try container.encode(ctr.map(AnalyticsView.rounded), forKey: .ctr)
            var funnel = container.nestedContainer(keyedBy: FunnelKeys.self, forKey: .funnel)
            try funnel.encode(Self.rate(accepted, sent).map(AnalyticsView.rounded), forKey: .accepted)
            let receipts = received > 0
            try funnel.encode(
                receipts ? Self.rate(received, accepted).map(AnalyticsView.rounded) : nil, forKey: .received)
            try funnel.encode(
                receipts ? Self.rate(opened, received).map(AnalyticsView.rounded) : nil, forKey: .opened)
        }
    }

    package struct Day: Encodable {
        package var day: String
        package var counts: Counts
        package func encode(to encoder: any Encoder) throws {
            try counts.encode(to: encoder)
            var container = encoder.container(keyedBy: DayKey.self)
            try container.encode(day, forKey: .day)
        }
        enum DayKey: String, CodingKey { case day }
    }

    /// What a type's funnel is broken down by (`by`): the devices' platform, or their build
    /// (platform and app version).
    package enum Breakdown: String, Sendable {
        case platform
        case appVersion = "app_version"
    }

    /// A type's deliveries to one platform (or build): its counts in all and per day.
    package struct Group: Encodable {
        package var platform: String
        package var appVersion: String?
        var breakdown: Breakdown
        package var counts = Counts()
        package var days: [Day] = []

        enum CodingKeys: String, CodingKey {
            case platform, days
            case appVersion = "app_version"
        }

        package func encode(to encoder: any Encoder) throws {
            try counts.encode(to: encoder)
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(platform.isEmpty ? "unknown" : platform, forKey: .platform)
            if breakdown == .appVersion { try container.encode(appVersion, forKey: .appVersion) }
            try container.encode(days, forKey: .days)
        }
    }

    package struct TypeEntry: Encodable {
        package var type: String
        package var id: String?
        package var counts = Counts()
        package var goal: Double?
        package var days: [Day] = []
        /// The breakdown asked for (`by`) and its groups; nil when none was asked for.
        package var breakdown: Breakdown?
        package var groups: [Group] = []

        /// The types whose goal is judged: enough sends that the rate means something.
        package static let minimumSends: Int64 = 200

        package var goalMet: Bool? { goal.flatMap { goal in counts.ctr.map { $0 >= goal } } }
        package var belowGoal: Bool { counts.sent >= Self.minimumSends && goalMet == false }

        enum CodingKeys: String, CodingKey {
            case type, id
            case goalCTR = "goal_ctr"
            case goalMet = "goal_met"
            case belowGoal = "below_goal"
            case days, platforms
            case appVersions = "app_versions"
        }

        package func encode(to encoder: any Encoder) throws {
            try counts.encode(to: encoder)
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(type, forKey: .type)
            try container.encode(id, forKey: .id)
            try container.encode(goal, forKey: .goalCTR)
            try container.encode(goalMet, forKey: .goalMet)
            try container.encode(belowGoal, forKey: .belowGoal)
            try container.encode(days, forKey: .days)
            if let breakdown {
                try container.encode(groups, forKey: breakdown == .appVersion ? .appVersions : .platforms)
            }
        }
    }

    /// Opt-in: authorized + provisional ÷ every active device that reported a permission.
    package struct OptIn: Encodable {
        package struct Group: Encodable {
            package var optedIn: Int64 = 0
            package var reported: Int64 = 0
            var statuses: [String: Int64] = [:]
            package var rate: Double? { reported > 0 ? Double(optedIn) / Double(reported) : nil }

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
            package func encode(to encoder: any Encoder) throws {
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

        package var all = Group()
        package var platforms: [String: Group] = [:]
        package var appVersions: [String: Group] = [:]

        enum CodingKeys: String, CodingKey {
            case platforms
            case appVersions = "app_versions"
        }
        enum NamedKeys: String, CodingKey {
            case platform
            case appVersion = "app_version"
        }

        package func encode(to encoder: any Encoder) throws {
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

        package struct Named: Encodable {
            var key: NamedKeys
            package var name: String
            var group: Group
            package func encode(to encoder: any Encoder) throws {
                try group.encode(to: encoder)
                var container = encoder.container(keyedBy: NamedKeys.self)
                try container.encode(name, forKey: key)
            }
        }
    }

    /// Permission states that count as opted in.
    package static let optedIn: Set<String> = ["authorized", "provisional"]

    package var from: String
    package var to: String
    package var types: [TypeEntry]
    package var optIn: OptIn

    enum CodingKeys: String, CodingKey {
        case from, to, types
        case optIn = "opt_in"
    }

    /// The counts of `days` (days since 1970, UTC) for `type`, else every type of `catalog` and
    /// those no longer in it that have counts.
    package init(
        days: ClosedRange<Int64>, type: CatalogType?, counts: [TrackRepository.TypeDayCounts],
        permissions: [TrackRepository.PermissionCount], catalog: Catalog?
    ) {
        from = Self.date(days.lowerBound)
        to = Self.date(days.upperBound)
        // Every type of the catalog (or the one asked for), then types no longer in it that have counts.
        var entries: [String: TypeEntry] = [:]
        var order: [String] = []
        for type in type.map({ [$0] }) ?? catalog?.types ?? [] {
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
            entries[row.type]!.days.append(Day(day: Self.date(row.day), counts: day))
        }
        types = order.map { entries[$0]! }
        optIn = OptIn()
        for count in permissions {
            optIn.all.add(count)
            optIn.platforms[count.platform, default: OptIn.Group()].add(count)
            optIn.appVersions[count.appVersion ?? "unknown", default: OptIn.Group()].add(count)
        }
    }

    /// Adds each type's funnel per platform (or build) from `rows`; every type gets a list,
    /// empty when nothing of it was answered.
    package mutating func add(_ rows: [TrackRepository.BuildDayCounts], by breakdown: Breakdown) {
        var groups: [String: [String: Group]] = [:]
        for row in rows {
            let version = breakdown == .appVersion ? row.appVersion : nil
            let key = row.platform + "\u{1}" + (version ?? "")
            var group =
                groups[row.counts.type]?[key]
                ?? Group(platform: row.platform, appVersion: version, breakdown: breakdown)
            group.counts.add(row.counts)
            var day = Counts()
            day.add(row.counts)
            let date = Self.date(row.counts.day)
            if let index = group.days.firstIndex(where: { $0.day == date }) {
                group.days[index].counts.add(row.counts)
            } else {
                group.days.append(Day(day: date, counts: day))
            }
            groups[row.counts.type, default: [:]][key] = group
        }
        for index in types.indices {
            types[index].breakdown = breakdown
            types[index].groups = (groups[types[index].type] ?? [:]).values.sorted { left, right in
                left.platform != right.platform
                    ? left.platform < right.platform
                    : (left.appVersion ?? "").compare(right.appVersion ?? "", options: .numeric) == .orderedAscending
            }
        }
    }

    /// `YYYY-MM-DD` of days since 1970.
    package static func date(_ day: Int64) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyy-MM-dd"
        return formatter.string(from: Date(timeIntervalSince1970: Double(day) * 86_400))
    }

    /// Rates to 4 decimals (17% is 0.17, not 0.17000000000000001).
    static func rounded(_ value: Double) -> Double { (value * 10_000).rounded() / 10_000 }
}
