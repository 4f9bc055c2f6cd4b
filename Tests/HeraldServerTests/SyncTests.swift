import Foundation
import HTTPTypes
import HeraldCatalog
import HeraldCore
import HeraldSimulator
import HeraldStore
import HeraldTesting
import Testing

/// LucidPal's silent sync: a device uploads a batch; the user's other devices get
/// a background push with the cursor, coalesced and within Apple's budget.
@Suite("Silent sync")
struct SyncTests {
    static func cursors(_ server: ServerHarness, _ token: String) -> [String] {
        server.simulator.state.inbox(for: token).compactMap {
            ($0.payloadObject?["lucidpal"] as? [String: Any])?["cursor"] as? String
        }
    }

    @Test(
        "a sync upload reaches the other two devices once (not the origin) as content-available, background, priority 5; a burst coalesces into one push after the debounce; the fourth in an hour waits for the budget"
    )
    func otherDevices() async throws {
        let tokens = makeDeviceTokens(3)
        try await TrackTests.withLucidPal { server in
            for (index, device) in ["iphone", "ipad", "mac"].enumerated() {
                #expect(try await server.register(device, user: "maya", token: tokens[index]) == .created)
            }
            func sync(_ cursor: String) async throws -> [[String: Any]] {
                let answer = try await server.request(
                    .post, "/v1/apps/demo/users/maya/sync",
                    json: #"{"origin_device_id":"iphone","cursor":"\#(cursor)"}"#)
                #expect(answer.status == .accepted)
                return answer.body["devices"] as? [[String: Any]] ?? []
            }
            let first = try await sync("c1")
            #expect(first.map { $0["device_id"] as? String } == ["ipad", "mac"])
            try await eventually {
                Self.cursors(server, tokens[1]) == ["c1"] && Self.cursors(server, tokens[2]) == ["c1"]
            }
            let push = try #require(server.simulator.state.inbox(for: tokens[1]).first)
            #expect(push.pushType == "background" && push.priority == 5)
            #expect((push.payloadObject?["aps"] as? [String: Any])?["content-available"] as? Int == 1)
            #expect((push.payloadObject?["aps"] as? [String: Any])?["alert"] == nil)
            // A burst: the next push waits for the debounce (5 s), the ones after join it.
            let second = try await sync("c2")
            #expect(second.allSatisfy { $0["coalesced"] as? Bool == false })
            for cursor in ["c3", "c4"] {
                #expect(try await sync(cursor).allSatisfy { $0["coalesced"] as? Bool == true })
            }
            try await server.settle()
            #expect(Self.cursors(server, tokens[1]) == ["c1"])
            _ = try await server.request(.post, "/v1/dev/clock", key: ServerHarness.admin, json: #"{"advance":"5s"}"#)
            try await eventually {
                Self.cursors(server, tokens[1]) == ["c1", "c4"] && Self.cursors(server, tokens[2]) == ["c1", "c4"]
            }
            _ = try await server.request(.post, "/v1/dev/clock", key: ServerHarness.admin, json: #"{"advance":"10s"}"#)
            _ = try await sync("c5")
            try await eventually { Self.cursors(server, tokens[1]).count == 3 }
            // Three in the last hour: the fourth is held until the first is an hour old.
            _ = try await server.request(.post, "/v1/dev/clock", key: ServerHarness.admin, json: #"{"advance":"10s"}"#)
            let held = try await sync("c6")
            #expect(held.allSatisfy { $0["held"] as? Bool == true })
            _ = try await server.request(.post, "/v1/dev/clock", key: ServerHarness.admin, json: #"{"advance":"30m"}"#)
            try await server.settle()
            #expect(Self.cursors(server, tokens[1]).count == 3)
            _ = try await server.request(.post, "/v1/dev/clock", key: ServerHarness.admin, json: #"{"advance":"30m"}"#)
            try await eventually {
                Self.cursors(server, tokens[1]) == ["c1", "c4", "c5", "c6"]
                    && Self.cursors(server, tokens[2]).count == 4
            }
            #expect(server.simulator.state.inbox(for: tokens[0]).isEmpty)
            for (json, field) in [
                (#"{"origin_device_id":"x"}"#, "cursor"), (#"{"cursor":""}"#, "cursor"),
                (#"{"cursor":"c","origin_device_id":""}"#, "origin_device_id"),
            ] {
                let refused = try await server.request(.post, "/v1/apps/demo/users/maya/sync", json: json)
                #expect(
                    refused.status == .badRequest
                        && (refused.body["error"] as? [String: Any])?["field"] as? String == field, "\(json)")
            }
        }
    }
}
