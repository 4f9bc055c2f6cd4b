import Crypto
import Foundation
import HeraldCore
import NIOCore
import NIOHPACK
import _CryptoExtras

/// What the simulator answers an FCM or OAuth2 request: status, extra headers, JSON body.
struct FCMAnswer {
    var status: Int
    var headers: [(String, String)] = []
    var body: String
    var hang = false
    /// For a refused `messages:send`: the FCM `errorCode`, else Google's status (counted in /counters).
    var reason: String? = nil
}

/// Google's side of FCM HTTP v1 (protocols.md §10–§12, §16): the OAuth2 token endpoint, which
/// verifies the RS256 assertion against the service account's public key, and
/// `messages:send` with the bearer check, one target, string-only `data`, reserved keys, TTL
/// range, size limits, unregistered tokens, faults, and Google's error JSON with `FcmError`.
struct FCMRequestEvaluator {
    let configuration: SimulatorConfiguration
    let accounts: [String: SimulatorFCMAccount]

    init(configuration: SimulatorConfiguration) {
        self.configuration = configuration
        accounts = Dictionary(
            configuration.fcmAccounts.map { ($0.clientEmail, $0) }, uniquingKeysWith: { first, _ in first })
    }

    static func handles(path: String) -> Bool { path == "/token" || path.hasPrefix("/v1/projects/") }

    func evaluate(
        headers: HPACKHeaders, body: ByteBuffer?, state: SimulatorState, faults: SimulatorFaults,
        random: inout SimulatorRandom
    ) -> FCMAnswer {
        let path = headers.first(name: ":path") ?? ""
        guard headers.first(name: ":method") == "POST" else {
            return Self.error(405, "METHOD_NOT_ALLOWED", "POST only")
        }
        let bytes = body.map { Data($0.readableBytesView) } ?? Data()
        if path == "/token" { return token(bytes, state: state, random: &random) }
        return send(path: path, headers: headers, body: bytes, state: state, faults: faults, random: &random)
    }

    // MARK: OAuth2

    private func token(_ body: Data, state: SimulatorState, random: inout SimulatorRandom) -> FCMAnswer {
        var form: [String: String] = [:]
        for pair in String(decoding: body, as: UTF8.self).split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1).map {
                String($0).removingPercentEncoding ?? String($0)
            }
            if parts.count == 2 { form[parts[0]] = parts[1] }
        }
        func oauthError(_ code: String, _ description: String) -> FCMAnswer {
            FCMAnswer(status: 400, body: #"{"error":"\#(code)","error_description":"\#(description)"}"#)
        }
        guard form["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer" else {
            return oauthError("unsupported_grant_type", "Invalid grant_type")
        }
        guard let assertion = form["assertion"] else {
            return oauthError("invalid_request", "Missing required parameter: assertion")
        }
        let parts = assertion.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerData = Base64URL.decode(parts[0]),
            let claimsData = Base64URL.decode(parts[1]),
            let signature = Base64URL.decode(parts[2]),
            let header = (try? JSONSerialization.jsonObject(with: headerData)) as? [String: Any],
            let claims = (try? JSONSerialization.jsonObject(with: claimsData)) as? [String: Any]
        else { return oauthError("invalid_grant", "Invalid JWT") }
        guard header["alg"] as? String == "RS256" else {
            return oauthError("invalid_grant", "Invalid JWT: alg must be RS256")
        }
        guard let issuer = claims["iss"] as? String, let account = accounts[issuer] else {
            return oauthError("invalid_grant", "Invalid JWT Signature.")
        }
        let input = Data("\(parts[0]).\(parts[1])".utf8)
        guard
            account.publicKey.isValidSignature(
                _RSA.Signing.RSASignature(rawRepresentation: signature), for: SHA256.hash(data: input),
                padding: .insecurePKCS1v1_5)
        else { return oauthError("invalid_grant", "Invalid JWT Signature.") }
        let now = configuration.clock.now().timeIntervalSince1970
        guard let issuedAt = (claims["iat"] as? NSNumber)?.doubleValue,
            let expires = (claims["exp"] as? NSNumber)?.doubleValue,
            expires > now, expires - issuedAt <= 3600, issuedAt <= now + 300
        else {
            return oauthError(
                "invalid_grant",
                "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe.")
        }
        guard
            (claims["scope"] as? String)?.split(separator: " ").contains(
                "https://www.googleapis.com/auth/firebase.messaging") == true
        else { return oauthError("invalid_scope", "Invalid OAuth scope or ID token audience provided.") }
        let lifetime = configuration.fcmAccessTokenLifetime
        let token = state.issueFCMAccessToken(
            project: account.projectID, lifetime: lifetime, now: configuration.clock.now(), random: &random)
        return FCMAnswer(
            status: 200, body: #"{"access_token":"\#(token)","expires_in":\#(Int(lifetime)),"token_type":"Bearer"}"#)
    }

    // MARK: messages:send

    private func send(
        path: String, headers: HPACKHeaders, body: Data, state: SimulatorState, faults: SimulatorFaults,
        random: inout SimulatorRandom
    ) -> FCMAnswer {
        state.count { $0.fcmRequests += 1 }
        let pieces = path.split(separator: "/")
        guard pieces.count == 4, pieces[0] == "v1", pieces[1] == "projects", pieces[3] == "messages:send" else {
            return Self.error(404, "NOT_FOUND", "Requested entity was not found.")
        }
        let project = String(pieces[2])
        let authorization = headers.first(name: "authorization") ?? ""
        guard authorization.hasPrefix("Bearer "),
            let tokenProject = state.fcmProject(
                forAccessToken: String(authorization.dropFirst(7)), now: configuration.clock.now())
        else {
            return Self.error(
                401, "UNAUTHENTICATED",
                "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential."
            )
        }
        guard tokenProject == project else {
            return Self.error(
                403, "PERMISSION_DENIED",
                "Permission 'cloudmessaging.messages.create' denied on resource '//cloudresourcemanager.googleapis.com/projects/\(project)'"
            )
        }
        guard let root = (try? JSONSerialization.jsonObject(with: body)) as? [String: Any],
            let message = root["message"] as? [String: Any]
        else { return Self.invalid("Invalid JSON payload received.") }
        let targets = ["token", "topic", "condition", "fid"].filter { message[$0] != nil }
        guard targets.count == 1 else {
            return Self.invalid("Exactly one of token, topic, condition or fid must be set.")
        }
        let isTopic = message["topic"] != nil || message["condition"] != nil
        if let data = message["data"] {
            guard let object = data as? [String: Any] else { return Self.invalid("Invalid value at 'message.data'") }
            for (index, (key, value)) in object.sorted(by: { $0.key < $1.key }).enumerated() {
                guard value is String else {
                    return Self.invalid(#"Invalid value at 'message.data[\#(index)].value' (TYPE_STRING)"#)
                }
                let lowered = key.lowercased()
                if lowered == "from" || lowered == "message_type" || lowered.hasPrefix("google")
                    || lowered.hasPrefix("gcm")
                {
                    return Self.invalid("Invalid data payload key: \(key)")
                }
            }
        }
        var priority = 10
        var collapseKey: String?
        /// What Android replaces a shown notification by (`android.notification.tag`).
        var tag: String?
        if let android = message["android"] as? [String: Any] {
            if let ttl = android["ttl"] {
                guard let text = ttl as? String, text.hasSuffix("s"), let seconds = Double(text.dropLast()),
                    (0...2_419_200).contains(seconds)
                else {
                    return Self.invalid(
                        "Invalid value at 'message.android.ttl' (type.googleapis.com/google.protobuf.Duration)")
                }
            }
            if let value = android["priority"] as? String {
                guard value == "HIGH" || value == "NORMAL" else {
                    return Self.invalid("Invalid value at 'message.android.priority'")
                }
                priority = value == "HIGH" ? 10 : 5
            }
            collapseKey = android["collapse_key"] as? String
            tag = (android["notification"] as? [String: Any])?["tag"] as? String
        }
        let limit = isTopic ? 2048 : 4096
        guard body.count <= limit + 64 else { return Self.invalid("Message is too big") }
        guard let token = message["token"] as? String else {
            return FCMAnswer(
                status: 200,
                body: #"{"name":"projects/\#(project)/messages/\#(UInt64.random(in: 1...UInt64.max, using: &random))"}"#
            )
        }
        let key = token.lowercased()
        if faults.hangTokens.contains(key) { return FCMAnswer(status: 0, body: "", hang: true) }
        if let (status, reason, retryAfter) = state.scripted(for: key) {
            return Self.error(
                status, Self.googleStatus(for: status), "Scripted answer", errorCode: reason,
                retryAfter: retryAfter ?? (status == 429 || status == 503 ? "1" : nil))
        }
        if state.deadEntry(for: key) != nil {
            return Self.error(404, "NOT_FOUND", "Requested entity was not found.", errorCode: "UNREGISTERED")
        }
        if configuration.fcmDeviceRateLimit > 0,
            let wait = state.takeFCMDeviceSlot(
                key, limit: configuration.fcmDeviceRateLimit, now: configuration.clock.now())
        {
            return Self.error(
                429, "RESOURCE_EXHAUSTED", "Quota exceeded for the device.", errorCode: "QUOTA_EXCEEDED",
                retryAfter: String(Int(wait.rounded(.up))), quotaSubject: "device")
        }
        let roll = Double(random.next() % 1_000_000) / 1_000_000
        if roll < faults.internalServerErrorRate {
            return Self.error(500, "INTERNAL", "Internal error encountered.", errorCode: "INTERNAL")
        }
        if roll < faults.internalServerErrorRate + faults.serviceUnavailableRate {
            return Self.error(
                503, "UNAVAILABLE", "The service is currently unavailable.", errorCode: "UNAVAILABLE", retryAfter: "1")
        }
        if roll < faults.internalServerErrorRate + faults.serviceUnavailableRate + faults.tooManyRequestsRate {
            return Self.error(
                429, "RESOURCE_EXHAUSTED", "Quota exceeded.", errorCode: "QUOTA_EXCEEDED", retryAfter: "1")
        }
        let id = random.next() >> 1
        state.accept(
            SimulatorInboxEntry(
                deviceToken: key, apnsID: "projects/\(project)/messages/\(id)", pushType: "fcm", topic: project,
                priority: priority, expiration: nil, collapseID: collapseKey, payload: body,
                receivedAt: configuration.clock.now(), replaceKey: tag))
        return FCMAnswer(status: 200, body: #"{"name":"projects/\#(project)/messages/\#(id)"}"#)
    }

    static func googleStatus(for status: Int) -> String {
        switch status {
        case 400: return "INVALID_ARGUMENT"
        case 401: return "UNAUTHENTICATED"
        case 403: return "PERMISSION_DENIED"
        case 404: return "NOT_FOUND"
        case 429: return "RESOURCE_EXHAUSTED"
        case 503: return "UNAVAILABLE"
        default: return "INTERNAL"
        }
    }

    static func invalid(_ message: String) -> FCMAnswer {
        error(400, "INVALID_ARGUMENT", message, errorCode: "INVALID_ARGUMENT")
    }

    /// Google's error JSON (protocols.md §12).
    static func error(
        _ status: Int, _ googleStatus: String, _ message: String, errorCode: String? = nil, retryAfter: String? = nil,
        quotaSubject: String? = nil
    ) -> FCMAnswer {
        var error: [String: Any] = ["code": status, "message": message, "status": googleStatus]
        var details: [[String: Any]] = []
        if let errorCode {
            details.append(["@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": errorCode])
        }
        if let quotaSubject {
            details.append([
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [
                    ["subject": quotaSubject, "description": "Message rate exceeded for this \(quotaSubject)."]
                ],
            ])
        }
        if !details.isEmpty { error["details"] = details }
        let json = (try? JSONSerialization.data(withJSONObject: ["error": error], options: [.sortedKeys])) ?? Data()
        var headers: [(String, String)] = []
        if let retryAfter { headers.append(("retry-after", retryAfter)) }
        return FCMAnswer(
            status: status, headers: headers, body: String(decoding: json, as: UTF8.self),
            reason: errorCode ?? googleStatus)
    }
}
