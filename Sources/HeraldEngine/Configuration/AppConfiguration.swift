package import Foundation
package import HeraldCore
import HeraldStore
package import HeraldWebPush

extension HeraldConfiguration {
    /// One app: its keys, payload key and push credentials.
    package struct AppConfiguration: Sendable {
        package var id: String
        /// Custom data goes under this top-level payload key. Defaults to the catalog's
        /// `app.payload_key`, else the app id.
        package var payloadKey: String {
            didSet { payloadKeyIsExplicit = true }
        }
        /// Whether the configuration names the payload key (else the catalog's may replace it).
        package private(set) var payloadKeyIsExplicit = false
        /// Keys that may send and read (`keys.server`): one, or two while rotating.
        package var serverKeys: [String]
        /// Keys that ship in apps and may register devices (`keys.client`): one, or two while rotating.
        package var clientKeys: [String]
        /// The secrets user tokens are verified with (`user_token_secret`, ≥ 32 bytes each): one,
        /// or two while rotating (the app's backend signs with the new one; both verify).
        package var userTokenSecrets: [String] = []
        /// The first user-token secret.
        package var userTokenSecret: String? {
            get { userTokenSecrets.first }
            set { userTokenSecrets = newValue.map { [$0] } ?? [] }
        }
        /// Whether client-key calls need a user token (`client_registration`); default verified.
        package var clientRegistration: ClientRegistration = .verified
        /// Registering one more active device than this deactivates the user's least recently
        /// registered one (`max_devices_per_user`, default 20).
        package var maxDevicesPerUser = 20
        package var apns: APNSConfiguration?
        /// The notification catalog file, checked at start.
        package var catalogFile: String?
        /// FCM HTTP v1 credentials.
        package var fcm: FCMConfiguration?
        /// Web Push: the VAPID key and where subscriptions may point (`webpush`).
        package var webpush: WebPushConfiguration?
        /// The providers besides APNs the app sends through (their limits are checked when a
        /// notification is composed).
        package var platforms: PushPlatforms {
            var platforms: PushPlatforms = []
            if fcm != nil { platforms.insert(.fcm) }
            if webpush != nil { platforms.insert(.webpush) }
            return platforms
        }
        /// The web origins whose pages may call the app's routes from a browser (`cors_origins`:
        /// `scheme://host[:port]`, as a browser sends `Origin`).
        package var corsOrigins: Set<String> = []

        /// `text` as a browser's `Origin` header writes it (`https://app.example.com`,
        /// `http://127.0.0.1:8080`), or nil when it is not one.
        package static func origin(_ text: String) -> String? {
            guard let url = URLComponents(string: text), let scheme = url.scheme?.lowercased(),
                scheme == "https" || scheme == "http", let host = url.host?.lowercased(), !host.isEmpty,
                url.path.isEmpty, url.query == nil, url.fragment == nil, url.user == nil, url.password == nil
            else { return nil }
            let defaultPort = scheme == "https" ? 443 : 80
            let port = url.port.map { $0 == defaultPort ? "" : ":\($0)" } ?? ""
            return scheme + "://" + (host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host) + port
        }
        /// Where the app's web push subscriptions may point (`webpush.allowed_hosts`, else the
        /// known push services).
        package var webpushEndpoints: WebPushEndpointPolicy {
            let hosts = webpush?.allowedHosts ?? []
            return hosts.isEmpty ? WebPushEndpointPolicy() : WebPushEndpointPolicy(allowedHosts: hosts)
        }
        /// Silent sync to a user's other devices (`sync`): pushes to one device
        /// at least `debounce` seconds apart (the ones between coalesce into the next), at most
        /// `hourly_budget` an hour (Apple delivers 2–3 background pushes an hour reliably).
        package var syncDebounce: TimeInterval = 5
        package var syncHourlyBudget = 3
        /// Where quick-action commits and delivery events go (`webhook`).
        package var webhook: WebhookConfiguration?
        /// Live Activities' push budgets (`live_activities`).
        package var liveActivities = LiveActivityBudgets()
        /// The keys of quick-action tokens (`action_token_secret`, ≥ 32 bytes each): the first signs,
        /// and while rotating a second still verifies; without any, a random key kept in the
        /// database for the app (shared by every node).
        package var actionTokenSecrets: [String] = []
        /// The key new action tokens are signed with, when configured.
        package var actionTokenSecret: String? {
            get { actionTokenSecrets.first }
            set { actionTokenSecrets = newValue.map { [$0] } ?? [] }
        }

        package init(
            id: String, payloadKey: String? = nil, serverKey: String? = nil, clientKey: String? = nil,
            userTokenSecret: String? = nil, apns: APNSConfiguration? = nil, catalogFile: String? = nil,
            fcm: FCMConfiguration? = nil
        ) {
            self.fcm = fcm
            self.id = id
            self.payloadKey = payloadKey ?? id
            self.payloadKeyIsExplicit = payloadKey != nil
            self.serverKeys = serverKey.map { [$0] } ?? []
            self.clientKeys = clientKey.map { [$0] } ?? []
            self.userTokenSecrets = userTokenSecret.map { [$0] } ?? []
            self.apns = apns
            self.catalogFile = catalogFile
        }
    }

    /// How hard an app's Live Activities may push (`apps[].live_activities`). Apple budgets
    /// priority-10 pushes per device and hour (undocumented; a few an hour is safe) and
    /// push-to-start per device in a short window (about 10).
    package struct LiveActivityBudgets: Sendable, Equatable {
        /// Priority-10 pushes per activity and hour (`priority_pushes_per_hour`); beyond it an
        /// update goes at priority 5.
        package var priorityPushesPerHour = 4
        /// Starts per device in `startWindow` (`starts_per_device`); beyond it a start to that
        /// device is not sent.
        package var startsPerDevice = 8
        /// The window the starts are counted in.
        package var startWindow: TimeInterval = 900
        package init() {}
    }

    /// An app's webhook (`apps[].webhook`): Standard Webhooks, signed with `secret`.
    package struct WebhookConfiguration: Sendable {
        package var url: String
        /// `whsec_` + base64 secrets, decoded: the first, and while rotating the previous ones
        /// (each signs: the receiver accepts any signature it knows).
        package var secrets: [Data]
        /// How long the first, synchronous try of a quick action's commit waits (seconds).
        package var timeout: TimeInterval = 5
        /// The delivery events it takes besides `action.committed` (always sent): by default
        /// both `delivery.failed` and `device.deactivated`.
        package var events: Set<String> = Self.deliveryEvents

        /// The events `events` may name.
        package static let deliveryEvents: Set<String> = [
            ActionRepository.deliveryFailedEvent, ActionRepository.deviceDeactivatedEvent,
        ]

        package init(url: String, secrets: [Data], timeout: TimeInterval = 5, events: Set<String> = Self.deliveryEvents)
        {
            self.url = url
            self.secrets = secrets
            self.timeout = timeout
            self.events = events
        }

        /// A Standard Webhooks secret (`whsec_` + base64 of 24 to 64 bytes), decoded.
        package static func secret(_ text: String) -> Data? {
            guard text.hasPrefix("whsec_"), let bytes = Data(base64Encoded: String(text.dropFirst(6))),
                (24...64).contains(bytes.count)
            else { return nil }
            return bytes
        }
    }

    /// How client-key calls prove which user they speak for.
    package enum ClientRegistration: String, Sendable {
        /// Client-key calls carry a user token signed with the app's `user_token_secret`.
        case verified
        /// Client-key calls are trusted as they are (development only: the client key is public).
        case unverified
    }

    /// An app's Web Push settings: the VAPID key that signs (and older ones whose subscriptions
    /// still work), the contact the JWT names, and the hosts endpoints may be on.
    package struct WebPushConfiguration: Sendable {
        package var vapidKeyFile: String
        /// `mailto:` or `https:`: push services (Safari's strictly) refuse anything else.
        package var subject: String
        /// Keys rotated out: subscriptions made with them are signed with them.
        package var deprecatedKeyFiles: [String] = []
        /// Hosts an endpoint may be on (`*.suffix` for subdomains); the known push services when empty.
        package var allowedHosts: [String] = []
        /// A CA to trust beside the system's (a simulator's).
        package var caFile: String?

        package init(
            vapidKeyFile: String, subject: String, deprecatedKeyFiles: [String] = [], allowedHosts: [String] = [],
            caFile: String? = nil
        ) {
            self.vapidKeyFile = vapidKeyFile
            self.subject = subject
            self.deprecatedKeyFiles = deprecatedKeyFiles
            self.allowedHosts = allowedHosts
            self.caFile = caFile
        }
    }

    /// An app's FCM credentials: a service account key file; Google's hosts unless overridden.
    package struct FCMConfiguration: Sendable {
        package var serviceAccountFile: String
        package var endpoint: String?
        package var tokenEndpoint: String?
        package var caFile: String?

        package init(
            serviceAccountFile: String, endpoint: String? = nil, tokenEndpoint: String? = nil, caFile: String? = nil
        ) {
            self.serviceAccountFile = serviceAccountFile
            self.endpoint = endpoint
            self.tokenEndpoint = tokenEndpoint
            self.caFile = caFile
        }
    }

    /// An app's APNs credentials.
    package struct APNSConfiguration: Sendable {
        package var teamID: String
        package var keyID: String
        package var keyFile: String
        /// The bundle id.
        package var topic: String
        package var environment: String
        package var endpoint: String?
        package var caFile: String?
        /// Where the broadcast channel management API is (`channel_endpoint`): Apple's per
        /// environment unless set; with `endpoint` set (a simulator), that one.
        package var channelEndpoint: String?

        package init(
            teamID: String, keyID: String, keyFile: String, topic: String, environment: String = "production",
            endpoint: String? = nil, caFile: String? = nil, channelEndpoint: String? = nil
        ) {
            self.channelEndpoint = channelEndpoint
            self.teamID = teamID
            self.keyID = keyID
            self.keyFile = keyFile
            self.topic = topic
            self.environment = environment
            self.endpoint = endpoint
            self.caFile = caFile
        }
    }
}
