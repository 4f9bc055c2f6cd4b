package import HeraldCore

/// An APNs `reason` string (protocols.md §5.1), kept as sent so unknown reasons survive.
///
/// Reasons Herald makes up for failures APNs never answered (a deadline, a lost connection,
/// a refused configuration) are in the same set so every result has exactly one reason.
public struct APNSReason: Sendable, Hashable, RawRepresentable, CustomStringConvertible, Codable {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(_ rawValue: String) { self.rawValue = rawValue }

    public static let badCollapseID = APNSReason("BadCollapseId")
    public static let badDeviceToken = APNSReason("BadDeviceToken")
    public static let badExpirationDate = APNSReason("BadExpirationDate")
    public static let badMessageID = APNSReason("BadMessageId")
    public static let badPriority = APNSReason("BadPriority")
    public static let badTopic = APNSReason("BadTopic")
    public static let deviceTokenNotForTopic = APNSReason("DeviceTokenNotForTopic")
    public static let duplicateHeaders = APNSReason("DuplicateHeaders")
    public static let idleTimeout = APNSReason("IdleTimeout")
    public static let invalidPushType = APNSReason("InvalidPushType")
    public static let missingDeviceToken = APNSReason("MissingDeviceToken")
    public static let missingTopic = APNSReason("MissingTopic")
    public static let payloadEmpty = APNSReason("PayloadEmpty")
    public static let topicDisallowed = APNSReason("TopicDisallowed")
    public static let badCertificate = APNSReason("BadCertificate")
    public static let badCertificateEnvironment = APNSReason("BadCertificateEnvironment")
    public static let expiredProviderToken = APNSReason("ExpiredProviderToken")
    public static let forbidden = APNSReason("Forbidden")
    public static let invalidProviderToken = APNSReason("InvalidProviderToken")
    public static let missingProviderToken = APNSReason("MissingProviderToken")
    public static let unrelatedKeyIDInToken = APNSReason("UnrelatedKeyIdInToken")
    public static let badEnvironmentKeyIDInToken = APNSReason("BadEnvironmentKeyIdInToken")
    public static let badEnvironmentKeyInToken = APNSReason("BadEnvironmentKeyInToken")
    public static let badPath = APNSReason("BadPath")
    public static let methodNotAllowed = APNSReason("MethodNotAllowed")
    public static let expiredToken = APNSReason("ExpiredToken")
    public static let unregistered = APNSReason("Unregistered")
    public static let payloadTooLarge = APNSReason("PayloadTooLarge")
    public static let tooManyProviderTokenUpdates = APNSReason("TooManyProviderTokenUpdates")
    public static let tooManyRequests = APNSReason("TooManyRequests")
    public static let internalServerError = APNSReason("InternalServerError")
    public static let serviceUnavailable = APNSReason("ServiceUnavailable")
    public static let shutdown = APNSReason("Shutdown")

    // Herald's own reasons: the request got no answer from APNs.
    /// The request's deadline passed without an answer.
    public static let timeout = APNSReason("Timeout")
    /// No connection could be made, or connections kept dropping, until the resend budget ran out.
    public static let connectionFailed = APNSReason("ConnectionFailed")
    /// The credential was disabled by an earlier configuration error; nothing was sent.
    public static let credentialDisabled = APNSReason("CredentialDisabled")
    /// The client was shut down before an answer came.
    public static let clientShutdown = APNSReason("ClientShutdown")
    /// The notification broke an APNs rule and was refused before sending.
    public static let invalidNotification = APNSReason("InvalidNotification")

    /// Every reason in Apple's table with the HTTP status Apple answers it with.
    /// Whether this configuration error refuses the app's credential or topic as a whole. A topic
    /// error for a push type with a topic of its own (`.voip`, `.complication`, MDM …) is about
    /// that push type only: the app's other pushes still go.
    package func refusesCredential(pushType: APNSPushType) -> Bool {
        guard self == .badTopic || self == .topicDisallowed else { return true }
        return pushType.topicSuffix.isEmpty && pushType != .mdm
    }

    public static let documented: [(status: Int, reason: APNSReason)] = [
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

    public var description: String { rawValue }
}

/// What a sender must do about an answer: exactly one for every status and reason.
public enum APNSDisposition: String, Sendable, Hashable, Codable {
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
    public init(status: Int, reason: APNSReason?) {
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
    public var isRetryable: Bool {
        switch self {
        case .retryTokenLater, .retryWithBackoff, .resendOnNewConnection: true
        case .delivered, .tokenDead, .configurationError, .badRequest: false
        }
    }
}
