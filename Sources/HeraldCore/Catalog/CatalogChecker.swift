import Foundation
import HeraldPayload

/// A problem in a catalog, with where it is.
package struct CatalogProblem: Sendable, Hashable, CustomStringConvertible {
    package var line: Int?
    package var key: String
    package var message: String

    package var description: String { "\(line.map { "\($0): " } ?? "")\(key): \(message)" }
}

/// Checks a catalog: unknown placeholders, missing default-locale copy, copy over the app's
/// limits, more than two actions, high-stakes actions without authentication, banned copy.
package enum CatalogChecker {
    package static func check(_ catalog: Catalog) -> [CatalogProblem] {
        var problems: [CatalogProblem] = []
        let rules = catalog.app.copyRules
        var seen = Set<String>()
        problems += checkTimeAndEvents(catalog)
        problems += checkActivities(catalog)
        for type in catalog.types {
            let key = "types.\(type.name)"
            if !seen.insert(type.name).inserted {
                problems.append(CatalogProblem(line: type.line, key: key, message: "the type appears twice"))
            }
            let known = Set(type.placeholders)
            // Silent (background) pushes show nothing, so they need no copy.
            if type.copy[catalog.app.defaultLocale] == nil && type.pushType != .background {
                problems.append(
                    CatalogProblem(
                        line: type.line, key: key + ".copy",
                        message: "no copy for the default locale \"\(catalog.app.defaultLocale)\""))
            }
            for (field, template) in [
                ("thread_id", type.threadID), ("collapse_id", type.collapseID), ("deep_link", type.deepLink),
                ("fallback_body", type.fallbackBody),
            ] {
                guard let template else { continue }
                for name in Placeholders.names(in: template) where !known.contains(name) {
                    problems.append(
                        CatalogProblem(
                            line: type.line, key: "\(key).\(field)", message: "unknown placeholder {\(name)}"))
                }
            }
            if let fallback = type.fallbackBody, !Placeholders.names(in: fallback).isEmpty {
                problems.append(
                    CatalogProblem(
                        line: type.line, key: key + ".fallback_body", message: "the fallback body must not need data"))
            }
            for (locale, copy) in type.copy.sorted(by: { $0.key < $1.key }) {
                let copyKey = "\(key).copy.\(locale)"
                for (field, text) in [("title", copy.title), ("subtitle", copy.subtitle), ("body", copy.body)] {
                    guard let text else { continue }
                    for name in Placeholders.names(in: text) where !known.contains(name) {
                        problems.append(
                            CatalogProblem(
                                line: copy.line, key: "\(copyKey).\(field)", message: "unknown placeholder {\(name)}"))
                    }
                    let limit = field == "body" ? rules.bodyMaximum : rules.titleMaximum
                    let length = Placeholders.names(in: text).reduce(text.count) { $0 - ($1.count + 2) }
                    if length > limit {
                        problems.append(
                            CatalogProblem(
                                line: copy.line, key: "\(copyKey).\(field)",
                                message: "\(length) characters; the app allows \(limit)"))
                    }
                    let lowered = text.lowercased()
                    for phrase in rules.bannedPhrases where lowered.contains(phrase.lowercased()) {
                        problems.append(
                            CatalogProblem(
                                line: copy.line, key: "\(copyKey).\(field)", message: "banned phrase \"\(phrase)\""))
                    }
                    if rules.noMoney, Self.mentionsMoney(text) {
                        problems.append(
                            CatalogProblem(
                                line: copy.line, key: "\(copyKey).\(field)",
                                message: "copy must never ask for money (currency amount)"))
                    }
                }
            }
            for (field, text) in [("opaque.title", type.opaqueTitle), ("opaque.body", type.opaqueBody)] {
                if let text, !Placeholders.names(in: text).isEmpty {
                    problems.append(
                        CatalogProblem(
                            line: type.line, key: "\(key).\(field)", message: "opaque text must not need data"))
                }
            }
            if type.actions.count > 2 {
                problems.append(
                    CatalogProblem(
                        line: type.line, key: key + ".actions", message: "\(type.actions.count) actions; at most 2"))
            }
            if type.stakes >= .high {
                for action in type.actions where !action.authenticationRequired && !action.destructive {
                    problems.append(
                        CatalogProblem(
                            line: type.line, key: "\(key).actions.\(action.id)",
                            message: "\(type.stakes.rawValue)-stakes actions need authentication_required: true"))
                }
            }
            if let goal = type.goalCTR, !(0...1).contains(goal) {
                problems.append(
                    CatalogProblem(line: type.line, key: key + ".goal_ctr", message: "a fraction between 0 and 1"))
            }
        }
        return problems
    }

    private static let money = try! NSRegularExpression(
        pattern: #"[$€£¥]\s?\d|\d\s?(?:[$€£¥]|usd|eur|gbp|dollars?|euros?)\b|\bper (?:month|year)\b"#,
        options: [.caseInsensitive])

    static func mentionsMoney(_ text: String) -> Bool {
        money.firstMatch(in: text, range: NSRange(text.startIndex..., in: text)) != nil
    }

    /// Tracks (steps name known types, step ids are unique within their track, a step's data
    /// names placeholders its type has), jobs (known types, unique names) and triggers (known
    /// types, each does something).
    static func checkTimeAndEvents(_ catalog: Catalog) -> [CatalogProblem] {
        var problems: [CatalogProblem] = []
        for track in catalog.tracks {
            var ids = Set<String>()
            for (index, step) in track.steps.enumerated() {
                let key = "tracks.\(track.name).steps[\(index)]"
                if !ids.insert(step.id).inserted {
                    problems.append(
                        CatalogProblem(
                            line: step.line, key: key + ".id", message: "step \"\(step.id)\" appears twice in the track"
                        ))
                }
                guard let type = catalog.type(step.type) else {
                    let known = catalog.types.map(\.name).joined(separator: ", ")
                    problems.append(
                        CatalogProblem(
                            line: step.line, key: key + ".type",
                            message: "unknown type \"\(step.type)\"; the catalog has \(known)"))
                    continue
                }
                for name in step.data.keys.sorted() where !type.placeholders.contains(name) {
                    problems.append(
                        CatalogProblem(
                            line: step.line, key: "\(key).data.\(name)",
                            message: "type \(type.name) has no placeholder {\(name)}"))
                }
            }
        }
        var jobNames = Set<String>()
        for (index, job) in catalog.jobs.enumerated() {
            if !jobNames.insert(job.name).inserted {
                problems.append(
                    CatalogProblem(
                        line: job.line, key: "jobs[\(index)].name", message: "job \"\(job.name)\" appears twice"))
            }
            if catalog.type(job.type) == nil {
                problems.append(
                    CatalogProblem(line: job.line, key: "jobs[\(index)].type", message: "unknown type \"\(job.type)\""))
            }
        }
        for (index, trigger) in catalog.triggers.enumerated() {
            if let type = trigger.type, catalog.type(type) == nil {
                problems.append(
                    CatalogProblem(
                        line: trigger.line, key: "triggers[\(index)].type", message: "unknown type \"\(type)\""))
            }
            if trigger.type == nil && trigger.cancel.isEmpty && trigger.badge == nil && trigger.attributes.isEmpty {
                problems.append(
                    CatalogProblem(
                        line: trigger.line, key: "triggers[\(index)]",
                        message: "the trigger does nothing (no type, cancel, badge or attributes)"))
            }
        }
        return problems
    }
}

extension CatalogChecker {
    /// Live Activity types: an ActivityAttributes type name, default-locale copy with a title
    /// (ActivityKit drops an alert without one), known placeholders, the app's copy limits.
    static func checkActivities(_ catalog: Catalog) -> [CatalogProblem] {
        var problems: [CatalogProblem] = []
        let rules = catalog.app.copyRules
        for activity in catalog.activities {
            let key = "activities.\(activity.name)"
            let name = activity.attributesType
            if !(1...128).contains(name.utf8.count)
                || !name.unicodeScalars.allSatisfy({
                    $0.isASCII && (CharacterSet.alphanumerics.contains($0) || $0 == "_" || $0 == ".")
                })
            {
                problems.append(
                    CatalogProblem(
                        line: activity.line, key: key + ".attributes_type",
                        message: "the ActivityAttributes type's name is required: 1 to 128 letters, digits, _ or ."))
            }
            if activity.copy[catalog.app.defaultLocale]?.title == nil {
                problems.append(
                    CatalogProblem(
                        line: activity.line, key: key + ".copy",
                        message: "no alert title for the default locale \"\(catalog.app.defaultLocale)\""))
            }
            let known = Set(activity.placeholders)
            for (locale, copy) in activity.copy.sorted(by: { $0.key < $1.key }) {
                let copyKey = "\(key).copy.\(locale)"
                if copy.title?.isEmpty ?? true {
                    problems.append(
                        CatalogProblem(
                            line: copy.line, key: copyKey + ".title",
                            message: "an activity's alert needs a title: ActivityKit ignores one without"))
                }
                for (field, text) in [("title", copy.title), ("body", copy.body)] {
                    guard let text else { continue }
                    for placeholder in Placeholders.names(in: text) where !known.contains(placeholder) {
                        problems.append(
                            CatalogProblem(
                                line: copy.line, key: "\(copyKey).\(field)",
                                message: "unknown placeholder {\(placeholder)}"))
                    }
                    let limit = field == "body" ? rules.bodyMaximum : rules.titleMaximum
                    let length = Placeholders.names(in: text).reduce(text.count) { $0 - ($1.count + 2) }
                    if length > limit {
                        problems.append(
                            CatalogProblem(
                                line: copy.line, key: "\(copyKey).\(field)",
                                message: "\(length) characters; the app allows \(limit)"))
                    }
                }
            }
        }
        return problems
    }
}

/// Catalog copy's locales (placeholders: `Placeholders`, shared with HeraldKit).
package enum Template {
    /// The locales to try for a device locale: `fr-CA` → `fr-CA`, `fr`, then the default.
    package static func localeChain(_ locale: String?, defaultLocale: String) -> [String] {
        var chain: [String] = []
        if let locale, !locale.isEmpty {
            let normalized = locale.replacingOccurrences(of: "_", with: "-")
            chain.append(normalized)
            if let language = normalized.split(separator: "-").first.map(String.init), language != normalized {
                chain.append(language)
            }
        }
        if !chain.contains(defaultLocale) { chain.append(defaultLocale) }
        return chain
    }
}

extension CatalogType {
    /// The copy for a device locale, as written: `fr-CA`, then `fr`, then the default.
    package func copy(locale: String?, defaultLocale: String) -> CatalogCopy? {
        Template.localeChain(locale, defaultLocale: defaultLocale).lazy.compactMap({ self.copy[$0] }).first
    }

    /// The copy for a device locale with placeholders filled; a missing placeholder's data
    /// makes the body the type's fallback.
    package func render(locale: String?, defaultLocale: String, data: [String: String]) -> CatalogCopy? {
        guard let chosen = copy(locale: locale, defaultLocale: defaultLocale) else { return nil }
        var rendered = CatalogCopy()
        rendered.title = chosen.title.map { Placeholders.title($0, data: data) }
        rendered.subtitle = chosen.subtitle.flatMap { Placeholders.render($0, data: data) }
        rendered.body = chosen.body.map { Placeholders.body($0, fallback: fallbackBody, data: data) }
        return rendered
    }
}
