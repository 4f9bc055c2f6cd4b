import Foundation
import HeraldCore
import HeraldEngine
import HeraldPayload
import HeraldStore
import Hummingbird
import Logging

// What the action, response and resolve routes share: the device a call speaks for, the
// request bodies and answers, and the webhook events they queue.

extension HeraldAPI {
    /// The app's device `deviceID` (404 naming `device_id`), which must be `tokenUser`'s when a
    /// client key's user token named one (403).
    static func ownedDevice(app: AppRuntime, deviceID: String, tokenUser: String?, runtime: HeraldRuntime) async throws
        -> DeviceRecord
    {
        guard let device = try await runtime.store.devices.device(appID: app.id, deviceID: deviceID) else {
            throw APIError(.notFound, code: "not_found", message: "no such device", field: "device_id")
        }
        if let tokenUser, tokenUser != device.userID {
            throw APIError(
                .forbidden, code: "forbidden", message: "the device is another user's than the user token's",
                field: "device_id")
        }
        return device
    }

    /// The notification id in the path (404 naming `id` when it is not one).
    static func notificationParameter(_ context: HeraldRequestContext) throws -> UUID {
        guard let id = UUID(uuidString: try pathParameter(context, "id", field: "id")) else {
            throw APIError(.notFound, code: "not_found", message: "no such notification", field: "id")
        }
        return id
    }
}

/// `POST /v1/apps/{app}/notifications/{id}/responses`: what the user answered (Lucid's
/// reflection: text, and energy, mood and focus from 1 to 10).
struct RespondBody: Decodable {
    var deviceID: String?
    var text: String?
    var energy: Int?
    var mood: Int?
    var focus: Int?
    enum CodingKeys: String, CodingKey {
        case deviceID = "device_id"
        case text, energy, mood, focus
    }

    func validated() throws(APIError) -> (deviceID: String, text: String?, energy: Int?, mood: Int?, focus: Int?) {
        guard let deviceID else { throw APIError.missing("device_id") }
        guard !deviceID.isEmpty, deviceID.utf8.count <= 256 else {
            throw APIError.invalid("device_id", "device_id is 1 to 256 bytes")
        }
        if let text, text.isEmpty || text.count > 1000 {
            throw APIError.invalid("text", "text is 1 to 1000 characters")
        }
        for (name, value) in [("energy", energy), ("mood", mood), ("focus", focus)] {
            if let value, !(1...10).contains(value) { throw APIError.invalid(name, "\(name) is 1 to 10") }
        }
        guard text != nil || energy != nil || mood != nil || focus != nil else {
            throw APIError.invalid("text", "a response has text, energy, mood or focus")
        }
        return (deviceID, text, energy, mood, focus)
    }
}

/// A response as the API answers it.
struct ResponseView: Encodable {
    var response: ActionRepository.NotificationResponse
    init(_ response: ActionRepository.NotificationResponse) { self.response = response }
    enum CodingKeys: String, CodingKey {
        case id
        case notificationID = "notification_id"
        case userID = "user_id"
        case deviceID = "device_id"
        case text, energy, mood, focus
        case createdAt = "created_at"
    }
    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(response.id.uuidString.lowercased(), forKey: .id)
        try container.encode(response.notificationID.uuidString.lowercased(), forKey: .notificationID)
        try container.encode(response.userID, forKey: .userID)
        try container.encode(response.deviceID, forKey: .deviceID)
        try container.encode(response.text, forKey: .text)
        try container.encode(response.energy, forKey: .energy)
        try container.encode(response.mood, forKey: .mood)
        try container.encode(response.focus, forKey: .focus)
        try container.encode(HeraldTime.format(response.createdAt), forKey: .createdAt)
    }
}

/// `POST /v1/apps/{app}/notifications/{id}/resolve`.
struct ResolveBody: Decodable {
    var deviceID: String?
    var label: String?
    enum CodingKeys: String, CodingKey {
        case deviceID = "device_id"
        case label
    }
}

/// A resolution as the API answers it.
struct ResolutionView: Encodable {
    var resolution: ActionRepository.Resolution
    init(_ resolution: ActionRepository.Resolution) { self.resolution = resolution }
    enum CodingKeys: String, CodingKey {
        case first
        case deviceID = "device_id"
        case label, cancelled, devices
        case replacementID = "replacement_id"
        case resolvedAt = "resolved_at"
    }
    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(resolution.first, forKey: .first)
        try container.encode(resolution.deviceID, forKey: .deviceID)
        try container.encode(resolution.label, forKey: .label)
        try container.encode(resolution.cancelled, forKey: .cancelled)
        try container.encode(resolution.devices, forKey: .devices)
        try container.encode(resolution.replacementID?.uuidString.lowercased(), forKey: .replacementID)
        try container.encode(HeraldTime.format(resolution.createdAt), forKey: .resolvedAt)
    }
}

/// `POST /v1/apps/{app}/webhooks/replay`.
struct ReplayBody: Decodable {
    var since: String?
}

/// A commit as the device (and the audit) see it.
struct ActionView: Encodable {
    var commit: ActionRepository.ActionCommit
    var replay: Bool

    init(_ commit: ActionRepository.ActionCommit, replay: Bool) {
        self.commit = commit
        self.replay = replay
    }

    enum CodingKeys: String, CodingKey {
        case status
        case deliveryID = "delivery_id"
        case action, result, replay
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(commit.status.rawValue, forKey: .status)
        try container.encode(commit.deliveryID, forKey: .deliveryID)
        try container.encode(commit.action, forKey: .action)
        try container.encode(AuditEntry.result(commit.result), forKey: .result)
        try container.encode(replay, forKey: .replay)
    }

    /// 200 once the backend answered (or failed for good), 202 while queued.
    func response() throws -> Response {
        try JSONResponse.make(self, status: commit.status == .queued ? .accepted : .ok)
    }
}

/// One audit row: who committed what, from which device, in which turn, with what result and latency.
struct AuditEntry: Encodable {
    var commit: ActionRepository.ActionCommit
    init(_ commit: ActionRepository.ActionCommit) { self.commit = commit }

    enum CodingKeys: String, CodingKey {
        case deliveryID = "delivery_id"
        case notificationID = "notification_id"
        case userID = "user_id"
        case deviceID = "device_id"
        case action
        case turnID = "turn_id"
        case text, status, result
        case latencyMilliseconds = "latency_ms"
        case messageID = "message_id"
        case createdAt = "created_at"
        case updatedAt = "updated_at"
    }

    /// The backend's answer as JSON when it is JSON, else as text.
    static func result(_ text: String?) -> JSONValue {
        guard let text else { return .null }
        return (try? JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))) ?? .string(text)
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(commit.deliveryID, forKey: .deliveryID)
        try container.encode(commit.notificationID.uuidString.lowercased(), forKey: .notificationID)
        try container.encode(commit.userID, forKey: .userID)
        try container.encode(commit.deviceID, forKey: .deviceID)
        try container.encode(commit.action, forKey: .action)
        try container.encode(commit.turnID, forKey: .turnID)
        try container.encode(commit.text, forKey: .text)
        try container.encode(commit.status.rawValue, forKey: .status)
        try container.encode(Self.result(commit.result), forKey: .result)
        try container.encode(commit.latencyMilliseconds, forKey: .latencyMilliseconds)
        try container.encode(commit.messageID, forKey: .messageID)
        try container.encode(HeraldTime.format(commit.createdAt), forKey: .createdAt)
        try container.encode(HeraldTime.format(commit.updatedAt), forKey: .updatedAt)
    }
}
