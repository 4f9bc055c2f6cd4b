import Foundation
import HTTPTypes
import HeraldCore
import HeraldEngine
import HeraldSchedule
import HeraldSimulator
import HeraldStore
import HeraldTesting
import Testing

/// Events and triggers, badges and nightly jobs, replayed as SyncWell does
/// them over HTTP, the simulator's inbox as the witness.
@Suite("Events, badges and jobs")
struct EventTests {
    static func aps(_ server: ServerHarness, _ token: String) -> [[String: Any]] {
        server.simulator.state.inbox(for: token).compactMap { $0.payloadObject?["aps"] as? [String: Any] }
    }

    /// The badge-only pushes a device received, in order.
    static func badges(_ server: ServerHarness, _ token: String) -> [Int] {
        aps(server, token).filter { $0["alert"] == nil }.compactMap { $0["badge"] as? Int }
    }

    static func titles(_ server: ServerHarness, _ token: String) -> [String] {
        aps(server, token).compactMap { ($0["alert"] as? [String: Any])?["title"] as? String }
    }

    @Test(
        "SyncWell: sync.failed sends PN-02 and badge 1, a second badge 2, sync.resolved badge 1; absolute totals on every device; an event's idempotency key applies it once"
    )
    func syncErrors() async throws {
        let tokens = makeDeviceTokens(2)
        try await withServer { server in
            #expect(try await server.register("sam-phone", user: "sam", token: tokens[0]) == .created)
            #expect(try await server.register("sam-tablet", user: "sam", token: tokens[1]) == .created)
            func event(_ json: String) async throws -> [String: Any] {
                let answer = try await server.request(.post, "/v1/apps/demo/events", json: json)
                #expect(answer.status == .accepted, "\(answer.body)")
                return answer.body
            }
            let first = try await event(
                #"{"name":"sync.failed","user_id":"sam","data":{"source_name":"Strava","source_id":"strava"},"idempotency_key":"e1"}"#
            )
            // The badge push and PN-02.
            #expect((first["notifications"] as? [String])?.count == 2 && first["duplicate"] as? Bool == false)
            try await eventually {
                Self.badges(server, tokens[0]) == [1] && Self.titles(server, tokens[0]) == ["SyncWell Action Required"]
            }
            let body =
                (Self.aps(server, tokens[0]).first { $0["alert"] != nil }?["alert"] as? [String: Any])?["body"]
                as? String
            #expect(body == "Your connection to Strava has an issue. Tap to fix.")
            // The same event again (a retried publish): nothing more.
            let repeated = try await event(
                #"{"name":"sync.failed","user_id":"sam","data":{"source_name":"Strava","source_id":"strava"},"idempotency_key":"e1"}"#
            )
            #expect(repeated["duplicate"] as? Bool == true && repeated["id"] as? String == first["id"] as? String)
            #expect(repeated["notifications"] as? [String] == first["notifications"] as? [String])
            _ = try await event(
                #"{"name":"sync.failed","user_id":"sam","data":{"source_name":"Garmin","source_id":"garmin"}}"#)
            try await eventually {
                Self.badges(server, tokens[1]) == [1, 2] && Self.titles(server, tokens[1]).count == 2
            }
            _ = try await event(#"{"name":"sync.resolved","user_id":"sam","data":{"source_id":"garmin"}}"#)
            try await eventually {
                Self.badges(server, tokens[0]) == [1, 2, 1] && Self.badges(server, tokens[1]) == [1, 2, 1]
            }
            let read = try await server.request(.get, "/v1/apps/demo/users/sam/badges")
            #expect(read.body["badge"] as? Int == 1 && (read.body["counters"] as? [String: Int]) == ["sync_errors": 1])
            // Set directly; an unchanged total sends nothing.
            let same = try await server.request(
                .post, "/v1/apps/demo/users/sam/badges", json: #"{"counter":"sync_errors","value":1}"#)
            #expect(same.body["badge"] as? Int == 1 && same.body["notification_id"] == nil)
            let other = try await server.request(
                .post, "/v1/apps/demo/users/sam/badges", json: #"{"counter":"messages","delta":3}"#)
            #expect(other.body["badge"] as? Int == 4)
            _ = try await event(#"{"name":"sync.all_clear","user_id":"sam"}"#)
            try await eventually { Self.badges(server, tokens[0]) == [1, 2, 1, 4, 3] }
            // A second resolve of nothing does not go below zero.
            _ = try await event(#"{"name":"sync.resolved","user_id":"sam","data":{"source_id":"garmin"}}"#)
            _ = try await event(#"{"name":"sync.resolved","user_id":"sam","data":{"source_id":"garmin"}}"#)
            #expect(try await server.request(.get, "/v1/apps/demo/users/sam/badges").body["badge"] as? Int == 3)
            for (json, field) in [
                (#"{"counter":"x"}"#, "delta"), (#"{"delta":1}"#, "counter"), (#"{"counter":"x","value":-1}"#, "value"),
            ] {
                let refused = try await server.request(.post, "/v1/apps/demo/users/sam/badges", json: json)
                #expect(
                    refused.status == .badRequest
                        && (refused.body["error"] as? [String: Any])?["field"] as? String == field, "\(json)")
            }
        }
    }

    @Test(
        "a trigger's cancel calls back a pending send of the event's user (a scheduled reminder with the key), not another user's"
    )
    func triggerCancels() async throws {
        let tokens = makeDeviceTokens(2)
        try await withServer(configure: { $0.clock = .manual }) { server in
            #expect(try await server.register("a-phone", user: "a", token: tokens[0]) == .created)
            #expect(try await server.register("b-phone", user: "b", token: tokens[1]) == .created)
            let later = HeraldTime.format(try #require(server.runtime.devClock?.now).addingTimeInterval(3600))
            for user in ["a", "b"] {
                let sent = try await server.send(
                    #"{"to":{"user_ids":["\#(user)"]},"alert":{"body":"reconnect Strava"},"deliver_at":"\#(later)","cancel_key":"sync-error:strava"}"#
                )
                #expect(sent.status == .accepted)
            }
            let resolved = try await server.request(
                .post, "/v1/apps/demo/events",
                json: #"{"events":[{"name":"sync.resolved","user_id":"a","data":{"source_id":"strava"}}]}"#)
            #expect(resolved.status == .accepted && (resolved.body["events"] as? [[String: Any]])?.count == 1)
            _ = try await server.request(.post, "/v1/dev/clock", key: ServerHarness.admin, json: #"{"advance":"1h"}"#)
            try await eventually { server.simulator.state.inbox(for: tokens[1]).count == 1 }
            try await server.settle()
            #expect(server.simulator.state.inbox(for: tokens[0]).isEmpty)
        }
    }

    @Test(
        "SyncWell's nightly jobs at 09:00 in each user's zone: PN-05 to trials ending within 24 h, PN-04 to renewals in 3 days, each user once per day, across a restart of the runner"
    )
    func nightlyJobs() async throws {
        let tokens = makeDeviceTokens(5)
        try await withServer(configure: { $0.clock = .manual }) { server in
            let users = [
                ("soon", "Europe/Paris"), ("later", "Europe/Paris"), ("renews", "Europe/Paris"),
                ("ny", "America/New_York"), ("none", "Europe/Paris"),
            ]
            for (index, (user, zone)) in users.enumerated() {
                #expect(try await server.register("\(user)-phone", user: user, token: tokens[index]) == .created)
                #expect(
                    try await server.request(.put, "/v1/apps/demo/users/\(user)", json: #"{"time_zone":"\#(zone)"}"#)
                        .status == .ok)
            }
            let now = try #require(server.runtime.devClock?.now)
            var paris = Calendar(identifier: .gregorian)
            paris.timeZone = TimeZone(identifier: "Europe/Paris")!
            let run = paris.nextDate(
                after: now, matching: DateComponents(hour: 9, minute: 0), matchingPolicy: .nextTime)!
            var newYork = Calendar(identifier: .gregorian)
            newYork.timeZone = TimeZone(identifier: "America/New_York")!
            let nyRun = newYork.nextDate(
                after: run, matching: DateComponents(hour: 9, minute: 0), matchingPolicy: .nextTime)!
            // Attributes: through a trigger (trial.started), and set directly.
            let soon = HeraldTime.format(run.addingTimeInterval(20 * 3600))
            #expect(
                try await server.request(
                    .post, "/v1/apps/demo/events",
                    json: #"{"name":"trial.started","user_id":"soon","data":{"trial_ends_at":"\#(soon)"}}"#
                ).status == .accepted)
            #expect(
                try await server.request(.get, "/v1/apps/demo/users/soon").body["attributes"] as? [String: String] == [
                    "trial_ends_at": soon
                ])
            let renewal = paris.date(byAdding: .day, value: 3, to: run)!.addingTimeInterval(3 * 3600)
            for (user, attributes) in [
                ("later", #"{"trial_ends_at":"\#(HeraldTime.format(run.addingTimeInterval(48 * 3600)))"}"#),
                ("renews", #"{"renews_at":"\#(HeraldTime.format(renewal))"}"#),
                ("ny", #"{"trial_ends_at":"\#(HeraldTime.format(nyRun.addingTimeInterval(3600)))"}"#),
            ] {
                let zone = users.first { $0.0 == user }!.1
                #expect(
                    try await server.request(
                        .put, "/v1/apps/demo/users/\(user)",
                        json: #"{"time_zone":"\#(zone)","attributes":\#(attributes)}"#
                    ).status == .ok)
            }
            try await TrackTests.advance(server, to: run.addingTimeInterval(-60))
            try await server.settle()
            #expect(tokens.allSatisfy { server.simulator.state.inbox(for: $0).isEmpty })
            try await TrackTests.advance(server, to: run)
            try await eventually {
                Self.titles(server, tokens[0]) == ["Trial Ending Soon"]
                    && Self.titles(server, tokens[2]) == ["Subscription Renewal"]
            }
            // New York's 09:00 comes later: its user gets it then; Paris users get nothing more.
            try await server.settle()
            #expect(
                server.simulator.state.inbox(for: tokens[3]).isEmpty
                    && server.simulator.state.inbox(for: tokens[1]).isEmpty)
            try await TrackTests.advance(server, to: nyRun.addingTimeInterval(120))
            try await eventually { Self.titles(server, tokens[3]) == ["Trial Ending Soon"] }
            // Another runner (a restart) the same day sends no one anything twice: the day's runs
            // are done, and a user's occurrence is written once.
            try await JobRunner(runtime: server.runtime).runIfDue()
            let day = String(
                format: "%04d-%02d-%02d", paris.component(.year, from: run), paris.component(.month, from: run),
                paris.component(.day, from: run))
            #expect(
                try await server.runtime.store.timers.sendJobOccurrence(
                    appID: "demo", job: "trial_ending", occurrence: day, userIDs: ["soon", "later"],
                    notification: UUID(), content: Data("{}".utf8),
                    lane: .urgent) == 1)
            try await server.settle()
            #expect(
                Self.titles(server, tokens[0]).count == 1 && Self.titles(server, tokens[2]).count == 1
                    && Self.titles(server, tokens[3]).count == 1)
            #expect(
                server.simulator.state.inbox(for: tokens[1]).isEmpty
                    && server.simulator.state.inbox(for: tokens[4]).isEmpty)
        }
    }
}
