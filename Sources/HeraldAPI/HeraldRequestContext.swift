package import Hummingbird
package import NIOCore

/// Every request's context: Hummingbird's core storage and the peer's address (the connection's
/// remote end; behind a proxy, the proxy's), which sign-in throttling, rate limits and the
/// audit log of key use key on.
package struct HeraldRequestContext: RequestContext, RemoteAddressRequestContext {
    package var coreContext: CoreRequestContextStorage
    package let remoteAddress: SocketAddress?
    /// The app and role of a `/v1/apps/{app}` request, once `AppKeyMiddleware` resolved them.
    var caller: Caller?

    package init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
    }

    /// The peer's IP address as text (`unknown` when the channel has none).
    package var peer: String { remoteAddress?.ipAddress ?? "unknown" }
}
