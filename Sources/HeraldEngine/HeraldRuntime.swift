package import Crypto
package import Foundation
package import HeraldAPNs
package import HeraldCatalog
package import HeraldCore
package import HeraldFCM
package import HeraldStore
package import Logging
import NIOCore
import NIOPosix
import Synchronization
package import Tracing

/// Everything `herald serve` runs on: configuration, store, apps, the dispatcher's wake-up.
package final class HeraldRuntime: Sendable {
    package let configuration: HeraldConfiguration
    package let store: HeraldStore
    package let apps: [String: AppRuntime]
    package let wake = WakeSignal()
    /// Wakes the timer loop (`TimerLoop`): steps enrolled or moved, the clock moved.
    package let timerWake = WakeSignal()
    /// The background loops' finished passes, for tests to wait on.
    package let passes = LoopPasses()
    package let metrics = HeraldMetrics()
    /// Providers held back by answers that blame the configuration.
    package let pauses = ProviderPauses()
    /// Where the dispatcher gets each app's providers: the apps' clients, unless a test gives
    /// its own.
    package let providers: any ProviderRegistry
    /// The event loops all apps' provider clients share.
    let providerLoops: ProviderEventLoops
    /// What the API accepted last, for the dispatcher to plan without reading it back.
    let recentContents = RecentContents()
    /// Deliveries claimed at acceptance, for the dispatcher (`DirectClaims`).
    package let direct = DirectClaims()
    /// Types below their click-through goal, reported once a day.
    package let goalWatch = GoalWatch()
    /// Calls the apps' webhooks.
    package let webhooks = WebhookSender()
    /// Wakes the webhook loop when a message is queued.
    package let webhookWake = WakeSignal()
    /// The apps whose webhooks take failed deliveries and deactivated devices.
    package let resultWebhooks: ActionRepository.ResultWebhooks
    /// What the dispatcher sent for the test sends the API waits on (`POST …/test`).
    package let testSends = TestSends()
    /// Each app's action-token key, once read.
    private let actionKeys = Mutex<[String: SymmetricKey]>([:])
    /// The last health report, and the one being computed.
    package let healthCache = HealthCache()
    /// How long a health report is reused (`/readyz`, `/healthz`).
    package let healthInterval: Duration
    /// How often the health report's writability probe may write.
    package let writeProbeInterval: Duration
    /// The last writability probe: why it failed (nil: it wrote), and when.
    private let writeProbe = Mutex<(failure: String?, at: ContinuousClock.Instant)?>(nil)
    /// The deployment's dashboard secret, once read.
    private let dashboardKey = Mutex<SymmetricKey?>(nil)
    /// Failed dashboard sign-ins, per client address and in all.
    package let signInThrottle = SignInThrottle()
    /// Client-key writes per user and per client address.
    package let rateLimiter: RateLimiter
    /// Spans of sends and their deliveries (`telemetry`); nil when traces are off.
    package let traces: DeliveryTraces?

    /// The secret dashboard cookies and login tokens are signed with: 32 random bytes the
    /// database keeps (made by the first node that needs it), never derived from an API key.
    package func dashboardSecret() async throws -> SymmetricKey {
        if let key = dashboardKey.withLock({ $0 }) { return key }
        let key = SymmetricKey(data: try await store.dashboard.deploymentSecret(purpose: "dashboard_sessions"))
        dashboardKey.withLock { $0 = key }
        return key
    }

    /// The key `app`'s action tokens are signed with: its first `action_token_secret`, else the
    /// random key the database keeps for it (made by the first node that needs it).
    package func actionKey(_ app: AppRuntime) async throws -> SymmetricKey {
        if let key = actionKeys.withLock({ $0[app.id] }) { return key }
        let key: SymmetricKey
        if let secret = app.configuration.actionTokenSecret {
            key = SymmetricKey(data: Data(secret.utf8))
        } else {
            key = SymmetricKey(data: try await store.actions.appSecret(appID: app.id, purpose: "action_tokens"))
        }
        actionKeys.withLock { $0[app.id] = key }
        return key
    }

    /// The keys `app`'s action tokens verify with: the signing key, and the previous secret
    /// while one rotates out.
    package func actionVerificationKeys(_ app: AppRuntime) async throws -> [SymmetricKey] {
        [try await actionKey(app)]
            + app.configuration.actionTokenSecrets.dropFirst().map { SymmetricKey(data: Data($0.utf8)) }
    }
    package let logger: Logger
    /// When this runtime started (on the store's clock): the dispatcher's clock for `/healthz`
    /// before its first batch.
    let started: Date
    /// How long work may be due without the dispatcher finishing a batch before `/healthz` is 503.
    package let dispatcherStallLimit: TimeInterval
    /// The clock `POST /v1/dev/clock` moves (`--dev`, `clock: manual`); nil on the wall clock.
    package let devClock: DevClock?

    /// Builds the runtime; every app's catalog is loaded and checked here, so a bad catalog stops
    /// the start with its file, line and key.
    package init(
        configuration: HeraldConfiguration, store: HeraldStore, logger: Logger = Logger(label: "herald"),
        clientAdjustment: @escaping @Sendable (inout APNSClientConfiguration) -> Void = { _ in },
        fcmAdjustment: (inout FCMClientConfiguration) -> Void = { _ in }, dispatcherStallLimit: TimeInterval = 60,
        devClock: DevClock? = nil, healthInterval: Duration = .seconds(1), writeProbeInterval: Duration = .seconds(5),
        providers: (any ProviderRegistry)? = nil, tracer: (any Tracer)? = nil
    ) throws(ConfigurationError) {
        self.healthInterval = healthInterval
        self.writeProbeInterval = writeProbeInterval
        try configuration.validate()
        self.dispatcherStallLimit = dispatcherStallLimit
        self.started = store.now
        self.devClock = devClock
        rateLimiter = RateLimiter(configuration.limits)
        // The process's tracer (bootstrapped by `herald serve` before this) unless a test gives one.
        traces = (tracer ?? (configuration.telemetry.enabled ? InstrumentationSystem.tracer : nil)).map {
            DeliveryTraces(tracer: $0)
        }
        self.configuration = configuration
        self.store = store
        self.logger = logger
        let loops = ProviderEventLoops()
        providerLoops = loops
        var apps: [String: AppRuntime] = [:]
        for var app in configuration.apps {
            let catalog = try app.catalogFile.map { file throws(ConfigurationError) in
                try CatalogLoader.load(file: file)
            }
            if !app.payloadKeyIsExplicit, let key = catalog?.app.payloadKey { app.payloadKey = key }
            apps[app.id] = AppRuntime(
                configuration: app, catalog: catalog, loops: loops, logger: logger, clientAdjustment: clientAdjustment,
                fcmAdjustment: fcmAdjustment)
        }
        self.apps = apps
        self.providers = providers ?? ClientRegistry(apps: apps)
        // Due work of apps this node has no configuration for waits for a node that has it.
        store.serve(apps: Set(apps.keys))
        resultWebhooks = ActionRepository.ResultWebhooks(
            failed: Set(
                configuration.apps.filter { $0.webhook?.events.contains(ActionRepository.deliveryFailedEvent) == true }
                    .map(
                        \.id)),
            deactivated: Set(
                configuration.apps.filter {
                    $0.webhook?.events.contains(ActionRepository.deviceDeactivatedEvent) == true
                }
                .map(\.id)))
    }

    /// Reads every app's catalog file again (SIGHUP). Each app that loads takes its new catalog;
    /// one that fails keeps the catalog it had, and the log names the file, line and key.
    /// Returns how many apps have a catalog file and how many of them failed.
    @discardableResult
    package func reloadCatalogs() -> (files: Int, failed: Int) {
        var files = 0
        var failed = 0
        for app in apps.values.sorted(by: { $0.id < $1.id }) {
            guard let file = app.configuration.catalogFile else { continue }
            files += 1
            do {
                guard let catalog = try app.reloadCatalog() else { continue }
                logger.notice(
                    "Catalog reloaded",
                    metadata: [
                        "herald.app": "\(app.id)", "herald.file": "\(file)", "herald.types": "\(catalog.types.count)",
                        "herald.tracks": "\(catalog.tracks.count)", "herald.jobs": "\(catalog.jobs.count)",
                    ])
                if let key = catalog.app.payloadKey, key != app.configuration.payloadKey {
                    logger.warning(
                        "The reloaded catalog names another payload key: it takes effect at the next start",
                        metadata: [
                            "herald.app": "\(app.id)", "herald.payload_key": "\(app.configuration.payloadKey)",
                        ])
                }
            } catch {
                failed += 1
                logger.error(
                    "Catalog not reloaded: the one in use stays",
                    metadata: ["herald.app": "\(app.id)", "herald.error": "\(error)"])
            }
        }
        return (files, failed)
    }

    /// Logs, per app, whether APNs is enabled and why not.
    package func logStatus() {
        if !configuration.development {
            if configuration.tls == nil {
                logger.notice(
                    "Serving plain HTTP: Herald expects a TLS proxy in front (Caddy, nginx, a load balancer); set server.tls to serve HTTPS itself"
                )
            }
            if configuration.clock == .manual {
                logger.warning(
                    "clock: manual — the server's clock stands still and POST /v1/dev/clock moves it: for tests only, never production"
                )
            }
            for app in configuration.apps where app.clientRegistration == .unverified {
                logger.warning(
                    "client_registration: unverified for app \"\(app.id)\" — the public client key alone may register devices for any user: for development only",
                    metadata: ["herald.app": "\(app.id)"])
            }
        }
        switch (configuration.dashboard.enabled, configuration.dashboard.port) {
        case (false, _): logger.info("Dashboard disabled (dashboard.enabled: false)")
        case (true, .some): break
        case (true, .none):
            logger.info(
                "Dashboard served on the API's listener under /dashboard (dashboard.port gives it a listener of its own)"
            )
        }
        for app in apps.values.sorted(by: { $0.id < $1.id }) {
            if let client = app.fcmClient {
                logger.info(
                    "FCM enabled for app \"\(app.id)\"",
                    metadata: [
                        "fcm.project": "\(client.account.projectID)",
                        "fcm.endpoint": "\(client.configuration.endpoint)",
                    ])
            } else {
                logger.info("FCM disabled for app \"\(app.id)\": \(app.fcmDisabledReason ?? "no credentials")")
            }
            if let reason = app.apnsDisabledReason {
                logger.warning("APNs disabled for app \"\(app.id)\": \(reason)")
            } else if let apns = app.configuration.apns {
                logger.info(
                    "APNs enabled for app \"\(app.id)\"",
                    metadata: [
                        "apns.topic": "\(apns.topic)", "apns.environment": "\(apns.environment)",
                        "apns.endpoint": "\(apns.endpoint ?? "Apple")",
                    ])
            }
        }
    }

    /// Closes every provider client, waiting up to `gracePeriod` seconds for requests in flight,
    /// then their shared event loops.
    package func shutdown(gracePeriod: TimeInterval = 5) async {
        for app in apps.values { await app.shutdown(gracePeriod: gracePeriod) }
        await providerLoops.shutdown()
    }

    /// What `/readyz` (and `/healthz`) says: 503 when the database does not take writes or work
    /// has been due for `dispatcherStallLimit` without the dispatcher finishing a batch; paused
    /// providers are listed but keep it 200 (restarting cannot fix a credential). Computed at
    /// most once per `healthInterval` behind one flight, so a flood of probes costs the store
    /// nothing more. It writes nothing: the writability probe (a write) runs on its own timer
    /// (`WriteProbeLoop`, every `writeProbeInterval`) and the report reads its last result.
    package func health() async -> HealthReport {
        await healthCache.report(maximumAge: healthInterval) { [self] in await computeHealth() }
    }

    /// Writes the heartbeat row and keeps the result for the health report. Run by
    /// `WriteProbeLoop`; the first report before its first run (and every report when the
    /// interval is zero, as the tests set it) runs it itself.
    package func probeWritable() async -> String? {
        var failure: String?
        do {
            try await store.checkWritable()
        } catch {
            failure = String(String(describing: error).prefix(200))
        }
        writeProbe.withLock { $0 = (failure, ContinuousClock.now) }
        metrics.databaseWritable(failure == nil)
        return failure
    }

    private func computeHealth() async -> HealthReport {
        var problems: [String] = []
        let failure: String?
        if writeProbeInterval > .zero, let probe = writeProbe.withLock({ $0 }) {
            failure = probe.failure
        } else {
            failure = await probeWritable()
        }
        var database = "writable"
        if let failure {
            database = "unwritable"
            problems.append("database: does not take writes (\(failure))")
        }
        let lastBatch = metrics.lastBatchFinished
        var due = 0
        if let outbox = try? await store.nodes.outboxGauges(appIDs: Array(apps.keys)) {
            due = outbox.totalDue
            let idle = store.now.timeIntervalSince(lastBatch ?? started)
            if due > 0, outbox.oldestDueAge >= dispatcherStallLimit, idle >= dispatcherStallLimit {
                problems.append(
                    "dispatcher: no batch finished in \(Int(idle)) s while \(due) deliveries are due (oldest \(Int(outbox.oldestDueAge)) s)"
                )
            }
        }
        let paused = pauses.all.sorted { $0.key < $1.key }.map { key, pause in
            HealthReport.PausedProvider(
                app: key.app, platform: key.platform, reason: pause.reason, since: HeraldTime.format(pause.since),
                retryAt: HeraldTime.format(pause.retryAt))
        }
        return HealthReport(
            status: problems.isEmpty ? "ok" : "unhealthy", problems: problems, database: database,
            dispatcher: .init(lastBatchAt: lastBatch.map(HeraldTime.format), due: due), providersPaused: paused)
    }
}
