import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import LucidComments
import Testing
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The service end to end against a live `herald serve` and `herald sim` (processes of the
/// Herald binary: `HERALD_BIN`, else the checkout's `.build/debug/herald`), with Lucid's catalog:
/// the simulator's inbox is the witness that a Lucid comment rang the doorbell.
@Suite("Lucid comments through Herald", .serialized)
struct LucidCommentsTests {
    @Test("the guide's API: add (user and lucid), list with total/limit/offset, entry with comments, entries with comment_count, delete 204; a lucid comment pushes library_comment on thread library-{entryId} with its deep link; bad input names its field")
    func commentsPushThroughHerald() async throws {
        try await Herald.with { herald in
            let token = try await herald.register(user: "matt", device: "matt-iphone")
            try await Self.withService(herald) { client in
                let entry = try await client.json(.post, "/v1/library", ["user_id": "matt", "title": "Blood pressure", "content": "Readings."])
                #expect(entry.status == 201)
                let entryID = try #require((entry.body["entry"] as? [String: Any])?["id"] as? String)
                let path = "/v1/library/\(entryID)/comments"

                let mine = try await client.json(.post, path, ["user_id": "matt", "content": "That BP reading was right after a run", "author_type": "user"])
                #expect(mine.status == 201)
                let lucid = try await client.json(
                    .post, path, ["user_id": "matt", "content": "Good to know — I'll factor exercise timing into future readings", "author_type": "lucid"])
                #expect(lucid.status == 201)
                let comment = try #require(lucid.body["comment"] as? [String: Any])
                let commentID = try #require(comment["id"] as? String)
                #expect(comment["author_type"] as? String == "lucid" && comment["library_entry_id"] as? String == entryID)
                #expect((comment["metadata"] as? [String: Any])?["herald_notification_id"] is String)

                // One push, Lucid's, as the guide's payload has it.
                let inbox = try await herald.inbox(token, count: 1)
                let payload = try #require(inbox.first?["payload"] as? [String: Any])
                let aps = try #require(payload["aps"] as? [String: Any])
                #expect((aps["alert"] as? [String: Any])?["title"] as? String == "Lucid commented")
                #expect((aps["alert"] as? [String: Any])?["body"] as? String == "Good to know — I'll factor exercise timing into future readings")
                #expect(aps["thread-id"] as? String == "library-\(entryID)" && aps["category"] as? String == "LUCID_COMMENT")
                let data = try #require(payload["lucid"] as? [String: Any])
                #expect(data["type"] as? String == "library_comment" && data["entryId"] as? String == entryID && data["commentId"] as? String == commentID)
                #expect(data["deep_link"] as? String == "lucid://library/\(entryID)/comments/\(commentID)")

                let list = try await client.json(.get, path + "?user_id=matt&limit=50&offset=0")
                #expect(list.status == 200 && list.body["total"] as? Int == 2 && list.body["limit"] as? Int == 50 && list.body["offset"] as? Int == 0)
                let comments = try #require(list.body["comments"] as? [[String: Any]])
                #expect(comments.map { $0["author_type"] as? String } == ["user", "lucid"])
                #expect(Set(comments[0].keys) == ["id", "library_entry_id", "user_id", "author_type", "content", "metadata", "created_at", "updated_at"])
                #expect((comments[0]["created_at"] as? String)?.hasSuffix("Z") == true)
                let second = try await client.json(.get, path + "?user_id=matt&limit=1&offset=1")
                #expect((second.body["comments"] as? [[String: Any]])?.map { $0["id"] as? String } == [commentID] && second.body["total"] as? Int == 2)
                let single = try await client.json(.get, "/v1/library/\(entryID)?user_id=matt")
                #expect(((single.body["entry"] as? [String: Any])?["comments"] as? [Any])?.count == 2)
                let entries = try await client.json(.get, "/v1/library?user_id=matt")
                #expect((entries.body["entries"] as? [[String: Any]])?.first?["comment_count"] as? Int == 2)

                for (body, status, field) in [
                    (["user_id": "matt", "content": String(repeating: "a", count: 1001)], 400, "content"),
                    (["user_id": "matt", "content": "x", "author_type": "bot"], 400, "author_type"),
                    (["content": "x"], 400, "user_id"), (["user_id": "matt"], 400, "content"),
                    (["user_id": "someone-else", "content": "x"], 404, "entryId"),
                ] {
                    let refused = try await client.json(.post, path, body)
                    #expect(refused.status == status && (refused.body["error"] as? [String: Any])?["field"] as? String == field, "\(body)")
                }
                #expect(try await client.json(.post, path, ["user_id": "matt", "content": String(repeating: "é", count: 1000)]).status == 201)

                let mineID = try #require((mine.body["comment"] as? [String: Any])?["id"] as? String)
                #expect(try await client.json(.delete, path + "/\(mineID)?user_id=matt").status == 204)
                #expect(try await client.json(.delete, path + "/\(mineID)?user_id=matt").status == 404)
                #expect(try await client.json(.get, path + "?user_id=matt").body["total"] as? Int == 2)
                // Only Lucid's comment pushed.
                #expect(try await herald.inbox(token, count: 1).count == 1)
            }
        }
    }

    @Test("Herald away: Lucid's comment is stored at once (201, push pending) and pushed once Herald is back, exactly once")
    func heraldAway() async throws {
        try await Herald.with { herald in
            let token = try await herald.register(user: "matt", device: "matt-iphone")
            try await Self.withService(herald, retry: .milliseconds(300)) { client in
                let entry = try await client.json(.post, "/v1/library", ["user_id": "matt", "title": "Sleep", "content": "Notes."])
                let entryID = try #require((entry.body["entry"] as? [String: Any])?["id"] as? String)
                try await herald.stopServer()
                let lucid = try await client.json(
                    .post, "/v1/library/\(entryID)/comments", ["user_id": "matt", "content": "Slept better after the walk.", "author_type": "lucid"])
                #expect(lucid.status == 201)
                #expect(((lucid.body["comment"] as? [String: Any])?["metadata"] as? [String: Any])?["herald_notification_id"] == nil)
                try await herald.startServer()
                let inbox = try await herald.inbox(token, count: 1)
                #expect(((inbox.first?["payload"] as? [String: Any])?["lucid"] as? [String: Any])?["entryId"] as? String == entryID)
                // The retries go on; the comment is marked sent, so nothing more is sent.
                try await Task.sleep(for: .seconds(1))
                #expect(try await herald.inbox(token, count: 1).count == 1)
                let listed = try await client.json(.get, "/v1/library/\(entryID)/comments?user_id=matt")
                let metadata = (listed.body["comments"] as? [[String: Any]])?.first?["metadata"] as? [String: Any]
                #expect(metadata?["herald_notification_id"] is String)
            }
        }
    }

    /// The service on a fresh store in `herald`'s folder, tested through its router.
    static func withService(
        _ herald: Herald, retry: Duration = .seconds(3600), _ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void
    ) async throws {
        let app = try await buildApplication(
            databasePath: herald.directory + "/lucid-\(UUID().uuidString).sqlite", herald: herald.client, retryInterval: retry,
            logger: Logger(label: "lucid-comments-test"))
        try await app.test(.router) { client in try await body(client) }
    }
}

extension TestClientProtocol {
    /// A JSON request; the answer's status and JSON object.
    func json(_ method: HTTPRequest.Method, _ uri: String, _ body: [String: String]? = nil) async throws -> (status: Int, body: [String: Any]) {
        let data = try body.map { try JSONSerialization.data(withJSONObject: $0) }
        return try await execute(
            uri: uri, method: method, headers: [.contentType: "application/json"], body: data.map { ByteBuffer(bytes: $0) }
        ) { response in
            (Int(response.status.code), (try? JSONSerialization.jsonObject(with: Data(response.body.readableBytesView))) as? [String: Any] ?? [:])
        }
    }
}
