/// Why a notification cannot be rendered for a provider: the field to blame (in the API's
/// snake_case) and a message a person can act on.
package struct RenderingError: Error, Sendable, Hashable, CustomStringConvertible {
    package struct Code: Sendable, Hashable, RawRepresentable {
        package var rawValue: String
        package init(rawValue: String) { self.rawValue = rawValue }

        /// Larger than the provider accepts (APNs 4096 / VoIP 5120 bytes, FCM 4096).
        package static let payloadTooLarge = Code(rawValue: "payload_too_large")
        /// JSON encoding failed (a non-finite number, for one).
        package static let notEncodable = Code(rawValue: "not_encodable")
    }

    package var code: Code
    package var field: String
    package var message: String

    package init(_ code: Code, field: String, message: String) {
        self.code = code
        self.field = field
        self.message = message
    }

    package var description: String { "\(code.rawValue) (\(field)): \(message)" }
}
