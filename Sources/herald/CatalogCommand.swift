import ArgumentParser
import Foundation
import HeraldCatalog
import HeraldCore

/// `herald catalog check FILE…`: lists every problem in notification catalogs.
struct CatalogCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "catalog", abstract: "Work with notification catalogs.", subcommands: [CatalogCheckCommand.self])
}

struct CatalogCheckCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check",
        abstract: "Check catalogs: placeholders, default-locale copy, copy limits and rules, actions.",
        discussion: "Prints FILE:LINE: KEY: MESSAGE for each problem; exit 1 when there is any.")

    @Argument(help: "Catalog YAML files.") var files: [String]

    func run() async throws {
        var failed = false
        for file in files {
            do {
                let catalog = try CatalogLoader.parse(file: file)
                let problems = CatalogChecker.check(catalog)
                for problem in problems {
                    printError("\(file):\(problem.line.map(String.init) ?? "-"): \(problem.key): \(problem.message)")
                }
                if problems.isEmpty {
                    let parts = [
                        (catalog.types.count, "types"), (catalog.tracks.count, "tracks"),
                        (catalog.triggers.count, "triggers"), (catalog.jobs.count, "jobs"),
                    ]
                    printOutput(
                        "\(file): ok (" + parts.filter { $0.0 > 0 }.map { "\($0.0) \($0.1)" }.joined(separator: ", ")
                            + ")")
                } else {
                    failed = true
                }
            } catch {
                printError("\(error)")
                failed = true
            }
        }
        if failed { throw ExitCode(1) }
    }
}
