import Foundation
import Logging
import NIOSSL
import PostgresNIO

/// `database.url` for PostgreSQL: `postgres://USER:PASSWORD@HOST:PORT/DATABASE?OPTIONS`
/// (`postgresql://` too). Options:
/// - `sslmode`: `disable`, `prefer` (default: TLS when the server offers it) or `require`;
/// - `host`: a Unix socket directory instead of TCP (`?host=/var/run/postgresql`);
/// - `pool_size`: connections per process (default 20);
/// - `lock_timeout` / `statement_timeout` / `idle_in_transaction_session_timeout`: PostgreSQL
///   settings for Herald's sessions (defaults 5s / 0 (none) / 60s).
struct PostgresURL {
    var host = "127.0.0.1"
    var port = 5432
    var socketDirectory: String?
    var user = "postgres"
    var password: String?
    var database: String?
    var sslmode = "prefer"
    var poolSize = 20
    var settings: [(String, String)] = [("lock_timeout", "5s"), ("idle_in_transaction_session_timeout", "60s")]

    init(_ url: String) throws {
        guard let components = URLComponents(string: url),
            components.scheme == "postgres" || components.scheme == "postgresql"
        else {
            throw StoreError(.invalidURL, "database.url is not a postgres:// URL (\(Self.redacted(url)))")
        }
        if let value = components.host, !value.isEmpty { host = value }
        if let value = components.port { port = value }
        if let value = components.user, !value.isEmpty { user = value.removingPercentEncoding ?? value }
        password = components.password.map { $0.removingPercentEncoding ?? $0 }
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        if !path.isEmpty { database = path.removingPercentEncoding ?? path }
        for item in components.queryItems ?? [] {
            let value = item.value ?? ""
            switch item.name {
            case "sslmode":
                guard ["disable", "prefer", "require"].contains(value) else {
                    throw StoreError(
                        .invalidURL, "database.url: sslmode must be disable, prefer or require (got \"\(value)\")")
                }
                sslmode = value
            case "host":
                socketDirectory = value
            case "pool_size":
                guard let size = Int(value), (1...1000).contains(size) else {
                    throw StoreError(.invalidURL, "database.url: pool_size must be 1…1000 (got \"\(value)\")")
                }
                poolSize = size
            case "lock_timeout", "statement_timeout", "idle_in_transaction_session_timeout":
                guard !value.isEmpty, value.allSatisfy({ $0.isLetter || $0.isNumber }) else {
                    throw StoreError(
                        .invalidURL, "database.url: \(item.name) must be a duration such as 5s (got \"\(value)\")")
                }
                settings.removeAll { $0.0 == item.name }
                settings.append((item.name, value))
            default:
                throw StoreError(
                    .invalidURL,
                    "database.url: unknown option \"\(item.name)\" (known: sslmode, host, pool_size, lock_timeout, statement_timeout, idle_in_transaction_session_timeout)"
                )
            }
        }
    }

    func configuration() throws -> PostgresClient.Configuration {
        var configuration: PostgresClient.Configuration
        if let socketDirectory {
            configuration = PostgresClient.Configuration(
                unixSocketPath: socketDirectory + "/.s.PGSQL.\(port)", username: user, password: password,
                database: database)
        } else {
            let tls: PostgresClient.Configuration.TLS
            switch sslmode {
            case "disable": tls = .disable
            case "require": tls = .require(.makeClientConfiguration())
            default: tls = .prefer(.makeClientConfiguration())
            }
            configuration = PostgresClient.Configuration(
                host: host, port: port, username: user, password: password, database: database, tls: tls)
        }
        configuration.options.maximumConnections = poolSize
        configuration.options.additionalStartupParameters = [("application_name", "herald")] + settings
        return configuration
    }

    /// Where it connects, for logs: user, host or socket, port, database; never the password.
    var description: String {
        "postgres://\(user)@\(socketDirectory ?? host):\(port)/\(database ?? user)"
    }

    /// The URL with its password replaced, for messages.
    static func redacted(_ url: String) -> String {
        guard var components = URLComponents(string: url), components.password != nil else { return url }
        components.password = "***"
        return components.string ?? "(unreadable URL)"
    }

    /// Whether a transaction failed only because a concurrent one won a race, so running it
    /// again will succeed: serialization failure, deadlock, or a unique key just taken.
    static func isRaceLost(_ error: PSQLError) -> Bool {
        guard let state = error.serverInfo?[.sqlState] else { return false }
        return state == "40001" || state == "40P01" || state == "23505"
    }
}

extension PostgresURL {
    /// Whether PostgreSQL refused a text value itself: a NUL character (22021) or bytes it
    /// cannot convert (22P05). SQLite stores both.
    static func isUnstorableText(_ error: PSQLError) -> Bool {
        guard let state = error.serverInfo?[.sqlState] else { return false }
        return state == "22021" || state == "22P05"
    }
}

extension PSQLError {
    /// What an operator needs of a database error, without the query's bound values (tokens,
    /// user data): the SQLSTATE and the server's message.
    var summary: String {
        guard let info = serverInfo else { return "PostgreSQL: \(code)" }
        return "PostgreSQL \(info[.sqlState] ?? "?"): \(info[.message] ?? "")"
    }
}
