import Foundation
public import HeraldPayload

/// How a quick action's commit ended for now, and the toast to show.
public enum ActionCommitResult: Sendable, Equatable {
    /// The app's backend took it; `result` is what it answered (through Herald).
    case committed(result: JSONValue?)
    /// Herald has it and is still trying the backend (it will get there; the audit shows it).
    case queuedByHerald
    /// No network now: it waits in the outbox and commits when the device is back online.
    case waitingForNetwork
    /// Refused for good: the token expired or was forged (401), the card was resolved on
    /// another device (409), the backend aborted; `message` says which.
    case refused(status: Int, message: String)
    /// The payload has no token for this action (not a Herald card, or the type has no such action).
    case notHerald

    /// What a toast says.
    public var toast: ActionToast {
        switch self {
        case .committed: ActionToast(text: "Done", style: .success)
        case .queuedByHerald: ActionToast(text: "Sent — your answer is on its way", style: .pending)
        case .waitingForNetwork: ActionToast(text: "Queued — will commit on reconnect", style: .pending)
        case .refused(409, let message):
            ActionToast(text: message.isEmpty ? "Already handled on another device" : message, style: .info)
        case .refused: ActionToast(text: "Could not be done — open the app to retry", style: .failure)
        case .notHerald: ActionToast(text: "", style: .info)
        }
    }
}

/// A short message after a quick action, for the app's UI.
public struct ActionToast: Sendable, Equatable {
    public enum Style: String, Sendable { case success, pending, info, failure }
    public var text: String
    public var style: Style
}

extension HeraldClient {
    /// Commits a quick action chosen on a notification (lock screen, watch, Mac) without opening
    /// the app: its signed single-use token from the payload goes to `POST …/actions` through the
    /// outbox, sent by the background uploader when the client has one (the upload finishes even
    /// if the system suspends the app right after). Idempotent: the token is the capability and Herald answers a replay with the
    /// first result, so a retry after a lost answer never commits twice. Also reports the open
    /// with that action.
    public func commitAction(appData: [String: JSONValue], action: String, turnID: String? = nil, text: String? = nil)
        async -> ActionCommitResult
    {
        guard let stamp = HeraldStamp(appData: appData), let token = stamp.actionTokens?[action] else {
            return .notHerald
        }
        var body: [String: JSONValue] = ["token": .string(token), "device_id": .string(deviceID)]
        if let turnID { body["turn_id"] = .string(turnID) }
        if let text { body["text"] = .string(text) }
        let request = HTTPRequestSpec(
            method: "POST", path: "/v1/apps/\(Self.escaped(configuration.appID))/actions",
            headers: ["Content-Type": "application/json"],
            body: try? JSONEncoder().encode(JSONValue.object(body)))
        let box = OutcomeBox()
        let id = await outbox.enqueue(
            kind: "action", request: request, userID: userID, retryNotFound: true, background: true
        ) { outcome in
            await box.set(outcome)
        }
        await outbox.drain()
        _ = await reportOpened(appData: appData, action: action)
        guard let outcome = await box.outcome else {
            return await outbox.pending.contains { $0.id == id } ? .waitingForNetwork : .queuedByHerald
        }
        switch outcome {
        case .delivered(_, let data):
            let answer = (try? JSONDecoder().decode(JSONValue.self, from: data))?.objectValue ?? [:]
            switch answer["status"]?.stringValue {
            case "committed": return .committed(result: answer["result"])
            case "queued": return .queuedByHerald
            default: return .refused(status: 200, message: "the backend did not take it")
            }
        case .dropped(let status, let reason):
            let message = (try? JSONDecoder().decode(JSONValue.self, from: Data(reason.utf8)))?.objectValue?["error"]?
                .objectValue?["message"]?
                .stringValue
            return .refused(status: status ?? 0, message: message ?? reason)
        }
    }
}

/// Where an outbox callback leaves its outcome for the caller that waits on the drain.
actor OutcomeBox {
    var outcome: Outbox.Outcome?
    func set(_ outcome: Outbox.Outcome) { self.outcome = outcome }
}
