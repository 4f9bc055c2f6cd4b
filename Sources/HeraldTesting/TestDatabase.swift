import Foundation
import HeraldStore

/// The database the store and server tests run on, chosen by `HERALD_TEST_DATABASE`:
/// - unset or `sqlite`: a new SQLite file per test;
/// - `postgres`: a PostgreSQL server the tests start themselves from the installed binaries
///   (`initdb`/`pg_ctl`, Debian's `postgresql` package), on a free port, stopped when the test
///   process ends; a new database per test;
/// - `postgres://USER@HOST:PORT/DB`: that server, a new database per test (the user must be
///   allowed to `CREATE DATABASE`).
package enum TestDatabase {
    package enum Kind: String, Sendable { case sqlite, postgres }

    /// What `HERALD_TEST_DATABASE` chose.
    package static var kind: Kind {
        (ProcessInfo.processInfo.environment["HERALD_TEST_DATABASE"] ?? "").hasPrefix("postgres") ? .postgres : .sqlite
    }

    /// A new, empty database of `kind` for one test: a `database.url`.
    package static func url(_ name: String, kind: Kind = TestDatabase.kind) async throws -> String {
        switch kind {
        case .sqlite:
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
                "herald-\(name)-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            return "sqlite://\(directory.path)/herald.sqlite"
        case .postgres:
            return try await TestPostgres.shared.newDatabase(name)
        }
    }

    /// A new database of `kind` for one test with Herald's schema already in it. On SQLite it is
    /// a copy of one file this process migrated once (a copy opens in a fifth of the CPU time
    /// the 20-odd migrations take, and most server tests start from it); on PostgreSQL it is a
    /// new empty database, migrated when the store opens it. The migrations themselves are
    /// tested from an empty database by the tests that use `url(_:kind:)`.
    package static func migratedURL(_ name: String, kind: Kind = TestDatabase.kind) async throws -> String {
        guard kind == .sqlite else { return try await url(name, kind: kind) }
        let template = try await SQLiteTemplate.shared.path()
        let target = try await url(name, kind: .sqlite)
        let path = String(target.dropFirst("sqlite://".count))
        for suffix in ["", "-wal"] where FileManager.default.fileExists(atPath: template + suffix) {
            try FileManager.default.copyItem(atPath: template + suffix, toPath: path + suffix)
        }
        return target
    }

    /// Whether PostgreSQL tests can run here: `HERALD_TEST_DATABASE` names a server, or
    /// PostgreSQL's server binaries are installed. CI sets `HERALD_REQUIRE_POSTGRES=1` so that a
    /// missing PostgreSQL fails instead of skipping.
    package static var postgresAvailable: Bool {
        if ProcessInfo.processInfo.environment["HERALD_REQUIRE_POSTGRES"] == "1" { return true }
        if (ProcessInfo.processInfo.environment["HERALD_TEST_DATABASE"] ?? "").hasPrefix("postgres://") { return true }
        return TestPostgres.binaryDirectory() != nil
    }
}

/// The SQLite file `TestDatabase.migratedURL` copies: made and migrated once per test process.
actor SQLiteTemplate {
    static let shared = SQLiteTemplate()

    private var made: Task<String, any Error>?

    func path() async throws -> String {
        if made == nil {
            made = Task {
                let url = try await TestDatabase.url("template", kind: .sqlite)
                let store = try await HeraldStore.open(url: url)
                await store.close()
                return String(url.dropFirst("sqlite://".count))
            }
        }
        return try await made!.value
    }
}

/// A PostgreSQL server for the tests (see `TestDatabase`).
package actor TestPostgres {
    package static let shared = TestPostgres()

    private var server: Task<String, any Error>?
    private var created = 0

    /// A new database on the test server; returns its URL.
    func newDatabase(_ name: String) async throws -> String {
        let base = try await serverURL()
        created += 1
        let database =
            "t\(ProcessInfo.processInfo.processIdentifier)_\(created)_"
            + name.lowercased().filter { $0.isLetter || $0.isNumber }.prefix(30)
        try await psql(base, "CREATE DATABASE \(database)")
        guard var components = URLComponents(string: base) else { throw TestPostgresError("bad server URL") }
        components.path = "/" + database
        return components.string!
    }

    /// The server's URL (its `postgres` database), starting the server on first use.
    private func serverURL() async throws -> String {
        if let environment = ProcessInfo.processInfo.environment["HERALD_TEST_DATABASE"],
            environment.hasPrefix("postgres://")
        {
            return environment
        }
        if server == nil { server = Task { try await Self.start() } }
        return try await server!.value
    }

    private func psql(_ url: String, _ statement: String) async throws {
        guard
            let directory = Self.binaryDirectory()
                ?? Self.which("psql").map({ ($0 as NSString).deletingLastPathComponent })
        else {
            throw TestPostgresError("psql not found: install PostgreSQL (apt-get install postgresql)")
        }
        let result = try await runProcess(
            URL(fileURLWithPath: directory + "/psql"),
            ["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", statement])
        guard result.status == 0 else { throw TestPostgresError("psql \(statement): \(result.stderr)") }
    }

    /// PostgreSQL's server binaries: `pg_config --bindir`, else Debian's /usr/lib/postgresql/N/bin.
    package nonisolated static func binaryDirectory() -> String? {
        let fileManager = FileManager.default
        if let versions = try? fileManager.contentsOfDirectory(atPath: "/usr/lib/postgresql") {
            for version in versions.sorted(by: { (Int($0) ?? 0) > (Int($1) ?? 0) }) {
                let directory = "/usr/lib/postgresql/\(version)/bin"
                if fileManager.isExecutableFile(atPath: directory + "/initdb") { return directory }
            }
        }
        if let initdb = which("initdb") { return (initdb as NSString).deletingLastPathComponent }
        return nil
    }

    private nonisolated static func which(_ name: String) -> String? {
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":") {
            let path = "\(directory)/\(name)"
            if FileManager.default.isExecutableFile(atPath: path) { return path }
        }
        return nil
    }

    /// initdb into a new directory, start the server on a free port (fsync off: test data), and
    /// a watchdog that stops it when this process ends, however it ends. PostgreSQL refuses to
    /// run as root, so as root the server runs as the `postgres` user.
    ///
    /// The port is free when chosen but is bound only later, by the server: another test's
    /// ephemeral socket can take it in between (CI saw "Address already in use"). A start that
    /// fails that way is tried again on another port, up to five times.
    private static func start() async throws -> String {
        guard let bin = binaryDirectory() else {
            throw TestPostgresError(
                "PostgreSQL's server binaries not found: apt-get install postgresql (or set HERALD_TEST_DATABASE=postgres://…)"
            )
        }
        let directory =
            "/tmp/herald-test-pg-\(ProcessInfo.processInfo.processIdentifier)-\(UUID().uuidString.prefix(8))"
        let asRoot = getuid() == 0
        let prefix = asRoot ? "runuser -u postgres -- " : ""
        // The first loop closes every descriptor but 0-2 this shell inherited (other tests' pipes
        // among them): the server and the watchdog must not hold any open, or readers never end.
        let closeInherited =
            #"for fd in /proc/self/fd/*; do n=${fd##*/}; [ "$n" -gt 2 ] 2>/dev/null && eval "exec $n>&-"; done"#
        let initialize = """
            \(closeInherited)
            set -e
            mkdir -p \(directory)
            \(asRoot ? "chown postgres \(directory)" : "")
            \(prefix)\(bin)/initdb -D \(directory)/data -U postgres -A trust --no-sync -E UTF8 > \(directory)/initdb.log 2>&1
            setsid sh -c '
              while kill -0 \(ProcessInfo.processInfo.processIdentifier) 2>/dev/null; do sleep 1; done
              \(prefix)\(bin)/pg_ctl -D \(directory)/data -m immediate stop > /dev/null 2>&1
              rm -rf \(directory)' > /dev/null 2>&1 < /dev/null &
            """
        let initialized = try await runProcess(URL(fileURLWithPath: "/bin/bash"), ["-c", initialize])
        guard initialized.status == 0 else {
            let log = (try? String(contentsOfFile: directory + "/initdb.log", encoding: .utf8)) ?? ""
            throw TestPostgresError("initdb failed: \(initialized.stderr) \(log)")
        }
        var failure = ""
        // Every test opens its own store, each pooling up to 20 connections, and the suites run
        // their tests at once: 400 ran out ("too many clients") on a slow day.
        for _ in 1...5 {
            let port = freeLoopbackPort()
            let script = """
                \(closeInherited)
                : > \(directory)/server.log; \(asRoot ? "chown postgres \(directory)/server.log" : "")
                \(prefix)\(bin)/pg_ctl -D \(directory)/data -l \(directory)/server.log -w -t 60 \
                  -o "-p \(port) -k \(directory) -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=1000" start > /dev/null
                """
            let result = try await runProcess(URL(fileURLWithPath: "/bin/bash"), ["-c", script])
            if result.status == 0 { return "postgres://postgres@127.0.0.1:\(port)/postgres?sslmode=disable" }
            let log = (try? String(contentsOfFile: directory + "/server.log", encoding: .utf8)) ?? ""
            failure = "\(result.stderr) \(log)"
            guard log.contains("Address already in use") else { break }
        }
        throw TestPostgresError("starting PostgreSQL failed: \(failure)")
    }
}

package struct TestPostgresError: Error, CustomStringConvertible {
    package var description: String
    init(_ description: String) { self.description = description }
}
