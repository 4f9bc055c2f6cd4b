import Foundation
import HTTPTypes
import HeraldCore
import HeraldEngine
import HeraldKit
import HeraldKitTesting
import HeraldPayload
import HeraldSimulator
import HeraldStore
import HeraldTesting
import HummingbirdTesting
import Testing

/// HeraldKit's networking against a live Herald: the app registers
/// with its user token, receives a typed notification (the simulator's inbox), reports it
/// opened (the type's analytics move) and signs out (the device is gone).
@Suite("HeraldKit against a live Herald")
struct HeraldKitIntegrationTests {
    @Test(
        "register with a user token, receive PN-02, report its receipt and report it opened twice (counted once), sign out; a forged user token is refused and nothing is registered"
    )
    func appLifecycle() async throws {
        let raw = Data((0..<32).map { UInt8(($0 * 37 + 11) & 0xff) })
        try await withServer { server in
            let port = try #require(server.client.port)
            let transport = URLSessionTransport(baseURL: URL(string: "http://127.0.0.1:\(port)")!)
            let store = InMemoryKeyValueStore()
            let configuration = HeraldKitConfiguration(
                appID: "demo", clientKey: ServerHarness.client, environment: .sandbox,
                userToken: { user in ServerHarness.userToken(user, now: server.runtime.store.now) })
            let app = HeraldClient(
                configuration: configuration, transport: transport, store: store, deviceID: "ana-iphone")
            let token = await app.register(
                rawToken: raw, userID: "ana",
                attributes: DeviceAttributes(locale: "en-US", appVersion: "3.1", authorizationStatus: "authorized"))
            #expect(await app.acknowledgedToken == token)
            let devices =
                try await server.request(.get, "/v1/apps/demo/users/ana/devices").body["devices"] as? [[String: Any]]
            #expect(devices?.first?["token"] as? String == token && devices?.first?["app_version"] as? String == "3.1")
            #expect(devices?.first?["environment"] as? String == "sandbox")

            let sent = try await server.send(
                #"{"to":{"user_ids":["ana"]},"type":"PN-02","data":{"Source":"Strava","source_id":"strava"}}"#)
            _ = try await server.settled(try #require(sent.body["id"] as? String))
            let payload = try #require(server.simulator.state.inbox(for: token).first?.payloadObject)
            // What the app's delegate hands HeraldKit: the object under the payload key.
            let appData = try #require(
                try JSONDecoder().decode(
                    JSONValue.self, from: JSONSerialization.data(withJSONObject: payload["demo"] as Any)
                ).objectValue)
            #expect(await app.reportReceived(appData: appData))  // its service extension
            #expect(await app.reportOpened(appData: appData))
            #expect(await app.reportOpened(appData: appData))  // a cold start reports it again
            try await app.outbox.drainUntilEmpty(maximumWait: 5)
            let analytics = try await server.request(.get, "/v1/apps/demo/analytics?type=PN-02")
            let row = try #require((analytics.body["types"] as? [[String: Any]])?.first)
            #expect(
                row["opened"] as? Int == 1 && row["received"] as? Int == 1 && row["sent"] as? Int == 1, "\(row)")

            await app.signOut()
            #expect(await app.outbox.pending.isEmpty)
            let after =
                try await server.request(.get, "/v1/apps/demo/users/ana/devices").body["devices"] as? [[String: Any]]
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
            #expect(
                (try await server.request(.get, "/v1/apps/demo/users/bo/devices").body["devices"] as? [Any])?.isEmpty
                    == true)
        }
    }

    @Test(
        "Cocotte through HeraldKit: the approval reaches the phone with its action tokens; commitAction(APPROVE) goes to the backend (signature checked) and answers its result; the audit has the row; a second commit is the same answer (replay), one webhook call"
    )
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
                    transport: URLSessionTransport(baseURL: URL(string: "http://127.0.0.1:\(port)")!),
                    store: InMemoryKeyValueStore(),
                    deviceID: "ana-phone")
                let token = await app.register(
                    rawToken: raw, userID: "ana", attributes: DeviceAttributes(name: "iPhone"))
                _ = try await ActionTests.approval(server, user: "ana", card: "c1")
                let payload = try #require(server.simulator.state.inbox(for: token).last?.payloadObject)
                let appData = try #require(
                    try JSONDecoder().decode(
                        JSONValue.self, from: JSONSerialization.data(withJSONObject: payload["cocotte"] as Any)
                    ).objectValue)
                let result = await app.commitAction(appData: appData, action: "APPROVE", turnID: "turn-9")
                #expect(result == .committed(result: .object(["approved": .bool(true)])), "\(result)")
                #expect(result.toast.style == .success)
                #expect(receiver.calls.count == 1 && receiver.calls.allSatisfy { $0.verified })
                #expect(receiver.calls.first?.data["turn_id"] as? String == "turn-9")
                let audit =
                    try await server.request(.get, "/v1/apps/demo/audit?user_id=ana").body["commits"]
                    as? [[String: Any]]
                #expect(
                    audit?.first?["action"] as? String == "APPROVE"
                        && audit?.first?["device_id"] as? String == "ana-phone")
                let again = await app.commitAction(appData: appData, action: "APPROVE", turnID: "turn-9")
                #expect(again == result && receiver.calls.count == 1)
                #expect(await app.commitAction(appData: appData, action: "NOPE") == .notHerald)
            }
        }
    }

    @Test(
        "LucidPal's tracks on the device: HeraldClient.tracks(locale:) reads GET …/catalog/tracks (fr-CA falls back to the catalog's en), and LocalTrackScheduler plans each step at the due time Herald gives the same enrolment, across a DST change, with Herald's copy and deep links; the dormant body from data, or its fallback; offline, the last good copy"
    )
    func localTracksMatchServer() async throws {
        try await TrackTests.withLucidPal { server in
            let port = try #require(server.client.port)
            let transport = URLSessionTransport(baseURL: URL(string: "http://127.0.0.1:\(port)")!)
            let store = InMemoryKeyValueStore()
            let app = HeraldClient(
                configuration: HeraldKitConfiguration(
                    appID: "demo", clientKey: ServerHarness.client, environment: .sandbox),
                transport: transport, store: store)
            let catalog = try #require(await app.tracks(locale: "fr-CA"))
            #expect(catalog.tracks.map(\.name) == ["trial", "onboarding"])
            let trial = try #require(catalog.tracks.first)
            #expect(
                trial.steps.map(\.after) == ["2d", "5d", "7d"] && trial.steps.map(\.at) == ["10:00", "10:00", nil])

            // Three days before Paris's next DST change: day 5 at 10:00 is on the other side of it.
            let now = try #require(server.runtime.devClock?.now)
            let paris = TimeZone(identifier: "Europe/Paris")!
            var anchor = paris.nextDaylightSavingTimeTransition(after: now)!.addingTimeInterval(-3 * 86_400)
            if anchor < now {
                anchor = paris.nextDaylightSavingTimeTransition(after: now.addingTimeInterval(4 * 86_400))!
                    .addingTimeInterval(-3 * 86_400)
            }
            #expect(
                try await server.request(.put, "/v1/apps/demo/users/maya", json: #"{"time_zone":"Europe/Paris"}"#)
                    .status == .ok)
            let enrolled = try await server.request(
                .put, "/v1/apps/demo/users/maya/tracks/trial", json: #"{"anchor_at":"\#(HeraldTime.format(anchor))"}"#)
            let serverDue = try #require(enrolled.body["steps"] as? [[String: Any]]).compactMap {
                ($0["due_at"] as? String).flatMap(HeraldTime.parse)
            }
            let local = LocalTrackScheduler(scheduler: FakeLocalScheduler(), clock: ManualKitClock(now))
                .plan(trial, anchor: anchor, zone: paris, data: [:])
            #expect(TrackTests.same(local.map(\.fireDate), serverDue), "\(local.map(\.fireDate)) vs \(serverDue)")
            #expect(
                local.map(\.title) == ["Your AI is still waiting", "2 days of AI left", "Your cloud AI trial ended"])
            #expect(local.last?.appData["deep_link"] == .string("lucidpal://sheet/trial-expired"))
            // The 10:00 steps are 10:00 in Paris on both sides of the change.
            var calendar = Calendar(identifier: .gregorian)
            calendar.timeZone = paris
            #expect(local.prefix(2).allSatisfy { calendar.component(.hour, from: $0.fireDate) == 10 })
            #expect(
                paris.isDaylightSavingTime(for: local[0].fireDate) != paris.isDaylightSavingTime(for: local[1].fireDate)
            )

            let onboarding = try #require(catalog.tracks.last)
            let scheduler = LocalTrackScheduler(scheduler: FakeLocalScheduler(), clock: ManualKitClock(now))
            #expect(
                scheduler.plan(onboarding, anchor: now, zone: paris, data: ["event_count": "3"]).first?.body
                    == "You have 3 events this week. I can help you prepare for all of them.")
            #expect(
                scheduler.plan(onboarding, anchor: now, zone: paris, data: [:]).first?.body
                    == "Ask about your schedule, prep for meetings, set reminders — all from one place.")

            // Offline: the copy kept from the last answer.
            let offline = HeraldClient(
                configuration: HeraldKitConfiguration(
                    appID: "demo", clientKey: ServerHarness.client, environment: .sandbox),
                transport: URLSessionTransport(baseURL: URL(string: "http://127.0.0.1:1")!), store: store)
            #expect(await offline.tracks(locale: "fr-CA") == catalog)
        }
    }

    @Test(
        "the URLSession media fetcher streams a file to disk under the directory with its extension, refuses one over the cap, a 404 and a non-http scheme"
    )
    func mediaFetcher() async throws {
        try await withServer { server in
            let port = try #require(server.client.port)
            let directory = URL(fileURLWithPath: try makeTemporaryDirectory("media"))
            let fetcher = URLSessionMediaFetcher(directory: directory)
            let file = try await fetcher.fetch(
                URL(string: "http://127.0.0.1:\(port)/openapi.yaml")!, maximumBytes: 1 << 20)
            #expect(
                file.deletingLastPathComponent().standardizedFileURL.path == directory.standardizedFileURL.path
                    && file.pathExtension == "yaml")
            #expect(String(decoding: try Data(contentsOf: file), as: UTF8.self).hasPrefix("openapi: 3.1.0"))
            await #expect(throws: URLSessionMediaFetcher.Refused.self) {
                try await fetcher.fetch(URL(string: "http://127.0.0.1:\(port)/openapi.yaml")!, maximumBytes: 100)
            }
            await #expect(throws: URLSessionMediaFetcher.Refused.self) {
                try await fetcher.fetch(
                    URL(string: "http://127.0.0.1:\(port)/no-such-file.png")!, maximumBytes: 1 << 20)
            }
            await #expect(throws: URLSessionMediaFetcher.Refused.self) {
                try await fetcher.fetch(URL(string: "file:///etc/passwd")!, maximumBytes: 1 << 20)
            }
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).count == 1)
        }
    }
}
