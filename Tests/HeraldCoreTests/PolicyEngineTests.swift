import Foundation
import HeraldCore
import HeraldPayload
import Testing

@Suite("Policy engine (pure, clock injected)")
struct PolicyEngineTests {
    let paris = TimeZone(identifier: "Europe/Paris")!
    let newYork = TimeZone(identifier: "America/New_York")!

    func date(_ text: String, _ zone: TimeZone) -> Date {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = zone
        formatter.dateFormat = "yyyy-MM-dd HH:mm"
        return formatter.date(from: text)!
    }

    func decide(
        at now: Date, type: PolicyType = PolicyType(id: "PN-02"), user: PolicyUser = PolicyUser(),
        app: PolicyApp = PolicyApp(name: "Test", pacingLimit: nil),
        content: PolicyContent = PolicyContent(title: "T", body: "B"),
        recent: [Date] = [], limit: Int = 4096
    ) -> PolicyDecision {
        PolicyEngine(clock: HeraldClock { now }).decide(
            type: type, user: user, app: app, content: content, recent: recent, payloadLimit: limit,
            payloadSize: { content in 40 + (content.title?.utf8.count ?? 0) + (content.body?.utf8.count ?? 0) })
    }

    @Test("preference off suppresses user-controllable types; catalog defaults apply; others ignore it")
    func preferences() {
        let now = Date()
        let syncSuccess = PolicyType(id: "PN-01", defaultEnabled: false)
        #expect(decide(at: now, type: syncSuccess).outcome == .suppressed(reason: "preference"))
        #expect(decide(at: now, type: syncSuccess, user: PolicyUser(typeEnabled: ["PN-01": true])).outcome == .send)
        let syncError = PolicyType(id: "PN-02")
        #expect(
            decide(at: now, type: syncError, user: PolicyUser(typeEnabled: ["PN-02": false])).outcome
                == .suppressed(reason: "preference"))
        let security = PolicyType(id: "security", userControllable: false)
        #expect(decide(at: now, type: security, user: PolicyUser(typeEnabled: ["security": false])).outcome == .send)
        #expect(decide(at: now, type: syncSuccess).trace.first?.rule == "preference")
    }

    @Test("vacation lets only high and failure through (C11)")
    func vacation() {
        let user = PolicyUser(vacation: true)
        for stakes in Stakes.allCases {
            let outcome = decide(at: Date(), type: PolicyType(id: "card", stakes: stakes), user: user).outcome
            #expect(outcome == (stakes >= .high ? .send : .suppressed(reason: "vacation")), "\(stakes)")
        }
    }

    @Test("quiet hours defer non-transactional types to the window's end in the user's zone (S10)")
    func quietHours() {
        let user = PolicyUser(timeZone: paris, quietHours: .syncWellDefault)
        let night = date("2026-11-22 23:00", paris)
        let decision = decide(at: night, user: user)
        #expect(decision.outcome == .deferred(until: date("2026-11-23 09:00", paris)))
        #expect(
            decision.trace.map(\.description) == [
                "quiet_hours: deferred: quiet hours until 2026-11-23T09:00+01:00 Europe/Paris"
            ])
        let early = date("2026-11-23 08:59", paris)
        #expect(decide(at: early, user: user).outcome == .deferred(until: date("2026-11-23 09:00", paris)))
        #expect(decide(at: date("2026-11-23 09:00", paris), user: user).outcome == .send)
        #expect(decide(at: night, type: PolicyType(id: "PN-03", transactional: true), user: user).outcome == .send)
        #expect(decide(at: night, user: PolicyUser(timeZone: paris, quietHours: nil)).outcome == .send)
        // A window that does not wrap midnight.
        let lunch = PolicyUser(
            timeZone: paris, quietHours: QuietHours(start: LocalTime(hour: 12), end: LocalTime(hour: 14)))
        #expect(
            decide(at: date("2026-11-23 13:30", paris), user: lunch).outcome
                == .deferred(until: date("2026-11-23 14:00", paris)))
        #expect(decide(at: date("2026-11-23 14:30", paris), user: lunch).outcome == .send)
    }

    @Test("quiet hours across DST changes end at 09:00 local wall time")
    func quietHoursDST() {
        let user = PolicyUser(timeZone: newYork, quietHours: .syncWellDefault)
        // Fall back (2026-11-01 02:00 EDT → 01:00 EST): the night is 11 hours long.
        let fallNight = date("2026-10-31 23:00", newYork)
        guard case .deferred(let fallEnd) = decide(at: fallNight, user: user).outcome else {
            Issue.record("not deferred")
            return
        }
        #expect(fallEnd == date("2026-11-01 09:00", newYork))
        #expect(fallEnd.timeIntervalSince(fallNight) == 11 * 3600)
        // Spring forward (2026-03-08 02:00 EST → 03:00 EDT): 9 hours.
        let springNight = date("2026-03-07 23:00", newYork)
        guard case .deferred(let springEnd) = decide(at: springNight, user: user).outcome else {
            Issue.record("not deferred")
            return
        }
        #expect(springEnd.timeIntervalSince(springNight) == 9 * 3600)
        // Paris, spring forward 2026-03-29: 23:00 CET → 09:00 CEST is 9 hours.
        let parisUser = PolicyUser(timeZone: paris, quietHours: .syncWellDefault)
        let parisNight = date("2026-03-28 23:00", paris)
        guard case .deferred(let parisEnd) = decide(at: parisNight, user: parisUser).outcome else {
            Issue.record("not deferred")
            return
        }
        #expect(parisEnd.timeIntervalSince(parisNight) == 9 * 3600)
    }

    @Test("pacing: at most 5 per rolling hour; the rest wait for a free slot and are never dropped (U7)")
    func pacing() {
        let app = PolicyApp(name: "Lucid", pacingLimit: 5)
        let start = Date(timeIntervalSince1970: 1_800_000_000)
        // 12 thought notifications created within one hour; each is re-evaluated when due.
        var sent: [Date] = []
        var pending = (0..<12).map { start.addingTimeInterval(Double($0) * 60) }
        var guardCount = 0
        while !pending.isEmpty, guardCount < 1000 {
            guardCount += 1
            pending.sort()
            let due = pending.removeFirst()
            switch decide(at: due, app: app, recent: sent).outcome {
            case .send: sent.append(due)
            case .deferred(let until):
                #expect(until > due)
                pending.append(until)
            case .suppressed: Issue.record("paced notification dropped")
            }
        }
        #expect(sent.count == 12)
        #expect(sent.filter { $0 < start.addingTimeInterval(3600) }.count == 5)
        // Never more than 5 in any rolling hour.
        for moment in sent {
            #expect(sent.filter { $0 > moment.addingTimeInterval(-3600) && $0 <= moment }.count <= 5)
        }
        // Sends older than an hour do not count; transactional types are not paced.
        let old = (0..<5).map { start.addingTimeInterval(-4000 - Double($0)) }
        #expect(decide(at: start, app: app, recent: old).outcome == .send)
        let recent = (0..<5).map { start.addingTimeInterval(-Double($0 + 1) * 60) }
        #expect(
            decide(at: start, app: app, recent: recent).outcome
                == .deferred(until: start.addingTimeInterval(-300 + 3600)))
        #expect(
            decide(at: start, type: PolicyType(id: "reset", transactional: true), app: app, recent: recent).outcome
                == .send)
    }

    @Test("grouping: from the 5th within an hour the group thread and summary are used (C7)")
    func grouping() {
        let app = PolicyApp(name: "Cocotte", pacingLimit: nil, groupingThreshold: 5, groupThreadID: "cocotte-updates")
        let now = Date()
        let four = (1...4).map { now.addingTimeInterval(-Double($0) * 60) }
        let fifth = decide(
            at: now, app: app, content: PolicyContent(title: "T", body: "B", threadID: "card-1"), recent: four)
        #expect(fifth.outcome == .send)
        #expect(fifth.content.threadID == "cocotte-updates")
        #expect(fifth.content.summary == "Cocotte · 5 updates")
        let fourth = decide(
            at: now, app: app, content: PolicyContent(title: "T", body: "B", threadID: "card-1"),
            recent: Array(four.prefix(3)))
        #expect(fourth.content.threadID == "card-1")
        #expect(fourth.content.summary == nil)
    }

    @Test("Do-Not-Disturb bypass only for high and failure stakes the user allowed (C12)")
    func dnd() {
        let urgent = PolicyContent(title: "T", body: "B", interruptionLevel: .timeSensitive)
        let high = PolicyType(id: "approval", stakes: .high)
        #expect(
            decide(at: Date(), type: high, user: PolicyUser(dndBypass: [.high]), content: urgent).content
                .interruptionLevel == .timeSensitive)
        let denied = decide(at: Date(), type: high, user: PolicyUser(dndBypass: [.failure]), content: urgent)
        #expect(denied.content.interruptionLevel == .active)
        #expect(denied.trace.map(\.rule) == ["dnd"])
        let medium = PolicyType(id: "update", stakes: .medium)
        #expect(
            decide(at: Date(), type: medium, user: PolicyUser(dndBypass: Set(Stakes.allCases)), content: urgent).content
                .interruptionLevel == .active)
        let critical = PolicyContent(title: "T", body: "B", interruptionLevel: .critical)
        #expect(
            decide(
                at: Date(), type: PolicyType(id: "f", stakes: .failure), user: PolicyUser(dndBypass: [.failure]),
                content: critical
            ).content.interruptionLevel == .critical)
    }

    @Test("the PII guard replaces title and body with the type's opaque text (C10)")
    func pii() {
        let type = PolicyType(
            id: "approval", stakes: .high, opaqueTitle: "New approval waiting", opaqueBody: "Open to view")
        for leaking in [
            "Reply to jane.doe@example.com", "Call +33 6 12 34 56 78 now", "Card 4111 1111 1111 1111 charged",
            "Deliver to 221 Baker Street",
        ] {
            let decision = decide(at: Date(), type: type, content: PolicyContent(title: "Approve", body: leaking))
            #expect(decision.content.title == "New approval waiting", "\(leaking)")
            #expect(decision.content.body == "Open to view", "\(leaking)")
            #expect(decision.trace.last?.rule == "pii")
            #expect(!decision.trace.description.contains(leaking))
        }
        for clean in [
            "Invoice 12 is ready", "Order 4111 1111 1111 1112 shipped", "3 new comments", "Version 2.10.3 is out",
        ] {
            #expect(
                decide(at: Date(), type: type, content: PolicyContent(title: "Approve", body: clean)).content.body
                    == clean, "\(clean)")
        }
    }

    @Test("size: the body is shortened at a grapheme boundary with … so the payload fits (C6)")
    func size() {
        let body = String(repeating: "👩‍👩‍👧‍👦é", count: 300)
        let decision = decide(at: Date(), content: PolicyContent(title: "T", body: body), limit: 1000)
        #expect(decision.outcome == .send)
        let shortened = decision.content.body ?? ""
        #expect(shortened.hasSuffix("…"))
        #expect(40 + 1 + shortened.utf8.count <= 1000)
        #expect(40 + 1 + shortened.utf8.count > 1000 - 30)
        #expect(body.hasPrefix(String(shortened.dropLast())))
        #expect(decision.trace.last?.rule == "size")
        let hopeless = decide(
            at: Date(), content: PolicyContent(title: String(repeating: "t", count: 2000), body: "b"), limit: 1000)
        #expect(hopeless.outcome == .suppressed(reason: "payload_too_large"))
    }

    @Test("rules apply in order: preference, vacation, quiet hours, pacing")
    func order() {
        let night = date("2026-11-22 23:00", paris)
        let everything = PolicyUser(
            timeZone: paris, typeEnabled: ["x": false], quietHours: .syncWellDefault, vacation: true)
        #expect(decide(at: night, type: PolicyType(id: "x"), user: everything).trace.map(\.rule) == ["preference"])
        var onVacation = everything
        onVacation.typeEnabled = [:]
        #expect(decide(at: night, type: PolicyType(id: "x"), user: onVacation).trace.map(\.rule) == ["vacation"])
        var quiet = onVacation
        quiet.vacation = false
        let paced = (1...5).map { night.addingTimeInterval(-Double($0) * 60) }
        #expect(
            decide(
                at: night, type: PolicyType(id: "x"), user: quiet, app: PolicyApp(name: "A", pacingLimit: 5),
                recent: paced
            )
            .trace.map(\.rule) == ["quiet_hours"])
    }
}
