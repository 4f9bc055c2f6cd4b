import Foundation
import Logging

/// Pushes Lucid's comments through Herald as `library_comment` (thread `library-{entryId}`,
/// deep link to the comment): at once after the comment is stored, and again from the
/// store's pending list until Herald accepts it.
public struct CommentPushes: Sendable {
    public let store: CommentStore
    public let herald: HeraldClient
    public let logger: Logger

    /// The catalog type Lucid's guide names.
    public static let type = "library_comment"
    /// Longest comment text put in a push (Lucid's body_max); the full text is in the app.
    static let bodyLimit = 178

    public init(store: CommentStore, herald: HeraldClient, logger: Logger) {
        self.store = store
        self.herald = herald
        self.logger = logger
    }

    /// Sends one comment's push; returns the comment as stored after (with
    /// `metadata.herald_notification_id`), or nil when Herald did not take it (it stays pending).
    @discardableResult
    public func push(_ comment: Comment) async -> Comment? {
        do {
            let id = try await herald.send(
                type: Self.type, to: comment.userID,
                data: ["comment": Self.excerpt(comment.content), "entryId": comment.libraryEntryID, "commentId": comment.id],
                idempotencyKey: "lucid-comment-\(comment.id)", cancelKey: Self.cancelKey(comment.id))
            return try await store.pushSent(comment.id, notificationID: id)
        } catch {
            logger.warning("A comment's push waits for Herald", metadata: ["comment": "\(comment.id)", "error": "\(error)"])
            return nil
        }
    }

    /// Sends every pending push once; returns how many Herald took.
    @discardableResult
    public func retryPending() async throws -> Int {
        var sent = 0
        for comment in try await store.pendingPushes() where await push(comment) != nil { sent += 1 }
        return sent
    }

    /// A deleted comment's push is cancelled if Herald has not sent it yet (quiet hours, pacing).
    public func cancel(commentID: String) async {
        do {
            try await herald.cancel(Self.cancelKey(commentID))
        } catch {
            logger.warning("A deleted comment's push could not be cancelled", metadata: ["comment": "\(commentID)", "error": "\(error)"])
        }
    }

    static func cancelKey(_ commentID: String) -> String { "comment-\(commentID)" }

    /// The comment cut at a character (never inside one) with an ellipsis when longer than a push shows.
    static func excerpt(_ text: String) -> String {
        text.count <= bodyLimit ? text : String(text.prefix(bodyLimit - 1)) + "…"
    }
}
