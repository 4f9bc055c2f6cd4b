import Foundation
package import Yams

/// Problems gathered while reading, for a check that reports every one (`herald config check`).
package final class ConfigurationProblems {
    package private(set) var all: [ConfigurationError] = []

    package init() {}

    package func add(_ problem: ConfigurationError) { all.append(problem) }
}

/// Walks the YAML tree, keeping the path and line of every value for error messages.
package struct YAMLReader {
    package let file: String
    /// Relative paths in the file are taken from here.
    package let directory: String
    /// Where problems go when reading should go on past them; nil: the first one is thrown.
    package let problems: ConfigurationProblems?

    package init(file: String, directory: String, problems: ConfigurationProblems? = nil) {
        self.file = file
        self.directory = directory
        self.problems = problems
    }

    /// `body`'s value; a problem in it is thrown, or, when problems are gathered, recorded and
    /// nil returned so that the reading goes on with the next key.
    package func attempt<Value>(_ body: () throws(ConfigurationError) -> Value) throws(ConfigurationError) -> Value? {
        do {
            return try body()
        } catch {
            try report(error)
            return nil
        }
    }

    /// Throws `problem`, or, when problems are gathered, records it and returns.
    package func report(_ problem: ConfigurationError) throws(ConfigurationError) {
        guard let problems else { throw problem }
        problems.add(problem)
    }

    /// A file's text, or an error naming it.
    package static func read(file: String, what: String) throws(ConfigurationError) -> String {
        guard let text = try? String(contentsOfFile: file, encoding: .utf8) else {
            throw ConfigurationError(file: file, line: nil, key: nil, message: "cannot read the \(what) file")
        }
        return text
    }

    /// The document's root node (`nil` when empty), or an error naming the file.
    package static func compose(_ yaml: String, file: String) throws(ConfigurationError) -> Node? {
        do {
            return try Yams.compose(yaml: yaml)
        } catch {
            throw ConfigurationError(file: file, line: nil, key: nil, message: "not valid YAML: \(error)")
        }
    }

    package func fail(_ node: Node?, _ key: String, _ message: String) -> ConfigurationError {
        ConfigurationError(file: file, line: node?.mark?.line, key: key, message: message)
    }

    package func mapping(_ node: Node, _ key: String, allowed: Set<String>) throws(ConfigurationError) -> [(
        String, Node
    )] {
        guard case .mapping(let mapping) = node else { throw fail(node, key, "must be a mapping") }
        var result: [(String, Node)] = []
        for (name, value) in mapping {
            guard let name = name.string else { throw fail(value, key, "keys must be strings") }
            let path = key.isEmpty ? name : key + "." + name
            guard allowed.contains(name) else {
                try report(
                    fail(value, path, "unknown key (expected one of: \(allowed.sorted().joined(separator: ", ")))"))
                continue
            }
            result.append((name, value))
        }
        return result
    }

    package func string(_ node: Node, _ key: String) throws(ConfigurationError) -> String {
        guard case .scalar(let scalar) = node else { throw fail(node, key, "must be a string") }
        return scalar.string
    }

    package func int(_ node: Node, _ key: String) throws(ConfigurationError) -> Int {
        guard case .scalar(let scalar) = node, let value = Int(scalar.string) else {
            throw fail(node, key, "must be a whole number")
        }
        return value
    }

    /// A file path; a relative one is taken from the file's directory.
    package func path(_ node: Node, _ key: String) throws(ConfigurationError) -> String {
        let value = try string(node, key)
        return value.hasPrefix("/") || directory.isEmpty ? value : directory + "/" + value
    }
}
