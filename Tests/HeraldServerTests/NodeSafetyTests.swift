import Foundation
import HTTPTypes
import HeraldCatalog
import HeraldCore
import HeraldEngine
import HeraldStore
import HeraldTesting
import Testing

/// What keeps one node, or one configuration, from harming the others: due work of apps a node
/// does not know waits for one that does; a pause ends with a restart; secrets rotate.
@Suite("Node safety")
struct NodeSafetyTests {
    static func content() throws -> Data {
        try JSONEncoder().encode(StoredNotificationContent(content: NotificationContent()))
    }

    @Test(
        "a node leaves the due deliveries of an app it has no configuration for; a node configured with that app takes them"
    )
    func unknownAppsWait() async throws {
        let url = try await TestDatabase.url("unknownapps")
        let store = try await HeraldStore.open(url: url)
        var configuration = HeraldConfiguration()
        configuration.apps = [.init(id: "quiet", serverKey: "server-0123456789abcdef")]
        let runtime = try HeraldRuntime(configuration: configuration, store: store)
        _ = try await store.devices.upsertDevice(
            appID: "ghost",
            DeviceRecord(deviceID: "d", userID: "u", platform: "apns", token: "abcd", environment: "production"))
        let (notification, _) = try await store.notifications.createNotification(
            appID: "ghost", id: UUID(), idempotencyKey: nil, content: try Self.content(), recipients: .all,
            excludeDeviceIDs: [], dueAt: Date())
        #expect(try await OutboxLoop(runtime: runtime).runOnce() == 0)
        #expect(try await OutboxLoop(runtime: runtime).runOnce() == 0)
        let counts = try await store.notifications.deliveryCounts(notificationID: notification.id)
        #expect((counts[.failed] ?? 0) == 0, "\(counts)")

        var other = HeraldConfiguration()
        other.apps = [.init(id: "ghost", serverKey: "server-0123456789abcdef-ghost")]
        // The other node: its own store on the same database, as another process has.
        let ownerStore = try await HeraldStore.open(url: url)
        let owner = try HeraldRuntime(configuration: other, store: ownerStore)
        #expect(try await OutboxLoop(runtime: owner).runOnce() == 1)
        let deliveries = try await store.notifications.deliveries(notificationID: notification.id, limit: 10, offset: 0)
        #expect(deliveries.first?.reason == "APNsNotConfigured")
        await ownerStore.close()
        await store.close()
    }

    @Test(
        "deliveries held for a paused provider are due again at a start, so the provider is probed at once, not after the stored pause"
    )
    func pausedDeliveriesReleased() async throws {
        let clock = ManualClock(Date(timeIntervalSince1970: 1_800_000_000))
        let store = try await HeraldStore.open(url: try await TestDatabase.url("pausedrelease"), clock: .manual(clock))
        _ = try await store.devices.upsertDevice(
            appID: "a",
            DeviceRecord(deviceID: "d", userID: "u", platform: "apns", token: "abcd", environment: "production"))
        _ = try await store.notifications.createNotification(
            appID: "a", id: UUID(), idempotencyKey: nil, content: try Self.content(), recipients: .all,
            excludeDeviceIDs: [], dueAt: clock.now)
        let claimed = try await store.outbox.claimDueDeliveries(limit: 10)
        #expect(claimed.count == 1)
        _ = try await store.outbox.recordResults(
            claimed.map {
                DeliveryResult(
                    $0, .retry(reason: "ProviderPaused", dueAt: clock.now.addingTimeInterval(600)), attempts: 0)
            })
        #expect(try await store.outbox.claimDueDeliveries(limit: 10).isEmpty)
        // Other apps' rows and other reasons are not touched.
        #expect(try await store.outbox.releasePausedDeliveries(apps: ["b"], reason: "ProviderPaused", window: 900) == 0)
        #expect(try await store.outbox.releasePausedDeliveries(apps: ["a"], reason: "Other", window: 900) == 0)
        #expect(try await store.outbox.releasePausedDeliveries(apps: ["a"], reason: "ProviderPaused", window: 900) == 1)
        #expect(try await store.outbox.claimDueDeliveries(limit: 10).count == 1)
        await store.close()
    }

    @Test(
        "user_token_secret and action_token_secret take a list of two while rotating: tokens signed with either verify; action_token_secret must differ from every other key"
    )
    func secretRotation() async throws {
        let newSecret = "new-user-token-secret-0123456789abcdef-0123456789"
        try await withServer(app: { $0.userTokenSecrets = [newSecret, ServerHarness.userTokenSecret] }) {
            (server: ServerHarness) async throws in
            let tokens = makeDeviceTokens(3)
            func register(_ device: String, _ token: String, secret: String) async throws -> Int {
                let now = server.runtime.store.now
                let userToken = UserToken(userID: "rita", expiresAt: now.addingTimeInterval(600), issuedAt: now).signed(
                    secret: Data(secret.utf8))
                return Int(
                    try await server.request(
                        .post, "/v1/apps/demo/devices", key: ServerHarness.client, userToken: userToken,
                        json:
                            #"{"device_id":"\#(device)","user_id":"rita","token":"\#(token)","environment":"sandbox"}"#
                    ).status.code)
            }
            #expect(try await register("old", tokens[0], secret: ServerHarness.userTokenSecret) == 201)
            #expect(try await register("new", tokens[1], secret: newSecret) == 201)
            #expect(
                try await register("forged", tokens[2], secret: "another-secret-0123456789abcdef-0123456789") == 401)
        }
        let yaml = """
            admin_key: "admin-key-0123456789abcdef-0123456789"
            apps:
              - id: demo
                keys: { server: "server-key-0123456789abcdef-0123", client: "client-key-0123456789abcdef" }
                user_token_secret: ["user-secret-new-0123456789abcdef-0123", "user-secret-old-0123456789abcdef-0123"]
                action_token_secret: ["action-secret-new-0123456789abcdef-01", "action-secret-old-0123456789abcdef-01"]
            """
        let parsed = try HeraldConfiguration.parse(yaml: yaml, file: "herald.yaml")
        #expect(parsed.apps[0].userTokenSecrets.count == 2 && parsed.apps[0].actionTokenSecrets.count == 2)
        #expect(throws: ConfigurationError.self) {
            try HeraldConfiguration.parse(
                yaml: yaml.replacingOccurrences(
                    of: "action-secret-old-0123456789abcdef-01", with: "admin-key-0123456789abcdef-0123456789"),
                file: "herald.yaml")
        }
        #expect(throws: ConfigurationError.self) {
            try HeraldConfiguration.parse(
                yaml: yaml.replacingOccurrences(
                    of: #""user-secret-old-0123456789abcdef-0123"]"#,
                    with: #""user-secret-old-0123456789abcdef-0123", "a-third-secret-0123456789abcdef-0123456"]"#),
                file: "herald.yaml")
        }
    }

    @Test("server.tls, dashboard and limits are read from YAML and checked; a webhook must be https outside --dev")
    func configurationKeys() throws {
        let yaml = """
            server: { host: 0.0.0.0, port: 443, tls: { cert_file: cert.pem, key_file: key.pem } }
            dashboard: { enabled: true, host: 127.0.0.1, port: 8081 }
            limits: { user_per_minute: 30, user_burst: 5, address_per_minute: 300, address_burst: 50 }
            """
        let parsed = try HeraldConfiguration.parse(yaml: yaml, file: "/etc/herald/herald.yaml")
        #expect(parsed.tls == .init(certFile: "/etc/herald/cert.pem", keyFile: "/etc/herald/key.pem"))
        #expect(
            parsed.dashboard == .init(enabled: true, host: "127.0.0.1", port: 8081) && !parsed.dashboard.onAPIListener)
        #expect(parsed.limits.userPerMinute == 30 && parsed.limits.addressBurst == 50)
        for bad in [
            "server: { tls: { cert_file: a.pem } }", "dashboard: { enabled: maybe }", "limits: { user_burst: 0 }",
            "dashboard: { port: 70000 }",
        ] {
            #expect(throws: ConfigurationError.self, "\(bad)") {
                try HeraldConfiguration.parse(yaml: bad, file: "herald.yaml")
            }
        }
        let webhook = """
            apps:
              - id: demo
                keys: { server: "server-key-0123456789abcdef-0123" }
                webhook: { url: "http://backend.internal/herald", secret: "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=" }
            """
        #expect(throws: ConfigurationError.self) { try HeraldConfiguration.parse(yaml: webhook, file: "herald.yaml") }
        var development = try HeraldConfiguration.parse(
            yaml: webhook.replacingOccurrences(of: "http://", with: "https://"), file: "herald.yaml")
        development.apps[0].webhook?.url = "http://127.0.0.1:9/herald"
        development.development = true
        try development.validate()
    }
}
