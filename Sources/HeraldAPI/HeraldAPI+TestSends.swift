import Foundation
import HeraldCore
import HeraldEngine
import HeraldPayload
import HeraldStore
import Hummingbird
import Logging

/// `POST /v1/apps/{app}/test` (Lucid's admin trigger): one typed notification to
/// a user's devices now, waited for, answered with what each device was sent and how it went.
extension HeraldAPI {
    /// How long the route waits for its deliveries' answers before it answers 202 with what it has.
    static let testSendWait: Duration = .seconds(10)

    static func addTestSendRoutes(to routes: AppRoutes, runtime: HeraldRuntime) {
        routes.server.post("test") { request, context in
            let app = try context.authorized().app
            let body = try await decode(TestSendBody.self, request)
            let (userID, draft) = try body.validated()
            let devices = try await runtime.store.devices.devices(appID: app.id, userID: userID).filter(\.active)
            guard !devices.isEmpty else {
                throw APIError(
                    .notFound, code: "no_devices", message: "the user has no active device in this app",
                    field: "user_id")
            }
            let id = UUID.random()
            // Watched before it is stored: a direct claim may be sent before the accept returns.
            runtime.testSends.watch(id)
            defer { runtime.testSends.forget(id) }
            let accepted: NotificationRepository.Accepted
            do {
                accepted = try await NotificationSends.accept(
                    SendRequest(recipients: .users([userID]), draft: draft), app: app, runtime: runtime, id: id,
                    test: true)
            } catch let error as CompositionError {
                throw APIError(composition: error)
            }
            runtime.logger.info(
                "Test send",
                metadata: [
                    "herald.app": "\(app.id)", "herald.type": "\(body.type ?? "")", "herald.notification": "\(id)",
                    "herald.devices": "\(accepted.record.recipients)",
                ])
            // Until every delivery has its answer: sent, failed, held by the policy engine, or
            // queued again with a reason (a retry, a paused provider).
            let deadline = ContinuousClock.now + testSendWait
            var deliveries: [DeliveryRecord] = []
            var complete = false
            while true {
                deliveries = try await runtime.store.notifications.deliveries(
                    notificationID: id, limit: devices.count, offset: 0)
                complete = deliveries.allSatisfy { $0.status != .sending && ($0.status != .queued || $0.reason != nil) }
                if complete || ContinuousClock.now >= deadline { break }
                try await Task.sleep(for: .milliseconds(20))
            }
            let view = TestSendView(
                id: id, userID: userID, type: app.catalog?.type(body.type ?? "")?.name ?? "", complete: complete,
                deliveries: deliveries,
                platforms: Dictionary(
                    devices.map { ($0.deviceID, $0.platform) }, uniquingKeysWith: { first, _ in first }),
                sent: runtime.testSends.sent(id))
            return try JSONResponse.make(view, status: complete ? .ok : .accepted)
        }
    }
}

/// `POST /v1/apps/{app}/test`: a catalog type, with its placeholders' data, for one user.
struct TestSendBody: Decodable {
    var userID: String?
    package var type: String?
    var data: JSONValue?

    enum CodingKeys: String, CodingKey {
        case userID = "user_id"
        case type, data
    }

    /// The user, and the notification a send of the type to them would be; the first problem names its field.
    func validated() throws(APIError) -> (String, NotificationDraft) {
        guard let userID else { throw APIError.missing("user_id") }
        guard !userID.isEmpty, userID.utf8.count <= 256 else {
            throw APIError.invalid("user_id", "user_id is 1 to 256 bytes")
        }
        guard let type else { throw APIError.missing("type") }
        return (userID, NotificationDraft(data: data, type: type))
    }
}

/// What a test send did per device: the request as it went to the provider and its answer.
struct TestSendView: Encodable {
    package var id: UUID
    var userID: String
    package var type: String
    var complete: Bool
    var deliveries: [DeliveryRecord]
    package var platforms: [String: String]
    var sent: [Int64: TestSends.Sent]

    enum CodingKeys: String, CodingKey {
        case id
        case userID = "user_id"
        case type, complete, deliveries
    }
    enum DeliveryKeys: String, CodingKey {
        case deliveryID = "delivery_id"
        case deviceID = "device_id"
        case platform, status, reason, attempts, until, trace, headers, payload
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id.uuidString.lowercased(), forKey: .id)
        try container.encode(userID, forKey: .userID)
        try container.encode(type, forKey: .type)
        try container.encode(complete, forKey: .complete)
        var list = container.nestedUnkeyedContainer(forKey: .deliveries)
        for delivery in deliveries {
            var item = list.nestedContainer(keyedBy: DeliveryKeys.self)
            try item.encode(delivery.id, forKey: .deliveryID)
            try item.encode(delivery.deviceID, forKey: .deviceID)
            try item.encodeIfPresent(platforms[delivery.deviceID], forKey: .platform)
            try item.encode(delivery.status == .sending ? "queued" : delivery.status.rawValue, forKey: .status)
            try item.encodeIfPresent(delivery.reason, forKey: .reason)
            try item.encode(delivery.attempts, forKey: .attempts)
            if delivery.status == .deferred || delivery.status == .queued {
                try item.encode(delivery.dueAt, forKey: .until)
            }
            let trace = DecisionTrace.entries(delivery.trace)
            if !trace.isEmpty { try item.encode(trace, forKey: .trace) }
            // What went to the provider (sent by this node): APNs headers and payload, or FCM's request body.
            if let sent = sent[delivery.id] {
                if !sent.headers.isEmpty { try item.encode(sent.headers, forKey: .headers) }
                try item.encode((try? JSONDecoder().decode(JSONValue.self, from: sent.body)) ?? .null, forKey: .payload)
            }
        }
    }
}
