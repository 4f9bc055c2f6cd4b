import ArgumentParser
import Foundation
import HeraldServer
import HeraldStore
import Logging

/// `herald devices …`: device registry work from the command line.
struct DevicesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "devices", abstract: "Manage registered devices.", subcommands: [ImportDevicesCommand.self])
}

/// `herald devices import FILE`: the bulk import of `POST …/devices/import`, straight into the
/// configured database, with a progress line. The file is read in chunks: any size works.
struct ImportDevicesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Import devices from a JSON-lines file (one device object per line, as the API takes them).")

    @Argument(help: "The JSON-lines file; - reads standard input.") var file: String
    @Option(help: "The app the devices belong to.") var app: String
    @Option(help: "The configuration file (for database.url); default $HERALD_CONFIG or herald.yaml.") var config: String?
    @Option(name: .customLong("database-url"), help: "The database, overriding the configuration.") var databaseURL: String?
    @Flag(help: "No progress line.") var quiet = false

    func run() async throws {
        bootstrapLogging(defaultLevel: .warning)
        let environment = ProcessInfo.processInfo.environment
        var url = databaseURL ?? environment["HERALD_DATABASE_URL"]
        if url == nil {
            let path = config ?? environment["HERALD_CONFIG"] ?? "herald.yaml"
            do {
                url = try HeraldConfiguration.load(file: path).databaseURL
            } catch {
                printError("herald devices import: \(error) (give --config or --database-url)")
                throw ExitCode(2)
            }
        }
        guard let handle = file == "-" ? FileHandle.standardInput : FileHandle(forReadingAtPath: file) else {
            printError("herald devices import: cannot read \(file)")
            throw ExitCode(2)
        }
        let store = try await HeraldStore.open(url: url!)
        let importer = DeviceLineImporter(store: store, appID: app)
        let started = ContinuousClock.now
        let interactive = isatty(STDERR_FILENO) == 1
        var lastReport = started
        do {
            while let chunk = try handle.read(upToCount: 1 << 20), !chunk.isEmpty {
                try await importer.feed(chunk)
                if !quiet, ContinuousClock.now - lastReport > .milliseconds(500) {
                    lastReport = ContinuousClock.now
                    let line = "\(importer.imported) devices imported (\(Int(Double(importer.imported) / max(0.001, (lastReport - started).seconds)))/s)"
                    FileHandle.standardError.write(Data((interactive ? "\r" + line : line + "\n").utf8))
                }
            }
            try await importer.finish()
        } catch let error as APIError {
            printError("\nherald devices import: \(error.field ?? "input"): \(error.message)")
            await store.close()
            throw ExitCode(1)
        }
        await store.close()
        let seconds = (ContinuousClock.now - started).seconds
        if !quiet { FileHandle.standardError.write(Data((interactive ? "\r" : "").utf8)) }
        printOutput(#"{"imported":\#(importer.imported),"seconds":\#(String(format: "%.2f", seconds))}"#)
    }
}
