package import Foundation

/// The decision trace as stored per delivery: a JSON array of `{rule, message, at}`, appended to
/// each time the engine looks at the delivery again (a deferred one comes back).
package enum DecisionTrace {
    package struct Entry: Codable, Sendable, Hashable {
        package var rule: String
        package var message: String
        package var at: String

        package init(rule: String, message: String, at: String) {
            self.rule = rule
            self.message = message
            self.at = at
        }
    }

    package static func appending(_ steps: [PolicyStep], at date: Date, to stored: String?) -> String? {
        guard !steps.isEmpty else { return stored }
        var entries = entries(stored)
        let at = HeraldTime.format(date)
        entries += steps.map { Entry(rule: $0.rule, message: $0.message, at: at) }
        return text(entries)
    }

    /// The entries as stored: a JSON array.
    /// Keys sorted: the encoder otherwise orders an entry's keys differently from one encoding
    /// to the next, and the same trace would be stored as several texts.
    package static func text(_ entries: [Entry]) -> String? {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? encoder.encode(entries)).map { String(decoding: $0, as: UTF8.self) }
    }

    package static func entries(_ stored: String?) -> [Entry] {
        stored.flatMap { try? JSONDecoder().decode([Entry].self, from: Data($0.utf8)) } ?? []
    }
}
