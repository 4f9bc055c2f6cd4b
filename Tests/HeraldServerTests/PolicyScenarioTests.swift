import Foundation
import HTTPTypes
import HeraldCore
import HeraldEngine
import HeraldSimulator
import HeraldTesting
import Testing

/// The policy engine's scenarios, replayed over HTTP against a live server, the simulator and a temp SQLite
/// file, with a manual clock for the store, API and policy engine. What the tests assert is what
/// the simulator's inbox received: what actually went over the wire.
@Suite("Policy scenarios (SyncWell, Lucid, Cocotte)")
struct PolicyScenarioTests {
    static func date(_ text: String) -> Date { ISO8601DateFormatter().date(from: text)! }

    @Test("SyncWell: at 23:00 in Paris PN-02 goes now and PN-03 at 09:00, PN-01 only once enabled, in French")
    func syncWell() async throws {
        let clock = ManualClock(Self.date("2026-11-22T22:00:00Z"))  // 23:00 in Paris
        try await withServer(catalog: "syncwell.yaml", clock: clock) { server in
            let token = makeDeviceTokens(1)[0]
            #expect(try await server.register("phone", user: "ana", token: token, locale: "fr-FR") == .created)
            #expect(
                try await server.request(.put, "/v1/apps/demo/users/ana", json: #"{"time_zone":"Europe/Paris"}"#).status
                    == .ok)

            // PN-02 is transactional: it goes during quiet hours, in French (fr-FR → fr).
            let error = try await server.send(
                #"{"to":{"user_ids":["ana"]},"type":"PN-02","data":{"Source":"Strava","source_id":"strava"}}"#)
            #expect(error.status == .accepted)
            let errorView = try await server.settled(try #require(error.body["id"] as? String))
            #expect((errorView["counts"] as? [String: Int])?["sent"] == 1)
            let first = try #require(server.simulator.state.inbox(for: token).first)
            let firstPayload = try #require(first.payloadObject)
            let firstAPS = try #require(firstPayload["aps"] as? [String: Any])
            let firstAlert = try #require(firstAPS["alert"] as? [String: Any])
            #expect(firstAlert["title"] as? String == "SyncWell : action requise")
            #expect(
                firstAlert["body"] as? String
                    == "Votre connexion à Strava rencontre un problème. Touchez pour corriger.")
            #expect(firstAPS["category"] as? String == "SYNC_ERROR")
            #expect(firstAPS["sound"] as? String == "default")
            #expect(first.collapseID == "sync-error-strava")
            let custom = try #require(firstPayload["demo"] as? [String: Any])
            #expect(custom["deep_link"] as? String == "syncwell://connection/strava")
            #expect(custom["type"] as? String == "sync_error")
            #expect(custom["Source"] as? String == "Strava")

            // PN-03 is not: deferred to 09:00 Paris time, with the reason in the trace.
            let provider = try await server.send(
                #"{"to":{"user_ids":["ana"]},"type":"new_provider","data":{"New Provider":"Oura","provider_id":"oura"}}"#
            )
            let providerID = try #require(provider.body["id"] as? String)
            let providerView = try await server.settled(providerID)
            #expect((providerView["counts"] as? [String: Int])?["deferred"] == 1)
            let deferred = try #require((providerView["deliveries"] as? [[String: Any]])?.first)
            #expect(deferred["status"] as? String == "deferred")
            #expect(deferred["reason"] as? String == "quiet_hours")
            #expect(deferred["until"] as? String == "2026-11-23T08:00:00.000Z")
            let trace = try #require(deferred["trace"] as? [[String: Any]])
            #expect(
                trace.first?["message"] as? String == "deferred: quiet hours until 2026-11-23T09:00+01:00 Europe/Paris")

            // PN-01 is off by default: suppressed, never sent.
            let syncOff = try await server.send(
                #"{"to":{"user_ids":["ana"]},"type":"PN-01","data":{"Source":"Garmin","source_id":"garmin"}}"#)
            let syncOffView = try await server.settled(try #require(syncOff.body["id"] as? String))
            #expect((syncOffView["counts"] as? [String: Int])?["suppressed"] == 1)
            let suppressed = try #require((syncOffView["deliveries"] as? [[String: Any]])?.first)
            #expect(suppressed["reason"] as? String == "preference")
            #expect(server.simulator.state.inbox(for: token).count == 1)

            // The preferences show the catalog defaults; the user turns PN-01 on.
            let before = try await server.request(.get, "/v1/apps/demo/users/ana/preferences")
            #expect((before.body["types"] as? [String: Bool])?["sync_success"] == false)
            #expect((before.body["types"] as? [String: Bool])?["subscription_renewal"] == nil)
            let enabled = try await server.request(
                .put, "/v1/apps/demo/users/ana/preferences", json: #"{"types":{"PN-01":true}}"#)
            #expect(enabled.status == .ok)
            #expect((enabled.body["types"] as? [String: Bool])?["sync_success"] == true)
            let refused = try await server.request(
                .put, "/v1/apps/demo/users/ana/preferences", json: #"{"types":{"PN-04":false}}"#)
            #expect(refused.status == .badRequest)
            #expect(((refused.body["error"] as? [String: Any])?["field"] as? String) == "types.PN-04")

            // 09:00 in Paris: the deferred PN-03 goes out, in French; PN-01 now goes too.
            clock.set(Self.date("2026-11-23T08:00:01Z"))
            server.runtime.wake.signal()
            try await eventually { server.simulator.state.inbox(for: token).count == 2 }
            let second = try #require(server.simulator.state.inbox(for: token).last?.payloadObject)
            let secondAlert = (second["aps"] as? [String: Any])?["alert"] as? [String: Any]
            #expect(secondAlert?["title"] as? String == "Nouvelle intégration !")
            #expect((second["demo"] as? [String: Any])?["deep_link"] as? String == "syncwell://connect/oura")
            let providerAfter = try await server.settled(providerID)
            #expect((providerAfter["counts"] as? [String: Int])?["sent"] == 1)
            #expect((providerAfter["counts"] as? [String: Int])?["deferred"] == 0)

            let syncOn = try await server.send(
                #"{"to":{"user_ids":["ana"]},"type":"PN-01","data":{"Source":"Garmin","source_id":"garmin"}}"#)
            _ = try await server.settled(try #require(syncOn.body["id"] as? String))
            let third = try #require(server.simulator.state.inbox(for: token).last?.payloadObject)
            let thirdAlert = (third["aps"] as? [String: Any])?["alert"] as? [String: Any]
            #expect(thirdAlert?["title"] as? String == "Synchronisation terminée")
            #expect(thirdAlert?["body"] as? String == "Vos données Garmin ont bien été synchronisées.")
            #expect(server.simulator.state.inbox(for: token).count == 3)

            // An English device with missing data gets the deterministic fallback body.
            let other = makeDeviceTokens(2)[1]
            #expect(try await server.register("laptop", user: "bo", token: other, locale: "en-GB") == .created)
            let fallback = try await server.send(#"{"to":{"user_ids":["bo"]},"type":"PN-02","data":{}}"#)
            _ = try await server.settled(try #require(fallback.body["id"] as? String))
            let fallbackAlert =
                (server.simulator.state.inbox(for: other).first?.payloadObject?["aps"] as? [String: Any])?["alert"]
                as? [String: Any]
            #expect(fallbackAlert?["body"] as? String == "One of your connections has an issue. Tap to fix.")
        }
    }

    @Test("Lucid: 12 thoughts in an hour give 5 now and the rest later, all delivered; thread ids per entry")
    func lucid() async throws {
        let clock = ManualClock(Self.date("2026-11-22T10:00:00Z"))
        try await withServer(catalog: "lucid.yaml", payloadKey: nil, clock: clock) { server in
            let tokens = makeDeviceTokens(3)
            // Two devices of one user: pacing counts notifications per user, not per device.
            #expect(try await server.register("iphone", user: "matt", token: tokens[0]) == .created)
            #expect(try await server.register("ipad", user: "matt", token: tokens[1]) == .created)
            var ids: [String] = []
            for index in 0..<12 {
                let sent = try await server.send(
                    #"{"to":{"user_ids":["matt"]},"type":"thought_notification","data":{"text":"Thought \#(index)","notificationId":"n\#(index)"}}"#
                )
                #expect(sent.status == .accepted)
                ids.append(try #require(sent.body["id"] as? String))
            }
            for id in ids { _ = try await server.settled(id) }
            @Sendable func bodies(_ token: String) -> [String] {
                server.simulator.state.inbox(for: token).compactMap {
                    (($0.payloadObject?["aps"] as? [String: Any])?["alert"] as? [String: Any])?["body"] as? String
                }
            }
            #expect(bodies(tokens[0]) == (0..<5).map { "Thought \($0)" })
            #expect(bodies(tokens[1]) == (0..<5).map { "Thought \($0)" })
            let paced = try await server.request(.get, "/v1/apps/demo/notifications/\(ids[5])")
            #expect((paced.body["counts"] as? [String: Int])?["deferred"] == 2)
            let pacedDelivery = try #require((paced.body["deliveries"] as? [[String: Any]])?.first)
            #expect(pacedDelivery["reason"] as? String == "pacing")
            #expect(pacedDelivery["until"] as? String == "2026-11-22T11:00:00.000Z")

            clock.advance(by: 3601)
            server.runtime.wake.signal()
            try await eventually { bodies(tokens[0]).count == 10 && bodies(tokens[1]).count == 10 }
            try await server.settle()
            #expect(bodies(tokens[0]).count == 10)  // still at most 5 in the rolling hour
            clock.advance(by: 3601)
            server.runtime.wake.signal()
            try await eventually { bodies(tokens[0]).count == 12 && bodies(tokens[1]).count == 12 }
            #expect(bodies(tokens[0]) == (0..<12).map { "Thought \($0)" })
            let entry = try #require(server.simulator.state.inbox(for: tokens[0]).first?.payloadObject)
            #expect((entry["aps"] as? [String: Any])?["thread-id"] as? String == "thoughts")
            #expect((entry["aps"] as? [String: Any])?["category"] as? String == "LUCID_THOUGHT")
            #expect((entry["aps"] as? [String: Any])?["mutable-content"] as? Int == 1)
            #expect((entry["lucid"] as? [String: Any])?["type"] as? String == "thought_notification")
            #expect((entry["lucid"] as? [String: Any])?["deep_link"] as? String == "lucid://thoughts/n0")
            for id in ids {
                let view = try await server.settled(id)
                #expect((view["counts"] as? [String: Int])?["sent"] == 2)
            }

            // Comments on one Library entry share a thread; another entry has its own.
            #expect(try await server.register("other", user: "sam", token: tokens[2]) == .created)
            for (entry, comment) in [("e1", "c1"), ("e2", "c2"), ("e1", "c3")] {
                let sent = try await server.send(
                    #"{"to":{"user_ids":["sam"]},"type":"library_comment","data":{"comment":"Nice","entryId":"\#(entry)","commentId":"\#(comment)"}}"#
                )
                _ = try await server.settled(try #require(sent.body["id"] as? String))
            }
            let threads = server.simulator.state.inbox(for: tokens[2]).map {
                ($0.payloadObject?["aps"] as? [String: Any])?["thread-id"] as? String
            }
            #expect(threads == ["library-e1", "library-e2", "library-e1"])
            let link = (server.simulator.state.inbox(for: tokens[2]).last?.payloadObject?["lucid"] as? [String: Any])?[
                "deep_link"]
            #expect(link as? String == "lucid://library/e1/comments/c3")
        }
    }

    @Test("Cocotte: vacation, DND bypass only when allowed, opaque PII, the 5th in an hour grouped")
    func cocotte() async throws {
        let clock = ManualClock(Self.date("2026-11-22T15:00:00Z"))
        try await withServer(catalog: "cocotte.yaml", payloadKey: nil, clock: clock) { server in
            let token = makeDeviceTokens(1)[0]
            #expect(try await server.register("iphone", user: "quinn", token: token) == .created)
            #expect(
                try await server.request(.put, "/v1/apps/demo/users/quinn", json: #"{"time_zone":"America/New_York"}"#)
                    .status == .ok)
            func send(_ type: String, _ data: String) async throws -> [String: Any] {
                let sent = try await server.send(#"{"to":{"user_ids":["quinn"]},"type":"\#(type)","data":\#(data)}"#)
                #expect(sent.status == .accepted)
                return try await server.settled(try #require(sent.body["id"] as? String))
            }
            func last() -> [String: Any] { server.simulator.state.inbox(for: token).last?.payloadObject ?? [:] }
            func aps(_ payload: [String: Any]) -> [String: Any] { payload["aps"] as? [String: Any] ?? [:] }
            func alert(_ payload: [String: Any]) -> [String: Any] { aps(payload)["alert"] as? [String: Any] ?? [:] }
            let approval =
                #"{"recommendation":"Approve PPV pricing","reason":"Buyer matches paid-tier signals.","confidence":"0.82","card_id":"k1"}"#

            // Vacation: low and medium suppressed; high and failure go.
            #expect(
                try await server.request(.put, "/v1/apps/demo/users/quinn/preferences", json: #"{"vacation":true}"#)
                    .status == .ok)
            let digest = try await send("digest", #"{"summary":"Bumped Tryst 6×."}"#)
            #expect((digest["counts"] as? [String: Int])?["suppressed"] == 1)
            #expect(((digest["deliveries"] as? [[String: Any]])?.first?["reason"]) as? String == "vacation")
            let engagement = try await send(
                "engagement", #"{"headline":"OF: likely PPV buyer","draft":"Hi!","card_id":"k0"}"#)
            #expect((engagement["counts"] as? [String: Int])?["suppressed"] == 1)
            #expect(
                try await send("approval", approval)["counts"] as? [String: Int] == [
                    "queued": 0, "sent": 1, "failed": 0, "deferred": 0, "suppressed": 0, "cancelled": 0,
                ])
            #expect(alert(last())["title"] as? String == "Approve PPV pricing")
            let failure = try await send(
                "failure", #"{"headline":"Tryst stopped accepting bumps","detail":"2 retries failed.","card_id":"k2"}"#)
            #expect((failure["counts"] as? [String: Int])?["sent"] == 1)
            #expect(server.simulator.state.inbox(for: token).count == 2)

            // DND: time-sensitive only when the user allowed high stakes through.
            #expect(
                try await server.request(.put, "/v1/apps/demo/users/quinn/preferences", json: #"{"vacation":false}"#)
                    .status == .ok)
            let notAllowed = try await send("approval", approval)
            #expect(aps(last())["interruption-level"] as? String == "active")
            let dndTrace = (notAllowed["deliveries"] as? [[String: Any]])?.first?["trace"] as? [[String: Any]]
            #expect(dndTrace?.first?["rule"] as? String == "dnd")

            // PII: an e-mail address in the body makes title and body the type's opaque text.
            #expect(
                try await server.request(
                    .put, "/v1/apps/demo/users/quinn/preferences", json: #"{"dnd_bypass":{"high":true}}"#
                ).status == .ok)
            let leaky =
                #"{"recommendation":"Reply to a new sub","reason":"Write to jane.doe@example.com today.","confidence":"0.7","card_id":"k3"}"#
            let pii = try await send("approval", leaky)
            #expect(aps(last())["interruption-level"] as? String == "time-sensitive")
            #expect(alert(last())["title"] as? String == "New approval waiting · open to view")
            #expect(alert(last())["body"] as? String == "Open Cocotte to review it.")
            #expect(
                !String(decoding: server.simulator.state.inbox(for: token).last!.payload, as: UTF8.self).contains(
                    "jane.doe"))
            let piiTrace = (pii["deliveries"] as? [[String: Any]])?.first?["trace"] as? [[String: Any]]
            #expect(piiTrace?.contains { $0["rule"] as? String == "pii" } == true)
            #expect(aps(last())["thread-id"] as? String == "card-k3")

            // The 5th notification in the hour carries the group thread and summary.
            _ = try await send("digest", #"{"summary":"3 OF DMs queued."}"#)
            #expect(server.simulator.state.inbox(for: token).count == 5)
            #expect(aps(last())["thread-id"] as? String == "cocotte-updates")
            #expect((last()["cocotte"] as? [String: Any])?["group_summary"] as? String == "Cocotte · 5 updates")
            // An hour later the window is empty again: no grouping.
            clock.advance(by: 3601)
            _ = try await send("digest", #"{"summary":"Quiet night."}"#)
            #expect(aps(last())["thread-id"] as? String == "digest")
            #expect((last()["cocotte"] as? [String: Any])?["group_summary"] == nil)
        }
    }

    @Test("send by type: explicit fields override the type; bad types and reserved data keys are named")
    func typedRequests() async throws {
        try await withServer { server in
            let token = makeDeviceTokens(1)[0]
            #expect(try await server.register("phone", user: "ana", token: token) == .created)
            let overridden = try await server.send(
                #"{"to":{"user_ids":["ana"]},"type":"PN-02","data":{"Source":"Oura","source_id":"oura"},"alert":{"title":"Custom"},"thread_id":"mine","category":"OTHER"}"#
            )
            _ = try await server.settled(try #require(overridden.body["id"] as? String))
            let payload = try #require(server.simulator.state.inbox(for: token).first?.payloadObject)
            let aps = try #require(payload["aps"] as? [String: Any])
            #expect((aps["alert"] as? [String: Any])?["title"] as? String == "Custom")
            #expect(
                (aps["alert"] as? [String: Any])?["body"] as? String
                    == "Your connection to Oura has an issue. Tap to fix.")
            #expect(aps["thread-id"] as? String == "mine")
            #expect(aps["category"] as? String == "OTHER")

            func field(_ json: String, app: String = "demo", key: String = ServerHarness.server) async throws -> String?
            {
                let response = try await server.request(.post, "/v1/apps/\(app)/notifications", key: key, json: json)
                #expect(response.status == .badRequest)
                return (response.body["error"] as? [String: Any])?["field"] as? String
            }
            #expect(try await field(#"{"to":{"all":true},"type":"PN-99"}"#) == "type")
            #expect(try await field(#"{"to":{"all":true},"type":"PN-02","data":{"type":"x"}}"#) == "data.type")
            #expect(
                try await field(#"{"to":{"all":true},"type":"PN-02","data":{"deep_link":"x"}}"#) == "data.deep_link")
            #expect(
                try await field(
                    #"{"to":{"all":true},"type":"PN-02"}"#, app: "silent", key: "silent-server-key-0123456789")
                    == "type")
            let huge = String(repeating: "x", count: 5000)
            let tooLarge = try await server.send(#"{"to":{"all":true},"type":"PN-02","data":{"note":"\#(huge)"}}"#)
            #expect(tooLarge.status == .contentTooLarge)
            #expect(((tooLarge.body["error"] as? [String: Any])?["field"]) as? String == "data")
            // The type's collapse id template, filled in, must still fit 64 bytes.
            #expect(
                try await field(#"{"to":{"all":true},"type":"PN-02","data":{"source_id":"\#(huge.prefix(80))"}}"#)
                    == "data")

            // A long body is shortened to fit 4096 bytes, at a character boundary, with "…".
            let long = String(repeating: "é", count: 3000)
            let shortened = try await server.send(
                #"{"to":{"user_ids":["ana"]},"type":"PN-02","alert":{"body":"\#(long)"}}"#)
            #expect(shortened.status == .accepted)
            let view = try await server.settled(try #require(shortened.body["id"] as? String))
            let trace = (view["deliveries"] as? [[String: Any]])?.first?["trace"] as? [[String: Any]]
            #expect(trace?.first?["rule"] as? String == "size")
            let entry = try #require(server.simulator.state.inbox(for: token).last)
            #expect(entry.payload.count <= 4096)
            let body =
                (((entry.payloadObject?["aps"] as? [String: Any])?["alert"]) as? [String: Any])?["body"] as? String
            #expect(body?.hasSuffix("…") == true)
            #expect(body?.dropLast().allSatisfy { $0 == "é" } == true)
        }
    }
}

/// Polls `condition` for up to 10 s.
func eventually(_ condition: @Sendable () async throws -> Bool) async throws {
    for _ in 0..<500 {
        if try await condition() { return }
        try await Task.sleep(for: .milliseconds(20))
    }
    Issue.record("condition not met within 10 s")
}

@Suite("FCM through the server")
struct ServerFCMTests {
    @Test(
        "a user with an iPhone and an Android phone receives one send on both; an alert without a collapse id collapses on its notification's id; dead FCM tokens deactivate the device"
    )
    func mixedUser() async throws {
        try await withServer { server in
            let apnsToken = makeDeviceTokens(1)[0]
            #expect(try await server.register("iphone", user: "ana", token: apnsToken) == .created)
            let android = try await server.request(
                .post, "/v1/apps/demo/devices", key: ServerHarness.client, userToken: ServerHarness.userToken("ana"),
                json: #"{"device_id":"pixel","user_id":"ana","platform":"fcm","token":"fcm:Pixel-Token_1"}"#)
            #expect(android.status == .created)
            let sent = try await server.send(
                #"{"to":{"user_ids":["ana"]},"type":"PN-02","data":{"Source":"Strava","source_id":"strava","retries":2}}"#
            )
            let view = try await server.settled(try #require(sent.body["id"] as? String))
            #expect((view["counts"] as? [String: Int])?["sent"] == 2)
            #expect(server.simulator.state.inbox(for: apnsToken).count == 1)
            let entry = try #require(server.simulator.state.inbox(for: "fcm:Pixel-Token_1").first)
            #expect(entry.pushType == "fcm")
            let message = try #require(entry.payloadObject?["message"] as? [String: Any])
            #expect(message["token"] as? String == "fcm:Pixel-Token_1")
            #expect((message["notification"] as? [String: Any])?["title"] as? String == "SyncWell Action Required")
            let data = try #require(message["data"] as? [String: String])
            #expect(data["retries"] == "2")
            #expect(data["deep_link"] == "syncwell://connection/strava")
            #expect(data["type"] == "sync_error")
            #expect((message["fcm_options"] as? [String: Any])?["analytics_label"] as? String == "sync_error")
            #expect((message["android"] as? [String: Any])?["collapse_key"] as? String == "sync-error-strava")
            // The type's Android channel (PN-02: sync_errors; the app's default is sync_updates).
            let androidNotification = (message["android"] as? [String: Any])?["notification"] as? [String: Any]
            #expect(androidNotification?["channel_id"] as? String == "sync_errors")

            // A type without a channel uses the app's (PN-04 is transactional: no quiet hours).
            let renewal = try await server.send(#"{"to":{"device_ids":["pixel"]},"type":"PN-04"}"#)
            _ = try await server.settled(try #require(renewal.body["id"] as? String))
            let renewalMessage = try #require(
                server.simulator.state.inbox(for: "fcm:Pixel-Token_1").last?.payloadObject?["message"] as? [String: Any]
            )
            #expect(
                ((renewalMessage["android"] as? [String: Any])?["notification"] as? [String: Any])?["channel_id"]
                    as? String == "sync_updates")
            // A raw send may name the channel and an image; bad ones are refused by field.
            let imaged = try await server.send(
                #"{"to":{"device_ids":["pixel"]},"alert":{"title":"Look","body":"New chart"},"android":{"channel_id":"charts","image":"https://example.com/chart.png"}}"#
            )
            _ = try await server.settled(try #require(imaged.body["id"] as? String))
            let chart = try #require(
                server.simulator.state.inbox(for: "fcm:Pixel-Token_1").last?.payloadObject?["message"] as? [String: Any]
            )
            #expect((chart["notification"] as? [String: Any])?["image"] as? String == "https://example.com/chart.png")
            #expect(
                ((chart["android"] as? [String: Any])?["notification"] as? [String: Any])?["channel_id"] as? String
                    == "charts")
            // An alert without a collapse id of its own is tagged with its notification's id (a
            // resend replaces it on the phone), with no collapse_key; on APNs, apns-collapse-id.
            let imagedID = try #require(imaged.body["id"] as? String)
            #expect(
                ((chart["android"] as? [String: Any])?["notification"] as? [String: Any])?["tag"] as? String
                    == imagedID)
            #expect((chart["android"] as? [String: Any])?["collapse_key"] == nil)
            let plain = try await server.send(#"{"to":{"device_ids":["iphone"]},"alert":{"body":"Plain"}}"#)
            let plainID = try #require(plain.body["id"] as? String)
            _ = try await server.settled(plainID)
            #expect(server.simulator.state.inbox(for: apnsToken).last?.collapseID == plainID)
            for (json, field) in [
                (
                    #"{"to":{"user_ids":["ana"]},"alert":{"body":"x"},"android":{"image":"ftp://example.com/a.png"}}"#,
                    "android.image"
                ),
                (
                    #"{"to":{"user_ids":["ana"]},"alert":{"body":"x"},"android":{"channel_id":""}}"#,
                    "android.channel_id"
                ),
            ] {
                let refused = try await server.send(json)
                #expect(refused.status == .badRequest)
                #expect(((refused.body["error"] as? [String: Any])?["field"]) as? String == field)
            }

            // FCM says UNREGISTERED: the delivery fails and the device stops receiving.
            server.simulator.state.markDead("fcm:Pixel-Token_1")
            let second = try await server.send(#"{"to":{"user_ids":["ana"]},"alert":{"body":"again"}}"#)
            let secondView = try await server.settled(try #require(second.body["id"] as? String))
            let failed = (secondView["deliveries"] as? [[String: Any]])?.first { $0["device_id"] as? String == "pixel" }
            #expect(failed?["status"] as? String == "failed")
            #expect(failed?["reason"] as? String == "UNREGISTERED")
            let devices = try await server.request(.get, "/v1/apps/demo/users/ana/devices")
            let pixel = (devices.body["devices"] as? [[String: Any]])?.first { $0["device_id"] as? String == "pixel" }
            #expect(pixel?["active"] as? Bool == false)
            // FCM's reserved data keys are refused at the API.
            let reserved = try await server.send(#"{"to":{"user_ids":["ana"]},"data":{"google.sent":"x"}}"#)
            #expect(reserved.status == .badRequest)
            #expect(((reserved.body["error"] as? [String: Any])?["field"]) as? String == "data.google.sent")
        }
    }

    @Test(
        "INVALID_ARGUMENT fails the delivery; it drops the token only when the same notification went through for another token"
    )
    func invalidArgument() async throws {
        try await withServer { server in
            for (device, token) in [("pixel-a", "fcm-token-good"), ("pixel-b", "fcm-token-bad")] {
                let registered = try await server.request(
                    .post, "/v1/apps/demo/devices", key: ServerHarness.client, userToken: ServerHarness.userToken("bo"),
                    json: #"{"device_id":"\#(device)","user_id":"bo","platform":"fcm","token":"\#(token)"}"#)
                #expect(registered.status == .created)
            }
            let solo = try await server.request(
                .post, "/v1/apps/demo/devices", key: ServerHarness.client, userToken: ServerHarness.userToken("cy"),
                json: #"{"device_id":"pixel-c","user_id":"cy","platform":"fcm","token":"fcm-token-alone"}"#)
            #expect(solo.status == .created)
            server.simulator.state.script("fcm-token-bad", status: 400, reason: "INVALID_ARGUMENT")
            server.simulator.state.script("fcm-token-alone", status: 400, reason: "INVALID_ARGUMENT")

            func devices(_ user: String) async throws -> [String: Bool] {
                let answer = try await server.request(.get, "/v1/apps/demo/users/\(user)/devices")
                var result: [String: Bool] = [:]
                for device in answer.body["devices"] as? [[String: Any]] ?? [] {
                    result[device["device_id"] as? String ?? ""] = device["active"] as? Bool
                }
                return result
            }
            // Accepted for pixel-a, refused for pixel-b: the payload is good, pixel-b's token is not.
            let both = try await server.send(#"{"to":{"user_ids":["bo"]},"alert":{"body":"hi"}}"#)
            let bothView = try await server.settled(try #require(both.body["id"] as? String))
            let refused = (bothView["deliveries"] as? [[String: Any]])?.first {
                $0["device_id"] as? String == "pixel-b"
            }
            #expect(refused?["status"] as? String == "failed")
            #expect(refused?["reason"] as? String == "INVALID_ARGUMENT")
            #expect(try await devices("bo") == ["pixel-a": true, "pixel-b": false])
            // Refused with nothing to compare against: the delivery fails, the device stays.
            let alone = try await server.send(#"{"to":{"user_ids":["cy"]},"alert":{"body":"hi"}}"#)
            let aloneView = try await server.settled(try #require(alone.body["id"] as? String))
            #expect((aloneView["deliveries"] as? [[String: Any]])?.first?["reason"] as? String == "INVALID_ARGUMENT")
            #expect(try await devices("cy") == ["pixel-c": true])
        }
    }
}
