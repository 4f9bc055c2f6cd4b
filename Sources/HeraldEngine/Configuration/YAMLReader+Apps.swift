import Foundation
import HeraldCatalog
import HeraldStore
import Yams

/// The `apps:` entries: keys, secrets, credentials, webhooks.
extension YAMLReader {
    func app(_ node: Node, _ key: String) throws(ConfigurationError) -> HeraldConfiguration.AppConfiguration {
        let fields = try mapping(
            node, key,
            allowed: [
                "id", "payload_key", "keys", "apns", "catalog", "fcm", "webpush", "user_token_secret",
                "client_registration",
                "max_devices_per_user", "sync", "webhook", "action_token_secret", "live_activities",
                "cors_origins",
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
            _ = try attempt { () throws(ConfigurationError) in try appField(name, value, key, into: &app) }
        }
        return app
    }

    /// One key of an app (`key`: `apps[N]`).
    private func appField(
        _ name: String, _ value: Node, _ key: String, into app: inout HeraldConfiguration.AppConfiguration
    ) throws(ConfigurationError) {
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
        case "live_activities":
            for (field, fieldNode) in try mapping(
                value, key + ".live_activities", allowed: ["priority_pushes_per_hour", "starts_per_device"])
            {
                let path = key + ".live_activities." + field
                let number = try int(fieldNode, path)
                guard (0...1000).contains(number) else { throw fail(fieldNode, path, "0 to 1000") }
                if field == "priority_pushes_per_hour" {
                    app.liveActivities.priorityPushesPerHour = number
                } else {
                    app.liveActivities.startsPerDevice = number
                }
            }
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
        case "webpush": app.webpush = try webpush(value, key + ".webpush")
        case "cors_origins": app.corsOrigins = try corsOrigins(value, key + ".cors_origins")
        default: break
        }
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

    /// `cors_origins`: a list of web origins, each `http(s)://host[:port]` with nothing after it,
    /// kept as a browser writes `Origin` (scheme and host in lowercase).
    func corsOrigins(_ node: Node, _ key: String) throws(ConfigurationError) -> Set<String> {
        guard case .sequence(let items) = node else { throw fail(node, key, "a list of origins") }
        var origins: Set<String> = []
        for item in items {
            let text = try string(item, key)
            guard let origin = HeraldConfiguration.AppConfiguration.origin(text) else {
                throw fail(
                    item, key,
                    "\(text.prefix(100)) is not an origin: http(s)://host[:port], no path (e.g. https://app.example.com)"
                )
            }
            origins.insert(origin)
        }
        return origins
    }

    func webpush(_ node: Node, _ key: String) throws(ConfigurationError) -> HeraldConfiguration.WebPushConfiguration {
        var keyFile: String?
        var subject: String?
        var deprecated: [String] = []
        var hosts: [String] = []
        var caFile: String?
        let allowed: Set<String> = ["vapid_key_file", "subject", "deprecated_keys", "allowed_hosts", "ca_file"]
        for (name, value) in try mapping(node, key, allowed: allowed) {
            let field = key + "." + name
            switch name {
            case "vapid_key_file": keyFile = try path(value, field)
            case "ca_file": caFile = try path(value, field)
            case "subject":
                let text = try string(value, field)
                guard text.hasPrefix("mailto:") || text.hasPrefix("https://"), !text.contains(" "),
                    !text.contains("<")
                else {
                    throw fail(value, field, "a mailto: address or an https:// URL, without spaces or <>")
                }
                subject = text
            default:
                guard case .sequence(let items) = value else { throw fail(value, field, "a list") }
                for item in items {
                    if name == "deprecated_keys" {
                        deprecated.append(try path(item, field))
                    } else {
                        let host = try string(item, field)
                        guard !host.isEmpty, !host.contains("/"), !host.contains(" ") else {
                            throw fail(item, field, "host names (or *.suffix, or an address), without scheme or path")
                        }
                        hosts.append(host)
                    }
                }
            }
        }
        guard let keyFile else { throw fail(node, key + ".vapid_key_file", "is required (herald webpush keygen)") }
        guard let subject else {
            throw fail(
                node, key + ".subject", "is required: a mailto: address or an https:// URL push services reach you at")
        }
        return HeraldConfiguration.WebPushConfiguration(
            vapidKeyFile: keyFile, subject: subject, deprecatedKeyFiles: deprecated, allowedHosts: hosts,
            caFile: caFile)
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
        let allowed: Set<String> = [
            "team_id", "key_id", "key_file", "topic", "environment", "endpoint", "ca_file", "channel_endpoint",
        ]
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
            environment: environment, endpoint: values["endpoint"], caFile: values["ca_file"],
            channelEndpoint: values["channel_endpoint"])
    }
}
