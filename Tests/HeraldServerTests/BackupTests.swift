import Foundation
import HeraldStore
import HeraldTesting
import Logging
import Testing

/// `herald backup` of a live SQLite store and `herald restore` into a stopped one, as an operator
/// runs them. (The copy taken during a 100,000-device fan-out, restored and finished with
/// nothing lost and nothing sent twice, is `scripts/server-load.sh backup`, run by CI.)
@Suite("herald backup and restore")
struct BackupTests {
    @Test(
        "backup while serving; restore refused while serving, done once stopped (the old files kept); the store continues"
    )
    func backupAndRestore() async throws {
        let directory = try makeTemporaryDirectory("herald-backup")
        let config = directory + "/herald.yaml"
        let server = "backup-test-server-key"
        try """
        database: { url: "sqlite://\(directory)/herald.sqlite" }
        apps:
          - id: demo
            keys: { server: "\(server)", client: "backup-test-client-key" }
            client_registration: unverified
        """.write(toFile: config, atomically: true, encoding: .utf8)
        var (process, port) = try await startHeraldServe(config: config)
        defer { if process.isRunning { process.terminate() } }
        func register(_ device: String) async throws -> Int {
            try await curl([
                "-X", "POST", "http://127.0.0.1:\(port)/v1/apps/demo/devices", "-H", "Authorization: Bearer \(server)",
                "-H", "Content-Type: application/json", "-d",
                #"{"device_id":"\#(device)","user_id":"u1","platform":"apns","token":"\#(String(repeating: device == "before" ? "ab" : "cd", count: 32))","environment":"sandbox"}"#,
            ]).status
        }
        #expect(try await register("before") == 201)

        let backup = directory + "/backup.sqlite"
        let made = try await runProcess(heraldExecutable, ["backup", "--config", config, "--to", backup])
        #expect(made.status == 0, "\(made.stderr)")
        let summary = try JSONSerialization.jsonObject(with: Data(made.stdout.utf8)) as? [String: Any]
        #expect(summary?["devices"] as? Int == 1)
        #expect(summary?["schema_version"] as? Int == SQLiteBackup.currentSchemaVersion)
        // A backup never overwrites a file.
        let again = try await runProcess(heraldExecutable, ["backup", "--config", config, "--to", backup])
        #expect(again.status == 2 && again.stderr.contains("exists"))
        // A device registered after the backup is in the live store only.
        #expect(try await register("after") == 201)

        let refused = try await runProcess(heraldExecutable, ["restore", "--config", config, "--from", backup])
        #expect(refused.status == 2 && refused.stderr.contains("stop it first"), "\(refused.stderr)")

        process.terminate()
        for _ in 0..<600 where process.isRunning { try await Task.sleep(for: .milliseconds(50)) }
        let restored = try await runProcess(heraldExecutable, ["restore", "--config", config, "--from", backup])
        #expect(restored.status == 0, "\(restored.stderr)")
        let kept = try FileManager.default.contentsOfDirectory(atPath: directory).filter {
            $0.hasPrefix("herald.sqlite.before-restore-") && !$0.hasSuffix("-wal") && !$0.hasSuffix("-shm")
        }
        #expect(kept.count == 1)

        // The restored store serves: the device from before the backup is there, the later one is not.
        (process, port) = try await startHeraldServe(config: config)
        let devices = try await curl([
            "http://127.0.0.1:\(port)/v1/apps/demo/users/u1/devices", "-H", "Authorization: Bearer \(server)",
        ])
        #expect(devices.status == 200)
        #expect(devices.body.contains("\"before\"") && !devices.body.contains("\"after\""))
        process.terminate()
        for _ in 0..<600 where process.isRunning { try await Task.sleep(for: .milliseconds(50)) }

        // The kept store still opens as it was: both devices (its WAL was kept with it).
        let keptSummary = try await SQLiteBackup.inspect(
            file: directory + "/" + (kept.first ?? ""), logger: .init(label: "test"))
        #expect(keptSummary.devices == 2)
    }

    @Test("restore checks the backup first: a file that is not a Herald store, or none, changes nothing")
    func refusesWhatIsNotABackup() async throws {
        let directory = try makeTemporaryDirectory("herald-restore-check")
        let config = directory + "/herald.yaml"
        try "database: { url: \"sqlite://\(directory)/herald.sqlite\" }\n".write(
            toFile: config, atomically: true, encoding: .utf8)
        try "not a database".write(toFile: directory + "/notes.txt", atomically: true, encoding: .utf8)
        for file in [directory + "/notes.txt", directory + "/missing.sqlite"] {
            let run = try await runProcess(heraldExecutable, ["restore", "--config", config, "--from", file])
            #expect(run.status == 2 && run.stderr.contains("cannot be restored"), "\(run.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: directory + "/herald.sqlite"))
        // PostgreSQL stores are pg_dump's.
        let postgres = try await runProcess(
            heraldExecutable, ["backup", "--database-url", "postgres://h@127.0.0.1/h", "--to", directory + "/b"])
        #expect(postgres.status == 2 && postgres.stderr.contains("pg_dump"))
    }
}
