import Foundation
import HTTPTypes
import HeraldCore
import HeraldEngine
import HeraldPayload
import HeraldSimulator
import HeraldStore
import HeraldTesting
import Testing

/// The engagement loop: the ids every delivered payload carries, opens reported by
/// devices and the analytics they feed, replayed over HTTP with the simulator's inbox as the
/// witness of what each device got.
@Suite("Engagement")
struct EngagementTests {
    /// The stamp of each payload a token received (APNs: under the payload key; FCM: the data value).
    static func stamps(_ server: ServerHarness, _ token: String, payloadKey: String = "demo") -> [HeraldStamp] {
        server.simulator.state.inbox(for: token).compactMap { entry in
            guard let object = entry.payloadObject else { return nil }
            if entry.pushType == "fcm" {
                let data = ((object["message"] as? [String: Any])?["data"] as? [String: String]) ?? [:]
                return HeraldStamp(appData: data.mapValues(JSONValue.string))
            }
            guard let appData = object[payloadKey] as? [String: Any],
                let decoded = try? JSONDecoder().decode(
                    JSONValue.self, from: JSONSerialization.data(withJSONObject: appData)
                ).objectValue
            else { return nil }
            return HeraldStamp(appData: decoded)
        }
    }

    /// Moves the manual clock to the next 12:00 UTC (outside every quiet hours of the examples).
    static func noon(_ server: ServerHarness) async throws {
        let now = try #require(server.runtime.devClock?.now)
        let day = 86_400.0
        var target = (now.timeIntervalSince1970 / day).rounded(.down) * day + day / 2
        if target <= now.timeIntervalSince1970 { target += day }
        try await TrackTests.advance(server, to: Date(timeIntervalSince1970: target))
    }

    static func opened(
        _ server: ServerHarness, _ json: String, key: String? = ServerHarness.server, userToken: String? = nil
    ) async throws
        -> (status: Int, body: [String: Any])
    {
        let answer = try await server.request(.post, "/v1/apps/demo/opened", key: key, userToken: userToken, json: json)
        return (Int(answer.status.code), answer.body)
    }

    @Test(
        "every delivered payload carries herald {n, d}: the notification's id and the delivery's, as the notification view lists it; on APNs under the payload key (typed and plain), on FCM as the data value"
    )
    func stamps() async throws {
        let tokens = makeDeviceTokens(2)
        try await withServer(configure: { $0.clock = .manual }) { server in
            try await Self.noon(server)
            #expect(try await server.register("ana-phone", user: "ana", token: tokens[0]) == .created)
            #expect(try await server.register("ana-tablet", user: "ana", token: tokens[1]) == .created)
            let pixel = try await server.request(
                .post, "/v1/apps/demo/devices",
                json: #"{"device_id":"ana-pixel","user_id":"ana","platform":"fcm","token":"fcm-ana-pixel"}"#)
            #expect(pixel.status == .created)
            let typed = try await server.send(
                #"{"to":{"user_ids":["ana"]},"type":"PN-02","data":{"Source":"Strava","source_id":"strava"}}"#)
            let plain = try await server.send(
                #"{"to":{"user_ids":["ana"]},"alert":{"title":"Hi","body":"Plain"},"data":{"k":"v"}}"#)
            // The key is Herald's: an app's data cannot take it.
            let refused = try await server.send(
                #"{"to":{"user_ids":["ana"]},"alert":{"body":"x"},"data":{"herald":1}}"#)
            #expect(
                refused.status == .badRequest
                    && (refused.body["error"] as? [String: Any])?["field"] as? String == "data.herald")
            for answer in [typed, plain] {
                let id = try #require(answer.body["id"] as? String)
                let view = try await server.settled(id)
                let deliveries = try #require(view["deliveries"] as? [[String: Any]])
                #expect(deliveries.count == 3)
                var byDevice: [String: Int64] = [:]
                for delivery in deliveries {
                    byDevice[try #require(delivery["device_id"] as? String)] = try #require(
                        (delivery["id"] as? NSNumber)?.int64Value)
                }
                for (device, token) in [
                    ("ana-phone", tokens[0]), ("ana-tablet", tokens[1]), ("ana-pixel", "fcm-ana-pixel"),
                ] {
                    let stamp = Self.stamps(server, token).first { $0.notificationID == id }
                    #expect(stamp?.deliveryID == byDevice[device], "\(device): \(String(describing: stamp))")
                }
            }
            // The app's own data is still beside the stamp.
            let plainPayload = try #require(
                server.simulator.state.inbox(for: tokens[0]).last?.payloadObject?["demo"] as? [String: Any])
            #expect(plainPayload["k"] as? String == "v" && plainPayload["herald"] is [String: Any])
        }
    }

    @Test(
        "SyncWell's CTR per type: 1,000 PN-02 and 1,000 PN-03 sent, 170 and 30 opened (some reported twice) → 17% (goal 15% met) and 3% (below the 5% goal over 200 sends); opt-in from the devices' permissions"
    )
    func syncWellCTR() async throws {
        let users = 1_000
        let tokens = makeDeviceTokens(users)
        // The retention pass checks goals too, once a minute by default: on a slow run it could
        // report the type before the test's own check, which must be the first.
        try await withServer(configure: {
            $0.clock = .manual
            $0.outbox.retentionInterval = .seconds(3_600)
        }) { server in
            try await Self.noon(server)
            let statuses = ["authorized", "authorized", "provisional", "denied"]
            var lines = ""
            for index in 0..<users {
                // Every fifth device reports no permission at all; the others cycle through the statuses.
                let status = index % 5 == 4 ? "" : #","authorization_status":"\#(statuses[index % 4])""#
                let version = index % 2 == 0 ? "2.0" : "2.1"
                lines +=
                    #"{"device_id":"d\#(index)","user_id":"u\#(index)","token":"\#(tokens[index])","environment":"sandbox","app_version":"\#(version)"\#(status)}"#
                    + "\n"
            }
            let imported = try await server.request(.post, "/v1/apps/demo/devices/import", json: lines)
            #expect(imported.status == .ok && imported.body["imported"] as? Int == users, "\(imported.body)")
            let errors = try await server.send(
                #"{"to":{"all":true},"type":"PN-02","data":{"Source":"Strava","source_id":"strava"}}"#)
            let providers = try await server.send(
                #"{"to":{"all":true},"type":"PN-03","data":{"New Provider":"Oura","provider_id":"oura"}}"#)
            let errorsID = try #require(errors.body["id"] as? String)
            let providersID = try #require(providers.body["id"] as? String)
            for id in [errorsID, providersID] {
                let counts = try await server.settled(id)["counts"] as? [String: Int]
                #expect(counts?["sent"] == users, "\(String(describing: counts))")
            }
            // Each device opens what the test decides, from the ids its payload carries.
            var reports = 0
            for index in 0..<users {
                let stamps = Self.stamps(server, tokens[index])
                for (notification, opens, twice, action) in [
                    (errorsID, 170, 20, "FIX"), (providersID, 30, 5, "default"),
                ] where index < opens {
                    let stamp = try #require(stamps.first { $0.notificationID == notification })
                    let json = #"{"delivery_id":\#(stamp.deliveryID),"device_id":"d\#(index)","action":"\#(action)"}"#
                    for report in 0..<(index < twice ? 2 : 1) {
                        let answer = try await Self.opened(server, json)
                        #expect(
                            answer.status == 200 && answer.body["counted"] as? Bool == (report == 0), "\(answer.body)")
                        reports += 1
                    }
                }
            }
            #expect(reports == 225)
            let analytics = try await server.request(.get, "/v1/apps/demo/analytics")
            #expect(analytics.status == .ok, "\(analytics.body)")
            let types = try #require(analytics.body["types"] as? [[String: Any]])
            let error = try #require(types.first { $0["id"] as? String == "PN-02" })
            let provider = try #require(types.first { $0["id"] as? String == "PN-03" })
            #expect(
                error["type"] as? String == "sync_error" && error["sent"] as? Int == users
                    && error["accepted"] as? Int == users)
            #expect(error["opened"] as? Int == 170 && error["ctr"] as? Double == 0.17)
            #expect(
                error["goal_ctr"] as? Double == 0.15 && error["goal_met"] as? Bool == true
                    && error["below_goal"] as? Bool == false)
            #expect(provider["opened"] as? Int == 30 && provider["ctr"] as? Double == 0.03)
            #expect(provider["goal_met"] as? Bool == false && provider["below_goal"] as? Bool == true)
            // The type below its goal is logged once a day, not at every check.
            #expect(await server.runtime.goalWatch.check(server.runtime) == ["demo/new_provider"])
            #expect(await server.runtime.goalWatch.check(server.runtime).isEmpty)
            // Counted on the day the notifications went.
            let days = try #require(error["days"] as? [[String: Any]])
            #expect(days.count == 1 && days[0]["opened"] as? Int == 170 && days[0]["sent"] as? Int == users)
            // A type with nothing sent is listed with zeros and no rate.
            let quiet = try #require(types.first { $0["id"] as? String == "PN-06" })
            #expect(quiet["sent"] as? Int == 0 && quiet["ctr"] is NSNull && quiet["below_goal"] as? Bool == false)
            // One type, and a range without those days.
            let one = try await server.request(.get, "/v1/apps/demo/analytics?type=PN-03")
            #expect((one.body["types"] as? [[String: Any]])?.map { $0["id"] as? String } == ["PN-03"])
            let before = try await server.request(
                .get, "/v1/apps/demo/analytics?from=2020-01-01&to=2020-01-31&type=sync_error")
            #expect((before.body["types"] as? [[String: Any]])?.first?["sent"] as? Int == 0)
            // Opt-in: authorized + provisional ÷ every device that reported (800 of 1,000: 600 of 800).
            let optIn = try #require(analytics.body["opt_in"] as? [String: Any])
            #expect(
                optIn["reported"] as? Int == 800 && optIn["opted_in"] as? Int == 600
                    && optIn["rate"] as? Double == 0.75, "\(optIn)")
            let versions = try #require(optIn["app_versions"] as? [[String: Any]])
            // Even indexes (2.0) report authorized or provisional; odd ones (2.1) authorized or denied.
            let even = versions.first { $0["app_version"] as? String == "2.0" }
            let odd = versions.first { $0["app_version"] as? String == "2.1" }
            #expect(
                even?["reported"] as? Int == 400 && even?["opted_in"] as? Int == 400 && odd?["opted_in"] as? Int == 200)
            #expect((odd?["statuses"] as? [String: Int]) == ["authorized": 200, "denied": 200])
            #expect((optIn["platforms"] as? [[String: Any]])?.first?["platform"] as? String == "apns")
            for (query, field) in [
                ("from=2026-13-01", "from"), ("to=yesterday", "to"), ("from=2026-02-01&to=2026-01-01", "from"),
                ("type=PN-99", "type"),
            ] {
                let bad = try await server.request(.get, "/v1/apps/demo/analytics?\(query)")
                #expect(
                    bad.status == .badRequest && (bad.body["error"] as? [String: Any])?["field"] as? String == field,
                    "\(query)")
            }
        }
    }

    @Test(
        "confirmed delivery: 1,000 PN-02 sent, 900 devices report receipts (50 twice, 600 in batches of 100), 300 open → the funnel 1,000 / 1,000 / 900 / 300; a day later the 100 without receipt are accepted, not received; each delivery shows when it was accepted, received and opened"
    )
    func confirmedDelivery() async throws {
        let users = 1_000
        let tokens = makeDeviceTokens(users)
        try await withServer(configure: { $0.clock = .manual }) { server in
            try await Self.noon(server)
            // Three builds: d0–d499 iOS 3.0, d850–d949 Android 3.1 (FCM), the others iOS 3.1.
            func isAndroid(_ index: Int) -> Bool { (850..<950).contains(index) }
            func token(_ index: Int) -> String { isAndroid(index) ? "fcm-d\(index)" : tokens[index] }
            var lines = ""
            for index in 0..<users {
                let version = index < 500 ? "3.0" : "3.1"
                lines +=
                    (isAndroid(index)
                        ? #"{"device_id":"d\#(index)","user_id":"u\#(index)","platform":"fcm","token":"\#(token(index))","app_version":"\#(version)"}"#
                        : #"{"device_id":"d\#(index)","user_id":"u\#(index)","token":"\#(tokens[index])","environment":"sandbox","app_version":"\#(version)"}"#)
                    + "\n"
            }
            let imported = try await server.request(.post, "/v1/apps/demo/devices/import", json: lines)
            #expect(imported.status == .ok && imported.body["imported"] as? Int == users, "\(imported.body)")
            let sent = try await server.send(
                #"{"to":{"all":true},"type":"PN-02","data":{"Source":"Strava","source_id":"strava"}}"#)
            let id = try #require(sent.body["id"] as? String)
            #expect((try await server.settled(id)["counts"] as? [String: Int])?["sent"] == users)
            // The simulator's inbox is each device: what it got carries the delivery's id.
            var deliveries: [Int64] = []
            for index in 0..<users {
                deliveries.append(
                    try #require(Self.stamps(server, token(index)).first { $0.notificationID == id }?.deliveryID))
            }
            func receipt(_ index: Int) -> String {
                #"{"delivery_id":\#(deliveries[index]),"device_id":"d\#(index)","displayed":true}"#
            }
            // 299 alone (the first 50 twice), one with the device's user token, 600 in six batches of 100.
            for index in 0..<299 {
                for report in 0..<(index < 50 ? 2 : 1) {
                    let answer = try await server.request(.post, "/v1/apps/demo/received", json: receipt(index))
                    #expect(
                        answer.status == .ok && answer.body["counted"] as? Bool == (report == 0)
                            && answer.body["reports"] as? Int == report + 1, "\(answer.body)")
                }
            }
            for batch in stride(from: 300, to: 900, by: 100) {
                let json = #"{"receipts":["# + (batch..<(batch + 100)).map(receipt).joined(separator: ",") + "]}"
                let answer = try await server.request(.post, "/v1/apps/demo/received", json: json)
                let results = try #require(answer.body["receipts"] as? [[String: Any]], "\(answer.body)")
                #expect(
                    results.count == 100
                        && results.allSatisfy { $0["status"] as? Int == 200 && $0["counted"] as? Bool == true })
            }
            // Not counted: a receipt from another device than the delivery's (alone: 404; in a
            // batch: its own 404 beside a repeat), one for no delivery, one with the wrong user's token.
            let wrongDevice = try await server.request(
                .post, "/v1/apps/demo/received", json: #"{"delivery_id":\#(deliveries[950]),"device_id":"d951"}"#)
            #expect(
                wrongDevice.status == .notFound
                    && (wrongDevice.body["error"] as? [String: Any])?["field"] as? String == "delivery_id")
            let mixed = try await server.request(
                .post, "/v1/apps/demo/received",
                json:
                    #"{"receipts":[\#(receipt(0)),{"delivery_id":\#(deliveries[960]),"device_id":"d961"},{"delivery_id":999999999,"device_id":"d1"}]}"#
            )
            #expect(
                (mixed.body["receipts"] as? [[String: Any]])?.map { $0["status"] as? Int } == [200, 404, 404],
                "\(mixed.body)")
            let otherUser = try await server.request(
                .post, "/v1/apps/demo/received", key: ServerHarness.client,
                userToken: ServerHarness.userToken("u1", now: server.runtime.store.now), json: receipt(299))
            #expect(otherUser.status == .forbidden)
            let mine = try await server.request(
                .post, "/v1/apps/demo/received", key: ServerHarness.client,
                userToken: ServerHarness.userToken("u299", now: server.runtime.store.now), json: receipt(299))
            #expect(mine.status == .ok && mine.body["counted"] as? Bool == true, "\(mine.body)")
            for (json, field) in [
                (#"{"device_id":"d1"}"#, "delivery_id"), (#"{"delivery_id":"x","device_id":"d1"}"#, "delivery_id"),
                (#"{"delivery_id":1}"#, "device_id"), (#"{"receipts":[]}"#, "receipts"),
                (#"{"receipts":[{"delivery_id":1,"device_id":"d1"},{"delivery_id":1}]}"#, "receipts[1].device_id"),
                (#"{"delivery_id":1,"device_id":"d1","at":"yesterday"}"#, "at"),
            ] {
                let bad = try await server.request(.post, "/v1/apps/demo/received", json: json)
                #expect(
                    bad.status == .badRequest && (bad.body["error"] as? [String: Any])?["field"] as? String == field,
                    "\(json): \(bad.body)")
            }
            let tooMany = #"{"receipts":["# + (0..<101).map { _ in receipt(0) }.joined(separator: ",") + "]}"
            #expect(try await server.request(.post, "/v1/apps/demo/received", json: tooMany).status == .badRequest)
            // 300 open (receipts or not: 270 of them among the 900, 30 among the rest).
            for index in (0..<270).map({ $0 * 3 }) + (970..<1000) {
                let open = try await Self.opened(
                    server, #"{"delivery_id":\#(deliveries[index]),"device_id":"d\#(index)"}"#)
                #expect(open.status == 200, "\(open.body)")
            }

            func funnel() async throws -> [String: Any] {
                let analytics = try await server.request(.get, "/v1/apps/demo/analytics?type=PN-02")
                return try #require((analytics.body["types"] as? [[String: Any]])?.first, "\(analytics.body)")
            }
            var type = try await funnel()
            #expect(
                type["sent"] as? Int == users && type["accepted"] as? Int == users && type["received"] as? Int == 900
                    && type["opened"] as? Int == 300, "\(type)")
            #expect(
                (type["funnel"] as? [String: Double]) == ["accepted": 1, "received": 0.9, "opened": 0.3333],
                "\(String(describing: type["funnel"]))")
            #expect(type["accepted_not_received"] as? Int == 0)
            // The Overview's source: per platform, the hour's and the window's received rate.
            let rates = try await server.request(.get, "/v1/apps/demo/analytics/platforms")
            let platforms = try #require(rates.body["platforms"] as? [[String: Any]], "\(rates.body)")
            #expect(platforms.map { $0["platform"] as? String } == ["apns", "fcm"], "\(rates.body)")
            #expect(
                platforms.map { [$0["accepted"] as? Int, $0["received"] as? Int] } == [[900, 850], [100, 50]]
                    && platforms.map { $0["received_rate"] as? Double } == [0.9444, 0.5]
                    && platforms.map { ($0["current_hour"] as? [String: Any])?["received"] as? Int } == [850, 50],
                "\(rates.body)")
            #expect(
                try await server.request(.get, "/v1/apps/demo/analytics/platforms?hours=0").status == .badRequest)
            let browser = DashboardTests.Browser(server)
            #expect(try await browser.signIn(ServerHarness.server) == .seeOther)
            let overview = try await browser.go(.get, "/dashboard/apps/demo").html
            #expect(overview.contains("94.4%") && overview.contains("50.0%"), "\(overview)")
            // A day later: the 100 without a receipt were accepted and never received.
            try await TrackTests.advance(server, to: server.runtime.store.now.addingTimeInterval(86_401))
            type = try await funnel()
            #expect(type["accepted_not_received"] as? Int == 100, "\(type)")
            let day = try #require((type["days"] as? [[String: Any]])?.first)
            #expect(day["received"] as? Int == 900 && day["accepted_not_received"] as? Int == 100)
            // Per platform and per build (platform and app version): accepted, received, opened,
            // accepted but not received.
            func groups(_ by: String) async throws -> [[Int?]] {
                let analytics = try await server.request(.get, "/v1/apps/demo/analytics?type=PN-02&by=\(by)")
                let type = try #require((analytics.body["types"] as? [[String: Any]])?.first, "\(analytics.body)")
                let groups = try #require(type[by == "platform" ? "platforms" : "app_versions"] as? [[String: Any]])
                return groups.map { group in
                    ["accepted", "received", "opened", "accepted_not_received"].map { group[$0] as? Int }
                }
            }
            #expect(try await groups("platform") == [[900, 850, 300, 50], [100, 50, 0, 50]])
            #expect(try await groups("app_version") == [[500, 500, 167, 0], [400, 350, 133, 50], [100, 50, 0, 50]])
            #expect(
                try await server.request(.get, "/v1/apps/demo/analytics?by=country").status == .badRequest)
            // The dashboard's Analytics: the type's builds, the one whose receipts fell short marked.
            let page = try await browser.go(.get, "/dashboard/apps/demo/analytics").html
            for row in [
                #"<tr class=""><td>apns 3.0</td><td class="num">500</td><td class="num">500</td><td class="num">100.0%</td><td class="num">167</td><td class="num">0</td></tr>"#,
                #"<tr class=""><td>apns 3.1</td><td class="num">400</td><td class="num">350</td><td class="num">87.5%</td><td class="num">133</td><td class="num">50</td></tr>"#,
                #"<tr class="bad"><td>fcm 3.1</td><td class="num">100</td><td class="num">50</td><td class="num">50.0%</td><td class="num">0</td><td class="num">50</td></tr>"#,
            ] {
                #expect(page.contains(row), "\(row) not in \(page)")
            }

            // Per delivery: accepted, received, opened.
            let view = try await server.request(.get, "/v1/apps/demo/notifications/\(id)?limit=1000")
            let rows = try #require(view.body["deliveries"] as? [[String: Any]])
            let byDevice = Dictionary(
                uniqueKeysWithValues: rows.compactMap { row in (row["device_id"] as? String).map { ($0, row) } })
            #expect(byDevice["d0"]?["accepted_at"] is String && byDevice["d0"]?["received_at"] is String)
            #expect(byDevice["d0"]?["opened_at"] is String && byDevice["d1"]?["opened_at"] == nil)
            #expect(byDevice["d999"]?["received_at"] == nil && byDevice["d999"]?["opened_at"] is String)
            let metrics = try await server.metricsText()
            #expect(
                metrics.contains(#"herald_deliveries_received_total{app="demo",platform="apns"} 850"#)
                    && metrics.contains(#"herald_deliveries_received_total{app="demo",platform="fcm"} 50"#),
                "\(metrics)")
            #expect(metrics.contains("herald_receipt_latency_seconds_count{platform=\"apns\"} 850"))
            if TestDatabase.kind == .sqlite {
                // SQLite's one writer, as the sends' writes and the receipts' batches used it.
                func total(_ name: String, _ work: String) -> Double? {
                    let prefix = "\(name){work=\"\(work)\"} "
                    return metrics.split(separator: "\n").first { $0.hasPrefix(prefix) }
                        .flatMap { Double($0.dropFirst(prefix.count)) }
                }
                for work in ["foreground", "background"] {
                    #expect((total("herald_sqlite_writer_holds_total", work) ?? 0) >= 1, "\(work)")
                    #expect((total("herald_sqlite_writer_held_seconds_total", work) ?? 0) > 0, "\(work)")
                    #expect(total("herald_sqlite_writer_wait_seconds_total", work) != nil, "\(work)")
                }
            }
            // One delivery twice in one batch (a late device, a queue sent twice): counted once,
            // numbered 1 and 2; one counted before, numbered on.
            let twice = try await server.request(
                .post, "/v1/apps/demo/received",
                json: #"{"receipts":[\#(receipt(950)),\#(receipt(950)),\#(receipt(5))]}"#)
            let results = try #require(twice.body["receipts"] as? [[String: Any]], "\(twice.body)")
            #expect(results.map { $0["counted"] as? Bool } == [true, false, false])
            #expect(results.map { $0["reports"] as? Int } == [1, 2, 3])  // d5 was reported twice before
            #expect(try await funnel()["received"] as? Int == 901)
        }
    }

    @Test(
        "an open is checked: the delivery must exist, have gone to device_id and (client key) to the user token's user; actions are the type's; bad fields name themselves"
    )
    func openChecks() async throws {
        let tokens = makeDeviceTokens(2)
        try await withServer(configure: { $0.clock = .manual }) { server in
            try await Self.noon(server)
            #expect(try await server.register("ana-phone", user: "ana", token: tokens[0]) == .created)
            #expect(try await server.register("bo-phone", user: "bo", token: tokens[1]) == .created)
            let sent = try await server.send(
                #"{"to":{"user_ids":["ana","bo"]},"type":"PN-02","data":{"Source":"Strava","source_id":"strava"}}"#)
            _ = try await server.settled(try #require(sent.body["id"] as? String))
            let ana = try #require(Self.stamps(server, tokens[0]).first)
            let bo = try #require(Self.stamps(server, tokens[1]).first)
            let anaToken = ServerHarness.userToken("ana", now: server.runtime.store.now)
            // Bo's delivery reported with Ana's token, or from Ana's device: refused, and nothing counted.
            let otherUser = try await Self.opened(
                server, #"{"delivery_id":\#(bo.deliveryID),"device_id":"bo-phone"}"#, key: ServerHarness.client,
                userToken: anaToken)
            #expect(
                otherUser.status == 403
                    && (otherUser.body["error"] as? [String: Any])?["field"] as? String == "X-Herald-User-Token")
            let otherDevice = try await Self.opened(
                server, #"{"delivery_id":\#(bo.deliveryID),"device_id":"ana-phone"}"#)
            #expect(
                otherDevice.status == 403
                    && (otherDevice.body["error"] as? [String: Any])?["field"] as? String == "device_id")
            let noToken = try await Self.opened(
                server, #"{"delivery_id":\#(ana.deliveryID),"device_id":"ana-phone"}"#, key: ServerHarness.client)
            #expect(noToken.status == 401)
            for (json, field) in [
                (#"{"device_id":"ana-phone"}"#, "delivery_id"),
                (#"{"delivery_id":"x1","device_id":"ana-phone"}"#, "delivery_id"),
                (#"{"delivery_id":\#(ana.deliveryID)}"#, "device_id"),
                (#"{"delivery_id":\#(ana.deliveryID),"device_id":"ana-phone","action":"APPROVE"}"#, "action"),
                (#"{"delivery_id":\#(ana.deliveryID),"device_id":"ana-phone","at":"noon"}"#, "at"),
                (#"{"delivery_id":999999999,"device_id":"ana-phone"}"#, "delivery_id"),
            ] {
                let answer = try await Self.opened(server, json)
                #expect(
                    [400, 404].contains(answer.status)
                        && (answer.body["error"] as? [String: Any])?["field"] as? String == field,
                    "\(json): \(answer.body)")
            }
            // Ana's own, with her token: counted once, however often; the first action is what counted.
            let first = try await Self.opened(
                server, #"{"delivery_id":"\#(ana.deliveryID)","device_id":"ana-phone","action":"FIX"}"#,
                key: ServerHarness.client, userToken: anaToken)
            #expect(
                first.status == 200 && first.body["counted"] as? Bool == true && first.body["reports"] as? Int == 1,
                "\(first.body)")
            let again = try await Self.opened(server, #"{"delivery_id":\#(ana.deliveryID),"device_id":"ana-phone"}"#)
            #expect(
                again.body["counted"] as? Bool == false && again.body["reports"] as? Int == 2
                    && again.body["action"] as? String == "FIX")
            #expect(again.body["event_id"] as? String == first.body["event_id"] as? String)
            let analytics = try await server.request(.get, "/v1/apps/demo/analytics?type=PN-02")
            #expect((analytics.body["types"] as? [[String: Any]])?.first?["opened"] as? Int == 1)
        }
    }

    @Test(
        "an open is the app.opened event: LucidPal's dormant step is skipped for a user who opened a notification since enrolling"
    )
    func openedEvent() async throws {
        let tokens = makeDeviceTokens(2)
        try await TrackTests.withLucidPal { server in
            for (index, user) in ["ana", "cy"].enumerated() {
                #expect(try await server.register("\(user)-phone", user: user, token: tokens[index]) == .created)
            }
            let start = try #require(server.runtime.devClock?.now)
            for user in ["ana", "cy"] {
                #expect(
                    try await server.request(.put, "/v1/apps/demo/users/\(user)/tracks/onboarding", json: "{}").status
                        == .ok)
            }
            // Something reaches both; only Cy opens it.
            let sent = try await server.send(
                #"{"to":{"user_ids":["ana","cy"]},"alert":{"title":"Hello","body":"A plain hello"}}"#)
            _ = try await server.settled(try #require(sent.body["id"] as? String))
            let stamp = try #require(Self.stamps(server, tokens[1], payloadKey: "lucidpal").first)
            let answer = try await server.request(
                .post, "/v1/apps/demo/opened", json: #"{"delivery_id":\#(stamp.deliveryID),"device_id":"cy-phone"}"#)
            #expect(answer.status == .ok && answer.body["event_id"] is String, "\(answer.body)")
            try await TrackTests.advance(server, to: start.addingTimeInterval(32 * 86_400))
            try await eventually { TrackTests.bodies(server, tokens[0]).count == 2 }
            try await server.settle()
            #expect(TrackTests.bodies(server, tokens[1]) == ["A plain hello"])
            let cy = try await server.request(.get, "/v1/apps/demo/users/cy/tracks")
            let step = try #require(
                ((cy.body["tracks"] as? [[String: Any]])?.first?["steps"] as? [[String: Any]])?.first)
            #expect(step["status"] as? String == "skipped" && step["reason"] as? String == "unless app.opened")
        }
    }
}

/// The opt-in counts are kept by triggers on devices (migration 18): every way a device changes
/// must move them, on SQLite and PostgreSQL alike.
@Suite("Opt-in counters")
struct OptInCounterTests {
    /// The analytics' opt-in statuses per app version ("unknown" for none reported).
    static func statuses(_ server: ServerHarness) async throws -> [String: [String: Int]] {
        let analytics = try await server.request(.get, "/v1/apps/demo/analytics")
        let versions = (analytics.body["opt_in"] as? [String: Any])?["app_versions"] as? [[String: Any]] ?? []
        var result: [String: [String: Int]] = [:]
        for version in versions {
            let statuses = (version["statuses"] as? [String: Int] ?? [:]).filter { $0.value != 0 }
            if !statuses.isEmpty {
                result[version["app_version"] as? String ?? "unknown", default: [:]].merge(statuses) { $0 + $1 }
            }
        }
        return result
    }

    @Test(
        "the opt-in counts follow a device registered, its permission changed, its app updated, its token dead, signed out, registered again, imported and moved to another user"
    )
    func followEveryChange() async throws {
        let tokens = makeDeviceTokens(6)
        try await withServer { server in
            func register(_ device: String, _ user: String, _ token: String, _ status: String?, _ version: String?)
                async throws
            {
                var fields = [
                    #""device_id":"\#(device)""#, #""user_id":"\#(user)""#, #""token":"\#(token)""#,
                    #""environment":"sandbox""#,
                ]
                if let status { fields.append(#""authorization_status":"\#(status)""#) }
                if let version { fields.append(#""app_version":"\#(version)""#) }
                let answer = try await server.request(
                    .post, "/v1/apps/demo/devices", json: "{" + fields.joined(separator: ",") + "}")
                #expect(answer.status == .created || answer.status == .ok, "\(answer.body)")
            }
            try await register("a", "ana", tokens[0], "authorized", "1.0")
            try await register("b", "bo", tokens[1], "denied", "1.0")
            try await register("c", "cy", tokens[2], nil, nil)
            try await register("d", "di", tokens[3], "provisional", "1.0")
            #expect(try await Self.statuses(server) == ["1.0": ["authorized": 1, "denied": 1, "provisional": 1]])
            try await register("a", "ana", tokens[0], "denied", "1.0")  // permission changed
            try await register("b", "bo", tokens[1], "denied", "1.1")  // app updated
            try await register("c", "cy", tokens[2], "authorized", nil)  // reported at last
            #expect(
                try await Self.statuses(server) == [
                    "1.0": ["denied": 1, "provisional": 1], "1.1": ["denied": 1], "unknown": ["authorized": 1],
                ])
            // Its token dead: inactive, no longer counted; registered again: counted again.
            server.simulator.state.markDead(tokens[3])
            let sent = try await server.send(#"{"to":{"user_ids":["di"]},"alert":{"body":"x"}}"#)
            _ = try await server.settled(try #require(sent.body["id"] as? String))
            #expect(try await Self.statuses(server)["1.0"] == ["denied": 1])
            server.simulator.state.revive(tokens[3])
            try await register("d", "di", tokens[3], "provisional", "1.0")
            #expect(try await Self.statuses(server)["1.0"] == ["denied": 1, "provisional": 1])
            // Signed out.
            #expect(try await server.request(.delete, "/v1/apps/demo/devices/a").status == .noContent)
            // Imported.
            let lines = [4, 5].map {
                #"{"device_id":"i\#($0)","user_id":"u\#($0)","token":"\#(tokens[$0])","authorization_status":"authorized","app_version":"2.0"}"#
            }
            let imported = try await server.request(
                .post, "/v1/apps/demo/devices/import", json: lines.joined(separator: "\n"))
            #expect(imported.status == .ok, "\(imported.body)")
            // The same token moved to another device of another user: counted once.
            try await register("b2", "bea", tokens[1], "authorized", "1.1")
            let expected: [String: [String: Int]] = [
                "1.0": ["provisional": 1], "1.1": ["authorized": 1], "unknown": ["authorized": 1],
                "2.0": ["authorized": 2],
            ]
            #expect(try await Self.statuses(server) == expected)
            // What the counters say is what a count of the devices says.
            var counted: [String: [String: Int]] = [:]
            for user in ["ana", "bo", "cy", "di", "u4", "u5", "bea"] {
                let devices =
                    try await server.request(.get, "/v1/apps/demo/users/\(user)/devices").body["devices"]
                    as? [[String: Any]] ?? []
                for device in devices where device["active"] as? Bool == true {
                    guard let status = device["authorization_status"] as? String else { continue }
                    counted[device["app_version"] as? String ?? "unknown", default: [:]][status, default: 0] += 1
                }
            }
            #expect(counted == expected)
        }
    }
}
