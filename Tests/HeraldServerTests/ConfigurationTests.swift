import Foundation
import HeraldCatalog
import HeraldCore
import HeraldEngine
import HeraldStore
import HeraldTesting
import Testing

@Suite("Configuration")
struct ConfigurationTests {
    @Test("a configuration error names the key and the line")
    func configurationErrors() throws {
        let yaml = """
            server: { host: 127.0.0.1, port: 8080 }
            apps:
              - id: demo
                keys: { server: "short" }
            """
        do {
            _ = try HeraldConfiguration.parse(yaml: yaml, file: "herald.yaml")
            Issue.record("accepted a short key")
        } catch {
            #expect(error.key == "apps[0].keys.server")
            #expect(error.line == 4)
            #expect(error.description.hasPrefix("herald.yaml:4: apps[0].keys.server"))
        }
        #expect(throws: ConfigurationError.self) {
            try HeraldConfiguration.parse(yaml: "server: { prot: 1 }", file: "x.yaml")
        }
        #expect(throws: ConfigurationError.self) {
            try HeraldConfiguration.parse(yaml: "apps:\n  - id: a\n    apns: { team_id: T }\n", file: "x.yaml")
        }
    }

    @Test("telemetry: off by default; otlp_endpoint and sample_ratio parse; a bad value names its key")
    func telemetryConfiguration() throws {
        #expect(try HeraldConfiguration.parse(yaml: "server: { port: 1 }", file: "x.yaml").telemetry.enabled == false)
        let telemetry = try HeraldConfiguration.parse(
            yaml: "telemetry: { otlp_endpoint: \"http://collector:4318\", sample_ratio: 0.25 }", file: "x.yaml"
        ).telemetry
        #expect(telemetry.enabled)
        #expect(telemetry.sampleRatio == 0.25)
        #expect(telemetry.tracesURL == "http://collector:4318/v1/traces")
        let explicit = HeraldConfiguration.Telemetry(otlpEndpoint: "https://c.example/otlp/v1/traces")
        #expect(explicit.tracesURL == "https://c.example/otlp/v1/traces")
        #expect(HeraldConfiguration.Telemetry(otlpEndpoint: "http://c:4318/").tracesURL == "http://c:4318/v1/traces")
        for (yaml, key) in [
            ("telemetry: { otlp_endpoint: \"collector:4318\" }", "telemetry.otlp_endpoint"),
            ("telemetry: { otlp_endpoint: \"ftp://collector\" }", "telemetry.otlp_endpoint"),
            ("telemetry: { sample_ratio: 2 }", "telemetry.sample_ratio"),
            ("telemetry: { sample_ratio: nan }", "telemetry.sample_ratio"),
            ("telemetry: { sample_ratio: half }", "telemetry.sample_ratio"),
            ("telemetry: { endpoint: \"http://c:4318\" }", "telemetry.endpoint"),
        ] {
            do {
                _ = try HeraldConfiguration.parse(yaml: yaml, file: "x.yaml")
                Issue.record("accepted \(yaml)")
            } catch {
                #expect(error.key == key, "\(yaml)")
            }
        }
    }

    @Test("the documented configuration parses, relative key files resolve beside it, environment overrides")
    func configurationContract() throws {
        let yaml = """
            server: { host: 0.0.0.0, port: 9090 }
            database: { url: "sqlite://herald.sqlite" }
            admin_key: "admin-0123456789abcdef-0123456789abcdef"
            metrics_key: "metrics-0123456789abcdef-0123456789abcdef"
            apps:
              - id: demo
                payload_key: lucid
                keys: { server: "server-0123456789abcdef", client: "client-0123456789abcdef" }
                user_token_secret: "user-token-secret-0123456789abcdef"
                client_registration: verified
                max_devices_per_user: 5
                apns: { team_id: "T", key_id: "K", key_file: "AuthKey.p8", topic: "com.example.demo",
                        environment: sandbox, endpoint: "https://127.0.0.1:8443", ca_file: "sim-ca.pem" }
            """
        var configuration = try HeraldConfiguration.parse(yaml: yaml, file: "/etc/herald/herald.yaml")
        #expect(configuration.host == "0.0.0.0")
        #expect(configuration.port == 9090)
        let app = try #require(configuration.apps.first)
        #expect(app.payloadKey == "lucid")
        #expect(app.apns?.keyFile == "/etc/herald/AuthKey.p8")
        #expect(app.apns?.caFile == "/etc/herald/sim-ca.pem")
        #expect(app.apns?.environment == "sandbox")
        #expect(app.userTokenSecret == "user-token-secret-0123456789abcdef")
        #expect(app.clientRegistration == .verified)
        #expect(app.maxDevicesPerUser == 5)
        #expect(configuration.metricsKey == "metrics-0123456789abcdef-0123456789abcdef")
        configuration.applyEnvironment([
            "HERALD_DATABASE_URL": "sqlite:///tmp/x.sqlite", "HERALD_ADMIN_KEY": "env-admin-key-0123",
        ])
        #expect(configuration.databaseURL == "sqlite:///tmp/x.sqlite")
        #expect(configuration.adminKey == "env-admin-key-0123")
        // A short admin key from the environment is refused before the server starts.
        #expect(throws: ConfigurationError.self) { try configuration.validate() }
    }

    @Test("an app without credentials says why APNs is off, and its deliveries fail visibly")
    func noCredentials() async throws {
        let store = try await HeraldStore.open(url: try await TestDatabase.url("nocredentials"))
        var configuration = HeraldConfiguration()
        configuration.apps = [.init(id: "quiet", serverKey: "server-0123456789abcdef")]
        let runtime = try HeraldRuntime(configuration: configuration, store: store)
        #expect(runtime.apps["quiet"]?.apnsDisabledReason == "no credentials")
        _ = try await store.devices.upsertDevice(
            appID: "quiet",
            DeviceRecord(deviceID: "d", userID: "u", platform: "apns", token: "abcd", environment: "production"))
        let (notification, _) = try await store.notifications.createNotification(
            appID: "quiet", id: UUID(), idempotencyKey: nil,
            content: try JSONEncoder().encode(StoredNotificationContent(content: NotificationContent())),
            recipients: .all, excludeDeviceIDs: [], dueAt: Date())
        #expect(try await OutboxLoop(runtime: runtime).runOnce() == 1)
        let deliveries = try await store.notifications.deliveries(notificationID: notification.id, limit: 10, offset: 0)
        #expect(deliveries.first?.status == .failed)
        #expect(deliveries.first?.reason == "APNsNotConfigured")
        await store.close()
    }

    @Test("an app's catalog is loaded and checked at start; a bad one stops the start with file and line")
    func catalogAtStart() async throws {
        let directory = try makeTemporaryDirectory("herald-catalog")
        let bad = directory + "/bad.yaml"
        try "types:\n  a:\n    copy:\n      en: { title: \"Hi {who}\" }\n".write(
            toFile: bad, atomically: true, encoding: .utf8)
        let yaml = "apps:\n  - id: demo\n    catalog: bad.yaml\n"
        let configuration = try HeraldConfiguration.parse(yaml: yaml, file: directory + "/herald.yaml")
        #expect(configuration.apps.first?.catalogFile == bad)
        let store = try await HeraldStore.open(url: "sqlite://:memory:")
        do {
            _ = try HeraldRuntime(configuration: configuration, store: store)
            Issue.record("a bad catalog was accepted")
        } catch {
            #expect(error.file == bad)
            #expect(error.line == 4)
            #expect(error.key == "types.a.copy.en.title")
        }
        await store.close()
    }
}
