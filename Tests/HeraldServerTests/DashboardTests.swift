import Foundation
import HTTPTypes
import HeraldCore
import HeraldEngine
import HeraldPayload
import HeraldSimulator
import HeraldStore
import HeraldTesting
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

/// The dashboard over HTTP against a live server: sign-in, CSRF, an app key's
/// scope, and the SyncWell deferral's trace on the Users and Notification pages. (The Chromium
/// run of the same pages is scripts/dashboard-browser.py.)
@Suite("Dashboard")
struct DashboardTests {
    /// A browser's cookie jar over the harness's client; redirects are not followed.
    final class Browser: @unchecked Sendable {
        let server: ServerHarness
        var cookies: [String: String] = [:]
        init(_ server: ServerHarness) { self.server = server }

        func go(_ method: HTTPRequest.Method, _ path: String, form: [String: String]? = nil) async throws -> (
            status: HTTPResponse.Status, html: String, headers: HTTPFields
        ) {
            var headers: HTTPFields = [:]
            if !cookies.isEmpty { headers[.cookie] = cookies.map { "\($0.key)=\($0.value)" }.joined(separator: "; ") }
            var body: ByteBuffer?
            if let form {
                headers[.contentType] = "application/x-www-form-urlencoded"
                var components = URLComponents()
                components.queryItems = form.map { URLQueryItem(name: $0.key, value: $0.value) }
                body = ByteBuffer(string: components.percentEncodedQuery ?? "")
            }
            let response = try await server.client.execute(uri: path, method: method, headers: headers, body: body)
            for header in response.headers[values: .setCookie] {
                let pair = header.split(separator: ";")[0].split(
                    separator: "=", maxSplits: 1, omittingEmptySubsequences: false
                ).map(String.init)
                if pair.count == 2 {
                    cookies[pair[0]] = pair[1].isEmpty || header.contains("Max-Age=0") ? nil : pair[1]
                }
            }
            return (response.status, String(buffer: response.body), response.headers)
        }

        /// The login page's form token, then a sign-in with `key`.
        func signIn(_ key: String) async throws -> HTTPResponse.Status {
            let page = try await go(.get, "/dashboard/login")
            return try await go(
                .post, "/dashboard/login", form: ["csrf": DashboardTests.csrf(page.html) ?? "", "key": key]
            ).status
        }
    }

    static func csrf(_ html: String) -> String? {
        guard let range = html.range(of: #"name="csrf" value=""#) else { return nil }
        return String(html[range.upperBound...].prefix { $0 != "\"" })
    }

    static let otherKey = "other-server-key-0123456789abcdef"

    @Test(
        "sign-in: a form without its token is refused (403), a client key is not a dashboard key (401), a server key signs in with an HttpOnly, SameSite=Strict cookie; it sees its app and not another (404); sign-out needs the CSRF token and ends the session; a forged cookie is not signed in"
    )
    func signInAndScope() async throws {
        try await withServer(configure: { configuration in
            var other = configuration.apps[0]
            other.id = "other"
            other.serverKeys = [Self.otherKey]
            other.clientKeys = ["other-client-key-0123456789abcdef"]
            other.userTokenSecret = "other-user-token-secret-0123456789abcdef-0123"
            configuration.apps.append(other)
        }) { server in
            let browser = Browser(server)
            let start = try await browser.go(.get, "/dashboard")
            #expect(start.status == .seeOther && start.headers[.location] == "/dashboard/login")
            let login = try await browser.go(.get, "/dashboard/login")
            #expect(
                login.status == .ok && login.headers[.contentSecurityPolicy]?.contains("default-src 'self'") == true)
            #expect(
                try await browser.go(.post, "/dashboard/login", form: ["key": ServerHarness.server]).status
                    == .forbidden)
            #expect(try await browser.signIn(ServerHarness.client) == .unauthorized)
            #expect(browser.cookies["__Host-herald_session"] == nil)

            let page = try await browser.go(.get, "/dashboard/login")
            let signedIn = try await browser.go(
                .post, "/dashboard/login", form: ["csrf": Self.csrf(page.html) ?? "", "key": ServerHarness.server])
            #expect(signedIn.status == .seeOther)
            let setCookie = signedIn.headers[values: .setCookie].first { $0.hasPrefix("__Host-herald_session=") } ?? ""
            #expect(
                setCookie.contains("HttpOnly") && setCookie.contains("SameSite=Strict") && setCookie.contains("Path=/")
                    && !setCookie.contains("Path=/dashboard") && setCookie.contains("Secure"))
            #expect(!setCookie.contains(ServerHarness.server))
            let overview = try await browser.go(.get, "/dashboard/apps/demo")
            #expect(
                overview.status == .ok && overview.html.contains("APNS: ok") && overview.html.contains("app demo")
                    && overview.html.contains("Web Push: off"))
            #expect(!overview.html.contains(ServerHarness.server))
            #expect(try await browser.go(.get, "/dashboard/apps/other").status == .notFound)
            #expect(try await browser.go(.get, "/dashboard/apps/other/users?user_id=ana").status == .notFound)
            let all = try await browser.go(.get, "/dashboard/overview")
            #expect(all.html.contains("/dashboard/apps/demo") && !all.html.contains("/dashboard/apps/other"))

            // A forged cookie: the app changed to another one keeps the MAC of the first.
            let forged = Browser(server)
            let parts = (browser.cookies["__Host-herald_session"] ?? "").split(separator: ".").map(String.init)
            #expect(parts.count == 6)
            forged.cookies["__Host-herald_session"] =
                ([parts[0], parts[1], Base64URL.encode(Data("other".utf8))] + parts[3...]).joined(separator: ".")
            #expect(try await forged.go(.get, "/dashboard/apps/other").status == .seeOther)

            // Sign-out: refused without the token (403), done with it; the old cookie is over.
            let session = browser.cookies["__Host-herald_session"]
            #expect(try await browser.go(.post, "/dashboard/logout", form: [:]).status == .forbidden)
            #expect(try await browser.go(.post, "/dashboard/logout", form: ["csrf": "wrong"]).status == .forbidden)
            let out = try await browser.go(.post, "/dashboard/logout", form: ["csrf": Self.csrf(overview.html) ?? ""])
            #expect(out.status == .seeOther && browser.cookies["__Host-herald_session"] == nil)
            let replay = Browser(server)
            replay.cookies["__Host-herald_session"] = session
            #expect(try await replay.go(.get, "/dashboard/apps/demo").status == .seeOther)

            // The admin key sees both apps.
            let admin = Browser(server)
            #expect(try await admin.signIn(ServerHarness.admin) == .seeOther)
            let adminOverview = try await admin.go(.get, "/dashboard/overview")
            #expect(
                adminOverview.html.contains("/dashboard/apps/demo")
                    && adminOverview.html.contains("/dashboard/apps/other"))
            #expect(try await admin.go(.get, "/dashboard/apps/other").status == .ok)
        }
    }

    @Test(
        "SyncWell at 23:00 in Paris: the Users page shows ana's device (token by 8 characters), and PN-03 waiting with its due time in Paris and the trace's reason; the Notifications list filters it as deferred; its page shows the trace as a timeline and the live counts"
    )
    func deferredTrace() async throws {
        let clock = ManualClock(PolicyScenarioTests.date("2026-11-22T22:00:00Z"))
        try await withServer(catalog: "syncwell.yaml", clock: clock) { server in
            let token = makeDeviceTokens(1)[0]
            #expect(try await server.register("phone", user: "ana", token: token, locale: "fr-FR") == .created)
            #expect(
                try await server.request(.put, "/v1/apps/demo/users/ana", json: #"{"time_zone":"Europe/Paris"}"#).status
                    == .ok)
            let sent = try await server.send(
                #"{"to":{"user_ids":["ana"]},"type":"new_provider","data":{"New Provider":"Oura","provider_id":"oura"}}"#
            )
            let id = try #require(sent.body["id"] as? String)
            _ = try await server.settled(id)

            // The gauges read the listed apps only; the deferred one is counted by its app.
            let gauges = try await server.runtime.store.nodes.outboxGauges(appIDs: ["demo", "silent"])
            #expect(gauges.totalDue == 0 && gauges.deferred == ["demo": 1])
            #expect(try await server.runtime.store.nodes.outboxGauges(appIDs: ["silent"]).totalDeferred == 0)
            let metrics = try await server.metricsText()
            #expect(metrics.contains(#"herald_app_deferred_deliveries{app="demo"} 1"#))
            #expect(metrics.contains(#"herald_app_queue_depth{app="demo",lane="normal"} 0"#))

            let browser = Browser(server)
            #expect(try await browser.signIn(ServerHarness.server) == .seeOther)
            let overview = try await browser.go(.get, "/dashboard/apps/demo")
            #expect(overview.html.contains("0</strong> due now, 1 deferred (this app)"))
            #expect(overview.html.contains(#"<span class="big">1</span><span class="muted">deferred</span>"#))
            // The outbox's stages: the deferral went through a claim and the policy step.
            #expect(overview.html.contains("Where the outbox's time went"))
            #expect(overview.html.contains(#"<rect class="stage-prepare""#))
            #expect(
                !overview.html.contains(
                    #"<tr><td>prepare</td><td class="muted">contents read and the policy step</td><td class="num">0</td>"#
                ))
            let users = try await browser.go(.get, "/dashboard/apps/demo/users?user_id=ana")
            #expect(users.status == .ok)
            #expect(users.html.contains("<code>\(token.prefix(8))…</code>") && !users.html.contains(token))
            #expect(users.html.contains("Due (Europe/Paris)") && users.html.contains("2026-11-23 09:00"))
            #expect(users.html.contains("deferred: quiet hours until 2026-11-23T09:00+01:00 Europe/Paris"))
            #expect(users.html.contains(#"<a href="/dashboard/apps/demo/notifications/\#(id)">new_provider</a>"#))
            // No track steps and no Live Activities ("None." each), a table of waiting deliveries.
            #expect(users.html.components(separatedBy: "None.").count == 3 && users.html.contains("<th>Why</th>"))
            let unknown = try await browser.go(.get, "/dashboard/apps/demo/users?user_id=nobody")
            #expect(unknown.html.contains("No user or device"))

            let deferred = try await browser.go(.get, "/dashboard/apps/demo/notifications?status=deferred")
            #expect(deferred.html.contains("/dashboard/apps/demo/notifications/\(id)"))
            let failed = try await browser.go(.get, "/dashboard/apps/demo/notifications?status=failed")
            #expect(!failed.html.contains(id) && failed.html.contains("No notifications match"))
            let page = try await browser.go(.get, "/dashboard/apps/demo/notifications/\(id)")
            #expect(
                page.html.contains(#"<ol class="timeline">"#)
                    && page.html.contains("deferred: quiet hours until 2026-11-23T09:00+01:00 Europe/Paris"))
            let live = try await browser.go(.get, "/dashboard/apps/demo/notifications/\(id)/live")
            let object = try JSONSerialization.jsonObject(with: Data(live.html.utf8)) as? [String: Any]
            #expect((object?["counts"] as? [String: Int])?["deferred"] == 1)
            // The assets are in the binary.
            #expect(
                try await browser.go(.get, "/dashboard/assets/herald.css").html.contains("prefers-color-scheme: dark"))
            #expect(try await browser.go(.get, "/dashboard/assets/herald.js").html.contains("data-live"))
        }
    }

    @Test(
        "SyncWell's composer: a preview per device (ana's iPhone in French with its size against 4096 bytes, bob's Android as an FCM message with the token by 8 characters, a user without devices named); a form without its token is refused, one without users names the field; Send stores it, goes to its page and reaches ana's iPhone. Analytics shows sync_error's CTR against its goal once ana opens it, and the opt-in rate; the Catalog page shows the copy per locale with placeholders by name and the actions"
    )
    func composeAnalyticsCatalog() async throws {
        let clock = ManualClock(PolicyScenarioTests.date("2026-11-23T12:00:00Z"))
        try await withServer(catalog: "syncwell.yaml", clock: clock) { server in
            let token = makeDeviceTokens(1)[0]
            #expect(try await server.register("ana-phone", user: "ana", token: token, locale: "fr-FR") == .created)
            #expect(
                try await server.request(
                    .post, "/v1/apps/demo/devices",
                    json:
                        #"{"device_id":"bob-pixel","user_id":"bob","platform":"fcm","token":"fcm-bob-pixel-token","authorization_status":"denied"}"#
                ).status == .created)
            let browser = Browser(server)
            #expect(try await browser.signIn(ServerHarness.server) == .seeOther)
            let page = try await browser.go(.get, "/dashboard/apps/demo/compose?user_id=ana")
            #expect(page.status == .ok && page.html.contains(#"<option value="sync_error" >sync_error</option>"#))
            let csrf = try #require(Self.csrf(page.html))
            var form = [
                "csrf": csrf, "type": "sync_error", "data": "Source=Strava\nsource_id=strava",
                "user_ids": "ana, bob ghost", "action": "preview",
            ]
            let preview = try await browser.go(.post, "/dashboard/apps/demo/compose", form: form)
            #expect(preview.status == .ok)
            #expect(
                preview.html.contains("SyncWell : action requise")
                    && preview.html.contains("Votre connexion à Strava rencontre un problème"))
            #expect(preview.html.contains("SyncWell Action Required"), "bob's device has no locale: the default copy")
            #expect(
                preview.html.contains("&quot;category&quot; : &quot;SYNC_ERROR&quot;")
                    && preview.html.contains("of 4096 bytes"))
            #expect(
                preview.html.contains("fcm-bob-…") && !preview.html.contains("fcm-bob-pixel-token")
                    && !preview.html.contains(token))
            #expect(preview.html.contains("ghost") && preview.html.contains("no device registered"))
            #expect(server.simulator.state.inboxSummary().total == 0, "a preview sends nothing")

            form["csrf"] = nil
            #expect(try await browser.go(.post, "/dashboard/apps/demo/compose", form: form).status == .forbidden)
            let noUsers = try await browser.go(
                .post, "/dashboard/apps/demo/compose", form: ["csrf": csrf, "type": "sync_error", "action": "send"])
            #expect(noUsers.status == .badRequest && noUsers.html.contains("Users: to.user_ids is required"))

            form["csrf"] = csrf
            form["user_ids"] = "ana"
            form["action"] = "send"
            let sent = try await browser.go(.post, "/dashboard/apps/demo/compose", form: form)
            let location = try #require(sent.headers[.location])
            #expect(sent.status == .seeOther && location.hasPrefix("/dashboard/apps/demo/notifications/"))
            _ = try await server.settled(String(location.split(separator: "/").last!))
            try await eventually { server.simulator.state.inbox(for: token).count == 1 }
            let payload = try #require(server.simulator.state.inbox(for: token).first?.payloadObject)
            let alert = (payload["aps"] as? [String: Any])?["alert"] as? [String: Any]
            #expect(alert?["title"] as? String == "SyncWell : action requise")
            let notification = try await browser.go(.get, location)
            #expect(
                notification.html.contains("sync_error")
                    && notification.html.contains("accepted by the provider after 1 attempt"))
            #expect(notification.html.contains(#"<span class="pill failed zero" data-pill="failed">"#))

            let stamp = try #require(EngagementTests.stamps(server, token).first)
            #expect(
                try await server.request(
                    .post, "/v1/apps/demo/opened",
                    json: #"{"delivery_id":\#(stamp.deliveryID),"device_id":"ana-phone"}"#
                ).status
                    == .ok)
            #expect(
                try await server.request(
                    .post, "/v1/apps/demo/received",
                    json: #"{"delivery_id":\#(stamp.deliveryID),"device_id":"ana-phone"}"#
                ).status
                    == .ok)
            let analytics = try await browser.go(.get, "/dashboard/apps/demo/analytics")
            #expect(analytics.status == .ok)
            let card = try #require(
                analytics.html.components(separatedBy: #"id="type-sync_error""#).dropFirst().first?.components(
                    separatedBy: "</section>"
                ).first)
            #expect(
                card.contains("100.0%") && card.contains("goal 15.0%") && card.contains("goal met")
                    && card.contains(#"class="opened""#))
            #expect(card.contains(#"<span class="big">1</span><span class="muted">opened</span>"#))
            #expect(card.contains(#"<span class="big">1</span><span class="muted">received · 100.0%</span>"#))
            #expect(analytics.html.contains("received · —"))  // a type without receipts
            #expect(analytics.html.contains("nothing accepted yet"))
            // Opt-in: bob's Android reported denied; ana's iPhone reported nothing.
            #expect(analytics.html.contains("<th>All devices</th><td class=\"num\">0.0%</td>"))
            #expect(try await browser.go(.get, "/dashboard/apps/demo/analytics?from=2026-13-01").status == .badRequest)

            let catalog = try await browser.go(.get, "/dashboard/apps/demo/catalog")
            #expect(catalog.status == .ok)
            let errorCard = try #require(
                catalog.html.components(separatedBy: #"id="type-sync_error""#).dropFirst().first?.components(
                    separatedBy: "</section>"
                ).first)
            #expect(
                errorCard.contains("fr · title") && errorCard.contains("en (default)") && errorCard.contains("Fix now"))
            #expect(errorCard.contains("Your connection to ‹Source› has an issue. Tap to fix."))
            #expect(catalog.html.contains("subscription_renewal") && catalog.html.contains("sync.failed"))
            // The tabs link the new pages.
            #expect(catalog.html.contains(#"<a href="/dashboard/apps/demo/catalog" aria-current="page">Catalog</a>"#))
        }
    }
}
