package import HeraldCore

/// An APNs `reason` string (protocols.md §5.1), kept as sent so unknown reasons survive.
///
/// Reasons Herald makes up for failures APNs never answered (a deadline, a lost connection,
/// a refused configuration) are in the same set so every result has exactly one reason.
package struct APNSReason: Sendable, Hashable, RawRepresentable, CustomStringConvertible, Codable {
    package var rawValue: String
    package init(rawValue: String) { self.rawValue = rawValue }
    package init(_ rawValue: String) { self.rawValue = rawValue }

    package static let badCollapseID = APNSReason("BadCollapseId")
    package static let badDeviceToken = APNSReason("BadDeviceToken")
    package static let badExpirationDate = APNSReason("BadExpirationDate")
    package static let badMessageID = APNSReason("BadMessageId")
    package static let badPriority = APNSReason("BadPriority")
    package static let badTopic = APNSReason("BadTopic")
    package static let deviceTokenNotForTopic = APNSReason("DeviceTokenNotForTopic")
    package static let duplicateHeaders = APNSReason("DuplicateHeaders")
    package static let idleTimeout = APNSReason("IdleTimeout")
    package static let invalidPushType = APNSReason("InvalidPushType")
    package static let missingDeviceToken = APNSReason("MissingDeviceToken")
    package static let missingTopic = APNSReason("MissingTopic")
    package static let payloadEmpty = APNSReason("PayloadEmpty")
    package static let topicDisallowed = APNSReason("TopicDisallowed")
    package static let badCertificate = APNSReason("BadCertificate")
    package static let badCertificateEnvironment = APNSReason("BadCertificateEnvironment")
    package static let expiredProviderToken = APNSReason("ExpiredProviderToken")
    package static let forbidden = APNSReason("Forbidden")
    package static let invalidProviderToken = APNSReason("InvalidProviderToken")
    package static let missingProviderToken = APNSReason("MissingProviderToken")
    package static let unrelatedKeyIDInToken = APNSReason("UnrelatedKeyIdInToken")
    package static let badEnvironmentKeyIDInToken = APNSReason("BadEnvironmentKeyIdInToken")
    package static let badEnvironmentKeyInToken = APNSReason("BadEnvironmentKeyInToken")
    package static let badPath = APNSReason("BadPath")
    package static let methodNotAllowed = APNSReason("MethodNotAllowed")
    package static let expiredToken = APNSReason("ExpiredToken")
    package static let unregistered = APNSReason("Unregistered")
    package static let payloadTooLarge = APNSReason("PayloadTooLarge")
    package static let tooManyProviderTokenUpdates = APNSReason("TooManyProviderTokenUpdates")
    package static let tooManyRequests = APNSReason("TooManyRequests")
    package static let internalServerError = APNSReason("InternalServerError")
    package static let serviceUnavailable = APNSReason("ServiceUnavailable")
    package static let shutdown = APNSReason("Shutdown")

    // Herald's own reasons: the request got no answer from APNs.
    /// The request's deadline passed without an answer.
    package static let timeout = APNSReason("Timeout")
    /// No connection could be made, or connections kept dropping, until the resend budget ran out.
    package static let connectionFailed = APNSReason("ConnectionFailed")
    /// The credential was disabled by an earlier configuration error; nothing was sent.
    package static let credentialDisabled = APNSReason("CredentialDisabled")
    /// The client was shut down before an answer came.
    package static let clientShutdown = APNSReason("ClientShutdown")
    /// The notification broke an APNs rule and was refused before sending.
    package static let invalidNotification = APNSReason("InvalidNotification")

    /// Every reason in Apple's table with the HTTP status Apple answers it with.
    /// Whether this configuration error refuses the app's credential or topic as a whole. A topic
    /// error for a push type with a topic of its own (`.voip`, `.complication`, MDM …) is about
    /// that push type only: the app's other pushes still go.
    package func refusesCredential(pushType: APNSPushType) -> Bool {
        guard self == .badTopic || self == .topicDisallowed else { return true }
        return pushType.topicSuffix.isEmpty && pushType != .mdm
    }

    package static let documented: [(status: Int, reason: APNSReason)] = [
        (400, .badCollapseID), (400, .badDeviceToken), (400, .badExpirationDate), (400, .badMessageID),
        (400, .badPriority), (400, .badTopic), (400, .deviceTokenNotForTopic), (400, .duplicateHeaders),
        (400, .idleTimeout), (400, .invalidPushType), (400, .missingDeviceToken), (400, .missingTopic),
        (400, .payloadEmpty), (400, .topicDisallowed), (403, .badCertificate), (403, .badCertificateEnvironment),
        (403, .expiredProviderToken), (403, .forbidden), (403, .invalidProviderToken), (403, .missingProviderToken),
        (403, .unrelatedKeyIDInToken), (403, .badEnvironmentKeyIDInToken), (404, .badPath),
        (405, .methodNotAllowed), (410, .expiredToken), (410, .unregistered), (413, .payloadTooLarge),
        (429, .tooManyProviderTokenUpdates), (429, .tooManyRequests), (500, .internalServerError),
        (503, .serviceUnavailable), (503, .shutdown),
    ]

    package var description: String { rawValue }
}

/// What a sender must do about an answer: exactly one for every status and reason.
package enum APNSDisposition: String, Sendable, Hashable, Codable {
    /// 200: APNs accepted the notification.
    case delivered
    /// 429 `TooManyRequests`: too many pushes to this one token; retry it later.
    case retryTokenLater
    /// 5xx: retry with exponential backoff and jitter.
    case retryWithBackoff
    /// The connection is done for (`Shutdown`, `IdleTimeout`, `ExpiredProviderToken`…): resend on a new one.
    case resendOnNewConnection
    /// The token will never work again (410, `BadDeviceToken`, `DeviceTokenNotForTopic`): mark the device inactive.
    case tokenDead
    /// The credential or topic is wrong: stop sending with this credential and say so loudly.
    case configurationError
    /// The request itself is wrong: fix it; resending it as is cannot succeed.
    case badRequest

    /// Classifies an answer. Unknown reasons fall back on their status code.
    package init(status: Int, reason: APNSReason?) {
        if status == 200 {
            self = .delivered
            return
        }
        switch reason {
        case .tooManyRequests?: self = .retryTokenLater
        case .internalServerError?, .serviceUnavailable?: self = .retryWithBackoff
        case .shutdown?, .idleTimeout?, .expiredProviderToken?, .tooManyProviderTokenUpdates?,
            .unrelatedKeyIDInToken?:
            self = .resendOnNewConnection
        case .unregistered?, .expiredToken?, .badDeviceToken?, .deviceTokenNotForTopic?: self = .tokenDead
        case .invalidProviderToken?, .missingProviderToken?, .badTopic?, .topicDisallowed?, .missingTopic?,
            .badCertificate?, .badCertificateEnvironment?, .badEnvironmentKeyIDInToken?,
            .badEnvironmentKeyInToken?, .credentialDisabled?:
            self = .configurationError
        case .timeout?, .connectionFailed?: self = .retryWithBackoff
        default:
            switch status {
            case 410: self = .tokenDead
            case 429: self = .retryTokenLater
            case 500...599: self = .retryWithBackoff
            default: self = .badRequest
            }
        }
    }

    /// Whether the same notification may be sent again.
    package var isRetryable: Bool {
        switch self {
        case .retryTokenLater, .retryWithBackoff, .resendOnNewConnection: true
        case .delivered, .tokenDead, .configurationError, .badRequest: false
        }
    }
}
