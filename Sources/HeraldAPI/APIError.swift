import Foundation
import HeraldCore
import HeraldPayload
import HeraldStore
package import Hummingbird

/// An API error: `{"error":{"code","message","field"}}` with a 4xx status naming the field at fault.
package struct APIError: HTTPResponseError, Sendable {
    package var status: HTTPResponse.Status
    package var code: String
    package var message: String
    package var field: String?
    /// Seconds to wait before trying again (a 429's or a 503's `Retry-After`).
    package var retryAfter: Int?

    package init(
        _ status: HTTPResponse.Status, code: String, message: String, field: String? = nil, retryAfter: Int? = nil
    ) {
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.retryAfter = retryAfter
    }

    /// A draft the composer refused: 413 for size, else 400; names the field.
    init(composition error: CompositionError) {
        switch error.code {
        case .payloadTooLarge:
            self.init(.contentTooLarge, code: "payload_too_large", message: error.message, field: error.field)
        case .missing: self.init(.badRequest, code: "missing_field", message: error.message, field: error.field)
        case .invalid: self.init(.badRequest, code: "invalid_field", message: error.message, field: error.field)
        }
    }

    static func invalid(_ field: String, _ message: String) -> APIError {
        APIError(.badRequest, code: "invalid_field", message: message, field: field)
    }

    static func missing(_ field: String) -> APIError {
        APIError(.badRequest, code: "missing_field", message: "\(field) is required", field: field)
    }

    package func response(from request: Request, context: some RequestContext) throws -> Response {
        var response = JSONResponse.make(bytes: body, status: status)
        if let retryAfter { response.headers[.retryAfter] = "\(retryAfter)" }
        return response
    }

    /// `{"error":{"code","field","message"}}`, keys sorted as the encoder sorts them.
    var body: [UInt8] {
        var writer = JSONWriter(capacity: 128)
        writer.raw("{\"error\":{\"code\":")
        writer.string(code)
        if let field {
            writer.raw(",\"field\":")
            writer.string(field)
        }
        writer.raw(",\"message\":")
        writer.string(message)
        writer.raw("}}")
        return writer.bytes
    }

    /// What an error thrown by a route answers (`ListenerMiddleware`): an `APIError` itself;
    /// text the database refuses (a NUL character) and a draft the composer refused are the
    /// caller's, 400 or 413. nil for any other error (a 500).
    package static func answering(_ error: any Error) -> APIError? {
        switch error {
        case let error as APIError: error
        case let error as StoreError where error.code == .unstorableText:
            APIError(.badRequest, code: "invalid_text", message: error.message, field: "body")
        case let error as CompositionError: APIError(composition: error)
        default: nil
        }
    }
}

/// Builds JSON responses.
package enum JSONResponse {
    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(HeraldTime.format(date))
        }
        return encoder
    }()

    package static func make(_ value: some Encodable, status: HTTPResponse.Status = .ok) throws -> Response {
        let data = try encoder.encode(value)
        return Response(
            status: status, headers: [.contentType: "application/json"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: data)))
    }

    /// An answer of the hot routes, written without the encoder (the same bytes it would give).
    static func make(_ value: some JSONWritable, status: HTTPResponse.Status = .ok) -> Response {
        make(bytes: bytes(value), status: status)
    }

    /// A JSON answer already written.
    static func make(bytes: [UInt8], status: HTTPResponse.Status = .ok) -> Response {
        Response(
            status: status, headers: [.contentType: "application/json"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    /// The bytes of a hot route's answer.
    static func bytes(_ value: some JSONWritable) -> [UInt8] {
        var writer = JSONWriter(capacity: 128)
        value.write(to: &writer)
        return writer.bytes
    }
}

/// An answer the hot routes write by hand: the bytes `JSONResponse.encoder` would make of it
/// (keys sorted, optional members left out when nil), for a fraction of its cost.
protocol JSONWritable: Encodable {
    func write(to writer: inout JSONWriter)
}
