import Foundation

/// Who wrote a comment: Matt (`user`) or Lucid (`lucid`, which pushes).
public enum AuthorType: String, Codable, Sendable {
    case user, lucid
}

/// A Library entry, as `GET /v1/library` lists it (with `comment_count`) and `GET
/// /v1/library/{entryId}` shows it (with its `comments`).
public struct LibraryEntry: Codable, Sendable, Equatable {
    public var id: String
    public var userID: String
    public var title: String
    public var content: String
    public var createdAt: String
    public var updatedAt: String
    public var commentCount: Int?
    public var comments: [Comment]?

    enum CodingKeys: String, CodingKey {
        case id, userID = "user_id", title, content, createdAt = "created_at", updatedAt = "updated_at"
        case commentCount = "comment_count", comments
    }
}

/// A comment, exactly as the guide's API shows it.
public struct Comment: Codable, Sendable, Equatable {
    public var id: String
    public var libraryEntryID: String
    public var userID: String
    public var authorType: AuthorType
    public var content: String
    /// `herald_notification_id` once Lucid's comment was pushed.
    public var metadata: [String: String]
    public var createdAt: String
    public var updatedAt: String

    enum CodingKeys: String, CodingKey {
        case id, libraryEntryID = "library_entry_id", userID = "user_id", authorType = "author_type", content, metadata
        case createdAt = "created_at", updatedAt = "updated_at"
    }
}

/// `{"error": {"code", "message", "field"}}` with a 4xx status naming the field (Herald's shape).
public struct APIError: Error, Sendable {
    public var statusCode: Int
    public var code: String
    public var message: String
    public var field: String?

    static func invalid(_ field: String, _ message: String) -> APIError {
        APIError(statusCode: 400, code: "invalid_field", message: message, field: field)
    }

    static func missing(_ field: String) -> APIError {
        APIError(statusCode: 400, code: "missing_field", message: "\(field) is required", field: field)
    }

    static func notFound(_ what: String, field: String) -> APIError {
        APIError(statusCode: 404, code: "not_found", message: "no such \(what)", field: field)
    }
}
