import Foundation
package import NIOCore
package import NIOHPACK

/// APNs broadcast channels (iOS 18; protocols.md §9): the channel management API
/// (`/1/apps/<bundle>/channels`, `…/all-channels`) and broadcast sends
/// (`POST /4/broadcasts/apps/<bundle>`), with provider-token auth like pushes. A broadcast's
/// checks run in the order APNSwift's test server applies Apple's: channel id, push type,
/// expiration, priority, channel, payload, size. An accepted broadcast is applied to every
/// simulated activity listening on the channel.
package struct ChannelRequestEvaluator {
    let apns: APNSRequestEvaluator

    package init(apns: APNSRequestEvaluator) {
        self.apns = apns
    }

    /// What the simulator answers.
    package struct Answer {
        package var status: Int
        package var headers: [(String, String)]
        package var body: String?
        package var reason: String?
    }

    package static func handles(path: String) -> Bool { path.hasPrefix("/1/apps/") || path.hasPrefix("/4/broadcasts/") }

    /// Apple's limit on a broadcast's payload (5 KB, per APNSwift's test server).
    static let broadcastPayloadLimit = 5_120

    package func evaluate(
        headers: HPACKHeaders, body: ByteBuffer?, authentication: inout SimulatorConnectionAuthentication,
        state: SimulatorState, random: inout SimulatorRandom
    ) -> Answer {
        let method = headers.first(name: ":method") ?? ""
        let path = headers.first(name: ":path") ?? ""
        let requestID = headers.first(name: "apns-request-id") ?? SimulatorIdentifiers.randomUUIDString(using: &random)
        func answer(_ status: Int, _ reason: String? = nil, headers extra: [(String, String)] = [], body: String? = nil)
            -> Answer
        {
            Answer(
                status: status, headers: [("apns-request-id", requestID)] + extra,
                body: reason.map { #"{"reason":"\#($0)"}"# } ?? body, reason: reason)
        }
        if let refused = apns.authenticate(headers.first(name: "authorization"), &authentication, state: state) {
            return answer(refused.status, refused.reason)
        }
        let channelID = headers.first(name: "apns-channel-id")
        let parts = path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        // "/4/broadcasts/apps/<bundle>"
        if parts.count == 5, parts[1] == "4", parts[2] == "broadcasts", parts[3] == "apps" {
            let bundleID = parts[4]
            guard method == "POST" else { return answer(405, "MethodNotAllowed") }
            guard allowed(bundleID) else { return answer(403, "TopicMismatch") }
            guard let channelID, !channelID.isEmpty else { return answer(400, "MissingChannelId") }
            guard let pushType = headers.first(name: "apns-push-type") else { return answer(400, "MissingPushType") }
            guard pushType == "liveactivity" else { return answer(400, "InvalidPushType") }
            let expirationValue = headers.first(name: "apns-expiration")
            var expiration: Int?
            if let expirationValue {
                guard let value = Int(expirationValue), value >= 0 else { return answer(400, "BadExpirationDate") }
                expiration = value
            }
            var priority = 10
            if let value = headers.first(name: "apns-priority") {
                guard let number = Int(value), [1, 5, 10].contains(number) else { return answer(400, "BadPriority") }
                priority = number
            }
            guard let policy = state.activities.channelPolicy(bundleID: bundleID, id: channelID) else {
                return answer(400, "ChannelNotRegistered")
            }
            if policy == 0 && expiration != 0 { return answer(400, "BadExpirationDate") }
            guard let body, body.readableBytes > 0 else { return answer(400, "PayloadEmpty") }
            guard body.readableBytes <= Self.broadcastPayloadLimit else { return answer(413, "PayloadTooLarge") }
            state.activities.publish(channel: channelID, priority: priority, payload: Data(body.readableBytesView))
            return answer(200)
        }
        // "/1/apps/<bundle>/channels" or "/1/apps/<bundle>/all-channels"
        guard parts.count == 5, parts[1] == "1", parts[2] == "apps" else { return answer(404, "BadPath") }
        let bundleID = parts[3]
        guard allowed(bundleID) else { return answer(403, "TopicMismatch") }
        switch (method, parts[4]) {
        case ("GET", "all-channels"):
            let ids = state.activities.channels(bundleID: bundleID).keys.sorted()
            let list = ids.map { #""\#($0)""# }.joined(separator: ",")
            return answer(200, body: #"{"channels":[\#(list)]}"#)
        case ("POST", "channels"):
            guard let body,
                let object = (try? JSONSerialization.jsonObject(with: Data(body.readableBytesView))) as? [String: Any],
                let policy = (object["message-storage-policy"] as? NSNumber)?.intValue, policy == 0 || policy == 1,
                object["push-type"] as? String == "LiveActivity"
            else { return answer(400, "BadRequestPayload") }
            guard let id = state.activities.createChannel(bundleID: bundleID, policy: policy) else {
                return answer(400, "CannotCreateChannelConfig")
            }
            return answer(201, headers: [("apns-channel-id", id)])
        case ("GET", "channels"):
            guard let channelID, !channelID.isEmpty else { return answer(400, "MissingChannelId") }
            guard let policy = state.activities.channelPolicy(bundleID: bundleID, id: channelID) else {
                return answer(400, "ChannelNotRegistered")
            }
            return answer(200, body: #"{"message-storage-policy":\#(policy),"push-type":"LiveActivity"}"#)
        case ("DELETE", "channels"):
            guard let channelID, !channelID.isEmpty else { return answer(400, "MissingChannelId") }
            guard state.activities.deleteChannel(bundleID: bundleID, id: channelID) else {
                return answer(400, "ChannelNotRegistered")
            }
            return answer(204)
        case (_, "channels"), (_, "all-channels"):
            return answer(405, "MethodNotAllowed")
        default:
            return answer(404, "BadPath")
        }
    }

    private func allowed(_ bundleID: String) -> Bool {
        apns.configuration.bundleIDs.isEmpty || apns.configuration.bundleIDs.contains(bundleID)
    }
}
