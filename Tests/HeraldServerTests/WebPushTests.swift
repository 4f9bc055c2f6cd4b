import Crypto
import Foundation
import HTTPTypes
import HeraldCatalog
import HeraldCore
import HeraldEngine
import HeraldPayload
import HeraldSimulator
import HeraldStore
import HeraldTesting
import HeraldWebPush
import HummingbirdTesting
import NIOCore
import Testing

/// Web Push as a third platform: browsers register subscriptions the simulator made (as a
/// browser's push service would), Herald encrypts and signs each message, the simulator checks
/// VAPID and decrypts, and its inbox holds what the service worker would read.
@Suite("Web Push")
struct WebPushTests {
    /// Runs `body` with the demo app's web push on (a fresh VAPID key; the simulator on loopback allowed).
    /// `deprecated` is a key rotated out (`webpush.deprecated_keys`).
    static func withWebPush(
        deprecated: P256.Signing.PrivateKey? = nil,
        _ body: @escaping @Sendable (ServerHarness, P256.Signing.PrivateKey) async throws -> Void
    ) async throws {
        let key = P256.Signing.PrivateKey()
        let directory = try makeTemporaryDirectory("herald-webpush")
        let keyFile = directory + "/vapid.pem"
        try key.pemRepresentation.write(toFile: keyFile, atomically: true, encoding: .utf8)
        var deprecatedFiles: [String] = []
        if let deprecated {
            deprecatedFiles.append(directory + "/old-vapid.pem")
            try deprecated.pemRepresentation.write(toFile: deprecatedFiles[0], atomically: true, encoding: .utf8)
        }
        try await withServer(
            app: {
                $0.webpush = .init(
                    vapidKeyFile: keyFile, subject: "mailto:ops@example.com", deprecatedKeyFiles: deprecatedFiles,
                    allowedHosts: ["127.0.0.1"], caFile: $0.apns?.caFile)
            }, configure: { $0.clock = .manual }
        ) { server in try await body(server, key) }
    }

    /// Registers a browser of `user` with a subscription the simulator made.
    /// `named`: the subscription says which key it was made with (`application_server_key`).
    static func browser(
        _ server: ServerHarness, _ device: String, user: String, key: P256.Signing.PrivateKey,
        locale: String = "en-GB", named: Bool = false
    ) async throws -> SimulatorWebPush.Subscription {
        let subscription = server.simulator.state.webpush.subscribe(
            applicationServerKey: key.publicKey.x963Representation)
        let p256dh = Base64URL.encode(subscription.privateKey.publicKey.x963Representation)
        let serverKey = named ? #","application_server_key":"\#(VAPID.publicKeyText(key.publicKey))""# : ""
        let answer = try await server.request(
            .post, "/v1/apps/demo/devices", key: ServerHarness.client,
            userToken: ServerHarness.userToken(user, now: server.runtime.store.now),
            json: #"""
                {"device_id":"\#(device)","user_id":"\#(user)","platform":"webpush","locale":"\#(locale)",
                 "endpoint":"\#(subscription.endpoint)","keys":{"p256dh":"\#(p256dh)","auth":"\#(Base64URL.encode(subscription.auth))"}\#(serverKey)}
                """#)
        #expect(answer.status == .created, "\(answer.body)")
        // The subscription's secret is not shown back.
        #expect((answer.body["token"] as? String)?.contains(Base64URL.encode(subscription.auth)) == false)
        return subscription
    }

    static func plaintext(_ server: ServerHarness, _ subscription: SimulatorWebPush.Subscription) -> [[String: Any]] {
        server.simulator.state.inbox(for: subscription.id).compactMap(\.payloadObject)
    }

    @Test(
        "a typed SyncWell notification to a user with an iPhone, an Android phone and two browsers: each platform its own rendering, both web messages decrypted by the simulator, quiet hours and preferences for all four, a browser's open counted in CTR"
    )
    func fourDevices() async throws {
        try await Self.withWebPush { server, key in
            try await EngagementTests.noon(server)
            let apnsToken = makeDeviceTokens(1)[0]
            #expect(try await server.register("iphone", user: "ana", token: apnsToken) == .created)
            let android = try await server.request(
                .post, "/v1/apps/demo/devices", key: ServerHarness.client,
                userToken: ServerHarness.userToken("ana", now: server.runtime.store.now),
                json: #"{"device_id":"pixel","user_id":"ana","platform":"fcm","token":"fcm:Pixel-Token_1"}"#)
            #expect(android.status == .created)
            let chrome = try await Self.browser(server, "chrome", user: "ana", key: key)
            let safari = try await Self.browser(server, "safari", user: "ana", key: key, locale: "fr-FR")

            let sent = try await server.send(
                #"{"to":{"user_ids":["ana"]},"type":"PN-02","data":{"Source":"Strava","source_id":"strava"}}"#)
            let id = try #require(sent.body["id"] as? String)
            let view = try await server.settled(id)
            #expect((view["counts"] as? [String: Int])?["sent"] == 4, "\(view)")
            #expect(server.simulator.state.inbox(for: apnsToken).count == 1)
            #expect(server.simulator.state.inbox(for: "fcm:Pixel-Token_1").first?.pushType == "fcm")
            let english = try #require(Self.plaintext(server, chrome).first)
            #expect(english["title"] as? String == "SyncWell Action Required")
            #expect((english["demo"] as? [String: Any])?["source_id"] as? String == "strava", "\(english)")
            #expect(english["deep_link"] as? String == "syncwell://connection/strava")
            let french = try #require(Self.plaintext(server, safari).first)
            #expect(french["title"] as? String == "SyncWell : action requise", "\(french)")
            let entry = try #require(server.simulator.state.inbox(for: chrome.id).first)
            #expect(entry.pushType == "webpush" && entry.collapseID == "sync-error-strava")
            #expect(entry.priority == 10 || entry.priority == 5)

            // A browser's open, from the stamp its service worker read, counts in CTR.
            let stamp = try #require(
                HeraldStamp(appData: try JSONDecoder().decode(JSONValue.self, from: entry.payload).objectValue ?? [:]))
            #expect(stamp.notificationID == id)
            let opened = try await EngagementTests.opened(
                server, #"{"delivery_id":\#(stamp.deliveryID),"device_id":"chrome"}"#)
            #expect(opened.status == 200 && opened.body["counted"] as? Bool == true, "\(opened.body)")
            let analytics = try await server.request(.get, "/v1/apps/demo/analytics")
            let types = (analytics.body["types"] as? [[String: Any]]) ?? []
            let error = try #require(types.first { $0["id"] as? String == "PN-02" })
            #expect(error["sent"] as? Int == 4 && error["opened"] as? Int == 1 && error["ctr"] as? Double == 0.25)

            // Quiet hours in the user's zone hold a promotional type for all four devices ...
            #expect(
                try await server.request(.put, "/v1/apps/demo/users/ana", json: #"{"time_zone":"Pacific/Kiritimati"}"#)
                    .status == .ok)
            let promo = try await server.send(
                #"{"to":{"user_ids":["ana"]},"type":"PN-03","data":{"New Provider":"Oura","provider_id":"oura"}}"#)
            let promoView = try await server.settled(try #require(promo.body["id"] as? String))
            #expect((promoView["counts"] as? [String: Int])?["deferred"] == 4, "\(promoView)")
            // ... and a preference turned off suppresses it on all four.
            #expect(
                try await server.request(
                    .put, "/v1/apps/demo/users/ana/preferences", json: #"{"types":{"new_provider":false}}"#
                ).status == .ok)
            #expect(
                try await server.request(.put, "/v1/apps/demo/users/ana", json: #"{"time_zone":"Europe/London"}"#)
                    .status == .ok)
            let off = try await server.send(
                #"{"to":{"user_ids":["ana"]},"type":"PN-03","data":{"New Provider":"Oura","provider_id":"oura"}}"#)
            let offView = try await server.settled(try #require(off.body["id"] as? String))
            #expect((offView["counts"] as? [String: Int])?["suppressed"] == 4, "\(offView)")
            #expect(Self.plaintext(server, chrome).count == 1 && Self.plaintext(server, safari).count == 1)
        }
    }

    @Test(
        "410 deactivates the browser; 429 is retried after its Retry-After; a subscription made with another key (the push service's 403) pauses the app's web push and loses nothing"
    )
    func answers() async throws {
        try await Self.withWebPush { server, key in
            let gone = try await Self.browser(server, "gone", user: "bo", key: key)
            let busy = try await Self.browser(server, "busy", user: "cy", key: key)
            server.simulator.state.markDead(gone.id, reason: "Gone")
            server.simulator.state.script(busy.id, status: 429, reason: "TooManyRequests", retryAfter: "120")
            let sent = try await server.send(#"{"to":{"user_ids":["bo","cy"]},"alert":{"title":"Hi","body":"there"}}"#)
            let id = try #require(sent.body["id"] as? String)
            try await server.settle()
            let view = try await server.request(.get, "/v1/apps/demo/notifications/\(id)").body
            let deliveries = (view["deliveries"] as? [[String: Any]]) ?? []
            let goneDelivery = deliveries.first { $0["device_id"] as? String == "gone" }
            #expect(goneDelivery?["status"] as? String == "failed", "\(deliveries)")
            let bo = try await server.request(.get, "/v1/apps/demo/users/bo/devices")
            #expect(((bo.body["devices"] as? [[String: Any]])?.first?["active"] as? Bool) == false, "\(bo.body)")
            let busyDelivery = deliveries.first { $0["device_id"] as? String == "busy" }
            #expect(busyDelivery?["status"] as? String == "queued", "\(deliveries)")
            #expect(Self.plaintext(server, busy).isEmpty)
            // Past the Retry-After the push service takes it.
            server.simulator.state.removeScript(busy.id)
            try await TrackTests.advance(server, to: server.runtime.store.now.addingTimeInterval(180))
            _ = try await server.settled(id)
            #expect(Self.plaintext(server, busy).count == 1)

            // A subscription bound to another application server key: the service refuses the
            // VAPID JWT (403); web push pauses, the delivery waits queued.
            let other = P256.Signing.PrivateKey()
            let stranger = try await Self.browser(server, "stranger", user: "di", key: other)
            let refused = try await server.send(#"{"to":{"user_ids":["di"]},"alert":{"title":"Hi"}}"#)
            let refusedID = try #require(refused.body["id"] as? String)
            try await server.settle()
            let refusedView = try await server.request(.get, "/v1/apps/demo/notifications/\(refusedID)").body
            #expect((refusedView["counts"] as? [String: Int])?["queued"] == 1, "\(refusedView)")
            #expect(Self.plaintext(server, stranger).isEmpty)
            #expect(server.simulator.state.counters.byReason["BadJwtToken", default: 0] >= 1)
        }
    }

    @Test(
        "a key rotation: GET /webpush/key gives the current key and the old one; a subscription made with the old key is signed with it and delivered; one naming a key the app lacks is refused"
    )
    func rotation() async throws {
        let old = P256.Signing.PrivateKey()
        try await Self.withWebPush(deprecated: old) { server, key in
            let keys = try await server.request(.get, "/v1/apps/demo/webpush/key", key: ServerHarness.client)
            #expect(keys.status == .ok)
            #expect(keys.body["public_key"] as? String == VAPID.publicKeyText(key.publicKey))
            #expect(keys.body["deprecated_keys"] as? [String] == [VAPID.publicKeyText(old.publicKey)])
            let before = try await Self.browser(server, "old-chrome", user: "ana", key: old, named: true)
            let after = try await Self.browser(server, "new-chrome", user: "ana", key: key, named: true)
            let sent = try await server.send(#"{"to":{"user_ids":["ana"]},"alert":{"title":"Both"}}"#)
            let view = try await server.settled(try #require(sent.body["id"] as? String))
            #expect((view["counts"] as? [String: Int])?["sent"] == 2, "\(view)")
            #expect(Self.plaintext(server, before).count == 1 && Self.plaintext(server, after).count == 1)
            // The dashboard: web push on the Overview; the browsers on the user's page, by endpoint only.
            let browser = DashboardTests.Browser(server)
            #expect(try await browser.signIn(ServerHarness.server) == .seeOther)
            let overview = try await browser.go(.get, "/dashboard/apps/demo").html
            #expect(overview.contains("Web Push: ok") && overview.contains("APNS: ok"))
            let users = try await browser.go(.get, "/dashboard/apps/demo/users?user_id=ana").html
            #expect(users.contains("old-chrome") && users.contains("new-chrome") && users.contains("webpush"))
            #expect(!users.contains(Base64URL.encode(before.auth)))
            let unknown = server.simulator.state.webpush.subscribe()
            let refused = try await server.request(
                .post, "/v1/apps/demo/devices",
                json: #"""
                    {"device_id":"x","user_id":"ana","platform":"webpush","endpoint":"\#(unknown.endpoint)",
                     "keys":{"p256dh":"\#(Base64URL.encode(unknown.privateKey.publicKey.x963Representation))","auth":"\#(Base64URL.encode(unknown.auth))"},
                     "application_server_key":"\#(VAPID.publicKeyText(P256.Signing.PrivateKey().publicKey))"}
                    """#)
            #expect(
                (refused.body["error"] as? [String: Any])?["field"] as? String == "application_server_key",
                "\(refused.body)")
        }
        try await withServer { server in
            let off = try await server.request(.get, "/v1/apps/demo/webpush/key", key: ServerHarness.client)
            #expect(off.status == .notFound)
        }
    }

    @Test(
        "a subscription is refused at registration when its endpoint is not https, not a known push service, or a loopback, link-local or private address; bad keys are named"
    )
    func registrationChecks() async throws {
        try await withServer { server in
            let receiver = P256.KeyAgreement.PrivateKey()
            let p256dh = Base64URL.encode(receiver.publicKey.x963Representation)
            let auth = Base64URL.encode(Data(repeating: 1, count: 16))
            func register(_ endpoint: String, p256dh: String = p256dh, auth: String = auth) async throws -> String? {
                let answer = try await server.request(
                    .post, "/v1/apps/demo/devices",
                    json: #"""
                        {"device_id":"b","user_id":"u","platform":"webpush","endpoint":"\#(endpoint)","keys":{"p256dh":"\#(p256dh)","auth":"\#(auth)"}}
                        """#)
                return answer.status == .badRequest
                    ? (answer.body["error"] as? [String: Any])?["field"] as? String : "\(answer.status.code)"
            }
            for endpoint in [
                "http://fcm.googleapis.com/fcm/send/x", "https://127.0.0.1/push/x", "https://169.254.169.254/latest",
                "https://10.0.0.8/x", "https://[::1]/x", "https://evil.example.com/x", "https://192.168.1.1:8443/x",
                "not a url",
            ] {
                #expect(try await register(endpoint) == "endpoint", "\(endpoint)")
            }
            #expect(try await register("https://fcm.googleapis.com/fcm/send/abc", p256dh: "AAAA") == "keys.p256dh")
            #expect(try await register("https://fcm.googleapis.com/fcm/send/abc", auth: "AAAA") == "keys.auth")
            #expect(try await register("https://fcm.googleapis.com/fcm/send/abc") == "201")
            // Another subscription of the same browser replaces the first (200, the device updated).
            #expect(try await register("https://wns2-par02p.notify.windows.com/w/?token=abc") == "200")
            let withToken = try await server.request(
                .post, "/v1/apps/demo/devices",
                json: #"{"device_id":"c","user_id":"u","platform":"webpush","token":"abc"}"#)
            #expect((withToken.body["error"] as? [String: Any])?["field"] as? String == "token")
        }
    }

    @Test(
        "a web page from an origin the app lists may call it from a browser: its preflight is answered, its answers are readable; other origins and other apps are not"
    )
    func corsOrigins() async throws {
        try await withServer(
            app: { $0.corsOrigins = ["https://app.example.com", "http://127.0.0.1:8080"] }
        ) { server in
            func call(
                _ method: HTTPRequest.Method, _ path: String, origin: String?, preflight: Bool = false,
                key: String? = nil
            ) async throws -> (HTTPResponse.Status, HTTPFields, String) {
                var headers: HTTPFields = [:]
                if let origin { headers[.origin] = origin }
                if preflight {
                    headers[.accessControlRequestMethod] = "POST"
                    headers[.accessControlRequestHeaders] = "authorization, content-type, x-herald-user-token"
                }
                if let key { headers[.authorization] = "Bearer \(key)" }
                let response = try await server.client.execute(uri: path, method: method, headers: headers, body: nil)
                return (response.status, response.headers, String(buffer: response.body))
            }
            // The preflight of a registration from a listed origin.
            let (status, headers, _) = try await call(
                .options, "/v1/apps/demo/devices", origin: "https://app.example.com", preflight: true)
            #expect(status == .noContent)
            #expect(headers[.accessControlAllowOrigin] == "https://app.example.com")
            #expect(headers[.accessControlAllowMethods]?.contains("POST") == true)
            let allowed = headers[.accessControlAllowHeaders]?.lowercased() ?? ""
            #expect(allowed.contains("authorization") && allowed.contains("x-herald-user-token"))
            #expect(headers[.accessControlAllowCredentials] == nil)
            // The call itself: its answer (here a 401) is readable by the page.
            let (denied, answerHeaders, body) = try await call(
                .get, "/v1/apps/demo/webpush/key", origin: "http://127.0.0.1:8080", key: "wrong-key")
            #expect(denied == .unauthorized)
            #expect(answerHeaders[.accessControlAllowOrigin] == "http://127.0.0.1:8080")
            #expect(answerHeaders[.vary] == "Origin")
            #expect(body.contains("authorization"))
            // An origin the app does not list: the preflight is refused, naming the origin.
            let (refused, refusedHeaders, refusal) = try await call(
                .options, "/v1/apps/demo/devices", origin: "https://evil.example", preflight: true)
            #expect(refused == .forbidden)
            #expect(refusedHeaders[.accessControlAllowOrigin] == nil)
            #expect(refusal.contains("\"field\":\"origin\""))
            let (_, plainHeaders, _) = try await call(.get, "/v1/apps/demo/webpush/key", origin: "https://evil.example")
            #expect(plainHeaders[.accessControlAllowOrigin] == nil)
            // Not the operator routes, and not another path shape.
            let (_, healthHeaders, _) = try await call(.get, "/healthz", origin: "https://app.example.com")
            #expect(healthHeaders[.accessControlAllowOrigin] == nil)
            let (missing, _, _) = try await call(
                .options, "/v1/apps/other/devices", origin: "https://app.example.com", preflight: true)
            #expect(missing == .forbidden)
            // Without Origin (servers, devices): answers as before.
            let (plain, noOriginHeaders, _) = try await call(.get, "/v1/apps/demo/webpush/key", origin: nil)
            #expect(plain == .unauthorized)
            #expect(noOriginHeaders[.vary] == nil)
        }
        // The configuration takes origins only.
        func failure(_ origins: String) -> String? {
            let yaml = """
                apps:
                  - id: a
                    keys: { server: "server-0123456789abcdef" }
                    client_registration: unverified
                    cors_origins: \(origins)
                """
            do {
                let parsed = try HeraldConfiguration.parse(yaml: yaml, file: "h.yaml")
                return parsed.apps.first?.corsOrigins.sorted().joined(separator: " ")
            } catch {
                return "error at " + (error.key ?? "?")
            }
        }
        #expect(
            failure(#"["https://App.Example.com", "http://127.0.0.1:8080", "https://a.example:443"]"#)
                == "http://127.0.0.1:8080 https://a.example https://app.example.com")
        for bad in [
            #"["https://app.example.com/"]"#, #"["app.example.com"]"#, #"["ftp://a.example"]"#, #""https://a.example""#,
        ] {
            #expect(failure(bad) == "error at apps[0].cors_origins", "\(bad)")
        }
    }
}
