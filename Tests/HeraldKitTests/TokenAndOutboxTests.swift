import Foundation
import HeraldKit
import HeraldKitTesting
import HeraldPayload
import Testing

/// HeraldKit's token handling and outbox with fakes for the network, the
/// disk and the clock.
@Suite("HeraldKit tokens and outbox")
struct TokenAndOutboxTests {
    static let raw = Data((0..<32).map { UInt8($0 * 7 & 0xff) })

    static func client(
        _ transport: RecordingTransport, _ store: InMemoryKeyValueStore = InMemoryKeyValueStore(),
        clock: ManualKitClock = ManualKitClock()
    ) -> HeraldClient {
        HeraldClient(
            configuration: HeraldKitConfiguration(
                appID: "lucid", clientKey: "client-key", environment: .sandbox, userToken: { "token-for-\($0)" }),
            transport: transport, store: store, clock: clock, deviceID: "matt-iphone")
    }

    static func body(_ request: HTTPRequestSpec) -> [String: Any] {
        (request.body.flatMap { try? JSONSerialization.jsonObject(with: $0) } as? [String: Any]) ?? [:]
    }

    @Test("a token is the lowercase hex of its bytes, not Data's description; logs show 8 characters")
    func hex() {
        #expect(DeviceToken.hex(Data([0x00, 0x0f, 0xa0, 0xff])) == "000fa0ff")
        #expect(DeviceToken.hex(Self.raw).count == 64)
        #expect(DeviceToken.redacted("0123456789abcdef") == "01234567…")
    }

    @Test(
        "registered once with the client key, the user token and the build's environment; the same token again sends nothing until the heartbeat is due; a new token, user or attribute is sent"
    )
    func uploadsOnlyChanges() async throws {
        let transport = RecordingTransport()
        let clock = ManualKitClock()
        let client = Self.client(transport, clock: clock)
        let hex = await client.register(
            rawToken: Self.raw, userID: "matt", attributes: DeviceAttributes(appVersion: "2.0"))
        let first = try #require(transport.requests.first)
        #expect(first.method == "POST" && first.path == "/v1/apps/lucid/devices")
        #expect(
            first.headers["Authorization"] == "Bearer client-key"
                && first.headers["X-Herald-User-Token"] == "token-for-matt")
        #expect(first.headers["Idempotency-Key"] != nil)
        let body = Self.body(first)
        #expect(
            body["token"] as? String == hex && body["environment"] as? String == "sandbox"
                && body["device_id"] as? String == "matt-iphone")
        #expect(
            body["user_id"] as? String == "matt" && body["app_version"] as? String == "2.0"
                && body["platform"] as? String == "apns")
        #expect(await client.acknowledgedToken == hex)

        // Every launch hands the token again: nothing is sent.
        clock.advance(by: 86_400)
        await client.register(rawToken: Self.raw, userID: "matt", attributes: DeviceAttributes(appVersion: "2.0"))
        #expect(transport.requests.count == 1)
        // The heartbeat (a week) sends it again.
        clock.advance(by: 7 * 86_400)
        await client.register(rawToken: Self.raw, userID: "matt", attributes: DeviceAttributes(appVersion: "2.0"))
        #expect(transport.requests.count == 2)
        // A changed attribute, a new token: sent.
        await client.register(rawToken: Self.raw, userID: "matt", attributes: DeviceAttributes(appVersion: "2.1"))
        let fresh = Data(Self.raw.reversed())
        await client.register(rawToken: fresh, userID: "matt", attributes: DeviceAttributes(appVersion: "2.1"))
        #expect(transport.requests.count == 4)
        #expect(Self.body(transport.requests[3])["token"] as? String == DeviceToken.hex(fresh))
    }

    @Test(
        "offline: the registration waits in the outbox across a relaunch, keeps its idempotency key on every try, backs off, and a transient failure never unregisters"
    )
    func offlineOutbox() async throws {
        let transport = RecordingTransport()
        let store = InMemoryKeyValueStore()
        let clock = ManualKitClock()
        transport.answer(.offline, .status(503), then: .offline)
        let client = Self.client(transport, store, clock: clock)
        await client.register(rawToken: Self.raw, userID: "matt")
        await client.registrationFailed(RecordingTransport.Offline())
        #expect(await client.acknowledgedToken == nil)
        let waiting = await client.outbox.pending
        #expect(waiting.count == 1 && waiting.first?.attempts == 1)
        // A relaunch: a new client reads the same store; the entry is still there.
        transport.answer(.status(503), then: .status(201))
        let relaunched = Self.client(transport, store, clock: clock)
        #expect(await relaunched.outbox.pending.map(\.kind) == ["register"])
        try await relaunched.outbox.drainUntilEmpty()
        #expect(await relaunched.outbox.pending.isEmpty)
        let keys = Set(transport.requests.map { $0.headers["Idempotency-Key"] })
        #expect(keys.count == 1 && transport.requests.count == 3)
        #expect(!transport.requests.contains { $0.method == "DELETE" })
        // Waited 2 s, then 4 s: backed off.
        #expect(clock.now.timeIntervalSince(Date(timeIntervalSince1970: 1_800_000_000)) >= 6)
    }

    @Test("a refusal no retry can change (403) is dropped with a log line; 429 and 5xx are retried")
    func refusals() async throws {
        let transport = RecordingTransport()
        let logger = RecordingLogger()
        let outbox = Outbox(
            transport: transport, store: InMemoryKeyValueStore(), clock: ManualKitClock(), logger: logger)
        transport.answer(.status(429), .status(500), .status(403, #"{"error":{"field":"user_id"}}"#))
        await outbox.enqueue(kind: "register", request: HTTPRequestSpec(method: "POST", path: "/x"))
        try await outbox.drainUntilEmpty()
        let left = await outbox.pending
        #expect(transport.requests.count == 3 && left.isEmpty)
        #expect(logger.messages.contains { $0.contains("HTTP 403") && $0.contains("user_id") })
    }

    @Test(
        "sign out removes the device (after what waits; a waiting registration is replaced by the removal); the next user registers afresh"
    )
    func signOut() async throws {
        let transport = RecordingTransport()
        let client = Self.client(transport)
        await client.register(rawToken: Self.raw, userID: "matt")
        await client.signOut()
        let removal = try #require(transport.requests.last)
        #expect(removal.method == "DELETE" && removal.path == "/v1/apps/lucid/devices/matt-iphone")
        #expect(removal.headers["X-Herald-User-Token"] == "token-for-matt")
        let (user, acknowledged) = (await client.userID, await client.acknowledgedToken)
        #expect(user == nil && acknowledged == nil)
        // Offline: a registration waiting is replaced by the sign-out's removal.
        transport.answer(.offline, then: .status(200))
        let before = transport.requests.count
        await client.register(rawToken: Self.raw, userID: "ana")
        #expect(await client.outbox.pending.map(\.kind) == ["register"])
        await client.signOut()
        // The registration was tried once (offline), then replaced: only the removal went.
        #expect(transport.requests.dropFirst(before).map(\.method) == ["POST", "DELETE"])
        #expect(await client.outbox.pending.isEmpty)
    }

    @Test(
        "an open is reported once per delivery however often the app reports it; a 404 (its delivery not recorded yet) is retried; a payload without a stamp is not Herald's"
    )
    func openedOnce() async throws {
        let transport = RecordingTransport()
        let client = Self.client(transport)
        await client.register(rawToken: Self.raw, userID: "matt")
        let stamp: [String: JSONValue] = [
            "herald": .object(["n": .string("abc"), "d": .int(42)]), "entryId": .string("e1"),
        ]
        transport.answer(.status(404), then: .status(200))
        #expect(await client.reportOpened(appData: stamp))
        #expect(await client.reportOpened(appData: stamp))
        try await client.outbox.drainUntilEmpty()
        let opens = transport.requests.filter { $0.path == "/v1/apps/lucid/opened" }
        #expect(opens.count == 2)  // the 404, then the retry: one open
        #expect(
            Self.body(opens[0])["delivery_id"] as? Int == 42
                && Self.body(opens[0])["device_id"] as? String == "matt-iphone")
        #expect(await client.reportOpened(appData: ["entryId": .string("e1")]) == false)
    }

    @Test(
        "a quick action offline waits in the outbox (\"Queued — will commit on reconnect\") and commits on reconnect with the same token; a refusal names why"
    )
    func quickActionOffline() async throws {
        let transport = RecordingTransport()
        let client = Self.client(transport)
        await client.register(rawToken: Self.raw, userID: "ana")
        let card: [String: JSONValue] = [
            "herald": .object(["n": .string("n1"), "d": .int(7), "a": .object(["APPROVE": .string("tok-a")])])
        ]
        transport.answer(.offline, then: .status(200, #"{"status":"committed","result":{"ok":true}}"#))
        let offline = await client.commitAction(appData: card, action: "APPROVE")
        #expect(offline == .waitingForNetwork && offline.toast.text == "Queued — will commit on reconnect")
        try await client.outbox.drainUntilEmpty()
        let commits = transport.requests.filter { $0.path == "/v1/apps/lucid/actions" }
        #expect(commits.count == 2 && commits.allSatisfy { Self.body($0)["token"] as? String == "tok-a" })
        #expect(Set(commits.map { $0.headers["Idempotency-Key"] }).count == 1)
        transport.answer(
            .status(
                409,
                #"{"error":{"code":"resolved_elsewhere","message":"already resolved: ✓ Approved on Mac","field":"token"}}"#
            ))
        let late = await client.commitAction(
            appData: [
                "herald": .object(["n": .string("n2"), "d": .int(8), "a": .object(["APPROVE": .string("tok-b")])])
            ], action: "APPROVE")
        #expect(
            late == .refused(status: 409, message: "already resolved: ✓ Approved on Mac") && late.toast.style == .info)
    }

    @Test(
        "the app's device id changed (a reinstall restored another one): the device registered under the old id is removed before the new one registers, with the old user's token; a 404 for it counts as removed; sign-out removes both"
    )
    func retiredDeviceID() async throws {
        let transport = RecordingTransport()
        let store = InMemoryKeyValueStore()
        let first = HeraldClient(
            configuration: HeraldKitConfiguration(
                appID: "lucid", clientKey: "client-key", environment: .sandbox, userToken: { "token-for-\($0)" }),
            transport: transport, store: store, deviceID: "old-id")
        await first.register(rawToken: Self.raw, userID: "matt")
        // Relaunched with another id, offline at first: nothing is lost across the next launch.
        let second = HeraldClient(
            configuration: HeraldKitConfiguration(
                appID: "lucid", clientKey: "client-key", environment: .sandbox, userToken: { "token-for-\($0)" }),
            transport: transport, store: store, deviceID: "new-id")
        transport.answer(.offline, then: .status(404))
        let before = transport.requests.count
        await second.register(rawToken: Self.raw, userID: "matt")
        #expect(await second.outbox.pending.map(\.kind) == ["unregister", "register"])
        transport.answer(.status(404), then: .status(200))
        try await second.outbox.drainUntilEmpty()
        let sent = transport.requests.dropFirst(before)
        #expect(
            sent.map { "\($0.method) \($0.path)" } == [
                "DELETE /v1/apps/lucid/devices/old-id", "DELETE /v1/apps/lucid/devices/old-id",
                "POST /v1/apps/lucid/devices",
            ])
        #expect(sent.first?.headers["X-Herald-User-Token"] == "token-for-matt")
        #expect(Self.body(try #require(sent.last))["device_id"] as? String == "new-id")
        #expect(await second.acknowledgedToken == DeviceToken.hex(Self.raw))
        // Removed once: the next launch (same id) and sign-out do not remove the old id again.
        await second.signOut()
        #expect(transport.requests.filter { $0.path.hasSuffix("/old-id") }.count == 2)
        #expect(transport.requests.last.map { "\($0.method) \($0.path)" } == "DELETE /v1/apps/lucid/devices/new-id")

        // Signed out before the id changed: that device is already gone, nothing more is removed.
        let other = InMemoryKeyValueStore()
        let configuration = HeraldKitConfiguration(appID: "lucid", clientKey: "client-key", environment: .sandbox)
        let x = HeraldClient(configuration: configuration, transport: transport, store: other, deviceID: "x")
        await x.register(rawToken: Self.raw, userID: "ana")
        await x.signOut()
        let y = HeraldClient(configuration: configuration, transport: transport, store: other, deviceID: "y")
        await y.register(rawToken: Self.raw, userID: "ana")
        #expect(transport.requests.filter { $0.path.hasSuffix("/devices/x") }.count == 1)
    }

    @Test(
        "a quick action's commit goes through the background uploader when the client has one; the open it reports goes through the transport"
    )
    func commitThroughBackgroundUploader() async throws {
        let transport = RecordingTransport()
        let uploader = RecordingTransport()
        uploader.answer(.status(200, #"{"status":"committed","result":{"ok":true}}"#))
        let client = HeraldClient(
            configuration: HeraldKitConfiguration(
                appID: "lucid", clientKey: "client-key", environment: .sandbox, userToken: { "token-for-\($0)" }),
            transport: transport, backgroundUploader: uploader, store: InMemoryKeyValueStore(), deviceID: "ana-phone")
        await client.register(rawToken: Self.raw, userID: "ana")
        let card: [String: JSONValue] = [
            "herald": .object(["n": .string("n1"), "d": .int(7), "a": .object(["APPROVE": .string("tok-a")])])
        ]
        #expect(
            await client.commitAction(appData: card, action: "APPROVE")
                == .committed(result: .object(["ok": .bool(true)])))
        #expect(uploader.requests.map(\.path) == ["/v1/apps/lucid/actions"])
        #expect(uploader.requests.first?.headers["Authorization"] == "Bearer client-key")
        #expect(uploader.requests.first?.headers["X-Herald-User-Token"] == "token-for-ana")
        #expect(uploader.requests.first?.headers["Idempotency-Key"] != nil)
        #expect(transport.requests.map(\.path) == ["/v1/apps/lucid/devices", "/v1/apps/lucid/opened"])
    }
}
