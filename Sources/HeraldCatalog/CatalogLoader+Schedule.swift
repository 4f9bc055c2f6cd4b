import Foundation
import HeraldCore
import HeraldPayload
import Yams

/// The catalog's triggers, jobs and lifecycle tracks.
extension CatalogLoader {
    /// `triggers[i]: {event, type?, when?, data?, cancel?, cancel_key?, badge?, attributes?}`.
    static func trigger(_ node: Node, _ key: String, _ reader: YAMLReader) throws(ConfigurationError)
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

    static func test(_ node: Node, _ key: String, _ reader: YAMLReader) throws(ConfigurationError)
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
    static func job(_ node: Node, _ key: String, _ reader: YAMLReader) throws(ConfigurationError) -> CatalogJob {
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
    static func track(_ name: String, _ node: Node, _ reader: YAMLReader) throws(ConfigurationError)
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

    static func step(_ node: Node, _ key: String, _ reader: YAMLReader) throws(ConfigurationError)
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
}
