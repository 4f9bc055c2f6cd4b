import ArgumentParser
import Foundation
import HeraldCatalog
import HeraldEngine

/// `herald config check --config FILE`: every problem of a configuration, nothing started.
struct ConfigCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "config", abstract: "Work with herald.yaml.", subcommands: [ConfigCheckCommand.self])
}

struct ConfigCheckCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check",
        abstract: "Check a configuration without starting anything: keys, catalogs, key files, certificates.",
        discussion: """
            Reads the configuration as `herald serve` would (HERALD_DATABASE_URL, HERALD_ADMIN_KEY and \
            HERALD_METRICS_KEY applied), then each app's catalog, APNs key, FCM service account and CA files, \
            and the TLS certificate and key. Prints FILE:LINE: KEY: PROBLEM for every problem and exits 2 \
            when there is any; exits 0 with a summary line when there is none. Opens no database and no port.
            """)

    @Option(help: "The configuration file (YAML); else $HERALD_CONFIG, else herald.yaml.") var config: String?

    func run() async throws {
        let environment = ProcessInfo.processInfo.environment
        let file = config ?? environment["HERALD_CONFIG"] ?? "herald.yaml"
        let report = ConfigurationCheck.run(file: file, environment: environment)
        for problem in report.problems { printError("\(problem)") }
        guard report.problems.isEmpty else {
            printError("herald config check: \(report.problems.count) problem\(report.problems.count == 1 ? "" : "s")")
            throw ExitCode(2)
        }
        printOutput(
            "\(file): ok (\(report.apps) app\(report.apps == 1 ? "" : "s"), \(report.catalogs) catalog\(report.catalogs == 1 ? "" : "s"))"
        )
    }
}
