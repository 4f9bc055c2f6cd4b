import Foundation
import SQLiteNIO

/// The service's own SQLite file: Library entries and their comments. A comment Lucid writes is
/// stored with its push `pending` in the same statement (an outbox of one row): the push is sent
/// after the commit, and sent again until Herald has it, so a comment never loses its push and
/// Herald's idempotency key makes a repeat harmless.
public actor CommentStore {
    private let connection: SQLiteConnection

    public init(path: String) async throws {
        connection = try await SQLiteConnection.open(storage: path == ":memory:" ? .memory : .file(path: path))
        for statement in [
            "PRAGMA journal_mode = WAL",
            "PRAGMA foreign_keys = ON",
            """
            CREATE TABLE IF NOT EXISTS library_entries (
                id TEXT PRIMARY KEY, user_id TEXT NOT NULL, title TEXT NOT NULL, content TEXT NOT NULL,
                created_at TEXT NOT NULL, updated_at TEXT NOT NULL)
            """,
            "CREATE INDEX IF NOT EXISTS library_entries_user ON library_entries (user_id, created_at)",
            """
            CREATE TABLE IF NOT EXISTS library_comments (
                id TEXT PRIMARY KEY,
                library_entry_id TEXT NOT NULL REFERENCES library_entries (id) ON DELETE CASCADE,
                user_id TEXT NOT NULL,
                author_type TEXT NOT NULL CHECK (author_type IN ('user', 'lucid')),
                content TEXT NOT NULL,
                metadata TEXT NOT NULL DEFAULT '{}',
                push TEXT CHECK (push IN ('pending', 'sent')),
                created_at TEXT NOT NULL, updated_at TEXT NOT NULL)
            """,
            "CREATE INDEX IF NOT EXISTS library_comments_entry ON library_comments (library_entry_id, created_at)",
            "CREATE INDEX IF NOT EXISTS library_comments_push ON library_comments (push) WHERE push = 'pending'",
        ] {
            _ = try await connection.query(statement)
        }
    }

    public func close() async throws {
        try await connection.close()
    }

    // MARK: Entries

    public func addEntry(userID: String, title: String, content: String, now: Date = Date()) async throws -> LibraryEntry {
        let entry = LibraryEntry(
            id: UUID().uuidString.lowercased(), userID: userID, title: title, content: content, createdAt: Timestamp.format(now),
            updatedAt: Timestamp.format(now))
        _ = try await connection.query(
            "INSERT INTO library_entries (id, user_id, title, content, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
            [.text(entry.id), .text(userID), .text(title), .text(content), .text(entry.createdAt), .text(entry.updatedAt)])
        return entry
    }

    /// The user's entry, nil when there is none (or it is another user's).
    public func entry(_ id: String, userID: String) async throws -> LibraryEntry? {
        try await connection.query(
            "SELECT id, user_id, title, content, created_at, updated_at, 0 FROM library_entries WHERE id = ? AND user_id = ?",
            [.text(id), .text(userID)]
        ).first.map(Self.entry)
    }

    /// The user's entries, newest first, each with its comment count.
    public func entries(userID: String, limit: Int, offset: Int) async throws -> (entries: [LibraryEntry], total: Int) {
        let rows = try await connection.query(
            """
            SELECT e.id, e.user_id, e.title, e.content, e.created_at, e.updated_at,
                (SELECT count(*) FROM library_comments c WHERE c.library_entry_id = e.id)
            FROM library_entries e WHERE e.user_id = ? ORDER BY e.created_at DESC, e.rowid DESC LIMIT ? OFFSET ?
            """, [.text(userID), .integer(limit), .integer(offset)])
        let total = try await connection.query("SELECT count(*) AS n FROM library_entries WHERE user_id = ?", [.text(userID)])
        return (rows.map(Self.entry), total.first?.column("n")?.integer ?? 0)
    }

    // MARK: Comments

    /// Stores a comment on `entryID`; a comment by Lucid is stored with its push pending.
    public func addComment(entryID: String, userID: String, authorType: AuthorType, content: String, now: Date = Date()) async throws -> Comment {
        let stamp = Timestamp.format(now)
        let comment = Comment(
            id: UUID().uuidString.lowercased(), libraryEntryID: entryID, userID: userID, authorType: authorType, content: content,
            metadata: [:], createdAt: stamp, updatedAt: stamp)
        _ = try await connection.query(
            """
            INSERT INTO library_comments (id, library_entry_id, user_id, author_type, content, push, created_at, updated_at)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?)
            """,
            [
                .text(comment.id), .text(entryID), .text(userID), .text(authorType.rawValue), .text(content),
                authorType == .lucid ? .text("pending") : .null, .text(stamp), .text(stamp),
            ])
        return comment
    }

    public func comments(entryID: String, limit: Int, offset: Int) async throws -> (comments: [Comment], total: Int) {
        let rows = try await connection.query(
            """
            SELECT id, library_entry_id, user_id, author_type, content, metadata, created_at, updated_at FROM library_comments
            WHERE library_entry_id = ? ORDER BY created_at, rowid LIMIT ? OFFSET ?
            """, [.text(entryID), .integer(limit), .integer(offset)])
        let total = try await connection.query("SELECT count(*) AS n FROM library_comments WHERE library_entry_id = ?", [.text(entryID)])
        return (rows.compactMap(Self.comment), total.first?.column("n")?.integer ?? 0)
    }

    public func comment(_ id: String) async throws -> Comment? {
        try await connection.query(
            "SELECT id, library_entry_id, user_id, author_type, content, metadata, created_at, updated_at FROM library_comments WHERE id = ?",
            [.text(id)]
        ).first.flatMap(Self.comment)
    }

    /// Deletes the comment if it is on `entryID` and `userID`'s; false when there is none.
    public func deleteComment(_ id: String, entryID: String, userID: String) async throws -> Bool {
        !(try await connection.query(
            "DELETE FROM library_comments WHERE id = ? AND library_entry_id = ? AND user_id = ? RETURNING id",
            [.text(id), .text(entryID), .text(userID)]
        ).isEmpty)
    }

    // MARK: The push outbox

    /// Lucid's comments whose push Herald has not acknowledged yet, oldest first.
    public func pendingPushes(limit: Int = 100) async throws -> [Comment] {
        try await connection.query(
            """
            SELECT id, library_entry_id, user_id, author_type, content, metadata, created_at, updated_at FROM library_comments
            WHERE push = 'pending' ORDER BY created_at, rowid LIMIT ?
            """, [.integer(limit)]
        ).compactMap(Self.comment)
    }

    /// Herald accepted the comment's push as notification `notificationID`.
    public func pushSent(_ id: String, notificationID: String, now: Date = Date()) async throws -> Comment? {
        _ = try await connection.query(
            """
            UPDATE library_comments SET push = 'sent', metadata = json_set(metadata, '$.herald_notification_id', ?), updated_at = ?
            WHERE id = ?
            """, [.text(notificationID), .text(Timestamp.format(now)), .text(id)])
        return try await comment(id)
    }

    // MARK: Rows

    private static func entry(_ row: SQLiteRow) -> LibraryEntry {
        let columns = row.columns.map(\.data)
        return LibraryEntry(
            id: columns[0].string ?? "", userID: columns[1].string ?? "", title: columns[2].string ?? "", content: columns[3].string ?? "",
            createdAt: columns[4].string ?? "", updatedAt: columns[5].string ?? "", commentCount: columns[6].integer ?? 0)
    }

    private static func comment(_ row: SQLiteRow) -> Comment? {
        let columns = row.columns.map(\.data)
        guard let author = columns[3].string.flatMap(AuthorType.init(rawValue:)) else { return nil }
        let metadata = columns[5].string.flatMap { try? JSONDecoder().decode([String: String].self, from: Data($0.utf8)) } ?? [:]
        return Comment(
            id: columns[0].string ?? "", libraryEntryID: columns[1].string ?? "", userID: columns[2].string ?? "", authorType: author,
            content: columns[4].string ?? "", metadata: metadata, createdAt: columns[6].string ?? "", updatedAt: columns[7].string ?? "")
    }
}

/// Times as the guide writes them: `2026-02-20T15:30:00.000Z`.
enum Timestamp {
    static func format(_ date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }
}
