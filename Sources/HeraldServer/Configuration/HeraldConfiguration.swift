package import Foundation
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
    /// The shortest admin or metrics key accepted.
    package static let minimumAdminKeyLength = 32
    /// The shortest app key accepted.
    package static let minimumAppKeyLength = 16

    package init() {}

    /// One app: its keys, payload key and push credentials.
    package struct AppConfiguration: Sendable {
        package var id: String
        /// Custom data goes under this top-level payload key. Defaults to the catalog's
        /// `app.payload_key`, else the app id.
        package var payloadKey: String {
            didSet { payloadKeyIsExplicit = true }
        }
        /// Whether the configuration names the payload key (else the catalog's may replace it).
        package private(set) var payloadKeyIsExplicit = false
        /// Keys that may send and read (`keys.server`): one, or two while rotating.
        package var serverKeys: [String]
        /// Keys that ship in apps and may register devices (`keys.client`): one, or two while rotating.
        package var clientKeys: [String]
        /// The secrets user tokens are verified with (`user_token_secret`, ≥ 32 bytes each): one,
        /// or two while rotating (the app's backend signs with the new one; both verify).
        package var userTokenSecrets: [String] = []
        /// The first user-token secret.
        package var userTokenSecret: String? {
            get { userTokenSecrets.first }
            set { userTokenSecrets = newValue.map { [$0] } ?? [] }
        }
        /// Whether client-key calls need a user token (`client_registration`); default verified.
        package var clientRegistration: ClientRegistration = .verified
        /// Registering one more active device than this deactivates the user's least recently
        /// registered one (`max_devices_per_user`, default 20).
        package var maxDevicesPerUser = 20
        package var apns: APNSConfiguration?
        /// The notification catalog file, checked at start.
        package var catalogFile: String?
        /// FCM HTTP v1 credentials.
        package var fcm: FCMConfiguration?
        /// Silent sync to a user's other devices (`sync`): pushes to one device
        /// at least `debounce` seconds apart (the ones between coalesce into the next), at most
        /// `hourly_budget` an hour (Apple delivers 2–3 background pushes an hour reliably).
        package var syncDebounce: TimeInterval = 5
        package var syncHourlyBudget = 3
        /// Where quick-action commits and delivery events go (`webhook`).
        package var webhook: WebhookConfiguration?
        /// The keys of quick-action tokens (`action_token_secret`, ≥ 32 bytes each): the first signs,
        /// and while rotating a second still verifies; without any, a random key kept in the
        /// database for the app (shared by every node).
        package var actionTokenSecrets: [String] = []
        /// The key new action tokens are signed with, when configured.
        package var actionTokenSecret: String? {
            get { actionTokenSecrets.first }
            set { actionTokenSecrets = newValue.map { [$0] } ?? [] }
        }

        package init(
            id: String, payloadKey: String? = nil, serverKey: String? = nil, clientKey: String? = nil,
            userTokenSecret: String? = nil, apns: APNSConfiguration? = nil, catalogFile: String? = nil,
            fcm: FCMConfiguration? = nil
        ) {
            self.fcm = fcm
            self.id = id
            self.payloadKey = payloadKey ?? id
            self.payloadKeyIsExplicit = payloadKey != nil
            self.serverKeys = serverKey.map { [$0] } ?? []
            self.clientKeys = clientKey.map { [$0] } ?? []
            self.userTokenSecrets = userTokenSecret.map { [$0] } ?? []
            self.apns = apns
            self.catalogFile = catalogFile
        }
    }

    /// An app's webhook (`apps[].webhook`): Standard Webhooks, signed with `secret`.
    package struct WebhookConfiguration: Sendable {
        package var url: String
        /// `whsec_` + base64 secrets, decoded: the first, and while rotating the previous ones
        /// (each signs: the receiver accepts any signature it knows).
        package var secrets: [Data]
        /// How long the first, synchronous try of a quick action's commit waits (seconds).
        package var timeout: TimeInterval = 5
        /// The delivery events it takes besides `action.committed` (always sent): by default
        /// both `delivery.failed` and `device.deactivated`.
        package var events: Set<String> = Self.deliveryEvents

        /// The events `events` may name.
        package static let deliveryEvents: Set<String> = [
            HeraldStore.deliveryFailedEvent, HeraldStore.deviceDeactivatedEvent,
        ]

        package init(url: String, secrets: [Data], timeout: TimeInterval = 5, events: Set<String> = Self.deliveryEvents)
        {
            self.url = url
            self.secrets = secrets
            self.timeout = timeout
            self.events = events
        }

        /// A Standard Webhooks secret (`whsec_` + base64 of 24 to 64 bytes), decoded.
        package static func secret(_ text: String) -> Data? {
            guard text.hasPrefix("whsec_"), let bytes = Data(base64Encoded: String(text.dropFirst(6))),
                (24...64).contains(bytes.count)
            else { return nil }
            return bytes
        }
    }

    /// How client-key calls prove which user they speak for.
    package enum ClientRegistration: String, Sendable {
        /// Client-key calls carry a user token signed with the app's `user_token_secret`.
        case verified
        /// Client-key calls are trusted as they are (development only: the client key is public).
        case unverified
    }

    /// An app's FCM credentials: a service account key file; Google's hosts unless overridden.
    package struct FCMConfiguration: Sendable {
        package var serviceAccountFile: String
        package var endpoint: String?
        package var tokenEndpoint: String?
        package var caFile: String?

        package init(
            serviceAccountFile: String, endpoint: String? = nil, tokenEndpoint: String? = nil, caFile: String? = nil
        ) {
            self.serviceAccountFile = serviceAccountFile
            self.endpoint = endpoint
            self.tokenEndpoint = tokenEndpoint
            self.caFile = caFile
        }
    }

    /// An app's APNs credentials.
    package struct APNSConfiguration: Sendable {
        package var teamID: String
        package var keyID: String
        package var keyFile: String
        /// The bundle id.
        package var topic: String
        package var environment: String
        package var endpoint: String?
        package var caFile: String?

        package init(
            teamID: String, keyID: String, keyFile: String, topic: String, environment: String = "production",
            endpoint: String? = nil, caFile: String? = nil
        ) {
            self.teamID = teamID
            self.keyID = keyID
            self.keyFile = keyFile
            self.topic = topic
            self.environment = environment
            self.endpoint = endpoint
            self.caFile = caFile
        }
    }

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

/// A configuration problem, with where it is.
package struct ConfigurationError: Error, Sendable, CustomStringConvertible {
    package var file: String
    package var line: Int?
    package var key: String?
    package var message: String

    package var description: String {
        var location = file
        if let line { location += ":\(line)" }
        if let key { return "\(location): \(key): \(message)" }
        return "\(location): \(message)"
    }
}

/// Walks the YAML tree, keeping the path and line of every value for error messages.
struct YAMLReader {
    let file: String
    let directory: String

    /// A file's text, or an error naming it.
    static func read(file: String, what: String) throws(ConfigurationError) -> String {
        guard let text = try? String(contentsOfFile: file, encoding: .utf8) else {
            throw ConfigurationError(file: file, line: nil, key: nil, message: "cannot read the \(what) file")
        }
        return text
    }

    /// The document's root node (`nil` when empty), or an error naming the file.
    static func compose(_ yaml: String, file: String) throws(ConfigurationError) -> Node? {
        do {
            return try Yams.compose(yaml: yaml)
        } catch {
            throw ConfigurationError(file: file, line: nil, key: nil, message: "not valid YAML: \(error)")
        }
    }

    func fail(_ node: Node?, _ key: String, _ message: String) -> ConfigurationError {
        ConfigurationError(file: file, line: node?.mark?.line, key: key, message: message)
    }

    func mapping(_ node: Node, _ key: String, allowed: Set<String>) throws(ConfigurationError) -> [(String, Node)] {
        guard case .mapping(let mapping) = node else { throw fail(node, key, "must be a mapping") }
        var result: [(String, Node)] = []
        for (name, value) in mapping {
            guard let name = name.string else { throw fail(value, key, "keys must be strings") }
            let path = key.isEmpty ? name : key + "." + name
            guard allowed.contains(name) else {
                throw fail(value, path, "unknown key (expected one of: \(allowed.sorted().joined(separator: ", ")))")
            }
            result.append((name, value))
        }
        return result
    }

    func string(_ node: Node, _ key: String) throws(ConfigurationError) -> String {
        guard case .scalar(let scalar) = node else { throw fail(node, key, "must be a string") }
        return scalar.string
    }

    func int(_ node: Node, _ key: String) throws(ConfigurationError) -> Int {
        guard case .scalar(let scalar) = node, let value = Int(scalar.string) else {
            throw fail(node, key, "must be a whole number")
        }
        return value
    }

    /// `outbox.*`: whole numbers, each within a range that keeps the loop sane.
    func outbox(_ node: Node) throws(ConfigurationError) -> DispatcherConfiguration {
        var outbox = DispatcherConfiguration()
        let ranges: [String: ClosedRange<Int>] = [
            "batch_size": 1...50_000, "max_in_flight": 1...1_000_000, "max_attempts": 1...1_000,
            "retry_base_delay": 1...3_600,
            "retry_max_delay": 1...86_400, "batch_deadline": 5...3_600, "shutdown_grace": 0...300,
            "max_age": 60...2_592_000,
            "retention": 3_600...31_536_000,
        ]
        for (field, value) in try mapping(node, "outbox", allowed: Set(ranges.keys)) {
            let key = "outbox." + field
            let number = try int(value, key)
            guard let range = ranges[field], range.contains(number) else {
                throw fail(value, key, "must be \(ranges[field]!.lowerBound)–\(ranges[field]!.upperBound)")
            }
            switch field {
            case "batch_size": outbox.batchSize = number
            case "max_in_flight": outbox.maximumInFlight = number
            case "max_attempts": outbox.maximumAttempts = number
            case "retry_base_delay": outbox.retryBaseDelay = TimeInterval(number)
            case "retry_max_delay": outbox.retryMaximumDelay = TimeInterval(number)
            case "batch_deadline": outbox.batchDeadline = TimeInterval(number)
            case "max_age": outbox.maximumAge = TimeInterval(number)
            case "retention": outbox.retention = TimeInterval(number)
            default: outbox.shutdownGrace = TimeInterval(number)
            }
        }
        guard outbox.retryBaseDelay <= outbox.retryMaximumDelay else {
            throw fail(node, "outbox.retry_base_delay", "must not exceed outbox.retry_max_delay")
        }
        return outbox
    }

    func path(_ node: Node, _ key: String) throws(ConfigurationError) -> String {
        let value = try string(node, key)
        return value.hasPrefix("/") || directory.isEmpty ? value : directory + "/" + value
    }

    func configuration(_ root: Node) throws(ConfigurationError) -> HeraldConfiguration {
        var configuration = HeraldConfiguration()
        for (name, value) in try mapping(
            root, "",
            allowed: [
                "server", "database", "outbox", "admin_key", "metrics_key", "clock", "apps", "dashboard", "limits",
            ])
        {
            switch name {
            case "server":
                for (field, node) in try mapping(
                    value, "server", allowed: ["host", "port", "idle_timeout", "max_connections", "tls"])
                {
                    if field == "host" { configuration.host = try string(node, "server.host") }
                    if field == "tls" { configuration.tls = try tls(node) }
                    if field == "idle_timeout" {
                        configuration.idleTimeout = try int(node, "server.idle_timeout")
                        guard (1...3600).contains(configuration.idleTimeout) else {
                            throw fail(node, "server.idle_timeout", "must be 1–3600 seconds")
                        }
                    }
                    if field == "max_connections" {
                        configuration.maxConnections = try int(node, "server.max_connections")
                        guard (1...1_000_000).contains(configuration.maxConnections) else {
                            throw fail(node, "server.max_connections", "must be 1 or more")
                        }
                    }
                    if field == "port" {
                        let port = try int(node, "server.port")
                        guard (0...65535).contains(port) else { throw fail(node, "server.port", "must be 0–65535") }
                        configuration.port = port
                    }
                }
            case "dashboard":
                configuration.dashboard = try dashboard(value)
            case "limits":
                configuration.limits = try limits(value)
            case "database":
                for (_, node) in try mapping(value, "database", allowed: ["url"]) {
                    configuration.databaseURL = try string(node, "database.url")
                }
            case "outbox":
                configuration.outbox = try outbox(value)
            case "admin_key":
                configuration.adminKey = try string(value, "admin_key")
            case "metrics_key":
                configuration.metricsKey = try string(value, "metrics_key")
            case "clock":
                guard let setting = HeraldConfiguration.ClockSetting(rawValue: try string(value, "clock")) else {
                    throw fail(value, "clock", "is system or manual")
                }
                configuration.clock = setting
            default:
                guard case .sequence(let apps) = value else { throw fail(value, "apps", "must be a list of apps") }
                var seen = Set<String>()
                for (index, node) in apps.enumerated() {
                    let app = try self.app(node, "apps[\(index)]")
                    guard seen.insert(app.id).inserted else {
                        throw fail(node, "apps[\(index)].id", "app \"\(app.id)\" appears twice")
                    }
                    configuration.apps.append(app)
                }
            }
        }
        return configuration
    }

    /// `server.tls: {cert_file, key_file}`: both required.
    func tls(_ node: Node) throws(ConfigurationError) -> HeraldConfiguration.TLSFiles {
        var values: [String: String] = [:]
        for (name, value) in try mapping(node, "server.tls", allowed: ["cert_file", "key_file"]) {
            values[name] = try path(value, "server.tls." + name)
        }
        guard let cert = values["cert_file"] else {
            throw fail(node, "server.tls.cert_file", "is required (the certificate chain, PEM)")
        }
        guard let key = values["key_file"] else {
            throw fail(node, "server.tls.key_file", "is required (the private key, PEM)")
        }
        return HeraldConfiguration.TLSFiles(certFile: cert, keyFile: key)
    }

    /// `dashboard: {enabled, host, port}`.
    func dashboard(_ node: Node) throws(ConfigurationError) -> HeraldConfiguration.DashboardListener {
        var listener = HeraldConfiguration.DashboardListener()
        for (name, value) in try mapping(node, "dashboard", allowed: ["enabled", "host", "port"]) {
            let path = "dashboard." + name
            switch name {
            case "enabled":
                switch try string(value, path) {
                case "true": listener.enabled = true
                case "false": listener.enabled = false
                default: throw fail(value, path, "is true or false")
                }
            case "host": listener.host = try string(value, path)
            default:
                let port = try int(value, path)
                guard (0...65535).contains(port) else { throw fail(value, path, "must be 0–65535") }
                listener.port = port
            }
        }
        return listener
    }

    /// `limits: {user_per_minute, user_burst, address_per_minute, address_burst}`.
    func limits(_ node: Node) throws(ConfigurationError) -> HeraldConfiguration.RateLimits {
        var limits = HeraldConfiguration.RateLimits()
        for (name, value) in try mapping(
            node, "limits", allowed: ["user_per_minute", "user_burst", "address_per_minute", "address_burst"])
        {
            let path = "limits." + name
            let number = try int(value, path)
            guard (1...1_000_000).contains(number) else { throw fail(value, path, "must be 1–1000000") }
            switch name {
            case "user_per_minute": limits.userPerMinute = number
            case "user_burst": limits.userBurst = number
            case "address_per_minute": limits.addressPerMinute = number
            default: limits.addressBurst = number
            }
        }
        return limits
    }

    func app(_ node: Node, _ key: String) throws(ConfigurationError) -> HeraldConfiguration.AppConfiguration {
        let fields = try mapping(
            node, key,
            allowed: [
                "id", "payload_key", "keys", "apns", "catalog", "fcm", "user_token_secret", "client_registration",
                "max_devices_per_user", "sync", "webhook", "action_token_secret",
            ])
        guard let idNode = fields.first(where: { $0.0 == "id" })?.1 else {
            throw fail(node, key + ".id", "is required")
        }
        let id = try string(idNode, key + ".id")
        guard !id.isEmpty, id.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }) else {
            throw fail(idNode, key + ".id", "use letters, digits, - and _")
        }
        var app = HeraldConfiguration.AppConfiguration(id: id)
        for (name, value) in fields {
            switch name {
            case "payload_key": app.payloadKey = try string(value, key + ".payload_key")
            case "keys":
                for (kind, keyNode) in try mapping(value, key + ".keys", allowed: ["server", "client"]) {
                    let path = key + ".keys." + kind
                    let secrets = try rotating(keyNode, path, maximum: 2, "one key, or a list of two while rotating")
                    for secret in secrets where secret.count < HeraldConfiguration.minimumAppKeyLength {
                        throw fail(
                            keyNode, path,
                            "API keys need at least \(HeraldConfiguration.minimumAppKeyLength) characters")
                    }
                    if kind == "server" { app.serverKeys = secrets } else { app.clientKeys = secrets }
                }
            case "user_token_secret":
                let secrets = try rotating(
                    value, key + ".user_token_secret", maximum: 2,
                    "one secret, or a list of two while rotating (the first signs)")
                for secret in secrets where secret.utf8.count < UserToken.minimumSecretBytes {
                    throw fail(
                        value, key + ".user_token_secret", "needs at least \(UserToken.minimumSecretBytes) bytes")
                }
                app.userTokenSecrets = secrets
            case "client_registration":
                guard
                    let mode = HeraldConfiguration.ClientRegistration(
                        rawValue: try string(value, key + ".client_registration"))
                else {
                    throw fail(value, key + ".client_registration", "is verified or unverified")
                }
                app.clientRegistration = mode
            case "max_devices_per_user":
                let limit = try int(value, key + ".max_devices_per_user")
                guard limit >= 1 else { throw fail(value, key + ".max_devices_per_user", "must be 1 or more") }
                app.maxDevicesPerUser = limit
            case "sync":
                for (field, fieldNode) in try mapping(value, key + ".sync", allowed: ["debounce", "hourly_budget"]) {
                    let path = key + ".sync." + field
                    let number = try int(fieldNode, path)
                    if field == "debounce" {
                        guard (0...3600).contains(number) else { throw fail(fieldNode, path, "seconds, 0 to 3600") }
                        app.syncDebounce = TimeInterval(number)
                    } else {
                        guard (1...100).contains(number) else {
                            throw fail(fieldNode, path, "1 to 100 pushes an hour per device")
                        }
                        app.syncHourlyBudget = number
                    }
                }
            case "webhook": app.webhook = try webhook(value, key + ".webhook")
            case "action_token_secret":
                let secrets = try rotating(
                    value, key + ".action_token_secret", maximum: 2,
                    "one secret, or a list of two while rotating (the first signs)")
                for secret in secrets where secret.utf8.count < 32 {
                    throw fail(value, key + ".action_token_secret", "needs at least 32 bytes")
                }
                app.actionTokenSecrets = secrets
            case "apns": app.apns = try apns(value, key + ".apns")
            case "catalog": app.catalogFile = try path(value, key + ".catalog")
            case "fcm": app.fcm = try fcm(value, key + ".fcm")
            default: break
            }
        }
        return app
    }

    /// A secret, or a list of up to `maximum` while one is rotated out (`problem` says so).
    func rotating(_ node: Node, _ path: String, maximum: Int, _ problem: String) throws(ConfigurationError) -> [String]
    {
        guard case .sequence(let list) = node else { return [try string(node, path)] }
        guard (1...maximum).contains(list.count) else { throw fail(node, path, problem) }
        var values: [String] = []
        for item in list { values.append(try string(item, path)) }
        return values
    }

    func webhook(_ node: Node, _ key: String) throws(ConfigurationError) -> HeraldConfiguration.WebhookConfiguration {
        var url: String?
        var secrets: [Data] = []
        var timeout: TimeInterval = 5
        var events = HeraldConfiguration.WebhookConfiguration.deliveryEvents
        for (name, value) in try mapping(node, key, allowed: ["url", "secret", "timeout", "events"]) {
            let path = key + "." + name
            switch name {
            case "url":
                let text = try string(value, path)
                guard let parsed = URL(string: text), parsed.scheme == "https" || parsed.scheme == "http",
                    parsed.host?.isEmpty == false
                else {
                    throw fail(value, path, "an http(s):// URL")
                }
                url = text
            case "secret":
                let texts = try rotating(
                    value, path, maximum: 3,
                    "one secret, or a list of up to three while rotating (the first is the new one)")
                for text in texts {
                    guard let secret = HeraldConfiguration.WebhookConfiguration.secret(text) else {
                        throw fail(
                            value, path, "whsec_ followed by the base64 of 24 to 64 random bytes (Standard Webhooks)")
                    }
                    secrets.append(secret)
                }
            case "events":
                let allowed = HeraldConfiguration.WebhookConfiguration.deliveryEvents
                let named: [String]
                if case .sequence(let list) = value {
                    named = try list.map { item throws(ConfigurationError) in try string(item, path) }
                } else {
                    named = [try string(value, path)]
                }
                guard let unknown = named.first(where: { !allowed.contains($0) }) else {
                    events = Set(named)
                    continue
                }
                throw fail(
                    value, path,
                    "\(unknown) is not one of \(allowed.sorted().joined(separator: ", ")) (action.committed is always sent)"
                )
            default:
                let seconds = try int(value, path)
                guard (1...5).contains(seconds) else { throw fail(value, path, "seconds, 1 to 5") }
                timeout = TimeInterval(seconds)
            }
        }
        guard let url else { throw fail(node, key + ".url", "is required") }
        guard !secrets.isEmpty else {
            throw fail(node, key + ".secret", "is required: the receiver checks every call's signature with it")
        }
        return HeraldConfiguration.WebhookConfiguration(url: url, secrets: secrets, timeout: timeout, events: events)
    }

    func fcm(_ node: Node, _ key: String) throws(ConfigurationError) -> HeraldConfiguration.FCMConfiguration {
        var values: [String: String] = [:]
        let allowed: Set<String> = ["service_account_file", "endpoint", "token_endpoint", "ca_file"]
        for (name, value) in try mapping(node, key, allowed: allowed) {
            values[name] =
                name.hasSuffix("_file") ? try path(value, key + "." + name) : try string(value, key + "." + name)
            if name.hasSuffix("endpoint"), !(values[name]!.hasPrefix("https://")) {
                throw fail(value, key + "." + name, "an https:// URL")
            }
        }
        guard let file = values["service_account_file"] else {
            throw fail(node, key + ".service_account_file", "is required")
        }
        return HeraldConfiguration.FCMConfiguration(
            serviceAccountFile: file, endpoint: values["endpoint"], tokenEndpoint: values["token_endpoint"],
            caFile: values["ca_file"])
    }

    func apns(_ node: Node, _ key: String) throws(ConfigurationError) -> HeraldConfiguration.APNSConfiguration {
        var values: [String: String] = [:]
        var nodes: [String: Node] = [:]
        let allowed: Set<String> = ["team_id", "key_id", "key_file", "topic", "environment", "endpoint", "ca_file"]
        for (name, value) in try mapping(node, key, allowed: allowed) {
            values[name] =
                name.hasSuffix("_file") ? try path(value, key + "." + name) : try string(value, key + "." + name)
            nodes[name] = value
        }
        for required in ["team_id", "key_id", "key_file", "topic"] where values[required] == nil {
            throw fail(node, key + "." + required, "is required")
        }
        let environment = values["environment"] ?? "production"
        guard environment == "production" || environment == "sandbox" else {
            throw fail(nodes["environment"], key + ".environment", "is production or sandbox")
        }
        return HeraldConfiguration.APNSConfiguration(
            teamID: values["team_id"]!, keyID: values["key_id"]!, keyFile: values["key_file"]!, topic: values["topic"]!,
            environment: environment, endpoint: values["endpoint"], caFile: values["ca_file"])
    }
}
