import Foundation
package import Hummingbird

/// An API error: `{"error":{"code","message","field"}}` with a 4xx status naming the field at fault.
package struct APIError: HTTPResponseError, Sendable {
    package var status: HTTPResponse.Status
    package var code: String
    package var message: String
    package var field: String?

    package init(_ status: HTTPResponse.Status, code: String, message: String, field: String? = nil) {
        self.status = status
        self.code = code
        self.message = message
        self.field = field
    }

    static func invalid(_ field: String, _ message: String) -> APIError {
        APIError(.badRequest, code: "invalid_field", message: message, field: field)
    }

    static func missing(_ field: String) -> APIError {
        APIError(.badRequest, code: "missing_field", message: "\(field) is required", field: field)
    }

    package func response(from request: Request, context: some RequestContext) throws -> Response {
        var error: [String: String] = ["code": code, "message": message]
        if let field { error["field"] = field }
        return try JSONResponse.make(["error": error], status: status)
    }
}

/// Builds JSON responses.
enum JSONResponse {
    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(ISO8601DateFormatter.herald.string(from: date))
        }
        return encoder
    }()

    static func make(_ value: some Encodable, status: HTTPResponse.Status = .ok) throws -> Response {
        let data = try encoder.encode(value)
        return Response(
            status: status, headers: [.contentType: "application/json"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: data)))
    }
}

extension ISO8601DateFormatter {
    /// RFC 3339 with milliseconds, UTC.
    nonisolated(unsafe) static let herald: ISO8601DateFormatter = {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter
    }()
}
