import Foundation
import HTTPTypes
import HeraldEngine
import HeraldSimulator
import HeraldTesting
import Testing

/// The contract between the server and HeraldKit: payloads the server delivers,
/// taken from the simulator's inbox, with their per-delivery ids made constant, must equal the
/// fixtures under Tests/Fixtures/payloads/ — which HeraldKit's tests decode. A change to what the
/// server sends fails here until the fixture is rewritten (HERALD_UPDATE_FIXTURES=1), and then
/// HeraldKit's tests read the new shape.
@Suite("Payload fixtures shared with HeraldKit")
struct PayloadFixtureTests {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/payloads")

    /// The payload with its ids constant: `herald.n` the zero UUID, `herald.d` 1, each action
    /// token `TOKEN-<ACTION>`; FCM's token `FCM-TOKEN`.
    static func normalized(_ value: Any) -> Any {
        guard var object = value as? [String: Any] else {
            if let array = value as? [Any] { return array.map(normalized) }
            return value
        }
        for (key, member) in object {
            if key == "herald", var stamp = member as? [String: Any] {
                stamp["n"] = "00000000-0000-0000-0000-000000000000"
                stamp["d"] = 1
                if let tokens = stamp["a"] as? [String: Any] {
                    stamp["a"] = Dictionary(uniqueKeysWithValues: tokens.keys.map { ($0, "TOKEN-\($0)") })
                }
                object[key] = stamp
            } else if key == "herald", let text = member as? String,
                let parsed = try? JSONSerialization.jsonObject(with: Data(text.utf8))
            {
                // FCM: the stamp is a JSON string in the data.
                let stamp = normalized(["herald": parsed]) as! [String: Any]
                let data = try! JSONSerialization.data(withJSONObject: stamp["herald"]!, options: [.sortedKeys])
                object[key] = String(decoding: data, as: UTF8.self)
            } else if key == "token", member is String, object["data"] != nil {
                object[key] = "FCM-TOKEN"
            } else {
                object[key] = normalized(member)
            }
        }
        return object
    }

    static func check(_ name: String, _ payload: [String: Any]) throws {
        let data = try JSONSerialization.data(
            withJSONObject: normalized(payload), options: [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes])
        let file = directory.appendingPathComponent(name)
        if ProcessInfo.processInfo.environment["HERALD_UPDATE_FIXTURES"] == "1" {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            try (data + Data("\n".utf8)).write(to: file)
            return
        }
        let stored = try Data(contentsOf: file)
        #expect(
            String(decoding: stored, as: UTF8.self) == String(decoding: data, as: UTF8.self) + "\n",
            "the server's \(name) changed: rewrite the fixture with HERALD_UPDATE_FIXTURES=1 swift test --filter PayloadFixture and check HeraldKit's tests"
        )
    }

    @Test(
        "Cocotte's approval (APNs, with action tokens), Lucid's comment (APNs) and SyncWell's PN-02 (FCM) as the server delivers them"
    )
    func fixtures() async throws {
        let tokens = makeDeviceTokens(2)
        try await withServer(catalog: "cocotte.yaml", payloadKey: nil, configure: { $0.clock = .manual }) { server in
            try await EngagementTests.noon(server)
            #expect(try await server.register("ana-phone", user: "ana", token: tokens[0]) == .created)
            _ = try await ActionTests.approval(server, user: "ana", card: "c1")
            try Self.check(
                "cocotte-approval.apns.json",
                try #require(server.simulator.state.inbox(for: tokens[0]).last?.payloadObject))
        }
        try await withServer(catalog: "lucid.yaml", payloadKey: nil) { server in
            #expect(try await server.register("matt-iphone", user: "matt", token: tokens[1]) == .created)
            let sent = try await server.send(
                #"{"to":{"user_ids":["matt"]},"type":"library_comment","data":{"comment":"Good to know.","entryId":"e42","commentId":"c7"}}"#
            )
            _ = try await server.settled(try #require(sent.body["id"] as? String))
            try Self.check(
                "lucid-comment.apns.json",
                try #require(server.simulator.state.inbox(for: tokens[1]).last?.payloadObject))
        }
        try await withServer { server in
            let android = try await server.request(
                .post, "/v1/apps/demo/devices",
                json: #"{"device_id":"pixel","user_id":"ana","platform":"fcm","token":"fcm:Pixel-Token_1"}"#)
            #expect(android.status == .created)
            let sent = try await server.send(
                #"{"to":{"user_ids":["ana"]},"type":"PN-02","data":{"Source":"Strava","source_id":"strava"}}"#)
            _ = try await server.settled(try #require(sent.body["id"] as? String))
            try Self.check(
                "syncwell-sync-error.fcm.json",
                try #require(server.simulator.state.inbox(for: "fcm:Pixel-Token_1").last?.payloadObject))
        }
    }
}
