import Foundation
import HeraldCore
import HeraldEngine
import HeraldPayload
import HeraldSimulator
import HeraldStore
import HeraldTesting
import Hummingbird
import HummingbirdTesting
import Testing
import Yams

@Suite("Herald server end to end", .serialized)
struct ServerEndToEndTests {
    @Test("register → send → the simulator's inbox holds aps and the app's payload key")
    func registerAndSend() async throws {
        try await withServer { server in
            let token = makeDeviceTokens(1)[0]
            #expect(try await server.register("phone", user: "alice", token: token) == .created)
            #expect(try await server.register("phone", user: "alice", token: token) == .ok)
            let sent = try await server.send(
                #"{"to":{"user_ids":["alice"]},"alert":{"title":"Hi","body":"There"},"data":{"screen":"inbox","id":7},"thread_id":"t-1","category":"MSG","collapse_id":"c1","badge":2}"#
            )
            #expect(sent.status == .accepted)
            #expect(sent.body["recipients"] as? Int == 1)
            let id = try #require(sent.body["id"] as? String)
            let view = try await server.settled(id)
            #expect((view["counts"] as? [String: Int])?["sent"] == 1)
            let delivery = try #require((view["deliveries"] as? [[String: Any]])?.first)
            #expect(delivery["status"] as? String == "sent")
            #expect(delivery["device_id"] as? String == "phone")
            let entry = try #require(server.simulator.state.inbox(for: token).first)
            #expect(entry.apnsID == delivery["apns_id"] as? String)
            #expect(entry.collapseID == "c1")
            let payload = try #require(entry.payloadObject)
            let aps = try #require(payload["aps"] as? [String: Any])
            #expect((aps["alert"] as? [String: Any])?["title"] as? String == "Hi")
            #expect(aps["thread-id"] as? String == "t-1")
            #expect(aps["category"] as? String == "MSG")
            #expect(aps["badge"] as? Int == 2)
            #expect((payload["demo"] as? [String: Any])?["screen"] as? String == "inbox")
        }
    }

    @Test("fan-out reaches every active device of the user, minus exclusions (K1, L8)")
    func fanOut() async throws {
        try await withServer { server in
            let tokens = makeDeviceTokens(3)
            for (index, token) in tokens.enumerated() {
                #expect(try await server.register("device-\(index)", user: "bob", token: token) == .created)
            }
            let all = try await server.send(#"{"to":{"user_ids":["bob"]},"alert":{"body":"all"}}"#)
            #expect(all.body["recipients"] as? Int == 3)
            _ = try await server.settled(try #require(all.body["id"] as? String))
            let others = try await server.send(
                #"{"to":{"user_ids":["bob"]},"exclude_device_ids":["device-0"],"content_available":true}"#)
            #expect(others.body["recipients"] as? Int == 2)
            _ = try await server.settled(try #require(others.body["id"] as? String))
            #expect(server.simulator.state.inbox(for: tokens[0]).count == 1)
            #expect(server.simulator.state.inbox(for: tokens[1]).count == 2)
            let silent = try #require(server.simulator.state.inbox(for: tokens[2]).last)
            #expect(silent.pushType == "background")
            #expect(silent.priority == 5)
        }
    }

    @Test("a token that moves to another user leaves its old device (K1); logout unregisters")
    func tokenMovesAndLogout() async throws {
        try await withServer { server in
            let token = makeDeviceTokens(1)[0]
            _ = try await server.register("old-phone", user: "carol", token: token)
            _ = try await server.register("new-phone", user: "dave", token: token)
            let carol = try await server.request(.get, "/v1/apps/demo/users/carol/devices")
            #expect((carol.body["devices"] as? [Any])?.isEmpty == true)
            #expect(
                try await server.send(#"{"to":{"user_ids":["carol"]},"alert":{"body":"x"}}"#).body["recipients"] as? Int
                    == 0)
            #expect(
                try await server.send(#"{"to":{"user_ids":["dave"]},"alert":{"body":"x"}}"#).body["recipients"] as? Int
                    == 1)
            // A fresh token replaces the stored one.
            let fresh = makeDeviceTokens(1)[0]
            _ = try await server.register("new-phone", user: "dave", token: fresh)
            let dave = try await server.request(.get, "/v1/apps/demo/users/dave/devices")
            #expect(((dave.body["devices"] as? [[String: Any]])?.first)?["token"] as? String == fresh)
            let logout = try await server.request(
                .delete, "/v1/apps/demo/devices/new-phone", key: ServerHarness.client,
                userToken: ServerHarness.userToken("dave"))
            #expect(logout.status == .noContent)
            #expect(
                try await server.send(#"{"to":{"user_ids":["dave"]},"alert":{"body":"x"}}"#).body["recipients"] as? Int
                    == 0)
        }
    }

    @Test("the same idempotency key returns the first notification and sends nothing new")
    func idempotency() async throws {
        try await withServer { server in
            let token = makeDeviceTokens(1)[0]
            _ = try await server.register("phone", user: "erin", token: token)
            let body = #"{"to":{"user_ids":["erin"]},"alert":{"body":"once"},"idempotency_key":"order-42"}"#
            let first = try await server.send(body)
            let second = try await server.send(body)
            #expect(first.body["id"] as? String == second.body["id"] as? String)
            #expect(first.body["duplicate"] as? Bool == false)
            #expect(second.body["duplicate"] as? Bool == true)
            _ = try await server.settled(try #require(first.body["id"] as? String))
            #expect(server.simulator.state.inbox(for: token).count == 1)
        }
    }

    @Test("a 410 token makes the device inactive with Apple's timestamp; it is skipped until it registers again")
    func deadToken() async throws {
        try await withServer { server in
            let token = makeDeviceTokens(1)[0]
            _ = try await server.register("phone", user: "frank", token: token)
            let when = Date(timeIntervalSince1970: 1_790_000_000)
            server.simulator.state.markDead(token, at: when)
            let first = try await server.send(#"{"to":{"user_ids":["frank"]},"alert":{"body":"x"}}"#)
            let view = try await server.settled(try #require(first.body["id"] as? String))
            let delivery = try #require((view["deliveries"] as? [[String: Any]])?.first)
            #expect(delivery["status"] as? String == "failed")
            #expect(delivery["reason"] as? String == "Unregistered")
            let devices = try await server.request(.get, "/v1/apps/demo/users/frank/devices")
            let device = try #require((devices.body["devices"] as? [[String: Any]])?.first)
            #expect(device["active"] as? Bool == false)
            #expect(device["inactive_reason"] as? String == "Unregistered")
            #expect((device["inactive_since"] as? String)?.hasPrefix("2026-09-21") == true)
            #expect(
                try await server.send(#"{"to":{"user_ids":["frank"]},"alert":{"body":"x"}}"#).body["recipients"] as? Int
                    == 0)
            server.simulator.state.revive(token)
            _ = try await server.register("phone", user: "frank", token: token)
            let again = try await server.send(#"{"to":{"user_ids":["frank"]},"alert":{"body":"back"}}"#)
            #expect(again.body["recipients"] as? Int == 1)
            _ = try await server.settled(try #require(again.body["id"] as? String))
            #expect(server.simulator.state.inbox(for: token).count == 1)
        }
    }

    @Test("auth: 401 without or with a wrong key, 403 for a client key on send, admin reaches every app")
    func authRules() async throws {
        try await withServer { server in
            let body = #"{"to":{"all":true},"alert":{"body":"x"}}"#
            let none = try await server.request(.post, "/v1/apps/demo/notifications", key: nil, json: body)
            #expect(none.status == .unauthorized)
            #expect((none.body["error"] as? [String: String])?["field"] == "authorization")
            #expect(
                try await server.request(.post, "/v1/apps/demo/notifications", key: "wrong-key-0123456789", json: body)
                    .status == .unauthorized)
            #expect(
                try await server.request(.post, "/v1/apps/demo/notifications", key: ServerHarness.client, json: body)
                    .status == .forbidden)
            #expect(
                try await server.request(.get, "/v1/apps/demo/users/x/devices", key: ServerHarness.client).status
                    == .forbidden)
            #expect(
                try await server.request(.post, "/v1/apps/demo/notifications", key: ServerHarness.admin, json: body)
                    .status == .accepted)
            // Another app's server key does not open this one.
            #expect(
                try await server.request(
                    .post, "/v1/apps/demo/notifications", key: "silent-server-key-0123456789", json: body
                ).status == .unauthorized)
            #expect(
                try await server.request(.get, "/v1/apps/nope/users/x/devices", key: ServerHarness.admin).status
                    == .notFound)
            #expect(try await server.request(.get, "/healthz", key: nil).status == .ok)
        }
    }

    @Test("bad input gets a 4xx naming the field, and nothing is stored")
    func validation() async throws {
        try await withServer { server in
            func field(_ response: (status: HTTPResponse.Status, body: [String: Any])) -> String? {
                (response.body["error"] as? [String: String])?["field"]
            }
            let user = ServerHarness.userToken("u")
            let missingToken = try await server.request(
                .post, "/v1/apps/demo/devices", key: ServerHarness.client, userToken: user,
                json: #"{"device_id":"d","user_id":"u"}"#)
            #expect(missingToken.status == .badRequest)
            #expect(field(missingToken) == "token")
            #expect(
                field(
                    try await server.request(
                        .post, "/v1/apps/demo/devices", key: ServerHarness.client, userToken: user,
                        json: #"{"device_id":"d","user_id":"u","token":"xyz"}"#)) == "token")
            #expect(
                field(
                    try await server.request(
                        .post, "/v1/apps/demo/devices", key: ServerHarness.client, userToken: user,
                        json: #"{"device_id":"d","user_id":"u","token":"ab","environment":"moon"}"#)) == "environment")
            #expect(
                field(
                    try await server.request(
                        .post, "/v1/apps/demo/devices", key: ServerHarness.client, userToken: user,
                        json: #"{"device_id":5}"#)) == "device_id")
            #expect(
                field(
                    try await server.request(
                        .post, "/v1/apps/demo/devices", key: ServerHarness.client, userToken: user, json: "{nope"))
                    == "body")
            #expect(field(try await server.send(#"{"alert":{"body":"x"}}"#)) == "to")
            #expect(field(try await server.send(#"{"to":{"all":true,"user_ids":["a"]}}"#)) == "to")
            #expect(field(try await server.send(#"{"to":{"all":true},"push_type":"telepathy"}"#)) == "push_type")
            #expect(field(try await server.send(#"{"to":{"all":true},"priority":7}"#)) == "priority")
            #expect(
                field(try await server.send(#"{"to":{"all":true},"push_type":"background","priority":10}"#))
                    == "priority")
            #expect(
                field(
                    try await server.send(#"{"to":{"all":true},"collapse_id":"\#(String(repeating: "c", count: 65))"}"#)
                ) == "collapse_id")
            #expect(
                field(try await server.send(#"{"to":{"all":true},"interruption_level":"loud"}"#))
                    == "interruption_level")
            #expect(field(try await server.send(#"{"to":{"all":true},"deliver_at":"tomorrow"}"#)) == "deliver_at")
            #expect(field(try await server.send(#"{"to":{"all":true},"data":[1]}"#)) == "data")
            let large = try await server.send(
                #"{"to":{"all":true},"alert":{"body":"\#(String(repeating: "x", count: 5000))"}}"#)
            #expect(large.status == .contentTooLarge)
            #expect(field(large) == "alert.body")
            #expect(try await server.runtime.store.devices.deviceCount(appID: "demo") == 0)
        }
    }

    @Test("import streams JSON lines in batches; a bad line is named with its number")
    func importDevices() async throws {
        try await withServer { server in
            let tokens = makeDeviceTokens(2_500)
            let lines = tokens.enumerated().map {
                #"{"device_id":"d\#($0.offset)","user_id":"u\#($0.offset % 250)","token":"\#($0.element)"}"#
            }
            let imported = try await server.request(
                .post, "/v1/apps/demo/devices/import", json: lines.joined(separator: "\n") + "\n")
            #expect(imported.status == .ok)
            #expect(imported.body["imported"] as? Int == 2_500)
            #expect(try await server.runtime.store.devices.deviceCount(appID: "demo") == 2_500)
            let bad = try await server.request(
                .post, "/v1/apps/demo/devices/import",
                json: lines[0] + "\n\n" + #"{"device_id":"x","user_id":"y","token":"nothex"}"#)
            #expect(bad.status == .badRequest)
            #expect((bad.body["error"] as? [String: String])?["field"] == "line 3: token")
            let all = try await server.send(#"{"to":{"all":true},"alert":{"body":"everyone"}}"#)
            #expect(all.body["recipients"] as? Int == 2_500)
            let view = try await server.settled(try #require(all.body["id"] as? String))
            #expect((view["counts"] as? [String: Int])?["sent"] == 2_500)
            #expect(server.simulator.state.inboxSummary().tokens == 2_500)
        }
    }

    @Test("deliver_at in the future waits in the queue with its time")
    func scheduled() async throws {
        try await withServer { server in
            _ = try await server.register("phone", user: "gina", token: makeDeviceTokens(1)[0])
            // A whole second about 300 days ahead (a year is the most accepted).
            let when = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 + 300 * 86_400).rounded(.down))
            let text = when.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))
            let later = try await server.send(
                #"{"to":{"user_ids":["gina"]},"alert":{"body":"later"},"deliver_at":"\#(text)"}"#)
            let id = try #require(later.body["id"] as? String)
            try await server.settle()
            let view = try await server.request(.get, "/v1/apps/demo/notifications/\(id)").body
            #expect((view["counts"] as? [String: Int])?["queued"] == 1)
            let delivery = try #require((view["deliveries"] as? [[String: Any]])?.first)
            #expect(delivery["until"] as? String == text)
        }
    }

    @Test("metrics and the OpenAPI document are served")
    func metricsAndOpenAPI() async throws {
        try await withServer { server in
            #expect(try await server.client.execute(uri: "/metrics", method: .get).status == .unauthorized)
            #expect(try await server.metricsText().contains("herald_queue_depth"))
            let document = try await server.client.execute(uri: "/openapi.yaml", method: .get)
            let parsed = try #require(try Yams.load(yaml: String(buffer: document.body)) as? [String: Any])
            #expect(parsed["openapi"] as? String == "3.1.0")
            let paths = try #require(parsed["paths"] as? [String: Any])
            #expect(
                Set(paths.keys) == [
                    "/livez", "/readyz", "/healthz", "/dashboard/login", "/dashboard/logout",
                    "/dashboard/apps/{app}/compose",
                    "/metrics", "/openapi.yaml", "/v1/apps/{app}/devices", "/v1/apps/{app}/devices/import",
                    "/v1/apps/{app}/devices/{device_id}", "/v1/apps/{app}/users/{user_id}/devices",
                    "/v1/apps/{app}/notifications", "/v1/apps/{app}/notifications/{id}",
                    "/v1/apps/{app}/users/{user_id}",
                    "/v1/apps/{app}/users/{user_id}/preferences", "/v1/apps/{app}/catalog/categories",
                    "/v1/apps/{app}/webpush/key",
                    "/v1/apps/{app}/catalog/tracks", "/v1/dev/clock",
                    "/v1/apps/{app}/cancel", "/v1/apps/{app}/users/{user_id}/tracks/{track}",
                    "/v1/apps/{app}/users/{user_id}/tracks",
                    "/v1/apps/{app}/events", "/v1/apps/{app}/users/{user_id}/badges",
                    "/v1/apps/{app}/users/{user_id}/sync",
                    "/v1/apps/{app}/tracks/{track}/enrolments", "/v1/apps/{app}/opened", "/v1/apps/{app}/received",
                    "/v1/apps/{app}/analytics", "/v1/apps/{app}/analytics/platforms",
                    "/v1/apps/{app}/devices/{device_id}/activity-tokens/start/{attributes_type}",
                    "/v1/apps/{app}/activities/{activity_id}/tokens/{device_id}", "/v1/apps/{app}/activities",
                    "/v1/apps/{app}/activities/{activity_id}", "/v1/apps/{app}/activities/{activity_id}/update",
                    "/v1/apps/{app}/activities/{activity_id}/end", "/v1/apps/{app}/channels",
                    "/v1/apps/{app}/channels/{channel_id}",
                    "/v1/apps/{app}/actions", "/v1/apps/{app}/audit", "/v1/apps/{app}/webhooks/replay",
                    "/v1/apps/{app}/notifications/{id}/resolve", "/v1/apps/{app}/notifications/{id}/responses",
                    "/v1/apps/{app}/test",
                ])
        }
    }

    @Test("user state and preferences are stored, validated and turn into the policy engine's user")
    func usersAndPreferences() async throws {
        try await withServer { server in
            let put = try await server.request(
                .put, "/v1/apps/demo/users/ines",
                json: #"{"time_zone":"Europe/Paris","locale":"fr-CA","attributes":{"plan":"pro"}}"#)
            #expect(put.status == .ok)
            #expect(put.body["time_zone"] as? String == "Europe/Paris")
            #expect((put.body["attributes"] as? [String: Any])?["plan"] as? String == "pro")
            #expect(try await server.request(.get, "/v1/apps/demo/users/ines").body["locale"] as? String == "fr-CA")
            #expect(try await server.request(.get, "/v1/apps/demo/users/nobody").status == .notFound)
            let badZone = try await server.request(
                .put, "/v1/apps/demo/users/ines", json: #"{"time_zone":"Mars/Olympus"}"#)
            #expect((badZone.body["error"] as? [String: String])?["field"] == "time_zone")
            #expect(
                try await server.request(.put, "/v1/apps/demo/users/ines", key: ServerHarness.client, json: "{}").status
                    == .forbidden)

            let preferences =
                #"{"types":{"PN-01":true,"PN-03":false},"quiet_hours":{"enabled":true,"start":"22:00","end":"09:00"},"vacation":true,"dnd_bypass":{"high":true,"failure":false}}"#
            let stored = try await server.request(.put, "/v1/apps/demo/users/ines/preferences", json: preferences)
            #expect(stored.status == .ok)
            // The answer shows every user-controllable type by name: the user's choice, else the default.
            #expect(
                stored.body["types"] as? [String: Bool] == [
                    "sync_success": true, "sync_error": true, "new_provider": false, "achievement": true,
                ])
            let badTime = try await server.request(
                .put, "/v1/apps/demo/users/ines/preferences", json: #"{"quiet_hours":{"enabled":true,"start":"25:00"}}"#
            )
            #expect((badTime.body["error"] as? [String: String])?["field"] == "quiet_hours.start")
            let badStakes = try await server.request(
                .put, "/v1/apps/demo/users/ines/preferences", json: #"{"dnd_bypass":{"huge":true}}"#)
            #expect((badStakes.body["error"] as? [String: String])?["field"] == "dnd_bypass.huge")
            // The user's time zone and locale survived the preference writes, and vice versa.
            let record = try #require(try await server.runtime.store.users.user(appID: "demo", userID: "ines"))
            #expect(record.timeZone == "Europe/Paris")
            let decoded = try JSONDecoder().decode(UserPreferences.self, from: record.preferences)
            let policyUser = decoded.policyUser(timeZone: record.timeZone, defaultQuietHours: nil)
            #expect(policyUser.timeZone.identifier == "Europe/Paris")
            #expect(policyUser.quietHours == QuietHours(start: LocalTime(hour: 22), end: LocalTime(hour: 9)))
            #expect(policyUser.vacation)
            #expect(policyUser.dndBypass == [.high])
            #expect(policyUser.typeEnabled["PN-01"] == true)
            let empty = try await server.request(.get, "/v1/apps/demo/users/new-user/preferences")
            #expect(empty.status == .ok)
            #expect(
                empty.body["types"] as? [String: Bool] == [
                    "sync_success": false, "sync_error": true, "new_provider": true, "achievement": true,
                ])
            let unknown = try await server.request(
                .put, "/v1/apps/demo/users/ines/preferences", json: #"{"types":{"PN-99":true}}"#)
            #expect((unknown.body["error"] as? [String: String])?["field"] == "types.PN-99")
        }
    }

    @Test("catalog categories and actions are served for the app to register (client key allowed)")
    func categories() async throws {
        try await withServer { server in
            let response = try await server.request(.get, "/v1/apps/demo/catalog/categories", key: ServerHarness.client)
            #expect(response.status == .ok)
            let categories = try #require(response.body["categories"] as? [[String: Any]])
            let error = try #require(categories.first { $0["id"] as? String == "SYNC_ERROR" })
            #expect(error["types"] as? [String] == ["PN-02"])
            #expect((error["actions"] as? [[String: Any]])?.first?["id"] as? String == "FIX")
            #expect(categories.contains { $0["id"] as? String == "BILLING" && ($0["types"] as? [String])?.count == 2 })
            let types = try #require(response.body["types"] as? [[String: Any]])
            let syncError = types.first { $0["id"] as? String == "PN-02" }
            #expect(
                syncError?["type"] as? String == "sync_error" && syncError?["category"] as? String == "SYNC_ERROR"
                    && syncError?["stakes"] as? String == "medium")
            let none = try await server.request(
                .get, "/v1/apps/silent/catalog/categories", key: "silent-server-key-0123456789")
            #expect(none.status == .notFound)
        }
    }
}
