import Foundation
import HeraldStore
import HeraldTesting
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `herald serve` as systemd runs it (`Type=notify`, `ExecReload` sending SIGHUP), and the
/// version a package is checked by.
@Suite("Running under systemd")
struct SystemdTests {
    @Test("READY=1 once listening, SIGHUP reloads catalogs and does not end it, STOPPING=1 on SIGTERM, a clean exit")
    func notifyProtocol() async throws {
        let directory = try makeTemporaryDirectory("herald-systemd")
        let socketPath = directory + "/notify.sock"
        let receiver = try #require(NotifyReceiver(path: socketPath))
        defer { receiver.close() }
        var environment = ProcessInfo.processInfo.environment
        environment["NOTIFY_SOCKET"] = socketPath
        let log = directory + "/serve.err"
        let (process, _) = try await startHerald(
            ["serve", "--dev", "--dev-dir", directory + "/dev"], environment: environment, log: log)
        defer { if process.isRunning { process.terminate() } }
        #expect(try await receiver.next(containing: "READY=1") != nil)

        // SIGHUP (ExecReload) reads the dev app's catalog (Examples/syncwell.yaml) again, framed
        // by RELOADING=1 and READY=1.
        kill(process.processIdentifier, SIGHUP)
        #expect(try await receiver.next(containing: "RELOADING=1") != nil)
        #expect(try await receiver.next(containing: "READY=1") != nil)
        try await eventually {
            ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("Catalog reloaded")
        }
        #expect(process.isRunning)

        process.terminate()
        #expect(try await receiver.next(containing: "STOPPING=1") != nil)
        for _ in 0..<600 where process.isRunning { try await Task.sleep(for: .milliseconds(50)) }
        #expect(!process.isRunning)
        #expect(process.terminationStatus == 0)
    }

    @Test("log_format: json: every log line is one JSON object; HERALD_LOG_FORMAT overrides the file")
    func jsonLogs() async throws {
        let directory = try makeTemporaryDirectory("herald-json-log")
        let config = directory + "/herald.yaml"
        try """
        log_format: json
        database: { url: "sqlite://\(directory)/herald.sqlite" }
        """.write(toFile: config, atomically: true, encoding: .utf8)
        let log = directory + "/serve.err"
        let (process, port) = try await startHerald(["serve", "--config", config], log: log)
        defer { if process.isRunning { process.terminate() } }
        kill(process.processIdentifier, SIGHUP)
        try await eventually {
            ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("SIGHUP: nothing to reload")
        }
        process.terminate()
        for _ in 0..<600 where process.isRunning { try await Task.sleep(for: .milliseconds(50)) }

        let lines = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n")
        #expect(lines.count >= 3)
        var listening: [String: Any]?
        for line in lines {
            let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            #expect(object != nil, "not a JSON object: \(line)")
            guard let object else { continue }
            #expect(object["level"] is String && object["label"] is String && object["message"] is String)
            #expect((object["timestamp"] as? String).flatMap { try? Date($0, strategy: .iso8601) } != nil)
            if object["message"] as? String == "Herald listening" { listening = object }
        }
        let address = (listening?["metadata"] as? [String: Any])?["herald.address"] as? String
        #expect(address?.hasSuffix(":\(port)") == true)
        #expect(lines.contains { $0.contains("\"message\":\"Herald stopped\"") })

        // The environment wins over the file: text lines, as without log_format.
        var environment = ProcessInfo.processInfo.environment
        environment["HERALD_LOG_FORMAT"] = "text"
        let textLog = directory + "/text.err"
        let (textProcess, _) = try await startHerald(
            ["serve", "--config", config], environment: environment, log: textLog)
        textProcess.terminate()
        for _ in 0..<600 where textProcess.isRunning { try await Task.sleep(for: .milliseconds(50)) }
        let first = try String(contentsOfFile: textLog, encoding: .utf8).split(separator: "\n").first
        #expect(first.map { !$0.hasPrefix("{") } == true)

        // A value that names no format is a configuration error naming the key.
        try "log_format: xml\n".write(toFile: config, atomically: true, encoding: .utf8)
        let check = try await runProcess(heraldExecutable, ["config", "check", "--config", config])
        #expect(check.status == 2)
        #expect(check.stdout.contains("log_format") || check.stderr.contains("log_format"))
    }

    @Test("the answer journal: beside a SQLite file; on PostgreSQL in systemd's STATE_DIRECTORY")
    func journalInStateDirectory() async throws {
        let url = try await TestDatabase.migratedURL("journal-state")
        let directory = try makeTemporaryDirectory("herald-state")
        let state = directory + "/state"
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
        let config = directory + "/herald.yaml"
        try "database: { url: \"\(url)\" }\n".write(toFile: config, atomically: true, encoding: .utf8)
        var environment = ProcessInfo.processInfo.environment
        environment["STATE_DIRECTORY"] = state
        let (process, _) = try await startHerald(
            ["serve", "--config", config], environment: environment, log: directory + "/serve.err")
        defer { if process.isRunning { process.terminate() } }
        let expected = TestDatabase.kind == .sqlite ? try #require(url.sqliteFilePath) + "-answers" : state + "/answers"
        // The journal's lock is held while the process runs (its files go at a clean stop).
        try await eventually {
            ((try? FileManager.default.contentsOfDirectory(atPath: expected)) ?? [])
                .contains { $0.hasPrefix("answers-") && $0.hasSuffix(".lock") }
        }
        if TestDatabase.kind == .sqlite { #expect(!FileManager.default.fileExists(atPath: state + "/answers")) }
        process.terminate()
        for _ in 0..<600 where process.isRunning { try await Task.sleep(for: .milliseconds(50)) }
        #expect(!process.isRunning)
    }

    @Test("herald --version names the release, and the commit a release build is made from")
    func version() async throws {
        let run = try await runProcess(heraldExecutable, ["--version"])
        #expect(run.stdout.hasPrefix("0."))
        #expect(run.stdout.contains("(development build)") || run.stdout.contains("(commit "))
    }
}

/// A Unix datagram socket bound to `path`, read without blocking a thread.
final class NotifyReceiver: Sendable {
    let descriptor: Int32

    init?(path: String) {
        descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard descriptor >= 0 else { return nil }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let name = Array(path.utf8)
        guard name.count < MemoryLayout.size(ofValue: address.sun_path) else { return nil }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: name) }
        let bound = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard bound == 0 else { return nil }
    }

    /// The first datagram within 30 s that contains `text`, or nil.
    func next(containing text: String) async throws -> String? {
        var buffer = [UInt8](repeating: 0, count: 4096)
        for _ in 0..<600 {
            let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
            if count > 0 {
                let message = String(decoding: buffer[0..<count], as: UTF8.self)
                if message.contains(text) { return message }
                continue
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        return nil
    }

    func close() { _ = Glibc.close(descriptor) }
}
