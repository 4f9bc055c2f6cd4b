import ArgumentParser
import Crypto
import Foundation
import HeraldCatalog
import HeraldCore
import HeraldEngine
import HeraldServer
import HeraldSimulator
import HeraldStore
import HeraldWebPush
import Hummingbird
import HummingbirdCore
import Logging
import ServiceLifecycle
import UnixSignals

#if canImport(Glibc)
    import Glibc
#endif

/// `herald serve`: the API server and the dispatcher in one process.
struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the Herald server: device registry, send API, durable outbox and dispatcher.",
        discussion: """
            The configuration file (YAML) is --config, else $HERALD_CONFIG, else herald.yaml if present. \
            HERALD_DATABASE_URL, HERALD_ADMIN_KEY and HERALD_METRICS_KEY override it. --dev needs no configuration: it runs a \
            demo app against an in-process APNs + FCM simulator and prints the keys and commands to try.
            """)

    @Option(help: "The configuration file (YAML).") var config: String?
    @Flag(help: "Start with a demo app wired to an in-process APNs + FCM simulator; no configuration needed.") var dev =
        false
    @Option(help: "Override server.host.") var host: String?
    @Option(help: "Override server.port.") var port: Int?
    @Option(name: .customLong("dev-dir"), help: "Where --dev keeps its database, keys and simulator files.")
    var devDirectory = ".herald-dev"

    func run() async throws {
        let environment = ProcessInfo.processInfo.environment
        limitMallocArenas(environment)
        var configuration: HeraldConfiguration
        var simulator: APNSSimulator?
        var banner: (@Sendable (Int) -> String)?
        var configurationFile: String?
        do {
            if dev {
                // The dev simulator logs as it starts, so logging is set up first (from the
                // environment only: a dev run reads no configuration file).
                bootstrapLogging()
                (configuration, simulator, banner) = try await DevSetup.make(
                    directory: devDirectory, host: host, port: port)
            } else {
                configurationFile =
                    config ?? environment["HERALD_CONFIG"]
                    ?? (FileManager.default.fileExists(atPath: "herald.yaml") ? "herald.yaml" : nil)
                configuration = try configurationFile.map(HeraldConfiguration.load(file:)) ?? HeraldConfiguration()
                bootstrapLogging(format: configuration.logFormat)
            }
        } catch let error as ConfigurationError {
            printError("herald serve: configuration error: \(error)")
            throw ExitCode(2)
        }
        let logger = Logger(label: "herald")
        if !dev && configurationFile == nil {
            logger.warning(
                "No configuration file (give --config, set HERALD_CONFIG, or run with --dev): no apps are configured")
        }
        if dev {
            // A dev run never reaches another database or takes another admin key: only its own
            // SQLite file under --dev-dir, whatever the environment holds.
            for name in ["HERALD_DATABASE_URL", "HERALD_ADMIN_KEY"] where environment[name]?.isEmpty == false {
                logger.warning("\(name) is ignored under --dev: a dev run only opens its own SQLite file in --dev-dir")
            }
            var kept = environment
            kept["HERALD_DATABASE_URL"] = nil
            kept["HERALD_ADMIN_KEY"] = nil
            configuration.applyEnvironment(kept)
            configuration.development = true
        } else {
            configuration.applyEnvironment(environment)
        }
        if let host { configuration.host = host }
        if let port { configuration.port = port }

        let tracing: (any Service)?
        do {
            tracing = try TracingBootstrap.bootstrap(configuration.telemetry, logger: logger)
        } catch {
            printError("herald serve: telemetry: \(error)")
            throw ExitCode(2)
        }
        // --dev and `clock: manual`: a clock POST /v1/dev/clock can move.
        let devClock = DevClock.make(dev: dev, setting: configuration.clock)
        let store: HeraldStore
        do {
            store = try await HeraldStore.open(
                url: configuration.databaseURL, clock: devClock?.clock ?? .system, logger: Logger(label: "herald.store")
            )
        } catch let error as StoreError {
            printError("herald serve: \(error.message)")
            throw ExitCode(2)
        }
        let runtime: HeraldRuntime
        do {
            runtime = try HeraldRuntime(configuration: configuration, store: store, logger: logger, devClock: devClock)
        } catch {
            printError("herald serve: catalog error: \(error)")
            await store.close()
            throw ExitCode(2)
        }
        runtime.logStatus()
        if configuration.adminKey == nil {
            logger.notice("No admin key (admin_key or HERALD_ADMIN_KEY): only app keys are accepted")
        }
        let listenHost = configuration.host
        let listenPort = configuration.port
        let startBanner = banner
        let scheme = configuration.tls == nil ? "http" : "https"
        // The span exporter first, so it stops last; the dev simulator after the server.
        var before: [any Service] = tracing.map { [$0] } ?? []
        if let simulator { before.append(OnShutdown("dev simulator") { await simulator.shutdown() }) }
        let application: any ApplicationProtocol
        do {
            application = try HeraldServices.application(
                runtime: runtime, outbox: configuration.outbox,
                before: before,
                onServerRunning: { channel in
                    let address = channel.localAddress.map { "\($0)" } ?? "\(listenHost):\(listenPort)"
                    logger.info(
                        "Herald listening", metadata: ["herald.address": "\(address)", "herald.scheme": "\(scheme)"])
                    if let startBanner { printOutput(startBanner(channel.localAddress?.port ?? listenPort)) }
                    SystemdNotify.send("READY=1\nSTATUS=Listening on \(address)")
                },
                onDashboardRunning: { channel in
                    let address = channel.localAddress.map { "\($0)" } ?? "?"
                    logger.info(
                        "Herald dashboard listening",
                        metadata: ["herald.address": "\(address)", "herald.scheme": "\(scheme)"])
                })
        } catch let error as ConfigurationError {
            printError("herald serve: configuration error: \(error)")
            await store.close()
            throw ExitCode(2)
        }
        let tls = configuration.tls != nil
        let watcher = Task { await Self.watchSignals(logger: logger, tls: tls, runtime: runtime) }
        defer { watcher.cancel() }
        try await application.runService(gracefulShutdownSignals: [.sigterm, .sigint])
        logger.info("Herald stopped")
    }
}

extension ServeCommand {
    /// Beside the service group's own handling: tells systemd `STOPPING=1` as soon as SIGTERM
    /// or SIGINT arrives, and takes SIGHUP (`systemctl reload`), which would otherwise end the
    /// process: every app's catalog file is read again (one that fails keeps the catalog in
    /// use), and with `server.tls` the certificate reloader reads its files again. With neither,
    /// there is nothing to reload and the log says so.
    static func watchSignals(logger: Logger, tls: Bool, runtime: HeraldRuntime) async {
        let signals = await UnixSignalsSequence(trapping: .sigterm, .sigint, .sighup)
        for await signal in signals {
            if signal == .sighup {
                SystemdNotify.send("RELOADING=1")
                let catalogs = runtime.reloadCatalogs()
                if !tls && catalogs.files == 0 {
                    logger.notice(
                        "SIGHUP: nothing to reload (no server.tls, no catalogs); the rest of the configuration is read at start"
                    )
                }
                SystemdNotify.send("READY=1")
                continue
            }
            SystemdNotify.send("STOPPING=1")
        }
    }
}

/// `herald serve --dev`: everything a newcomer needs, made on the spot and kept in one folder.
enum DevSetup {
    /// The configuration, the simulator, and the banner for the port the listener got (`--port 0`
    /// picks a free one, so the banner is written once it is known).
    static func make(directory: String, host: String?, port: Int?) async throws -> (
        HeraldConfiguration, APNSSimulator, @Sendable (Int) -> String
    ) {
        let fileManager = FileManager.default
        try fileManager.createDirectory(atPath: directory, withIntermediateDirectories: true)
        // Run from a checkout, the demo app gets the SyncWell example catalog (send by type).
        let demoCatalog = "Examples/syncwell.yaml"
        let keyPath = directory + "/demo-AuthKey.p8"
        let key: P256.Signing.PrivateKey
        if let pem = try? String(contentsOfFile: keyPath, encoding: .utf8),
            let existing = try? P256.Signing.PrivateKey(pemRepresentation: pem)
        {
            key = existing
        } else {
            key = P256.Signing.PrivateKey()
            try SecretFile.write(key.pemRepresentation, to: keyPath)
        }
        let secretsPath = directory + "/keys.json"
        var secrets =
            (try? JSONDecoder().decode([String: String].self, from: Data(contentsOf: URL(fileURLWithPath: secretsPath))))
            ?? [:]
        for name in ["admin", "server", "client"] where secrets[name] == nil {
            secrets[name] = "\(name == "admin" ? "hadm" : name == "server" ? "hsrv" : "hcli")_" + randomSecret()
        }
        try SecretFile.write(try JSONEncoder().encode(secrets), to: secretsPath)

        var simulatorConfiguration = SimulatorConfiguration(tlsDirectory: directory + "/sim")
        simulatorConfiguration.port = 0
        simulatorConfiguration.controlPort = 0
        simulatorConfiguration.keys = [
            SimulatorKey(keyID: "DEMOKEY001", teamID: "DEMOTEAM01", publicKey: key.publicKey)
        ]
        simulatorConfiguration.bundleIDs = ["com.example.demo"]
        // FCM: a demo service account the simulator trusts (its port is picked at start, so the
        // token endpoint is given to the app explicitly).
        let fcmDemo = try SimulatorFCMAccount.demo(in: directory + "/sim", tokenURI: "https://127.0.0.1/token")
        simulatorConfiguration.fcmAccounts = [fcmDemo.account]
        let simulator = try await APNSSimulator.start(simulatorConfiguration)

        var configuration = HeraldConfiguration()
        configuration.host = host ?? "127.0.0.1"
        configuration.port = port ?? 8080
        configuration.databaseURL = "sqlite://\(directory)/herald-dev.sqlite"
        configuration.adminKey = secrets["admin"]
        configuration.apps = [
            HeraldConfiguration.AppConfiguration(
                id: "demo", payloadKey: "demo", serverKey: secrets["server"], clientKey: secrets["client"],
                apns: HeraldConfiguration.APNSConfiguration(
                    teamID: "DEMOTEAM01", keyID: "DEMOKEY001", keyFile: keyPath, topic: "com.example.demo",
                    environment: "sandbox", endpoint: simulator.endpointURL, caFile: simulator.caFile),
                catalogFile: fileManager.fileExists(atPath: demoCatalog) ? demoCatalog : nil)
        ]
        // Dev mode trusts the client key as it is; production apps verify user tokens.
        configuration.apps[0].clientRegistration = .unverified
        configuration.apps[0].fcm = HeraldConfiguration.FCMConfiguration(
            serviceAccountFile: fcmDemo.file, endpoint: simulator.endpointURL,
            tokenEndpoint: simulator.endpointURL + "/token",
            caFile: simulator.caFile)
        // Web Push: a VAPID key of the dev folder's; subscriptions may point at the browsers' push
        // services and at the simulator; the example page (Examples/web, served on port 8000)
        // may call the app from the browser.
        let vapidPath = directory + "/vapid.pem"
        if (try? VAPID.key(file: vapidPath)) == nil {
            try SecretFile.write(P256.Signing.PrivateKey().pemRepresentation, to: vapidPath)
        }
        configuration.apps[0].webpush = HeraldConfiguration.WebPushConfiguration(
            vapidKeyFile: vapidPath, subject: "mailto:dev@example.com",
            allowedHosts: WebPushEndpointPolicy.knownHosts + ["127.0.0.1"], caFile: simulator.caFile)
        configuration.apps[0].corsOrigins = ["http://localhost:8000", "http://127.0.0.1:8000"]
        let host = configuration.host
        let catalogFile = configuration.apps[0].catalogFile
        let controlURL = simulator.controlURL!
        let keys = secrets
        return (
            configuration, simulator,
            { port in
                let base = "http://\(host):\(port)"
                let typedExample =
                    catalogFile == nil
                    ? ""
                    : """

                    Send by catalog type (\(demoCatalog): copy per device locale, quiet hours, preferences):
                      curl -s -X POST \(base)/v1/apps/demo/notifications -H 'Authorization: Bearer \(keys["server"]!)' \\
                        -H 'Content-Type: application/json' \\
                        -d '{"to":{"user_ids":["alice"]},"type":"PN-02","data":{"Source":"Strava","source_id":"strava"}}'
                    Or let an event do it (the catalog's triggers: PN-02 and the badge):
                      curl -s -X POST \(base)/v1/apps/demo/events -H 'Authorization: Bearer \(keys["server"]!)' \\
                        -H 'Content-Type: application/json' \\
                        -d '{"name":"sync.failed","user_id":"alice","data":{"source_name":"Strava","source_id":"strava"}}'
                    """
                let token = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
                let fcmToken = "demo-android-registration-token"
                let banner = """

                    Herald is running in dev mode: app "demo", APNs, FCM and Web Push via the in-process simulator.
                    Client registration is UNVERIFIED here: the client key alone may register any user's devices.
                    In production set apps[].user_token_secret and keep client_registration: verified (the default),
                    so every client-key call carries X-Herald-User-Token signed by your backend (herald token --help).
                      admin key:  \(keys["admin"]!)
                      server key: \(keys["server"]!)   (send notifications)
                      client key: \(keys["client"]!)   (register devices, for apps)

                    Register a device and send it a notification:
                      curl -s -X POST \(base)/v1/apps/demo/devices -H 'Authorization: Bearer \(keys["client"]!)' \\
                        -H 'Content-Type: application/json' \\
                        -d '{"device_id":"phone-1","user_id":"alice","token":"\(token)","environment":"sandbox"}'
                      curl -s -X POST \(base)/v1/apps/demo/devices -H 'Authorization: Bearer \(keys["client"]!)' \\
                        -H 'Content-Type: application/json' \\
                        -d '{"device_id":"pixel-1","user_id":"alice","platform":"fcm","token":"\(fcmToken)"}'
                      curl -s -X POST \(base)/v1/apps/demo/notifications -H 'Authorization: Bearer \(keys["server"]!)' \\
                        -H 'Content-Type: application/json' \\
                        -d '{"to":{"user_ids":["alice"]},"alert":{"title":"Hello","body":"From Herald"},"data":{"screen":"inbox"}}'\(typedExample)

                    A browser (Web Push): python3 -m http.server 8000 -d Examples/web, then open
                      http://localhost:8000/?herald=\(base)&key=\(keys["client"]!)

                    Move the clock forward (schedules, tracks, jobs and quiet hours act as if the time had passed):
                      curl -s -X POST \(base)/v1/dev/clock -H 'Authorization: Bearer \(keys["admin"]!)' \\
                        -H 'Content-Type: application/json' -d '{"advance":"48h"}'

                    See what reached the devices (the simulator's inbox):
                      curl -s \(controlURL)/inbox/\(token)
                      curl -s \(controlURL)/inbox/\(fcmToken)

                    Files: \(directory)/ (database, demo key, keys.json). Ctrl-C stops.
                    """
                return banner
            }
        )
    }

    static func randomSecret() -> String {
        var generator = SystemRandomNumberGenerator()
        let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        return String((0..<32).map { _ in alphabet[Int(generator.next() % UInt64(alphabet.count))] })
    }
}

/// glibc gives each thread that allocates under contention an arena of its own (up to eight per
/// core), and an arena keeps what it once held. The server's threads (event loops, the database
/// threads, the concurrency pool) made that 20–30 MB of resident memory in a 1M fan-out (peak
/// 154–164 MB; 123 MB against 147 MB at 300k with two arenas). Two arenas, unless
/// `MALLOC_ARENA_MAX` says otherwise.
func limitMallocArenas(_ environment: [String: String]) {
    #if canImport(Glibc)
        // mallopt(M_ARENA_MAX, 2): malloc.h is not in Swift's Glibc module, so looked up by name.
        guard environment["MALLOC_ARENA_MAX"] == nil,
            let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "mallopt")
        else { return }
        typealias Mallopt = @convention(c) (Int32, Int32) -> Int32
        let mArenaMax: Int32 = -8
        _ = unsafeBitCast(symbol, to: Mallopt.self)(mArenaMax, 2)
    #endif
}
