package import Foundation

/// One message for a provider: the delivery it belongs to, the notification whose content it
/// carries (deliveries of one notification share a payload) and the rendered message.
package struct ProviderRequest<Message: Sendable>: Sendable {
    package var deliveryID: Int64
    package var notificationID: UUID
    package var message: Message

    package init(deliveryID: Int64, notificationID: UUID, message: Message) {
        self.deliveryID = deliveryID
        self.notificationID = notificationID
        self.message = message
    }
}

/// What became of one request, in the dispatcher's terms (the provider's own reasons mapped
/// by its adapter, protocols.md §5 and §12).
package enum DeliveryDisposition: Sendable, Hashable {
    /// The provider accepted it.
    case delivered
    /// Not delivered yet; try again no sooner than `after` seconds (the provider's Retry-After)
    /// and no sooner than the outbox's retry schedule says.
    case retry(after: TimeInterval?)
    /// Handed back unsent (the client is shutting down or refused to send): queued again at
    /// once, not counted as an attempt.
    case unsent
    /// The token is dead: the delivery fails and the device becomes inactive.
    case tokenDead(since: Date?)
    /// The provider refused the app's credential or topic: the app's provider pauses and the
    /// delivery waits for it; the device is not blamed.
    case providerPaused
    /// This request is wrong (bad payload, bad header): it fails, no retry.
    case failed
}

/// A provider's answer to one request.
package struct ProviderAnswer: Sendable, Hashable {
    package var deliveryID: Int64
    package var disposition: DeliveryDisposition
    /// The provider's reason (`BadDeviceToken`, `UNREGISTERED`, `Timeout` …); nil when delivered.
    package var reason: String?
    /// Requests actually sent for it, answered or not.
    package var attempts: Int
    /// Seconds from the last request to its answer.
    package var latency: Double?
    /// An answer that blames the token but, when most of a batch says it, means the
    /// environment, topic or project is wrong (BadDeviceToken, FCM 404 without UNREGISTERED,
    /// THIRD_PARTY_AUTH_ERROR): judged per batch.
    package var suspect: Bool

    package init(
        deliveryID: Int64, disposition: DeliveryDisposition, reason: String?, attempts: Int, latency: Double? = nil,
        suspect: Bool = false
    ) {
        self.deliveryID = deliveryID
        self.disposition = disposition
        self.reason = reason
        self.attempts = attempts
        self.latency = latency
        self.suspect = suspect
    }
}

/// The seam between the dispatcher and a push service: one call per batch, answers as they
/// arrive. Adapters over the tuned APNs and FCM clients implement it; no per-message cost is
/// added (the batch goes to the client as it is).
package protocol PushProvider<Message>: Sendable {
    associatedtype Message: Sendable
    /// The client this provider sends through: a batch's requests for one client go in one call.
    var id: ObjectIdentifier { get }
    /// Sends `batch`; `submitted` is called once, when the batch is in the client's hands (a
    /// batch sent after that call queues behind it); `answer` exactly once per request, from
    /// any thread, in any order. Returns when every request is answered (the client's own
    /// deadlines bound it).
    func send(
        _ batch: [ProviderRequest<Message>], submitted: @escaping @Sendable () -> Void,
        answer: @escaping @Sendable (ProviderAnswer) -> Void
    ) async
    /// Lets a client that stopped itself over a refused credential try again (a probe).
    func enable() async
}

extension PushProvider {
    /// Sends `batch` without waiting to know when it was handed over.
    package func send(_ batch: [ProviderRequest<Message>], answer: @escaping @Sendable (ProviderAnswer) -> Void) async {
        await send(batch, submitted: {}, answer: answer)
    }
}

/// An app's provider for one platform, or why there is none.
package enum ProviderLookup<Message: Sendable>: Sendable {
    case provider(any PushProvider<Message>)
    /// None: `reason` is what the delivery fails with (`APNsNotConfigured`, `FCMNotConfigured` …).
    case unavailable(reason: String)
    /// The server is stopping: the delivery goes back to the queue, unsent, for the next start.
    case stopping
}

/// Owns every provider client and hands out each app's, by platform (and APNs environment):
/// the dispatcher sends through what it is given and knows neither transport. Tests give it a
/// recording registry instead of the simulator when the wire is not what they test.
package protocol ProviderRegistry: Sendable {
    func apns(app: String, environment: String) -> ProviderLookup<APNSNotification>
    func fcm(app: String) -> ProviderLookup<FCMMessage>
    func webpush(app: String) -> ProviderLookup<WebPushMessage>
    /// Lets an app's clients send again after they refused its credential (a pause's probe).
    func enable(app: String, platform: String) async
}

extension ProviderRegistry {
    /// No web push unless the registry has it.
    package func webpush(app: String) -> ProviderLookup<WebPushMessage> {
        .unavailable(reason: "WebPushNotConfigured")
    }
}
