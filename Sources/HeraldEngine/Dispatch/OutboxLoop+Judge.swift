import Foundation
import HeraldCore
import HeraldStore
import Logging

extension OutboxLoop {
    /// Reads a batch's held answers per provider: a refused credential or topic,
    /// or "bad token" for more than half of at least 50 answers, pauses the provider and turns
    /// those answers into retries at its next try; a probe that was not refused resumes it.
    func judge(tracker: BatchTracker, recorder: DeliveryRecorder, probed: [ProviderKey: ProviderPause]) {
        let now = runtime.store.now
        for key in Set(tracker.heldProviders).union(probed.keys) {
            let (held, answered, delivered) = tracker.takeHeld(key)
            let provider = key.platform == "fcm" ? "FCM" : key.platform == "webpush" ? "Web Push" : "APNs"
            let judgement = ProviderJudgement.judge(
                held: held.map(\.answer), answered: answered, delivered: delivered, probe: probed[key],
                suspectMinimum: Self.suspectBatchMinimum)
            guard case .pause(let kind, let reason, let paused) = judgement else {
                recorder.add(held.map { result($0.answer, delivery: $0.delivery, trace: $0.trace) })
                if let pause = probed[key] {
                    runtime.pauses.resume(key)
                    runtime.logger.notice(
                        "\(provider) answers again for app \"\(key.app)\": its deliveries are sent",
                        metadata: ["herald.app": "\(key.app)", "herald.pause_reason": "\(pause.reason)"])
                }
                continue
            }
            let (pause, isNew) = runtime.pauses.pause(
                key, kind: kind, reason: reason, now: now, tried: probed[key] != nil)
            if isNew || probed[key] != nil {
                let what =
                    kind == .credential
                    ? "refused the credential or topic (\(reason))"
                    : "called \(paused.count) of \(answered) tokens bad (\(reason)): the environment, topic or project is likely wrong"
                runtime.logger.critical(
                    "\(provider) \(what); app \"\(key.app)\" stays queued and is tried again at \(HeraldTime.format(pause.retryAt))",
                    metadata: [
                        "herald.app": "\(key.app)", "herald.platform": "\(key.platform)", "herald.reason": "\(reason)",
                    ])
            }
            recorder.add(
                held.map { held in
                    paused.contains(held.answer.deliveryID)
                        ? DeliveryResult(
                            held.delivery, .retry(reason: Self.pausedReason, dueAt: pause.retryAt), attempts: 0,
                            trace: held.trace)
                        : result(held.answer, delivery: held.delivery, trace: held.trace)
                })
        }
    }
}
