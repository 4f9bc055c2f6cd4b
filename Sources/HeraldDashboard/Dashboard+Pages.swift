import Foundation
import HTTPTypes
import HeraldCore
import HeraldEngine
import HeraldStore
import Hummingbird
import Logging
import Mustache
import NIOCore
import Synchronization

/// The Overview, Users and Notifications pages.
extension Dashboard {
    static func overview(apps: [String], session: DashboardSession, app: String?, runtime: HeraldRuntime) async throws
        -> Response
    {
        // An app's key sees its app's queue only.
        let gauges = try await runtime.store.nodes.outboxGauges(appIDs: apps)
        let now = Date()
        let pauses = runtime.pauses.all
        let hours = try await runtime.store.tracks.platformHours(
            appIDs: apps, since: PlatformRates.firstHour(now: runtime.store.now, hours: PlatformRates.defaultHours))
        let views = apps.compactMap { id -> OverviewApp? in
            guard let app = runtime.apps[id] else { return nil }
            let (minutes, failures) = runtime.metrics.activity.snapshot(app: id, now: now)
            var providers: [OverviewApp.Provider] = []
            let platforms = [
                ("apns", "APNS", app.apnsDisabledReason), ("fcm", "FCM", app.fcmDisabledReason),
                ("webpush", "Web Push", app.webpushDisabledReason),
            ]
            for (platform, name, disabled) in platforms {
                if let pause = pauses[ProviderKey(app: id, platform: platform)] {
                    providers.append(
                        .init(
                            name: name, label: "paused (\(pause.reason))", state: "bad",
                            detail:
                                "since \(HeraldTime.format(pause.since)); tried again at \(HeraldTime.format(pause.retryAt))"
                        ))
                } else if let disabled {
                    providers.append(.init(name: name, label: "off", state: "", detail: disabled))
                } else {
                    providers.append(.init(name: name, label: "ok", state: "ok", detail: "sending"))
                }
            }
            return OverviewApp(
                id: id, providers: providers, sentLastMinute: minutes.last?.sent ?? 0,
                sentLastHour: minutes.reduce(0) { $0 + $1.sent },
                failedLastHour: minutes.reduce(0) { $0 + $1.failed }, chart: Charts.activity(minutes),
                urgentDue: gauges.due[AppLane(app: id, lane: .urgent)] ?? 0,
                normalDue: gauges.due[AppLane(app: id, lane: .normal)] ?? 0, deferred: gauges.deferred[id] ?? 0,
                failures: failures.prefix(10).map { .init(reason: $0.reason, count: $0.count) },
                platforms: PlatformRates(
                    app: id, counts: hours, now: runtime.store.now, hours: PlatformRates.defaultHours
                ).platforms.map(OverviewApp.Platform.init))
        }
        let stageMinutes = runtime.metrics.stages.snapshot(now: now)
        let view = OverviewPage(
            queueDepth: gauges.totalDue, deferred: gauges.totalDeferred, scope: app == nil ? "all apps" : "this app",
            oldest: gauges.oldestDueAge > 0 ? "\(Int(gauges.oldestDueAge)) s" : nil, apps: views,
            stages: OverviewPage.Stage.rows(StageActivity.totals(stageMinutes)),
            stageChart: Charts.stages(stageMinutes))
        return render("Overview", "overview", view, session: session, app: app, tab: "overview")
    }

    static func users(_ request: Request, session: DashboardSession, app: AppRuntime, runtime: HeraldRuntime)
        async throws -> Response
    {
        let appID = app.configuration.id
        let query = request.uri.queryParameters.get("user_id")?.trimmingCharacters(in: .whitespaces) ?? ""
        var view = UsersPage(app: appID, query: query, notFound: false, user: nil)
        if !query.isEmpty, query.utf8.count <= 256 {
            let record = try await runtime.store.users.user(appID: appID, userID: query)
            let devices = try await runtime.store.devices.devices(appID: appID, userID: query, limit: 100)
            if record == nil && devices.isEmpty {
                view.notFound = true
            } else {
                let zoneName = record?.timeZone ?? "UTC"
                let zone = TimeZone(identifier: zoneName) ?? .gmt
                let badges = try await runtime.store.devices.badges(appID: appID, userID: query)
                let steps = try await runtime.store.tracks.pendingSteps(appID: appID, userID: query)
                let waiting = try await runtime.store.dashboard.waitingDeliveries(
                    appID: appID, userID: query, limit: 50)
                let activities = try await runtime.store.activities.userActivities(
                    appID: appID, userID: query, limit: 50)
                let preferences = record.map { String(decoding: $0.preferences, as: UTF8.self) }.flatMap {
                    $0 == "{}" ? nil : $0
                }
                view.user = UsersPage.User(
                    id: query, zone: zoneName, locale: record?.locale ?? "—",
                    badge: badges.isEmpty ? nil : badges.values.reduce(0, +),
                    devices: devices.map {
                        .init(
                            id: $0.deviceID, name: $0.name, platform: $0.platform, environment: $0.environment,
                            token: DeviceTokenText.redacted($0.token),
                            permission: $0.authorizationStatus ?? "not reported", active: $0.active,
                            reason: [$0.inactiveReason, $0.inactiveSince.map { "since " + HeraldTime.format($0) }]
                                .compactMap { $0 }.joined(separator: " "))
                    },
                    preferences: preferences,
                    badges: badges.sorted { $0.key < $1.key }.map { .init(name: $0.key, value: $0.value) },
                    steps: steps.map { .init(track: $0.track, step: $0.step, due: Format.local($0.dueAt, zone)) },
                    waiting: waiting.map { item in
                        .init(
                            notification: item.notificationID.uuidString.lowercased(), type: item.type ?? "custom",
                            device: item.delivery.deviceID, status: item.delivery.status.rawValue,
                            due: Format.local(item.delivery.dueAt, zone),
                            why: DecisionTrace.entries(item.delivery.trace).last?.message ?? item.delivery.reason ?? "")
                    },
                    activities: activities.map { item in
                        .init(
                            id: item.activityID, type: item.attributesType ?? "—", status: item.status,
                            state: item.contentState ?? "", device: item.deviceID,
                            onDevice: [item.deviceStatus, item.deviceReason].compactMap { $0 }.joined(separator: ": "),
                            lastPush: item.lastPush.map { push in
                                "\(push.event) p\(push.priority) \(push.status)\(push.reason.map { " (\($0))" } ?? "") · "
                                    + Format.local(push.at, zone)
                            } ?? "—")
                    })
            }
        }
        return render("Users", "users", view, session: session, app: appID, tab: "users")
    }

    static func notifications(_ request: Request, session: DashboardSession, app: AppRuntime, runtime: HeraldRuntime)
        async throws -> Response
    {
        let appID = app.configuration.id
        let parameters = request.uri.queryParameters
        let type = parameters.get("type").flatMap { $0.isEmpty ? nil : $0 }
        let status = parameters.get("status").flatMap { DashboardQueries.summaryFilters[$0] == nil ? nil : $0 }
        let before = parameters.get("before").flatMap(HeraldTime.parse)
        let limit = 50
        let rows = try await runtime.store.dashboard.recentNotifications(
            appID: appID, type: type, status: status, before: before, limit: limit)
        var next: String?
        if rows.count == limit, let last = rows.last {
            var items = [URLQueryItem(name: "before", value: HeraldTime.format(last.createdAt))]
            if let type { items.append(URLQueryItem(name: "type", value: type)) }
            if let status { items.append(URLQueryItem(name: "status", value: status)) }
            var components = URLComponents()
            components.queryItems = items
            next = "/dashboard/apps/\(escaped(appID))/notifications?" + (components.percentEncodedQuery ?? "")
        }
        let view = NotificationsPage(
            app: appID, types: (app.catalog?.types.map(\.name) ?? []).map { .init(name: $0, selected: $0 == type) },
            statuses: DashboardQueries.summaryFilters.keys.sorted().map { .init(name: $0, selected: $0 == status) },
            rows: rows.map {
                .init(
                    id: $0.id.uuidString.lowercased(), created: Format.utc($0.createdAt), type: $0.type ?? "custom",
                    recipients: $0.recipients,
                    sent: $0.sent, failed: $0.failed, deferred: $0.deferred, suppressed: $0.suppressed,
                    opened: $0.opened)
            }, filtered: type != nil || status != nil, next: next)
        return render("Notifications", "notifications", view, session: session, app: appID, tab: "notifications")
    }
}
