import Crypto
import Foundation
import HeraldCore

/// Who signed in to the dashboard (issue #15): the admin key sees every app; an app's server key
/// sees that app only. Client keys cannot sign in.
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
/// of a cluster accepts it and nothing is kept on the server: `v1.<role>.<app>.<expires>.<nonce>.<mac>`
/// (the app id in base64url) where the MAC is HMAC-SHA256 under a key derived from the key used to sign in. Changing that
/// key (rotation) ends its sessions. The CSRF token of every form is derived from the same key
/// and the session's nonce; sign-out forgets the nonce on this node.
struct DashboardSession: Sendable, Equatable {
    static let cookie = "herald_session"
    static let loginCookie = "herald_login"
    static let lifetime: TimeInterval = 12 * 3600

    var role: DashboardRole
    var expires: Date
    var nonce: String
    /// The key the MAC is made with (the admin key or the app's server key), never rendered.
    fileprivate var key: String

    /// A new session for `key`, or nil when it is no dashboard key (unknown, or a client key).
    static func signIn(key: String, configuration: HeraldConfiguration, now: Date) -> DashboardSession? {
        let key = key.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !key.isEmpty else { return nil }
        let nonce = randomToken()
        let expires = Date(timeIntervalSince1970: (now.timeIntervalSince1970 + lifetime).rounded(.down))
        if let admin = configuration.adminKey, HeraldAPI.constantTimeEquals(admin, key) {
            return DashboardSession(role: .admin, expires: expires, nonce: nonce, key: admin)
        }
        for app in configuration.apps {
            for server in app.serverKeys where HeraldAPI.constantTimeEquals(server, key) {
                return DashboardSession(role: .app(app.id), expires: expires, nonce: nonce, key: server)
            }
        }
        return nil
    }

    /// The session a cookie carries, when its MAC holds under a key that is still configured
    /// and it has not expired.
    static func verify(_ value: String, configuration: HeraldConfiguration, now: Date) -> DashboardSession? {
        let parts = value.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 6, parts[0] == "v1", let seconds = TimeInterval(parts[3]), now.timeIntervalSince1970 < seconds else { return nil }
        let candidates: [(DashboardRole, String)]
        switch parts[1] {
        case "admin": candidates = configuration.adminKey.map { [(.admin, $0)] } ?? []
        case "app":
            guard let id = Base64URL.decode(parts[2]).map({ String(decoding: $0, as: UTF8.self) }),
                let app = configuration.apps.first(where: { $0.id == id })
            else { return nil }
            candidates = app.serverKeys.map { (.app(app.id), $0) }
        default: return nil
        }
        for (role, key) in candidates {
            let session = DashboardSession(role: role, expires: Date(timeIntervalSince1970: seconds), nonce: parts[4], key: key)
            if HeraldAPI.constantTimeEquals(session.mac, parts[5]) { return session }
        }
        return nil
    }

    /// 16 random bytes in base64url: a session's nonce, the login form's token.
    static func randomToken() -> String {
        Base64URL.encode((0..<16).map { _ in UInt8.random(in: .min ... .max) })
    }

    /// The cookie's value.
    var value: String { body + "." + mac }

    /// The token every form of this session carries.
    var csrf: String { Self.sign("csrf|" + nonce, key: key) }

    private var body: String {
        switch role {
        case .admin: "v1.admin.-.\(Int64(expires.timeIntervalSince1970)).\(nonce)"
        case .app(let id): "v1.app.\(Base64URL.encode(Data(id.utf8))).\(Int64(expires.timeIntervalSince1970)).\(nonce)"
        }
    }

    private var mac: String { Self.sign("session|" + body, key: key) }

    private static func sign(_ message: String, key: String) -> String {
        let derived = SymmetricKey(data: SHA256.hash(data: Data(("herald-dashboard\u{0}" + key).utf8)))
        return Base64URL.encode(Data(HMAC<SHA256>.authenticationCode(for: Data(message.utf8), using: derived)))
    }
}
