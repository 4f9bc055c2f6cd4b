import Foundation
import HTTPTypes
import HeraldCore
import HeraldSimulator
import HeraldTesting
import Testing

/// `POST /v1/apps/{app}/test`, the admin's "send me one now" (Lucid's guide):
/// rendered and sent at once past quiet hours and pacing, not past preferences, answered with
/// what each device was sent and how it went. The simulator's inbox is the witness.
@Suite("Test sends")
struct TestSendTests {
    static func deliveries(_ body: [String: Any]) -> [[String: Any]] { body["deliveries"] as? [[String: Any]] ?? [] }

    @Test(
        "Lucid: a test send goes past pacing (5 sent this hour), answers each device's headers, payload and trace, and does not count for the next send's pacing"
    )
    func lucidPacing() async throws {
        let clock = ManualClock(PolicyScenarioTests.date("2026-11-22T10:00:00Z"))
        try await withServer(catalog: "lucid.yaml", payloadKey: nil, clock: clock) { server in
            let tokens = makeDeviceTokens(2)
            #expect(try await server.register("iphone", user: "matt", token: tokens[0]) == .created)
            #expect(try await server.register("ipad", user: "matt", token: tokens[1]) == .created)
            for index in 0..<4 {
                let sent = try await server.send(
                    #"{"to":{"user_ids":["matt"]},"type":"thought_notification","data":{"text":"Thought \#(index)","notificationId":"n\#(index)"}}"#
                )
                _ = try await server.settled(try #require(sent.body["id"] as? String))
            }
            let test = try await server.request(
                .post, "/v1/apps/demo/test",
                json:
                    #"{"user_id":"matt","type":"library_comment","data":{"comment":"Nice entry.","entryId":"e42","commentId":"c7"}}"#
            )
            #expect(test.status == .ok, "\(test.body)")
            #expect(test.body["complete"] as? Bool == true && test.body["type"] as? String == "library_comment")
            let devices = Self.deliveries(test.body)
            #expect(Set(devices.map { $0["device_id"] as? String }) == ["iphone", "ipad"])
            for device in devices {
                #expect(device["status"] as? String == "sent" && device["platform"] as? String == "apns", "\(device)")
                let headers = try #require(device["headers"] as? [String: String])
                #expect(headers["apns-push-type"] == "alert" && headers["apns-topic"] == "com.example.demo")
                let payload = try #require(device["payload"] as? [String: Any])
                let aps = try #require(payload["aps"] as? [String: Any])
                #expect((aps["alert"] as? [String: Any])?["body"] as? String == "Nice entry.")
                #expect(aps["thread-id"] as? String == "library-e42")
                let lucid = try #require(payload["lucid"] as? [String: Any])
                #expect(lucid["deep_link"] as? String == "lucid://library/e42/comments/c7")
                #expect((lucid["herald"] as? [String: Any])?["d"] as? Int == device["delivery_id"] as? Int)
                let trace = try #require(device["trace"] as? [[String: Any]])
                #expect(trace.first?["rule"] as? String == "test")
            }
            // What the answer shows is what went over the wire.
            let received = try #require(server.simulator.state.inbox(for: tokens[0]).last?.payloadObject)
            #expect(
                ((received["aps"] as? [String: Any])?["alert"] as? [String: Any])?["body"] as? String == "Nice entry.")
            #expect(server.simulator.state.inbox(for: tokens[0]).count == 5)

            // Four sent, one test: the fifth goes (the test send is not counted), the sixth is paced.
            var ids: [String] = []
            for index in 4..<6 {
                let sent = try await server.send(
                    #"{"to":{"user_ids":["matt"]},"type":"thought_notification","data":{"text":"Thought \#(index)","notificationId":"n\#(index)"}}"#
                )
                ids.append(try #require(sent.body["id"] as? String))
            }
            #expect((try await server.settled(ids[0])["counts"] as? [String: Int])?["sent"] == 2)
            #expect((try await server.settled(ids[1])["counts"] as? [String: Int])?["deferred"] == 2)
            // Paced now, a test send still goes.
            let again = try await server.request(
                .post, "/v1/apps/demo/test",
                json: #"{"user_id":"matt","type":"thought_notification","data":{"text":"Ping","notificationId":"t"}}"#)
            #expect(Self.deliveries(again.body).map { $0["status"] as? String } == ["sent", "sent"])
            #expect(server.simulator.state.inbox(for: tokens[1]).count == 7)
        }
    }

    @Test(
        "SyncWell: at 23:00 in Paris a test PN-03 goes now, in French, to the iPhone and the Android phone (FCM's request body); a type the user turned off is suppressed; test sends stay out of analytics"
    )
    func syncWellQuietHours() async throws {
        let clock = ManualClock(PolicyScenarioTests.date("2026-11-22T22:00:00Z"))  // 23:00 in Paris
        try await withServer(catalog: "syncwell.yaml", clock: clock) { server in
            let token = makeDeviceTokens(1)[0]
            #expect(try await server.register("phone", user: "ana", token: token, locale: "fr-FR") == .created)
            let android = try await server.request(
                .post, "/v1/apps/demo/devices",
                json:
                    #"{"device_id":"pixel","user_id":"ana","platform":"fcm","token":"fcm:Pixel-Token_1","locale":"fr-FR"}"#
            )
            #expect(android.status == .created)
            #expect(
                try await server.request(.put, "/v1/apps/demo/users/ana", json: #"{"time_zone":"Europe/Paris"}"#).status
                    == .ok)

            let test = try await server.request(
                .post, "/v1/apps/demo/test",
                json: #"{"user_id":"ana","type":"PN-03","data":{"New Provider":"Oura","provider_id":"oura"}}"#)
            #expect(test.status == .ok, "\(test.body)")
            let byDevice = Dictionary(
                uniqueKeysWithValues: Self.deliveries(test.body).map { ($0["device_id"] as? String ?? "", $0) })
            #expect(
                byDevice["phone"]?["status"] as? String == "sent" && byDevice["pixel"]?["status"] as? String == "sent",
                "\(test.body)")
            let apnsAlert =
                ((byDevice["phone"]?["payload"] as? [String: Any])?["aps"] as? [String: Any])?["alert"]
                as? [String: Any]
            let fcmMessage = (byDevice["pixel"]?["payload"] as? [String: Any])?["message"] as? [String: Any]
            #expect(fcmMessage?["token"] as? String == "fcm:Pixel-Token_1")
            #expect(
                (fcmMessage?["notification"] as? [String: Any])?["title"] as? String == apnsAlert?["title"] as? String)
            #expect(byDevice["pixel"]?["platform"] as? String == "fcm" && byDevice["pixel"]?["headers"] == nil)
            // Received now, in the quiet hours an ordinary PN-03 waits out.
            let received = try #require(server.simulator.state.inbox(for: token).first?.payloadObject)
            #expect(
                ((received["aps"] as? [String: Any])?["alert"] as? [String: Any])?["title"] as? String == apnsAlert?[
                    "title"] as? String)
            #expect(server.simulator.state.inbox(for: "fcm:Pixel-Token_1").count == 1)
            let ordinary = try await server.send(
                #"{"to":{"user_ids":["ana"]},"type":"PN-03","data":{"New Provider":"Oura","provider_id":"oura"}}"#)
            #expect(
                (try await server.settled(try #require(ordinary.body["id"] as? String))["counts"] as? [String: Int])?[
                    "deferred"] == 2)

            // PN-01 is off by default: the test shows it suppressed, with the reason, and sends nothing.
            let off = try await server.request(
                .post, "/v1/apps/demo/test",
                json: #"{"user_id":"ana","type":"PN-01","data":{"Source":"Garmin","source_id":"garmin"}}"#)
            #expect(off.status == .ok)
            for device in Self.deliveries(off.body) {
                #expect(
                    device["status"] as? String == "suppressed" && device["reason"] as? String == "preference"
                        && device["payload"] == nil)
            }
            #expect(server.simulator.state.inbox(for: token).count == 1)

            // Analytics count the ordinary PN-03 (deferred), not the test sends.
            let analytics = try await server.request(.get, "/v1/apps/demo/analytics?type=PN-03")
            let row = try #require((analytics.body["types"] as? [[String: Any]])?.first)
            #expect(row["sent"] as? Int == 0 && row["deferred"] as? Int == 2, "\(row)")
        }
    }

    @Test(
        "a test send needs the server key, a user with an active device and a catalog type; bad fields name themselves")
    func checks() async throws {
        try await withServer { server in
            #expect(try await server.register("phone", user: "ana", token: makeDeviceTokens(1)[0]) == .created)
            for (json, status, field) in [
                (#"{"type":"PN-02"}"#, 400, "user_id"), (#"{"user_id":"ana"}"#, 400, "type"),
                (#"{"user_id":"ana","type":"nope"}"#, 400, "type"), (#"{"user_id":"","type":"PN-02"}"#, 400, "user_id"),
                (#"{"user_id":"nobody","type":"PN-02"}"#, 404, "user_id"),
            ] {
                let refused = try await server.request(.post, "/v1/apps/demo/test", json: json)
                #expect(
                    refused.status.code == status
                        && (refused.body["error"] as? [String: Any])?["field"] as? String == field,
                    "\(json) \(refused.body)")
            }
            let client = try await server.request(
                .post, "/v1/apps/demo/test", key: ServerHarness.client, json: #"{"user_id":"ana","type":"PN-02"}"#)
            #expect(client.status == .forbidden || client.status == .unauthorized)
            #expect(server.simulator.state.inbox(for: makeDeviceTokens(1)[0]).isEmpty)
        }
    }
}
