import Foundation
import HeraldAPI
import HeraldAPNs
import HeraldCore
import HeraldEngine
import HeraldFCM
import HeraldSimulator
import HeraldStore
import HeraldTesting
import Hummingbird
import Testing

/// Odd or hostile input gets a clear 4xx, and nothing breaks or leaks.
@Suite("Hostile and odd input", .serialized)
struct HostileInputTests {
    static func field(_ response: (status: HTTPResponse.Status, body: [String: Any])) -> String? {
        (response.body["error"] as? [String: String])?["field"]
    }

    @Test(
        "path parameters are percent-decoded: josé's opt-out is honoured and logout of \"phone 1\" really unregisters")
    func percentDecoding() async throws {
        try await withServer { server in
            let token = makeDeviceTokens(1)[0]
            let registered = try await server.request(
                .post, "/v1/apps/demo/devices",
                json: #"{"device_id":"phone 1","user_id":"josé","token":"\#(token)","environment":"sandbox"}"#)
            #expect(registered.status == .created)
            let devices = try await server.request(.get, "/v1/apps/demo/users/jos%C3%A9/devices")
            #expect((devices.body["devices"] as? [Any])?.count == 1)
            let preferences = try await server.request(
                .put, "/v1/apps/demo/users/jos%C3%A9/preferences",
                json: #"{"types":{"PN-06":false},"quiet_hours":{"enabled":false}}"#)
            #expect(preferences.status == .ok)
            let sent = try await server.send(
                #"{"to":{"user_ids":["josé"]},"type":"PN-06","data":{"Badge Name":"Gold","badge_id":"g"}}"#)
            let view = try await server.settled(try #require(sent.body["id"] as? String))
            #expect((view["counts"] as? [String: Int])?["suppressed"] == 1)
            #expect(server.simulator.state.inbox(for: token).isEmpty)
            let logout = try await server.request(
                .delete, "/v1/apps/demo/devices/phone%201", key: ServerHarness.client,
                userToken: ServerHarness.userToken("josé"))
            #expect(logout.status == .noContent)
            #expect(
                try await server.send(#"{"to":{"user_ids":["josé"]},"alert":{"body":"after logout"}}"#).body[
                    "recipients"] as? Int == 0)
            #expect(try await server.request(.get, "/v1/apps/demo/users/jos%ZZ/devices").status == .badRequest)
        }
    }

    @Test(
        "data and attributes nested deeper than 16 levels, deliver_at beyond a year, and push types that need their own token are refused naming the field"
    )
    func limits() async throws {
        try await withServer { server in
            func nested(_ levels: Int) -> String {
                String(repeating: #"{"a":"#, count: levels) + "1" + String(repeating: "}", count: levels)
            }
            // `data` itself is one level: 16 in all passes, 17 does not.
            #expect(try await server.send(#"{"to":{"all":true},"data":\#(nested(16))}"#).status == .accepted)
            let deep = try await server.send(#"{"to":{"all":true},"data":\#(nested(17))}"#)
            #expect(deep.status == .badRequest)
            #expect(Self.field(deep) == "data")
            let arrays = try await server.send(
                #"{"to":{"all":true},"data":{"a":\#(String(repeating: "[", count: 500) + String(repeating: "]", count: 500))}}"#
            )
            #expect(arrays.status == .badRequest)
            #expect(Self.field(arrays) == "data")
            let attributes = try await server.request(
                .put, "/v1/apps/demo/users/u", json: #"{"attributes":\#(nested(17))}"#)
            #expect(attributes.status == .badRequest)
            #expect(Self.field(attributes) == "attributes")
            let later = ISO8601DateFormatter().string(from: Date().addingTimeInterval(400 * 86400))
            let far = try await server.send(#"{"to":{"all":true},"alert":{"body":"x"},"deliver_at":"\#(later)"}"#)
            #expect(far.status == .badRequest)
            #expect(Self.field(far) == "deliver_at")
            for pushType in [
                "voip", "liveactivity", "location", "complication", "fileprovider", "pushtotalk", "widgets", "controls",
            ] {
                let answer = try await server.send(
                    #"{"to":{"all":true},"push_type":"\#(pushType)","alert":{"body":"x"}}"#)
                #expect(answer.status == .badRequest, "\(pushType)")
                #expect(Self.field(answer) == "push_type", "\(pushType)")
            }
            #expect(
                try await server.send(#"{"to":{"all":true},"push_type":"background","content_available":true}"#).status
                    == .accepted)
        }
    }

    @Test("an import batch where Z takes X's token while X gets a new one is imported, not a 500")
    func importMovesTokens() async throws {
        try await withServer { server in
            let tokens = makeDeviceTokens(2)
            let first = try await server.request(
                .post, "/v1/apps/demo/devices/import",
                json: #"{"device_id":"X","user_id":"u","token":"\#(tokens[0])"}"# + "\n")
            #expect(first.body["imported"] as? Int == 1)
            let swap = try await server.request(
                .post, "/v1/apps/demo/devices/import",
                json: #"{"device_id":"Z","user_id":"u","token":"\#(tokens[0])"}"# + "\n"
                    + #"{"device_id":"X","user_id":"u","token":"\#(tokens[1])"}"# + "\n")
            #expect(swap.status == .ok)
            #expect(swap.body["imported"] as? Int == 2)
            let devices = try #require(
                try await server.request(.get, "/v1/apps/demo/users/u/devices").body["devices"] as? [[String: Any]])
            let byID = Dictionary(
                uniqueKeysWithValues: devices.map { ($0["device_id"] as? String ?? "", $0["token"] as? String ?? "") })
            #expect(byID == ["X": tokens[1], "Z": tokens[0]])
            // And a full swap of two tokens in one batch.
            let back = try await server.request(
                .post, "/v1/apps/demo/devices/import",
                json: #"{"device_id":"Z","user_id":"u","token":"\#(tokens[1])"}"# + "\n"
                    + #"{"device_id":"X","user_id":"u","token":"\#(tokens[0])"}"#)
            #expect(back.status == .ok)
            let swapped = try #require(
                try await server.request(.get, "/v1/apps/demo/users/u/devices").body["devices"] as? [[String: Any]])
            #expect(
                Dictionary(
                    uniqueKeysWithValues: swapped.map {
                        ($0["device_id"] as? String ?? "", $0["token"] as? String ?? "")
                    })
                    == ["X": tokens[0], "Z": tokens[1]])
        }
    }

    @Test(
        "a device registered without environment gets the app's apns.environment; an update without it keeps what the device had"
    )
    func environmentDefault() async throws {
        try await withServer { server in
            let tokens = makeDeviceTokens(2)
            let fresh = try await server.request(
                .post, "/v1/apps/demo/devices", json: #"{"device_id":"p2","user_id":"ana","token":"\#(tokens[0])"}"#)
            #expect(fresh.body["environment"] as? String == "sandbox")  // the demo app is configured sandbox
            let production = try await server.request(
                .post, "/v1/apps/demo/devices",
                json: #"{"device_id":"p3","user_id":"ana","token":"\#(tokens[1])","environment":"production"}"#)
            #expect(production.body["environment"] as? String == "production")
            let renamed = try await server.request(
                .post, "/v1/apps/demo/devices",
                json: #"{"device_id":"p3","user_id":"ana","token":"\#(tokens[1])","name":"renamed"}"#)
            #expect(renamed.body["environment"] as? String == "production")
            #expect(renamed.body["name"] as? String == "renamed")
        }
    }

    @Test("the PII guard scans nested data, the deep link and the rendered collapse id even when the copy is clean")
    func piiEverywhere() async throws {
        try await withServer { server in
            let token = makeDeviceTokens(1)[0]
            #expect(try await server.register("p1", user: "ana", token: token) == .created)
            _ = try await server.request(
                .put, "/v1/apps/demo/users/ana/preferences", json: #"{"quiet_hours":{"enabled":false}}"#)
            // PN-02's collapse id is rendered from source_id; its copy stays clean.
            let sent = try await server.send(
                #"{"to":{"user_ids":["ana"]},"type":"PN-02","data":{"Source":"Strava","source_id":"ana@example.com","extra":{"contact":"call +33 6 12 34 56 78","list":["ok","bob@example.org"]}}}"#
            )
            let view = try await server.settled(try #require(sent.body["id"] as? String))
            #expect((view["counts"] as? [String: Int])?["sent"] == 1)
            let entry = try #require(server.simulator.state.inbox(for: token).last)
            let raw = String(decoding: entry.payload, as: UTF8.self)
            #expect(!raw.contains("example.com") && !raw.contains("example.org") && !raw.contains("12 34 56"), "\(raw)")
            // The rendered collapse id is left out; a type with actions (PN-02: FIX) collapses on
            // the notification's own id instead, so the card can be resolved elsewhere.
            #expect(entry.collapseID == (sent.body["id"] as? String))
            let demo = try #require(entry.payloadObject?["demo"] as? [String: Any])
            #expect((demo["extra"] as? [String: Any])?["list"] as? [String] == ["ok"])
            #expect(demo["Source"] as? String == "Strava")
            let rules = ((view["deliveries"] as? [[String: Any]])?.first?["trace"] as? [[String: Any]] ?? []).compactMap
            { $0["message"] as? String }
            #expect(rules.contains { $0.hasPrefix("collapse id left out") }, "\(rules)")
            #expect(rules.contains { $0.hasPrefix("data values left out") }, "\(rules)")
        }
    }

    @Test("an FCM expiration beyond 28 days is sent as 28 days, not refused")
    func fcmTimeToLive() async throws {
        try await withServer { server in
            let registered = try await server.request(
                .post, "/v1/apps/demo/devices",
                json: #"{"device_id":"pix","user_id":"ana","platform":"fcm","token":"fcm-ttl-token"}"#)
            #expect(registered.status == .created)
            let expiration = Int(Date().timeIntervalSince1970) + 40 * 86400
            let sent = try await server.send(
                #"{"to":{"user_ids":["ana"]},"alert":{"body":"x"},"expiration":\#(expiration)}"#)
            let view = try await server.settled(try #require(sent.body["id"] as? String))
            #expect((view["counts"] as? [String: Int])?["sent"] == 1)
            let message = try #require(server.simulator.state.inbox(for: "fcm-ttl-token").last?.payloadObject)
            #expect(
                ((message["message"] as? [String: Any])?["android"] as? [String: Any])?["ttl"] as? String == "2419200s")
        }
    }

    @Test(
        "a Retry-After of 1e300, inf or nan from an FCM peer is clamped: the delivery is retried later and the server keeps running"
    )
    func hostileRetryAfter() async throws {
        try await withServer { server in
            let registered = try await server.request(
                .post, "/v1/apps/demo/devices",
                json: #"{"device_id":"pix","user_id":"ana","platform":"fcm","token":"fcm-hostile"}"#)
            #expect(registered.status == .created)
            server.simulator.state.script("fcm-hostile", status: 429, reason: "QUOTA_EXCEEDED", retryAfter: "1e300")
            let sent = try await server.send(#"{"to":{"user_ids":["ana"]},"alert":{"body":"x"}}"#)
            let id = try #require(sent.body["id"] as? String)
            var delivery: [String: Any] = [:]
            for _ in 0..<200 {
                delivery =
                    (try await server.request(.get, "/v1/apps/demo/notifications/\(id)").body["deliveries"]
                    as? [[String: Any]])?.first ?? [:]
                if delivery["attempts"] as? Int ?? 0 > 0 { break }
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(delivery["status"] as? String == "queued")
            #expect(delivery["reason"] as? String == "QUOTA_EXCEEDED")
            let until = HeraldTime.parse(try #require(delivery["until"] as? String))
            let wait = try #require(until).timeIntervalSinceNow
            #expect(wait > 3000 && wait <= 3601, "retry in \(wait) s")
            #expect(try await server.request(.get, "/healthz", key: nil).status == .ok)
        }
        #expect(FCMClient.retryAfter("inf") == nil)
        #expect(FCMClient.retryAfter("nan") == nil)
        #expect(FCMClient.retryAfter("-5") == 0)
        #expect(FCMClient.retryAfter("30") == 30)
        #expect(FCMClient.retryAfter("1e300") == 3600)
        var pauses: [String: Date] = [:]
        let now = Date()
        for index in 0..<(FCMClient.maximumDevicePauses + 10) {
            pauses["t\(index)"] = now.addingTimeInterval(Double(60 + index))
        }
        FCMClient.bound(&pauses, now: now)
        #expect(pauses.count <= FCMClient.maximumDevicePauses)
        #expect(APNSTimestamp.sane(seconds: 1e300, now: now) == now)
        #expect(APNSTimestamp.sane(seconds: .nan, now: now) == nil)
        #expect(try #require(APNSTimestamp.sane(seconds: -1, now: now)).timeIntervalSince1970 > 0)
    }

    @Test("an import line is read by the fast decoder exactly as JSONDecoder reads it, or handed to JSONDecoder")
    func importLineDecoder() throws {
        let token = String(repeating: "ab", count: 32)
        func fast(_ line: String) -> DeviceBody? {
            Array(line.utf8).withUnsafeBytes { DeviceLineDecoder.decode($0) }
        }
        func reference(_ line: String) -> DeviceBody? {
            try? JSONDecoder().decode(DeviceBody.self, from: Data(line.utf8))
        }
        // The shapes an export writes: read on the fast path, field for field as JSONDecoder reads them.
        let plain = [
            #"{"device_id":"d1","user_id":"u1","token":"\#(token)","environment":"sandbox"}"#,
            #"  { "device_id" : "d2" , "user_id":"u2", "platform":"fcm", "token":"fcm:x-y", "name":null, "locale":"fr-FR", "#
                + #""time_zone":"Europe/Paris", "app_version":"2.1", "authorization_status":"provisional", "model":"iPhone16,2"}\#r"#,
            #"{"device_id":"Zoë's iPad","user_id":"用户","token":"\#(token)","unknown":"ignored","name":"Zoë"}"#,
            "{}",
        ]
        for line in plain {
            let decoded = try #require(fast(line), "\(line)")
            #expect(decoded == reference(line), "\(line)")
        }
        #expect(fast(plain[1])?.authorizationStatus == "provisional")
        #expect(fast(plain[2])?.name == "Zoë")
        // Escapes, numbers, nesting, repeated keys, broken JSON and bad UTF-8 go to JSONDecoder.
        let other = [
            #"{"device_id":"d\u0031","user_id":"u","token":"\#(token)"}"#,
            #"{"device_id":"d","user_id":"u","token":"\#(token)","extra":5}"#,
            #"{"device_id":"d","user_id":"u","token":5}"#,
            #"{"device_id":"d","user_id":"u","token":"\#(token)","nested":{"a":"b"}}"#,
            #"{"device_id":"a","device_id":"b","user_id":"u","token":"\#(token)"}"#,
            #"{"device_id":"d","user_id":"u","token":"\#(token)""#,
            #"{"device_id":"d","user_id":"u","token":"\#(token)"} x"#,
            #"["device_id"]"#,
            #"{"device_id":"d","user_id":"u","token":"\#(token)",}"#,
        ]
        for line in other { #expect(fast(line) == nil, "\(line)") }
        #expect(reference(other[0])?.deviceID == "d1")
        #expect(Array(#"{"device_id":"\#u{FF}"}"#.utf8).withUnsafeBytes { DeviceLineDecoder.decode($0) } != nil)
        let invalidUTF8: [UInt8] = Array(#"{"device_id":""#.utf8) + [0xFF, 0xFE] + Array(#""}"#.utf8)
        #expect(invalidUTF8.withUnsafeBytes { DeviceLineDecoder.decode($0) } == nil)
    }
}
