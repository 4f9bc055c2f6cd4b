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
        var activities: [CatalogActivity] = []
        let sections: Set<String> = ["app", "types", "tracks", "triggers", "jobs", "activities"]
        for (name, value) in try reader.mapping(root, "", allowed: sections) {
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
            } else if name == "activities" {
                guard case .mapping(let mapping) = value else {
                    throw reader.fail(value, "activities", "must be a mapping of activity type name → activity type")
                }
                for (activityName, activityNode) in mapping {
                    guard let activityName = activityName.string else {
                        throw reader.fail(activityNode, "activities", "activity type names are strings")
                    }
                    activities.append(try activity(activityName, activityNode, reader))
                }
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
        return Catalog(
            app: app, types: types, tracks: tracks, triggers: triggers, jobs: jobs, activities: activities)
    }

    /// A mapping of name → text (templates).
    static func texts(_ node: Node, _ key: String, _ reader: YAMLReader) throws(ConfigurationError) -> [String:
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

    static func bool(_ node: Node, _ key: String, _ reader: YAMLReader) throws(ConfigurationError) -> Bool {
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

    /// `copy: {LOCALE: {title, subtitle?, body}}` with the parts `allowed`.
    private static func copies(_ node: Node, _ key: String, _ allowed: Set<String>, _ reader: YAMLReader)
        throws(ConfigurationError) -> [String: CatalogCopy]
    {
        guard case .mapping(let locales) = node else { throw reader.fail(node, key, "a mapping of locale → copy") }
        var copies: [String: CatalogCopy] = [:]
        for (localeNode, copyNode) in locales {
            let locale = localeNode.string ?? "?"
            var copy = CatalogCopy(line: copyNode.mark?.line)
            for (part, textNode) in try reader.mapping(copyNode, key + "." + locale, allowed: allowed) {
                let text = try reader.string(textNode, "\(key).\(locale).\(part)")
                switch part {
                case "title": copy.title = text
                case "subtitle": copy.subtitle = text
                default: copy.body = text
                }
            }
            copies[locale] = copy
        }
        return copies
    }

    /// `activities.NAME: {attributes_type, stakes?, sound?, placeholders?, copy}`.
    private static func activity(_ name: String, _ node: Node, _ reader: YAMLReader) throws(ConfigurationError)
        -> CatalogActivity
    {
        var activity = CatalogActivity(name: name)
        activity.line = node.mark?.line
        let key = "activities." + name
        let allowed: Set<String> = ["attributes_type", "stakes", "sound", "placeholders", "copy"]
        for (field, value) in try reader.mapping(node, key, allowed: allowed) {
            let fieldKey = key + "." + field
            switch field {
            case "attributes_type": activity.attributesType = try reader.string(value, fieldKey)
            case "stakes":
                guard let stakes = Stakes(rawValue: try reader.string(value, fieldKey)) else {
                    throw reader.fail(value, fieldKey, "low, medium, high or failure")
                }
                activity.stakes = stakes
            case "sound": activity.sound = try reader.string(value, fieldKey)
            case "placeholders":
                guard case .sequence(let names) = value else { throw reader.fail(value, fieldKey, "a list of names") }
                for nameNode in names { activity.placeholders.append(try reader.string(nameNode, fieldKey)) }
            default: activity.copy = try copies(value, fieldKey, ["title", "body"], reader)
            }
        }
        return activity
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
            case "copy": type.copy = try copies(value, fieldKey, ["title", "subtitle", "body"], reader)
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
                    guard !id.isEmpty, id.utf8.count <= ActionTokenLayout.maximumActionBytes,
                        id.unicodeScalars.allSatisfy({
                            $0.isASCII && (CharacterSet.alphanumerics.contains($0) || "_-.".unicodeScalars.contains($0))
                        }),
                        id != ActionTokenLayout.tapAction
                    else {
                        throw reader.fail(
                            actionNode, fieldKey + ".id",
                            "1 to \(ActionTokenLayout.maximumActionBytes) letters, digits, _, - or . (and not \"default\", which is a tap)"
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
