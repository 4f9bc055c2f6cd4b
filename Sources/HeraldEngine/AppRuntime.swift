import Crypto
import Foundation
package import HeraldAPNs
package import HeraldCatalog
package import HeraldCore
package import HeraldFCM
package import HeraldStore
package import HeraldWebPush
import Logging
import NIOCore
import NIOPosix
import Synchronization

/// The event loops every app's provider clients share (APNs connections of every app and
/// environment, FCM connections): one group for the process, so a server with many apps does
/// not run a thread per client. Made when the first client is; shut down once, after the clients.
final class ProviderEventLoops: Sendable {
    /// One loop per core but one (left to the store and the HTTP server); at least one. One
    /// loop drives ~50,000 APNs notifications/s.
    static let defaultThreads = max(1, System.coreCount - 1)

    private let threads: Int
    private let state = Mutex<(group: MultiThreadedEventLoopGroup?, closed: Bool)>((nil, false))

    init(threads: Int = ProviderEventLoops.defaultThreads) {
        self.threads = threads
    }

    /// The group, started on first use; `nil` once `shutdown()` has begun (no client may start
    /// on it then).
    var group: MultiThreadedEventLoopGroup? {
        state.withLock { state in
            guard !state.closed else { return nil }
            if let group = state.group { return group }
            let group = MultiThreadedEventLoopGroup(numberOfThreads: threads)
            state.group = group
            return group
        }
    }

    /// Stops the loops; a second call returns at once.
    func shutdown() async {
        let group = state.withLock { state -> MultiThreadedEventLoopGroup? in
            guard !state.closed else { return nil }
            state.closed = true
            return state.group
        }
        try? await group?.shutdownGracefully()
    }
}

/// One configured app at run time: its keys and, when it has credentials, its APNs clients
/// (one per environment, made on first use).
package final class AppRuntime: Sendable {
    package let configuration: HeraldConfiguration.AppConfiguration
    /// The catalog and what the policy step needs of it, swapped whole when the file is read
    /// again (SIGHUP): a reader sees the old pair or the new one, never a mix.
    private let catalogs: Mutex<(catalog: Catalog?, planning: PlanningApp?)>
    /// The app's notification catalog, when it has one.
    package var catalog: Catalog? { catalogs.withLock { $0.catalog } }
    /// Where the app's web push subscriptions may point (`webpush.allowed_hosts`, else the
    /// known push services).
    package var webpushEndpoints: WebPushEndpointPolicy { configuration.webpushEndpoints }
    /// What the policy step needs of the app, when it has a catalog (its PII detectors
    /// compiled once per load).
    package var planning: PlanningApp? { catalogs.withLock { $0.planning } }
    /// What a device's message depends on: the payload key and the APNs topic.
    package let rendering: RenderingApp
    private let signingKey: APNSSigningKey?
    /// Why APNs is off for this app, when it is.
    package let apnsDisabledReason: String?
    private let clients = Mutex<[APNSEnvironment: APNSClient]>([:])
    private let channelClients = Mutex<[APNSEnvironment: APNSChannelClient]>([:])
    /// The app's FCM client, when it has FCM credentials, or why not.
    package let fcmClient: FCMClient?
    package let fcmDisabledReason: String?
    /// The app's web push client, when it has a VAPID key, or why not.
    package let webpushClient: WebPushClient?
    package let webpushDisabledReason: String?
    /// The VAPID public keys (base64url), the current one first; empty when web push is off.
    package let webpushKeys: [String]
    private let logger: Logger
    private let clientAdjustment: @Sendable (inout APNSClientConfiguration) -> Void
    private let loops: ProviderEventLoops

    init(
        configuration: HeraldConfiguration.AppConfiguration, catalog: Catalog?, loops: ProviderEventLoops,
        logger: Logger,
        clientAdjustment: @escaping @Sendable (inout APNSClientConfiguration) -> Void,
        fcmAdjustment: (inout FCMClientConfiguration) -> Void = { _ in }
    ) {
        self.configuration = configuration
        catalogs = Mutex((catalog, Self.planning(catalog, payloadKey: configuration.payloadKey)))
        rendering = RenderingApp(payloadKey: configuration.payloadKey, topic: configuration.apns?.topic ?? "")
        self.logger = logger
        self.clientAdjustment = clientAdjustment
        self.loops = loops
        (fcmClient, fcmDisabledReason) = Self.makeFCMClient(
            configuration.fcm, loops: loops, logger: logger, adjust: fcmAdjustment)
        (webpushClient, webpushDisabledReason, webpushKeys) = Self.makeWebPushClient(configuration, logger: logger)
        guard let apns = configuration.apns else {
            signingKey = nil
            apnsDisabledReason = "no credentials"
            return
        }
        var key: APNSSigningKey?
        var reason: String?
        do {
            key = try APNSSigningKey(file: apns.keyFile, keyID: apns.keyID, teamID: apns.teamID)
            if let endpoint = apns.endpoint { _ = try APNSEndpoint(url: endpoint) }
        } catch {
            key = nil
            reason = error.message
        }
        signingKey = key
        apnsDisabledReason = reason
    }

    package var id: String { configuration.id }

    private static func planning(_ catalog: Catalog?, payloadKey: String) -> PlanningApp? {
        catalog.map { PlanningApp(catalog: $0, policy: $0.app.policyApp, payloadKey: payloadKey) }
    }

    /// Reads `apps[].catalog` again and, when it loads and passes its checks, puts it in place
    /// of the current one for every send, timer, trigger and job from now on. A catalog that
    /// fails changes nothing: the error is thrown and the one in use stays. Nil without a file.
    package func reloadCatalog() throws(ConfigurationError) -> Catalog? {
        guard let file = configuration.catalogFile else { return nil }
        let catalog = try CatalogLoader.load(file: file)
        let planning = Self.planning(catalog, payloadKey: configuration.payloadKey)
        catalogs.withLock { $0 = (catalog, planning) }
        return catalog
    }

    /// How devices register in this app: its APNs environment for devices that name none, its
    /// device cap per user.
    package func registrationRules(client: Bool) -> DeviceRegistrationRules {
        DeviceRegistrationRules(
            defaultEnvironment: configuration.apns?.environment ?? "production",
            maxDevicesPerUser: configuration.maxDevicesPerUser,
            keepUserUnlessSameToken: client && configuration.clientRegistration == .verified)
    }

    /// The web push client of an app with `webpush`: its VAPID key read (a P-256 key in PEM);
    /// a key that cannot be read leaves web push off with the reason, and nothing else.
    private static func makeWebPushClient(_ app: HeraldConfiguration.AppConfiguration, logger: Logger) -> (
        WebPushClient?, String?, [String]
    ) {
        guard let webpush = app.webpush else { return (nil, "no VAPID key", []) }
        var keys: [P256.Signing.PrivateKey] = []
        for file in [webpush.vapidKeyFile] + webpush.deprecatedKeyFiles {
            do {
                keys.append(try VAPID.key(file: file))
            } catch {
                return (nil, error.description, [])
            }
        }
        var configuration = WebPushClientConfiguration(
            key: keys[0], subject: webpush.subject, endpoints: app.webpushEndpoints, caFile: webpush.caFile)
        configuration.deprecatedKeys = Array(keys.dropFirst())
        do {
            return (
                try WebPushClient(configuration: configuration, logger: logger), nil,
                keys.map { VAPID.publicKeyText($0.publicKey) }
            )
        } catch {
            return (nil, "web push: \(error)", [])
        }
    }

    private static func makeFCMClient(
        _ fcm: HeraldConfiguration.FCMConfiguration?, loops: ProviderEventLoops, logger: Logger,
        adjust: (inout FCMClientConfiguration) -> Void
    ) -> (FCMClient?, String?) {
        guard let fcm else { return (nil, "no credentials") }
        do {
            let account = try FCMServiceAccount(file: fcm.serviceAccountFile)
            var configuration = FCMClientConfiguration()
            if let endpoint = fcm.endpoint { configuration.endpoint = endpoint }
            configuration.tokenEndpoint = fcm.tokenEndpoint
            configuration.caFile = fcm.caFile
            adjust(&configuration)
            guard let group = loops.group else { return (nil, "the server is stopping") }
            return (
                try FCMClient(account: account, configuration: configuration, eventLoopGroup: group, logger: logger),
                nil
            )
        } catch {
            return (nil, error.message)
        }
    }

    /// The client for a device environment, or why there is none.
    package func apnsClient(environment: String) -> ClientLookup {
        guard let signingKey, let apns = configuration.apns else {
            return .unavailable(APNSReason("APNsNotConfigured"))
        }
        let environment = APNSEnvironment(rawValue: environment) ?? .production
        return clients.withLock { clients in
            if let client = clients[environment] { return .client(client) }
            // Stopping: the shared loops are gone (or going); nothing new may start on them.
            guard let group = loops.group else { return .unavailable(.clientShutdown) }
            do {
                let endpoint = try apns.endpoint.map(APNSEndpoint.init(url:)) ?? environment.endpoint
                var configuration = APNSClientConfiguration(
                    endpoint: endpoint, additionalCAFile: apns.caFile, connections: 4)
                clientAdjustment(&configuration)
                var clientLogger = logger
                clientLogger[metadataKey: "herald.app"] = "\(self.configuration.id)"
                let client = try APNSClient(
                    key: signingKey, configuration: configuration, eventLoopGroup: group, logger: clientLogger)
                clients[environment] = client
                return .client(client)
            } catch {
                logger.error("APNs client could not start", metadata: ["herald.app": "\(id)", "error": "\(error)"])
                return .unavailable(APNSReason("APNsNotConfigured"))
            }
        }
    }

    /// The broadcast channel client for an environment, or nil without APNs credentials.
    package func channelClient(environment: String) -> APNSChannelClient? {
        guard let signingKey, let apns = configuration.apns else { return nil }
        let environment = APNSEnvironment(rawValue: environment) ?? .production
        return channelClients.withLock { clients in
            if let client = clients[environment] { return client }
            let client = APNSChannelClient(
                key: signingKey, bundleID: apns.topic, environment: environment, pushEndpoint: apns.endpoint,
                channelEndpoint: apns.channelEndpoint, caFile: apns.caFile)
            clients[environment] = client
            return client
        }
    }

    /// Lets a provider's client send again after it refused the credential (a pause's probe).
    package func enable(platform: String) async {
        if platform == "fcm" {
            await fcmClient?.enable()
        } else if platform == "webpush" {
            webpushClient?.enable()
        } else {
            for client in clients.withLock({ Array($0.values) }) { client.enable() }
        }
    }

    /// HTTP/2 connections this app's clients hold open.
    package var openConnections: Int { clients.withLock { $0.values.reduce(0) { $0 + $1.openConnections } } }

    func shutdown(gracePeriod: TimeInterval) async {
        let all = clients.withLock { Array($0.values) }
        for client in all { await client.shutdown(gracePeriod: gracePeriod) }
        for client in channelClients.withLock({ Array($0.values) }) { await client.shutdown() }
        await fcmClient?.shutdown()
        await webpushClient?.shutdown()
    }
}

/// An app's APNs client for an environment, or why there is none.
package enum ClientLookup {
    case client(APNSClient)
    case unavailable(APNSReason)
}

/// The provider registry of `herald serve`: each app's APNs clients (one per environment, made
/// on first use) and its FCM client, as `PushProvider`s.
struct ClientRegistry: ProviderRegistry {
    let apps: [String: AppRuntime]

    func apns(app: String, environment: String) -> ProviderLookup<APNSNotification> {
        guard let app = apps[app] else { return .unavailable(reason: "AppNotConfigured") }
        switch app.apnsClient(environment: environment) {
        case .client(let client): return .provider(APNSProvider(client: client))
        case .unavailable(.clientShutdown): return .stopping
        case .unavailable(let reason): return .unavailable(reason: reason.rawValue)
        }
    }

    func fcm(app: String) -> ProviderLookup<FCMMessage> {
        guard let client = apps[app]?.fcmClient else { return .unavailable(reason: "FCMNotConfigured") }
        return .provider(FCMProvider(client: client))
    }

    func webpush(app: String) -> ProviderLookup<WebPushMessage> {
        guard let client = apps[app]?.webpushClient else { return .unavailable(reason: "WebPushNotConfigured") }
        return .provider(WebPushProvider(client: client))
    }

    func enable(app: String, platform: String) async {
        await apps[app]?.enable(platform: platform)
    }
}
