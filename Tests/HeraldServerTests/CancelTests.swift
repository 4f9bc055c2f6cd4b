import Foundation
import HTTPTypes
import HeraldCore
import HeraldEngine
import HeraldSimulator
import HeraldStore
import HeraldTesting
import Synchronization
import Testing

/// Scheduled sends with cancel keys: a cancel is one transaction, ordered with
/// the sends around it; what it covers is never sent, and a delivery it caught being sent is
/// never tried again.
@Suite("Cancel keys")
struct CancelTests {
    @Test(
        "scheduled sends with a cancel key: the cancel covers what was accepted before it, user_ids narrows it, a later send with the key goes, a broadcast is cancelled whole; nothing cancelled arrives"
    )
    func scheduledAndCancelled() async throws {
        let tokens = makeDeviceTokens(5)
        try await withServer(configure: { $0.clock = .manual }) { server in
            let devices = [
                ("ana-phone", "ana"), ("ana-ipad", "ana"), ("ben-phone", "ben"), ("cy-phone", "cy"),
                ("dee-phone", "dee"),
            ]
            for (index, (device, user)) in devices.enumerated() {
                #expect(try await server.register(device, user: user, token: tokens[index]) == .created)
            }
            let now = try #require(server.runtime.devClock?.now)
            let inAnHour = HeraldTime.format(now.addingTimeInterval(3600))
            func send(_ to: String, key: String?, _ body: String) async throws -> String {
                let keyField = key.map { #","cancel_key":"\#($0)""# } ?? ""
                let sent = try await server.send(
                    #"{"to":\#(to),"alert":{"body":"\#(body)"},"deliver_at":"\#(inAnHour)"\#(keyField)}"#)
                #expect(sent.status == .accepted)
                return try #require(sent.body["id"] as? String)
            }
            let trialA = try await send(#"{"user_ids":["ana","ben"]}"#, key: "trial-42", "A")
            let trialB = try await send(#"{"user_ids":["cy"]}"#, key: "trial-42", "B")
            _ = try await send(#"{"user_ids":["ana"]}"#, key: "other", "C")
            _ = try await send(#"{"user_ids":["ben"]}"#, key: nil, "D")
            let digest = try await send(#"{"all":true}"#, key: "digest", "F")

            func cancel(_ json: String) async throws -> [String: Any] {
                let answer = try await server.request(.post, "/v1/apps/demo/cancel", json: json)
                #expect(answer.status == .ok, "\(json): \(answer.body)")
                return answer.body
            }
            // Ben's delivery of A only.
            let narrowed = try await cancel(#"{"cancel_key":"trial-42","user_ids":["ben"]}"#)
            #expect(narrowed["cancelled"] as? Int == 1 && narrowed["in_flight"] as? Int == 0)
            // The rest of A (Ana's two devices) and B (Cy's).
            let rest = try await cancel(#"{"cancel_key":"trial-42"}"#)
            #expect(rest["cancelled"] as? Int == 3)
            #expect(try await cancel(#"{"cancel_key":"trial-42"}"#)["cancelled"] as? Int == 0)
            // A broadcast is cancelled whole or not at all.
            let skipped = try await cancel(#"{"cancel_key":"digest","user_ids":["ana"]}"#)
            #expect(skipped["cancelled"] as? Int == 0 && skipped["broadcasts_skipped"] as? Int == 1)
            #expect(try await cancel(#"{"cancel_key":"digest"}"#)["cancelled"] as? Int == 5)
            // Accepted after the cancel: not covered by it.
            _ = try await send(#"{"user_ids":["ana"]}"#, key: "trial-42", "E")

            let view = try await server.request(.get, "/v1/apps/demo/notifications/\(trialA)").body
            #expect(view["cancel_key"] as? String == "trial-42")
            #expect((view["counts"] as? [String: Int])?["cancelled"] == 3)
            #expect((view["counts"] as? [String: Int])?["queued"] == 0)
            let rows = try #require(view["deliveries"] as? [[String: Any]])
            #expect(
                rows.allSatisfy { $0["status"] as? String == "cancelled" && $0["reason"] as? String == "Cancelled" })

            _ = try await server.request(.post, "/v1/dev/clock", key: ServerHarness.admin, json: #"{"advance":"1h"}"#)
            @Sendable func bodies(_ index: Int) -> [String] {
                server.simulator.state.inbox(for: tokens[index]).compactMap {
                    (($0.payloadObject?["aps"] as? [String: Any])?["alert"] as? [String: Any])?["body"] as? String
                }
            }
            try await eventually { bodies(0).count == 2 && bodies(1).count == 2 && bodies(2).count == 1 }
            try await server.settle()
            #expect(Set(bodies(0)) == ["C", "E"] && Set(bodies(1)) == ["C", "E"])
            #expect(bodies(2) == ["D"])
            #expect(bodies(3).isEmpty && bodies(4).isEmpty)
            let cyView = try await server.settled(trialB)
            #expect((cyView["counts"] as? [String: Int])?["sent"] == 0)
            let digestView = try await server.settled(digest)
            #expect((digestView["counts"] as? [String: Int])?["cancelled"] == 5)
        }
    }

    @Test(
        "a cancel amid sends with its key covers every send answered before it, each whole (never part of a fan-out), and none answered after it"
    )
    func cancelDuringSends() async throws {
        let tokens = makeDeviceTokens(12)
        try await withServer(configure: { $0.clock = .manual }) { server in
            // Four users with three devices each: every send is a fan-out of twelve.
            for (index, token) in tokens.enumerated() {
                #expect(try await server.register("d\(index)", user: "u\(index % 4)", token: token) == .created)
            }
            let later = HeraldTime.format(try #require(server.runtime.devClock?.now).addingTimeInterval(600))
            let body =
                #"{"to":{"user_ids":["u0","u1","u2","u3"]},"alert":{"body":"race"},"deliver_at":"\#(later)","cancel_key":"race"}"#
            final class Log: Sendable {
                let answered = Mutex<[(id: String, at: ContinuousClock.Instant)]>([])
                let cancelAsked = Mutex<ContinuousClock.Instant?>(nil)
            }
            let log = Log()
            let cancelled = try await withThrowingTaskGroup(of: Int?.self) { group in
                // Three senders, each sending one after another: the cancel lands among them.
                for _ in 0..<3 {
                    group.addTask {
                        for _ in 0..<15 {
                            let sent = try await server.send(body)
                            let id = try #require(sent.body["id"] as? String)
                            log.answered.withLock { $0.append((id, ContinuousClock.now)) }
                        }
                        return nil
                    }
                }
                group.addTask {
                    // Once ten sends are answered, the cancel goes while the others are in progress.
                    while log.answered.withLock({ $0.count }) < 10 { try await Task.sleep(for: .milliseconds(1)) }
                    log.cancelAsked.withLock { $0 = ContinuousClock.now }
                    let answer = try await server.request(
                        .post, "/v1/apps/demo/cancel", json: #"{"cancel_key":"race"}"#)
                    return answer.body["cancelled"] as? Int
                }
                var total: Int?
                for try await value in group where value != nil { total = value }
                return try #require(total)
            }
            let asked = try #require(log.cancelAsked.withLock { $0 })
            var covered = 0
            var untouched = 0
            for (id, at) in log.answered.withLock({ $0 }) {
                let counts = try #require(
                    try await server.request(.get, "/v1/apps/demo/notifications/\(id)").body["counts"] as? [String: Int]
                )
                // Whole or not at all: never some of a fan-out's devices.
                #expect(counts["cancelled"] == 12 || counts["cancelled"] == 0, "\(counts)")
                if at < asked { #expect(counts["cancelled"] == 12, "answered before the cancel was asked") }
                if counts["cancelled"] == 12 { covered += 1 } else { untouched += 1 }
            }
            // Sends answered after the cancel are not covered: their deliveries go.
            #expect(covered >= 10 && untouched > 0 && covered + untouched == 45 && covered * 12 == cancelled)
            let expected = untouched * 12
            _ = try await server.request(.post, "/v1/dev/clock", key: ServerHarness.admin, json: #"{"advance":"10m"}"#)
            try await eventually { tokens.reduce(0) { $0 + server.simulator.state.inbox(for: $1).count } == expected }
            try await server.settle()
            #expect(tokens.allSatisfy { server.simulator.state.inbox(for: $0).count == expected / 12 })
        }
    }

    @Test("cancel_key and the cancel body are checked, naming the field; a client key may not cancel")
    func validation() async throws {
        try await withServer { server in
            let long = String(repeating: "k", count: 129)
            let send = try await server.send(#"{"to":{"user_ids":["x"]},"alert":{"body":"x"},"cancel_key":"\#(long)"}"#)
            #expect(send.status == .badRequest)
            #expect((send.body["error"] as? [String: Any])?["field"] as? String == "cancel_key")
            for (json, field) in [
                ("{}", "cancel_key"), (#"{"cancel_key":""}"#, "cancel_key"),
                (#"{"cancel_key":"\#(long)"}"#, "cancel_key"),
                (#"{"cancel_key":"k","user_ids":[]}"#, "user_ids"),
                (#"{"cancel_key":"k","user_ids":["a",""]}"#, "user_ids[1]"),
                (#"{"cancel_key":7}"#, "cancel_key"),
            ] {
                let answer = try await server.request(.post, "/v1/apps/demo/cancel", json: json)
                #expect(answer.status == .badRequest, "\(json)")
                #expect((answer.body["error"] as? [String: Any])?["field"] as? String == field, "\(json)")
            }
            let client = try await server.request(
                .post, "/v1/apps/demo/cancel", key: ServerHarness.client, json: #"{"cancel_key":"k"}"#)
            #expect(client.status == .forbidden)
            // A body past 8 MB is a JSON 413 naming the body (it was an empty 413 at 1 MB, below
            // what a send to 10,000 named users may need).
            let huge = try await server.request(
                .post, "/v1/apps/demo/cancel",
                json: #"{"cancel_key":"k","user_ids":["\#(String(repeating: "u", count: 9 << 20))"]}"#)
            #expect(
                huge.status == .contentTooLarge
                    && (huge.body["error"] as? [String: Any])?["field"] as? String == "body", "\(huge.body)")
        }
    }

    @Test(
        "deliveries being sent when cancelled: a sent or failed attempt records what happened, a retry or deferral ends cancelled, a dead node's claim is not sent again"
    )
    func inFlight() async throws {
        let url = try await TestDatabase.url("cancel-in-flight")
        let clock = ManualClock(Date())
        let store = try await HeraldStore.open(url: url, clock: clock.clock)
        defer { Task { await store.close() } }
        let devices = makeDeviceRecords(4)
        #expect(try await store.devices.importDevices(appID: "a", devices) == 4)
        let (notification, _) = try await store.notifications.createNotification(
            appID: "a", id: UUID(), idempotencyKey: nil, content: Data("{}".utf8),
            recipients: .users(["u0", "u1", "u2", "u3"]),
            excludeDeviceIDs: [], dueAt: clock.now, cancelKey: "k")
        let claimed = try await store.outbox.claimDueDeliveries(limit: 10).sorted { $0.deviceID < $1.deviceID }
        #expect(claimed.count == 4)
        let done = try await store.notifications.cancel(appID: "a", cancelKey: "k", userIDs: nil)
        #expect(done == NotificationRepository.Cancellation(cancelled: 0, inFlight: 4, broadcastsSkipped: 0))
        let written = try await store.outbox.recordResults([
            DeliveryResult(claimed[0], .sent, attempts: 1),
            DeliveryResult(claimed[1], .tokenDead(reason: "Unregistered", since: nil), attempts: 1),
            DeliveryResult(
                claimed[2], .deferred(reason: "quiet hours", until: clock.now.addingTimeInterval(3600)), attempts: 0),
        ])
        #expect(written == 3)
        var rows = try await store.notifications.deliveries(notificationID: notification.id, limit: 10, offset: 0)
        #expect(rows.map(\.status) == [.sent, .failed, .cancelled, .cancelled])
        #expect(rows.map(\.reason) == [nil, "Unregistered", "Cancelled", "CancelledInFlight"])
        #expect(try await store.devices.device(appID: "a", deviceID: "d1")?.active == false)
        var counts = try await store.notifications.deliveryCounts(notificationID: notification.id)
        #expect(
            counts[.sent] == 1 && counts[.failed] == 1 && counts[.cancelled] == 2 && counts[.queued] == 0
                && counts[.deferred] == 0)

        // The fourth's node dies before answering: another node rescues nothing of it.
        clock.advance(by: 3600 * 2)
        let other = try await HeraldStore.open(url: url, clock: clock.clock)
        defer { Task { await other.close() } }
        #expect(try await other.nodes.rescueDeadClaims(deadAfter: 0) == 0)
        #expect(try await other.outbox.claimDueDeliveries(limit: 10).isEmpty)
        #expect(try await store.outbox.claimDueDeliveries(limit: 10).isEmpty)
        // Its late answer, a retry, leaves it cancelled.
        _ = try await store.outbox.recordResults([
            DeliveryResult(claimed[3], .retry(reason: "TooManyRequests", dueAt: clock.now), attempts: 1)
        ])
        rows = try await store.notifications.deliveries(notificationID: notification.id, limit: 10, offset: 0)
        #expect(rows[3].status == .cancelled && rows[3].reason == "Cancelled")
        counts = try await store.notifications.deliveryCounts(notificationID: notification.id)
        #expect(counts[.cancelled] == 2 && counts[.sent] == 1)
        // Cancelled rows are history: retention deletes them with the answered ones.
        #expect(try await store.pruneHistory(before: clock.now.addingTimeInterval(86_400)).deliveries == 4)
    }

    @Test(
        "a broadcast cancelled while a page of it is being sent: the page's sent devices stay sent, the rest end cancelled, the cursor's devices are never handed out, a page given back is not handed out again"
    )
    func broadcastInFlight() async throws {
        let clock = ManualClock(Date())
        let store = try await HeraldStore.open(url: try await TestDatabase.url("cancel-broadcast"), clock: clock.clock)
        defer { Task { await store.close() } }
        let devices = makeDeviceRecords(10)
        #expect(try await store.devices.importDevices(appID: "a", devices) == 10)
        let (notification, _) = try await store.notifications.createNotification(
            appID: "a", id: UUID(), idempotencyKey: nil, content: Data("{}".utf8), recipients: .all,
            excludeDeviceIDs: [],
            dueAt: clock.now, cancelKey: "weekly")
        let answered = try await store.outbox.claimDueDeliveries(limit: 4)
        let givenBack = try await store.outbox.claimDueDeliveries(limit: 2)
        #expect(answered.count == 4 && givenBack.count == 2)
        let done = try await store.notifications.cancel(appID: "a", cancelKey: "weekly", userIDs: nil)
        // Four devices after the cursor; six in pages this node holds.
        #expect(done == NotificationRepository.Cancellation(cancelled: 4, inFlight: 6, broadcastsSkipped: 0))
        #expect(
            try await store.outbox.recordResults([
                DeliveryResult(answered[0], .sent, attempts: 1), DeliveryResult(answered[1], .sent, attempts: 1),
                DeliveryResult(
                    answered[2], .deferred(reason: "quiet hours", until: clock.now.addingTimeInterval(60)), attempts: 0),
                DeliveryResult(answered[3], .retry(reason: "InternalServerError", dueAt: clock.now), attempts: 1),
            ]) == 4)
        try await store.nodes.unclaim(givenBack)
        clock.advance(by: 120)
        #expect(try await store.outbox.claimDueDeliveries(limit: 10).isEmpty)
        let rows = try await store.notifications.deliveries(notificationID: notification.id, limit: 20, offset: 0)
        #expect(rows.map(\.status).sorted { $0.rawValue < $1.rawValue } == [.cancelled, .cancelled, .sent, .sent])
        let counts = try await store.notifications.deliveryCounts(notificationID: notification.id)
        #expect(counts[.sent] == 2 && counts[.cancelled] == 8 && counts[.deferred] == 0 && counts[.queued] == 0)
        #expect(try await store.nodes.queueDepth() == 0)
    }
}
