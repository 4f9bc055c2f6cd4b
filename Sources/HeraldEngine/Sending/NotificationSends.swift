package import Foundation
package import HeraldCore
package import HeraldStore

/// A send as the API and the dashboard's composer ask for it: who gets it, what it says (a
/// draft for `NotificationComposer`) and the keys that name it.
package struct SendRequest: Sendable {
    package var recipients: RecipientSelector
    package var draft: NotificationDraft
    package var excludeDeviceIDs: [String] = []
    package var idempotencyKey: String?
    package var cancelKey: String?

    package init(
        recipients: RecipientSelector, draft: NotificationDraft, excludeDeviceIDs: [String] = [],
        idempotencyKey: String? = nil, cancelKey: String? = nil
    ) {
        self.recipients = recipients
        self.draft = draft
        self.excludeDeviceIDs = excludeDeviceIDs
        self.idempotencyKey = idempotencyKey
        self.cancelKey = cancelKey
    }
}

/// Stores a send and hands what it claimed to this node's outbox loop: the one path behind
/// `POST …/notifications`, the dashboard's composer and the test send.
package enum NotificationSends {
    /// Composes `request` as notification `id` and stores it with one delivery per recipient
    /// device (or a broadcast's cursor); answers once it is on disk.
    package static func accept(
        _ request: SendRequest, app: AppRuntime, runtime: HeraldRuntime, id: UUID = UUID.random(), test: Bool = false
    ) async throws -> NotificationRepository.Accepted {
        guard let traces = runtime.traces else {
            return try await accept(request, app: app, runtime: runtime, id: id, test: test, traceContext: nil)
        }
        return try await traces.accept(notification: id, app: app.id) { traceContext in
            try await accept(request, app: app, runtime: runtime, id: id, test: test, traceContext: traceContext)
        }
    }

    private static func accept(
        _ request: SendRequest, app: AppRuntime, runtime: HeraldRuntime, id: UUID, test: Bool,
        traceContext: [String: String]?
    ) async throws -> NotificationRepository.Accepted {
        var composed = try NotificationComposer.compose(
            request.draft, payloadKey: app.configuration.payloadKey, catalog: app.catalog,
            platforms: app.configuration.platforms,
            now: runtime.store.now, id: id)
        if test {
            composed.content.typed?.test = true
            composed.urgent = true
            composed.dueAt = runtime.store.now
        }
        composed.content.traceContext = traceContext
        let contentData = try JSONEncoder().encode(composed.content)
        // Before the commit: the outbox loop may claim the deliveries as soon as it lands.
        if !test { runtime.recentContents.insert(id, composed.content, apnsPayload: composed.apnsPayload) }
        let started = ContinuousClock.now
        // A due send to a few named devices or users is claimed as it is stored, for this
        // node's outbox loop to send at once (when it has room).
        let accepted = try await runtime.store.notifications.acceptNotification(
            appID: app.id, id: id, idempotencyKey: request.idempotencyKey, content: contentData,
            recipients: request.recipients,
            excludeDeviceIDs: request.excludeDeviceIDs, dueAt: composed.dueAt,
            lane: DeliveryLane(urgent: composed.urgent),
            cancelKey: request.cancelKey,
            directUpTo: test ? (runtime.direct.bulkRoom == nil ? 0 : DirectClaims.perNotification) : runtime.direct.room
        )
        if !test { runtime.metrics.outboxStore("accept", seconds: (ContinuousClock.now - started).seconds) }
        await handOver(accepted, app: app, runtime: runtime)
        return accepted
    }

    /// After an accept's commit: the deliveries claimed with it go to this node's outbox loop
    /// (back to the queue if it stopped meanwhile), and a new notification is counted and wakes
    /// the loop (the outbox's, when none was claimed).
    static func handOver(_ accepted: NotificationRepository.Accepted, app: AppRuntime, runtime: HeraldRuntime) async {
        let stopped = runtime.direct.add(accepted.claimed)
        if !stopped.isEmpty { try? await runtime.store.nodes.unclaim(stopped) }
        guard accepted.created else { return }
        runtime.metrics.notificationCreated(app: app.id)
        runtime.wake.signal(outbox: accepted.claimed.isEmpty)
    }
}
