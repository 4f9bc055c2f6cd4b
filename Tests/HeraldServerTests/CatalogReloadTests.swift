import Foundation
import HTTPTypes
import HeraldEngine
import HeraldSimulator
import HeraldTesting
import Testing

/// A catalog read again while the server runs (SIGHUP): new copy and types for the next sends;
/// a broken file keeps the catalog in use.
@Suite("Catalog reload")
struct CatalogReloadTests {
    static func catalog(body: String, extraType: Bool = false) -> String {
        """
        app: { name: Reload }
        types:
          hello: { copy: { en: { title: "Hello", body: "\(body)" } } }
        \(extraType ? "  bye: { copy: { en: { title: \"Bye\", body: \"See you\" } } }" : "")
        """
    }

    @Test("a changed catalog takes effect for the next send; a broken one changes nothing and is reported")
    func reload() async throws {
        let file = try makeTemporaryDirectory("herald-catalog-reload") + "/catalog.yaml"
        try Self.catalog(body: "First").write(toFile: file, atomically: true, encoding: .utf8)
        try await withServer(app: { $0.catalogFile = file }) { server in
            let token = makeDeviceTokens(1)[0]
            #expect(try await server.register("a", user: "rae", token: token) == .created)
            func send(_ type: String) async throws -> (status: Int, body: String?) {
                let sent = try await server.send(#"{"to":{"user_ids":["rae"]},"type":"\#(type)"}"#)
                guard sent.status == .accepted, let id = sent.body["id"] as? String else {
                    return (sent.status.code, nil)
                }
                _ = try await server.settled(id)
                let aps = server.simulator.state.inbox(for: token).last?.payloadObject?["aps"] as? [String: Any]
                return (sent.status.code, (aps?["alert"] as? [String: Any])?["body"] as? String)
            }
            #expect(try await send("hello").body == "First")
            #expect(try await send("bye").status == 400)

            try Self.catalog(body: "Second", extraType: true).write(toFile: file, atomically: true, encoding: .utf8)
            let reloaded = server.runtime.reloadCatalogs()
            #expect(reloaded.files == 1 && reloaded.failed == 0)
            #expect(try await send("hello").body == "Second")
            #expect(try await send("bye").body == "See you")

            // A file that no longer loads: the catalog in use stays, every type of it too.
            try "types: [".write(toFile: file, atomically: true, encoding: .utf8)
            let broken = server.runtime.reloadCatalogs()
            #expect(broken.files == 1 && broken.failed == 1)
            #expect(try await send("hello").body == "Second")
            #expect(try await send("bye").body == "See you")
        }
    }
}
