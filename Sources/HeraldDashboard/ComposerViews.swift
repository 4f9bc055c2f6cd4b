import Foundation
import HeraldAPI
import HeraldCore
import HeraldEngine
import HeraldPayload
import HeraldStore
import Hummingbird
import Logging

/// The composer's form as sent, kept to show it again.
struct ComposeForm {
    var type = ""
    var title = ""
    var body = ""
    var data = ""
    var userIDs = ""
    var deliverAt = ""
    var cancelKey = ""

    init() {}

    init(_ fields: [String: String]) {
        func field(_ name: String) -> String { fields[name]?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "" }
        type = field("type")
        title = field("title")
        body = field("body")
        data = field("data")
        userIDs = field("user_ids")
        deliverAt = field("deliver_at")
        cancelKey = field("cancel_key")
    }

    /// The form's label for an API field an error names.
    static func label(of field: String) -> String {
        switch field {
        case "to", "to.user_ids": "Users"
        case "alert", "alert.title": "Title"
        case "alert.body": "Body"
        case "deliver_at": "Deliver at"
        case "cancel_key": "Cancel key"
        case "type": "Type"
        default: field.hasPrefix("data") ? "Data (\(field))" : field
        }
    }

    /// The users named: separated by commas, spaces or lines.
    var users: [String] {
        var seen = Set<String>()
        return userIDs.split(whereSeparator: { $0 == "," || $0.isWhitespace }).map(String.init).filter {
            seen.insert($0).inserted
        }
    }

    /// The send the form asks for (what `POST …/notifications` would take); the first problem
    /// names its field.
    func sendRequest() throws(CompositionError) -> SendRequest {
        let users = self.users
        guard !users.isEmpty else {
            throw CompositionError(.missing, field: "to.user_ids", message: "to.user_ids is required")
        }
        guard users.count <= Dashboard.composerMaximumUsers else {
            throw .invalid("to.user_ids", "at most \(Dashboard.composerMaximumUsers) users; send to more with the API")
        }
        var draft = NotificationDraft()
        if !type.isEmpty { draft.type = type }
        if !title.isEmpty || !body.isEmpty {
            draft.alert = .init(title: title.isEmpty ? nil : title, body: body.isEmpty ? nil : body)
        } else if type.isEmpty {
            throw .invalid("alert.body", "pick a type or write a title or body")
        }
        if !data.isEmpty { draft.data = try parsedData() }
        if !deliverAt.isEmpty {
            // An RFC 3339 time, or the browser's date-time field (taken as UTC).
            draft.deliverAt =
                HeraldTime.parse(deliverAt) != nil ? deliverAt : deliverAt + (deliverAt.count == 16 ? ":00Z" : "Z")
        }
        if !cancelKey.isEmpty, !SendLimits.isValidCancelKey(cancelKey) {
            throw .invalid("cancel_key", "cancel_key is 1 to \(SendLimits.maximumCancelKey) bytes")
        }
        return SendRequest(recipients: .users(users), draft: draft, cancelKey: cancelKey.isEmpty ? nil : cancelKey)
    }

    /// `data`: a JSON object, or `key=value` lines.
    func parsedData() throws(CompositionError) -> JSONValue {
        if data.hasPrefix("{") {
            guard let value = try? JSONDecoder().decode(JSONValue.self, from: Data(data.utf8)), value.objectValue != nil
            else {
                throw .invalid("data", "data is a JSON object or key=value lines")
            }
            return value
        }
        var object: [String: JSONValue] = [:]
        for line in data.split(whereSeparator: \.isNewline) {
            let line = line.trimmingCharacters(in: .whitespaces)
            guard !line.isEmpty else { continue }
            guard let equals = line.firstIndex(of: "="), equals != line.startIndex else {
                throw .invalid("data", "\"\(line.prefix(40))\" is not key=value")
            }
            object[String(line[..<equals]).trimmingCharacters(in: .whitespaces)] = .string(
                String(line[line.index(after: equals)...]).trimmingCharacters(in: .whitespaces))
        }
        return .object(object)
    }
}

struct ComposePage {
    var app: String
    var csrf: String
    var types: [NotificationsPage.Option]
    var form: ComposeForm
    var error: String?
    var previewed: Bool
    var devices: [SendPreview]
    var maximumUsers: Int
}
