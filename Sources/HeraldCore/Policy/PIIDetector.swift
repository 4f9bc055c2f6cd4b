import Foundation
package import HeraldPayload
import Synchronization

/// Finds personal data in notification text. Built-in detectors cover e-mail addresses,
/// phone numbers, card numbers (Luhn-checked) and street addresses; apps add their own patterns.
package struct PIIDetector: Sendable {
    package var name: String
    private let expression: NSRegularExpressionBox
    private let validate: @Sendable (String) -> Bool
    /// Answers for recent texts: a fan-out asks about the same title and body for every device
    /// (the regular expressions were 5–7% of a typed fan-out's CPU).
    private let memo = PIIMemo()

    /// A detector from a regular expression (ICU syntax, case-insensitive).
    package init(name: String, pattern: String, validate: @escaping @Sendable (String) -> Bool = { _ in true }) throws {
        self.name = name
        self.expression = NSRegularExpressionBox(try NSRegularExpression(pattern: pattern, options: [.caseInsensitive]))
        self.validate = validate
    }

    /// Whether `text` contains a match.
    package func matches(_ text: String) -> Bool {
        if let known = memo.answer(text) { return known }
        let range = NSRange(text.startIndex..., in: text)
        var found = false
        for match in expression.value.matches(in: text, range: range) {
            if let span = Range(match.range, in: text), validate(String(text[span])) {
                found = true
                break
            }
        }
        memo.remember(text, found)
        return found
    }

    // The built-in patterns run in time linear in the text: every repetition that could give
    // back characters is possessive (`++`, `*+`), and a match may only start where a run of its
    // characters starts (the look-behinds), so no input makes the engine retry a run from each
    // of its positions. The phone pattern checks the number's last character in `validate`
    // instead of a look-ahead inside the run, which would make a possessive run backtrack; the
    // look-aheads it has come after the run, where a failure only ends the attempt.
    //
    // A number joined to a word by a hyphen is part of an identifier, not personal data: the
    // digit-only groups of a UUID (`library-abcdef12-3456-4789-8901-…`: about one random UUID in
    // two hundred) read as a phone number otherwise, and a thread id or deep link built from one
    // lost it.
    package static let email = try! PIIDetector(
        name: "email",
        pattern: #"(?<![A-Z0-9._%+-])[A-Z0-9._%+-]++@[A-Z0-9-]++(?:\.[A-Z0-9-]++)*?\.[A-Z]{2,}+(?![A-Z0-9-])"#)
    package static let phone = try! PIIDetector(
        name: "phone", pattern: #"(?<![\w.])(?<!\w-)\+?\d(?:[ ().-]*+\d)++(?!-\w)(?:\w|\.(?=\d))?"#,
        validate: { text in
            // A number followed by a letter, a digit or a decimal point and a digit is part of
            // something else; a full stop after it ends a sentence.
            guard let last = text.last, last.isNumber else { return false }
            return (9...15).contains(text.filter(\.isNumber).count)
        })
    package static let cardNumber = try! PIIDetector(
        name: "card_number", pattern: #"(?<!\w)(?<!\w-)(?:\d[ -]?){12,18}\d(?!\w)(?!-\w)"#,
        validate: { text in Self.passesLuhn(text.filter(\.isNumber)) })
    package static let streetAddress = try! PIIDetector(
        name: "street_address",
        pattern:
            #"\b\d{1,5}+\s++(?:[A-Z][a-z]*+\s++){1,3}?(?:street|st|avenue|ave|road|rd|boulevard|blvd|lane|ln|drive|dr|way|court|ct|rue|place|pl)\b\.?"#
    )

    package static let builtIn: [PIIDetector] = [.email, .phone, .cardNumber, .streetAddress]

    static func passesLuhn(_ digits: String) -> Bool {
        guard (13...19).contains(digits.count) else { return false }
        var sum = 0
        for (index, character) in digits.reversed().enumerated() {
            guard var digit = character.wholeNumberValue else { return false }
            if index % 2 == 1 {
                digit *= 2
                if digit > 9 { digit -= 9 }
            }
            sum += digit
        }
        return sum % 10 == 0
    }
}

extension PIIDetector {
    /// `value` without any string that a detector matches, at any depth (object members and
    /// array items are removed), and the names of the detectors that matched.
    package static func scrubbed(_ value: JSONValue, detectors: [PIIDetector]) -> (JSONValue, Set<String>) {
        var found = Set<String>()
        func walk(_ value: JSONValue) -> JSONValue? {
            switch value {
            case .string(let text):
                guard let detector = detectors.first(where: { $0.matches(text) }) else { return value }
                found.insert(detector.name)
                return nil
            case .object(let members): return .object(members.compactMapValues(walk))
            case .array(let items): return .array(items.compactMap(walk))
            default: return value
            }
        }
        guard !detectors.isEmpty else { return (value, []) }
        return (walk(value) ?? .null, found)
    }
}

/// A detector's answers for the last few thousand texts (forgotten all at once when full).
final class PIIMemo: Sendable {
    private let answers = Mutex<[String: Bool]>([:])
    static let capacity = 4_096
    /// Texts longer than this are not kept (their hashing would cost what the match saves).
    static let longest = 1_024

    func answer(_ text: String) -> Bool? {
        guard text.utf8.count <= Self.longest else { return nil }
        return answers.withLock { $0[text] }
    }

    func remember(_ text: String, _ found: Bool) {
        guard text.utf8.count <= Self.longest else { return }
        answers.withLock { answers in
            if answers.count >= Self.capacity { answers.removeAll(keepingCapacity: true) }
            answers[text] = found
        }
    }
}

/// NSRegularExpression is immutable and thread-safe once made.
final class NSRegularExpressionBox: @unchecked Sendable {
    let value: NSRegularExpression
    init(_ value: NSRegularExpression) { self.value = value }
}
