import Foundation
import HeraldKit
import HeraldKitTesting
import HeraldPayload
import Testing

/// LucidPal's trial and onboarding tracks scheduled on the device.
@Suite("HeraldKit local lifecycle scheduling")
struct LocalSchedulingTests {
    /// Examples/lucidpal.yaml's tracks and copy.
    static let trial = LocalTrack(
        name: "trial",
        steps: [
            .init(id: "nudge", type: "trial_nudge", after: "2d", at: "10:00"),
            .init(id: "expiring", type: "trial_expiring", after: "5d", at: "10:00"),
            .init(id: "expired", type: "trial_expired", after: "7d"),
        ],
        copy: [
            "trial_nudge": .init(
                title: "Your AI is still waiting", body: "You haven't asked LucidPal anything yet.",
                deepLink: "lucidpal://chat?query=hello"),
            "trial_expiring": .init(title: "2 days of AI left", body: "Your cloud AI trial ends in 2 days."),
            "trial_expired": .init(
                title: "Your cloud AI trial ended", body: "On-device AI is still yours.",
                deepLink: "lucidpal://sheet/trial-expired"),
        ])
    static let onboarding = LocalTrack(
        name: "onboarding", steps: [.init(id: "dormant", type: "dormant_calendar", after: "30d", at: "10:00")],
        copy: [
            "dormant_calendar": .init(
                title: "LucidPal can prep you for this week", body: "You have {event_count} events this week.",
                fallbackBody: "Ask about your schedule, prep for meetings, set reminders — all from one place.")
        ])
    static let paris = TimeZone(identifier: "Europe/Paris")!
    // Trial started Friday 2026-10-23 18:30 in Paris (16:30 UTC); clocks go back on 2026-10-25.
    static let anchor = ISO8601DateFormatter().date(from: "2026-10-23T16:30:00Z")!

    @Test(
        "the trial's three steps at 10:00 Paris time after 2 and 5 days (DST-correct) and to the minute after 7 days, with calendar triggers; scheduling again adds nothing (L2)"
    )
    func trial() async throws {
        let center = FakeLocalScheduler()
        let scheduler = LocalTrackScheduler(scheduler: center, clock: ManualKitClock(Self.anchor))
        let first = try await scheduler.schedule(Self.trial, anchor: Self.anchor, zone: Self.paris)
        #expect(first.added.count == 3 && first.removed.isEmpty)
        let formatter = ISO8601DateFormatter()
        #expect(
            center.pending.map { formatter.string(from: $0.fireDate) } == [
                "2026-10-25T09:00:00Z", "2026-10-28T09:00:00Z", "2026-10-30T16:30:00Z",
            ])
        guard case .calendar(let components) = center.pending[0].trigger else {
            Issue.record("not a calendar trigger")
            return
        }
        #expect(
            components.hour == 10 && components.minute == 0 && components.day == 25 && components.timeZone == Self.paris
        )
        #expect(
            center.pending[0].appData["deep_link"] == .string("lucidpal://chat?query=hello")
                && center.pending[0].appData["type"] == .string("trial_nudge"))
        let again = try await scheduler.schedule(Self.trial, anchor: Self.anchor, zone: Self.paris)
        #expect(again.added.isEmpty && again.kept.count == 3 && center.pending.count == 3)
    }

    @Test(
        "a later launch: past steps are left out and not re-added; a new anchor replaces the old steps; the Pro upgrade cancels them all (L4)"
    )
    func diffAndCancel() async throws {
        let center = FakeLocalScheduler()
        let clock = ManualKitClock(Self.anchor)
        let scheduler = LocalTrackScheduler(scheduler: center, clock: clock)
        try await scheduler.schedule(Self.trial, anchor: Self.anchor, zone: Self.paris)
        // Three days later the nudge has fired (the center no longer has it).
        clock.advance(by: 3 * 86_400)
        await center.remove(identifiers: [center.pending[0].identifier])
        let later = try await scheduler.schedule(Self.trial, anchor: Self.anchor, zone: Self.paris)
        #expect(later.added.isEmpty && later.kept.count == 2)
        // The trial restarted: new ids, the old ones removed.
        let restart = try await scheduler.schedule(Self.trial, anchor: clock.now, zone: Self.paris)
        #expect(restart.added.count == 3 && restart.removed.count == 2 && center.pending.count == 3)
        #expect(await scheduler.cancelAll("trial") == 3 && center.pending.isEmpty)
    }

    @Test(
        "test mode fires every step N seconds apart with interval triggers (L5); the body comes from data, the fallback without it (L3)"
    )
    func testModeAndFallback() async throws {
        let center = FakeLocalScheduler()
        let scheduler = LocalTrackScheduler(scheduler: center, clock: ManualKitClock(Self.anchor), testSeconds: 10)
        try await scheduler.schedule(Self.trial, anchor: Self.anchor, zone: Self.paris)
        #expect(center.pending.map(\.trigger) == [.interval(10), .interval(20), .interval(30)])
        let production = LocalTrackScheduler(scheduler: center, clock: ManualKitClock(Self.anchor))
        try await production.schedule(
            Self.onboarding, anchor: Self.anchor, zone: Self.paris, data: ["event_count": "3"])
        #expect(center.pending.last?.body == "You have 3 events this week.")
        try await production.schedule(Self.onboarding, anchor: Self.anchor.addingTimeInterval(60), zone: Self.paris)
        #expect(
            center.pending.last?.body
                == "Ask about your schedule, prep for meetings, set reminders — all from one place.")
    }

    @Test(
        "durations as the catalog writes them: the largest whole unit, read back to the same seconds; step data defaults fill what the enrolment leaves out"
    )
    func durationsAndDefaults() throws {
        let cases: [(TimeInterval, String)] = [
            (172_800, "2d"), (129_600, "36h"), (5400, "90m"), (45, "45s"), (1.5, "1.5s"), (0, "0s"),
        ]
        for (seconds, text) in cases {
            #expect(HeraldDuration.text(seconds) == text)
            #expect(HeraldDuration.seconds(HeraldDuration.text(seconds)) == seconds)
        }
        var track = Self.onboarding
        track.steps[0].data = ["event_count": "2"]
        let scheduler = LocalTrackScheduler(scheduler: FakeLocalScheduler(), clock: ManualKitClock(Self.anchor))
        #expect(
            scheduler.plan(track, anchor: Self.anchor, zone: Self.paris, data: [:]).first?.body
                == "You have 2 events this week.")
        #expect(
            scheduler.plan(track, anchor: Self.anchor, zone: Self.paris, data: ["event_count": "4"]).first?.body
                == "You have 4 events this week.")
    }
}
