package import Foundation

/// The dashboard's sessions: the secret their cookies are signed with (one per deployment,
/// shared by every node) and the sessions signed out before they expired.
extension DashboardQueries {
    /// The deployment's random secret for `purpose`, made by the first node that asks: the
    /// `app_secrets` row of the pseudo-app `*` (no app id contains `*`).
    package func deploymentSecret(purpose: String) async throws -> Data {
        try await database.actions.appSecret(appID: "*", purpose: purpose)
    }

    /// Records that the session with `nonce` signed out; rows of sessions past their expiry go.
    package func recordSignOut(nonce: String, expiresAt: Date) async throws {
        let expires = Self.milliseconds(expiresAt)
        let now = nowMilliseconds
        try await transaction(durable: true) { session in
            _ = try await session.query("DELETE FROM dashboard_signouts WHERE expires_at < $1", [.integer(now)])
            _ = try await session.query(
                "INSERT INTO dashboard_signouts (nonce, expires_at) VALUES ($1, $2) ON CONFLICT (nonce) DO NOTHING",
                [.text(nonce), .integer(expires)])
        }
    }

    /// Whether the session with `nonce` signed out.
    package func isSignedOut(nonce: String) async throws -> Bool {
        try await reading { session in
            try await !session.query("SELECT 1 FROM dashboard_signouts WHERE nonce = $1", [.text(nonce)]).isEmpty
        }
    }
}
