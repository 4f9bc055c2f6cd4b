import Foundation
import HeraldPayload

/// Text the store's SQL is made of on both databases: bound lists, JSON arrays, placeholders
/// and the millisecond timestamps rows keep.
enum SQLText {
    /// On SQLite, a list longer than this is bound as one JSON array (`jsonEach`): no statement
    /// with thousands of values to encode, parse and bind (a due wave names 5,000 at a time).
    static let boundListLimit = 64

    /// `(…)` for `IN`: the values of the JSON array bound at `placeholder` (SQLite).
    static func jsonEach(_ placeholder: String) -> String { "(SELECT value FROM json_each(\(placeholder)))" }

    /// `[1,2,3]`: ids bound as one JSON array, for SQLite's `json_each`.
    static func jsonArray(_ ids: some Collection<Int64>) -> String {
        var text = "["
        text.reserveCapacity(ids.count * 8 + 2)
        for (index, id) in ids.enumerated() {
            if index > 0 { text += "," }
            text += String(id)
        }
        return text + "]"
    }

    /// A JSON array of strings.
    static func jsonArray(strings: some Collection<String>) -> String {
        var json = "["
        for (index, string) in strings.enumerated() {
            if index > 0 { json += "," }
            appendJSON(string, to: &json)
        }
        return json + "]"
    }

    /// The strings of a JSON array (none when `json` is nil or not one).
    static func jsonStrings(_ json: String?) -> [String] {
        guard let json else { return [] }
        return (try? JSONDecoder().decode([String].self, from: Data(json.utf8))) ?? []
    }

    /// `text` as a JSON string: quotes, backslashes and control characters escaped.
    static func appendJSON(_ text: String, to json: inout String) {
        // Most texts (ids, tokens) need no escape: appended as they are, without a copy.
        guard text.utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) else {
            json += "\""
            json += text
            json += "\""
            return
        }
        var writer = JSONWriter(capacity: text.utf8.count + 8)
        writer.string(text)
        json += String(decoding: writer.bytes, as: UTF8.self)
    }

    /// `$from, $from+1, …` for `count` bound values.
    static func placeholders(_ count: Int, from first: Int) -> String {
        (0..<count).map { "$\(first + $0)" }.joined(separator: ", ")
    }

    /// A stored timestamp (Unix milliseconds) as a date.
    static func date(_ milliseconds: Int64) -> Date { Date(timeIntervalSince1970: Double(milliseconds) / 1000) }
}
