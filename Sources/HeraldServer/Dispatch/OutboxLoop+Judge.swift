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
            let credential = held.filter { $0.answer.disposition == .providerPaused }
            let suspects = held.filter { $0.answer.suspect }
            let pausing: (kind: ProviderPause.Kind, answers: [BatchTracker.Held])?
            if !credential.isEmpty {
                pausing = (.credential, credential)
            } else if suspects.count * 2 > answered, answered >= Self.suspectBatchMinimum {
                pausing = (.tokensRejected, suspects)
            } else if let pause = probed[key], pause.kind == .tokensRejected, !delivered, !suspects.isEmpty {
                // Too few answers to judge by count: the probe is judged by whether anything went through.
                pausing = (.tokensRejected, suspects)
            } else {
                pausing = nil
            }
            let provider = key.platform == "fcm" ? "FCM" : "APNs"
            guard let pausing else {
                recorder.add(held.map { result($0.answer, delivery: $0.delivery, trace: $0.trace) })
                if let pause = probed[key] {
                    runtime.pauses.resume(key)
                    runtime.logger.notice(
                        "\(provider) answers again for app \"\(key.app)\": its deliveries are sent",
                        metadata: ["herald.app": "\(key.app)", "herald.pause_reason": "\(pause.reason)"])
                }
                continue
            }
            let reason = Self.mostCommonReason(pausing.answers.map(\.answer))
            let (pause, isNew) = runtime.pauses.pause(
                key, kind: pausing.kind, reason: reason, now: now, tried: probed[key] != nil)
            if isNew || probed[key] != nil {
                let what =
                    pausing.kind == .credential
                    ? "refused the credential or topic (\(reason))"
                    : "called \(pausing.answers.count) of \(answered) tokens bad (\(reason)): the environment, topic or project is likely wrong"
                runtime.logger.critical(
                    "\(provider) \(what); app \"\(key.app)\" stays queued and is tried again at \(HeraldTime.format(pause.retryAt))",
                    metadata: [
                        "herald.app": "\(key.app)", "herald.platform": "\(key.platform)", "herald.reason": "\(reason)",
                    ])
            }
            let paused = Set(pausing.answers.map(\.answer.deliveryID))
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

    private static func mostCommonReason(_ answers: [ProviderAnswer]) -> String {
        var counts: [String: Int] = [:]
        for answer in answers { counts[answer.reason ?? "unknown", default: 0] += 1 }
        return counts.max { ($0.value, $1.key) < ($1.value, $0.key) }?.key ?? "unknown"
    }
}
