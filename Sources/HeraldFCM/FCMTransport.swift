import Foundation
import HeraldHTTP2
import NIOCore
import NIOHPACK
import NIOPosix
import NIOSSL

/// An HTTPS endpoint: host, port and path prefix (`https://fcm.googleapis.com`).
struct FCMEndpoint: Sendable, Hashable {
    var host: String
    var port: Int
    var path: String

    init(url: String) throws(FCMConfigurationError) {
        guard let components = URLComponents(string: url), components.scheme == "https", let host = components.host,
            !host.isEmpty
        else { throw FCMConfigurationError("\(url) is not an https:// URL") }
        self.host = host
        port = components.port ?? 443
        path = components.path.hasSuffix("/") ? String(components.path.dropLast()) : components.path
    }

    var authority: String { port == 443 ? host : "\(host):\(port)" }
}

/// One HTTP/2 + TLS connection (ALPN h2) to an endpoint, driven by `HTTP2ClientHandler`.
final class FCMConnection: Sendable {
    let channel: any Channel
    let status: HTTP2ConnectionStatus
    /// The connection's HTTP/2 handler, looked up once: every request is handed to it on the
    /// channel's event loop.
    private let handler: NIOLoopBound<HTTP2ClientHandler>

    private init(channel: any Channel, status: HTTP2ConnectionStatus, handler: NIOLoopBound<HTTP2ClientHandler>) {
        self.channel = channel
        self.status = status
        self.handler = handler
    }

    static func connect(
        to endpoint: FCMEndpoint, sslContext: NIOSSLContext, eventLoop: any EventLoop, timeout: TimeAmount
    ) async throws -> FCMConnection {
        let serverHostname = endpoint.host.isIPAddress ? nil : endpoint.host
        let status = HTTP2ConnectionStatus()
        let channel = try await ClientBootstrap(group: eventLoop)
            .connectTimeout(timeout)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(NIOSSLClientHandler(context: sslContext, serverHostname: serverHostname))
                    try sync.addHandler(HTTP2ClientHandler(authority: endpoint.authority, status: status))
                }
            }
            .connect(host: endpoint.host, port: endpoint.port).get()
        let handler = try await channel.eventLoop.submit {
            NIOLoopBound(
                try channel.pipeline.syncOperations.handler(type: HTTP2ClientHandler.self), eventLoop: channel.eventLoop
            )
        }.get()
        return FCMConnection(channel: channel, status: status, handler: handler)
    }

    var isUsable: Bool { status.isUsable && channel.isActive }

    func request(
        method: String = "POST", path: String, headers: [(String, String)], body: ByteBuffer, timeout: TimeAmount
    ) async throws -> HTTP2Response {
        let promise = channel.eventLoop.makePromise(of: HTTP2Response.self)
        var hpack = HPACKHeaders()
        for (name, value) in headers {
            hpack.add(name: name, value: value, indexing: name == "authorization" ? .indexable : .nonIndexable)
        }
        let deadline = NIODeadline.now() + timeout
        let sendable = hpack
        let handler = self.handler
        channel.eventLoop.execute {
            handler.value.submit(
                method: method, path: path, headers: sendable, body: body, deadline: deadline, promise: promise)
        }
        return try await promise.futureResult.get()
    }

    func close() {
        channel.close(promise: nil)
    }
}

extension NIOSSLContext {
    /// TLS 1.2+, ALPN h2, plus an extra trusted CA (the simulator's).
    static func fcm(caFile: String?) throws(FCMConfigurationError) -> NIOSSLContext {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.minimumTLSVersion = .tlsv12
        tls.applicationProtocols = ["h2"]
        if let caFile {
            guard FileManager.default.isReadableFile(atPath: caFile) else {
                throw FCMConfigurationError("cannot read the CA file \(caFile)")
            }
            tls.additionalTrustRoots = [.file(caFile)]
        }
        do {
            return try NIOSSLContext(configuration: tls)
        } catch {
            throw FCMConfigurationError("TLS setup failed: \(error)")
        }
    }
}
