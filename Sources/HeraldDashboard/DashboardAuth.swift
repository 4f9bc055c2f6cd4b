import Crypto
import Foundation
import HeraldAPI
import HeraldCore
import HeraldEngine

/// Who signed in to the dashboard: the admin key sees every app; an app's server key sees that
/// app only. Client keys cannot sign in.
enum DashboardRole: Sendable, Equatable {
    case admin
    case app(String)

    /// Whether this role may see `appID`.
    func sees(_ appID: String) -> Bool {
        switch self {
        case .admin: true
        case .app(let id): id == appID
        }
    }
}

/// A signed-in dashboard session, carried in a cookie and checked on every request, so any node
/// of a cluster accepts it: `v1.<role>.<app>.<expires>.<nonce>.<mac>` (the app id in base64url,
/// the expiry in whole Unix seconds). The MAC is HMAC-SHA256 under a key made by HKDF from the
/// deployment's random secret (kept in the database) salted with a digest of the key used to
/// sign in: a cookie says nothing about the API key even to an offline guesser, and rotating
/// that key still ends its sessions. The MAC is checked over the text received before anything
/// in it is parsed. Sign-outs are stored in the database.
struct DashboardSession: Sendable, Equatable {
    static let lifetime: Int64 = 12 * 3600
    /// The shortest key that may sign in: the dashboard is reached by people, from browsers.
    static let minimumKeyLength = 32

    /// The session cookie's name: `__Host-` prefixed (Secure, `Path=/`, no domain) unless the
    /// cookies go over plain HTTP (`--dev`).
    static func cookie(secure: Bool) -> String { secure ? "__Host-herald_session" : "herald_session" }
    /// The login form's token cookie.
    static func loginCookie(secure: Bool) -> String { secure ? "__Host-herald_login" : "herald_login" }

    var role: DashboardRole
    /// Unix seconds.
    var expires: Int64
    var nonce: String
    /// The MAC key of this session (derived; never rendered).
    fileprivate var key: SymmetricKey

    static func == (left: DashboardSession, right: DashboardSession) -> Bool {
        left.role == right.role && left.expires == right.expires && left.nonce == right.nonce
    }

    var expiresAt: Date { Date(timeIntervalSince1970: TimeInterval(expires)) }

    /// A new session for `key`, or nil when it is no dashboard key (unknown, a client key, or
    /// shorter than `minimumKeyLength`).
    static func signIn(key: String, configuration: HeraldConfiguration, secret: SymmetricKey, now: Date)
        -> DashboardSession?
    {
        let key = key.trimmingCharacters(in: .whitespacesAndNewlines)
        guard key.count >= minimumKeyLength else { return nil }
        let nonce = randomToken()
        let expires = Int64(clamping: Int(now.timeIntervalSince1970.rounded(.down))) + lifetime
        var found: DashboardSession?
        // Every candidate is compared (constant time each), so timing does not tell which matched.
        if let admin = configuration.adminKey, HeraldAPI.constantTimeEquals(admin, key) {
            found = DashboardSession(role: .admin, expires: expires, nonce: nonce, key: derive(secret, admin))
        }
        for app in configuration.apps {
            for server in app.serverKeys where HeraldAPI.constantTimeEquals(server, key) && found == nil {
                found = DashboardSession(
                    role: .app(app.id), expires: expires, nonce: nonce, key: derive(secret, server))
            }
        }
        return found
    }

    /// The session a cookie carries, when its MAC holds under a key that is still configured and
    /// it has not expired. The MAC is checked before the expiry is read, and the expiry is digits
    /// only, at most `lifetime` ahead.
    static func verify(_ value: String, configuration: HeraldConfiguration, secret: SymmetricKey, now: Date)
        -> DashboardSession?
    {
        guard value.utf8.count <= 512 else { return nil }
        let parts = value.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 6, parts[0] == "v1" else { return nil }
        let body = parts[0..<5].joined(separator: ".")
        let sent = String(parts[5])
        let candidates: [(DashboardRole, String)]
        switch parts[1] {
        case "admin":
            guard parts[2] == "-" else { return nil }
            candidates = configuration.adminKey.map { [(.admin, $0)] } ?? []
        case "app":
            guard let id = Base64URL.decode(parts[2]).flatMap({ String(validating: $0, as: UTF8.self) }),
                let app = configuration.apps.first(where: { $0.id == id })
            else { return nil }
            candidates = app.serverKeys.map { (.app(app.id), $0) }
        default: return nil
        }
        var matched: (DashboardRole, SymmetricKey)?
        for (role, candidate) in candidates {
            let key = derive(secret, candidate)
            if HeraldAPI.constantTimeEquals(sign("session|" + body, key: key), sent) && matched == nil {
                matched = (role, key)
            }
        }
        guard let (role, key) = matched, let expires = DecimalText.int64(parts[3], maximumDigits: 12) else {
            return nil
        }
        let seconds = Int64(clamping: Int(now.timeIntervalSince1970.rounded(.down)))
        guard seconds < expires, expires <= seconds + lifetime + 60 else { return nil }
        return DashboardSession(role: role, expires: expires, nonce: String(parts[4]), key: key)
    }

    /// 16 random bytes in base64url: a session's nonce, the login form's token.
    static func randomToken() -> String {
        Base64URL.encode((0..<16).map { _ in UInt8.random(in: .min ... .max) })
    }

    /// The cookie's value.
    var value: String { body + "." + Self.sign("session|" + body, key: key) }

    /// The token every form of this session carries.
    var csrf: String { Self.sign("csrf|" + nonce, key: key) }

    private var body: String {
        switch role {
        case .admin: "v1.admin.-.\(expires).\(nonce)"
        case .app(let id): "v1.app.\(Base64URL.encode(Data(id.utf8))).\(expires).\(nonce)"
        }
    }

    /// The login form's token: `<expires>.<nonce>.<mac>` under the deployment's secret, valid an
    /// hour. The sign-in checks the form's copy equals the cookie's and the MAC holds, so a
    /// script cannot choose any equal pair.
    static func loginToken(secret: SymmetricKey, now: Date) -> String {
        let expires = Int64(clamping: Int(now.timeIntervalSince1970.rounded(.down))) + 3600
        let body = "\(expires).\(randomToken())"
        return body + "." + sign("login|" + body, key: secret)
    }

    /// Whether `token` is a login token this deployment made that has not expired.
    static func checkLoginToken(_ token: String, secret: SymmetricKey, now: Date) -> Bool {
        guard token.utf8.count <= 128 else { return false }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { return false }
        let body = parts[0] + "." + parts[1]
        guard HeraldAPI.constantTimeEquals(sign("login|" + body, key: secret), String(parts[2])),
            let expires = DecimalText.int64(parts[0], maximumDigits: 12)
        else { return false }
        let seconds = Int64(clamping: Int(now.timeIntervalSince1970.rounded(.down)))
        return seconds < expires && expires <= seconds + 3600 + 60
    }

    /// The MAC key for sessions signed in with `apiKey`.
    private static func derive(_ secret: SymmetricKey, _ apiKey: String) -> SymmetricKey {
        HKDF<SHA256>.deriveKey(
            inputKeyMaterial: secret, salt: Data(SHA256.hash(data: Data(apiKey.utf8))),
            info: Data("herald-dashboard-session".utf8),
            outputByteCount: 32)
    }

    private static func sign(_ message: String, key: SymmetricKey) -> String {
        Base64URL.encode(Data(HMAC<SHA256>.authenticationCode(for: Data(message.utf8), using: key)))
    }
}
