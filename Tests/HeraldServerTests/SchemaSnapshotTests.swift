import Foundation
import HeraldStore
import HeraldTesting
import Testing

/// The schema the migrations build, on each database, against the snapshot checked in under
/// Tests/Fixtures/schema/. A migration that changes the schema fails here until the snapshot is
/// rewritten (HERALD_UPDATE_FIXTURES=1), so every schema change shows in review as a diff of it.
@Suite("Schema snapshot")
struct SchemaSnapshotTests {
    static let directory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/schema")

    static func check(_ kind: TestDatabase.Kind) async throws {
        let store = try await HeraldStore.open(url: try await TestDatabase.url("schema", kind: kind))
        let snapshot = try await store.schemaSnapshot().joined(separator: "\n") + "\n"
        await store.close()
        let file = directory.appendingPathComponent("\(kind.rawValue).txt")
        if ProcessInfo.processInfo.environment["HERALD_UPDATE_FIXTURES"] == "1" {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            try snapshot.write(to: file, atomically: true, encoding: .utf8)
            return
        }
        let expected = try String(contentsOf: file, encoding: .utf8)
        let missing = Set(expected.split(separator: "\n")).subtracting(snapshot.split(separator: "\n")).sorted()
        let added = Set(snapshot.split(separator: "\n")).subtracting(expected.split(separator: "\n")).sorted()
        #expect(
            snapshot == expected, "schema differs from \(file.lastPathComponent): missing \(missing), added \(added)")
    }

    @Test("SQLite: the migrated schema is the snapshot")
    func sqlite() async throws {
        try await Self.check(.sqlite)
    }

    @Test("PostgreSQL: the migrated schema is the snapshot", .enabled(if: TestDatabase.postgresAvailable))
    func postgres() async throws {
        try await Self.check(.postgres)
    }
}
