import Foundation
import HeraldAPI
import HeraldCore
import HeraldEngine
import HeraldPayload
import HeraldStore
import Hummingbird

struct AnalyticsPage {
    struct TypeRow {
        var name: String
        var id: String?
        var counts: AnalyticsView.Counts
        var ctr: String
        /// Received ÷ accepted ("—" while no receipt was reported).
        var receivedRate: String
        var goal: String?
        /// `ok` (met), `bad` (below goal over enough sends), `warn` (below, too few sends), or none.
        var state: String
        var verdict: String
        /// Nil when nothing was accepted or opened in these days (no empty frame).
        var chart: String?
        /// Per build (platform and app version) the devices reported from; empty when one alone.
        var builds: [BuildRow]
        var hasBuilds: Bool
    }

    /// A type's deliveries to one build. `state` is `bad` when the build's received rate is under
    /// four fifths of the type's (100 accepted or more): a build that stopped reporting receipts,
    /// or whose deliveries stopped arriving.
    struct BuildRow {
        var name: String
        var accepted: Int64
        var received: Int64
        var receivedRate: String
        var opened: Int64
        var acceptedNotReceived: Int64
        var state: String
    }

    struct OptInRow {
        var name: String
        var rate: String
        var optedIn: Int64
        var reported: Int64
        var bar: String
    }

    var app: String
    var from: String
    var to: String
    var types: [TypeRow]
    var optIn: OptInRow
    var platforms: [OptInRow]
    var versions: [OptInRow]

    init(app: String, _ view: AnalyticsView, days: ClosedRange<Int64>) {
        self.app = app
        from = view.from
        to = view.to
        types = view.types.map { entry in
            let counts = entry.counts
            let (state, verdict): (String, String) =
                switch (entry.goal, entry.goalMet) {
                case (nil, _): ("", "no goal")
                case (_, nil): ("", "nothing accepted yet")
                case (_, true?): ("ok", "goal met")
                case (_, false?):
                    entry.belowGoal
                        ? ("bad", "below goal")
                        : (
                            "warn",
                            "below goal, \(counts.sent) of \(AnalyticsView.TypeEntry.minimumSends) sends needed to judge"
                        )
                }
            let byDay = Dictionary(entry.days.map { ($0.day, $0.counts) }, uniquingKeysWith: { first, _ in first })
            let builds = Self.builds(entry)
            return TypeRow(
                name: entry.type, id: entry.id, counts: counts, ctr: Self.percent(counts.ctr),
                receivedRate: counts.received > 0
                    ? Self.percent(AnalyticsView.Counts.rate(counts.received, counts.accepted)) : "—",
                goal: entry.goal.map { Self.percent($0) },
                state: state, verdict: verdict,
                chart: counts.accepted + counts.opened == 0
                    ? nil
                    : Charts.daily(
                        days.map { day in
                            let counts = byDay[AnalyticsView.date(day)]
                            return Charts.Day(
                                label: AnalyticsView.date(day), accepted: counts?.accepted ?? 0,
                                opened: counts?.opened ?? 0)
                        }), builds: builds, hasBuilds: !builds.isEmpty)
        }
        func row(_ name: String, _ group: AnalyticsView.OptIn.Group) -> OptInRow {
            OptInRow(
                name: name, rate: Self.percent(group.rate), optedIn: group.optedIn, reported: group.reported,
                bar: Charts.share(group.rate))
        }
        optIn = row("All devices", view.optIn.all)
        platforms = view.optIn.platforms.sorted { $0.key < $1.key }.map { row($0.key, $0.value) }
        versions = view.optIn.appVersions.sorted { $0.key < $1.key }.map { row($0.key, $0.value) }
    }

    /// A type's builds, when it went to more than one.
    static func builds(_ entry: AnalyticsView.TypeEntry) -> [BuildRow] {
        guard entry.groups.count > 1 else { return [] }
        let typeRate = AnalyticsView.Counts.rate(entry.counts.received, entry.counts.accepted)
        return entry.groups.map { group in
            let counts = group.counts
            let rate = AnalyticsView.Counts.rate(counts.received, counts.accepted)
            let low =
                entry.counts.received > 0 && counts.accepted >= Self.buildMinimum
                && (rate ?? 0) < (typeRate ?? 0) * 0.8
            return BuildRow(
                name: (group.platform.isEmpty ? "unknown" : group.platform) + " "
                    + (group.appVersion ?? "(no version)"),
                accepted: counts.accepted, received: counts.received,
                receivedRate: entry.counts.received > 0 ? percent(rate) : "—", opened: counts.opened,
                acceptedNotReceived: counts.acceptedNotReceived, state: low ? "bad" : "")
        }
    }

    /// Deliveries a build must have had accepted before its received rate is judged.
    static let buildMinimum: Int64 = 100

    static func percent(_ rate: Double?) -> String {
        guard let rate else { return "—" }
        return String(format: "%.1f%%", rate * 100)
    }
}

/// The catalog's types as a person reads them: copy per locale with its lengths against the
/// catalog's rules and a lock-screen preview (placeholders shown by name), and the checker's findings.
struct CatalogPage {
    struct TypeCard {
        struct Copy {
            var locale: String
            var isDefault: Bool
            var title: String?
            var subtitle: String?
            var body: String?
            var titleLength: Int
            var bodyLength: Int
            var titleOver: Bool
            var bodyOver: Bool
        }

        var name: String
        var id: String?
        var facts: String
        var category: String?
        var deepLink: String?
        var actions: [String]
        var copies: [Copy]
        var problems: [String]
    }

    struct Track {
        var name: String
        var anchor: String
        var steps: String
    }

    var app: String
    var configured: Bool
    var appName: String
    var titleMaximum: Int
    var bodyMaximum: Int
    var problems: [String]
    var types: [TypeCard]
    var tracks: [Track]
    var triggers: [String]
    var jobs: [String]

    init(app: String, catalog: Catalog?) {
        self.app = app
        configured = catalog != nil
        guard let catalog else {
            (appName, titleMaximum, bodyMaximum, problems, types, tracks, triggers, jobs) = (
                "", 0, 0, [], [], [], [], []
            )
            return
        }
        appName = catalog.app.name
        titleMaximum = catalog.app.copyRules.titleMaximum
        bodyMaximum = catalog.app.copyRules.bodyMaximum
        let found = CatalogChecker.check(catalog)
        let defaultLocale = catalog.app.defaultLocale
        var typed = Set<Int>()
        types = catalog.types.map { type in
            // Placeholders shown by name, as ‹name›, where a send fills them from its data.
            let sample = Dictionary(type.placeholders.map { ($0, "‹\($0)›") }, uniquingKeysWith: { first, _ in first })
            let locales = type.copy.keys.sorted {
                ($0 == defaultLocale ? 0 : 1, $0) < ($1 == defaultLocale ? 0 : 1, $1)
            }
            let copies = locales.map { locale -> TypeCard.Copy in
                let written = type.copy[locale]
                let shown = type.render(locale: locale, defaultLocale: defaultLocale, data: sample)
                let titleLength = written?.title?.count ?? 0
                let bodyLength = written?.body?.count ?? 0
                return TypeCard.Copy(
                    locale: locale, isDefault: locale == defaultLocale, title: shown?.title, subtitle: shown?.subtitle,
                    body: shown?.body,
                    titleLength: titleLength, bodyLength: bodyLength,
                    titleOver: titleLength > catalog.app.copyRules.titleMaximum,
                    bodyOver: bodyLength > catalog.app.copyRules.bodyMaximum)
            }
            let mine = found.enumerated().filter {
                $0.element.key == "types.\(type.name)" || $0.element.key.hasPrefix("types.\(type.name).")
            }
            typed.formUnion(mine.map(\.offset))
            var facts = [type.pushType.rawValue, "stakes \(type.stakes)"]
            if type.transactional { facts.append("transactional") }
            if !type.userControllable {
                facts.append("not user-controllable")
            } else if !type.defaultEnabled {
                facts.append("off by default")
            }
            if let level = type.interruptionLevel { facts.append(level.rawValue) }
            if let thread = type.threadID { facts.append("thread \(thread)") }
            if let goal = type.goalCTR { facts.append("goal CTR \(AnalyticsPage.percent(goal))") }
            return TypeCard(
                name: type.name, id: type.id, facts: facts.joined(separator: " · "), category: type.category,
                deepLink: type.deepLink,
                actions: type.actions.map { $0.title + ($0.destructive ? " (destructive)" : "") }, copies: copies,
                problems: mine.map { $0.element.description })
        }
        problems = found.enumerated().filter { !typed.contains($0.offset) }.map { $0.element.description }
        tracks = catalog.tracks.map { track in
            Track(
                name: track.name, anchor: track.anchor,
                steps: track.steps.map { step in
                    "\(step.type) after \(HeraldDuration.text(step.after))" + (step.at.map { " at \($0)" } ?? "")
                        + (step.unless.map { " unless \($0)" } ?? "")
                }.joined(separator: " → "))
        }
        triggers = catalog.triggers.map { trigger in
            "\(trigger.event) → "
                + ([trigger.type].compactMap { $0 } + trigger.cancel.map { "cancel \($0)" }
                + (trigger.badge.map { ["badge \($0.counter)"] } ?? [])).joined(separator: ", ")
        }
        jobs = catalog.jobs.map { "\($0.name): \($0.type) daily at \($0.at) on \($0.attribute)" }
    }
}

extension Charts {
    struct Day {
        var label: String
        var accepted: Int64
        var opened: Int64
    }

    /// Per day: accepted (a light bar) and opened (a dark bar over it).
    static func daily(_ days: [Day]) -> String {
        let width = 600.0
        let height = 90.0
        let top = Double(max(1, days.map(\.accepted).max() ?? 1))
        let step = width / Double(max(1, days.count))
        var bars = ""
        for (index, day) in days.enumerated() where day.accepted > 0 || day.opened > 0 {
            let x = Double(index) * step
            let accepted = Double(day.accepted) / top * (height - 2)
            let opened = min(accepted, Double(day.opened) / top * (height - 2))
            bars +=
                #"<rect class="accepted" x="\#(fmt(x))" y="\#(fmt(height - accepted))" width="\#(fmt(step * 0.8))" height="\#(fmt(accepted))"><title>\#(day.label): \#(day.accepted) accepted, \#(day.opened) opened</title></rect>"#
            if opened > 0 {
                bars +=
                    #"<rect class="opened" x="\#(fmt(x))" y="\#(fmt(height - opened))" width="\#(fmt(step * 0.8))" height="\#(fmt(opened))"></rect>"#
            }
        }
        return
            #"<svg class="chart daily" viewBox="0 0 \#(Int(width)) \#(Int(height))" preserveAspectRatio="none" role="img" aria-label="Accepted and opened per day, \#(days.first?.label ?? "") to \#(days.last?.label ?? "")">\#(bars)</svg>"#
    }

    /// A horizontal bar filled to `rate` (0–1).
    static func share(_ rate: Double?) -> String {
        let filled = (rate ?? 0) * 200
        return
            #"<svg class="share" viewBox="0 0 200 10" preserveAspectRatio="none" role="img" aria-label="\#(AnalyticsPage.percent(rate))"><rect class="track" x="0" y="0" width="200" height="10"></rect><rect class="fill" x="0" y="0" width="\#(fmt(filled))" height="10"></rect></svg>"#
    }
}
