import Foundation
import HTTPTypes
import HeraldCatalog
import HeraldCore
import HeraldEngine
import HeraldSimulator
import HeraldStore
import HeraldTesting
import Testing

/// Lifecycle tracks, replayed as LucidPal does them, over HTTP with the
/// simulator's inbox as the witness and the server's clock moved by `POST /v1/dev/clock`.
@Suite("Lifecycle tracks")
struct TrackTests {
    /// A LucidPal server: the lucidpal.yaml catalog, a clock that moves only when told.
    static func withLucidPal(_ body: @escaping @Sendable (ServerHarness) async throws -> Void) async throws {
        try await withServer(
            catalog: "lucidpal.yaml", payloadKey: nil, configure: { $0.clock = .manual }, { _ in }, body)
    }

    static func advance(_ server: ServerHarness, to date: Date) async throws {
        let now = try #require(server.runtime.devClock?.now)
        let seconds = Int(date.timeIntervalSince(now).rounded(.up))
        guard seconds > 0 else { return }
        let moved = try await server.request(
            .post, "/v1/dev/clock", key: ServerHarness.admin, json: #"{"advance":"\#(seconds)s"}"#)
        #expect(moved.status == .ok)
    }

    static func titles(_ server: ServerHarness, _ token: String) -> [String] {
        server.simulator.state.inbox(for: token).compactMap {
            (($0.payloadObject?["aps"] as? [String: Any])?["alert"] as? [String: Any])?["title"] as? String
        }
    }

    static func bodies(_ server: ServerHarness, _ token: String) -> [String] {
        server.simulator.state.inbox(for: token).compactMap {
            (($0.payloadObject?["aps"] as? [String: Any])?["alert"] as? [String: Any])?["body"] as? String
        }
    }

    /// 10:00 in `zone` on the local day `days` after `anchor`'s, computed independently of the planner.
    static func tenOClock(_ days: Int, after anchor: Date, in zone: String) -> Date {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: zone)!
        var parts = calendar.dateComponents([.year, .month, .day], from: anchor)
        parts.day! += days
        parts.hour = 10
        return calendar.date(from: parts)!
    }

    /// Dates equal to the millisecond the store keeps.
    static func same(_ left: [Date], _ right: [Date]) -> Bool {
        left.count == right.count && zip(left, right).allSatisfy { abs($0.timeIntervalSince($1)) < 0.002 }
    }

    @Test(
        "LucidPal's trial: enrolled at trial start, day 2, 5 and 7 arrive with the seed's copy on every device (one registered later too), enrolling again schedules nothing twice, the Pro upgrade cancels the rest"
    )
    func trial() async throws {
        let tokens = makeDeviceTokens(3)
        try await Self.withLucidPal { server in
            #expect(try await server.register("maya-iphone", user: "maya", token: tokens[0]) == .created)
            #expect(try await server.register("maya-ipad", user: "maya", token: tokens[1]) == .created)
            #expect(
                try await server.request(.put, "/v1/apps/demo/users/maya", json: #"{"time_zone":"Europe/Paris"}"#)
                    .status == .ok)
            let start = try #require(server.runtime.devClock?.now)
            let enrol = #"{"anchor_at":"\#(HeraldTime.format(start))"}"#
            let first = try await server.request(.put, "/v1/apps/demo/users/maya/tracks/trial", json: enrol)
            #expect(first.status == .ok)
            #expect(first.body["enrolled"] as? Bool == true)
            let steps = try #require(first.body["steps"] as? [[String: Any]])
            #expect(steps.map { $0["id"] as? String } == ["nudge", "expiring", "expired"])
            #expect(steps.allSatisfy { $0["status"] as? String == "pending" })
            let nudge = Self.tenOClock(2, after: start, in: "Europe/Paris")
            let expiring = Self.tenOClock(5, after: start, in: "Europe/Paris")
            let expired = start.addingTimeInterval(7 * 86_400)
            #expect(
                Self.same(
                    steps.compactMap { ($0["due_at"] as? String).flatMap(HeraldTime.parse) },
                    [nudge, expiring, expired]))
            #expect((steps[0]["local_time"] as? String)?.hasSuffix("T10:00:00 Europe/Paris") == true)
            // The app enrols at every launch: nothing is scheduled twice.
            for _ in 0..<3 {
                let again = try await server.request(.put, "/v1/apps/demo/users/maya/tracks/trial", json: enrol)
                #expect(again.body["enrolled"] as? Bool == false)
                #expect((again.body["steps"] as? [[String: Any]])?.count == 3)
            }
            // Nothing before its time.
            try await Self.advance(server, to: nudge.addingTimeInterval(-60))
            try await server.settle()
            #expect(server.simulator.state.inbox(for: tokens[0]).isEmpty)
            try await Self.advance(server, to: nudge)
            try await eventually {
                Self.titles(server, tokens[0]) == ["Your AI is still waiting"]
                    && Self.titles(server, tokens[1]).count == 1
            }
            // A device registered after the enrolment gets the steps that fire after it.
            #expect(try await server.register("maya-mac", user: "maya", token: tokens[2]) == .created)
            try await Self.advance(server, to: expiring)
            // Each device's send is answered on its own: wait for both before reading the first.
            try await eventually {
                Self.titles(server, tokens[2]) == ["2 days of AI left"] && Self.titles(server, tokens[0]).count == 2
            }
            #expect(Self.bodies(server, tokens[0]).last?.hasPrefix("Your cloud AI trial ends in 2 days.") == true)
            try await Self.advance(server, to: expired)
            try await eventually { Self.titles(server, tokens[0]).count == 3 }
            try await server.settle()
            #expect(
                Self.titles(server, tokens[0]) == [
                    "Your AI is still waiting", "2 days of AI left", "Your cloud AI trial ended",
                ])
            #expect(Self.titles(server, tokens[2]) == ["2 days of AI left", "Your cloud AI trial ended"])
            // The deep link of the type rides along (the app routes the tap to TrialExpiredSheet).
            let last = try #require(server.simulator.state.inbox(for: tokens[0]).last?.payloadObject)
            #expect((last["lucidpal"] as? [String: Any])?["deep_link"] as? String == "lucidpal://sheet/trial-expired")
            let listed = try await server.request(.get, "/v1/apps/demo/users/maya/tracks")
            let track = try #require((listed.body["tracks"] as? [[String: Any]])?.first)
            #expect(
                (track["steps"] as? [[String: Any]])?.map { $0["status"] as? String } == ["fired", "fired", "fired"])
            #expect((track["steps"] as? [[String: Any]])?.allSatisfy { $0["notification_id"] is String } == true)
        }
    }

    @Test(
        "a Pro upgrade on day 3 cancels the steps not sent: day 5 and 7 never arrive; DELETE again is 404, and a new trial starts afresh"
    )
    func upgradeCancels() async throws {
        let token = makeDeviceTokens(1)[0]
        try await Self.withLucidPal { server in
            #expect(try await server.register("leo-iphone", user: "leo", token: token) == .created)
            let start = try #require(server.runtime.devClock?.now)
            #expect(
                try await server.request(.put, "/v1/apps/demo/users/leo/tracks/trial", json: "{}").body["enrolled"]
                    as? Bool == true)
            try await Self.advance(server, to: start.addingTimeInterval(3 * 86_400))
            try await eventually { Self.titles(server, token) == ["Your AI is still waiting"] }
            let upgrade = try await server.request(.delete, "/v1/apps/demo/users/leo/tracks/trial")
            #expect(upgrade.status == .ok)
            #expect(upgrade.body["cancelled"] as? Int == 2 && upgrade.body["steps"] as? Int == 2)
            #expect(try await server.request(.delete, "/v1/apps/demo/users/leo/tracks/trial").status == .notFound)
            try await Self.advance(server, to: start.addingTimeInterval(8 * 86_400))
            try await server.settle()
            #expect(Self.titles(server, token) == ["Your AI is still waiting"])
            // The track's cancel key does the same for anyone: POST …/cancel names the track.
            #expect(
                try await server.request(.put, "/v1/apps/demo/users/zoe/tracks/trial", json: "{}").body["enrolled"]
                    as? Bool == true)
            let byKey = try await server.request(
                .post, "/v1/apps/demo/cancel", json: #"{"cancel_key":"track:trial","user_ids":["zoe"]}"#)
            #expect(byKey.body["cancelled"] as? Int == 3 && byKey.body["steps"] as? Int == 3)
            // A new trial later: a new enrolment, its own three steps.
            let again = try await server.request(.put, "/v1/apps/demo/users/leo/tracks/trial", json: "{}")
            #expect(again.body["enrolled"] as? Bool == true)
            #expect(
                (again.body["steps"] as? [[String: Any]])?.map { $0["status"] as? String } == [
                    "pending", "pending", "pending",
                ])
            // Unknown tracks and bad bodies name their field.
            let unknown = try await server.request(.put, "/v1/apps/demo/users/leo/tracks/nope", json: "{}")
            #expect(
                unknown.status == .notFound && (unknown.body["error"] as? [String: Any])?["field"] as? String == "track"
            )
            for (json, field) in [
                (#"{"anchor_at":"yesterday"}"#, "anchor_at"), (#"{"on_conflict":"merge"}"#, "on_conflict"),
                (#"{"test_seconds":0}"#, "test_seconds"),
                (#"{"data":[1]}"#, "data"),
            ] {
                let refused = try await server.request(.put, "/v1/apps/demo/users/leo/tracks/trial", json: json)
                #expect(
                    refused.status == .badRequest
                        && (refused.body["error"] as? [String: Any])?["field"] as? String == field, "\(json)")
            }
        }
    }

    @Test(
        "onboarding's dormant step: its body from data given at enrolment, the fallback without it, skipped for a user who opened the app since"
    )
    func dormant() async throws {
        let tokens = makeDeviceTokens(3)
        try await Self.withLucidPal { server in
            for (index, user) in ["ana", "ben", "cy"].enumerated() {
                #expect(try await server.register("\(user)-phone", user: user, token: tokens[index]) == .created)
            }
            let start = try #require(server.runtime.devClock?.now)
            _ = try await server.request(
                .put, "/v1/apps/demo/users/ana/tracks/onboarding", json: #"{"data":{"event_count":3}}"#)
            _ = try await server.request(.put, "/v1/apps/demo/users/ben/tracks/onboarding", json: "{}")
            _ = try await server.request(.put, "/v1/apps/demo/users/cy/tracks/onboarding", json: "{}")
            try await Self.advance(server, to: start.addingTimeInterval(10 * 86_400))
            let opened = try await server.request(
                .post, "/v1/apps/demo/events", json: #"{"name":"app.opened","user_id":"cy"}"#)
            #expect(opened.status == .accepted && opened.body["duplicate"] as? Bool == false)
            try await Self.advance(server, to: start.addingTimeInterval(32 * 86_400))
            try await eventually {
                Self.bodies(server, tokens[0]).count == 1 && Self.bodies(server, tokens[1]).count == 1
            }
            try await server.settle()
            #expect(
                Self.bodies(server, tokens[0]) == [
                    "You have 3 events this week. I can help you prepare for all of them."
                ])
            #expect(
                Self.bodies(server, tokens[1]) == [
                    "Ask about your schedule, prep for meetings, set reminders — all from one place."
                ])
            #expect(server.simulator.state.inbox(for: tokens[2]).isEmpty)
            let cy = try await server.request(.get, "/v1/apps/demo/users/cy/tracks")
            let step = try #require(
                ((cy.body["tracks"] as? [[String: Any]])?.first?["steps"] as? [[String: Any]])?.first)
            #expect(step["status"] as? String == "skipped" && step["reason"] as? String == "unless app.opened")
        }
    }

    @Test(
        "a time-zone change moves the wall-clock steps (the move is in the trace of what they send); test_seconds fires every step seconds apart"
    )
    func timeZoneAndTestMode() async throws {
        let tokens = makeDeviceTokens(2)
        try await Self.withLucidPal { server in
            #expect(try await server.register("ines-phone", user: "ines", token: tokens[0]) == .created)
            #expect(
                try await server.request(.put, "/v1/apps/demo/users/ines", json: #"{"time_zone":"Europe/Paris"}"#)
                    .status == .ok)
            // Anchored at noon UTC: the same calendar day in Paris and New York whatever the hour
            // the test runs (from a late evening UTC anchor, New York's day-2 10:00 came first).
            var utc = Calendar(identifier: .gregorian)
            utc.timeZone = TimeZone(identifier: "UTC")!
            let clock = try #require(server.runtime.devClock?.now)
            let start = try #require(utc.date(bySettingHour: 12, minute: 0, second: 0, of: clock))
            let enrolled = try await server.request(
                .put, "/v1/apps/demo/users/ines/tracks/trial", json: #"{"anchor_at":"\#(HeraldTime.format(start))"}"#)
            #expect(enrolled.status == .ok)
            #expect(
                try await server.request(.put, "/v1/apps/demo/users/ines", json: #"{"time_zone":"America/New_York"}"#)
                    .status == .ok)
            let listed = try await server.request(.get, "/v1/apps/demo/users/ines/tracks")
            let steps = try #require((listed.body["tracks"] as? [[String: Any]])?.first?["steps"] as? [[String: Any]])
            let nudge = Self.tenOClock(2, after: start, in: "America/New_York")
            #expect(steps.first.flatMap { ($0["due_at"] as? String).flatMap(HeraldTime.parse) } == nudge)
            #expect((steps[0]["local_time"] as? String)?.hasSuffix("T10:00:00 America/New_York") == true)
            // The absolute step (day 7, to the minute) does not move.
            #expect(
                Self.same(
                    [steps[2]["due_at"] as? String].compactMap { $0.flatMap(HeraldTime.parse) },
                    [start.addingTimeInterval(7 * 86_400)]))
            let trace = try #require(steps[0]["trace"] as? [[String: Any]])
            #expect(trace.first?["rule"] as? String == "schedule")
            #expect((trace.first?["message"] as? String)?.contains("Europe/Paris → America/New_York") == true)
            // Still nothing at 10:00 Paris time; sent at 10:00 New York time, with the move in its trace.
            try await Self.advance(server, to: Self.tenOClock(2, after: start, in: "Europe/Paris"))
            try await server.settle()
            #expect(server.simulator.state.inbox(for: tokens[0]).isEmpty)
            try await Self.advance(server, to: nudge)
            try await eventually { Self.titles(server, tokens[0]).count == 1 }
            let fired = try await server.request(.get, "/v1/apps/demo/users/ines/tracks")
            let notification = try #require(
                ((fired.body["tracks"] as? [[String: Any]])?.first?["steps"] as? [[String: Any]])?.first?[
                    "notification_id"] as? String)
            let view = try await server.settled(notification)
            let deliveryTrace = try #require(
                (view["deliveries"] as? [[String: Any]])?.first?["trace"] as? [[String: Any]])
            #expect(deliveryTrace.first?["rule"] as? String == "schedule")

            // Test mode (LucidPal's DevPushTestView): every step 5 s apart from now.
            #expect(try await server.register("dev-phone", user: "dev", token: tokens[1]) == .created)
            let testing = try await server.request(
                .put, "/v1/apps/demo/users/dev/tracks/trial", json: #"{"test_seconds":5,"on_conflict":"restart"}"#)
            let now = try #require(server.runtime.devClock?.now)
            #expect(
                Self.same(
                    (testing.body["steps"] as? [[String: Any]] ?? []).compactMap {
                        ($0["due_at"] as? String).flatMap(HeraldTime.parse)
                    },
                    [5.0, 10, 15].map { now.addingTimeInterval($0) }))
            try await Self.advance(server, to: now.addingTimeInterval(15))
            try await eventually { Self.titles(server, tokens[1]).count == 3 }
        }
    }

    @Test(
        "bulk enrolment from JSON lines: new users enrolled, enrolled ones and repeats left alone, their steps fire; a bad line names its number"
    )
    func bulk() async throws {
        let tokens = makeDeviceTokens(3)
        try await Self.withLucidPal { server in
            for (index, user) in ["u1", "u2", "u3"].enumerated() {
                #expect(try await server.register("\(user)-phone", user: user, token: tokens[index]) == .created)
            }
            _ = try await server.request(.put, "/v1/apps/demo/users/u1/tracks/trial", json: "{}")
            let start = try #require(server.runtime.devClock?.now)
            let lines = [
                "{\"user_id\":\"u1\"}", "{\"user_id\":\"u2\"}", "",
                "{\"user_id\":\"u3\",\"anchor_at\":\"\(HeraldTime.format(start))\"}", "{\"user_id\":\"u2\"}",
            ]
            let bulk = try await server.request(
                .post, "/v1/apps/demo/tracks/trial/enrolments", json: lines.joined(separator: "\n"))
            #expect(
                bulk.status == .ok && bulk.body["enrolled"] as? Int == 2 && bulk.body["already"] as? Int == 2,
                "\(bulk.body)")
            let listed = try await server.request(.get, "/v1/apps/demo/users/u3/tracks")
            #expect(((listed.body["tracks"] as? [[String: Any]])?.first?["steps"] as? [[String: Any]])?.count == 3)
            try await Self.advance(server, to: start.addingTimeInterval(7 * 86_400))
            try await eventually { tokens.allSatisfy { Self.titles(server, $0).count == 3 } }
            let bad = try await server.request(
                .post, "/v1/apps/demo/tracks/trial/enrolments", json: "{\"user_id\":\"u4\"}\n{\"anchor_at\":\"x\"}")
            #expect(
                bad.status == .badRequest
                    && (bad.body["error"] as? [String: Any])?["field"] as? String == "line 2: user_id")
            // The line before the bad one is enrolled, before the 400 is answered.
            let before = try await server.request(.get, "/v1/apps/demo/users/u4/tracks")
            #expect((before.body["tracks"] as? [[String: Any]])?.count == 1)
            #expect(
                try await server.request(.post, "/v1/apps/demo/tracks/nope/enrolments", json: "").status == .notFound)
        }
    }

    @Test(
        "bulk enrolment keeps each line's data as given (quotes, accents, emoji) and skips the steps already past at enrolment"
    )
    func bulkDataAndPast() async throws {
        let tokens = makeDeviceTokens(2)
        try await Self.withLucidPal { server in
            #expect(try await server.register("a-phone", user: "a", token: tokens[0]) == .created)
            #expect(try await server.register("b-phone", user: "b", token: tokens[1]) == .created)
            let start = try #require(server.runtime.devClock?.now)
            let count = #"3 \"big\" — café 🎉"#
            let lines = [
                #"{"user_id":"a","data":{"event_count":"\#(count)"}}"#,
                #"{"user_id":"b","anchor_at":"\#(HeraldTime.format(start.addingTimeInterval(-3 * 86_400)))"}"#,
            ]
            let onboarding = try await server.request(
                .post, "/v1/apps/demo/tracks/onboarding/enrolments", json: lines[0])
            #expect(onboarding.body["enrolled"] as? Int == 1, "\(onboarding.body)")
            let trial = try await server.request(.post, "/v1/apps/demo/tracks/trial/enrolments", json: lines[1])
            #expect(trial.body["enrolled"] as? Int == 1, "\(trial.body)")
            // Enrolled three days ago: the day-2 nudge is past (skipped), the rest still to come.
            let listed = try await server.request(.get, "/v1/apps/demo/users/b/tracks")
            let steps = try #require((listed.body["tracks"] as? [[String: Any]])?.first?["steps"] as? [[String: Any]])
            #expect(
                steps.map { "\($0["id"] ?? "")=\($0["status"] ?? "")/\($0["reason"] ?? "-")" }
                    == ["nudge=skipped/PastAtEnrolment", "expiring=pending/-", "expired=pending/-"])
            try await Self.advance(server, to: start.addingTimeInterval(31 * 86_400))
            try await eventually { Self.bodies(server, tokens[0]).count == 1 }
            #expect(
                Self.bodies(server, tokens[0]) == [
                    "You have 3 \"big\" — café 🎉 events this week. I can help you prepare for all of them."
                ])
            try await eventually { Self.titles(server, tokens[1]).count == 2 }
        }
    }

    @Test("history retention: events, finished steps and job occurrences go after 400 days; pending steps stay")
    func historyRetention() async throws {
        let clock = ManualClock(Date())
        let store = try await HeraldStore.open(url: try await TestDatabase.url("history"), clock: clock.clock)
        defer { Task { await store.close() } }
        _ = try await store.devices.applyEvent(
            appID: "a", id: UUID(), userID: "u", name: "app.opened", data: "{}", occurredAt: clock.now,
            idempotencyKey: nil,
            effects: DeviceRepository.EventEffects(), badgePush: BadgePush(payloadKey: "a", platforms: []))
        let steps = [
            PlannedStep(id: "s1", dueAt: clock.now.addingTimeInterval(60)),
            PlannedStep(id: "s2", dueAt: clock.now.addingTimeInterval(500 * 86_400)),
        ]
        _ = try await store.tracks.enrol(
            appID: "a", userID: "u", track: "t", cancelKey: "track:t", anchorAt: clock.now, data: "{}",
            testSeconds: nil, steps: steps, restart: false)
        #expect(
            try await store.timers.sendJobOccurrence(
                appID: "a", job: "j", occurrence: "2026-11-25", userIDs: ["u"], notification: UUID(),
                content: Data("{}".utf8), lane: .normal) == 1)
        // The first step is cancelled (finished); the second is still pending a year later.
        _ = try await store.notifications.cancel(appID: "a", cancelKey: "track:t", userIDs: nil)
        _ = try await store.tracks.enrol(
            appID: "a", userID: "u", track: "t", cancelKey: "track:t", anchorAt: clock.now, data: "{}",
            testSeconds: nil,
            steps: [PlannedStep(id: "late", dueAt: clock.now.addingTimeInterval(500 * 86_400))], restart: true)
        #expect(try await store.pruneHistory(before: clock.now.addingTimeInterval(-86_400)).history == 0)
        clock.advance(by: 401 * 86_400)
        // The event, the two cancelled steps and the occurrence.
        #expect(try await store.pruneHistory(before: clock.now.addingTimeInterval(-86_400)).history == 4)
        #expect(try await store.tracks.enrolments(appID: "a", userID: "u").first?.steps.map(\.status) == ["pending"])
    }

    @Test(
        "wall-clock steps on DST days: a day is a calendar day (10:00 stays 10:00), a time skipped in spring moves an hour later"
    )
    func daylightSaving() {
        let paris = TimeZone(identifier: "Europe/Paris")!
        // 2027-03-27 12:00 Paris (UTC+1); clocks go forward on the 28th at 02:00.
        let anchor = Date(timeIntervalSince1970: 1_806_145_200)
        let step = CatalogStep(id: "s", type: "t", after: 2 * 86_400, at: LocalTime(hour: 10))
        // 2027-03-29 10:00 Paris is UTC+2: 08:00Z. 48 hours after the anchor would be 13:00.
        #expect(step.due(anchor: anchor, zone: paris) == Date(timeIntervalSince1970: 1_806_307_200))
        let skipped = CatalogStep(id: "s", type: "t", after: 86_400, at: LocalTime(hour: 2, minute: 30))
        // 02:30 does not exist on the 28th: 03:30 CEST, 01:30Z.
        #expect(skipped.due(anchor: anchor, zone: paris) == Date(timeIntervalSince1970: 1_806_197_400))
        let absolute = CatalogStep(id: "s", type: "t", after: 2 * 86_400)
        #expect(absolute.due(anchor: anchor, zone: paris) == anchor.addingTimeInterval(2 * 86_400))
    }

    @Test(
        "tracks in the catalog: unknown types, repeated step ids and unknown data placeholders are found; bad durations and times name their key"
    )
    func catalogChecks() throws {
        let base = """
            app: { name: T }
            types:
              a: { copy: { en: { title: "A", body: "Hi {name}" } }, placeholders: [name] }
            """
        let bad = try CatalogLoader.parse(
            yaml: base + """

                tracks:
                  t:
                    anchor: start
                    steps:
                      - { id: one, type: a, after: 1d, data: { name: Bo, nope: x } }
                      - { id: one, type: missing, after: 2d }
                """, file: "/tmp/c.yaml")
        let problems = CatalogChecker.check(bad).map(\.key)
        #expect(problems == ["tracks.t.steps[0].data.nope", "tracks.t.steps[1].id", "tracks.t.steps[1].type"])
        #expect(bad.track("t")?.cancelKey == "track:t")
        for (step, key) in [
            ("{ id: x, type: a, after: soon }", "tracks.t.steps[0].after"),
            ("{ id: x, type: a, after: 1d, at: '25:00' }", "tracks.t.steps[0].at"),
            ("{ id: x, type: a }", "tracks.t.steps[0]"),
        ] {
            #expect(throws: ConfigurationError.self) {
                try CatalogLoader.parse(
                    yaml: base + "\ntracks:\n  t:\n    anchor: s\n    steps:\n      - \(step)\n", file: "/tmp/c.yaml")
            }
            do {
                _ = try CatalogLoader.parse(
                    yaml: base + "\ntracks:\n  t:\n    anchor: s\n    steps:\n      - \(step)\n", file: "/tmp/c.yaml")
            } catch {
                #expect(error.key == key, "\(step)")
            }
        }
    }
}
