public import Foundation
public import HeraldPayload

/// A local notification to schedule, without UserNotifications types.
public struct LocalNotificationRequest: Sendable, Equatable {
    public enum Trigger: Sendable, Equatable {
        /// At a wall-clock date in a zone (UNCalendarNotificationTrigger, DST-correct).
        case calendar(DateComponents)
        /// After this many seconds (UNTimeIntervalNotificationTrigger; test mode).
        case interval(TimeInterval)
    }

    public var identifier: String
    public var title: String
    public var body: String
    /// Under the app's payload key: `type`, `deep_link`, `track`, `step`.
    public var appData: [String: JSONValue]
    public var trigger: Trigger
    /// When it fires (for logs and tests).
    public var fireDate: Date
}

/// The notification center's pending local notifications (the Apple adapter wraps
/// `UNUserNotificationCenter`).
public protocol LocalNotificationScheduler: Sendable {
    func pendingIdentifiers() async -> [String]
    func add(_ request: LocalNotificationRequest) async throws
    func remove(identifiers: [String]) async
}

/// What a `schedule` changed.
public struct ScheduleDiff: Sendable, Equatable {
    public var added: [String]
    public var removed: [String]
    public var kept: [String]
}

/// Schedules a track's steps as local notifications, idempotently: each step's identifier is
/// deterministic (track, step, anchor), so scheduling again adds nothing twice, a new anchor
/// replaces the old steps, steps already past are left out, and `cancelAll` clears a track (on
/// the Pro upgrade). Test mode fires the steps `testSeconds` apart (LucidPal's DevPushTestView).
public struct LocalTrackScheduler: Sendable {
    public let scheduler: any LocalNotificationScheduler
    public let clock: any KitClock
    /// Seconds between steps in test mode (interval triggers); nil in production (calendar triggers).
    public var testSeconds: TimeInterval?

    public init(
        scheduler: any LocalNotificationScheduler, clock: any KitClock = SystemKitClock(),
        testSeconds: TimeInterval? = nil
    ) {
        self.scheduler = scheduler
        self.clock = clock
        self.testSeconds = testSeconds
    }

    static func prefix(_ track: String) -> String { "herald.track.\(track)." }

    /// The requests `track` makes for an anchor, in a zone, with the enrolment's data.
    public func plan(_ track: LocalTrack, anchor: Date, zone: TimeZone, data: [String: String])
        -> [LocalNotificationRequest]
    {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = zone
        let now = clock.now
        let anchorKey = Int64(anchor.timeIntervalSince1970)
        var requests: [LocalNotificationRequest] = []
        for (index, step) in track.steps.enumerated() {
            guard let copy = track.copy[step.type], let offset = HeraldDuration.seconds(step.after) else { continue }
            // The step's defaults under the enrolment's data, as the server merges them.
            let data = (step.data ?? [:]).merging(data) { _, enrolment in enrolment }
            let fireDate: Date
            let trigger: LocalNotificationRequest.Trigger
            if let testSeconds {
                let seconds = testSeconds * Double(index + 1)
                fireDate = now.addingTimeInterval(seconds)
                trigger = .interval(seconds)
            } else {
                // The server's due time for the same step (`StepTime`, shared through HeraldPayload).
                let date = StepTime.due(
                    anchor: anchor, after: offset, at: step.at.flatMap(StepTime.clockTime), zone: zone)
                guard date > now else { continue }
                fireDate = date
                var components = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
                components.timeZone = zone
                trigger = .calendar(components)
            }
            var appData: [String: JSONValue] = [
                "type": .string(step.type), "track": .string(track.name), "step": .string(step.id),
            ]
            if let link = copy.deepLink.flatMap({ Placeholders.render($0, data: data) }) {
                appData["deep_link"] = .string(link)
            }
            requests.append(
                LocalNotificationRequest(
                    identifier: Self.prefix(track.name) + "\(step.id).\(anchorKey)",
                    title: Placeholders.title(copy.title, data: data),
                    body: Placeholders.body(copy.body, fallback: copy.fallbackBody, data: data), appData: appData,
                    trigger: trigger,
                    fireDate: fireDate))
        }
        return requests
    }

    /// Makes the pending notifications of `track` what the plan says: adds what is missing,
    /// removes what is no longer planned (another anchor, a step now past), keeps the rest.
    @discardableResult
    public func schedule(_ track: LocalTrack, anchor: Date, zone: TimeZone = .current, data: [String: String] = [:])
        async throws -> ScheduleDiff
    {
        let planned = plan(track, anchor: anchor, zone: zone, data: data)
        let pending = Set(await scheduler.pendingIdentifiers().filter { $0.hasPrefix(Self.prefix(track.name)) })
        let wanted = Set(planned.map(\.identifier))
        let removed = pending.subtracting(wanted).sorted()
        if !removed.isEmpty { await scheduler.remove(identifiers: removed) }
        var added: [String] = []
        for request in planned where !pending.contains(request.identifier) {
            try await scheduler.add(request)
            added.append(request.identifier)
        }
        return ScheduleDiff(added: added, removed: removed, kept: planned.map(\.identifier).filter(pending.contains))
    }

    /// Removes every pending step of `track` (the user upgraded: no more trial reminders).
    @discardableResult
    public func cancelAll(_ track: String) async -> Int {
        let ids = await scheduler.pendingIdentifiers().filter { $0.hasPrefix(Self.prefix(track)) }
        if !ids.isEmpty { await scheduler.remove(identifiers: ids) }
        return ids.count
    }
}
