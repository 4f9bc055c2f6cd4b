import ArgumentParser
import Foundation
import HeraldAPI
import HeraldCore
import HeraldEngine
import HeraldStore
import Logging

/// `herald devices …`: device registry work from the command line.
struct DevicesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "devices", abstract: "Manage registered devices.",
        subcommands: [ImportDevicesCommand.self, ReactivateDevicesCommand.self])
}

/// `herald devices import FILE`: the bulk import of `POST …/devices/import`, straight into the
/// configured database, with a progress line. The file is read in chunks: any size works.
struct ImportDevicesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Import devices from a JSON-lines file (one device object per line, as the API takes them).")

    @Argument(help: "The JSON-lines file; - reads standard input.") var file: String
    @Option(help: "The app the devices belong to.") var app: String
    @Option(help: "The configuration file (for database.url); default $HERALD_CONFIG or herald.yaml.") var config:
        String?
    @Option(name: .customLong("database-url"), help: "The database, overriding the configuration.") var databaseURL:
        String?
    @Flag(help: "No progress line.") var quiet = false

    func run() async throws {
        bootstrapLogging(defaultLevel: .warning)
        let url = try resolveDatabaseURL(command: "herald devices import", config: config, databaseURL: databaseURL)
        guard let handle = file == "-" ? FileHandle.standardInput : FileHandle(forReadingAtPath: file) else {
            printError("herald devices import: cannot read \(file)")
            throw ExitCode(2)
        }
        let store = try await HeraldStore.open(url: url)
        let importer = DeviceLineImporter(store: store, appID: app)
        let started = ContinuousClock.now
        let interactive = isatty(STDERR_FILENO) == 1
        var lastReport = started
        do {
            while let chunk = try handle.read(upToCount: 1 << 20), !chunk.isEmpty {
                try await importer.feed(chunk)
                if !quiet, ContinuousClock.now - lastReport > .milliseconds(500) {
                    lastReport = ContinuousClock.now
                    let line =
                        "\(importer.imported) devices imported (\(Int(Double(importer.imported) / max(0.001, (lastReport - started).seconds)))/s)"
                    FileHandle.standardError.write(Data((interactive ? "\r" + line : line + "\n").utf8))
                }
            }
            try await importer.finish()
        } catch let error as DeviceImportError {
            printError("\nherald devices import: \(error.field): \(error.message)")
            await store.close()
            throw ExitCode(1)
        } catch {
            await importer.abandon()
            await store.close()
            throw error
        }
        await store.close()
        let seconds = (ContinuousClock.now - started).seconds
        if !quiet { FileHandle.standardError.write(Data((interactive ? "\r" : "").utf8)) }
        printOutput(#"{"imported":\#(importer.imported),"seconds":\#(String(format: "%.2f", seconds))}"#)
    }
}

/// `herald devices reactivate`: undoes the deactivations a misconfiguration caused (a wrong
/// APNs environment or FCM project makes every token look dead), by reason and time.
struct ReactivateDevicesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reactivate",
        abstract:
            "Make devices active again that were deactivated for a reason (e.g. BadDeviceToken), optionally since a time."
    )

    @Option(help: "The app the devices belong to.") var app: String
    @Option(
        help: "The inactive_reason to undo, exactly as devices show it (BadDeviceToken, Unregistered, DeviceLimit …).")
    var reason: String
    @Option(help: "Only devices deactivated at or after this time (ISO 8601, e.g. 2026-11-24T09:00:00Z).") var since:
        String?
    @Option(help: "The configuration file (for database.url); default $HERALD_CONFIG or herald.yaml.") var config:
        String?
    @Option(name: .customLong("database-url"), help: "The database, overriding the configuration.") var databaseURL:
        String?

    func validate() throws {
        if let since, HeraldTime.parse(since) == nil {
            throw ValidationError("--since: not an ISO 8601 time (e.g. 2026-11-24T09:00:00Z): \(since)")
        }
        if reason.isEmpty { throw ValidationError("--reason: give the inactive_reason to undo") }
    }

    func run() async throws {
        bootstrapLogging(defaultLevel: .warning)
        let url = try resolveDatabaseURL(command: "herald devices reactivate", config: config, databaseURL: databaseURL)
        let store = try await HeraldStore.open(url: url)
        let count: Int
        do {
            count = try await store.devices.reactivateDevices(
                appID: app, reason: reason, since: since.flatMap(HeraldTime.parse))
        } catch {
            await store.close()
            throw error
        }
        await store.close()
        printOutput(#"{"reactivated":\#(count)}"#)
    }
}

/// The database URL for a command that works on the store directly: `--database-url`,
/// `HERALD_DATABASE_URL`, or the configuration file's.
func resolveDatabaseURL(command: String, config: String?, databaseURL: String?) throws -> String {
    let environment = ProcessInfo.processInfo.environment
    if let url = databaseURL ?? environment["HERALD_DATABASE_URL"] { return url }
    let path = config ?? environment["HERALD_CONFIG"] ?? "herald.yaml"
    do {
        return try HeraldConfiguration.load(file: path).databaseURL
    } catch {
        printError("\(command): \(error) (give --config or --database-url)")
        throw ExitCode(2)
    }
}
