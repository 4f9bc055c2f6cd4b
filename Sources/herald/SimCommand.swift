import ArgumentParser
import Crypto
import Foundation
import HeraldSimulator
import Logging

/// `herald sim`: the APNs simulator for people without Apple credentials, and for benchmarks.
struct SimCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sim",
        abstract:
            "Run the APNs + FCM simulator: HTTP/2 + TLS on loopback, Apple's and Google's validations, an inbox, fault injection.",
        discussion: """
            With no key options the simulator creates a demo key (demo-AuthKey.p8 in --tls-dir) and prints a \
            `herald send` command that works against it. The same port speaks FCM HTTP v1 (POST /token, \
            /v1/projects/{project}/messages:send); with no --fcm-service-account it trusts a demo service \
            account (demo-service-account.json in --tls-dir, token_uri pointing here) and prints a \
            `herald send --fcm` command too. The control API (HTTP/1.1 JSON) serves /inbox, \
            /inbox/{token}, /counters, /faults and /tokens/{token}/unregister.
            """)

    @Option(help: "Address to listen on.") var host = "127.0.0.1"
    @Option(help: "APNs port (HTTP/2 + TLS).") var port = 8443
    @Option(name: .customLong("control-port"), help: "Control API port (HTTP/1.1 JSON); 0 picks a free one.")
    var controlPort = 8444
    @Option(name: .customLong("tls-dir"), help: "Where the CA (sim-ca.pem) and server certificate are kept or created.")
    var tlsDirectory = ".herald-sim"
    @Option(name: .customLong("key-file"), help: "A .p8 key whose tokens are accepted (its public half is used).")
    var keyFile: String?
    @Option(name: .customLong("key-id"), help: "The key id of --key-file.") var keyID: String?
    @Option(name: .customLong("team-id"), help: "The team id of --key-file.") var teamID: String?
    @Option(
        name: .customLong("fcm-service-account"),
        help:
            "A Google service-account key JSON whose RS256 assertions the FCM token endpoint accepts (repeatable; only the public half of its key is used)."
    )
    var fcmServiceAccounts: [String] = []
    @Option(name: .customLong("fcm-token-lifetime"), help: "Seconds an FCM access token stays valid.")
    var fcmTokenLifetime = 3599.0
    @Option(
        name: .customLong("fcm-device-rate"),
        help:
            "FCM messages one registration token may get per minute before 429 QUOTA_EXCEEDED (per device); 0 = no limit."
    )
    var fcmDeviceRate = 240
    @Option(name: .customLong("topic"), help: "A bundle id pushes may go to (repeatable); none accepts any.")
    var topics: [String] = []
    @Flag(help: "Answer as production APNs (no apns-unique-id header).") var production = false
    @Option(name: .customLong("fail-500"), help: "Fraction of requests answered 500 InternalServerError.") var fail500 =
        0.0
    @Option(name: .customLong("fail-503"), help: "Fraction answered 503 ServiceUnavailable.") var fail503 = 0.0
    @Option(name: .customLong("fail-429"), help: "Fraction answered 429 TooManyRequests.") var fail429 = 0.0
    @Option(name: .customLong("latency-ms"), help: "Milliseconds added to every answer.") var latencyMilliseconds = 0
    @Option(
        name: .customLong("goaway-after-streams"),
        help: "Send GOAWAY (Shutdown) after this many streams per connection.") var goAwayAfterStreams: Int?
    @Option(
        name: .customLong("max-concurrent-streams"), help: "SETTINGS_MAX_CONCURRENT_STREAMS after the first valid JWT.")
    var maximumConcurrentStreams = 1000
    @Option(help: "Event loop threads.") var threads = 1
    @Option(
        name: .customLong("inbox-limit"),
        help: "Notifications the inbox keeps at most; past it, new ones are answered and counted, not kept.")
    var inboxLimit = 2_000_000
    @Option(name: .customLong("token-max-age"), help: "Seconds after which a provider token is ExpiredProviderToken.")
    var tokenMaximumAge = 3600.0

    func validate() throws {
        for (name, value) in [("--fail-500", fail500), ("--fail-503", fail503), ("--fail-429", fail429)]
        where !(0...1).contains(value) {
            throw ValidationError("\(name) is a fraction between 0 and 1, not \(value)")
        }
        if (keyFile != nil) != (keyID != nil) || (keyFile != nil) != (teamID != nil) {
            throw ValidationError("--key-file, --key-id and --team-id go together")
        }
        if inboxLimit < 0 {
            throw ValidationError("--inbox-limit must be 0 or more, not \(inboxLimit)")
        }
        if fcmTokenLifetime <= 0 {
            throw ValidationError("--fcm-token-lifetime must be positive, not \(fcmTokenLifetime)")
        }
    }

    func run() async throws {
        bootstrapLogging()
        var configuration = SimulatorConfiguration(tlsDirectory: tlsDirectory)
        configuration.host = host
        configuration.port = port
        configuration.controlPort = controlPort
        configuration.bundleIDs = Set(topics)
        configuration.isSandbox = !production
        configuration.threads = threads
        configuration.inboxLimit = inboxLimit
        configuration.tokenMaximumAge = tokenMaximumAge
        configuration.fcmAccessTokenLifetime = fcmTokenLifetime
        configuration.fcmDeviceRateLimit = max(0, fcmDeviceRate)
        configuration.faults.internalServerErrorRate = fail500
        configuration.faults.serviceUnavailableRate = fail503
        configuration.faults.tooManyRequestsRate = fail429
        configuration.faults.latencyMilliseconds = latencyMilliseconds
        configuration.faults.goAwayAfterStreams = goAwayAfterStreams
        configuration.faults.maximumConcurrentStreams = maximumConcurrentStreams

        let keyPath: String
        let usedKeyID: String
        let usedTeamID: String
        if let keyFile, let keyID, let teamID {
            let pem = try String(contentsOfFile: keyFile, encoding: .utf8)
            let key = try P256.Signing.PrivateKey(pemRepresentation: pem)
            configuration.keys = [SimulatorKey(keyID: keyID, teamID: teamID, publicKey: key.publicKey)]
            (keyPath, usedKeyID, usedTeamID) = (keyFile, keyID, teamID)
        } else {
            try FileManager.default.createDirectory(atPath: tlsDirectory, withIntermediateDirectories: true)
            keyPath = tlsDirectory + "/demo-AuthKey.p8"
            let key: P256.Signing.PrivateKey
            if let pem = try? String(contentsOfFile: keyPath, encoding: .utf8),
                let existing = try? P256.Signing.PrivateKey(pemRepresentation: pem)
            {
                key = existing
            } else {
                key = P256.Signing.PrivateKey()
                try SecretFile.write(key.pemRepresentation, to: keyPath)
            }
            (usedKeyID, usedTeamID) = ("DEMOKEY001", "DEMOTEAM01")
            configuration.keys = [SimulatorKey(keyID: usedKeyID, teamID: usedTeamID, publicKey: key.publicKey)]
        }
        var demoServiceAccount: String? = nil
        if fcmServiceAccounts.isEmpty {
            let demo = try SimulatorFCMAccount.demo(in: tlsDirectory, tokenURI: "https://\(host):\(port)/token")
            configuration.fcmAccounts = [demo.account]
            demoServiceAccount = demo.file
        } else {
            do {
                configuration.fcmAccounts = try fcmServiceAccounts.map {
                    try SimulatorFCMAccount(serviceAccountFile: $0)
                }
            } catch {
                throw ValidationError("--fcm-service-account: \(error)")
            }
        }
        let simulator = try await APNSSimulator.start(configuration)
        if demoServiceAccount != nil, port == 0 {
            // The port was picked at start: point the demo key file's token_uri at it.
            _ = try SimulatorFCMAccount.demo(in: tlsDirectory, tokenURI: simulator.endpointURL + "/token")
        }
        let topic = topics.first ?? "com.example.demo"
        let fcmAccount = demoServiceAccount ?? fcmServiceAccounts[0]
        printOutput(
            """
            APNs + FCM simulator ready on \(simulator.endpointURL) (CA: \(simulator.caFile))
            Control API: \(simulator.controlURL ?? "off")  (GET /inbox, /inbox/{token}, /counters; PUT /faults)
            FCM service accounts trusted: \(configuration.fcmAccounts.map { "\($0.clientEmail) (project \($0.projectID))" }.joined(separator: ", "))
            Try APNs:
              herald send --endpoint \(simulator.endpointURL) --ca-file \(simulator.caFile) \\
                --key-file \(keyPath) --key-id \(usedKeyID) --team-id \(usedTeamID) \\
                --topic \(topic) --token 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef --title Hello --body World
            Try FCM:
              herald send --fcm --service-account \(fcmAccount) \\
                --endpoint \(simulator.endpointURL) --token-endpoint \(simulator.endpointURL)/token --ca-file \(simulator.caFile) \\
                --token demo-fcm-registration-token --title Hello --body World
            Press Ctrl-C to stop.
            """)
        let signalNumber = await waitForTerminationSignal()
        printError("herald sim: signal \(signalNumber), sending GOAWAY and stopping")
        await simulator.shutdown()
    }
}
