import Foundation
import HeraldCore
import HeraldFCM
import HeraldPayload
import HeraldSimulator
import HeraldTesting
import Testing
import _CryptoExtras

/// FCM HTTP v1 against the simulator over real HTTP/2 + TLS: OAuth2 exchange and reuse, every
/// error class, Retry-After, data stringification.
@Suite("FCM client")
struct FCMClientTests {
    func withFCM(
        _ adjust: (inout FCMClientConfiguration) -> Void = { _ in },
        _ body: (FCMClient, SimulatorHarness) async throws -> Void
    ) async throws {
        try await withSimulator { harness in
            let account = try harness.fcmAccount()
            var configuration = harness.fcmConfiguration
            configuration.baseDelay = 0.01
            configuration.quotaDelay = 0.05
            adjust(&configuration)
            let client = try FCMClient(account: account, configuration: configuration)
            do {
                try await body(client, harness)
            } catch {
                await client.shutdown()
                throw error
            }
            await client.shutdown()
        }
    }

    @Test("one token exchange serves many sends; data values arrive as strings; mapping per protocols.md §11")
    func sendsAndMapping() async throws {
        try await withFCM { client, harness in
            let message = FCMMessage(
                token: "fcm-token-A", title: "Sync Complete", body: "Your data from Strava has been synced.",
                data: ["source": .string("strava"), "count": .int(3), "nested": .object(["a": .bool(true)])],
                timeToLive: 3600, collapseKey: "sync-strava", channelID: "sync",
                clickAction: "syncwell://connection/strava",
                analyticsLabel: "PN-01")
            let first = await client.send(message)
            #expect(first.isDelivered)
            let name = first.messageName ?? ""
            #expect(name.starts(with: "projects/herald-test/messages/"))
            let more = await client.send((0..<200).map { FCMMessage(token: "bulk-\($0)", data: ["n": .int($0)]) })
            #expect(more.filter { !$0.isDelivered }.isEmpty)
            #expect(client.tokenExchanges == 1)
            #expect(harness.simulator.state.counters.fcmTokenExchanges == 1)
            let entry = try #require(harness.simulator.state.inbox(for: "fcm-token-A").first)
            #expect(entry.pushType == "fcm")
            #expect(entry.priority == 10)
            #expect(entry.collapseID == "sync-strava")
            let sent = try #require(entry.payloadObject?["message"] as? [String: Any])
            #expect(sent["token"] as? String == "fcm-token-A")
            #expect((sent["notification"] as? [String: Any])?["title"] as? String == "Sync Complete")
            let data = try #require(sent["data"] as? [String: String])
            #expect(data == ["source": "strava", "count": "3", "nested": #"{"a":true}"#])
            let android = try #require(sent["android"] as? [String: Any])
            #expect(android["priority"] as? String == "HIGH")
            #expect(android["ttl"] as? String == "3600s")
            #expect((android["notification"] as? [String: Any])?["channel_id"] as? String == "sync")
            #expect(
                (android["notification"] as? [String: Any])?["click_action"] as? String
                    == "syncwell://connection/strava")
            #expect((sent["fcm_options"] as? [String: Any])?["analytics_label"] as? String == "PN-01")
            // A silent (data-only) message goes NORMAL.
            #expect(harness.simulator.state.inbox(for: "bulk-7").first?.priority == 5)
        }
    }

    @Test("an expired access token is renewed once; a revoked one after a 401")
    func tokenRenewal() async throws {
        // The client's clock is moved past the token's expiry instead of waiting for it. It starts
        // 3,500 s in the past so the assertions it signs after the move stay within the 5 minutes
        // ahead of real time the token endpoint accepts.
        let clock = ManualClock(Date().addingTimeInterval(-3_500))
        try await withSimulator({ $0.fcmAccessTokenLifetime = 3_600 }) { harness in
            let account = try harness.fcmAccount()
            var configuration = harness.fcmConfiguration
            configuration.tokenRefreshMargin = 0
            let client = try FCMClient(account: account, configuration: configuration, clock: .manual(clock))
            #expect(await client.send(FCMMessage(token: "t1", body: "one")).isDelivered)
            #expect(await client.send(FCMMessage(token: "t1", body: "one again")).isDelivered)
            #expect(client.tokenExchanges == 1)
            clock.advance(by: 3_700)
            #expect(await client.send(FCMMessage(token: "t2", body: "two")).isDelivered)
            #expect(client.tokenExchanges == 2)
            harness.simulator.state.revokeFCMAccessTokens()
            let afterRevoke = await client.send(FCMMessage(token: "t3", body: "three"))
            #expect(afterRevoke.isDelivered)
            #expect(afterRevoke.attempts == 2)
            #expect(client.tokenExchanges == 3)
            await client.shutdown()
        }
    }

    @Test(
        "error classes: UNREGISTERED, SENDER_ID_MISMATCH, INVALID_ARGUMENT, THIRD_PARTY_AUTH_ERROR, UNAVAILABLE, QUOTA_EXCEEDED"
    )
    func errorClasses() async throws {
        try await withFCM { client, harness in
            let state = harness.simulator.state
            state.markDead("gone")
            state.script("other-project", status: 403, reason: "SENDER_ID_MISMATCH")
            state.script("busy", status: 503, reason: "UNAVAILABLE")
            state.script("quota", status: 429, reason: "QUOTA_EXCEEDED")
            let gone = await client.send(FCMMessage(token: "gone", body: "x"))
            #expect(gone.disposition == .tokenDead)
            #expect(gone.reason == "UNREGISTERED")
            #expect(gone.status == 404)
            #expect(await client.send(FCMMessage(token: "other-project", body: "x")).disposition == .tokenDead)
            // String-only data is checked by FCM: a reserved key never leaves Herald.
            let reserved = await client.send(FCMMessage(token: "ok", data: ["google.x": .string("1")]))
            #expect(reserved.disposition == .badRequest)
            #expect(reserved.attempts == 0)
            let busy = await client.send(FCMMessage(token: "busy", body: "x"))
            #expect(busy.disposition == .retryLater)
            #expect(busy.attempts == 4)
            // The simulator counts refused sends by status and FCM error code, like APNs reasons.
            let counters = state.counters
            #expect(counters.byReason["UNREGISTERED"] == 1)
            #expect(counters.byReason["UNAVAILABLE"] == 4)
            #expect(counters.byStatus[503] == 4)
            #expect(busy.reason == "UNAVAILABLE")
            #expect(busy.retryAfter == 1)
            // 429 with Retry-After: 1 → retried after it, then accepted once the script is gone.
            let started = Date()
            let quotaTask = Task { await client.send(FCMMessage(token: "quota", body: "x")) }
            // Once the first attempt has had its 429, the quota lifts.
            for _ in 0..<500 where state.counters.byReason["QUOTA_EXCEEDED"] == nil {
                try await Task.sleep(for: .milliseconds(10))
            }
            state.removeScript("quota")
            let quota = await quotaTask.value
            #expect(quota.isDelivered)
            #expect(quota.attempts >= 2)
            #expect(Date().timeIntervalSince(started) >= 0.9)
            // THIRD_PARTY_AUTH_ERROR can be one token's: that message only.
            state.script("auth", status: 401, reason: "THIRD_PARTY_AUTH_ERROR")
            let auth = await client.send(FCMMessage(token: "auth", body: "x"))
            #expect(auth.disposition == .configurationError)
            #expect(client.disabledReason == nil)
            #expect(await client.send(FCMMessage(token: "ok", body: "x")).isDelivered)
            // A refused credential disables the client, said once, until it is enabled again.
            state.script("denied", status: 403, reason: "PERMISSION_DENIED")
            #expect(await client.send(FCMMessage(token: "denied", body: "x")).disposition == .configurationError)
            #expect(client.disabledReason == "PERMISSION_DENIED")
            #expect(await client.send(FCMMessage(token: "ok", body: "x")).disposition == .configurationError)
            await client.enable()
            #expect(await client.send(FCMMessage(token: "ok", body: "x")).isDelivered)
        }
    }

    @Test("an unreachable token endpoint is tried once per cooldown, not once per message")
    func tokenEndpointOutage() async throws {
        try await withSimulator { harness in
            let account = try FCMServiceAccount(
                json: TestServiceAccount.shared.json(tokenURI: "https://127.0.0.1:1/token"))
            var configuration = harness.fcmConfiguration
            configuration.connectTimeout = 1
            configuration.tokenFailureCooldown = 60
            let client = try FCMClient(account: account, configuration: configuration)
            for index in 0..<20 {
                let result = await client.send(FCMMessage(token: "t\(index)", body: "x"))
                #expect(result.disposition == .retryLater)
                #expect(result.reason == "TokenExchangeFailed")
            }
            #expect(client.tokenExchangeAttempts == 1)
            #expect(client.disabledReason == nil)
            await client.shutdown()
        }
    }

    @Test("a device over FCM's per-device rate is slowed alone: remembered, handed back with Retry-After, others go on")
    func perDeviceQuota() async throws {
        try await withSimulator({ $0.fcmDeviceRateLimit = 5 }) { harness in
            let account = try harness.fcmAccount()
            let configuration = harness.fcmConfiguration
            let client = try FCMClient(account: account, configuration: configuration)
            let first = await client.send((0..<5).map { FCMMessage(token: "hot", body: "n\($0)") })
            #expect(first.filter { !$0.isDelivered }.isEmpty)
            let over = await client.send(FCMMessage(token: "hot", body: "sixth"))
            #expect(over.disposition == .retryLater)
            #expect(over.reason == "QUOTA_EXCEEDED")
            #expect(over.attempts == 1)
            #expect((over.retryAfter ?? 0) > 30)
            let requests = harness.simulator.state.counters.fcmRequests
            // Remembered: the next one to that device is not even sent.
            let again = await client.send(FCMMessage(token: "hot", body: "seventh"))
            #expect(again.disposition == .retryLater)
            #expect(again.attempts == 0)
            #expect(harness.simulator.state.counters.fcmRequests == requests)
            // Other devices are not paused: no project-wide pause was set.
            #expect(client.projectPausedUntil == nil)
            let other = await client.send(FCMMessage(token: "cool", body: "x"))
            #expect(other.isDelivered)
            #expect(harness.simulator.state.inbox(for: "hot").count == 5)
            #expect(harness.simulator.state.counters.byReason["QUOTA_EXCEEDED"] == 1)
            await client.shutdown()
        }
    }

    @Test("a TTL over 28 days is sent as 28 days (the simulator refuses more); unknown service accounts are refused")
    func simulatorValidation() async throws {
        try await withSimulator { harness in
            // A service account the simulator does not know: the token exchange fails (invalid_grant).
            let stranger = try FCMServiceAccount(
                json: Data(
                    String(
                        decoding: TestServiceAccount.shared.json(tokenURI: harness.simulator.endpointURL + "/token"),
                        as: UTF8.self
                    )
                    .replacingOccurrences(of: "herald@herald-test", with: "stranger@herald-test").utf8))
            let configuration = harness.fcmConfiguration
            let strangerClient = try FCMClient(account: stranger, configuration: configuration)
            let refused = await strangerClient.send(FCMMessage(token: "t", body: "x"))
            #expect(refused.disposition == .configurationError)
            #expect(refused.reason == "OAuth2:invalid_grant")
            await strangerClient.shutdown()
            // FCM answers INVALID_ARGUMENT to a TTL over 28 days; the client sends 28 days instead.
            let account = try harness.fcmAccount()
            let client = try FCMClient(account: account, configuration: configuration)
            let ttl = await client.send(FCMMessage(token: "long", body: "x", timeToLive: 3_000_000))
            #expect(ttl.disposition == .delivered)
            let android = try #require(
                harness.simulator.state.inbox(for: "long").first?.payloadObject?["message"] as? [String: Any])
            #expect((android["android"] as? [String: Any])?["ttl"] as? String == "2419200s")
            await client.shutdown()
        }
    }

    @Test(
        "herald sim's demo service account: made once, kept, token_uri pointed at the simulator; a key file is trusted by its public half"
    )
    func demoServiceAccount() async throws {
        let directory = try makeTemporaryDirectory("herald-demo-sa")
        let first = try SimulatorFCMAccount.demo(in: directory, tokenURI: "https://127.0.0.1:1/token")
        let again = try SimulatorFCMAccount.demo(in: directory, tokenURI: "https://127.0.0.1:1/token")
        #expect(first.account.publicKey.derRepresentation == again.account.publicKey.derRepresentation)
        #expect(first.account.projectID == "herald-demo")
        let permissions = try FileManager.default.attributesOfItem(atPath: first.file)[.posixPermissions] as? Int
        #expect(permissions == 0o600)
        try await withSimulator({ $0.fcmAccounts = [first.account] }) { harness in
            let moved = try SimulatorFCMAccount.demo(in: directory, tokenURI: harness.simulator.endpointURL + "/token")
            #expect(moved.account.publicKey.derRepresentation == first.account.publicKey.derRepresentation)
            // The file as written is what `herald send --fcm --service-account` reads; no token endpoint override.
            let account = try FCMServiceAccount(file: moved.file)
            #expect(account.tokenURI == harness.simulator.endpointURL + "/token")
            let configuration = harness.fcmConfiguration
            let client = try FCMClient(account: account, configuration: configuration)
            let result = await client.send(FCMMessage(token: "demo-token", title: "Hello", body: "World"))
            await client.shutdown()
            #expect(result.isDelivered)
            #expect(result.messageName?.starts(with: "projects/herald-demo/messages/") == true)
            #expect(harness.simulator.state.inbox(for: "demo-token").count == 1)
        }
        // A key file from elsewhere is trusted through its public half; a broken one names the field.
        let testFile = directory + "/test-sa.json"
        try TestServiceAccount.shared.json(tokenURI: "https://example.invalid/token").write(
            to: URL(fileURLWithPath: testFile))
        let trusted = try SimulatorFCMAccount(serviceAccountFile: testFile)
        #expect(trusted.clientEmail == TestServiceAccount.shared.clientEmail)
        #expect(trusted.publicKey.derRepresentation == TestServiceAccount.shared.privateKey.publicKey.derRepresentation)
        let brokenFile = directory + "/broken-sa.json"
        try Data(#"{"project_id":"p","client_email":"a@b"}"#.utf8).write(to: URL(fileURLWithPath: brokenFile))
        #expect(throws: SimulatorConfigurationError.self) { try SimulatorFCMAccount(serviceAccountFile: brokenFile) }
        do {
            _ = try SimulatorFCMAccount(serviceAccountFile: brokenFile)
        } catch {
            #expect(error.description.contains("private_key"))
        }
    }

    @Test("the request body is valid JSON that carries every string exactly, whatever it contains")
    func requestBodyEscaping() throws {
        let tricky = [
            "plain", "quote \" inside", "back\\slash", "new\nline\r\n", "\u{1}\u{1F} controls", "tab\t", "émoji 🎉 ü",
            "", "</script>",
        ]
        for text in tricky {
            let message = FCMMessage(
                token: "tok-\(text)", title: text, body: text,
                data: ["k": .string(text), "n": .array([.string(text), .int(-3), .double(1.5), .bool(false), .null])],
                timeToLive: 60, collapseKey: text, channelID: text, tag: text, clickAction: text,
                analyticsLabel: "PN 01")
            let body = try message.requestBody()
            let root = try #require(try JSONSerialization.jsonObject(with: body) as? [String: Any])
            let sent = try #require(root["message"] as? [String: Any])
            #expect(sent["token"] as? String == "tok-\(text)")
            let notification = try #require(sent["notification"] as? [String: Any])
            #expect(notification["title"] as? String == text)
            #expect(notification["body"] as? String == text)
            let data = try #require(sent["data"] as? [String: String])
            #expect(data["k"] == text)
            let nestedText = try #require(data["n"])
            let nested = try #require(try JSONSerialization.jsonObject(with: Data(nestedText.utf8)) as? [Any])
            #expect(nested.first as? String == text)
            #expect((nested[1] as? NSNumber)?.intValue == -3)
            #expect((nested[2] as? NSNumber)?.doubleValue == 1.5)
            #expect(nested[4] is NSNull)
            let android = try #require(sent["android"] as? [String: Any])
            #expect(android["collapse_key"] as? String == text)
            #expect(android["ttl"] as? String == "60s")
            let androidNotification = try #require(android["notification"] as? [String: Any])
            #expect(androidNotification["tag"] as? String == text)
            #expect(androidNotification["click_action"] as? String == text)
            #expect(androidNotification["channel_id"] as? String == text)
            #expect((sent["fcm_options"] as? [String: Any])?["analytics_label"] as? String == "PN_01")
        }
        // A data-only message: no notification block, NORMAL priority, null values left out.
        let silent =
            try JSONSerialization.jsonObject(
                with: try FCMMessage(token: "t", data: ["a": .null, "b": .int(1)]).requestBody()) as? [String: Any]
        let sent = try #require(silent?["message"] as? [String: Any])
        #expect(sent["notification"] == nil)
        #expect(sent["data"] as? [String: String] == ["b": "1"])
        #expect((sent["android"] as? [String: Any])?["priority"] as? String == "NORMAL")
    }
}

extension SimulatorHarness {
    /// An FCM client configuration pointed at this simulator and trusting its CA.
    var fcmConfiguration: FCMClientConfiguration {
        var configuration = FCMClientConfiguration()
        configuration.endpoint = simulator.endpointURL
        configuration.caFile = simulator.caFile
        return configuration
    }

    /// The test service account, its `token_uri` pointing at this simulator.
    func fcmAccount() throws -> FCMServiceAccount {
        try FCMServiceAccount(json: TestServiceAccount.shared.json(tokenURI: simulator.endpointURL + "/token"))
    }
}
