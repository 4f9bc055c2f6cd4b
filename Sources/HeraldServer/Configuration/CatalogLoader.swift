import Foundation
package import HeraldCore
import HeraldPayload
import Yams

/// Reads a catalog YAML file into `Catalog`; errors name the file, line and key.
package enum CatalogLoader {
    /// Loads and checks a catalog; the first problem (parse or check) is thrown.
    package static func load(file: String) throws(ConfigurationError) -> Catalog {
        let catalog = try parse(file: file)
        if let problem = CatalogChecker.check(catalog).first {
            throw ConfigurationError(file: file, line: problem.line, key: problem.key, message: problem.message)
        }
        return catalog
    }

    /// Parses without checking (for `herald catalog check`, which lists every problem).
    package static func parse(file: String) throws(ConfigurationError) -> Catalog {
        try parse(yaml: YAMLReader.read(file: file, what: "catalog"), file: file)
    }

    package static func parse(yaml: String, file: String) throws(ConfigurationError) -> Catalog {
        guard let root = try YAMLReader.compose(yaml, file: file) else {
            throw ConfigurationError(file: file, line: nil, key: nil, message: "the catalog is empty")
        }
        let reader = YAMLReader(file: file, directory: "")
        var app = CatalogApp()
        var types: [CatalogType] = []
        var tracks: [CatalogTrack] = []
        var triggers: [CatalogTrigger] = []
        var jobs: [CatalogJob] = []
        for (name, value) in try reader.mapping(root, "", allowed: ["app", "types", "tracks", "triggers", "jobs"]) {
            if name == "triggers" || name == "jobs" {
                guard case .sequence(let items) = value else { throw reader.fail(value, name, "must be a list") }
                for (index, item) in items.enumerated() {
                    if name == "triggers" {
                        triggers.append(try trigger(item, "triggers[\(index)]", reader))
                    } else {
                        jobs.append(try job(item, "jobs[\(index)]", reader))
                    }
                }
            } else if name == "app" {
                app = try self.app(value, reader)
            } else if name == "tracks" {
                guard case .mapping(let mapping) = value else {
                    throw reader.fail(value, "tracks", "must be a mapping of track name → track")
                }
                for (trackName, trackNode) in mapping {
                    guard let trackName = trackName.string else {
                        throw reader.fail(trackNode, "tracks", "track names are strings")
                    }
                    tracks.append(try track(trackName, trackNode, reader))
                }
            } else {
                guard case .mapping(let mapping) = value else {
                    throw reader.fail(value, "types", "must be a mapping of type name → type")
                }
                for (typeName, typeNode) in mapping {
                    guard let typeName = typeName.string else {
                        throw reader.fail(typeNode, "types", "type names are strings")
                    }
                    types.append(try type(typeName, typeNode, reader))
                }
            }
        }
        return Catalog(app: app, types: types, tracks: tracks, triggers: triggers, jobs: jobs)
    }

    /// A mapping of name → text (templates).
    private static func texts(_ node: Node, _ key: String, _ reader: YAMLReader) throws(ConfigurationError) -> [String:
        String]
    {
        guard case .mapping(let pairs) = node else { throw reader.fail(node, key, "a mapping of name → text") }
        var texts: [String: String] = [:]
        for (nameNode, textNode) in pairs {
            let name = nameNode.string ?? "?"
            texts[name] = try reader.string(textNode, key + "." + name)
        }
        return texts
    }

    /// `triggers[i]: {event, type?, when?, data?, cancel?, cancel_key?, badge?, attributes?}`.
    private static func trigger(_ node: Node, _ key: String, _ reader: YAMLReader) throws(ConfigurationError)
        -> CatalogTrigger
    {
        var trigger = CatalogTrigger(event: "")
        trigger.line = node.mark?.line
        let allowed: Set<String> = ["event", "type", "when", "data", "cancel", "cancel_key", "badge", "attributes"]
        for (field, value) in try reader.mapping(node, key, allowed: allowed) {
            let fieldKey = key + "." + field
            switch field {
            case "event": trigger.event = try reader.string(value, fieldKey)
            case "type": trigger.type = try reader.string(value, fieldKey)
            case "data": trigger.data = try texts(value, fieldKey, reader)
            case "attributes": trigger.attributes = try texts(value, fieldKey, reader)
            case "cancel_key": trigger.cancelKey = try reader.string(value, fieldKey)
            case "cancel":
                guard case .sequence(let keys) = value else {
                    throw reader.fail(value, fieldKey, "a list of cancel keys")
                }
                for keyNode in keys { trigger.cancel.append(try reader.string(keyNode, fieldKey)) }
            case "badge":
                var counter: String?
                var delta: Int?
                var setTo: Int?
                for (part, partNode) in try reader.mapping(value, fieldKey, allowed: ["counter", "delta", "value"]) {
                    switch part {
                    case "counter": counter = try reader.string(partNode, fieldKey + ".counter")
                    case "delta": delta = try reader.int(partNode, fieldKey + ".delta")
                    default: setTo = try reader.int(partNode, fieldKey + ".value")
                    }
                }
                guard let counter, (delta == nil) != (setTo == nil) else {
                    throw reader.fail(value, fieldKey, "needs counter and one of delta or value")
                }
                trigger.badge = BadgeChange(
                    counter: counter, delta: delta.map(Int64.init), value: setTo.map(Int64.init))
            default:
                guard case .mapping(let conditions) = value else {
                    throw reader.fail(
                        value, fieldKey,
                        "a mapping of data.NAME or user.NAME → value or {eq|ne|in|exists|gt|gte|lt|lte: value}")
                }
                for (pathNode, testNode) in conditions {
                    let path = pathNode.string ?? "?"
                    let conditionKey = fieldKey + "." + path
                    guard path.hasPrefix("data.") || path.hasPrefix("user."), path.count > 5 else {
                        throw reader.fail(
                            pathNode, conditionKey,
                            "a condition names data.NAME (the event's data) or user.NAME (an attribute)")
                    }
                    trigger.when.append(TriggerCondition(path: path, test: try test(testNode, conditionKey, reader)))
                }
            }
        }
        guard !trigger.event.isEmpty else { throw reader.fail(node, key, "a trigger needs event") }
        return trigger
    }

    private static func test(_ node: Node, _ key: String, _ reader: YAMLReader) throws(ConfigurationError)
        -> TriggerCondition.Test
    {
        guard case .mapping(let pairs) = node else { return .equals(try reader.string(node, key)) }
        guard pairs.count == 1, let (opNode, operand) = pairs.first, let op = opNode.string,
            TriggerCondition.operators.contains(op)
        else {
            throw reader.fail(node, key, "one operator of eq, ne, in, exists, gt, gte, lt, lte")
        }
        func number() throws(ConfigurationError) -> Double {
            guard let value = Double(try reader.string(operand, key + "." + op)) else {
                throw reader.fail(operand, key + "." + op, "a number")
            }
            return value
        }
        switch op {
        case "eq": return .equals(try reader.string(operand, key + ".eq"))
        case "ne": return .notEquals(try reader.string(operand, key + ".ne"))
        case "exists": return .exists(try bool(operand, key + ".exists", reader))
        case "gt": return .greater(try number(), orEqual: false)
        case "gte": return .greater(try number(), orEqual: true)
        case "lt": return .less(try number(), orEqual: false)
        case "lte": return .less(try number(), orEqual: true)
        default:
            guard case .sequence(let options) = operand else {
                throw reader.fail(operand, key + ".in", "a list of values")
            }
            var values: [String] = []
            for option in options { values.append(try reader.string(option, key + ".in")) }
            return .oneOf(values)
        }
    }

    /// `jobs[i]: {name, type, every: "day at HH:MM", when: {attribute, within | in}}`.
    private static func job(_ node: Node, _ key: String, _ reader: YAMLReader) throws(ConfigurationError) -> CatalogJob
    {
        var name: String?
        var type: String?
        var at: LocalTime?
        var attribute: String?
        var condition: CatalogJob.Condition?
        for (field, value) in try reader.mapping(node, key, allowed: ["name", "type", "every", "when"]) {
            let fieldKey = key + "." + field
            switch field {
            case "name": name = try reader.string(value, fieldKey)
            case "type": type = try reader.string(value, fieldKey)
            case "every":
                let text = try reader.string(value, fieldKey)
                guard text.hasPrefix("day at "), let time = LocalTime(String(text.dropFirst("day at ".count))) else {
                    throw reader.fail(value, fieldKey, "\"day at HH:MM\" (in each user's time zone)")
                }
                at = time
            default:
                for (part, partNode) in try reader.mapping(value, fieldKey, allowed: ["attribute", "within", "in"]) {
                    let partKey = fieldKey + "." + part
                    if part == "attribute" {
                        attribute = try reader.string(partNode, partKey)
                        continue
                    }
                    guard let seconds = HeraldDuration.seconds(try reader.string(partNode, partKey)), seconds > 0,
                        seconds <= 366 * 86_400
                    else {
                        throw reader.fail(partNode, partKey, "a duration such as 24h or 3d")
                    }
                    if part == "within" {
                        condition = .within(seconds)
                    } else {
                        guard seconds.truncatingRemainder(dividingBy: 86_400) == 0 else {
                            throw reader.fail(partNode, partKey, "whole days, such as 3d")
                        }
                        condition = .inDays(Int(seconds / 86_400))
                    }
                }
            }
        }
        guard let name, !name.isEmpty else { throw reader.fail(node, key, "a job needs name") }
        guard let type else { throw reader.fail(node, key, "a job needs type") }
        guard let at else { throw reader.fail(node, key, "a job needs every (\"day at 09:00\")") }
        guard let attribute, let condition else {
            throw reader.fail(node, key, "a job needs when: {attribute, within | in}")
        }
        return CatalogJob(
            name: name, type: type, at: at, attribute: attribute, condition: condition, line: node.mark?.line)
    }

    /// `tracks.NAME: {anchor, cancel_key?, steps: [{id, type, after, at?, unless?, data?}]}`.
    private static func track(_ name: String, _ node: Node, _ reader: YAMLReader) throws(ConfigurationError)
        -> CatalogTrack
    {
        let key = "tracks." + name
        var anchor: String?
        var cancelKey: String?
        var steps: [CatalogStep] = []
        for (field, value) in try reader.mapping(node, key, allowed: ["anchor", "cancel_key", "steps"]) {
            let fieldKey = key + "." + field
            switch field {
            case "anchor": anchor = try reader.string(value, fieldKey)
            case "cancel_key":
                let text = try reader.string(value, fieldKey)
                guard !text.isEmpty, text.utf8.count <= 128 else {
                    throw reader.fail(value, fieldKey, "1 to 128 bytes")
                }
                cancelKey = text
            default:
                guard case .sequence(let items) = value else { throw reader.fail(value, fieldKey, "a list of steps") }
                for (index, item) in items.enumerated() {
                    steps.append(try step(item, "\(fieldKey)[\(index)]", reader))
                }
            }
        }
        guard let anchor else {
            throw reader.fail(node, key, "needs anchor (what the steps count from, e.g. trial_started)")
        }
        guard !steps.isEmpty else { throw reader.fail(node, key, "needs at least one step") }
        return CatalogTrack(name: name, anchor: anchor, steps: steps, cancelKey: cancelKey, line: node.mark?.line)
    }

    private static func step(_ node: Node, _ key: String, _ reader: YAMLReader) throws(ConfigurationError)
        -> CatalogStep
    {
        var id: String?
        var type: String?
        var after: TimeInterval?
        var at: LocalTime?
        var unless: String?
        var data: [String: String] = [:]
        for (field, value) in try reader.mapping(node, key, allowed: ["id", "type", "after", "at", "unless", "data"]) {
            let fieldKey = key + "." + field
            switch field {
            case "id": id = try reader.string(value, fieldKey)
            case "type": type = try reader.string(value, fieldKey)
            case "after":
                guard let seconds = HeraldDuration.seconds(try reader.string(value, fieldKey)), seconds >= 0,
                    seconds <= 366 * 86_400
                else {
                    throw reader.fail(value, fieldKey, "a duration such as 2d, 36h or 90m (0 to 366d)")
                }
                after = seconds
            case "at":
                guard let time = LocalTime(try reader.string(value, fieldKey)) else {
                    throw reader.fail(value, fieldKey, "a time HH:MM")
                }
                at = time
            case "unless": unless = try reader.string(value, fieldKey)
            default:
                guard case .mapping(let pairs) = value else {
                    throw reader.fail(value, fieldKey, "a mapping of name → text")
                }
                for (nameNode, textNode) in pairs {
                    let name = nameNode.string ?? "?"
                    data[name] = try reader.string(textNode, fieldKey + "." + name)
                }
            }
        }
        guard let id, !id.isEmpty else { throw reader.fail(node, key, "a step needs an id") }
        guard let type else { throw reader.fail(node, key, "a step needs a type") }
        guard let after else { throw reader.fail(node, key, "a step needs after (a duration from the anchor)") }
        return CatalogStep(id: id, type: type, after: after, at: at, unless: unless, data: data, line: node.mark?.line)
    }

    private static func bool(_ node: Node, _ key: String, _ reader: YAMLReader) throws(ConfigurationError) -> Bool {
        guard case .scalar(let scalar) = node, let value = Bool(scalar.string.lowercased()) else {
            throw reader.fail(node, key, "must be true or false")
        }
        return value
    }

    /// `opaque: { title: …, body: … }`: the text shown when the PII guard fires.
    private static func opaque(_ node: Node, _ key: String, _ reader: YAMLReader) throws(ConfigurationError) -> (
        String?, String?
    ) {
        var title: String?
        var body: String?
        for (part, textNode) in try reader.mapping(node, key, allowed: ["title", "body"]) {
            if part == "title" {
                title = try reader.string(textNode, key + ".title")
            } else {
                body = try reader.string(textNode, key + ".body")
            }
        }
        return (title, body)
    }

    private static func app(_ node: Node, _ reader: YAMLReader) throws(ConfigurationError) -> CatalogApp {
        var app = CatalogApp()
        let allowed: Set<String> = [
            "name", "payload_key", "default_locale", "quiet_hours", "pacing_limit", "grouping", "pii", "copy_rules",
            "opaque", "android_channel",
        ]
        for (name, value) in try reader.mapping(node, "app", allowed: allowed) {
            let key = "app." + name
            switch name {
            case "name": app.name = try reader.string(value, key)
            case "payload_key": app.payloadKey = try reader.string(value, key)
            case "default_locale": app.defaultLocale = try reader.string(value, key)
            case "android_channel": app.androidChannel = try reader.string(value, key)
            case "pacing_limit":
                app.pacingLimit = try reader.int(value, key)
                guard app.pacingLimit >= 0 else { throw reader.fail(value, key, "0 (off) or more") }
            case "opaque":
                let (title, body) = try opaque(value, key, reader)
                app.opaqueTitle = title ?? app.opaqueTitle
                app.opaqueBody = body ?? app.opaqueBody
            case "quiet_hours":
                var start: LocalTime?
                var end: LocalTime?
                for (field, timeNode) in try reader.mapping(value, key, allowed: ["start", "end"]) {
                    guard let time = LocalTime(try reader.string(timeNode, key + "." + field)) else {
                        throw reader.fail(timeNode, key + "." + field, "a time HH:MM")
                    }
                    if field == "start" { start = time } else { end = time }
                }
                guard let start, let end else { throw reader.fail(value, key, "needs start and end") }
                app.quietHours = QuietHours(start: start, end: end)
            case "grouping":
                app.groupingThreshold = 5
                for (field, fieldNode) in try reader.mapping(
                    value, key, allowed: ["threshold", "thread_id", "summary"])
                {
                    switch field {
                    case "threshold": app.groupingThreshold = try reader.int(fieldNode, key + ".threshold")
                    case "thread_id": app.groupThreadID = try reader.string(fieldNode, key + ".thread_id")
                    default: app.groupSummaryFormat = try reader.string(fieldNode, key + ".summary")
                    }
                }
            case "pii":
                guard case .mapping(let patterns) = value else {
                    throw reader.fail(value, key, "a mapping of name → regular expression")
                }
                for (patternName, patternNode) in patterns {
                    let patternKey = key + "." + (patternName.string ?? "?")
                    let pattern = try reader.string(patternNode, patternKey)
                    guard (try? NSRegularExpression(pattern: pattern)) != nil else {
                        throw reader.fail(patternNode, patternKey, "not a valid regular expression")
                    }
                    app.piiPatterns[patternName.string ?? "custom"] = pattern
                }
            default:
                let allowedRules: Set<String> = ["title_max", "body_max", "banned_phrases", "no_money"]
                for (field, fieldNode) in try reader.mapping(value, key, allowed: allowedRules) {
                    let fieldKey = key + "." + field
                    switch field {
                    case "title_max": app.copyRules.titleMaximum = try reader.int(fieldNode, fieldKey)
                    case "body_max": app.copyRules.bodyMaximum = try reader.int(fieldNode, fieldKey)
                    case "no_money": app.copyRules.noMoney = try bool(fieldNode, fieldKey, reader)
                    default:
                        guard case .sequence(let phrases) = fieldNode else {
                            throw reader.fail(fieldNode, fieldKey, "a list of phrases")
                        }
                        for phrase in phrases {
                            app.copyRules.bannedPhrases.append(try reader.string(phrase, fieldKey))
                        }
                    }
                }
            }
        }
        return app
    }

    private static func type(_ name: String, _ node: Node, _ reader: YAMLReader) throws(ConfigurationError)
        -> CatalogType
    {
        var type = CatalogType(name: name)
        type.line = node.mark?.line
        let key = "types." + name
        let allowed: Set<String> = [
            "id", "transactional", "user_controllable", "default_enabled", "stakes", "push_type", "priority", "sound",
            "interruption_level", "category", "thread_id", "collapse_id", "deep_link", "placeholders", "copy",
            "fallback_body", "actions", "goal_ctr", "opaque", "mutable_content", "android_channel",
        ]
        for (field, value) in try reader.mapping(node, key, allowed: allowed) {
            let fieldKey = key + "." + field
            switch field {
            case "id": type.id = try reader.string(value, fieldKey)
            case "transactional": type.transactional = try bool(value, fieldKey, reader)
            case "user_controllable": type.userControllable = try bool(value, fieldKey, reader)
            case "default_enabled": type.defaultEnabled = try bool(value, fieldKey, reader)
            case "stakes":
                guard let stakes = Stakes(rawValue: try reader.string(value, fieldKey)) else {
                    throw reader.fail(value, fieldKey, "low, medium, high or failure")
                }
                type.stakes = stakes
            case "push_type":
                type.pushType = APNSPushType(rawValue: try reader.string(value, fieldKey))
                guard type.pushType.isKnown else { throw reader.fail(value, fieldKey, "not an APNs push type") }
            case "priority":
                let priority = APNSPriority(rawValue: try reader.int(value, fieldKey))
                guard priority.isValid else { throw reader.fail(value, fieldKey, "10, 5 or 1") }
                type.priority = priority
            case "sound": type.sound = try reader.string(value, fieldKey)
            case "mutable_content": type.mutableContent = try bool(value, fieldKey, reader)
            case "interruption_level":
                let level = APSInterruptionLevel(rawValue: try reader.string(value, fieldKey))
                guard APSInterruptionLevel.known.contains(level) else {
                    throw reader.fail(value, fieldKey, "passive, active, time-sensitive or critical")
                }
                type.interruptionLevel = level
            case "category": type.category = try reader.string(value, fieldKey)
            case "thread_id": type.threadID = try reader.string(value, fieldKey)
            case "collapse_id": type.collapseID = try reader.string(value, fieldKey)
            case "deep_link": type.deepLink = try reader.string(value, fieldKey)
            case "android_channel": type.androidChannel = try reader.string(value, fieldKey)
            case "fallback_body": type.fallbackBody = try reader.string(value, fieldKey)
            case "opaque": (type.opaqueTitle, type.opaqueBody) = try opaque(value, fieldKey, reader)
            case "goal_ctr":
                guard case .scalar(let scalar) = value, let goal = Double(scalar.string) else {
                    throw reader.fail(value, fieldKey, "a fraction such as 0.15")
                }
                type.goalCTR = goal
            case "placeholders":
                guard case .sequence(let names) = value else { throw reader.fail(value, fieldKey, "a list of names") }
                for nameNode in names { type.placeholders.append(try reader.string(nameNode, fieldKey)) }
            case "copy":
                guard case .mapping(let locales) = value else {
                    throw reader.fail(value, fieldKey, "a mapping of locale → copy")
                }
                for (localeNode, copyNode) in locales {
                    let locale = localeNode.string ?? "?"
                    var copy = CatalogCopy(line: copyNode.mark?.line)
                    for (part, textNode) in try reader.mapping(
                        copyNode, fieldKey + "." + locale, allowed: ["title", "subtitle", "body"])
                    {
                        let text = try reader.string(textNode, "\(fieldKey).\(locale).\(part)")
                        switch part {
                        case "title": copy.title = text
                        case "subtitle": copy.subtitle = text
                        default: copy.body = text
                        }
                    }
                    type.copy[locale] = copy
                }
            default:
                guard case .sequence(let actions) = value else {
                    throw reader.fail(value, fieldKey, "a list of actions")
                }
                for actionNode in actions {
                    var id: String?
                    var title: String?
                    var action = CatalogAction(id: "", title: "")
                    let allowedAction: Set<String> = [
                        "id", "title", "authentication_required", "destructive", "text_input", "resolved",
                    ]
                    for (part, partNode) in try reader.mapping(actionNode, fieldKey, allowed: allowedAction) {
                        switch part {
                        case "id": id = try reader.string(partNode, fieldKey + ".id")
                        case "title": title = try reader.string(partNode, fieldKey + ".title")
                        case "authentication_required":
                            action.authenticationRequired = try bool(partNode, fieldKey + "." + part, reader)
                        case "destructive": action.destructive = try bool(partNode, fieldKey + "." + part, reader)
                        case "resolved":
                            let label = try reader.string(partNode, fieldKey + ".resolved")
                            guard !label.isEmpty, label.count <= 100 else {
                                throw reader.fail(partNode, fieldKey + ".resolved", "1 to 100 characters")
                            }
                            action.resolvedLabel = label
                        default: action.textInput = try bool(partNode, fieldKey + "." + part, reader)
                        }
                    }
                    guard let id, let title else {
                        throw reader.fail(actionNode, fieldKey, "an action needs id and title")
                    }
                    // The id travels in each delivery's action token and as a key of its payload.
                    guard !id.isEmpty, id.utf8.count <= ActionToken.maximumActionBytes,
                        id.unicodeScalars.allSatisfy({
                            $0.isASCII && (CharacterSet.alphanumerics.contains($0) || "_-.".unicodeScalars.contains($0))
                        }),
                        id != OpenedBody.defaultAction
                    else {
                        throw reader.fail(
                            actionNode, fieldKey + ".id",
                            "1 to \(ActionToken.maximumActionBytes) letters, digits, _, - or . (and not \"default\", which is a tap)"
                        )
                    }
                    action.id = id
                    action.title = title
                    type.actions.append(action)
                }
            }
        }
        return type
    }
}
