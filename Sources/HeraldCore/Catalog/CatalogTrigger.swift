package import Foundation
package import HeraldPayload

/// What an event does: `{event: sync.failed, type: PN-02, when: {…}, data: {…},
/// cancel: […], badge: {counter, delta}, attributes: {…}}`. An event drives every trigger that
/// names it and whose `when` holds, their effects applied in a fixed order: attributes, cancels,
/// badges, sends.
package struct CatalogTrigger: Sendable {
    package var event: String
    /// The catalog type to send to the event's user (none: the trigger only changes state).
    package var type: String?
    package var when: [TriggerCondition] = []
    /// The send's data, templates over the event's data (`{source_name}`); nil: the event's data as it is.
    package var data: [String: String]?
    /// Templates of cancel keys whose pending deliveries (of this user) are cancelled.
    package var cancel: [String] = []
    /// Template of the cancel key the send carries (so a later event can cancel it).
    package var cancelKey: String?
    package var badge: BadgeChange?
    /// User attributes set from templates (`{trial_ends_at}`): what jobs read.
    package var attributes: [String: String] = [:]
    package var line: Int?

    package init(event: String) { self.event = event }

    /// Whether every condition holds for the event's data and the user's attributes.
    package func matches(data: [String: JSONValue], user: [String: JSONValue]) -> Bool {
        when.allSatisfy { $0.holds(data: data, user: user) }
    }
}

/// A change to one of a user's badge counters: add `delta`, or set `value`. A
/// trigger's `badge: {counter, delta | value}` and `POST …/badges` are one.
package struct BadgeChange: Sendable, Hashable {
    package var counter: String
    package var delta: Int64?
    package var value: Int64?
    package init(counter: String, delta: Int64? = nil, value: Int64? = nil) {
        self.counter = counter
        self.delta = delta
        self.value = value
    }
}

/// One condition of a trigger's `when`: a path (`data.kind`, `user.plan`) and a test.
package struct TriggerCondition: Sendable, Hashable {
    package enum Test: Sendable, Hashable {
        case equals(String)
        case notEquals(String)
        case oneOf([String])
        case exists(Bool)
        case greater(Double, orEqual: Bool)
        case less(Double, orEqual: Bool)
    }

    package var path: String
    package var test: Test

    package init(path: String, test: Test) {
        self.path = path
        self.test = test
    }

    /// The operators a condition may use.
    package static let operators: Set<String> = ["eq", "ne", "in", "exists", "gt", "gte", "lt", "lte"]

    func holds(data: [String: JSONValue], user: [String: JSONValue]) -> Bool {
        let parts = path.split(separator: ".", maxSplits: 1).map(String.init)
        guard parts.count == 2 else { return false }
        let value = (parts[0] == "user" ? user : data)[parts[1]]
        let text = value.flatMap(Self.text)
        switch test {
        case .equals(let expected): return text == expected
        case .notEquals(let expected): return text != expected
        case .oneOf(let options): return text.map(options.contains) ?? false
        case .exists(let expected): return (value != nil && value != .null) == expected
        case .greater(let bound, let orEqual):
            guard let number = text.flatMap(Double.init) else { return false }
            return orEqual ? number >= bound : number > bound
        case .less(let bound, let orEqual):
            guard let number = text.flatMap(Double.init) else { return false }
            return orEqual ? number <= bound : number < bound
        }
    }

    /// A scalar as text (`true`, `3`, `3.5`, `"x"`); nil for arrays, objects and null.
    package static func text(_ value: JSONValue) -> String? {
        switch value {
        case .string(let text): text
        case .int(let number): String(number)
        case .double(let number):
            number == number.rounded() && abs(number) < 1e15 ? String(Int(number)) : String(number)
        case .bool(let flag): String(flag)
        case .null, .array, .object: nil
        }
    }
}

/// A time-based job over user attributes: `{name, type, every: "day at 09:00",
/// when: {attribute: trial_ends_at, within: 24h} | {attribute: renews_at, in: 3d}}`, run in each
/// user's time zone; each user gets each occurrence (the job and the local day) at most once.
package struct CatalogJob: Sendable {
    package var name: String
    package var type: String
    /// The local time of day it runs.
    package var at: LocalTime
    package var attribute: String
    package var condition: Condition
    package var line: Int?

    package enum Condition: Sendable, Hashable {
        /// The attribute's time is after now and at most this many seconds ahead.
        case within(TimeInterval)
        /// The attribute's time falls on the local day this many days from today.
        case inDays(Int)
    }

    package init(name: String, type: String, at: LocalTime, attribute: String, condition: Condition, line: Int? = nil) {
        self.name = name
        self.type = type
        self.at = at
        self.attribute = attribute
        self.condition = condition
        self.line = line
    }

    /// Whether a user whose attribute holds `time` is due at `now` in `zone`.
    package func selects(_ time: Date, now: Date, zone: TimeZone) -> Bool {
        switch condition {
        case .within(let seconds): return time > now && time <= now.addingTimeInterval(seconds)
        case .inDays(let days):
            var calendar = Calendar(identifier: .gregorian)
            calendar.timeZone = zone
            guard let target = calendar.date(byAdding: .day, value: days, to: calendar.startOfDay(for: now)) else {
                return false
            }
            return calendar.isDate(time, inSameDayAs: target)
        }
    }

    /// The occurrence `now` belongs to in `zone`: its local day (`2026-11-25`) once the job's
    /// time has passed that day, else nil (not yet today).
    package func occurrence(now: Date, zone: TimeZone) -> String? {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = zone
        let parts = calendar.dateComponents([.year, .month, .day, .hour, .minute], from: now)
        guard let hour = parts.hour, let minute = parts.minute, hour * 60 + minute >= at.hour * 60 + at.minute,
            let year = parts.year, let month = parts.month, let day = parts.day
        else { return nil }
        return String(format: "%04d-%02d-%02d", year, month, day)
    }
}
