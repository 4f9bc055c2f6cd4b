import Foundation
import HeraldTesting
import Testing

/// `herald config check` as an operator runs it before a restart: the built executable.
@Suite("herald config check (the executable)")
struct ConfigCheckTests {
    static let examples = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Examples")

    @Test("a configuration with seven mistakes in four places: every one named with its line, exit 2")
    func everyProblem() async throws {
        let directory = try makeTemporaryDirectory("herald-config-check")
        try """
        app:
          name: Broken
          default_locale: en
        types:
          hello:
            placeholders: [name]
            copy:
              fr: { title: "Bonjour", body: "Salut {name}" }
        """.write(toFile: directory + "/broken.catalog.yaml", atomically: true, encoding: .utf8)
        try """
        server: { host: 127.0.0.1, port: 70000 }
        servr: { port: 8080 }
        outbox: { batch_size: 0 }
        apps:
          - id: one
            keys: { server: "short" }
            max_devices_per_user: 0
            apns: { team_id: T, key_id: K, key_file: missing.p8, topic: com.example.one }
          - id: two
            keys: { server: "two-server-key-0123456789" }
            catalog: broken.catalog.yaml
        """.write(toFile: directory + "/herald.yaml", atomically: true, encoding: .utf8)
        let run = try await runProcess(
            SendCommandTests.executable, ["config", "check", "--config", directory + "/herald.yaml"])
        #expect(run.status == 2)
        let file = directory + "/herald.yaml"
        for expected in [
            "\(file):1: server.port: must be 0–65535",
            "\(file):2: servr: unknown key",
            "\(file):3: outbox.batch_size: must be 1–50000",
            "\(file):6: apps[0].keys.server: API keys need at least 16 characters",
            "\(file):7: apps[0].max_devices_per_user: must be 1 or more",
            "\(file): apps[0].apns.key_file:",
            "\(directory)/broken.catalog.yaml:",
        ] {
            #expect(run.stderr.contains(expected), "missing \(expected) in:\n\(run.stderr)")
        }
        #expect(run.stderr.contains("herald config check: 7 problems"), "\(run.stderr)")
        #expect(run.stdout.isEmpty)
    }

    @Test("a sound configuration: exit 0 and a summary, without a database or a port opened")
    func sound() async throws {
        let directory = try makeTemporaryDirectory("herald-config-check")
        try """
        server: { host: 127.0.0.1, port: 8080 }
        database: { url: "sqlite://\(directory)/never-made.sqlite" }
        apps:
          - id: demo
            keys: { server: "demo-server-key-0123456789" }
            catalog: \(Self.examples.path)/syncwell.yaml
        """.write(toFile: directory + "/herald.yaml", atomically: true, encoding: .utf8)
        let run = try await runProcess(
            SendCommandTests.executable, ["config", "check", "--config", directory + "/herald.yaml"])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("ok (1 app, 1 catalog)"))
        #expect(!FileManager.default.fileExists(atPath: directory + "/never-made.sqlite"))
    }
}
