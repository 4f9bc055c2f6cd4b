import Foundation
import LucidComments
import Logging

// Configuration from the environment (a team's service would read its own):
//   HERALD_URL (http://127.0.0.1:8080), HERALD_APP (lucid), HERALD_SERVER_KEY (required),
//   LUCID_DATABASE (lucid-comments.sqlite), HOST (127.0.0.1), PORT (8090),
//   PUSH_RETRY_SECONDS (10): how often pushes Herald did not take yet are sent again.
let environment = ProcessInfo.processInfo.environment
guard let serverKey = environment["HERALD_SERVER_KEY"], !serverKey.isEmpty else {
    FileHandle.standardError.write(Data("lucid-comments: set HERALD_SERVER_KEY to the app's Herald server key\n".utf8))
    exit(64)
}
guard let heraldURL = URL(string: environment["HERALD_URL"] ?? "http://127.0.0.1:8080") else {
    FileHandle.standardError.write(Data("lucid-comments: HERALD_URL is not a URL\n".utf8))
    exit(64)
}
var logger = Logger(label: "lucid-comments")
logger.logLevel = Logger.Level(rawValue: environment["LOG_LEVEL"] ?? "info") ?? .info
let app = try await buildApplication(
    host: environment["HOST"] ?? "127.0.0.1", port: Int(environment["PORT"] ?? "") ?? 8090,
    databasePath: environment["LUCID_DATABASE"] ?? "lucid-comments.sqlite",
    herald: HeraldClient(baseURL: heraldURL, app: environment["HERALD_APP"] ?? "lucid", serverKey: serverKey),
    retryInterval: .seconds(Int(environment["PUSH_RETRY_SECONDS"] ?? "") ?? 10), logger: logger)
try await app.runService()
