import Foundation
import HeraldAPNs
import HeraldCore
import HeraldPayload
import HeraldSimulator
import HeraldTesting
import NIOCore
import NIOHPACK
import Testing

@Suite("JSON syntax check")
struct JSONSyntaxTests {
    func isObject(_ text: String) -> Bool {
        Array(text.utf8).withUnsafeBytes(JSONSyntax.isObject)
    }

    @Test("accepts JSON objects of every shape")
    func accepts() {
        #expect(isObject("{}"))
        #expect(isObject(#" { "aps" : { "alert" : "hi" } } "#))
        #expect(isObject(#"{"a":[1,-2.5,3e10,0,-0.0E-3,true,false,null,"x\"\\\/\b\f\n\r\t\u00e9"],"b":{}}"#))
        #expect(isObject(#"{"emoji":"🙂","nested":[[[]],{"k":[{}]}]}"#))
    }

    @Test("refuses everything else")
    func refuses() {
        for text in [
            "", "[]", "\"s\"", "1", "null", "{", "}", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "{\"a\":1}}", "{a:1}",
            "{\"a\":01}", "{\"a\":1.}", "{\"a\":-}", "{\"a\":tru}", "{\"a\":\"\\x\"}", "{\"a\":\"\\u12\"}",
            "{\"a\":\"line\nbreak\"}", "{\"a\":[1,]}", "{\"a\":1} {}", "{'a':1}",
        ] {
            #expect(!isObject(text), "\(text)")
        }
        let deep = String(repeating: "[", count: 100) + String(repeating: "]", count: 100)
        #expect(!isObject("{\"a\":\(deep)}"))
    }

    @Test("agrees with JSONSerialization on the payloads Herald builds")
    func agreesWithFoundation() throws {
        let payload = APNSPayload(
            aps: APS(alert: APSAlert(title: "Tëst \"quoted\"", body: "a/b\\c\n"), badge: 3, sound: .default),
            custom: ["data": ["list": [1, 2.5, "x", nil, true], "nested": ["k": "v"]]])
        let data = try payload.jsonData()
        #expect(data.withUnsafeBytes(JSONSyntax.isObject))
    }
}

@Suite("Simulator request validation")
struct SimulatorValidationTests {
    let key = TestSigningKey()
    let token = String(repeating: "ab", count: 32)

    func evaluate(
        _ adjust: (inout [(String, String)]) -> Void = { _ in }, body: String? = #"{"aps":{}}"#,
        authentication: inout SimulatorConnectionAuthentication, clock: HeraldClock = .system
    ) -> (status: Int, reason: String?) {
        var configuration = SimulatorConfiguration(tlsDirectory: "/nonexistent")
        configuration.keys = [key.simulatorKey]
        configuration.bundleIDs = ["com.example.app"]
        configuration.clock = clock
        let evaluator = APNSRequestEvaluator(configuration: configuration)
        var fields: [(String, String)] = [
            (":method", "POST"), (":path", "/3/device/\(token)"), (":scheme", "https"),
            ("authorization", "bearer " + key.signingKey.makeToken(issuedAt: clock.now())),
            ("apns-topic", "com.example.app"), ("apns-push-type", "alert"),
        ]
        adjust(&fields)
        var random = SimulatorRandom()
        let (verdict, _) = evaluator.evaluate(
            headers: HPACKHeaders(fields), body: body.map { ByteBuffer(string: $0) },
            authentication: &authentication, state: SimulatorState(), faults: SimulatorFaults(), random: &random)
        switch verdict {
        case .accepted: return (200, nil)
        case .rejected(let status, let reason, _): return (status, reason)
        case .hang: return (0, nil)
        }
    }

    func evaluate(_ adjust: (inout [(String, String)]) -> Void = { _ in }, body: String? = #"{"aps":{}}"#) -> (
        status: Int, reason: String?
    ) {
        var authentication = SimulatorConnectionAuthentication()
        return evaluate(adjust, body: body, authentication: &authentication)
    }

    func replacing(_ name: String, with value: String?) -> (inout [(String, String)]) -> Void {
        { fields in
            fields.removeAll { $0.0 == name }
            if let value { fields.append((name, value)) }
        }
    }

    @Test("a valid request is accepted")
    func valid() {
        #expect(evaluate().status == 200)
    }

    @Test("method, path and token checks answer Apple's reasons")
    func pathChecks() {
        #expect(evaluate(replacing(":method", with: "GET")) == (405, "MethodNotAllowed"))
        #expect(evaluate(replacing(":path", with: "/2/device/\(token)")) == (404, "BadPath"))
        #expect(evaluate(replacing(":path", with: "/3/device/")) == (400, "MissingDeviceToken"))
        #expect(evaluate(replacing(":path", with: "/3/device/xyz")) == (400, "BadDeviceToken"))
    }

    @Test("header checks answer Apple's reasons")
    func headerChecks() {
        #expect(evaluate { $0.append(("apns-topic", "com.example.app")) } == (400, "DuplicateHeaders"))
        #expect(evaluate(replacing("apns-id", with: "not-a-uuid")) == (400, "BadMessageId"))
        #expect(evaluate(replacing("apns-id", with: "8D7E3E2A-1B2C-4D5E-8F90-A1B2C3D4E5F6")).status == 200)
        #expect(evaluate(replacing("apns-topic", with: nil)) == (400, "MissingTopic"))
        #expect(evaluate(replacing("apns-topic", with: "com.other.app")) == (400, "TopicDisallowed"))
        #expect(evaluate(replacing("apns-push-type", with: "telepathy")) == (400, "InvalidPushType"))
        #expect(evaluate(replacing("apns-push-type", with: "voip")) == (400, "BadTopic"))
        #expect(evaluate(replacing("apns-priority", with: "7")) == (400, "BadPriority"))
        #expect(
            evaluate { fields in
                fields.removeAll { $0.0 == "apns-push-type" }
                fields.append(("apns-push-type", "background"))
                fields.append(("apns-priority", "10"))
            } == (400, "BadPriority"))
        #expect(evaluate(replacing("apns-expiration", with: "tomorrow")) == (400, "BadExpirationDate"))
        #expect(
            evaluate(replacing("apns-collapse-id", with: String(repeating: "c", count: 65))) == (400, "BadCollapseId"))
    }

    @Test("payload checks: empty, too large (413), not a JSON object")
    func payloadChecks() {
        #expect(evaluate(body: nil) == (400, "PayloadEmpty"))
        #expect(evaluate(body: "{\"f\":\"" + String(repeating: "x", count: 4100) + "\"}") == (413, "PayloadTooLarge"))
        #expect(evaluate(body: "[1,2]") == (400, "BadPayload"))
    }

    @Test("provider token checks: missing, forged, expired, changed too soon")
    func tokenChecks() {
        #expect(evaluate(replacing("authorization", with: nil)) == (403, "MissingProviderToken"))
        let stranger = TestSigningKey(keyID: key.signingKey.keyID, teamID: key.signingKey.teamID)
        #expect(
            evaluate(replacing("authorization", with: "bearer " + stranger.signingKey.makeToken(issuedAt: Date())))
                == (403, "InvalidProviderToken"))
        let old = key.signingKey.makeToken(issuedAt: Date().addingTimeInterval(-3601))
        #expect(evaluate(replacing("authorization", with: "bearer " + old)) == (403, "ExpiredProviderToken"))

        let clock = ManualClock(Date())
        var authentication = SimulatorConnectionAuthentication()
        #expect(evaluate(authentication: &authentication, clock: clock.clock).status == 200)
        clock.advance(by: 60)
        // A different token on the same connection a minute later: too many updates.
        #expect(evaluate(authentication: &authentication, clock: clock.clock) == (429, "TooManyProviderTokenUpdates"))
        clock.advance(by: 20 * 60)
        #expect(evaluate(authentication: &authentication, clock: clock.clock).status == 200)
    }
}

/// What a device would show: a notification that carries the collapse id (FCM: tag) of an
/// earlier one for its token replaces it.
@Suite("Simulator inbox: what a device would show")
struct SimulatorShownTests {
    static func entry(_ token: String, collapse: String?, id: String) -> SimulatorInboxEntry {
        SimulatorInboxEntry(
            deviceToken: token, apnsID: id, pushType: "alert", topic: "t", priority: 10, expiration: nil,
            collapseID: collapse, payload: Data("{}".utf8), receivedAt: Date(), replaceKey: collapse)
    }

    @Test("a resend with its first try's collapse id is not shown twice; one without it is")
    func shown() {
        let state = SimulatorState()
        state.accept(Self.entry("aa", collapse: "n1", id: "1"))
        state.accept(Self.entry("aa", collapse: "n1", id: "1"))
        state.accept(Self.entry("bb", collapse: nil, id: "2"))
        state.accept(Self.entry("bb", collapse: nil, id: "2"))
        state.accept(Self.entry("cc", collapse: "n1", id: "3"))
        state.accept(Self.entry("cc", collapse: "n2", id: "4"))
        let summary = state.inboxSummary()
        #expect(summary.total == 6)
        #expect(summary.duplicates == 3)
        #expect(summary.shown == 5)
        state.clearInbox()
        #expect(state.inboxSummary().shown == 0)
    }
}

@Suite("Simulator broadcast channels")
struct SimulatorChannelTests {
    let key = TestSigningKey()

    func request(
        _ method: String, _ path: String, _ extra: [(String, String)] = [], body: String? = nil,
        state: SimulatorState
    ) -> ChannelRequestEvaluator.Answer {
        var configuration = SimulatorConfiguration(tlsDirectory: "/nonexistent")
        configuration.keys = [key.simulatorKey]
        configuration.bundleIDs = ["com.example.app"]
        let evaluator = ChannelRequestEvaluator(apns: APNSRequestEvaluator(configuration: configuration))
        let fields: [(String, String)] =
            [
                (":method", method), (":path", path), (":scheme", "https"),
                ("authorization", "bearer " + key.signingKey.makeToken(issuedAt: Date())),
            ] + extra
        var authentication = SimulatorConnectionAuthentication()
        var random = SimulatorRandom()
        return evaluator.evaluate(
            headers: HPACKHeaders(fields), body: body.map { ByteBuffer(string: $0) }, authentication: &authentication,
            state: state, random: &random)
    }

    @Test(
        "the management API: create (policy and push type checked), read, list, delete; a bundle not the key's is refused"
    )
    func management() throws {
        let state = SimulatorState()
        let path = "/1/apps/com.example.app/channels"
        #expect(
            request("POST", path, body: #"{"message-storage-policy":2,"push-type":"LiveActivity"}"#, state: state)
                .reason == "BadRequestPayload")
        #expect(
            request("POST", path, body: #"{"message-storage-policy":0,"push-type":"Alert"}"#, state: state).reason
                == "BadRequestPayload")
        let created = request(
            "POST", path, body: #"{"message-storage-policy":1,"push-type":"LiveActivity"}"#, state: state)
        #expect(created.status == 201)
        let id = try #require(created.headers.first { $0.0 == "apns-channel-id" }?.1)
        #expect(Data(base64Encoded: id) != nil)
        let read = request("GET", path, [("apns-channel-id", id)], state: state)
        #expect(read.status == 200 && read.body == #"{"message-storage-policy":1,"push-type":"LiveActivity"}"#)
        #expect(request("GET", path, state: state).reason == "MissingChannelId")
        #expect(
            request("GET", "/1/apps/com.example.app/all-channels", state: state).body == #"{"channels":["\#(id)"]}"#)
        #expect(request("GET", "/1/apps/com.other.app/all-channels", state: state).reason == "TopicMismatch")
        #expect(request("PUT", path, state: state).reason == "MethodNotAllowed")
        #expect(request("GET", "/1/apps/com.example.app/nothing", state: state).reason == "BadPath")
        #expect(request("DELETE", path, [("apns-channel-id", id)], state: state).status == 204)
        #expect(request("DELETE", path, [("apns-channel-id", id)], state: state).reason == "ChannelNotRegistered")
    }

    @Test(
        "a broadcast is checked in Apple's order: channel id, push type, expiration, priority, channel, payload, size")
    func broadcastOrder() throws {
        let state = SimulatorState()
        let created = request(
            "POST", "/1/apps/com.example.app/channels",
            body: #"{"message-storage-policy":0,"push-type":"LiveActivity"}"#,
            state: state)
        let id = try #require(created.headers.first { $0.0 == "apns-channel-id" }?.1)
        let path = "/4/broadcasts/apps/com.example.app"
        let body = #"{"aps":{"event":"update","timestamp":1,"content-state":{}}}"#
        func broadcast(_ headers: [(String, String)], body: String? = body) -> String? {
            let answer = request("POST", path, headers, body: body, state: state)
            return answer.status == 200 ? "ok" : answer.reason
        }
        let all: [(String, String)] = [
            ("apns-channel-id", id), ("apns-push-type", "liveactivity"), ("apns-expiration", "0"),
            ("apns-priority", "10"),
        ]
        #expect(broadcast([]) == "MissingChannelId")
        #expect(broadcast([("apns-channel-id", id)]) == "MissingPushType")
        #expect(broadcast([("apns-channel-id", id), ("apns-push-type", "alert")]) == "InvalidPushType")
        #expect(
            broadcast([("apns-channel-id", id), ("apns-push-type", "liveactivity"), ("apns-expiration", "x")])
                == "BadExpirationDate")
        #expect(broadcast(Array(all.prefix(3)) + [("apns-priority", "7")]) == "BadPriority")
        #expect(broadcast([("apns-channel-id", "bm9wZQ==")] + all.dropFirst()) == "ChannelNotRegistered")
        // A channel that keeps no message takes expiration 0 only.
        #expect(broadcast([all[0], all[1], ("apns-expiration", "1800000000"), all[3]]) == "BadExpirationDate")
        #expect(broadcast(all, body: nil) == "PayloadEmpty")
        #expect(request("POST", path, all, body: String(repeating: " ", count: 5_121), state: state).status == 413)
        #expect(broadcast(all) == "ok")
        #expect(state.activities.publishes == 1)
    }
}
