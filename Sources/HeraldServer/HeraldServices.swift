package import Hummingbird
import HummingbirdCore
package import Logging
package import NIOCore
package import ServiceLifecycle

/// How `herald serve` is put together, once: the test harness runs the same function, so
/// what the tests exercise is what production starts.
package enum HeraldServices {
    /// The HTTP application of `runtime` with everything it needs as services of its group, in
    /// start order (a group stops them in reverse): `before` (the `--dev` simulator), the
    /// store, the provider clients, the outbox loop (unless `dispatcher` is false), then the
    /// HTTP server. On SIGTERM the server stops taking requests first, the outbox loop hands
    /// back what it cannot finish within its grace, the provider clients close their
    /// connections, and the store closes last.
    package static func application(
        runtime: HeraldRuntime,
        outbox: DispatcherConfiguration,
        dispatcher: Bool = true,
        before: [any Service] = [],
        logger: Logger = Logger(label: "herald.http"),
        onServerRunning: @escaping @Sendable (any Channel) async -> Void = { _ in }
    ) -> some ApplicationProtocol {
        let configuration = runtime.configuration
        var services = before
        services.append(OnShutdown("store") { await runtime.store.close() })
        services.append(OnShutdown("providers") { await runtime.shutdown() })
        if dispatcher {
            services.append(OutboxLoop(runtime: runtime, configuration: outbox))
            // Only where an app has a webhook (messages of an app that lost its webhook wait for it).
            if runtime.apps.values.contains(where: { $0.configuration.webhook != nil }) { services.append(WebhookLoop(runtime: runtime)) }
        }
        return Application(
            router: HeraldAPI.router(runtime: runtime),
            server: .http1(configuration: .init(idleTimeout: .seconds(Int64(configuration.idleTimeout)))),
            configuration: .init(
                address: .hostname(configuration.host, port: configuration.port), serverName: "herald",
                availableConnectionsDelegate: MaximumAvailableConnections(configuration.maxConnections)),
            services: services,
            onServerRunning: onServerRunning,
            logger: logger)
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
