package import Foundation
import NIOCore

/// Which APNs host to talk to (protocols.md §1): Apple's two, or any URL (the simulator).
package struct APNSEndpoint: Sendable, Hashable, CustomStringConvertible {
    package var host: String
    package var port: Int

    package init(host: String, port: Int = 443) {
        self.host = host
        self.port = port
    }

    package static let production = APNSEndpoint(host: "api.push.apple.com")
    package static let sandbox = APNSEndpoint(host: "api.sandbox.push.apple.com")
    /// Apple's firewall-friendly alternative port, on either host.
    package static let alternatePort = 2197

    /// Parses `https://host[:port]`; the port defaults to 443.
    package init(url: String) throws(APNSConfigurationError) {
        guard let components = URLComponents(string: url), components.scheme == "https",
            let host = components.host, !host.isEmpty
        else {
            throw APNSConfigurationError(
                code: .invalidEndpoint, message: "endpoint \"\(url)\" is not an https://host[:port] URL")
        }
        self.host = host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host
        self.port = components.port ?? 443
    }

    package var description: String { "https://\(host):\(port)" }
}

/// An APNs environment: where tokens were issued.
package enum APNSEnvironment: String, Sendable, Hashable, CaseIterable, Codable {
    case production
    case sandbox

    package var endpoint: APNSEndpoint { self == .production ? .production : .sandbox }
}

/// Everything an `APNSClient` needs besides the signing key. Defaults suit production.
package struct APNSClientConfiguration: Sendable {
    /// Where to connect.
    package var endpoint: APNSEndpoint
    /// A PEM file of extra CA certificates to trust (the simulator's CA); the system roots stay trusted.
    package var additionalCAFile: String?
    /// Long-lived HTTP/2 connections kept to the endpoint. Default 2.
    package var connections: Int
    /// Our own cap on streams per connection; the server's `SETTINGS_MAX_CONCURRENT_STREAMS` may lower it. Default 1000.
    package var maximumStreamsPerConnection: Int
    /// Seconds a request may wait for a stream once handed to a connection (however long the
    /// connection takes to come up), and again for its answer once written. Default 10.
    package var requestDeadline: TimeInterval
    /// Seconds a TCP connect may take, and again the TLS handshake and HTTP/2 preface up to the
    /// server's first SETTINGS. Default 10.
    package var connectTimeout: TimeInterval
    /// Seconds without any frame from the server before we PING it. Default 60.
    package var idlePingInterval: TimeInterval
    /// Seconds a PING may go unanswered before the connection is closed. Default 10.
    package var pingTimeout: TimeInterval
    /// First delay before reconnecting after a failure; doubles up to `maximumReconnectDelay`. Default 0.1 s.
    package var reconnectBaseDelay: TimeInterval
    /// Longest delay between reconnect attempts. Default 30 s.
    package var maximumReconnectDelay: TimeInterval
    /// Consecutive failed connects after which the notifications waiting on that connection fail. Default 5.
    package var maximumConnectFailures: Int
    /// When and how often to resend.
    package var retry: APNSRetryPolicy

    /// How often deadlines are checked (queued and written requests alike): a quarter of
    /// `requestDeadline`, between 10 ms and 1 s.
    var deadlineSweepInterval: TimeAmount {
        .milliseconds(Int64(min(1000, max(10, requestDeadline * 1000 / 4))))
    }

    package init(
        endpoint: APNSEndpoint,
        additionalCAFile: String? = nil,
        connections: Int = 2,
        maximumStreamsPerConnection: Int = 1000,
        requestDeadline: TimeInterval = 10,
        connectTimeout: TimeInterval = 10,
        idlePingInterval: TimeInterval = 60,
        pingTimeout: TimeInterval = 10,
        reconnectBaseDelay: TimeInterval = 0.1,
        maximumReconnectDelay: TimeInterval = 30,
        maximumConnectFailures: Int = 5,
        retry: APNSRetryPolicy = APNSRetryPolicy()
    ) {
        self.endpoint = endpoint
        self.additionalCAFile = additionalCAFile
        self.connections = max(1, connections)
        self.maximumStreamsPerConnection = max(1, maximumStreamsPerConnection)
        self.requestDeadline = requestDeadline
        self.connectTimeout = connectTimeout
        self.idlePingInterval = idlePingInterval
        self.pingTimeout = pingTimeout
        self.reconnectBaseDelay = reconnectBaseDelay
        self.maximumReconnectDelay = maximumReconnectDelay
        self.maximumConnectFailures = maximumConnectFailures
        self.retry = retry
    }
}
