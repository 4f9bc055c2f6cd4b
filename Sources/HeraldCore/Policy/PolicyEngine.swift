package import Foundation
import HeraldPayload

/// Decides, for one recipient device at one moment, whether a notification is sent now, deferred
/// or suppressed, and how its content is adjusted — with the reason for every step (the decision
/// trace). Pure: the clock and the user's recent history are passed in; nothing is read or written.
///
/// Rules, in order: preference off → suppress; vacation → suppress low and medium stakes; quiet
/// hours in the user's time zone → defer non-transactional types to the window's end; pacing →
/// at most N per rolling hour, the rest deferred to when a slot frees (transactional types are
/// not paced); grouping → from the Nth notification within a rolling hour use the app's group
/// thread and summary; Do-Not-Disturb → `time-sensitive`/`critical` kept only for high/failure
/// stakes the user allowed, otherwise `active`; PII guard → title and body replaced by the type's
/// opaque text; size → the body shortened at a grapheme boundary with "…" until the payload fits.
package struct PolicyEngine: Sendable {
    package var clock: HeraldClock

    package init(clock: HeraldClock = .system) { self.clock = clock }

    /// - Parameters:
    ///   - recent: when this user's earlier notifications from the app were (or will be) sent; only
    ///     the last hour matters.
    ///   - payloadSize: the encoded payload size of given content, in bytes.
    ///   - quietHours: the deferral quiet hours give in a time zone at this moment (what
    ///     `quietHoursDeferral` answers); a caller deciding for many users passes a memo, the
    ///     answer being the same for every user of a zone with the same hours.
    package func decide(
        type: PolicyType, user: PolicyUser, app: PolicyApp, content: PolicyContent, recent: [Date],
        payloadLimit: Int = 4096, payloadSize: (PolicyContent) -> Int,
        quietHours: ((QuietHours, TimeZone) -> QuietDeferral?)? = nil
    ) -> PolicyDecision {
        let now = clock.now()
        var content = content
        var trace: [PolicyStep] = []
        func finish(_ outcome: PolicyOutcome) -> PolicyDecision {
            PolicyDecision(outcome: outcome, content: content, trace: trace)
        }

        if type.userControllable, !(user.typeEnabled[type.id] ?? type.defaultEnabled) {
            trace.append(PolicyStep(rule: "preference", message: "suppressed: \(type.id) is off for this user"))
            return finish(.suppressed(reason: "preference"))
        }
        if user.vacation, type.stakes <= .medium {
            trace.append(
                PolicyStep(rule: "vacation", message: "suppressed: vacation mode lets only high and failure through"))
            return finish(.suppressed(reason: "vacation"))
        }
        func deferral(_ hours: QuietHours) -> QuietDeferral? {
            if let quietHours { return quietHours(hours, user.timeZone) }
            return Self.quietHoursDeferral(hours, at: now, in: user.timeZone)
        }
        if !type.transactional, let hours = user.quietHours, let deferral = deferral(hours) {
            trace.append(deferral.step)
            return finish(.deferred(until: deferral.until))
        }
        let windowStart = now.addingTimeInterval(-3600)
        let lastHour = recent.filter { $0 > windowStart && $0 <= now }.sorted()
        if !type.transactional, let limit = app.pacingLimit, limit > 0, lastHour.count >= limit {
            // The oldest of the last `limit` sends leaves the window first: that frees a slot.
            let until = lastHour[lastHour.count - limit].addingTimeInterval(3600)
            trace.append(
                PolicyStep(
                    rule: "pacing",
                    message:
                        "deferred: \(lastHour.count) sent in the last hour (limit \(limit)) until \(Self.format(until, in: user.timeZone))"
                ))
            return finish(.deferred(until: until))
        }
        if let threshold = app.groupingThreshold, threshold > 0, lastHour.count + 1 >= threshold {
            let count = lastHour.count + 1
            content.threadID = app.groupThreadID
            content.summary = app.groupSummaryFormat
                .replacingOccurrences(of: "{app}", with: app.name)
                .replacingOccurrences(of: "{count}", with: String(count))
            trace.append(
                PolicyStep(rule: "grouping", message: "grouped: \(count) in the last hour → \(content.summary!)"))
        }
        if let level = content.interruptionLevel, level == .timeSensitive || level == .critical {
            let allowed = type.stakes >= .high && user.dndBypass.contains(type.stakes)
            if !allowed {
                content.interruptionLevel = .active
                trace.append(
                    PolicyStep(
                        rule: "dnd",
                        message:
                            "interruption level \(level.rawValue) → active (\(type.stakes.rawValue) stakes\(type.stakes >= .high ? " not allowed by the user" : ""))"
                    ))
            }
        }
        let texts = [content.title, content.body].compactMap { $0 }
        if let detector = app.piiDetectors.first(where: { detector in texts.contains(where: detector.matches) }) {
            content.title = type.opaqueTitle
            content.body = type.opaqueBody
            trace.append(PolicyStep(rule: "pii", message: "title and body replaced: \(detector.name) found"))
        }
        // Identifiers rendered from data travel in clear headers and payload keys too.
        if let thread = content.threadID, let detector = app.piiDetectors.first(where: { $0.matches(thread) }) {
            content.threadID = nil
            trace.append(PolicyStep(rule: "pii", message: "thread id left out: \(detector.name) found"))
        }
        if let collapse = content.collapseID, let detector = app.piiDetectors.first(where: { $0.matches(collapse) }) {
            content.collapseID = nil
            trace.append(PolicyStep(rule: "pii", message: "collapse id left out: \(detector.name) found"))
        }
        if payloadSize(content) > payloadLimit {
            guard let body = content.body,
                let shortened = Self.shorten(body, content: content, limit: payloadLimit, size: payloadSize)
            else {
                trace.append(
                    PolicyStep(rule: "size", message: "suppressed: the payload cannot fit \(payloadLimit) bytes"))
                return finish(.suppressed(reason: "payload_too_large"))
            }
            content.body = shortened
            trace.append(
                PolicyStep(rule: "size", message: "body shortened from \(body.count) to \(shortened.count) characters"))
        }
        return finish(.send)
    }

    /// When the quiet window that contains `date` ends, or `nil` when `date` is outside it.
    /// Computed in the user's calendar, so DST changes move the end correctly.
    /// Quiet hours at `date` in `timeZone`: when they end and the trace step that says so; nil
    /// outside them.
    package static func quietHoursDeferral(_ quiet: QuietHours, at date: Date, in timeZone: TimeZone)
        -> QuietDeferral?
    {
        guard let end = quietHoursEnd(quiet, at: date, in: timeZone) else { return nil }
        return QuietDeferral(
            until: end,
            step: PolicyStep(
                rule: "quiet_hours",
                message: "deferred: quiet hours until \(format(end, in: timeZone)) \(timeZone.identifier)"))
    }

    static func quietHoursEnd(_ quiet: QuietHours, at date: Date, in timeZone: TimeZone) -> Date? {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        let parts = calendar.dateComponents([.hour, .minute], from: date)
        let minutes = (parts.hour ?? 0) * 60 + (parts.minute ?? 0)
        let start = quiet.start.minutes
        let end = quiet.end.minutes
        guard start != end else { return nil }
        let inside = start < end ? (minutes >= start && minutes < end) : (minutes >= start || minutes < end)
        guard inside else { return nil }
        return calendar.nextDate(
            after: date, matching: DateComponents(hour: quiet.end.hour, minute: quiet.end.minute, second: 0),
            matchingPolicy: .nextTime)
    }

    /// The longest grapheme-cluster prefix of `body`, with "…", whose payload fits.
    static func shorten(
        _ body: String, content: PolicyContent, limit: Int, size: (PolicyContent) -> Int
    ) -> String? {
        let characters = Array(body)
        func fits(_ count: Int) -> Bool {
            var candidate = content
            candidate.body = String(characters[..<count]) + "…"
            return size(candidate) <= limit
        }
        guard fits(0) else { return nil }
        var low = 0
        var high = characters.count - 1
        while low < high {
            let middle = (low + high + 1) / 2
            if fits(middle) { low = middle } else { high = middle - 1 }
        }
        return String(characters[..<low]) + "…"
    }

    /// `2026-11-23T09:00+01:00`: local time with its offset, as the decision trace shows it.
    static func format(_ date: Date, in timeZone: TimeZone) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = timeZone
        formatter.dateFormat = "yyyy-MM-dd'T'HH:mmxxx"
        return formatter.string(from: date)
    }
}

/// A delivery deferred by quiet hours: until when, and the step of the decision trace.
package struct QuietDeferral: Sendable, Hashable {
    package var until: Date
    package var step: PolicyStep
}
