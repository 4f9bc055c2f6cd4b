package import Foundation
import HeraldCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A browser's push subscription as Herald stores it: the push service's endpoint and the
/// keys RFC 8291 encrypts to. The device's `token` is the three joined by spaces (endpoint,
/// `p256dh`, `auth` as base64url), so a subscription travels through the outbox like any token.
package struct WebPushSubscription: Sendable, Hashable {
    package var endpoint: String
    /// The 65-byte uncompressed P-256 point.
    package var p256dh: Data
    /// The 16-byte authentication secret.
    package var auth: Data
    /// The VAPID public key the browser subscribed with (its `options.applicationServerKey`),
    /// when the app said: messages are signed with that key (the current or a deprecated one).
    package var applicationServerKey: Data?

    /// A subscription's field that is wrong, and why.
    package struct Problem: Error, Equatable {
        package var field: String
        package var message: String
    }

    /// Checks a subscription as a browser's `PushSubscription.toJSON()` gives it.
    package static func parse(
        endpoint: String?, p256dh: String?, auth: String?, applicationServerKey: String? = nil
    ) throws(Problem) -> WebPushSubscription {
        guard let endpoint, !endpoint.isEmpty else { throw Problem(field: "endpoint", message: "endpoint is required") }
        guard endpoint.utf8.count <= 2_048 else {
            throw Problem(field: "endpoint", message: "endpoint is longer than 2048 bytes")
        }
        guard VAPID.audience(of: endpoint) != nil, !endpoint.contains(" ") else {
            throw Problem(field: "endpoint", message: "endpoint is an absolute https:// URL (the push service's)")
        }
        // `publicKey` checks the length, the uncompressed form and that the point is on the curve.
        guard let p256dh, let key = Base64URL.decode(p256dh), (try? WebPushEncryption.publicKey(key)) != nil
        else {
            throw Problem(
                field: "keys.p256dh",
                message: "keys.p256dh is base64url of a 65-byte uncompressed P-256 point (the subscription's key)")
        }
        guard let auth, let secret = Base64URL.decode(auth), secret.count == 16 else {
            throw Problem(field: "keys.auth", message: "keys.auth is base64url of 16 bytes (the subscription's secret)")
        }
        var serverKey: Data?
        if let applicationServerKey {
            guard let decoded = Base64URL.decode(applicationServerKey), decoded.count == 65, decoded.first == 0x04
            else {
                throw Problem(
                    field: "application_server_key",
                    message:
                        "application_server_key is base64url of the 65-byte VAPID public key the browser subscribed with"
                )
            }
            serverKey = decoded
        }
        return WebPushSubscription(endpoint: endpoint, p256dh: key, auth: secret, applicationServerKey: serverKey)
    }

    package init(endpoint: String, p256dh: Data, auth: Data, applicationServerKey: Data? = nil) {
        self.endpoint = endpoint
        self.p256dh = p256dh
        self.auth = auth
        self.applicationServerKey = applicationServerKey
    }

    /// The stored token: `endpoint p256dh auth`, and the application server key when known.
    package var token: String {
        "\(endpoint) \(Base64URL.encode(p256dh)) \(Base64URL.encode(auth))"
            + (applicationServerKey.map { " " + Base64URL.encode($0) } ?? "")
    }

    /// A stored token read back; nil for one that is not three or four valid parts.
    package init?(token: String) {
        let parts = token.split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count == 3 || parts.count == 4,
            let parsed = try? Self.parse(
                endpoint: String(parts[0]), p256dh: String(parts[1]), auth: String(parts[2]),
                applicationServerKey: parts.count == 4 ? String(parts[3]) : nil)
        else { return nil }
        self = parsed
    }

    /// What the API shows of it: the push service's origin and the start of the path (the rest,
    /// and the keys, stay in the database).
    package var display: String {
        let origin = VAPID.audience(of: endpoint) ?? ""
        let path = endpoint.dropFirst(min(endpoint.count, origin.count))
        return origin + path.prefix(9) + (path.count > 9 ? "…" : "")
    }
}

/// Where an app's web push may go: an `https` endpoint on a host of the allowed list (the known
/// push services unless `apps[].webpush.allowed_hosts` says otherwise; `*.suffix` matches
/// subdomains), and never — through a name or a literal — a loopback, private, link-local or
/// otherwise non-public address, unless the list names that address itself (a simulator on
/// loopback). An endpoint is chosen by whoever registers the device, so this is what keeps
/// Herald from being made to call into its own network.
package struct WebPushEndpointPolicy: Sendable {
    /// Chrome (FCM), Firefox, Safari and Edge (WNS).
    package static let knownHosts = [
        "fcm.googleapis.com", "updates.push.services.mozilla.com", "web.push.apple.com", "*.notify.windows.com",
    ]

    package var allowedHosts: [String]

    package init(allowedHosts: [String] = Self.knownHosts) {
        self.allowedHosts = allowedHosts.map { $0.lowercased() }
    }

    /// Why `endpoint` may not be used, or nil. The host's addresses are checked by `resolvedProblem`.
    package func problem(_ endpoint: String) -> String? {
        guard let components = URLComponents(string: endpoint), components.scheme?.lowercased() == "https",
            let rawHost = components.host, !rawHost.isEmpty
        else { return "endpoint is not an https:// URL" }
        guard components.user == nil, components.password == nil else { return "endpoint carries credentials" }
        let host = Self.bare(rawHost.lowercased())
        guard let entry = allowedEntry(host) else {
            return "endpoint's host \(host) is not a push service this app allows (apps[].webpush.allowed_hosts)"
        }
        if let address = IPAddressRange.parse(host), !address.isPublic, entry != host {
            return "endpoint's address \(host) is not public"
        }
        return nil
    }

    /// Why the addresses `host` resolves to may not be called, or nil: every one must be public,
    /// unless the allowed list names the address itself.
    package func resolvedProblem(host: String, addresses: [String]) -> String? {
        let host = Self.bare(host.lowercased())
        if IPAddressRange.parse(host) != nil { return allowedEntry(host) == host ? nil : problem("https://\(host)/") }
        guard !addresses.isEmpty else { return "\(host) does not resolve" }
        for address in addresses {
            guard let parsed = IPAddressRange.parse(address) else { return "\(host) resolves to \(address)" }
            if !parsed.isPublic && !allowedHosts.contains(address.lowercased()) {
                return "\(host) resolves to \(address), which is not a public address"
            }
        }
        return nil
    }

    private func allowedEntry(_ host: String) -> String? {
        allowedHosts.first { entry in
            if entry.hasPrefix("*.") { return host.hasSuffix(entry.dropFirst(1)) && host.count > entry.count - 1 }
            return Self.bare(entry) == host
        }.map(Self.bare)
    }

    /// A host without IPv6 brackets.
    private static func bare(_ host: String) -> String {
        host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
    }
}

/// An IPv4 or IPv6 address, to tell public ones from the rest.
package enum IPAddressRange: Sendable, Equatable {
    case v4([UInt8])
    case v6([UInt8])

    package static func parse(_ text: String) -> IPAddressRange? {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            return .v4(withUnsafeBytes(of: &v4) { Array($0) })
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 {
            return .v6(withUnsafeBytes(of: &v6) { Array($0) })
        }
        return nil
    }

    /// Not loopback, private (RFC 1918, ULA), link-local, shared (CGNAT), unspecified,
    /// multicast, reserved or documentation space; IPv4-mapped IPv6 is judged as its IPv4.
    package var isPublic: Bool {
        switch self {
        case .v4(let b):
            guard b.count == 4 else { return false }
            switch (b[0], b[1]) {
            case (0, _), (10, _), (127, _), (169, 254), (192, 168): return false
            case (172, 16...31), (100, 64...127), (198, 18...19): return false
            case (192, 0) where b[2] == 0 || b[2] == 2: return false
            case (198, 51) where b[2] == 100, (203, 0) where b[2] == 113: return false
            case (224...255, _): return false
            default: return true
            }
        case .v6(let b):
            guard b.count == 16 else { return false }
            if b[0..<10].allSatisfy({ $0 == 0 }) && b[10] == 0xFF && b[11] == 0xFF {
                return IPAddressRange.v4(Array(b[12..<16])).isPublic
            }
            if b[0..<15].allSatisfy({ $0 == 0 }) { return false }  // :: and ::1
            if b[0] & 0xFE == 0xFC { return false }  // fc00::/7
            if b[0] == 0xFE && b[1] & 0xC0 == 0x80 { return false }  // fe80::/10
            if b[0] == 0xFF { return false }  // multicast
            if b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0D && b[3] == 0xB8 { return false }  // documentation
            return true
        }
    }
}
