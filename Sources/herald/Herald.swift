import ArgumentParser
import Foundation
import HeraldEngine
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
            WebPushCommand.self,
        ]
    )
}

/// Logs to standard error. The level is `HERALD_LOG_LEVEL` (trace, debug, info, notice, warning,
/// error, critical), else `defaultLevel`; the format is `HERALD_LOG_FORMAT` (text or json), else
/// `format` (a configuration's `log_format`). A value that names neither is reported and ignored.
func bootstrapLogging(defaultLevel: Logger.Level = .info, format: HeraldConfiguration.LogFormat = .text) {
    let level = environmentSetting(
        "HERALD_LOG_LEVEL", "trace, debug, info, notice, warning, error or critical", Logger.Level.init(rawValue:),
        else: defaultLevel)
    let format = environmentSetting(
        "HERALD_LOG_FORMAT", "text or json", HeraldConfiguration.LogFormat.init(rawValue:), else: format)
    switch format {
    case .text:
        LoggingSystem.bootstrap { label in
            var handler = TextLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
    case .json:
        LoggingSystem.bootstrap { label in
            var handler = JSONLogHandler(label: label)
            handler.logLevel = level
            return handler
        }
    }
}

/// The environment variable `name` read by `parse`, else `fallback`; a value `parse` refuses is
/// reported on standard error and the fallback used.
private func environmentSetting<Value>(
    _ name: String, _ expected: String, _ parse: (String) -> Value?, else fallback: Value
) -> Value {
    guard let text = ProcessInfo.processInfo.environment[name], !text.isEmpty else { return fallback }
    guard let value = parse(text) else {
        printError("herald: \(name)=\(text) is not \(expected); using \(fallback)")
        return fallback
    }
    return value
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
