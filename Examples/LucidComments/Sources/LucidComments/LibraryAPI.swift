import Foundation
import Hummingbird
import Logging
import ServiceLifecycle

/// The guide's Library comments API (Lucid's integration guide, §4), on this service's store;
/// Lucid's comments are pushed through Herald.
public enum LibraryAPI {
    static let maximumComment = 1000
    static let maximumTitle = 200
    static let maximumContent = 100_000

    public static func router(store: CommentStore, pushes: CommentPushes) -> Router<BasicRequestContext> {
        let router = Router()
        router.get("/healthz") { _, _ in ["status": "ok"] }
        // Not in the guide: how entries come to exist here (Lucid's backend writes them).
        router.post("/v1/library") { request, _ in
            let body = try await decode(NewEntry.self, request)
            let userID = try required(body.user_id, "user_id")
            let title = try text(body.title, "title", limit: maximumTitle)
            let content = try text(body.content, "content", limit: maximumContent)
            return try json(["entry": try await store.addEntry(userID: userID, title: title, content: content)], status: .created)
        }
        router.get("/v1/library") { request, _ in
            let userID = try required(request.uri.queryParameters.get("user_id"), "user_id")
            let (limit, offset) = try page(request)
            let (entries, total) = try await store.entries(userID: userID, limit: limit, offset: offset)
            return try json(EntryList(entries: entries, total: total, limit: limit, offset: offset))
        }
        router.get("/v1/library/:entryId") { request, context in
            let (entryID, userID) = try entryAndUser(request, context)
            guard var entry = try await store.entry(entryID, userID: userID) else { throw APIError.notFound("library entry", field: "entryId") }
            entry.comments = try await store.comments(entryID: entryID, limit: Int.max, offset: 0).comments
            return try json(["entry": entry])
        }
        router.get("/v1/library/:entryId/comments") { request, context in
            let (entryID, userID) = try entryAndUser(request, context)
            let (limit, offset) = try page(request)
            guard try await store.entry(entryID, userID: userID) != nil else { throw APIError.notFound("library entry", field: "entryId") }
            let (comments, total) = try await store.comments(entryID: entryID, limit: limit, offset: offset)
            return try json(CommentList(comments: comments, total: total, limit: limit, offset: offset))
        }
        router.post("/v1/library/:entryId/comments") { request, context in
            let entryID = try required(context.parameters.get("entryId"), "entryId")
            let body = try await decode(NewComment.self, request)
            let userID = try required(body.user_id, "user_id")
            let content = try text(body.content, "content", limit: maximumComment)
            let author = try body.author_type.map { text in
                guard let author = AuthorType(rawValue: text) else { throw APIError.invalid("author_type", "author_type is user or lucid") }
                return author
            } ?? .user
            guard try await store.entry(entryID, userID: userID) != nil else { throw APIError.notFound("library entry", field: "entryId") }
            var comment = try await store.addComment(entryID: entryID, userID: userID, authorType: author, content: content)
            // Lucid's comment rings the doorbell: stored first, then pushed (retried if Herald is away).
            if author == .lucid, let pushed = await pushes.push(comment) { comment = pushed }
            return try json(["comment": comment], status: .created)
        }
        router.delete("/v1/library/:entryId/comments/:commentId") { request, context in
            let (entryID, userID) = try entryAndUser(request, context)
            let commentID = try required(context.parameters.get("commentId"), "commentId")
            let comment = try await store.comment(commentID)
            guard try await store.deleteComment(commentID, entryID: entryID, userID: userID) else {
                throw APIError.notFound("comment", field: "commentId")
            }
            if comment?.authorType == .lucid { await pushes.cancel(commentID: commentID) }
            return Response(status: .noContent)
        }
        return router
    }

    // MARK: Requests

    struct NewEntry: Decodable {
        var user_id: String?
        var title: String?
        var content: String?
    }

    struct NewComment: Decodable {
        var user_id: String?
        var content: String?
        var author_type: String?
    }

    struct EntryList: Encodable {
        var entries: [LibraryEntry]
        var total: Int
        var limit: Int
        var offset: Int
    }

    struct CommentList: Encodable {
        var comments: [Comment]
        var total: Int
        var limit: Int
        var offset: Int
    }

    static func decode<Body: Decodable>(_ type: Body.Type, _ request: Request) async throws -> Body {
        let buffer = try await request.body.collect(upTo: 1 << 20)
        do {
            return try JSONDecoder().decode(type, from: Data(buffer.readableBytesView))
        } catch {
            throw APIError(statusCode: 400, code: "invalid_json", message: "the body is not the JSON object this route takes", field: "body")
        }
    }

    static func required(_ value: String?, _ field: String) throws -> String {
        guard let value else { throw APIError.missing(field) }
        guard !value.isEmpty, value.utf8.count <= 256 else { throw APIError.invalid(field, "\(field) is 1 to 256 bytes") }
        return value
    }

    static func text(_ value: String?, _ field: String, limit: Int) throws -> String {
        guard let value else { throw APIError.missing(field) }
        guard !value.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else { throw APIError.invalid(field, "\(field) is empty") }
        guard value.count <= limit else { throw APIError.invalid(field, "\(field) is at most \(limit) characters") }
        return value
    }

    static func entryAndUser(_ request: Request, _ context: BasicRequestContext) throws -> (String, String) {
        (try required(context.parameters.get("entryId"), "entryId"), try required(request.uri.queryParameters.get("user_id"), "user_id"))
    }

    /// `limit` (1–100, default 50) and `offset` (default 0).
    static func page(_ request: Request) throws -> (Int, Int) {
        let query = request.uri.queryParameters
        let limit = try query.get("limit").map { text in
            guard let value = Int(text), (1...100).contains(value) else { throw APIError.invalid("limit", "limit is 1 to 100") }
            return value
        } ?? 50
        let offset = try query.get("offset").map { text in
            guard let value = Int(text), value >= 0 else { throw APIError.invalid("offset", "offset is 0 or more") }
            return value
        } ?? 0
        return (limit, offset)
    }

    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok) throws -> Response {
        Response(
            status: status, headers: [.contentType: "application/json"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: try encoder.encode(value))))
    }
}

extension APIError: HTTPResponseError {
    public var status: HTTPResponse.Status { HTTPResponse.Status(code: statusCode) }

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        var error = ["code": code, "message": message]
        if let field { error["field"] = field }
        return try LibraryAPI.json(["error": error], status: status)
    }
}

/// Sends the pushes still pending (Herald was away when their comment was written) every
/// `interval` until the service stops.
public struct PushRetryService: Service {
    let pushes: CommentPushes
    let interval: Duration

    public init(pushes: CommentPushes, interval: Duration) {
        self.pushes = pushes
        self.interval = interval
    }

    public func run() async throws {
        while !Task.isShuttingDownGracefully, !Task.isCancelled {
            do {
                let sent = try await pushes.retryPending()
                if sent > 0 { pushes.logger.info("Pending comment pushes sent", metadata: ["sent": "\(sent)"]) }
            } catch {
                pushes.logger.error("Pending comment pushes cannot be read", metadata: ["error": "\(error)"])
            }
            // A stop ends the wait at once (a sleep alone would hold the shutdown for `interval`).
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: self.interval) }
        }
    }
}

/// Closes the store when the service stops (after the services listed after it).
struct StoreCloser: Service {
    let store: CommentStore

    func run() async throws {
        try? await gracefulShutdown()
        try await store.close()
    }
}

/// The whole service: the API on `host:port`, the store at `databasePath`, pushes through `herald`.
public func buildApplication(
    host: String = "127.0.0.1", port: Int = 8090, databasePath: String, herald: HeraldClient, retryInterval: Duration = .seconds(10),
    logger: Logger = Logger(label: "lucid-comments")
) async throws -> some ApplicationProtocol {
    let store = try await CommentStore(path: databasePath)
    let pushes = CommentPushes(store: store, herald: herald, logger: logger)
    return Application(
        router: LibraryAPI.router(store: store, pushes: pushes), configuration: .init(address: .hostname(host, port: port)),
        services: [StoreCloser(store: store), PushRetryService(pushes: pushes, interval: retryInterval)], logger: logger)
}
