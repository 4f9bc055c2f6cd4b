import Foundation
package import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import Synchronization

/// The APNs simulator: HTTP/2 + TLS on loopback with Apple's validations, status codes and
/// reasons, an inbox of what it accepted, fault injection and counters; plus a small HTTP/1.1
/// JSON control API. Used in-process by the tests and as `herald sim` by people without keys.
package final class APNSSimulator: Sendable {
    package let configuration: SimulatorConfiguration
    package let state: SimulatorState
    /// The APNs port actually bound.
    package let port: Int
    /// The control API port actually bound, if enabled.
    package let controlPort: Int?
    /// The CA certificate file clients must trust.
    package let caFile: String
    private let group: MultiThreadedEventLoopGroup
    private let serverChannel: any Channel
    private let controlChannel: (any Channel)?
    private let connections: ChannelRegistry
    private let logger: Logger

    /// The endpoint URL clients use.
    package var endpointURL: String { "https://\(configuration.host):\(port)" }
    /// The control API base URL.
    package var controlURL: String? { controlPort.map { "http://\(configuration.host):\($0)" } }

    private init(
        configuration: SimulatorConfiguration, state: SimulatorState, port: Int, controlPort: Int?, caFile: String,
        group: MultiThreadedEventLoopGroup, serverChannel: any Channel, controlChannel: (any Channel)?,
        connections: ChannelRegistry, logger: Logger
    ) {
        self.configuration = configuration
        self.state = state
        self.port = port
        self.controlPort = controlPort
        self.caFile = caFile
        self.group = group
        self.serverChannel = serverChannel
        self.controlChannel = controlChannel
        self.connections = connections
        self.logger = logger
    }

    /// Starts the simulator and returns once both ports listen.
    package static func start(
        _ configuration: SimulatorConfiguration, logger: Logger = Logger(label: "herald.sim")
    ) async throws -> APNSSimulator {
        let tls = try SimulatorTLS.loadOrCreate(directory: configuration.tlsDirectory)
        let sslContext = try NIOSSLContext(configuration: tls.serverConfiguration())
        let state = SimulatorState(faults: configuration.faults, inboxLimit: configuration.inboxLimit)
        let evaluator = APNSRequestEvaluator(configuration: configuration)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: max(1, configuration.threads))
        let connections = ChannelRegistry()
        let isSandbox = configuration.isSandbox
        do {
            let serverChannel = try await ServerBootstrap(group: group)
                .serverChannelOption(.backlog, value: 256)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
                .childChannelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        let sync = channel.pipeline.syncOperations
                        try sync.addHandler(NIOSSLServerHandler(context: sslContext))
                        try sync.addHandler(
                            SimulatorAPNSHandler(evaluator: evaluator, state: state, isSandbox: isSandbox))
                        let id = ObjectIdentifier(channel)
                        connections.channels.withLock { $0[id] = channel }
                        channel.closeFuture.whenComplete { _ in
                            _ = connections.channels.withLock { $0.removeValue(forKey: id) }
                        }
                    }
                }
                .bind(host: configuration.host, port: configuration.port)
                .get()
            var controlChannel: (any Channel)?
            if let controlPort = configuration.controlPort {
                controlChannel = try await ServerBootstrap(group: group)
                    .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                    .childChannelInitializer { channel in
                        channel.eventLoop.makeCompletedFuture {
                            try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                            try channel.pipeline.syncOperations.addHandler(SimulatorControlHandler(state: state))
                        }
                    }
                    .bind(host: configuration.host, port: controlPort)
                    .get()
            }
            let caFile = configuration.tlsDirectory + "/sim-ca.pem"
            let simulator = APNSSimulator(
                configuration: configuration, state: state,
                port: serverChannel.localAddress?.port ?? configuration.port,
                controlPort: controlChannel?.localAddress?.port, caFile: caFile, group: group,
                serverChannel: serverChannel, controlChannel: controlChannel, connections: connections, logger: logger)
            state.webpush.setOrigin(simulator.endpointURL)
            logger.info(
                "APNs simulator listening",
                metadata: [
                    "sim.endpoint": "\(simulator.endpointURL)", "sim.control": "\(simulator.controlURL ?? "-")",
                    "sim.ca_file": "\(caFile)",
                ])
            return simulator
        } catch {
            try? await group.shutdownGracefully()
            throw error
        }
    }

    /// Sends GOAWAY (`Shutdown`) on every open connection; they close once answered.
    package func goAwayAll() async {
        let channels = connections.channels.withLock { Array($0.values) }
        for channel in channels {
            try? await channel.eventLoop.submit {
                if let handler = try? channel.pipeline.syncOperations.handler(type: SimulatorAPNSHandler.self),
                    let context = try? channel.pipeline.syncOperations.context(handlerType: SimulatorAPNSHandler.self)
                {
                    handler.goAway(context: context)
                }
            }.get()
        }
    }

    /// The number of open APNs connections.
    package var openConnections: Int { connections.channels.withLock { $0.count } }

    /// Stops: GOAWAY to every client, then closes the ports and the event loops.
    package func shutdown() async {
        await goAwayAll()
        try? await Task.sleep(for: .milliseconds(50))
        try? await serverChannel.close()
        try? await controlChannel?.close()
        let channels = connections.channels.withLock { Array($0.values) }
        for channel in channels { try? await channel.close() }
        try? await group.shutdownGracefully()
    }
}

/// The open connections, for GOAWAY on shutdown.
final class ChannelRegistry: Sendable {
    let channels = Mutex<[ObjectIdentifier: any Channel]>([:])
}
