import Foundation
import HTTPTypes
import HeraldAPNs
import HeraldCore
import HeraldEngine
import HeraldFCM
import HeraldServer
import HeraldSimulator
import HeraldStore
import HeraldTesting
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing
import Tracing

/// A running Herald (live HTTP on loopback) with a temp SQLite file, wired to an in-process simulator.
struct ServerHarness {
    /// The example catalogs (`Examples/`) the seed apps' tests load.
    static let examples = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Examples")

    let client: any TestClientProtocol
    let simulator: APNSSimulator
    let runtime: HeraldRuntime
    static let admin = "admin-key-0123456789abcdef-0123456789"
    static let server = "server-key-0123456789abcdef-0123456"
    static let client = "client-key-0123456789abcdef"
    static let userTokenSecret = "user-token-secret-0123456789abcdef-0123456789"

    /// A user token for `user`, signed with the demo app's secret, valid for `lifetime`.
    static func userToken(_ user: String, lifetime: TimeInterval = 3600, now: Date = Date()) -> String {
        UserToken(userID: user, expiresAt: now.addingTimeInterval(lifetime), issuedAt: now)
            .signed(secret: Data(userTokenSecret.utf8))
    }

    func request(
        _ method: HTTPRequest.Method, _ path: String, key: String? = ServerHarness.server, userToken: String? = nil,
        json: String? = nil
    ) async throws -> (status: HTTPResponse.Status, body: [String: Any]) {
        var headers: HTTPFields = [:]
        if let key { headers[.authorization] = "Bearer \(key)" }
        if let userToken { headers[HTTPField.Name("X-Herald-User-Token")!] = userToken }
        if json != nil { headers[.contentType] = "application/json" }
        let response = try await client.execute(
            uri: path, method: method, headers: headers, body: json.map { ByteBuffer(string: $0) })
        let object = (try? JSONSerialization.jsonObject(with: Data(response.body.readableBytesView))) as? [String: Any]
        return (response.status, object ?? [:])
    }

    func register(
        _ deviceID: String, user: String, token: String, key: String = ServerHarness.client, locale: String? = nil
    ) async throws -> HTTPResponse.Status {
        let localeField = locale.map { #","locale":"\#($0)""# } ?? ""
        return try await request(
            .post, "/v1/apps/demo/devices", key: key,
            userToken: key == ServerHarness.client ? ServerHarness.userToken(user, now: runtime.store.now) : nil,
            json:
                #"{"device_id":"\#(deviceID)","user_id":"\#(user)","token":"\#(token)","environment":"sandbox"\#(localeField)}"#
        ).status
    }

    func send(_ json: String) async throws -> (status: HTTPResponse.Status, body: [String: Any]) {
        try await request(.post, "/v1/apps/demo/notifications", json: json)
    }

    /// Waits until the server has nothing left to do at this moment: its timer, outbox and (when
    /// an app has a webhook) webhook loops have each finished two passes since the call (so one
    /// began after it) and no delivery is due or being sent. What a test asserts afterwards has
    /// not merely "not happened yet": it will not happen until the clock moves.
    func settle() async throws {
        let start = runtime.passes.snapshot
        // The webhook loop runs only when an app has a webhook.
        let webhooks = runtime.apps.values.contains { $0.configuration.webhook != nil }
        for _ in 0..<1000 {
            runtime.wake.signal()
            runtime.timerWake.signal()
            runtime.webhookWake.signal()
            let now = runtime.passes.snapshot
            if now.timer >= start.timer + 2, now.outboxIdle >= start.outboxIdle + 2,
                !webhooks || now.webhook >= start.webhook + 2,
                try await runtime.store.nodes.queueDepth() == 0
            {
                return
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        Issue.record("the server did not settle within 10 s: \(runtime.passes.snapshot) against \(start)")
    }

    /// Polls a notification until nothing is queued (or 10 s pass), returning its last view.
    func settled(_ id: String) async throws -> [String: Any] {
        var last: [String: Any] = [:]
        for _ in 0..<500 {
            last = try await request(.get, "/v1/apps/demo/notifications/\(id)").body
            if let counts = last["counts"] as? [String: Int], counts["queued"] == 0 { return last }
            try await Task.sleep(for: .milliseconds(20))
        }
        Issue.record("notification \(id) did not settle: \(last)")
        return last
    }
}

/// Starts the simulator, a store in a temp file, and the server with its dispatcher. The demo
/// app uses `catalog` from Examples/ (and its payload key when `payloadKey` is nil); with a manual `clock`, the store, API and policy engine
/// read it (the APNs client keeps real time for its tokens). `beforeStart` runs once the
/// runtime exists and before any of its services starts.
func withServer(
    catalog: String = "syncwell.yaml", payloadKey: String? = "demo", clock: ManualClock? = nil,
    app adjustApp: (inout HeraldConfiguration.AppConfiguration) -> Void = { _ in },
    configure adjustConfiguration: (inout HeraldConfiguration) -> Void = { _ in },
    dispatcher: Bool = true, dispatcherStallLimit: TimeInterval = 60, healthInterval: Duration = .zero,
    testing: TestingSetup = .live, tracer: (any Tracer)? = nil,
    beforeStart: @Sendable (HeraldRuntime) async throws -> Void = { _ in },
    _ adjustSimulator: (inout SimulatorConfiguration) -> Void = { _ in },
    _ body: @escaping @Sendable (ServerHarness) async throws -> Void
) async throws {
    try await withSimulator(bundleID: "com.example.demo", adjustSimulator) { harness in
        let directory = try makeTemporaryDirectory("herald-server")
        let keyFile = directory + "/AuthKey.p8"
        try harness.key.pem.write(toFile: keyFile, atomically: true, encoding: .utf8)
        let serviceAccountFile = directory + "/sa.json"
        try TestServiceAccount.shared.json(tokenURI: harness.simulator.endpointURL + "/token")
            .write(to: URL(fileURLWithPath: serviceAccountFile))
        var configuration = HeraldConfiguration()
        configuration.adminKey = ServerHarness.admin
        configuration.databaseURL = try await TestDatabase.migratedURL("server")
        configuration.apps = [
            .init(
                id: "demo", payloadKey: payloadKey, serverKey: ServerHarness.server, clientKey: ServerHarness.client,
                userTokenSecret: ServerHarness.userTokenSecret,
                apns: .init(
                    teamID: harness.key.signingKey.teamID, keyID: harness.key.signingKey.keyID, keyFile: keyFile,
                    topic: "com.example.demo", environment: "sandbox", endpoint: harness.simulator.endpointURL,
                    caFile: harness.simulator.caFile),
                catalogFile: ServerHarness.examples.appendingPathComponent(catalog).path,
                fcm: .init(
                    serviceAccountFile: serviceAccountFile, endpoint: harness.simulator.endpointURL,
                    caFile: harness.simulator.caFile)),
            .init(id: "silent", serverKey: "silent-server-key-0123456789"),
        ]
        configuration.host = "127.0.0.1"
        configuration.port = 0
        // The tests' webhook receivers listen on loopback over plain HTTP.
        configuration.allowPlainHTTPWebhooks = true
        adjustApp(&configuration.apps[0])
        adjustConfiguration(&configuration)
        // `clock: manual` in the configuration: the clock POST /v1/dev/clock moves, as `herald serve` makes it.
        let devClock = DevClock.make(dev: false, setting: configuration.clock)
        let store = try await HeraldStore.open(
            url: configuration.databaseURL, clock: devClock?.clock ?? clock?.clock ?? .system)
        let runtime: HeraldRuntime
        do {
            runtime = try HeraldRuntime(
                configuration: configuration, store: store,
                clientAdjustment: { client in
                    client.connections = 2
                    client.retry = APNSRetryPolicy(
                        maximumAttempts: 3, baseDelay: 0.01, maximumDelay: 0.05, tooManyRequestsDelay: 0.01)
                },
                fcmAdjustment: { fcm in
                    fcm.maximumAttempts = 2
                    fcm.baseDelay = 0.01
                    fcm.quotaDelay = 0.01
                }, dispatcherStallLimit: dispatcherStallLimit, devClock: devClock, healthInterval: healthInterval,
                writeProbeInterval: healthInterval, tracer: tracer)
        } catch {
            // A configuration the runtime refuses: the store it would have owned closes here.
            await store.close()
            throw error
        }
        var outbox = configuration.outbox
        outbox.batchSize = min(outbox.batchSize, 500)
        outbox.idleInterval = .milliseconds(100)
        // A test that leaves a hung delivery behind need not wait the production grace at its end.
        outbox.shutdownGrace = min(outbox.shutdownGrace, 1)
        // What `herald serve` runs (HeraldServices), on a free port: the store and the
        // provider clients close as its services when the test ends, passed or not.
        let application = try HeraldServices.application(runtime: runtime, outbox: outbox, dispatcher: dispatcher)
        try await beforeStart(runtime)
        let apps = configuration.apps.map(\.id)
        try await application.test(testing) { client in
            try await body(ServerHarness(client: client, simulator: harness.simulator, runtime: runtime))
            // Whatever the test did, the deferred totals the triggers keep match the rows.
            for (app, figures) in try await runtime.store.nodes.deferredTotalsAgainstRows(appIDs: apps) {
                #expect(figures.totals == figures.rows, "deferred_totals for \(app) against its deferred rows")
            }
        }
    }
}
