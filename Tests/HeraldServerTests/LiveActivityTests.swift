import Foundation
import HTTPTypes
import HeraldEngine
import HeraldSimulator
import HeraldStore
import HeraldTesting
import Testing

/// Live Activities end to end: tokens reported by devices, a start by push-to-start, updates
/// within the priority budget, a rotated and a dead update token, an end; the simulator plays
/// each device's ActivityKit and is the witness of what every device holds.
@Suite("Live Activities")
struct LiveActivityTests {
    /// A device's client-key call with its user's token.
    static func put(_ server: ServerHarness, _ path: String, user: String, _ json: String) async throws -> (
        status: HTTPResponse.Status, body: [String: Any]
    ) {
        try await server.request(
            .put, path, key: ServerHarness.client,
            userToken: ServerHarness.userToken(user, now: server.runtime.store.now), json: json)
    }

    @Test(
        "an order's activity: started on 3 devices by push-to-start, 5 updates (priorities within the budget, one alert), a rotated token, a 410 that ends one device's activity and not its device, an end with a dismissal date; every device holds what Herald sent, and no stale timestamp leaves Herald"
    )
    func orderActivity() async throws {
        let tokens = makeDeviceTokens(8)
        try await withServer(app: { $0.liveActivities.priorityPushesPerHour = 2 }) { server in
            let devices = [("ana-phone", "ana"), ("ana-pad", "ana"), ("bo-phone", "bo"), ("cy-phone", "cy")]
            for (index, (device, user)) in devices.enumerated() {
                #expect(try await server.register(device, user: user, token: tokens[index]) == .created)
            }
            // Three devices report a push-to-start token for the widget's attributes; cy's does not.
            for (index, (device, user)) in devices.prefix(3).enumerated() {
                let stored = try await Self.put(
                    server, "/v1/apps/demo/devices/\(device)/activity-tokens/start/DeliveryAttributes", user: user,
                    #"{"token":"\#(tokens[4 + index])"}"#)
                #expect(stored.status == .ok, "\(stored.body)")
            }
            // Another user's device, an unknown device, a bad token: refused.
            #expect(
                try await Self.put(
                    server, "/v1/apps/demo/devices/ana-phone/activity-tokens/start/DeliveryAttributes", user: "bo",
                    #"{"token":"\#(tokens[7])"}"#
                ).status == .forbidden)
            #expect(
                try await Self.put(
                    server, "/v1/apps/demo/devices/nobody/activity-tokens/start/DeliveryAttributes", user: "ana",
                    #"{"token":"\#(tokens[7])"}"#
                ).status == .notFound)
            let badToken = try await Self.put(
                server, "/v1/apps/demo/devices/ana-phone/activity-tokens/start/DeliveryAttributes", user: "ana",
                #"{"token":"not hex"}"#)
            #expect(badToken.status == .badRequest && Self.field(badToken.body) == "token")

            let start = try await server.request(
                .post, "/v1/apps/demo/activities",
                json: """
                    {"activity_id":"order-42","attributes_type":"DeliveryAttributes","attributes":{"order":"42"},
                     "content_state":{"eta":20,"stage":"preparing"},"to":{"user_ids":["ana","bo","cy"]},
                     "alert":{"title":"Order 42","body":"Preparing"}}
                    """)
            #expect(start.status == .created, "\(start.body)")
            let started = try #require(start.body["devices"] as? [[String: Any]])
            #expect(
                started.map { "\($0["device_id"]!):\($0["status"]!)" } == [
                    "ana-pad:sent", "ana-phone:sent", "bo-phone:sent", "cy-phone:skipped",
                ])
            #expect(started.last?["reason"] as? String == "NoPushToStartToken")
            let again = try await server.request(
                .post, "/v1/apps/demo/activities",
                json:
                    #"{"activity_id":"order-42","attributes_type":"DeliveryAttributes","content_state":{},"to":{"user_ids":["ana"]},"alert":{"title":"x"}}"#
            )
            #expect(again.status == .conflict && Self.field(again.body) == "activity_id")

            // Each device made the activity and issued an update token, which the app reports.
            let activities = server.simulator.state.activities
            var updateTokens: [String: String] = [:]
            for (index, (device, user)) in devices.prefix(3).enumerated() {
                let made = activities.activities(startToken: tokens[4 + index])
                #expect(made.count == 1 && made.first?.attributesType == "DeliveryAttributes")
                let token = try #require(made.first?.updateToken)
                updateTokens[device] = token
                let reported = try await Self.put(
                    server, "/v1/apps/demo/activities/order-42/tokens/\(device)", user: user, #"{"token":"\#(token)"}"#)
                #expect(reported.status == .ok, "\(reported.body)")
            }

            func update(_ json: String, _ event: String = "update") async throws -> [String: Any] {
                let answer = try await server.request(.post, "/v1/apps/demo/activities/order-42/\(event)", json: json)
                #expect(answer.status == .ok, "\(json): \(answer.body)")
                return answer.body
            }
            func priorities(_ body: [String: Any]) -> [String] {
                ((body["devices"] as? [[String: Any]]) ?? []).map { "\($0["device_id"]!):\($0["priority"]!)" }
            }
            // 1: routine, priority 5. 2: priority 10 asked. 3: an alert (10, the budget's second).
            #expect(
                priorities(try await update(#"{"content_state":{"eta":15,"stage":"cooking"}}"#)).allSatisfy {
                    $0.hasSuffix(":5")
                })
            #expect(
                priorities(try await update(#"{"content_state":{"eta":12,"stage":"cooking"},"priority":10}"#))
                    .allSatisfy { $0.hasSuffix(":10") })
            #expect(
                priorities(
                    try await update(
                        #"{"content_state":{"eta":8,"stage":"on the way"},"alert":{"title":"On the way","sound":"default"}}"#
                    )
                ).allSatisfy { $0.hasSuffix(":10") })
            // ana-phone's token rotates (the old one is 410 from now on) and the app reports the new one;
            // bo-phone's activity is gone from the device (its token answers 410).
            let rotated = try #require(
                activities.rotate(updateToken: updateTokens["ana-phone"]!, state: server.simulator.state))
            #expect(
                try await Self.put(
                    server, "/v1/apps/demo/activities/order-42/tokens/ana-phone", user: "ana",
                    #"{"token":"\#(rotated)"}"#
                ).status == .ok)
            server.simulator.state.markDead(updateTokens["bo-phone"]!, reason: "Unregistered")
            // 4: priority 10 asked, but the budget (2 an hour) is spent: sent at 5.
            let fourth = try await update(#"{"content_state":{"eta":5,"stage":"on the way"},"priority":10}"#)
            #expect(priorities(fourth) == ["ana-pad:5", "ana-phone:5", "bo-phone:5"], "\(fourth)")
            let outcomes = (fourth["devices"] as? [[String: Any]]) ?? []
            #expect(outcomes.map { $0["status"] as? String } == ["sent", "sent", "failed"])
            #expect(outcomes.last?["reason"] as? String == "Unregistered")
            // A stale timestamp is refused before anything is sent.
            let inboxBefore = server.simulator.state.inboxSummary().total
            let stale = try await server.request(
                .post, "/v1/apps/demo/activities/order-42/update",
                json: #"{"content_state":{"eta":1},"timestamp":1000}"#)
            #expect(stale.status == .conflict && Self.field(stale.body) == "timestamp", "\(stale.body)")
            #expect(server.simulator.state.inboxSummary().total == inboxBefore)
            // 5: routine; bo-phone's activity ended there, so it goes to the two others.
            #expect(priorities(try await update(#"{"content_state":{"eta":2,"stage":"arriving"}}"#)).count == 2)
            // Bad updates name their field.
            for (json, field) in [
                (#"{"content_state":{"eta":1},"dismiss_at":"2030-01-01T00:00:00Z"}"#, "dismiss_at"),
                (#"{"content_state":{"eta":1},"alert":{"body":"no title"}}"#, "alert.title"),
                (#"{"content_state":{"blob":"\#(String(repeating: "x", count: 4_100))"}}"#, "content_state"),
                (#"{"content_state":[1]}"#, "content_state"), (#"{"content_state":{},"priority":7}"#, "priority"),
            ] {
                let bad = try await server.request(.post, "/v1/apps/demo/activities/order-42/update", json: json)
                #expect(bad.status == .badRequest && Self.field(bad.body) == field, "\(json): \(bad.body)")
            }
            // The end, with a dismissal date an hour on.
            let dismissal = Int(server.runtime.store.now.timeIntervalSince1970) + 3_600
            let dismissAt = ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: Double(dismissal)))
            let end = try await update(
                #"{"content_state":{"eta":0,"stage":"delivered"},"dismiss_at":"\#(dismissAt)"}"#, "end")
            #expect(priorities(end) == ["ana-pad:10", "ana-phone:10"], "\(end)")
            let after = try await server.request(
                .post, "/v1/apps/demo/activities/order-42/update", json: #"{"content_state":{"eta":0}}"#)
            #expect(after.status == .conflict && Self.field(after.body) == "activity_id")

            // Herald's record.
            let view = try await server.request(.get, "/v1/apps/demo/activities/order-42")
            #expect(view.body["status"] as? String == "ended", "\(view.body)")
            let lastTimestamp = try #require(view.body["last_timestamp"] as? Int)
            let recordedDevices = (view.body["devices"] as? [[String: Any]]) ?? []
            let deviceStates: [String] = recordedDevices.map { device in
                let name = device["device_id"] as? String ?? "?"
                let status = device["status"] as? String ?? "?"
                return name + ":" + status + ":" + (device["reason"] as? String ?? "-")
            }
            #expect(
                deviceStates == [
                    "ana-pad:ended:ActivityEnded", "ana-phone:ended:ActivityEnded", "bo-phone:ended:Unregistered",
                ], "\(recordedDevices)")
            #expect(recordedDevices.allSatisfy { ($0["token"] as? String)?.count == 9 })
            let pushes = (view.body["pushes"] as? [[String: Any]]) ?? []
            // 4 starts (cy's skipped), 4 updates to 3 devices, the 5th and the end to 2.
            let expectedPushes = 20
            #expect(pushes.count == expectedPushes, "\(pushes.count)")
            let budgeted = pushes.filter { push in
                ((push["trace"] as? [[String: Any]]) ?? []).contains {
                    ($0["message"] as? String)?.contains("spent the budget of 2") == true
                }
            }
            #expect(budgeted.count == 3)
            // bo's device token is untouched by its activity token's 410.
            let boDevices = try await server.request(.get, "/v1/apps/demo/users/bo/devices")
            #expect(
                ((boDevices.body["devices"] as? [[String: Any]])?.first?["active"] as? Bool) == true,
                "\(boDevices.body)")

            // The dashboard's user page lists the user's activities per device with the last push.
            let browser = DashboardTests.Browser(server)
            #expect(try await browser.signIn(ServerHarness.server) == .seeOther)
            let page = try await browser.go(.get, "/dashboard/apps/demo/users?user_id=bo").html
            #expect(
                page.contains("order-42") && page.contains("DeliveryAttributes") && page.contains("ended: Unregistered")
                    && page.contains("update p5 failed (Unregistered)"), "\(page)")
            let anaPage = try await browser.go(.get, "/dashboard/apps/demo/users?user_id=ana").html
            #expect(anaPage.components(separatedBy: "end p10 sent").count == 3, "\(anaPage)")
            // What each device holds: the last state, the end and its dismissal date; nothing ignored.
            for device in ["ana-phone", "ana-pad"] {
                let token = device == "ana-phone" ? rotated : updateTokens[device]!
                let held = try #require(activities.activity(updateToken: token))
                #expect(held.status == "ended" && held.dismissalDate == Int64(dismissal))
                #expect(held.contentState == #"{"eta":0,"stage":"delivered"}"#)
                #expect(held.applied == 7 && held.lastTimestamp == Int64(lastTimestamp))
                #expect(held.alerts == ["Order 42", "On the way"])
            }
            let bo = try #require(activities.activities(startToken: tokens[6]).first)
            #expect(bo.status == "active" && bo.applied == 4 && bo.contentState == #"{"eta":8,"stage":"on the way"}"#)
            #expect(activities.ignored.isEmpty, "\(activities.ignored)")
            // The old ana-phone token got nothing after the rotation was reported.
            let rotatedAway = server.simulator.state.inbox(for: updateTokens["ana-phone"]!)
            #expect(
                rotatedAway.count == 3
                    && rotatedAway.allSatisfy { $0.topic == "com.example.demo.push-type.liveactivity" })
        }
    }

    @Test(
        "a catalog activity type: the alert of a start and an update in each device's locale (fr-FR, en-GB, none), a low-stakes type's alert at priority 5, bad type, data and attributes_type named"
    )
    func catalogActivityType() async throws {
        let tokens = makeDeviceTokens(6)
        try await withServer(catalog: "cocotte.yaml") { server in
            let devices = [("ana-phone", "ana", "fr-FR"), ("bo-phone", "bo", "en-GB"), ("cy-phone", "cy", nil)]
            for (index, (device, user, locale)) in devices.enumerated() {
                #expect(
                    try await server.register(device, user: user, token: tokens[index], locale: locale) == .created)
                let stored = try await Self.put(
                    server, "/v1/apps/demo/devices/\(device)/activity-tokens/start/CocotteJobAttributes", user: user,
                    #"{"token":"\#(tokens[3 + index])"}"#)
                #expect(stored.status == .ok, "\(stored.body)")
            }
            let audience = #""activity_id":"job-7","content_state":{"done":0},"to":{"user_ids":["ana","bo","cy"]}"#
            for (json, field) in [
                (#"{\#(audience),"type":"nope","data":{"job":"J"}}"#, "type"),
                (#"{\#(audience),"type":"job_progress","data":{"job":"J"}}"#, "data.step"),
                (#"{\#(audience),"type":"job_progress","data":{"job":"J","step":["a"]}}"#, "data.step"),
                (#"{\#(audience),"type":"job_progress","data":{"job":"J","step":"s"},"alert":{"title":"t"}}"#, "alert"),
                (
                    #"{\#(audience),"type":"job_progress","attributes_type":"Other","data":{"job":"J","step":"s"}}"#,
                    "attributes_type"
                ),
                (#"{\#(audience),"attributes_type":"CocotteJobAttributes","data":{"job":"J"}}"#, "data"),
            ] {
                let answer = try await server.request(.post, "/v1/apps/demo/activities", json: json)
                #expect(answer.status == .badRequest && Self.field(answer.body) == field, "\(json): \(answer.body)")
            }
            #expect(server.simulator.state.inboxSummary().total == 0)

            let start = try await server.request(
                .post, "/v1/apps/demo/activities",
                json: #"{\#(audience),"type":"job_progress","data":{"job":"Inbox triage","step":"reading"}}"#)
            #expect(start.status == .created, "\(start.body)")
            let activities = server.simulator.state.activities
            var updateTokens: [String] = []
            for (index, (device, user, _)) in devices.enumerated() {
                let made = try #require(activities.activities(startToken: tokens[3 + index]).first)
                #expect(made.attributesType == "CocotteJobAttributes")
                let token = try #require(made.updateToken)
                updateTokens.append(token)
                #expect(
                    try await Self.put(
                        server, "/v1/apps/demo/activities/job-7/tokens/\(device)", user: user, #"{"token":"\#(token)"}"#
                    ).status == .ok)
            }
            func priorities(_ json: String) async throws -> [Int] {
                let answer = try await server.request(.post, "/v1/apps/demo/activities/job-7/update", json: json)
                #expect(answer.status == .ok, "\(json): \(answer.body)")
                return ((answer.body["devices"] as? [[String: Any]]) ?? []).compactMap { $0["priority"] as? Int }
            }
            // Medium stakes: its alert goes at 10; low stakes: at 5, like a routine update.
            #expect(
                try await priorities(
                    #"{"content_state":{"done":1},"type":"job_progress","data":{"job":"Inbox triage","step":"drafting"}}"#
                ) == [10, 10, 10])
            #expect(
                try await priorities(#"{"content_state":{"done":2},"type":"job_digest","data":{"job":"Inbox triage"}}"#)
                    == [5, 5, 5])
            let held = updateTokens.map { activities.activity(updateToken: $0)?.alerts ?? [] }
            #expect(
                held == [
                    ["Inbox triage est en cours", "Inbox triage est en cours", "Inbox triage: new results"],
                    ["Inbox triage is running", "Inbox triage is running", "Inbox triage: new results"],
                    ["Inbox triage is running", "Inbox triage is running", "Inbox triage: new results"],
                ], "\(held)")
            let body = try #require(server.simulator.state.inbox(for: updateTokens[0]).last?.payload)
            #expect(String(decoding: body, as: UTF8.self).contains(#""title":"Inbox triage: new results""#))
            let view = try await server.request(.get, "/v1/apps/demo/activities/job-7")
            let traces = ((view.body["pushes"] as? [[String: Any]]) ?? []).flatMap {
                (($0["trace"] as? [[String: Any]]) ?? []).compactMap { $0["message"] as? String }
            }
            #expect(traces.contains("alert from activity type job_progress, locale fr (device fr-FR)"), "\(traces)")
            #expect(traces.contains { $0.hasPrefix("5: an alert of job_digest, a low-stakes activity type") })
        }
    }

    @Test(
        "a start checks its fields: an alert with a title, a content state under 4 KB, recipients; dismiss_at is an end's"
    )
    func startChecks() async throws {
        try await withServer { server in
            for (json, field) in [
                (
                    #"{"attributes_type":"T","content_state":{},"to":{"user_ids":["a"]},"alert":{"title":"t"}}"#,
                    "activity_id"
                ),
                (
                    #"{"activity_id":"a b","attributes_type":"T","content_state":{},"to":{"user_ids":["a"]},"alert":{"title":"t"}}"#,
                    "activity_id"
                ),
                (
                    #"{"activity_id":"a","content_state":{},"to":{"user_ids":["a"]},"alert":{"title":"t"}}"#,
                    "attributes_type"
                ),
                (
                    #"{"activity_id":"a","attributes_type":"T","to":{"user_ids":["a"]},"alert":{"title":"t"}}"#,
                    "content_state"
                ),
                (#"{"activity_id":"a","attributes_type":"T","content_state":{},"alert":{"title":"t"}}"#, "to"),
                (#"{"activity_id":"a","attributes_type":"T","content_state":{},"to":{"user_ids":["a"]}}"#, "alert"),
                (
                    #"{"activity_id":"a","attributes_type":"T","content_state":{},"to":{"user_ids":["a"]},"alert":{"body":"b"}}"#,
                    "alert.title"
                ),
                (
                    #"{"activity_id":"a","attributes_type":"T","content_state":{},"to":{"user_ids":["a"]},"alert":{"title":"t"},"dismiss_at":"2030-01-01T00:00:00Z"}"#,
                    "dismiss_at"
                ),
                (
                    #"{"activity_id":"a","attributes_type":"T","content_state":{},"to":{"user_ids":["a"]},"alert":{"title":"t"},"stale_at":"soon"}"#,
                    "stale_at"
                ),
            ] {
                let answer = try await server.request(.post, "/v1/apps/demo/activities", json: json)
                #expect(answer.status == .badRequest && Self.field(answer.body) == field, "\(json): \(answer.body)")
            }
            #expect(try await server.request(.get, "/v1/apps/demo/activities/none").status == .notFound)
            #expect(
                try await server.request(.post, "/v1/apps/demo/activities/none/update", json: #"{"content_state":{}}"#)
                    .status == .notFound)
        }
    }

    @Test(
        "a match on a broadcast channel: 1,000 devices started listening on it, 10 updates are 10 publishes (not 10,000 pushes), the end deletes the channel; the 10,001st channel is refused"
    )
    func broadcastChannel() async throws {
        let devices = 1_000
        let tokens = makeDeviceTokens(devices * 2)
        try await withServer { server in
            var lines = ""
            for index in 0..<devices {
                lines +=
                    #"{"device_id":"d\#(index)","user_id":"u\#(index)","token":"\#(tokens[index])","environment":"sandbox"}"#
                    + "\n"
            }
            let imported = try await server.request(.post, "/v1/apps/demo/devices/import", json: lines)
            #expect(imported.body["imported"] as? Int == devices)
            for index in 0..<devices {
                let stored = try await server.request(
                    .put, "/v1/apps/demo/devices/d\(index)/activity-tokens/start/MatchAttributes",
                    json: #"{"token":"\#(tokens[devices + index])"}"#)
                #expect(stored.status == .ok)
            }
            let created = try await server.request(
                .post, "/v1/apps/demo/channels",
                json: #"{"event_key":"match-7","storage":"none","environment":"sandbox"}"#)
            #expect(created.status == .created, "\(created.body)")
            let channel = try #require(created.body["channel_id"] as? String)
            let activities = server.simulator.state.activities
            #expect(activities.channels(bundleID: "com.example.demo").keys.sorted() == [channel])
            let unknown = try await server.request(
                .post, "/v1/apps/demo/activities",
                json:
                    #"{"activity_id":"x","attributes_type":"MatchAttributes","content_state":{},"to":{"user_ids":["u1"]},"alert":{"title":"t"},"channel":"nope"}"#
            )
            #expect(unknown.status == .notFound && Self.field(unknown.body) == "channel")

            let start = try await server.request(
                .post, "/v1/apps/demo/activities",
                json: """
                    {"activity_id":"match-7","attributes_type":"MatchAttributes","attributes":{"home":"A","away":"B"},
                     "content_state":{"home":0,"away":0},"to":{"device_ids":[\((0..<devices).map { "\"d\($0)\"" }.joined(separator: ","))]},
                     "alert":{"title":"Kick-off"},"channel":"\(channel)"}
                    """)
            #expect(start.status == .created, "\(start.body)")
            #expect(
                (start.body["devices"] as? [[String: Any]])?.filter { $0["status"] as? String == "sent" }.count
                    == devices)
            #expect(server.simulator.state.inboxSummary().total == devices)
            for goal in 1...10 {
                let update = try await server.request(
                    .post, "/v1/apps/demo/activities/match-7/update",
                    json: #"{"content_state":{"home":\#(goal),"away":0}}"#)
                #expect(update.status == .ok && (update.body["devices"] as? [Any])?.isEmpty == true, "\(update.body)")
            }
            // Ten publishes; no push to any device beyond its start.
            #expect(activities.publishes == 10)
            #expect(server.simulator.state.inboxSummary().total == devices)
            let held = activities.all.filter { $0.channel == channel }
            #expect(held.count == devices)
            #expect(held.allSatisfy { $0.applied == 11 && $0.contentState == #"{"away":0,"home":10}"# })
            let end = try await server.request(
                .post, "/v1/apps/demo/activities/match-7/end", json: #"{"content_state":{"home":10,"away":0}}"#)
            #expect(end.status == .ok, "\(end.body)")
            #expect(activities.publishes == 11 && activities.all.allSatisfy { $0.status == "ended" })
            #expect(activities.channels(bundleID: "com.example.demo").isEmpty)
            let listed = try await server.request(.get, "/v1/apps/demo/channels")
            #expect((listed.body["channels"] as? [Any])?.isEmpty == true, "\(listed.body)")
            let view = try await server.request(.get, "/v1/apps/demo/activities/match-7")
            let pushes = (view.body["pushes"] as? [[String: Any]]) ?? []
            #expect(pushes.filter { $0["device_id"] is NSNull && $0["status"] as? String == "sent" }.count == 11)
            #expect(activities.ignored.isEmpty, "\(activities.ignored)")

            // Apple allows 10,000 channels per app and environment: Herald refuses the next itself.
            try await server.runtime.store.activities.recordChannels(
                appID: "demo",
                (0..<9_999).map {
                    .init(id: "seeded-\($0)", environment: "sandbox", eventKey: "e\($0)", storage: 0, createdAt: Date())
                })
            let last = try await server.request(
                .post, "/v1/apps/demo/channels", json: #"{"event_key":"match-8","environment":"sandbox"}"#)
            #expect(last.status == .created)
            let refused = try await server.request(
                .post, "/v1/apps/demo/channels", json: #"{"event_key":"match-9","environment":"sandbox"}"#)
            #expect(
                refused.status == .conflict
                    && (refused.body["error"] as? [String: Any])?["code"] as? String == "channel_limit")
            #expect(activities.channels(bundleID: "com.example.demo").count == 1)
            // Deleting one: at Apple and in Herald's records.
            let deleted = try await server.request(
                .delete,
                "/v1/apps/demo/channels/\(try #require(last.body["channel_id"] as? String).addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)"
            )
            #expect(deleted.status == .noContent)
            #expect(activities.channels(bundleID: "com.example.demo").isEmpty)
        }
    }

    static func field(_ body: [String: Any]) -> String? {
        (body["error"] as? [String: Any])?["field"] as? String
    }
}
