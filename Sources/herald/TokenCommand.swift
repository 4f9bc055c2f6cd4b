import ArgumentParser
import Foundation
import HeraldCore
import HeraldEngine
import HeraldPayload

/// `herald token --app A --user U [--ttl 1h]`: prints a user token signed with the app's
/// `user_token_secret`, for tests and for backends that shell out instead of signing themselves.
struct TokenCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Print a user token (JWT HS256, sub = user id) for X-Herald-User-Token.",
        discussion: """
            Signs with the app's user_token_secret from the configuration (--config, else $HERALD_CONFIG, else \
            herald.yaml). The token goes beside the client key as header X-Herald-User-Token; Herald accepts it \
            until it expires (at most 24 hours). The secret itself is never printed.
            """)

    @Option(help: "The app whose user_token_secret signs the token.") var app: String
    @Option(help: "The user id (the token's sub).") var user: String
    @Option(help: "How long the token is valid: 90s, 30m, 1h … up to 24h.") var ttl = "1h"
    @Option(help: "The configuration file (YAML).") var config: String?

    func run() throws {
        guard let lifetime = HeraldDuration.seconds(ttl), lifetime > 0, lifetime <= UserToken.maximumLifetime else {
            printError("herald token: --ttl: give a duration such as 90s, 30m or 1h, at most 24h")
            throw ExitCode(2)
        }
        guard !user.isEmpty, user.utf8.count <= 256 else {
            printError("herald token: --user: 1 to 256 bytes")
            throw ExitCode(2)
        }
        let environment = ProcessInfo.processInfo.environment
        guard
            let file = config ?? environment["HERALD_CONFIG"]
                ?? (FileManager.default.fileExists(atPath: "herald.yaml") ? "herald.yaml" : nil)
        else {
            printError("herald token: no configuration (give --config or set HERALD_CONFIG)")
            throw ExitCode(2)
        }
        let configuration: HeraldConfiguration
        do {
            configuration = try HeraldConfiguration.load(file: file)
        } catch {
            printError("herald token: configuration error: \(error)")
            throw ExitCode(2)
        }
        guard let appConfiguration = configuration.apps.first(where: { $0.id == app }) else {
            printError("herald token: --app: no app \"\(app)\" in \(file)")
            throw ExitCode(2)
        }
        guard let secret = appConfiguration.userTokenSecret else {
            printError("herald token: app \"\(app)\" has no user_token_secret in \(file)")
            throw ExitCode(2)
        }
        let now = Date()
        let token = UserToken(userID: user, expiresAt: now.addingTimeInterval(lifetime), issuedAt: now)
        printOutput(token.signed(secret: Data(secret.utf8)))
    }

}
