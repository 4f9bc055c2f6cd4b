package import Foundation
import HeraldCore
import HeraldStore
import Synchronization
package import Tracing

/// Spans for a send and its deliveries, under `telemetry`: `herald.accept` around the store of a
/// send (a child of the request's span, which joins the caller's trace or starts one), then per
/// delivery of a sampled send `herald.deliver` with `herald.claim`, `herald.plan`, the provider
/// request (`herald.apns` or `herald.fcm`) and `herald.record` inside it. A delivery finds its
/// trace through the trace context its notification's content keeps, so the link survives the
/// queue, a restart and another node. Each retry is a `herald.deliver` of its own.
///
/// The dispatcher calls in whatever it does; with no delivery traced each call is one atomic
/// read. At most `perNotification` deliveries of one notification are traced (a broadcast's
/// trace shows its first ones, not a million spans) and at most `maximumOpen` at once.
package final class DeliveryTraces: Sendable {
    /// The open spans of one delivery being sent.
    private struct Open {
        var deliver: any Span
        var plan: (any Span)?
        var provider: (any Span)?
        var record: (any Span)?
    }

    private struct State {
        var open: [Int64: Open] = [:]
        /// Deliveries traced per notification (forgotten wholesale past `rememberedNotifications`).
        var traced: [UUID: Int] = [:]
    }

    let tracer: any Tracer
    private let state = Mutex(State())
    private let openCount = Atomic<Int>(0)

    /// Deliveries of one notification that get spans.
    static let perNotification = 100
    /// Deliveries with spans open at once; those claimed beyond it are sent untraced.
    static let maximumOpen = 10_000
    /// Notifications whose traced deliveries are counted before the counts start over.
    static let rememberedNotifications = 10_000

    package init(tracer: any Tracer) {
        self.tracer = tracer
    }

    // MARK: Accept

    /// Runs `body` (storing a send) in a `herald.accept` span; `body` gets the span's trace
    /// context when the span is sampled, for the notification's content to keep.
    package func accept<T>(
        notification: UUID, app: String, _ body: (_ traceContext: [String: String]?) async throws -> T
    ) async throws -> T {
        let span = tracer.startSpan(
            "herald.accept", context: InstrumentationContext.current ?? .topLevel, ofKind: .producer)
        span.attributes["herald.app"] = app
        span.attributes["herald.notification_id"] = notification.uuidString.lowercased()
        defer { span.end() }
        do {
            return try await body(span.isRecording ? carrier(span.context) : nil)
        } catch {
            span.recordError(error)
            throw error
        }
    }

    /// `context` as the tracer propagates it (`traceparent`, `tracestate` for W3C); nil when it
    /// writes nothing.
    func carrier(_ context: InstrumentationContext) -> [String: String]? {
        var carrier: [String: String] = [:]
        tracer.inject(context, into: &carrier, using: DictionaryInjector())
        return carrier.isEmpty ? nil : carrier
    }

    /// The context a stored carrier names.
    func context(_ carrier: [String: String]) -> InstrumentationContext {
        var context = InstrumentationContext.topLevel
        tracer.extract(carrier, into: &context, using: DictionaryExtractor())
        return context
    }

    // MARK: Dispatch

    /// A batch was claimed from `claimedAt` until now and its contents are read: the deliveries
    /// of traced notifications open `herald.deliver` (from the claim), `herald.claim` and
    /// `herald.plan` (from now).
    func claimed(
        _ deliveries: [ClaimedDelivery], contents: [UUID: StoredNotificationContent],
        claimedAt: DefaultTracerClock.Instant
    ) {
        var contexts: [UUID: InstrumentationContext] = [:]
        for (id, stored) in contents {
            if let carrier = stored.traceContext { contexts[id] = context(carrier) }
        }
        guard !contexts.isEmpty else { return }
        let now = DefaultTracerClock.now
        state.withLock { state in
            if state.traced.count > Self.rememberedNotifications { state.traced = [:] }
            for delivery in deliveries {
                guard let parent = contexts[delivery.notificationID], state.open[delivery.id] == nil,
                    state.open.count < Self.maximumOpen,
                    state.traced[delivery.notificationID, default: 0] < Self.perNotification
                else { continue }
                state.traced[delivery.notificationID, default: 0] += 1
                let deliver = tracer.startSpan("herald.deliver", context: parent, ofKind: .consumer, at: claimedAt)
                deliver.attributes["herald.delivery_id"] = delivery.id
                deliver.attributes["herald.notification_id"] = delivery.notificationID.uuidString.lowercased()
                deliver.attributes["herald.app"] = delivery.appID
                deliver.attributes["herald.device_id"] = delivery.deviceID
                deliver.attributes["herald.platform"] = delivery.platform
                deliver.attributes["herald.attempt"] = delivery.attempts + 1
                let claim = tracer.startSpan("herald.claim", context: deliver.context, ofKind: .internal, at: claimedAt)
                claim.end(at: now)
                let plan = tracer.startSpan("herald.plan", context: deliver.context, ofKind: .internal, at: now)
                state.open[delivery.id] = Open(deliver: deliver, plan: plan)
            }
            openCount.store(state.open.count, ordering: .relaxed)
        }
    }

    /// Planning is over: `held` were decided without a provider (expired, deferred,
    /// suppressed), the others go on to their provider.
    func planned(_ held: [DeliveryResult], sendable: [ClaimedDelivery]) {
        guard openCount.load(ordering: .relaxed) > 0 else { return }
        state.withLock { state in
            for result in held {
                guard let plan = state.open[result.deliveryID]?.plan else { continue }
                let row = OutboxRepository.row(for: result)
                plan.attributes["herald.decision"] = row.status.rawValue
                if let reason = row.reason { plan.attributes["herald.reason"] = reason }
                plan.end()
                state.open[result.deliveryID]?.plan = nil
            }
            for delivery in sendable {
                state.open[delivery.id]?.plan?.end()
                state.open[delivery.id]?.plan = nil
            }
        }
    }

    /// `requests` go to `provider` (`apns` or `fcm`) now.
    func sending<Message>(_ requests: [ProviderRequest<Message>], provider: String) {
        guard openCount.load(ordering: .relaxed) > 0 else { return }
        state.withLock { state in
            for id in requests.lazy.map(\.deliveryID) {
                guard let open = state.open[id], open.provider == nil else { continue }
                let span = tracer.startSpan("herald.\(provider)", context: open.deliver.context, ofKind: .client)
                span.attributes["herald.provider"] = provider
                state.open[id]?.provider = span
            }
        }
    }

    /// A provider answered: its span ends with what it said, and `herald.record` begins.
    func answered(_ answer: ProviderAnswer) {
        guard openCount.load(ordering: .relaxed) > 0 else { return }
        state.withLock { state in
            guard let open = state.open[answer.deliveryID], let span = open.provider else { return }
            span.attributes["herald.disposition"] = answer.disposition.name
            if let reason = answer.reason {
                span.attributes["herald.reason"] = reason
                span.setStatus(SpanStatus(code: .error, message: reason))
            }
            span.attributes["herald.attempts"] = answer.attempts
            span.end()
            state.open[answer.deliveryID]?.provider = nil
            state.open[answer.deliveryID]?.record = tracer.startSpan(
                "herald.record", context: open.deliver.context, ofKind: .internal)
        }
    }

    /// Results handed to the recorder: each opens `herald.record` until its write commits.
    func recording(_ results: [DeliveryResult]) {
        guard openCount.load(ordering: .relaxed) > 0 else { return }
        state.withLock { state in
            for result in results {
                guard let open = state.open[result.deliveryID], open.record == nil else { continue }
                state.open[result.deliveryID]?.record = tracer.startSpan(
                    "herald.record", context: open.deliver.context, ofKind: .internal)
            }
        }
    }

    /// The results' write committed: each delivery's spans end, `herald.deliver` with the outcome.
    func recorded(_ results: [DeliveryResult]) {
        guard openCount.load(ordering: .relaxed) > 0 else { return }
        state.withLock { state in
            for result in results {
                guard let open = state.open.removeValue(forKey: result.deliveryID) else { continue }
                open.plan?.end()
                open.provider?.end()
                open.record?.end()
                let row = OutboxRepository.row(for: result)
                open.deliver.attributes["herald.status"] = row.status.rawValue
                if let reason = row.reason { open.deliver.attributes["herald.reason"] = reason }
                switch result.outcome {
                case .failed(let reason), .tokenDead(let reason, _):
                    open.deliver.setStatus(SpanStatus(code: .error, message: reason))
                case .sent, .retry, .deferred, .suppressed: break
                }
                open.deliver.end()
            }
            openCount.store(state.open.count, ordering: .relaxed)
        }
    }

    /// Claimed deliveries handed back unsent (a store error before they were planned).
    func abandoned(_ deliveries: [ClaimedDelivery]) {
        guard openCount.load(ordering: .relaxed) > 0 else { return }
        state.withLock { state in
            for delivery in deliveries {
                guard let open = state.open.removeValue(forKey: delivery.id) else { continue }
                open.plan?.end()
                open.deliver.attributes["herald.status"] = "queued"
                open.deliver.setStatus(SpanStatus(code: .error, message: "handed back to the queue unsent"))
                open.deliver.end()
            }
            openCount.store(state.open.count, ordering: .relaxed)
        }
    }
}

/// W3C trace context's `traceparent`: `00-<trace id>-<parent span id>-<flags>`.
package enum TraceParent {
    /// The trace id (32 lowercase hex digits), or nil when `traceparent` is not well formed.
    package static func traceID(_ traceparent: String) -> String? {
        let parts = traceparent.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count >= 4, parts[1].utf8.count == 32,
            parts[1].utf8.allSatisfy({ (48...57).contains($0) || (97...102).contains($0) })
        else { return nil }
        return String(parts[1])
    }

    /// The trace id of a stored trace context's `traceparent`.
    package static func traceID(in carrier: [String: String]?) -> String? {
        carrier?["traceparent"].flatMap(traceID)
    }
}

extension StoredNotificationContent {
    /// The W3C trace id of the trace the notification's deliveries join.
    package var traceID: String? { TraceParent.traceID(in: traceContext) }
}

extension DeliveryDisposition {
    /// A short name for a span attribute.
    package var name: String {
        switch self {
        case .delivered: "delivered"
        case .tokenDead: "token_dead"
        case .failed: "failed"
        case .providerPaused: "provider_paused"
        case .unsent: "unsent"
        case .retry: "retry"
        }
    }
}

private struct DictionaryInjector: Injector {
    func inject(_ value: String, forKey key: String, into carrier: inout [String: String]) {
        carrier[key] = value
    }
}

private struct DictionaryExtractor: Extractor {
    func extract(key: String, from carrier: [String: String]) -> String? { carrier[key] }
}
