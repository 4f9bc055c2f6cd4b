import NIOCore

extension String {
    /// Whether this is an IPv4 or IPv6 literal: TLS clients send no SNI for those (RFC 6066
    /// allows host names only), so the APNs and FCM clients and the simulator's tests agree.
    package var isIPAddress: Bool {
        (try? SocketAddress(ipAddress: self, port: 0)) != nil
    }
}
