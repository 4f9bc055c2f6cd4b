import Foundation
package import HeraldCore
import Synchronization

/// `PushProvider` over an `APNSClient`: the batch is submitted as it is and each answer mapped
/// to a `DeliveryDisposition` (protocols.md §5). Answers are matched by `apns-id`, which the
/// dispatcher derives per delivery.
package struct APNSProvider: PushProvider {
    package let client: APNSClient

    package init(client: APNSClient) { self.client = client }

    package var id: ObjectIdentifier { ObjectIdentifier(client) }

    package func send(
        _ batch: [ProviderRequest<APNSNotification>], submitted: @escaping @Sendable () -> Void,
        answer: @escaping @Sendable (ProviderAnswer) -> Void
    ) async {
        guard !batch.isEmpty else { return submitted() }
        let lookup = Dictionary(
            batch.map { ($0.message.apnsID, ($0.deliveryID, $0.message.pushType)) },
            uniquingKeysWith: { first, _ in first })
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let remaining = Atomic<Int>(batch.count)
            client.submit(batch.lazy.map(\.message)) { result in
                if let (deliveryID, pushType) = lookup[result.apnsID] {
                    answer(Self.answer(result, deliveryID: deliveryID, pushType: pushType))
                }
                if remaining.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 {
                    continuation.resume()
                }
            }
            // Each connection's queue has the batch (or an `execute` that appends it) by now.
            submitted()
        }
    }

    package func enable() async { client.enable() }

    /// One APNs result in the dispatcher's terms.
    package static func answer(_ result: APNSResult, deliveryID: Int64, pushType: APNSPushType) -> ProviderAnswer {
        let disposition: DeliveryDisposition
        var suspect = false
        switch result.disposition {
        case _ where result.reason == .clientShutdown:
            disposition = .unsent
        case .delivered:
            disposition = .delivered
        case .tokenDead:
            disposition = .tokenDead(since: result.timestamp)
            suspect = result.reason == .badDeviceToken || result.reason == .deviceTokenNotForTopic
        case .configurationError:
            // A refused credential or topic pauses the app; a push type's own topic fails alone.
            disposition = result.reason?.refusesCredential(pushType: pushType) ?? true ? .providerPaused : .failed
        case .badRequest:
            disposition = .failed
        case .retryTokenLater, .retryWithBackoff, .resendOnNewConnection:
            disposition = .retry(after: nil)
        }
        return ProviderAnswer(
            deliveryID: deliveryID, disposition: disposition,
            reason: result.disposition == .delivered ? nil : result.reasonKey,
            attempts: result.attempts, latency: result.latency, suspect: suspect)
    }
}
