package import Logging

/// Text log lines exactly as swift-log's `StreamLogHandler` writes them
/// (`TIME LEVEL LABEL: key=value … [SOURCE] MESSAGE`), with the logger's own metadata rendered
/// only when a line is written. `StreamLogHandler` renders its metadata again at every change,
/// and Hummingbird gives every request's logger a request id: that rendering (sorting, the id's
/// description, joining) was about 2% of the CPU of a device's open report, for lines that are
/// almost never written at the default level.
package struct TextLogHandler: LogHandler {
    /// Writes the lines; holds no metadata of its own, so it renders only what a line carries.
    private var writer: StreamLogHandler
    package var metadata: Logger.Metadata = [:]
    package var metadataProvider: Logger.MetadataProvider?

    package var logLevel: Logger.Level {
        get { writer.logLevel }
        set { writer.logLevel = newValue }
    }

    /// A handler writing to standard error, with the logging system's metadata provider.
    package static func standardError(label: String) -> TextLogHandler {
        TextLogHandler(
            writer: .standardError(label: label, metadataProvider: nil),
            metadataProvider: LoggingSystem.metadataProvider)
    }

    /// A handler writing to `stream` (tests read what it wrote).
    package init(
        label: String, stream: some TextOutputStream & Sendable, metadataProvider: Logger.MetadataProvider? = nil
    ) {
        self.init(
            writer: StreamLogHandler(label: label, stream: stream, metadataProvider: nil),
            metadataProvider: metadataProvider)
    }

    private init(writer: StreamLogHandler, metadataProvider: Logger.MetadataProvider?) {
        self.writer = writer
        self.metadataProvider = metadataProvider
    }

    package subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// The logger's metadata, the provider's and the call's (later ones winning, as
    /// `StreamLogHandler` merges them) handed to the writer with the line.
    package func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get(), !provided.isEmpty { merged.merge(provided) { $1 } }
        if let explicit = event.metadata, !explicit.isEmpty { merged.merge(explicit) { $1 } }
        var event = event
        event.metadata = merged
        writer.log(event: event)
    }
}
