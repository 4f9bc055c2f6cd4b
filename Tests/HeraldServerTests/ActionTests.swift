import Crypto
import Foundation
import HTTPTypes
import HeraldCatalog
import HeraldCore
import HeraldEngine
import HeraldPayload
import HeraldSimulator
import HeraldStore
import HeraldTesting
import Testing

/// Quick actions that commit without opening the app, replayed as Cocotte does
/// them: tokens in each delivery's payload, commits forwarded to a live webhook receiver that
/// checks their signatures, retried on the published schedule, ordered per user.
@Suite("Quick actions and webhooks")
struct ActionTests {
    static func withCocotte(
        receiverURL: String, _ body: @escaping @Sendable (ServerHarness) async throws -> Void
    ) async throws {
        try await withServer(
            catalog: "cocotte.yaml", payloadKey: nil,
            app: { $0.webhook = .init(url: receiverURL, secrets: [WebhookReceiver.secret]) },
            configure: { $0.clock = .manual }, { _ in }, body)
    }

    /// The stamps a token's device got, newest last.
    static func stamps(_ server: ServerHarness, _ token: String) -> [HeraldStamp] {
        EngagementTests.stamps(server, token, payloadKey: "cocotte")
    }

    static func approval(_ server: ServerHarness, user: String, card: String) async throws -> String {
        let sent = try await server.send(
            #"{"to":{"user_ids":["\#(user)"]},"type":"approval","data":{"recommendation":"Refund order \#(card)","reason":"Damaged in transit.","confidence":"0.92","card_id":"\#(card)"}}"#
        )
        let id = try #require(sent.body["id"] as? String, "\(sent.body)")
        _ = try await server.settled(id)
        return id
    }

    static func commit(_ server: ServerHarness, token: String, device: String, turn: String = "turn-1") async throws
        -> (status: Int, body: [String: Any])
    {
        let answer = try await server.request(
            .post, "/v1/apps/demo/actions", key: nil,
            json: #"{"token":"\#(token)","device_id":"\#(device)","turn_id":"\#(turn)"}"#)
        return (Int(answer.status.code), answer.body)
    }

    @Test(
        "configuration: apps[].webhook needs an http(s) url and whsec_ secrets (a list of up to three while rotating); action_token_secret ≥ 32 bytes; action ids that cannot travel in a token are refused, naming the key"
    )
    func configuration() throws {
        func failure(_ app: String) -> String? {
            let yaml = "apps:\n  - id: a\n    keys: { server: \"server-0123456789abcdef\" }\n" + app
            do {
                _ = try HeraldConfiguration.parse(yaml: yaml, file: "h.yaml")
                return nil
            } catch {
                return error.key
            }
        }
        let secret = WebhookReceiver.secretText
        #expect(failure("    webhook: { url: \"https://backend.example/herald\", secret: \"\(secret)\" }\n") == nil)
        #expect(
            failure(
                "    webhook: { url: \"https://b.example/h\", secret: [\"\(secret)\", \"\(secret)\"], timeout: 2 }\n")
                == nil)
        #expect(
            failure("    webhook: { url: \"ftp://backend.example\", secret: \"\(secret)\" }\n") == "apps[0].webhook.url"
        )
        #expect(
            failure("    webhook: { url: \"https://b.example/h\", secret: \"not-a-whsec\" }\n")
                == "apps[0].webhook.secret")
        #expect(
            failure("    webhook: { url: \"https://b.example/h\", secret: \"whsec_c2hvcnQ=\" }\n")
                == "apps[0].webhook.secret")
        #expect(failure("    webhook: { url: \"https://b.example/h\" }\n") == "apps[0].webhook.secret")
        #expect(
            failure("    webhook: { url: \"https://b.example/h\", secret: \"\(secret)\", timeout: 30 }\n")
                == "apps[0].webhook.timeout")
        #expect(failure("    action_token_secret: short\n") == "apps[0].action_token_secret")
        let decoded = try #require(
            HeraldConfiguration.parse(
                yaml:
                    "apps:\n  - id: a\n    keys: { server: \"server-0123456789abcdef\" }\n    webhook: { url: \"https://b.example/h\", secret: \"\(secret)\" }\n",
                file: "h.yaml"
            ).apps.first?.webhook)
        #expect(decoded.secrets == [WebhookReceiver.secret] && decoded.timeout == 5)
        #expect(decoded.events == ["delivery.failed", "device.deactivated"])
        #expect(
            failure("    webhook: { url: \"https://b.example/h\", secret: \"\(secret)\", events: [delivery.failed] }\n")
                == nil)
        #expect(failure("    webhook: { url: \"https://b.example/h\", secret: \"\(secret)\", events: [] }\n") == nil)
        #expect(
            failure(
                "    webhook: { url: \"https://b.example/h\", secret: \"\(secret)\", events: [action.committed] }\n")
                == "apps[0].webhook.events")
        #expect(throws: ConfigurationError.self) {
            try CatalogLoader.parse(
                yaml: "types:\n  a:\n    copy: { en: { body: x } }\n    actions: [{ id: \"A B\", title: X }]\n",
                file: "c.yaml")
        }
        #expect(throws: ConfigurationError.self) {
            try CatalogLoader.parse(
                yaml: "types:\n  a:\n    copy: { en: { body: x } }\n    actions: [{ id: default, title: X }]\n",
                file: "c.yaml")
        }
    }

    @Test("a token names its delivery, action and expiry, checks its app, and has the length it says")
    func tokens() throws {
        let key = SymmetricKey(data: Data(repeating: 7, count: 32))
        let expires = Date(timeIntervalSince1970: 1_900_000_000)
        let token = ActionToken(deliveryID: 123_456_789_012, action: "APPROVE", expiresAt: expires).signed(
            appID: "cocotte", key: key)
        #expect(token.utf8.count == ActionToken.length(action: "APPROVE"))
        let read = try ActionToken.verify(token, appID: "cocotte", key: key, now: expires.addingTimeInterval(-1))
        #expect(read == ActionToken(deliveryID: 123_456_789_012, action: "APPROVE", expiresAt: expires))
        #expect(throws: ActionToken.Failure.self) {
            try ActionToken.verify(token, appID: "other-app", key: key, now: expires.addingTimeInterval(-1))
        }
        #expect(throws: ActionToken.Failure.self) {
            try ActionToken.verify(token, appID: "cocotte", key: key, now: expires)
        }
        #expect(throws: ActionToken.Failure.self) {
            try ActionToken.verify(
                token, appID: "cocotte", key: SymmetricKey(data: Data(repeating: 8, count: 32)),
                now: expires.addingTimeInterval(-1))
        }
        let longest = String(repeating: "A", count: ActionToken.maximumActionBytes)
        #expect(ActionToken.length(action: longest) <= 200)
    }

    @Test(
        "Cocotte: an approval goes to phone and Mac with a signed token per action; the phone commits APPROVE, the backend (signature checked) answers and the phone gets its result; a replay returns it without a second call; another device's, forged or expired tokens are refused; the audit has the row"
    )
    func commitFromTheLockScreen() async throws {
        let tokens = makeDeviceTokens(2)
        try await WebhookReceiver.with { receiver, url in
            receiver.answer { call in .init(body: #"{"ok":true,"decision":"\#(call.data["action"] as? String ?? "")"}"#)
            }
            try await Self.withCocotte(receiverURL: url) { server in
                try await EngagementTests.noon(server)
                for (device, name, token) in [("ana-phone", "iPhone", tokens[0]), ("ana-mac", "Mac", tokens[1])] {
                    let registered = try await server.request(
                        .post, "/v1/apps/demo/devices",
                        json:
                            #"{"device_id":"\#(device)","user_id":"ana","token":"\#(token)","environment":"sandbox","name":"\#(name)"}"#
                    )
                    #expect(registered.status == .created)
                }
                let notification = try await Self.approval(server, user: "ana", card: "c1")
                let phone = try #require(Self.stamps(server, tokens[0]).first { $0.notificationID == notification })
                let mac = try #require(Self.stamps(server, tokens[1]).first { $0.notificationID == notification })
                // One token per action of the type, different per delivery, each ≤ 200 bytes.
                #expect(Set(phone.actionTokens?.keys ?? [:].keys) == ["APPROVE", "REJECT"])
                #expect(phone.actionTokens?["APPROVE"] != mac.actionTokens?["APPROVE"])
                #expect((phone.actionTokens ?? [:]).values.allSatisfy { $0.utf8.count <= 200 })
                let approve = try #require(phone.actionTokens?["APPROVE"])

                let first = try await Self.commit(server, token: approve, device: "ana-phone")
                #expect(first.status == 200 && first.body["status"] as? String == "committed", "\(first.body)")
                #expect((first.body["result"] as? [String: Any])?["decision"] as? String == "APPROVE")
                #expect(receiver.calls.count == 1)
                let call = try #require(receiver.calls.first)
                #expect(call.verified, "the Standard Webhooks signature checks out")
                #expect(call.idempotencyKey == "\(phone.deliveryID):APPROVE" && call.id.hasPrefix("msg_"))
                #expect(call.body["type"] as? String == "action.committed")
                #expect(call.data["user_id"] as? String == "ana" && call.data["device_id"] as? String == "ana-phone")
                #expect(call.data["turn_id"] as? String == "turn-1" && call.data["type"] as? String == "approval")
                #expect(call.data["notification_id"] as? String == notification)

                // Resolved elsewhere: the Mac's card is replaced (same collapse id, the label, no
                // actions, content-available) and its own tokens are refused.
                try await eventually { server.simulator.state.inbox(for: tokens[1]).count == 2 }
                let original = try #require(server.simulator.state.inbox(for: tokens[1]).first)
                let replaced = try #require(server.simulator.state.inbox(for: tokens[1]).last)
                let aps = try #require(replaced.payloadObject?["aps"] as? [String: Any])
                #expect((aps["alert"] as? [String: Any])?["body"] as? String == "✓ Approved on iPhone", "\(aps)")
                #expect(aps["category"] == nil && aps["content-available"] as? Int == 1)
                #expect(replaced.collapseID != nil && replaced.collapseID == original.collapseID)
                #expect(server.simulator.state.inbox(for: tokens[0]).count == 1)
                let late = try await Self.commit(
                    server, token: try #require(mac.actionTokens?["REJECT"]), device: "ana-mac")
                #expect(
                    late.status == 409
                        && ((late.body["error"] as? [String: Any])?["message"] as? String ?? "").contains(
                            "Approved on iPhone")
                )

                // The same token again (the phone retried): the first answer, no second call.
                let replay = try await Self.commit(server, token: approve, device: "ana-phone")
                #expect(replay.status == 200 && replay.body["replay"] as? Bool == true)
                #expect((replay.body["result"] as? [String: Any])?["decision"] as? String == "APPROVE")
                // REJECT of the same delivery after APPROVE: refused, with what was committed.
                let reject = try await Self.commit(
                    server, token: try #require(phone.actionTokens?["REJECT"]), device: "ana-phone")
                #expect(reject.status == 409)
                #expect(receiver.calls.count == 1)

                // The Mac's token from the phone: another delivery's.
                let other = try await Self.commit(
                    server, token: try #require(mac.actionTokens?["APPROVE"]), device: "ana-phone")
                #expect(
                    other.status == 403 && (other.body["error"] as? [String: Any])?["field"] as? String == "device_id")
                // A forged token (one character changed), and garbage.
                var forged = Array(approve)
                forged[10] = forged[10] == "A" ? "B" : "A"
                for bad in [String(forged), "not-a-token", ""] {
                    let refused = try await Self.commit(server, token: bad, device: "ana-phone")
                    #expect(
                        refused.status == 401
                            && (refused.body["error"] as? [String: Any])?["field"] as? String == "token", "\(bad)")
                }
                // Without a device id: named.
                let missing = try await server.request(
                    .post, "/v1/apps/demo/actions", key: nil, json: #"{"token":"\#(approve)"}"#)
                #expect(
                    missing.status == .badRequest
                        && (missing.body["error"] as? [String: Any])?["field"] as? String == "device_id")

                // The audit: who, which device, action, turn, result, latency.
                let audit = try await server.request(.get, "/v1/apps/demo/audit?user_id=ana")
                let rows = try #require(audit.body["commits"] as? [[String: Any]])
                #expect(rows.count == 1)
                #expect(
                    rows.first?["device_id"] as? String == "ana-phone" && rows.first?["action"] as? String == "APPROVE")
                #expect(
                    rows.first?["turn_id"] as? String == "turn-1" && rows.first?["status"] as? String == "committed")
                #expect(
                    rows.first?["latency_ms"] is Int
                        && (rows.first?["result"] as? [String: Any])?["ok"] as? Bool == true)
                #expect(
                    try await server.request(.get, "/v1/apps/demo/audit", key: ServerHarness.client).status
                        == .forbidden)

                // Tokens last 7 days: refused as expired after 8.
                try await TrackTests.advance(server, to: server.runtime.store.now.addingTimeInterval(8 * 86_400))
                let expired = try await Self.commit(
                    server, token: try #require(phone.actionTokens?["REJECT"]), device: "ana-phone")
                #expect(
                    expired.status == 401
                        && ((expired.body["error"] as? [String: Any])?["message"] as? String ?? "").contains("expired"))
            }
        }
    }

    @Test(
        "resolve: a card still waiting is cancelled for the user and the other devices get the label with the card's collapse id; a second resolve changes nothing; another user's device is refused with a client key"
    )
    func resolveEndpoint() async throws {
        let tokens = makeDeviceTokens(2)
        try await WebhookReceiver.with { _, url in
            try await Self.withCocotte(receiverURL: url) { server in
                try await EngagementTests.noon(server)
                #expect(try await server.register("ana-phone", user: "ana", token: tokens[0]) == .created)
                #expect(try await server.register("ana-mac", user: "ana", token: tokens[1]) == .created)
                // Scheduled an hour ahead: both deliveries wait.
                let at = HeraldTime.format(server.runtime.store.now.addingTimeInterval(3600))
                let sent = try await server.send(
                    #"{"to":{"user_ids":["ana"]},"alert":{"body":"Approve the refund?"},"collapse_id":"card-9","deliver_at":"\#(at)"}"#
                )
                let id = try #require(sent.body["id"] as? String)
                let resolved = try await server.request(
                    .post, "/v1/apps/demo/notifications/\(id)/resolve",
                    json: #"{"device_id":"ana-phone","label":"✓ Approved on Mac"}"#)
                #expect(resolved.status == .ok && resolved.body["first"] as? Bool == true, "\(resolved.body)")
                #expect(resolved.body["cancelled"] as? Int == 2 && resolved.body["devices"] as? Int == 1)
                try await eventually { server.simulator.state.inbox(for: tokens[1]).count == 1 }
                let replacement = try #require(server.simulator.state.inbox(for: tokens[1]).first)
                #expect(replacement.collapseID == "card-9")
                #expect(
                    ((replacement.payloadObject?["aps"] as? [String: Any])?["alert"] as? [String: Any])?["body"]
                        as? String == "✓ Approved on Mac")
                let view = try await server.request(.get, "/v1/apps/demo/notifications/\(id)").body
                #expect((view["counts"] as? [String: Int])?["cancelled"] == 2)
                // The hour passes: the original goes nowhere.
                try await TrackTests.advance(server, to: server.runtime.store.now.addingTimeInterval(3700))
                try await server.settle()
                #expect(
                    server.simulator.state.inbox(for: tokens[0]).isEmpty
                        && server.simulator.state.inbox(for: tokens[1]).count == 1)
                let again = try await server.request(
                    .post, "/v1/apps/demo/notifications/\(id)/resolve",
                    json: #"{"device_id":"ana-mac","label":"other"}"#)
                #expect(again.body["first"] as? Bool == false && again.body["label"] as? String == "✓ Approved on Mac")
                let foreign = try await server.request(
                    .post, "/v1/apps/demo/notifications/\(id)/resolve", key: ServerHarness.client,
                    userToken: ServerHarness.userToken("bo", now: server.runtime.store.now),
                    json: #"{"device_id":"ana-mac","label":"x"}"#)
                #expect(foreign.status == .forbidden)
                let missing = try await server.request(
                    .post, "/v1/apps/demo/notifications/\(id)/resolve", json: #"{"device_id":"ana-mac"}"#)
                #expect(
                    missing.status == .badRequest
                        && (missing.body["error"] as? [String: Any])?["field"] as? String == "label")
            }
        }
    }

    @Test(
        "the webhook down: the commit is queued (202) and retried on the schedule (5 s, then 5 min) until it lands, nothing lost; one user's backlog holds only that user's later commits, in order; another user commits at once; an abort answer stops the retries; a replay sends them again"
    )
    func webhookDown() async throws {
        let tokens = makeDeviceTokens(2)
        try await WebhookReceiver.with { receiver, url in
            try await Self.withCocotte(receiverURL: url) { server in
                try await EngagementTests.noon(server)
                #expect(try await server.register("ana-phone", user: "ana", token: tokens[0]) == .created)
                #expect(try await server.register("bo-phone", user: "bo", token: tokens[1]) == .created)
                // Ana's calls fail; Bo's go through.
                receiver.answer { call in
                    call.data["user_id"] as? String == "ana" ? .init(status: 503, body: "{}") : .init()
                }
                let first = try await Self.approval(server, user: "ana", card: "a1")
                let second = try await Self.approval(server, user: "ana", card: "a2")
                let bos = try await Self.approval(server, user: "bo", card: "b1")
                func token(_ device: Int, _ notification: String) throws -> String {
                    try #require(
                        Self.stamps(server, tokens[device]).first { $0.notificationID == notification }?.actionTokens?[
                            "APPROVE"])
                }
                let queued = try await Self.commit(server, token: try token(0, first), device: "ana-phone", turn: "t1")
                #expect(queued.status == 202 && queued.body["status"] as? String == "queued", "\(queued.body)")
                // Ana's second commit queues behind her first without a call of its own.
                let behind = try await Self.commit(server, token: try token(0, second), device: "ana-phone", turn: "t2")
                #expect(behind.status == 202)
                #expect(receiver.calls.count == 1)
                // Bo is not held up.
                let bo = try await Self.commit(server, token: try token(1, bos), device: "bo-phone")
                #expect(bo.status == 200 && bo.body["status"] as? String == "committed")
                #expect(receiver.calls.count == 2)

                // 5 s later the first retry (still failing), then nothing until 5 min.
                try await TrackTests.advance(server, to: server.runtime.store.now.addingTimeInterval(6))
                server.runtime.webhookWake.signal()
                try await eventually { receiver.calls.count == 3 }
                try await server.settle()
                #expect(receiver.calls.count == 3)
                // The backend is back; at 5 min the first lands, then the second, in order.
                receiver.answer { call in
                    .init(body: #"{"ok":true,"turn":"\#(call.data["turn_id"] as? String ?? "")"}"#)
                }
                try await TrackTests.advance(server, to: server.runtime.store.now.addingTimeInterval(301))
                server.runtime.webhookWake.signal()
                try await eventually { receiver.calls.count == 5 }
                let turns = receiver.calls.suffix(2).map { $0.data["turn_id"] as? String }
                #expect(turns == ["t1", "t2"])
                #expect(receiver.calls.allSatisfy { $0.verified })
                // Every try of a message carries the same webhook-id.
                let ids = receiver.calls.filter { $0.data["turn_id"] as? String == "t1" }.map(\.id)
                #expect(ids.count == 3 && Set(ids).count == 1)
                // The device's retry now gets the backend's answer.
                let later = try await Self.commit(server, token: try token(0, first), device: "ana-phone", turn: "t1")
                #expect(
                    later.status == 200 && (later.body["result"] as? [String: Any])?["turn"] as? String == "t1",
                    "\(later.body)")
                // The receiver has the second call a moment before its answer is recorded.
                try await eventually {
                    let audit =
                        try await server.request(.get, "/v1/apps/demo/audit?user_id=ana").body["commits"]
                        as? [[String: Any]]
                    return audit?.map { $0["status"] as? String } == ["committed", "committed"]
                }

                // An abort answer: no more tries, the commit failed.
                receiver.answer { _ in .init(status: 410, abort: true, body: "{}") }
                let third = try await Self.approval(server, user: "ana", card: "a3")
                let aborted = try await Self.commit(server, token: try token(0, third), device: "ana-phone", turn: "t3")
                #expect(aborted.status == 200 && aborted.body["status"] as? String == "failed", "\(aborted.body)")
                let calls = receiver.calls.count
                try await TrackTests.advance(server, to: server.runtime.store.now.addingTimeInterval(3600))
                server.runtime.webhookWake.signal()
                try await server.settle()
                #expect(receiver.calls.count == calls)

                // A replay sends the messages since then again (idempotency keys unchanged).
                receiver.answer { _ in .init() }
                let since = HeraldTime.format(server.runtime.store.now.addingTimeInterval(-86_400))
                let replayed = try await server.request(
                    .post, "/v1/apps/demo/webhooks/replay", json: #"{"since":"\#(since)"}"#)
                // (Ana's two, Bo's sent at once, and the aborted one: every message is kept.)
                #expect(replayed.status == .ok && replayed.body["replayed"] as? Int == 4, "\(replayed.body)")
                server.runtime.webhookWake.signal()
                try await eventually { receiver.calls.count == calls + 4 }
                #expect(
                    try await server.request(.post, "/v1/apps/demo/webhooks/replay", json: "{}").status == .badRequest)
            }
        }
    }
}

/// The delivery events an app's webhook takes besides commits: failed deliveries
/// and deactivated devices, queued with the results that make them.
@Suite("Delivery webhooks")
struct DeliveryWebhookTests {
    @Test(
        "a dead token and a refused delivery reach the webhook as delivery.failed (both) and device.deactivated (the dead one), signed, in the user's order, with the user, reason and idempotency key; an app whose webhook takes no delivery events queues none"
    )
    func failuresAndDeactivations() async throws {
        let tokens = makeDeviceTokens(3)
        try await WebhookReceiver.with { receiver, url in
            try await withServer(app: { $0.webhook = .init(url: url, secrets: [WebhookReceiver.secret]) }) { server in
                for (index, device) in ["phone", "tablet", "mac"].enumerated() {
                    #expect(try await server.register(device, user: "gus", token: tokens[index]) == .created)
                }
                server.simulator.state.markDead(tokens[0], at: Date(timeIntervalSince1970: 1_790_000_000))
                server.simulator.state.script(tokens[1], status: 400, reason: "BadCollapseId")
                let sent = try await server.send(#"{"to":{"user_ids":["gus"]},"alert":{"body":"x"}}"#)
                let id = try #require(sent.body["id"] as? String)
                let view = try await server.settled(id)
                #expect((view["counts"] as? [String: Int])?["failed"] == 2)
                try await eventually { receiver.calls.count == 3 }
                #expect(receiver.calls.allSatisfy { $0.verified })
                let events = receiver.calls.map {
                    ($0.body["type"] as? String ?? "", $0.data["device_id"] as? String ?? "")
                }
                #expect(
                    events.filter { $0.0 == "delivery.failed" }.map(\.1).sorted() == ["phone", "tablet"], "\(events)")
                #expect(events.filter { $0.0 == "device.deactivated" }.map(\.1) == ["phone"])
                let refused = try #require(receiver.calls.first { $0.data["device_id"] as? String == "tablet" })
                #expect(
                    refused.data["reason"] as? String == "BadCollapseId" && refused.data["user_id"] as? String == "gus")
                #expect(refused.data["notification_id"] as? String == id && refused.data["app"] as? String == "demo")
                #expect(refused.data["delivery_id"] as? Int != nil && refused.data["attempts"] as? Int == 1)
                #expect(refused.idempotencyKey == "delivery:\(refused.data["delivery_id"] as? Int ?? 0):failed")
                #expect((refused.body["timestamp"] as? String).flatMap(HeraldTime.parse) != nil)
                let dead = try #require(receiver.calls.first { $0.body["type"] as? String == "device.deactivated" })
                #expect(dead.data["reason"] as? String == "Unregistered" && dead.data["platform"] as? String == "apns")
                #expect((dead.data["inactive_since"] as? String)?.hasPrefix("2026-09-21T") == true, "\(dead.data)")
                // Nothing of the mac's, which was delivered.
                #expect(receiver.calls.allSatisfy { $0.data["device_id"] as? String != "mac" })
            }
            try await withServer(app: { $0.webhook = .init(url: url, secrets: [WebhookReceiver.secret], events: []) }) {
                server in
                #expect(try await server.register("phone", user: "gus", token: tokens[2]) == .created)
                server.simulator.state.markDead(tokens[2])
                let sent = try await server.send(#"{"to":{"user_ids":["gus"]},"alert":{"body":"x"}}"#)
                _ = try await server.settled(try #require(sent.body["id"] as? String))
                #expect(try await server.runtime.store.actions.webhookCounts(appID: "demo").isEmpty)
            }
        }
    }
}

/// Lucid's respond endpoint: the user's answer to a notification.
@Suite("Responses")
struct ResponseTests {
    @Test(
        "Lucid: a response (text, energy, mood, focus 1–10) to a delivered notification is stored (201) and listed; bad values name their field; another user's device is refused with a client key"
    )
    func responses() async throws {
        let tokens = makeDeviceTokens(2)
        try await withServer(catalog: "lucid.yaml", payloadKey: nil) { server in
            #expect(try await server.register("lea-phone", user: "lea", token: tokens[0]) == .created)
            #expect(try await server.register("max-phone", user: "max", token: tokens[1]) == .created)
            let sent = try await server.send(#"{"to":{"user_ids":["lea"]},"alert":{"body":"How did the morning go?"}}"#)
            let id = try #require(sent.body["id"] as? String)
            let path = "/v1/apps/demo/notifications/\(id)/responses"
            let lea = ServerHarness.userToken("lea", now: server.runtime.store.now)
            let stored = try await server.request(
                .post, path, key: ServerHarness.client, userToken: lea,
                json: #"{"device_id":"lea-phone","text":"Calm, focused.","energy":7,"mood":8,"focus":9}"#)
            #expect(
                stored.status == .created && stored.body["user_id"] as? String == "lea"
                    && stored.body["focus"] as? Int == 9, "\(stored.body)")
            _ = try await server.request(.post, path, json: #"{"device_id":"lea-phone","mood":4}"#)
            for (json, field) in [
                (#"{"device_id":"lea-phone","energy":11}"#, "energy"), (#"{"device_id":"lea-phone","mood":0}"#, "mood"),
                (#"{"device_id":"lea-phone"}"#, "text"), (#"{"text":"x"}"#, "device_id"),
                (#"{"device_id":"lea-phone","text":"\#(String(repeating: "a", count: 1001))"}"#, "text"),
            ] {
                let refused = try await server.request(.post, path, json: json)
                #expect(
                    refused.status == .badRequest
                        && (refused.body["error"] as? [String: Any])?["field"] as? String == field, "\(json)")
            }
            let foreign = try await server.request(
                .post, path, key: ServerHarness.client, userToken: lea, json: #"{"device_id":"max-phone","mood":5}"#)
            #expect(foreign.status == .forbidden)
            let unknown = try await server.request(
                .post, "/v1/apps/demo/notifications/\(UUID().uuidString)/responses",
                json: #"{"device_id":"lea-phone","mood":5}"#)
            #expect(unknown.status == .notFound)
            let listed = try await server.request(.get, path)
            let responses = try #require(listed.body["responses"] as? [[String: Any]])
            #expect(responses.map { $0["text"] as? String } == ["Calm, focused.", nil])
            #expect(responses.map { $0["mood"] as? Int } == [8, 4])
            #expect(try await server.request(.get, path, key: ServerHarness.client).status == .forbidden)
        }
    }
}
