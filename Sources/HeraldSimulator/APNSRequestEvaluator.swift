import Crypto
import Foundation
import HeraldCore
package import NIOCore
package import NIOHPACK

/// Provider-token state of one simulated connection (protocols.md §6).
package struct SimulatorConnectionAuthentication {
    package init() {}
    /// The last JWT accepted on this connection and its `iat`.
    var token: String?
    var issuedAt: Date?
    var changedAt: Date?
    var keyID: String?
    package var isAuthenticated: Bool { token != nil }
}

/// What the simulator answers a request.
package enum SimulatorVerdict {
    case accepted(SimulatorInboxEntry)
    case rejected(status: Int, reason: String, timestamp: Int64?)
    /// Never answered (fault `hang_tokens`).
    case hang
}

/// Apple's validations, in the order the simulator applies them (protocols.md §2–§6, §16).
/// Pure apart from the state it reads; time comes from the configured clock.
package struct APNSRequestEvaluator {
    let configuration: SimulatorConfiguration
    let keys: [String: SimulatorKey]

    package init(configuration: SimulatorConfiguration) {
        self.configuration = configuration
        self.keys = Dictionary(configuration.keys.map { ($0.keyID, $0) }, uniquingKeysWith: { first, _ in first })
    }

    package func evaluate(
        headers: HPACKHeaders, body: ByteBuffer?, authentication: inout SimulatorConnectionAuthentication,
        state: SimulatorState, faults: SimulatorFaults, random: inout SimulatorRandom
    ) -> (verdict: SimulatorVerdict, apnsID: String) {
        var method: String?
        var path: String?
        var authorization: String?
        var pushTypeValue: String?
        var topic: String?
        var priorityValue: String?
        var apnsIDValue: String?
        var expirationValue: String?
        var collapseID: String?
        // Each header APNs reads may appear once; a bit per header spots repeats.
        var seen: UInt16 = 0
        var duplicate = false
        func mark(_ bit: UInt16) {
            if seen & bit != 0 { duplicate = true }
            seen |= bit
        }
        for (name, value, _) in headers {
            switch name {
            case ":method": method = value
            case ":path": path = value
            case "authorization":
                mark(1 << 0)
                authorization = value
            case "apns-push-type":
                mark(1 << 1)
                pushTypeValue = value
            case "apns-topic":
                mark(1 << 2)
                topic = value
            case "apns-priority":
                mark(1 << 3)
                priorityValue = value
            case "apns-id":
                mark(1 << 4)
                apnsIDValue = value
            case "apns-expiration":
                mark(1 << 5)
                expirationValue = value
            case "apns-collapse-id":
                mark(1 << 6)
                collapseID = value
            default: break
            }
        }
        let generatedID = apnsIDValue ?? SimulatorIdentifiers.randomUUIDString(using: &random)
        func reject(_ status: Int, _ reason: String) -> (SimulatorVerdict, String) {
            (.rejected(status: status, reason: reason, timestamp: nil), generatedID)
        }

        guard method == "POST" else { return reject(405, "MethodNotAllowed") }
        guard let path, path.hasPrefix("/3/device/") else { return reject(404, "BadPath") }
        let token = String(path.dropFirst("/3/device/".count))
        guard !token.isEmpty else { return reject(400, "MissingDeviceToken") }
        guard !duplicate else { return reject(400, "DuplicateHeaders") }
        if let apnsIDValue, !SimulatorIdentifiers.isUUID(apnsIDValue) { return reject(400, "BadMessageId") }

        // Provider token.
        let now = configuration.clock.now()
        if let refused = authenticate(authorization, &authentication, state: state) {
            return reject(refused.status, refused.reason)
        }

        // Headers.
        guard let topic, !topic.isEmpty else { return reject(400, "MissingTopic") }
        let pushType = APNSPushType(rawValue: pushTypeValue ?? "alert")
        guard pushType.isKnown else { return reject(400, "InvalidPushType") }
        let suffix = pushType.topicSuffix
        if !suffix.isEmpty && !topic.hasSuffix(suffix) && pushType != .mdm { return reject(400, "BadTopic") }
        let bundleID = suffix.isEmpty ? topic : String(topic.dropLast(topic.hasSuffix(suffix) ? suffix.count : 0))
        if !configuration.bundleIDs.isEmpty && !configuration.bundleIDs.contains(bundleID) {
            return reject(400, "TopicDisallowed")
        }
        var priority = 10
        if let priorityValue {
            guard let value = Int(priorityValue), [1, 5, 10].contains(value) else { return reject(400, "BadPriority") }
            priority = value
        }
        if pushType == .background && priority == 10 { return reject(400, "BadPriority") }
        var expiration: Int?
        if let expirationValue {
            guard let value = Int(expirationValue), value >= 0 else { return reject(400, "BadExpirationDate") }
            expiration = value
        }
        if let collapseID, collapseID.utf8.count > APNSNotification.collapseIDLimit {
            return reject(400, "BadCollapseId")
        }
        guard token.utf8.count % 2 == 0, token.utf8.allSatisfy(\.isHexDigit) else {
            return reject(400, "BadDeviceToken")
        }

        // Payload.
        guard let body, body.readableBytes > 0 else { return reject(400, "PayloadEmpty") }
        if body.readableBytes > pushType.payloadLimit { return reject(413, "PayloadTooLarge") }
        guard body.withUnsafeReadableBytes(JSONSyntax.isObject) else {
            // Apple documents no reason for malformed JSON; this one is the simulator's choice.
            return reject(400, "BadPayload")
        }

        // The token's own state, then injected faults.
        let normalizedToken = token.lowercased()
        if let dead = state.deadEntry(for: normalizedToken) {
            return (.rejected(status: 410, reason: dead.reason, timestamp: dead.timestamp), generatedID)
        }
        if let scripted = state.scripted(for: normalizedToken) {
            return reject(scripted.status, scripted.reason)
        }
        if !faults.hangTokens.isEmpty && faults.hangTokens.contains(normalizedToken) { return (.hang, generatedID) }
        if faults.internalServerErrorRate > 0 || faults.serviceUnavailableRate > 0 || faults.tooManyRequestsRate > 0 {
            let roll = Double.random(in: 0..<1, using: &random)
            if roll < faults.internalServerErrorRate { return reject(500, "InternalServerError") }
            if roll < faults.internalServerErrorRate + faults.serviceUnavailableRate {
                return reject(503, "ServiceUnavailable")
            }
            if roll < faults.internalServerErrorRate + faults.serviceUnavailableRate + faults.tooManyRequestsRate {
                return reject(429, "TooManyRequests")
            }
        }
        let entry = SimulatorInboxEntry(
            deviceToken: normalizedToken, apnsID: generatedID, pushType: pushType.rawValue, topic: topic,
            priority: priority, expiration: expiration, collapseID: collapseID, payload: Data(body.readableBytesView),
            receivedAt: now, replaceKey: collapseID)
        return (.accepted(entry), generatedID)
    }

    /// Checks a request's provider token against the connection's (protocols.md §6): the status
    /// and reason to refuse it with, or nil when it is good (the connection then holds it).
    func authenticate(
        _ authorization: String?, _ authentication: inout SimulatorConnectionAuthentication, state: SimulatorState
    ) -> (status: Int, reason: String)? {
        let now = configuration.clock.now()
        guard let authorization else { return (403, "MissingProviderToken") }
        guard authorization.lowercased().hasPrefix("bearer ") else { return (403, "InvalidProviderToken") }
        let jwt = String(authorization.dropFirst("bearer ".count))
        if jwt == authentication.token, let issuedAt = authentication.issuedAt {
            if now.timeIntervalSince(issuedAt) > configuration.tokenMaximumAge { return (403, "ExpiredProviderToken") }
            return nil
        }
        switch verify(jwt: jwt, state: state) {
        case .failure(let failure):
            return (403, failure.reason)
        case .success(let (keyID, issuedAt)):
            if now.timeIntervalSince(issuedAt) > configuration.tokenMaximumAge { return (403, "ExpiredProviderToken") }
            if let boundKey = authentication.keyID, boundKey != keyID { return (403, "UnrelatedKeyIdInToken") }
            if let changedAt = authentication.changedAt,
                now.timeIntervalSince(changedAt) < configuration.tokenUpdateInterval
            {
                return (429, "TooManyProviderTokenUpdates")
            }
            if authentication.token != nil { state.count { $0.tokenChanges += 1 } }
            authentication.token = jwt
            authentication.issuedAt = issuedAt
            authentication.changedAt = now
            authentication.keyID = keyID
            return nil
        }
    }

    /// Checks an ES256 provider token: header, claims, signature. Returns the key id and `iat`.
    private func verify(jwt: String, state: SimulatorState) -> Result<(String, Date), JWTFailure> {
        let parts = jwt.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3,
            let headerData = Base64URL.decode(parts[0]),
            let claimsData = Base64URL.decode(parts[1]),
            let signatureData = Base64URL.decode(parts[2]),
            let header = (try? JSONSerialization.jsonObject(with: headerData)) as? [String: Any],
            let claims = (try? JSONSerialization.jsonObject(with: claimsData)) as? [String: Any]
        else { return .failure(JWTFailure(reason: "InvalidProviderToken")) }
        guard header["alg"] as? String == "ES256", let keyID = header["kid"] as? String, let key = keys[keyID] else {
            return .failure(JWTFailure(reason: "InvalidProviderToken"))
        }
        guard claims["iss"] as? String == key.teamID else {
            return .failure(JWTFailure(reason: "InvalidProviderToken"))
        }
        // APNSwift sends `iat` as a string; accept both.
        let issuedAtSeconds: Double
        if let number = claims["iat"] as? NSNumber {
            issuedAtSeconds = number.doubleValue
        } else if let text = claims["iat"] as? String, let number = Double(text) {
            issuedAtSeconds = number
        } else {
            return .failure(JWTFailure(reason: "InvalidProviderToken"))
        }
        state.count { $0.signatureVerifications += 1 }
        let signingInput = Data(jwt.utf8.prefix(parts[0].utf8.count + 1 + parts[1].utf8.count))
        let signature: P256.Signing.ECDSASignature?
        if signatureData.count == 64 {
            signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureData)
        } else {
            signature = try? P256.Signing.ECDSASignature(derRepresentation: signatureData)
        }
        guard let signature, key.publicKey.isValidSignature(signature, for: signingInput) else {
            return .failure(JWTFailure(reason: "InvalidProviderToken"))
        }
        return .success((keyID, Date(timeIntervalSince1970: issuedAtSeconds)))
    }
}

/// Why a provider token was refused: the APNs reason to answer.
struct JWTFailure: Error {
    var reason: String
}
