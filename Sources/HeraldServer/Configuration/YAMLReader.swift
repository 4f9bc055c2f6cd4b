import Foundation
import HeraldCatalog
import HeraldStore
import Yams

extension YAMLReader {
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
}
