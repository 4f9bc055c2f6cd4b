import HTTPTypes
package import HeraldAPI
import HeraldCatalog
import HeraldDashboard
package import HeraldEngine
import HeraldSchedule
import HeraldStore
package import Hummingbird
import HummingbirdCore
import HummingbirdHTTP2
package import Logging
package import NIOCore
package import ServiceLifecycle

/// How `herald serve` is put together, once: the test harness runs the same function, so
/// what the tests exercise is what production starts.
package enum HeraldServices {
    /// The HTTP application of `runtime` with everything it needs as services of its group, in
    /// start order (a group stops them in reverse): `before` (the `--dev` simulator), the
    /// store, the provider clients, the outbox loop with the timer loop and retention (unless
    /// `dispatcher` is false), the
    /// dashboard's own listener (with `dashboard.port`), the certificate reloader (with
    /// `server.tls`), then the API server. On SIGTERM the server stops taking requests first,
    /// the outbox loop hands back what it cannot finish within its grace, the provider clients
    /// close their connections, and the store closes last.
    ///
    /// With `server.tls` the listeners serve HTTPS (HTTP/2 and HTTP/1.1 by ALPN); without it,
    /// plain HTTP/1.1 for a TLS proxy in front. Throws when the certificate cannot be used.
    package static func application(
        runtime: HeraldRuntime,
        outbox: DispatcherConfiguration,
        dispatcher: Bool = true,
        before: [any Service] = [],
        logger: Logger = Logger(label: "herald.http"),
        onServerRunning: @escaping @Sendable (any Channel) async -> Void = { _ in },
        onDashboardRunning: @escaping @Sendable (any Channel) async -> Void = { _ in }
    ) throws -> some ApplicationProtocol {
        let configuration = runtime.configuration
        var services = before
        services.append(OnShutdown("store") { await runtime.store.close() })
        services.append(OnShutdown("providers") { await runtime.shutdown() })
        if dispatcher {
            services.append(OutboxLoop(runtime: runtime, configuration: outbox))
            services.append(TimerLoop(runtime: runtime, interval: outbox.idleInterval))
            services.append(RetentionService(runtime: runtime, configuration: outbox))
            // Only where an app has a webhook (messages of an app that lost its webhook wait for it).
            if runtime.apps.values.contains(where: { $0.configuration.webhook != nil }) {
                services.append(WebhookLoop(runtime: runtime))
            }
        }
        if runtime.writeProbeInterval > .zero { services.append(WriteProbeLoop(runtime: runtime)) }
        let certificates = try configuration.tls.map { files throws(ConfigurationError) in
            try ServerCertificates(files: files)
        }
        if let certificates { services.append(CertificateReloader(certificates: certificates, logger: runtime.logger)) }
        if configuration.dashboard.enabled, let port = configuration.dashboard.port {
            services.append(
                Application(
                    router: Dashboard.router(runtime: runtime),
                    server: try server(configuration, certificates, runtime: runtime),
                    configuration: .init(
                        address: .hostname(configuration.dashboard.host ?? configuration.host, port: port),
                        serverName: "herald-dashboard",
                        availableConnectionsDelegate: MaximumAvailableConnections(configuration.maxConnections)),
                    onServerRunning: onDashboardRunning,
                    logger: logger))
        }
        return Application(
            router: CORSRouter(router: apiRouter(runtime: runtime), runtime: runtime),
            server: try server(configuration, certificates, runtime: runtime, deviceReports: true),
            configuration: .init(
                address: .hostname(configuration.host, port: configuration.port), serverName: "herald",
                availableConnectionsDelegate: MaximumAvailableConnections(configuration.maxConnections)),
            services: services,
            onServerRunning: onServerRunning,
            logger: logger)
    }

    /// The API listener's router: the API, and the dashboard under `/dashboard` unless it has a
    /// listener of its own (`dashboard.port`) or is off.
    package static func apiRouter(runtime: HeraldRuntime) -> Router<HeraldRequestContext> {
        let router = HeraldAPI.router(runtime: runtime)
        if runtime.configuration.dashboard.onAPIListener { Dashboard.addRoutes(to: router, runtime: runtime) }
        return router
    }

    /// HTTPS (HTTP/2 and HTTP/1.1 by ALPN) with `certificates`, else plain HTTP/1.1; keyless
    /// health probes answered on the event loop (`ProbeHandler`), and with `deviceReports`
    /// (the API's listener) devices' opens and receipts taken there too (`DeviceReportHandler`),
    /// unless traces are on: those calls then get their server spans from the router.
    static func server(
        _ configuration: HeraldConfiguration, _ certificates: ServerCertificates?, runtime: HeraldRuntime,
        deviceReports: Bool = false
    ) throws -> HTTPServerBuilder {
        let seconds = Int64(configuration.idleTimeout)
        let probes = handlers(runtime, deviceReports: deviceReports && runtime.traces == nil)
        guard let certificates else {
            return .http1(configuration: .init(additionalChannelHandlers: probes(), idleTimeout: .seconds(seconds)))
        }
        return try .http2Upgrade(
            tlsConfiguration: certificates.tlsConfiguration,
            configuration: .init(
                idleTimeout: .seconds(seconds),
                streamConfiguration: .init(additionalChannelHandlers: probes(), idleTimeout: .seconds(seconds))))
    }

    /// A new `ProbeHandler` per connection (or HTTP/2 stream), and with `deviceReports` a
    /// `DeviceReportHandler` after it.
    static func handlers(_ runtime: HeraldRuntime, deviceReports: Bool) -> @Sendable () -> [any RemovableChannelHandler]
    {
        let interval = runtime.healthInterval
        let cache = runtime.healthCache
        let metrics = runtime.metrics
        let extra: HTTPFields = runtime.configuration.tls == nil ? [:] : [.strictTransportSecurity: "max-age=31536000"]
        let reports = deviceReports ? DeviceReports(runtime: runtime) : nil
        return {
            [
                ProbeHandler(
                    answer: { path in
                        switch path {
                        case "/livez": true
                        case "/readyz", "/healthz": cache.fresh(maximumAge: interval).map { $0.status == "ok" }
                        default: nil
                        }
                    }, extraHeaders: extra,
                    counted: { path, status in metrics.apiRequest(route: path, method: "GET", status: status) })
            ] + (reports.map { [DeviceReportHandler(reports: $0, extraHeaders: extra)] } ?? [])
        }
    }
}

/// Probes every `writeProbeInterval` whether the database takes a write, for the health report
/// to read: probes from outside never write.
struct WriteProbeLoop: Service {
    let runtime: HeraldRuntime

    func run() async throws {
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            let failure = await runtime.probeWritable()
            if let failure {
                runtime.logger.error("The database does not take writes", metadata: ["error": "\(failure)"])
            }
            let interval = runtime.writeProbeInterval
            _ = try? await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
        }
    }
}

/// A service that does nothing until graceful shutdown (or cancellation), then `action`: how
/// the store, the provider clients and the `--dev` simulator close in their turn.
package struct OnShutdown: Service, CustomStringConvertible {
    package let description: String
    let action: @Sendable () async -> Void

    package init(_ name: String, _ action: @escaping @Sendable () async -> Void) {
        description = name
        self.action = action
    }

    package func run() async throws {
        try? await gracefulShutdown()
        await action()
    }
}
