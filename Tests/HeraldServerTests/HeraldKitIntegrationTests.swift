import Foundation
import HeraldKit
import HeraldKitTesting
import HeraldPayload
import HeraldTesting
import Testing

/// HeraldKit's networking against a live Herald (issue #14, "Done when"): the app registers
/// with its user token, receives a typed notification (the simulator's inbox), reports it
/// opened (the type's analytics move) and signs out (the device is gone).
@Suite("HeraldKit against a live Herald")
struct HeraldKitIntegrationTests {
    @Test("register with a user token, receive PN-02, report it opened twice (counted once), sign out; a forged user token is refused and nothing is registered")
    func appLifecycle() async throws {
        let raw = Data((0..<32).map { UInt8(($0 * 37 + 11) & 0xff) })
        try await withServer { server in
            let port = try #require(server.client.port)
            let transport = URLSessionTransport(baseURL: URL(string: "http://127.0.0.1:\(port)")!)
            let store = InMemoryKeyValueStore()
            let configuration = HeraldKitConfiguration(
                appID: "demo", clientKey: ServerHarness.client, environment: .sandbox,
                userToken: { user in ServerHarness.userToken(user, now: server.runtime.store.now) })
            let app = HeraldClient(configuration: configuration, transport: transport, store: store, deviceID: "ana-iphone")
            let token = await app.register(
                rawToken: raw, userID: "ana", attributes: DeviceAttributes(locale: "en-US", appVersion: "3.1", authorizationStatus: "authorized"))
            #expect(await app.acknowledgedToken == token)
            let devices = try await server.request(.get, "/v1/apps/demo/users/ana/devices").body["devices"] as? [[String: Any]]
            #expect(devices?.first?["token"] as? String == token && devices?.first?["app_version"] as? String == "3.1")
            #expect(devices?.first?["environment"] as? String == "sandbox")

            let sent = try await server.send(#"{"to":{"user_ids":["ana"]},"type":"PN-02","data":{"Source":"Strava","source_id":"strava"}}"#)
            _ = try await server.settled(try #require(sent.body["id"] as? String))
            let payload = try #require(server.simulator.state.inbox(for: token).first?.payloadObject)
            // What the app's delegate hands HeraldKit: the object under the payload key.
            let appData = try #require(try JSONDecoder().decode(JSONValue.self, from: JSONSerialization.data(withJSONObject: payload["demo"] as Any)).objectValue)
            #expect(await app.reportOpened(appData: appData))
            #expect(await app.reportOpened(appData: appData))  // a cold start reports it again
            try await app.outbox.drainUntilEmpty(maximumWait: 5)
            let analytics = try await server.request(.get, "/v1/apps/demo/analytics?type=PN-02")
            let row = try #require((analytics.body["types"] as? [[String: Any]])?.first)
            #expect(row["opened"] as? Int == 1 && row["sent"] as? Int == 1, "\(row)")

            await app.signOut()
            #expect(await app.outbox.pending.isEmpty)
            let after = try await server.request(.get, "/v1/apps/demo/users/ana/devices").body["devices"] as? [[String: Any]]
            #expect(after?.isEmpty == true, "\(after ?? [])")

            // A user token for another user than the one registering: Herald refuses (403), the
            // outbox drops it (no retry changes it) and nothing is registered.
            let forged = HeraldClient(
                configuration: HeraldKitConfiguration(
                    appID: "demo", clientKey: ServerHarness.client, environment: .sandbox,
                    userToken: { _ in ServerHarness.userToken("mallory", now: server.runtime.store.now) }),
                transport: transport, store: InMemoryKeyValueStore(), deviceID: "bo-iphone")
            await forged.register(rawToken: Data(raw.reversed()), userID: "bo")
            let (acknowledged, pending) = (await forged.acknowledgedToken, await forged.outbox.pending)
            #expect(acknowledged == nil && pending.isEmpty)
            #expect((try await server.request(.get, "/v1/apps/demo/users/bo/devices").body["devices"] as? [Any])?.isEmpty == true)
        }
    }

    @Test("Cocotte through HeraldKit: the approval reaches the phone with its action tokens; commitAction(APPROVE) goes to the backend (signature checked) and answers its result; the audit has the row; a second commit is the same answer (replay), one webhook call")
    func quickAction() async throws {
        let raw = Data((0..<32).map { UInt8(($0 * 53 + 7) & 0xff) })
        try await WebhookReceiver.with { receiver, url in
            receiver.answer { _ in .init(body: #"{"approved":true}"#) }
            try await ActionTests.withCocotte(receiverURL: url) { server in
                try await EngagementTests.noon(server)
                let port = try #require(server.client.port)
                let app = HeraldClient(
                    configuration: HeraldKitConfiguration(
                        appID: "demo", clientKey: ServerHarness.client, environment: .sandbox,
                        userToken: { user in ServerHarness.userToken(user, now: server.runtime.store.now) }),
                    transport: URLSessionTransport(baseURL: URL(string: "http://127.0.0.1:\(port)")!), store: InMemoryKeyValueStore(),
                    deviceID: "ana-phone")
                let token = await app.register(rawToken: raw, userID: "ana", attributes: DeviceAttributes(name: "iPhone"))
                _ = try await ActionTests.approval(server, user: "ana", card: "c1")
                let payload = try #require(server.simulator.state.inbox(for: token).last?.payloadObject)
                let appData = try #require(
                    try JSONDecoder().decode(JSONValue.self, from: JSONSerialization.data(withJSONObject: payload["cocotte"] as Any)).objectValue)
                let result = await app.commitAction(appData: appData, action: "APPROVE", turnID: "turn-9")
                #expect(result == .committed(result: .object(["approved": .bool(true)])), "\(result)")
                #expect(result.toast.style == .success)
                #expect(receiver.calls.count == 1 && receiver.calls.allSatisfy { $0.verified })
                #expect(receiver.calls.first?.data["turn_id"] as? String == "turn-9")
                let audit = try await server.request(.get, "/v1/apps/demo/audit?user_id=ana").body["commits"] as? [[String: Any]]
                #expect(audit?.first?["action"] as? String == "APPROVE" && audit?.first?["device_id"] as? String == "ana-phone")
                let again = await app.commitAction(appData: appData, action: "APPROVE", turnID: "turn-9")
                #expect(again == result && receiver.calls.count == 1)
                #expect(await app.commitAction(appData: appData, action: "NOPE") == .notHerald)
            }
        }
    }

    @Test("the URLSession media fetcher streams a file to disk under the directory with its extension, refuses one over the cap, a 404 and a non-http scheme")
    func mediaFetcher() async throws {
        try await withServer { server in
            let port = try #require(server.client.port)
            let directory = URL(fileURLWithPath: try makeTemporaryDirectory("media"))
            let fetcher = URLSessionMediaFetcher(directory: directory)
            let file = try await fetcher.fetch(URL(string: "http://127.0.0.1:\(port)/openapi.yaml")!, maximumBytes: 1 << 20)
            #expect(file.deletingLastPathComponent().standardizedFileURL.path == directory.standardizedFileURL.path && file.pathExtension == "yaml")
            #expect(String(decoding: try Data(contentsOf: file), as: UTF8.self).hasPrefix("openapi: 3.1.0"))
            await #expect(throws: URLSessionMediaFetcher.Refused.self) {
                try await fetcher.fetch(URL(string: "http://127.0.0.1:\(port)/openapi.yaml")!, maximumBytes: 100)
            }
            await #expect(throws: URLSessionMediaFetcher.Refused.self) {
                try await fetcher.fetch(URL(string: "http://127.0.0.1:\(port)/no-such-file.png")!, maximumBytes: 1 << 20)
            }
            await #expect(throws: URLSessionMediaFetcher.Refused.self) {
                try await fetcher.fetch(URL(string: "file:///etc/passwd")!, maximumBytes: 1 << 20)
            }
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).count == 1)
        }
    }
}

