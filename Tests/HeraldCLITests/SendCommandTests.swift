import Foundation
import HeraldAPNs
import HeraldSimulator
import HeraldTesting
import Testing

/// `herald send` as a user runs it: the built executable, against the in-process simulator over
/// HTTP/2 + TLS; the contract is one JSON summary line on stdout and the exit status.
@Suite("herald send (the executable)")
struct SendCommandTests {
    /// The `herald` binary `swift build`/`swift test` put beside the test bundle.
    static let executable: URL = {
        let beside = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent(
            "herald")
        if FileManager.default.isExecutableFile(atPath: beside.path) { return beside }
        return URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
            .appendingPathComponent(".build/debug/herald")
    }()

    struct Run {
        var status: Int32
        var stdout: String
        var stderr: String
        var summary: [String: Any]? {
            let lines = stdout.split(separator: "\n")
            guard lines.count == 1 else { return nil }
            return (try? JSONSerialization.jsonObject(with: Data(lines[0].utf8))) as? [String: Any]
        }
    }

    /// Runs `herald ARGS` to the end without blocking a Swift concurrency thread.
    static func herald(_ arguments: [String]) async throws -> Run {
        let run = try await runProcess(executable, arguments)
        return Run(status: run.status, stdout: run.stdout, stderr: run.stderr)
    }

    @Test("--fcm --service-account: every token delivered once, data as strings, Android fields, one summary line")
    func sendFCM() async throws {
        try #require(
            FileManager.default.isExecutableFile(atPath: Self.executable.path),
            "build herald first: \(Self.executable.path)")
        try await withSimulator { harness in
            let directory = try makeTemporaryDirectory("herald-cli")
            let account = directory + "/sa.json"
            try TestServiceAccount.shared.json(tokenURI: harness.simulator.endpointURL + "/token").write(
                to: URL(fileURLWithPath: account))
            let tokens = (0..<300).map { "cli-token-\($0):APA91b" }
            try (["# registration tokens", ""] + tokens).joined(separator: "\n").write(
                toFile: directory + "/tokens.txt", atomically: true, encoding: .utf8)
            try #"{"count":3,"nested":{"a":true}}"#.write(
                toFile: directory + "/data.json", atomically: true, encoding: .utf8)
            let run = try await Self.herald([
                "send", "--fcm", "--service-account", account, "--endpoint", harness.simulator.endpointURL,
                "--ca-file", harness.simulator.caFile, "--tokens-file", directory + "/tokens.txt", "--title", "Hello",
                "--body", "World", "--payload", directory + "/data.json", "--android-channel", "news",
                "--collapse-id", "daily", "--analytics-label", "digest", "--quiet",
            ])
            #expect(run.status == 0, "stderr: \(run.stderr)")
            let summary = try #require(run.summary, "stdout: \(run.stdout)")
            #expect(summary["sent"] as? Int == 300)
            #expect(summary["accepted"] as? Int == 300)
            #expect((summary["failed"] as? [String: Any])?.isEmpty == true)
            #expect(harness.simulator.state.counters.fcmTokenExchanges == 1)
            #expect(Set(tokens.map { harness.simulator.state.inbox(for: $0).count }) == [1])
            let entry = try #require(harness.simulator.state.inbox(for: tokens[7]).first)
            let message = try #require(entry.payloadObject?["message"] as? [String: Any])
            #expect(message["data"] as? [String: String] == ["count": "3", "nested": #"{"a":true}"#])
            #expect((message["notification"] as? [String: Any])?["title"] as? String == "Hello")
            let android = try #require(message["android"] as? [String: Any])
            #expect(android["collapse_key"] as? String == "daily")
            #expect((android["notification"] as? [String: Any])?["channel_id"] as? String == "news")
            #expect((message["fcm_options"] as? [String: Any])?["analytics_label"] as? String == "digest")
        }
    }

    @Test("failures are counted by reason (exit 0: every token got an answer); bad flags exit 2 with the flag named")
    func failuresAndFlags() async throws {
        try #require(
            FileManager.default.isExecutableFile(atPath: Self.executable.path),
            "build herald first: \(Self.executable.path)")
        try await withSimulator { harness in
            let directory = try makeTemporaryDirectory("herald-cli")
            let account = directory + "/sa.json"
            try TestServiceAccount.shared.json(tokenURI: harness.simulator.endpointURL + "/token").write(
                to: URL(fileURLWithPath: account))
            harness.simulator.state.markDead("gone-token")
            let run = try await Self.herald([
                "send", "--fcm", "--service-account", account, "--endpoint", harness.simulator.endpointURL,
                "--ca-file", harness.simulator.caFile, "--token", "gone-token", "--body", "x", "--quiet",
            ])
            #expect(run.status == 0, "stderr: \(run.stderr)")
            #expect((run.summary?["failed"] as? [String: Int]) == ["UNREGISTERED": 1])

            let missing = try await Self.herald(["send", "--fcm", "--token", "t", "--body", "x"])
            #expect(missing.status == 2)
            #expect(missing.stderr.contains("--service-account"))
            #expect(missing.stdout.isEmpty)
            let unreadable = try await Self.herald([
                "send", "--fcm", "--service-account", directory + "/none.json", "--token", "t",
            ])
            #expect(unreadable.status == 2)
            #expect(unreadable.stderr.contains("none.json"))
            // `herald sim` refuses a negative inbox limit before it listens.
            let negative = try await Self.herald(["sim", "--port", "0", "--inbox-limit=-1"])
            #expect(negative.status != 0)
            #expect(negative.stderr.contains("--inbox-limit must be 0 or more"), "\(negative.stderr)")
        }
    }

    @Test(
        "APNs under 25% 500s, 10% 429s and GOAWAY every 1,000 streams: retried until --retry-deadline, not 5 tries; every token once"
    )
    func retryDeadline() async throws {
        try #require(
            FileManager.default.isExecutableFile(atPath: Self.executable.path),
            "build herald first: \(Self.executable.path)")
        try await withSimulator(bundleID: "com.example.cli") { configuration in
            configuration.faults.internalServerErrorRate = 0.25
            configuration.faults.tooManyRequestsRate = 0.1
            configuration.faults.goAwayAfterStreams = 1_000
        } _: { harness in
            let directory = try makeTemporaryDirectory("herald-cli")
            let keyFile = directory + "/AuthKey.p8"
            try harness.key.pem.write(toFile: keyFile, atomically: true, encoding: .utf8)
            let tokens = makeDeviceTokens(3_000)
            try tokens.joined(separator: "\n").write(
                toFile: directory + "/tokens.txt", atomically: true, encoding: .utf8)
            let common = [
                "send", "--endpoint", harness.simulator.endpointURL, "--ca-file", harness.simulator.caFile,
                "--key-file", keyFile, "--key-id", harness.key.signingKey.keyID, "--team-id",
                harness.key.signingKey.teamID,
                "--topic", harness.bundleID, "--body", "x", "--quiet",
                // Short backoffs keep the test quick; the number of tries is left to the deadline.
                "--retry-base-delay", "0.01", "--too-many-requests-delay", "0.01",
            ]
            // At 35% failures five tries lose about 0.5% of 3,000 tokens (16 when run with
            // --max-attempts 5); the deadline loses none.
            let run = try await Self.herald(common + ["--tokens-file", directory + "/tokens.txt"])
            #expect(run.status == 0, "stderr: \(run.stderr)")
            let summary = try #require(run.summary, "stdout: \(run.stdout)")
            #expect(summary["accepted"] as? Int == 3_000, "\(summary)")
            #expect((summary["failed"] as? [String: Int])?.isEmpty == true)
            #expect(Set(tokens.map { harness.simulator.state.inbox(for: $0).count }) == [1])

            let bad = try await Self.herald(common + ["--token", tokens[0], "--retry-deadline", "0"])
            #expect(bad.status == 2)
            #expect(bad.stderr.contains("--retry-deadline"))
        }
    }

    @Test("APNs: the .p8 key, topic and token flags deliver through the simulator")
    func sendAPNs() async throws {
        try #require(
            FileManager.default.isExecutableFile(atPath: Self.executable.path),
            "build herald first: \(Self.executable.path)")
        try await withSimulator { harness in
            let directory = try makeTemporaryDirectory("herald-cli")
            let keyFile = directory + "/AuthKey.p8"
            try harness.key.pem.write(toFile: keyFile, atomically: true, encoding: .utf8)
            let token = makeDeviceTokens(1)[0]
            let run = try await Self.herald([
                "send", "--endpoint", harness.simulator.endpointURL, "--ca-file", harness.simulator.caFile,
                "--key-file", keyFile, "--key-id", harness.key.signingKey.keyID, "--team-id",
                harness.key.signingKey.teamID,
                "--topic", harness.bundleID, "--token", token, "--title", "Hello", "--thread-id", "t1", "--quiet",
            ])
            #expect(run.status == 0, "stderr: \(run.stderr)")
            #expect(run.summary?["accepted"] as? Int == 1)
            let entry = try #require(harness.simulator.state.inbox(for: token).first)
            let aps = try #require(entry.payloadObject?["aps"] as? [String: Any])
            #expect(aps["thread-id"] as? String == "t1")
        }
    }
}
