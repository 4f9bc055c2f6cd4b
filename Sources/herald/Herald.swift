import ArgumentParser
import Foundation
import HeraldServer
import Logging

@main
struct Herald: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "herald",
        abstract: "Herald: a self-hosted push-notification platform (APNs and FCM).",
        version: HeraldVersion.description,
        subcommands: [
            ServeCommand.self, SimCommand.self, SendCommand.self, DevicesCommand.self, CatalogCommand.self,
            ConfigCommand.self, TokenCommand.self, BackupCommand.self, RestoreCommand.self, MigrateCommand.self,
        ]
    )
}

/// Logs to standard error. The level is `HERALD_LOG_LEVEL` (trace, debug, info, notice, warning,
/// error, critical), else `defaultLevel`; the format is `HERALD_LOG_FORMAT` (text or json), else
/// `format` (a configuration's `log_format`). A value that names neither is reported and ignored.
func bootstrapLogging(defaultLevel: Logger.Level = .info, format: HeraldConfiguration.LogFormat = .text) {
    let environment = ProcessInfo.processInfo.environment
    var level = defaultLevel
    if let name = environment["HERALD_LOG_LEVEL"], !name.isEmpty {
        if let named = Logger.Level(rawValue: name) {
            level = named
        } else {
            printError("herald: HERALD_LOG_LEVEL=\(name) is not a level (trace … critical); logging at \(level)")
        }
    }
    var format = format
    if let name = environment["HERALD_LOG_FORMAT"], !name.isEmpty {
        if let named = HeraldConfiguration.LogFormat(rawValue: name) {
            format = named
        } else {
            printError("herald: HERALD_LOG_FORMAT=\(name) is not text or json; logging as \(format.rawValue)")
        }
    }
    let chosen = level
    switch format {
    case .text:
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = chosen
            return handler
        }
    case .json:
        LoggingSystem.bootstrap { label in
            var handler = JSONLogHandler(label: label)
            handler.logLevel = chosen
            return handler
        }
    }
}

/// Writes a line to standard output, unbuffered (scripts read it while the process runs).
func printOutput(_ text: String) {
    FileHandle.standardOutput.write(Data((text + "\n").utf8))
}

/// Writes a line to standard error.
func printError(_ text: String) {
    FileHandle.standardError.write(Data((text + "\n").utf8))
}

/// Waits for SIGINT or SIGTERM.
func waitForTerminationSignal() async -> Int32 {
    await withCheckedContinuation { continuation in
        let once = SignalOnce(continuation)
        for signalNumber in [SIGINT, SIGTERM] {
            signal(signalNumber, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: .global())
            source.setEventHandler { once.fire(signalNumber) }
            source.resume()
            once.keep(source)
        }
    }
}

private final class SignalOnce: @unchecked Sendable {
    private let lock = NSLock()
    private var continuation: CheckedContinuation<Int32, Never>?
    private var sources: [any DispatchSourceSignal] = []

    init(_ continuation: CheckedContinuation<Int32, Never>) { self.continuation = continuation }

    func keep(_ source: any DispatchSourceSignal) {
        lock.withLock { sources.append(source) }
    }

    func fire(_ signalNumber: Int32) {
        let continuation = lock.withLock {
            defer { self.continuation = nil }
            return self.continuation
        }
        continuation?.resume(returning: signalNumber)
    }
}
