/// A configuration problem, with where it is.
package struct ConfigurationError: Error, Sendable, CustomStringConvertible {
    package var file: String
    package var line: Int?
    package var key: String?
    package var message: String

    package init(file: String, line: Int?, key: String?, message: String) {
        self.file = file
        self.line = line
        self.key = key
        self.message = message
    }

    package var description: String {
        var location = file
        if let line { location += ":\(line)" }
        if let key { return "\(location): \(key): \(message)" }
        return "\(location): \(message)"
    }
}
