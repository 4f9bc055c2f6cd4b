package import Foundation

/// One notification for one device token, ready for the wire: the headers APNs reads and the
/// encoded payload. Built once per device; validated before anything is sent.
package struct APNSNotification: Sendable, Hashable {
    /// The device token as lowercase hex of the raw token bytes.
    package var deviceToken: String
    package var pushType: APNSPushType
    /// The app's bundle id; the push type's suffix is added for `apns-topic`.
    package var bundleID: String
    package var priority: APNSPriority
    /// UNIX seconds; `0` means one attempt only, `nil` leaves APNs' default storage policy.
    package var expiration: Int?
    package var collapseID: String?
    /// Our own `apns-id`, a UUID we generate and return to the caller.
    package var apnsID: UUID
    /// The JSON payload bytes.
    package var payload: Data

    package init(
        deviceToken: String,
        pushType: APNSPushType = .alert,
        bundleID: String,
        priority: APNSPriority? = nil,
        expiration: Int? = nil,
        collapseID: String? = nil,
        apnsID: UUID = .random(),
        payload: Data
    ) {
        self.deviceToken = deviceToken.lowercased()
        self.pushType = pushType
        self.bundleID = bundleID
        // Background pushes must go at priority 5 (protocols.md §3).
        self.priority = priority ?? (pushType == .background ? .considerPower : .immediate)
        self.expiration = expiration
        self.collapseID = collapseID
        self.apnsID = apnsID
        self.payload = payload
    }

    /// The `apns-topic` header value.
    package var topic: String { pushType.topic(forBundleID: bundleID) }

    /// The `:path` of the request.
    package var path: String { "/3/device/" + deviceToken }

    /// Checks every rule APNs enforces that can be checked before sending; the first broken one
    /// is thrown. Nothing that fails here is ever sent.
    package func validate() throws(APNSValidationError) {
        try Self.validateDeviceToken(deviceToken)
        if bundleID.isEmpty {
            throw APNSValidationError(code: .missingTopic, field: "topic", message: "the topic (bundle id) is empty")
        }
        if !pushType.isKnown {
            throw APNSValidationError(
                code: .invalidPushType, field: "push_type", message: "unknown push type \"\(pushType.rawValue)\"")
        }
        if !priority.isValid {
            throw APNSValidationError(
                code: .badPriority, field: "priority", message: "priority must be 1, 5 or 10, not \(priority.rawValue)")
        }
        if pushType == .background && priority == .immediate {
            throw APNSValidationError(
                code: .badPriority, field: "priority", message: "background pushes must use priority 5, not 10")
        }
        if let expiration, expiration < 0 {
            throw APNSValidationError(
                code: .badExpirationDate, field: "expiration", message: "expiration must be UNIX seconds ≥ 0")
        }
        if let collapseID, collapseID.utf8.count > Self.collapseIDLimit {
            throw APNSValidationError(
                code: .badCollapseID, field: "collapse_id",
                message: "collapse id is \(collapseID.utf8.count) bytes; APNs allows at most \(Self.collapseIDLimit)")
        }
        if payload.isEmpty {
            throw APNSValidationError(code: .payloadEmpty, field: "payload", message: "the payload is empty")
        }
        if payload.count > pushType.payloadLimit {
            throw APNSValidationError(
                code: .payloadTooLarge, field: "payload",
                message:
                    "payload is \(payload.count) bytes; \(pushType.rawValue) pushes allow at most \(pushType.payloadLimit)"
            )
        }
    }

    /// `apns-collapse-id` limit in bytes.
    package static let collapseIDLimit = 64

    /// Checks that a token is non-empty hex of whole bytes. Apple says not to assume a length.
    package static func validateDeviceToken(_ token: String) throws(APNSValidationError) {
        guard !token.isEmpty else {
            throw APNSValidationError(code: .missingDeviceToken, field: "token", message: "the device token is empty")
        }
        // Native strings are contiguous UTF-8: checked in one pass over the bytes (the generic
        // walk over the view was ~2% of a fan-out's CPU).
        let hex =
            token.utf8.withContiguousStorageIfAvailable { bytes in bytes.allSatisfy { $0.isHexDigit } }
            ?? token.utf8.allSatisfy(\.isHexDigit)
        guard token.utf8.count % 2 == 0, hex else {
            throw APNSValidationError(
                code: .badDeviceToken, field: "token", message: "a device token is hex of the raw token bytes")
        }
    }
}

extension UInt8 {
    /// Whether this ASCII byte is `0-9`, `a-f` or `A-F`.
    @inlinable package var isHexDigit: Bool {
        (self >= 0x30 && self <= 0x39) || (self >= 0x61 && self <= 0x66) || (self >= 0x41 && self <= 0x46)
    }
}

/// A notification that breaks an APNs rule, found before sending.
package struct APNSValidationError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The APNs reason this would have earned.
    package struct Code: Sendable, Hashable, RawRepresentable {
        package var rawValue: String
        package init(rawValue: String) { self.rawValue = rawValue }
        package static let missingDeviceToken = Code(rawValue: "MissingDeviceToken")
        package static let badDeviceToken = Code(rawValue: "BadDeviceToken")
        package static let missingTopic = Code(rawValue: "MissingTopic")
        package static let invalidPushType = Code(rawValue: "InvalidPushType")
        package static let badPriority = Code(rawValue: "BadPriority")
        package static let badExpirationDate = Code(rawValue: "BadExpirationDate")
        package static let badCollapseID = Code(rawValue: "BadCollapseId")
        package static let payloadEmpty = Code(rawValue: "PayloadEmpty")
        package static let payloadTooLarge = Code(rawValue: "PayloadTooLarge")
    }

    package var code: Code
    /// The request field at fault, in the API's snake_case.
    package var field: String
    package var message: String

    package init(code: Code, field: String, message: String) {
        self.code = code
        self.field = field
        self.message = message
    }

    package var description: String { "\(code.rawValue) (\(field)): \(message)" }
}
