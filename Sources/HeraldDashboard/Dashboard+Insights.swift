import Foundation
import HeraldAPI
import HeraldCore
import HeraldEngine
import HeraldPayload
import HeraldStore
import Hummingbird

/// The Analytics and Catalog pages: what `GET …/analytics` answers, drawn; and the
/// catalog's types with their copy per locale as a lock screen shows it, and the checker's findings.
extension Dashboard {
    static func addInsightRoutes(to router: Router<HeraldRequestContext>, runtime: HeraldRuntime) {
        router.get("/dashboard/apps/:app/analytics") { request, context in
            try await withApp(request, context, runtime) { session, app in
                let query: AnalyticsQuery
                do throws(APIError) {
                    query = try AnalyticsQuery(
                        request.uri.queryParameters, today: runtime.store.now, catalog: app.catalog)
                } catch {
                    return message("Bad request", error.message, session: session, app: app.id, status: .badRequest)
                }
                let builds = try await runtime.store.tracks.buildCounts(
                    appID: app.id, days: query.days, type: query.type?.name)
                let counts = try await runtime.store.tracks.funnelCounts(
                    appID: app.id, days: query.days, type: query.type?.name, builds: builds)
                let permissions = try await runtime.store.tracks.permissionCounts(appID: app.id)
                var analytics = AnalyticsView(
                    days: query.days, type: query.type, counts: counts, permissions: permissions, catalog: app.catalog)
                analytics.add(builds, by: .appVersion)
                return render(
                    "Analytics", "analytics", AnalyticsPage(app: app.id, analytics, days: query.days), session: session,
                    app: app.id,
                    tab: "analytics")
            }
        }
        router.get("/dashboard/apps/:app/catalog") { request, context in
            try await withApp(request, context, runtime) { session, app in
                render(
                    "Catalog", "catalog", CatalogPage(app: app.id, catalog: app.catalog), session: session, app: app.id,
                    tab: "catalog")
            }
        }
    }
}
