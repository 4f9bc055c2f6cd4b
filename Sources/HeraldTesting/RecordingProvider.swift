package import HeraldCore
import Synchronization

/// A `PushProvider` that keeps every request it is given and answers each at once with what
/// `answer` says (delivered, by default): the dispatcher's side of a send, tested without a
/// wire. The simulator stays the witness for what goes over HTTP/2.
package final class RecordingProvider<Message: Sendable>: PushProvider, Sendable {
    package typealias Answer = @Sendable (ProviderRequest<Message>) -> (DeliveryDisposition, reason: String?)

    private let answer: Answer
    private let requests = Mutex<[ProviderRequest<Message>]>([])
    private let enabled = Atomic<Int>(0)

    package init(answer: @escaping Answer = { _ in (.delivered, nil) }) {
        self.answer = answer
    }

    package var id: ObjectIdentifier { ObjectIdentifier(self) }

    package func send(
        _ batch: [ProviderRequest<Message>], submitted: @escaping @Sendable () -> Void,
        answer deliver: @escaping @Sendable (ProviderAnswer) -> Void
    ) async {
        requests.withLock { $0 += batch }
        submitted()
        for request in batch {
            let (disposition, reason) = answer(request)
            deliver(
                ProviderAnswer(
                    deliveryID: request.deliveryID, disposition: disposition, reason: reason, attempts: 1,
                    latency: 0))
        }
    }

    package func enable() async { enabled.add(1, ordering: .relaxed) }

    /// Every request sent so far, in the order batches came.
    package var sent: [ProviderRequest<Message>] { requests.withLock { $0 } }

    /// How often a probe asked it to send again.
    package var enables: Int { enabled.load(ordering: .relaxed) }
}

/// A registry whose every app sends through the same two recording providers.
package struct RecordingRegistry: ProviderRegistry {
    package let apns: RecordingProvider<APNSNotification>
    package let fcm: RecordingProvider<FCMMessage>

    package init(
        apns: RecordingProvider<APNSNotification> = RecordingProvider(),
        fcm: RecordingProvider<FCMMessage> = RecordingProvider()
    ) {
        self.apns = apns
        self.fcm = fcm
    }

    package func apns(app: String, environment: String) -> ProviderLookup<APNSNotification> { .provider(apns) }
    package func fcm(app: String) -> ProviderLookup<FCMMessage> { .provider(fcm) }

    package func enable(app: String, platform: String) async {
        if platform == "fcm" { await fcm.enable() } else { await apns.enable() }
    }
}
