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
            "retention": 3_600...31_536_000, "result_writes": 1...4,
        ]
        for (field, value) in try mapping(node, "outbox", allowed: Set(ranges.keys).union(["answer_journal"])) {
            let key = "outbox." + field
            if field == "answer_journal" {
                let text = try string(value, key)
                guard !text.isEmpty else { throw fail(value, key, "must be a directory, or off") }
                outbox.answerJournal = text == "off" ? .off : .directory(try path(value, key))
                continue
            }
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
            case "result_writes": outbox.resultWrites = number
            default: outbox.shutdownGrace = TimeInterval(number)
            }
        }
        guard outbox.retryBaseDelay <= outbox.retryMaximumDelay else {
            throw fail(node, "outbox.retry_base_delay", "must not exceed outbox.retry_max_delay")
        }
        return outbox
    }

    /// The whole configuration. With `problems`, every key is read whatever the others hold,
    /// each problem recorded (`herald config check`); without, the first one is thrown.
    func configuration(_ root: Node) throws(ConfigurationError) -> HeraldConfiguration {
        var configuration = HeraldConfiguration()
        for (name, value) in try mapping(
            root, "",
            allowed: [
                "server", "database", "outbox", "admin_key", "metrics_key", "clock", "apps", "dashboard", "limits",
                "log_format", "telemetry",
            ])
        {
            if name == "apps" {
                try apps(value, into: &configuration)
                continue
            }
            _ = try attempt { () throws(ConfigurationError) in try section(name, value, into: &configuration) }
        }
        return configuration
    }

    /// A top-level key other than `apps`.
    private func section(_ name: String, _ value: Node, into configuration: inout HeraldConfiguration)
        throws(ConfigurationError)
    {
        switch name {
        case "server":
            for (field, node) in try mapping(
                value, "server", allowed: ["host", "port", "idle_timeout", "max_connections", "tls"])
            {
                _ = try attempt { () throws(ConfigurationError) in try server(field, node, into: &configuration) }
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
        case "log_format":
            guard let format = HeraldConfiguration.LogFormat(rawValue: try string(value, "log_format")) else {
                throw fail(value, "log_format", "is text or json")
            }
            configuration.logFormat = format
        case "telemetry":
            configuration.telemetry = try telemetry(value)
        default:
            guard let setting = HeraldConfiguration.ClockSetting(rawValue: try string(value, "clock")) else {
                throw fail(value, "clock", "is system or manual")
            }
            configuration.clock = setting
        }
    }

    /// One key of `server`.
    private func server(_ field: String, _ node: Node, into configuration: inout HeraldConfiguration)
        throws(ConfigurationError)
    {
        switch field {
        case "host": configuration.host = try string(node, "server.host")
        case "tls": configuration.tls = try tls(node)
        case "idle_timeout":
            let seconds = try int(node, "server.idle_timeout")
            guard (1...3600).contains(seconds) else {
                throw fail(node, "server.idle_timeout", "must be 1–3600 seconds")
            }
            configuration.idleTimeout = seconds
        case "max_connections":
            let count = try int(node, "server.max_connections")
            guard (1...1_000_000).contains(count) else {
                throw fail(node, "server.max_connections", "must be 1 or more")
            }
            configuration.maxConnections = count
        default:
            let port = try int(node, "server.port")
            guard (0...65535).contains(port) else { throw fail(node, "server.port", "must be 0–65535") }
            configuration.port = port
        }
    }

    /// `apps`: each app read on its own, its id unique.
    private func apps(_ value: Node, into configuration: inout HeraldConfiguration) throws(ConfigurationError) {
        guard case .sequence(let apps) = value else {
            try report(fail(value, "apps", "must be a list of apps"))
            return
        }
        var seen = Set<String>()
        for (index, node) in apps.enumerated() {
            guard let app = try attempt({ () throws(ConfigurationError) in try self.app(node, "apps[\(index)]") })
            else { continue }
            guard seen.insert(app.id).inserted else {
                try report(fail(node, "apps[\(index)].id", "app \"\(app.id)\" appears twice"))
                continue
            }
            configuration.apps.append(app)
        }
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

    /// `telemetry: {otlp_endpoint, sample_ratio}`.
    func telemetry(_ node: Node) throws(ConfigurationError) -> HeraldConfiguration.Telemetry {
        var telemetry = HeraldConfiguration.Telemetry()
        for (name, value) in try mapping(node, "telemetry", allowed: ["otlp_endpoint", "sample_ratio"]) {
            let path = "telemetry." + name
            let text = try string(value, path)
            if name == "otlp_endpoint" {
                guard let url = URL(string: text), let scheme = url.scheme?.lowercased(),
                    scheme == "http" || scheme == "https", url.host?.isEmpty == false
                else {
                    throw fail(value, path, "is an http:// or https:// URL, e.g. http://otel-collector:4318")
                }
                telemetry.otlpEndpoint = text
            } else {
                guard let ratio = Double(text), (0...1).contains(ratio) else {
                    throw fail(value, path, "is a number from 0 to 1 (the share of traces recorded)")
                }
                telemetry.sampleRatio = ratio
            }
        }
        return telemetry
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
