import Foundation
package import HeraldCore

/// `PushProvider` over an `FCMClient`: the batch is sent as it is and each answer mapped to a
/// `DeliveryDisposition` (protocols.md §12).
package struct FCMProvider: PushProvider {
    package let client: FCMClient

    package init(client: FCMClient) { self.client = client }

    package var id: ObjectIdentifier { ObjectIdentifier(client) }

    package func send(
        _ batch: [ProviderRequest<FCMMessage>], submitted: @escaping @Sendable () -> Void,
        answer: @escaping @Sendable (ProviderAnswer) -> Void
    ) async {
        // FCM requests go out concurrently, with no order to keep: the next batch need not wait.
        submitted()
        guard !batch.isEmpty else { return }
        let results = await client.send(batch.map(\.message))
        // A notification FCM accepted for one token is a known-good payload: an INVALID_ARGUMENT
        // for another token of it blames that token (protocols.md §12).
        let knownGood = Set(zip(batch, results).filter { $0.1.isDelivered }.map(\.0.notificationID))
        for (request, result) in zip(batch, results) {
            answer(
                Self.answer(
                    result, deliveryID: request.deliveryID, payloadKnownGood: knownGood.contains(request.notificationID)
                ))
        }
    }

    package func enable() async { await client.enable() }

    /// One FCM result in the dispatcher's terms.
    package static func answer(_ result: FCMResult, deliveryID: Int64, payloadKnownGood: Bool) -> ProviderAnswer {
        let reason = result.reason ?? "FCMError"
        let disposition: DeliveryDisposition
        var suspect = false
        switch result.disposition {
        case .delivered:
            disposition = .delivered
        case .tokenDead:
            disposition = .tokenDead(since: nil)
            // 404 without FCM's UNREGISTERED: usually the wrong project, not a dead app install.
            suspect = result.status == 404 && result.reason != "UNREGISTERED"
        case .badRequest where reason == "INVALID_ARGUMENT" && payloadKnownGood:
            // The same notification went through for other tokens: this token is the invalid argument.
            disposition = .tokenDead(since: nil)
        case .badRequest:
            disposition = .failed
        case .configurationError:
            // One token's (its APNs or web push credential at FCM) fails alone, judged in bulk;
            // anything else refuses the service account.
            if FCMClient.perTokenAuthErrors.contains(reason) {
                disposition = .failed
                suspect = true
            } else {
                disposition = .providerPaused
            }
        case .retryLater:
            disposition = .retry(after: result.retryAfter)
        }
        return ProviderAnswer(
            deliveryID: deliveryID, disposition: disposition, reason: result.isDelivered ? nil : reason,
            attempts: result.attempts,
            latency: result.latency, suspect: suspect)
    }
}
