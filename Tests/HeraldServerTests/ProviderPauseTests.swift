import Foundation
import HTTPTypes
import HeraldCore
import HeraldEngine
import HeraldSimulator
import HeraldStore
import HeraldTesting
import HummingbirdTesting
import NIOCore
import Testing

/// A configuration mistake never loses notifications or deactivates a fleet. The
/// simulator plays APNs and FCM refusing the credential or most tokens; the witnesses are the
/// notification's counts, the devices' `active` flags, `/healthz` and `/metrics`.
@Suite("Provider pauses")
struct ProviderPauseTests {
    static func devices(_ server: ServerHarness, user: String) async throws -> [[String: Any]] {
        try #require(
            try await server.request(.get, "/v1/apps/demo/users/\(user)/devices").body["devices"] as? [[String: Any]])
    }

    /// Polls until `check` holds on the notification's view (or 10 s pass).
    static func view(_ server: ServerHarness, _ id: String, until check: ([String: Int]) -> Bool) async throws
        -> [String: Any]
    {
        var last: [String: Any] = [:]
        for _ in 0..<500 {
            last = try await server.request(.get, "/v1/apps/demo/notifications/\(id)").body
            if let counts = last["counts"] as? [String: Int], check(counts) { return last }
            try await Task.sleep(for: .milliseconds(20))
        }
        Issue.record("notification \(id) never got there: \(last)")
        return last
    }

    @Test(
        "a refused APNs credential keeps deliveries queued, pauses with backoff, says so at /healthz and /metrics, and resumes"
    )
    func credentialPause() async throws {
        let clock = ManualClock(Date())
        try await withServer(clock: clock) { server in
            let tokens = makeDeviceTokens(3)
            for (index, token) in tokens.enumerated() {
                #expect(try await server.register("phone\(index)", user: "ana", token: token) == .created)
            }
            server.simulator.state.script(tokens[0], status: 403, reason: "InvalidProviderToken")
            let sent = try await server.send(#"{"to":{"user_ids":["ana"]},"alert":{"body":"held, not lost"}}"#)
            let id = try #require(sent.body["id"] as? String)
            // Whatever reached APNs before the refusal is delivered; the rest waits, nothing fails.
            var view: [String: Any] = [:]
            for _ in 0..<250 {
                view = try await server.request(.get, "/v1/apps/demo/notifications/\(id)").body
                let deliveries = view["deliveries"] as? [[String: Any]] ?? []
                if deliveries.count == 3,
                    deliveries.allSatisfy({
                        $0["status"] as? String == "sent" || $0["reason"] as? String == "ProviderPaused"
                    })
                {
                    break
                }
                try await Task.sleep(for: .milliseconds(20))
            }
            var counts = try #require(view["counts"] as? [String: Int])
            #expect(counts["failed"] == 0)
            #expect(counts["queued", default: 0] >= 1)
            let waiting = try #require(
                (view["deliveries"] as? [[String: Any]])?.filter { $0["status"] as? String != "sent" })
            #expect(
                waiting.allSatisfy {
                    $0["reason"] as? String == "ProviderPaused" && $0["status"] as? String == "queued"
                })
            #expect(try await Self.devices(server, user: "ana").allSatisfy { $0["active"] as? Bool == true })
            let pause = try #require(server.runtime.pauses.all[ProviderKey(app: "demo", platform: "apns")])
            #expect(pause.reason == "InvalidProviderToken")
            #expect(abs(pause.retryAt.timeIntervalSince(clock.now) - 60) < 1)
            // Still 200 (a restart cannot fix a credential); app ids only for the operator's key.
            let anonymous = try await server.request(.get, "/healthz", key: nil)
            #expect(anonymous.status == .ok)
            #expect(anonymous.body.keys.sorted() == ["status"])
            let health = try await server.request(.get, "/healthz", key: ServerHarness.admin)
            let paused = try #require(health.body["providers_paused"] as? [[String: Any]])
            #expect(paused.first?["app"] as? String == "demo")
            #expect(paused.first?["platform"] as? String == "apns")
            #expect(paused.first?["reason"] as? String == "InvalidProviderToken")
            let metrics = try await server.metricsText()
            #expect(
                metrics.contains(#"herald_provider_paused{app="demo",platform="apns",reason="InvalidProviderToken"} 1"#)
            )

            // The try after a minute is refused again: the wait doubles, still nothing failed.
            let before = server.simulator.state.counters.requests
            clock.advance(by: 61)
            server.runtime.wake.signal()
            for _ in 0..<250 where server.runtime.pauses.all.first?.value.failures != 2 {
                try await Task.sleep(for: .milliseconds(20))
            }
            let again = try #require(server.runtime.pauses.all[ProviderKey(app: "demo", platform: "apns")])
            #expect(again.failures == 2)
            #expect(abs(again.retryAt.timeIntervalSince(clock.now) - 120) < 1)
            // A probe is a few requests, not the whole queue.
            #expect(server.simulator.state.counters.requests - before <= ProviderPauses.probeSize)
            counts = try #require(
                try await server.request(.get, "/v1/apps/demo/notifications/\(id)").body["counts"] as? [String: Int])
            #expect(counts["failed"] == 0)

            // Fixed (the key became valid): the next try resumes and everything is delivered once.
            server.simulator.state.removeScript(tokens[0])
            clock.advance(by: 121)
            server.runtime.wake.signal()
            view = try await Self.view(server, id) { $0["sent"] == 3 }
            #expect(server.runtime.pauses.all.isEmpty)
            #expect(tokens.map { server.simulator.state.inbox(for: $0).count } == [1, 1, 1])
            #expect(
                try await server.metricsText().contains(
                    #"herald_provider_paused{app="demo",platform="apns",reason="InvalidProviderToken"} 0"#))
        }
    }

    @Test("more than half of 50+ answers 'BadDeviceToken' pauses instead of deactivating the fleet")
    func massBadDeviceToken() async throws {
        try await withServer { server in
            let tokens = makeDeviceTokens(60)
            let lines = tokens.enumerated().map {
                #"{"device_id":"d\#($0.offset)","user_id":"u\#($0.offset)","token":"\#($0.element)"}"#
            }
            #expect(
                try await server.request(.post, "/v1/apps/demo/devices/import", json: lines.joined(separator: "\n"))
                    .status == .ok)
            for token in tokens.prefix(40) {
                server.simulator.state.script(token, status: 400, reason: "BadDeviceToken")
            }
            let sent = try await server.send(#"{"to":{"all":true},"alert":{"body":"wrong environment?"}}"#)
            let id = try #require(sent.body["id"] as? String)
            let view = try await Self.view(server, id) { $0["sent"] == 20 && $0["queued"] == 40 }
            #expect((view["counts"] as? [String: Int])?["failed"] == 0)
            #expect(try await server.runtime.store.devices.deviceCount(appID: "demo") == 60)
            #expect(try await Self.devices(server, user: "u0").first?["active"] as? Bool == true)
            let pause = try #require(server.runtime.pauses.all[ProviderKey(app: "demo", platform: "apns")])
            #expect(pause.kind == .tokensRejected)
            #expect(pause.reason == "BadDeviceToken")
        }
    }

    @Test("a few BadDeviceToken answers deactivate those devices; herald devices reactivate undoes it")
    func fewBadTokensAndReactivate() async throws {
        try await withServer { server in
            let tokens = makeDeviceTokens(10)
            for (index, token) in tokens.enumerated() {
                #expect(try await server.register("d\(index)", user: "bo", token: token) == .created)
            }
            let started = Date()
            for token in tokens.prefix(3) {
                server.simulator.state.script(token, status: 400, reason: "BadDeviceToken")
            }
            let sent = try await server.send(#"{"to":{"user_ids":["bo"]},"alert":{"body":"hi"}}"#)
            let view = try await server.settled(try #require(sent.body["id"] as? String))
            #expect((view["counts"] as? [String: Int])?["failed"] == 3)
            #expect(server.runtime.pauses.all.isEmpty)
            #expect(try await Self.devices(server, user: "bo").filter { $0["active"] as? Bool == false }.count == 3)

            let url = server.runtime.configuration.databaseURL
            let early = try await runHerald([
                "devices", "reactivate", "--app", "demo", "--reason", "BadDeviceToken", "--since",
                HeraldTime.format(started.addingTimeInterval(3600)), "--database-url", url,
            ])
            #expect(early.status == 0, "\(early.stderr)")
            #expect(early.stdout.contains(#""reactivated":0"#))
            let run = try await runHerald([
                "devices", "reactivate", "--app", "demo", "--reason", "BadDeviceToken", "--since",
                HeraldTime.format(started.addingTimeInterval(-60)), "--database-url", url,
            ])
            #expect(run.status == 0, "\(run.stderr)")
            #expect(run.stdout.contains(#""reactivated":3"#))
            #expect(try await Self.devices(server, user: "bo").allSatisfy { $0["active"] as? Bool == true })
            let bad = try await runHerald([
                "devices", "reactivate", "--app", "demo", "--reason", "X", "--since", "yesterday", "--database-url",
                url,
            ])
            #expect(bad.status != 0)
            #expect(bad.stderr.contains("--since"))
        }
    }

    @Test("FCM: one token's THIRD_PARTY_AUTH_ERROR fails that delivery only; PERMISSION_DENIED pauses FCM, not APNs")
    func fcmScopes() async throws {
        try await withServer { server in
            for (device, token) in [("pix1", "fcm-third-party"), ("pix2", "fcm-fine")] {
                let status = try await server.request(
                    .post, "/v1/apps/demo/devices",
                    json: #"{"device_id":"\#(device)","user_id":"cy","platform":"fcm","token":"\#(token)"}"#
                ).status
                #expect(status == .created)
            }
            #expect(try await server.register("iphone", user: "cy", token: makeDeviceTokens(1)[0]) == .created)
            server.simulator.state.script("fcm-third-party", status: 401, reason: "THIRD_PARTY_AUTH_ERROR")
            let first = try await server.send(#"{"to":{"user_ids":["cy"]},"alert":{"body":"one"}}"#)
            let view = try await server.settled(try #require(first.body["id"] as? String))
            #expect(
                (view["counts"] as? [String: Int]) == [
                    "sent": 2, "failed": 1, "queued": 0, "deferred": 0, "suppressed": 0, "cancelled": 0,
                ])
            #expect(server.runtime.pauses.all.isEmpty)

            server.simulator.state.script("fcm-fine", status: 403, reason: "PERMISSION_DENIED")
            server.simulator.state.removeScript("fcm-third-party")
            let second = try await server.send(#"{"to":{"user_ids":["cy"]},"alert":{"body":"two"}}"#)
            let held = try await Self.view(server, try #require(second.body["id"] as? String)) {
                $0["sent"] == 2 && $0["queued"] == 1
            }
            #expect((held["counts"] as? [String: Int])?["failed"] == 0)
            #expect(server.runtime.pauses.all.keys.map(\.platform) == ["fcm"])
        }
    }
}

extension ServerHarness {
    /// `/metrics` as the admin reads it.
    func metricsText() async throws -> String {
        let response = try await client.execute(
            uri: "/metrics", method: .get, headers: [.authorization: "Bearer \(ServerHarness.admin)"], body: nil)
        return String(buffer: response.body)
    }
}

/// Runs the built `herald` executable to the end.
func runHerald(_ arguments: [String]) async throws -> (status: Int32, stdout: String, stderr: String) {
    try await runProcess(heraldExecutable, arguments)
}
