import Foundation
package import HeraldCatalog
import HeraldStore
import Yams

/// `herald serve`'s configuration (YAML). The key names are a contract: scripts depend on them.
///
/// ```yaml
/// server: { host: 127.0.0.1, port: 8080, idle_timeout: 60, max_connections: 1000 }
/// database: { url: "sqlite://herald.sqlite" }
/// admin_key: "…"                      # or HERALD_ADMIN_KEY; at least 32 characters
/// metrics_key: "…"                    # optional: a key that may read /metrics only
/// apps:
///   - id: demo
///     payload_key: demo
///     keys: { server: "…", client: "…" }    # or a list of two for rotation: server: [old, new]
///     user_token_secret: "…"              # ≥ 32 bytes: verifies X-Herald-User-Token
///     client_registration: verified        # or unverified
///     max_devices_per_user: 20
///     apns: { team_id, key_id, key_file, topic, environment, endpoint, ca_file }
/// ```
package struct HeraldConfiguration: Sendable {
    package var host = "127.0.0.1"
    package var port = 8080
    /// Seconds an API connection may sit idle before it is closed (`server.idle_timeout`).
    package var idleTimeout = 60
    /// API connections open at once; more wait in the listen backlog (`server.max_connections`).
    package var maxConnections = 1_000
    package var databaseURL = "sqlite://herald.sqlite"
    package var adminKey: String?
    /// A key that may read `/metrics` and nothing else (the admin key may too).
    package var metricsKey: String?
    package var apps: [AppConfiguration] = []
    /// How the outbox loop claims, sends, retries and stops (`outbox.*`).
    package var outbox = DispatcherConfiguration()
    /// `server.tls`: Herald serves HTTPS itself (HTTP/1.1 and HTTP/2 by ALPN) with this
    /// certificate chain and key (PEM files, read again on SIGHUP); nil: plain HTTP behind a TLS proxy.
    package var tls: TLSFiles?
    /// `dashboard.*`: whether the dashboard is served, and where.
    package var dashboard = DashboardListener()
    /// `--dev`: cookies without `Secure` (plain HTTP on loopback), `http://` webhooks allowed.
    package var development = false
    /// Whether the dashboard's cookies are `Secure` and `__Host-` (everywhere but `--dev`).
    package var secureCookies: Bool { !development }
    /// `http://` webhook URLs outside `--dev` (the tests' receivers on loopback); never from YAML.
    package var allowPlainHTTPWebhooks = false
    /// `limits.*`: how often client-key calls may write.
    package var limits = RateLimits()
    /// `clock: manual`: the server's clock stands still until `POST /v1/dev/clock` moves it
    /// (tests); `system` (the default) is the wall clock.
    package var clock = ClockSetting.system
    /// `log_format`: `text` (one human-readable line per event, the default) or `json` (one
    /// JSON object per line). `HERALD_LOG_FORMAT` overrides it.
    package var logFormat = LogFormat.text
    /// `telemetry: {otlp_endpoint, sample_ratio}`: OpenTelemetry traces, off without an endpoint.
    package var telemetry = Telemetry()

    /// Traces exported over OTLP/HTTP (protobuf) to a collector.
    package struct Telemetry: Sendable, Equatable {
        /// The collector's OTLP/HTTP address, e.g. `http://otel-collector:4318`: spans are posted
        /// to its `/v1/traces` (a URL that ends in `/v1/traces` is used as it is). nil: no traces.
        package var otlpEndpoint: String?
        /// The share of traces that start in Herald which are recorded, 0–1. A request whose
        /// `traceparent` says sampled is always traced, one that says not sampled never is.
        package var sampleRatio = 1.0

        package init(otlpEndpoint: String? = nil, sampleRatio: Double = 1.0) {
            self.otlpEndpoint = otlpEndpoint
            self.sampleRatio = sampleRatio
        }

        package var enabled: Bool { otlpEndpoint != nil }

        /// Where spans are posted: the endpoint's `/v1/traces`.
        package var tracesURL: String? {
            guard let otlpEndpoint else { return nil }
            if otlpEndpoint.hasSuffix("/v1/traces") { return otlpEndpoint }
            return otlpEndpoint.hasSuffix("/") ? otlpEndpoint + "v1/traces" : otlpEndpoint + "/v1/traces"
        }
    }

    /// A certificate chain and its private key, PEM files.
    package struct TLSFiles: Sendable, Equatable {
        package var certFile: String
        package var keyFile: String

        package init(certFile: String, keyFile: String) {
            self.certFile = certFile
            self.keyFile = keyFile
        }
    }

    /// Where the dashboard is served (`dashboard: {enabled, host, port}`): by default on the API's
    /// listener; with `port`, on a listener of its own (e.g. loopback or an admin network) and
    /// not on the API's; `enabled: false` serves it nowhere.
    package struct DashboardListener: Sendable, Equatable {
        package var enabled = true
        /// The dashboard listener's address (default: `server.host`), used with `port`.
        package var host: String?
        /// The dashboard's own port; nil: the API's listener serves it.
        package var port: Int?

        package init(enabled: Bool = true, host: String? = nil, port: Int? = nil) {
            self.enabled = enabled
            self.host = host
            self.port = port
        }

        /// Whether the API's listener serves the dashboard.
        package var onAPIListener: Bool { enabled && port == nil }
    }

    /// Token buckets for client-key writes (registrations, opens, responses, resolves): a burst
    /// of `burst` calls, refilled at `per_minute`, counted per user and per client address.
    package struct RateLimits: Sendable, Equatable {
        package var userPerMinute = 60
        package var userBurst = 20
        package var addressPerMinute = 600
        package var addressBurst = 200

        package init() {}
    }

    package enum ClockSetting: String, Sendable {
        case system, manual
    }

    package enum LogFormat: String, Sendable {
        case text, json
    }
    /// The shortest admin or metrics key accepted.
    package static let minimumAdminKeyLength = 32
    /// The shortest app key accepted.
    package static let minimumAppKeyLength = 16

    package init() {}

    /// Loads a YAML file; relative `key_file`/`ca_file` paths are taken from the file's folder.
    package static func load(file: String) throws(ConfigurationError) -> HeraldConfiguration {
        try parse(yaml: YAMLReader.read(file: file, what: "configuration"), file: file)
    }

    /// Parses YAML text; errors name the key and the line.
    package static func parse(yaml: String, file: String) throws(ConfigurationError) -> HeraldConfiguration {
        guard let root = try YAMLReader.compose(yaml, file: file) else { return HeraldConfiguration() }
        let reader = YAMLReader(file: file, directory: (file as NSString).deletingLastPathComponent)
        let configuration = try reader.configuration(root)
        try configuration.validate(file: file)
        return configuration
    }

    /// Checks what involves several keys or the environment: key lengths, keys used twice, and
    /// verified client registration without a secret. `herald serve` runs it after the
    /// environment is applied; the runtime runs it again.
    package func validate(file: String = "configuration") throws(ConfigurationError) {
        func fail(_ key: String, _ message: String) -> ConfigurationError {
            ConfigurationError(file: file, line: nil, key: key, message: message)
        }
        var owners: [String: String] = [:]
        func claim(_ secret: String, _ key: String) throws(ConfigurationError) {
            if let owner = owners.updateValue(key, forKey: secret) {
                throw fail(key, "is the same secret as \(owner): every key and secret must be different")
            }
        }
        for (secret, key) in [(adminKey, "admin_key"), (metricsKey, "metrics_key")] {
            guard let secret else { continue }
            guard secret.count >= Self.minimumAdminKeyLength else {
                throw fail(key, "needs at least \(Self.minimumAdminKeyLength) characters (it opens every app)")
            }
            try claim(secret, key)
        }
        for (index, app) in apps.enumerated() {
            let path = "apps[\(index)]"
            for (role, keys) in [("server", app.serverKeys), ("client", app.clientKeys)] {
                guard keys.count <= 2 else { throw fail("\(path).keys.\(role)", "one key, or two while rotating") }
                for key in keys {
                    guard key.count >= Self.minimumAppKeyLength else {
                        throw fail(
                            "\(path).keys.\(role)", "API keys need at least \(Self.minimumAppKeyLength) characters")
                    }
                    try claim(key, "\(path).keys.\(role)")
                }
            }
            if let secret = app.userTokenSecret {
                guard secret.utf8.count >= UserToken.minimumSecretBytes else {
                    throw fail("\(path).user_token_secret", "needs at least \(UserToken.minimumSecretBytes) bytes")
                }
                try claim(secret, "\(path).user_token_secret")
            }
            if app.clientRegistration == .verified, !app.clientKeys.isEmpty, app.userTokenSecret == nil {
                throw fail(
                    "\(path).user_token_secret",
                    "is required while client_registration is verified (the default) and the app has a client key: client-key calls are checked against user tokens signed with it"
                )
            }
            guard app.maxDevicesPerUser >= 1 else { throw fail("\(path).max_devices_per_user", "must be 1 or more") }
            if let webhook = app.webhook, !development, !allowPlainHTTPWebhooks,
                !webhook.url.lowercased().hasPrefix("https://")
            {
                throw fail(
                    "\(path).webhook.url",
                    "must be https:// (quick replies and user ids would travel in clear; http is for --dev only)")
            }
            guard app.userTokenSecrets.count <= 2 else {
                throw fail("\(path).user_token_secret", "one secret, or two while rotating")
            }
            for (index, secret) in app.userTokenSecrets.enumerated() where index > 0 {
                guard secret.utf8.count >= UserToken.minimumSecretBytes else {
                    throw fail("\(path).user_token_secret", "needs at least \(UserToken.minimumSecretBytes) bytes")
                }
                try claim(secret, "\(path).user_token_secret")
            }
            for secret in app.actionTokenSecrets {
                guard secret.utf8.count >= 32 else {
                    throw fail("\(path).action_token_secret", "needs at least 32 bytes")
                }
                try claim(secret, "\(path).action_token_secret")
            }
        }
    }

    /// Applies `HERALD_DATABASE_URL`, `HERALD_ADMIN_KEY` and `HERALD_METRICS_KEY`.
    package mutating func applyEnvironment(_ environment: [String: String]) {
        if let url = environment["HERALD_DATABASE_URL"], !url.isEmpty { databaseURL = url }
        if let key = environment["HERALD_ADMIN_KEY"], !key.isEmpty { adminKey = key }
        if let key = environment["HERALD_METRICS_KEY"], !key.isEmpty { metricsKey = key }
    }
}
