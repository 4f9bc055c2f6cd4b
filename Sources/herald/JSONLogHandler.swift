import Foundation
import Logging

/// Writes one JSON object per log line to standard error: `timestamp` (RFC 3339, UTC,
/// milliseconds), `level`, `label`, `message`, `source` and `metadata` (the handler's, the
/// logger's and the call's, later ones winning), for log collectors that parse lines.
struct JSONLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level = .info
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?

    init(label: String, metadataProvider: Logger.MetadataProvider? = LoggingSystem.metadataProvider) {
        self.label = label
        self.metadataProvider = metadataProvider
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { $1 } }
        if let extra = event.metadata { merged.merge(extra) { $1 } }
        let line = Self.line(
            date: Date(), level: event.level, label: label, message: "\(event.message)", source: event.source,
            metadata: merged)
        FileHandle.standardError.write(Data(line.utf8))
    }

    /// One log line, newline included; metadata keys sorted so equal events give equal lines.
    static func line(
        date: Date, level: Logger.Level, label: String, message: String, source: String, metadata: Logger.Metadata
    ) -> String {
        var out = "{\"timestamp\":"
        appendString(timestamp(date), to: &out)
        out += ",\"level\":"
        appendString(level.rawValue, to: &out)
        out += ",\"label\":"
        appendString(label, to: &out)
        out += ",\"message\":"
        appendString(message, to: &out)
        out += ",\"source\":"
        appendString(source, to: &out)
        if !metadata.isEmpty {
            out += ",\"metadata\":"
            append(.dictionary(metadata), to: &out)
        }
        out += "}\n"
        return out
    }

    private static func timestamp(_ date: Date) -> String {
        date.formatted(
            Date.ISO8601FormatStyle(includingFractionalSeconds: true, timeZone: TimeZone(secondsFromGMT: 0) ?? .gmt))
    }

    private static func append(_ value: Logger.Metadata.Value, to out: inout String) {
        switch value {
        case .string(let string): appendString(string, to: &out)
        case .stringConvertible(let convertible): appendString(convertible.description, to: &out)
        case .array(let values):
            out += "["
            for (index, element) in values.enumerated() {
                if index > 0 { out += "," }
                append(element, to: &out)
            }
            out += "]"
        case .dictionary(let dictionary):
            out += "{"
            for (index, entry) in dictionary.sorted(by: { $0.key < $1.key }).enumerated() {
                if index > 0 { out += "," }
                appendString(entry.key, to: &out)
                out += ":"
                append(entry.value, to: &out)
            }
            out += "}"
        }
    }

    /// A JSON string literal: quotes, backslashes and control characters escaped.
    private static func appendString(_ string: String, to out: inout String) {
        out += "\""
        for scalar in string.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case let control where control.value < 0x20:
                let hex = String(control.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        out += "\""
    }
}
