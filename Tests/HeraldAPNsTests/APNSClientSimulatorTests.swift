import Foundation
import HeraldAPNs
import HeraldCore
import HeraldSimulator
import HeraldTesting
import Synchronization
import Testing

/// The delivery core against the in-process simulator over real HTTP/2 + TLS on loopback.
@Suite("APNs client against the simulator", .serialized)
struct APNSClientSimulatorTests {
    /// Sends all notifications and returns their results keyed by token.
    static func sendAll(_ client: APNSClient, _ notifications: [APNSNotification]) async -> [String: APNSResult] {
        let results = Mutex<[String: APNSResult]>([:])
        client.submit(notifications) { result in results.withLock { $0[result.deviceToken] = result } }
        await client.waitUntilIdle()
        return results.withLock { $0 }
    }

    @Test("a notification arrives with our apns-id, headers and payload")
    func delivers() async throws {
        try await withSimulator { harness in
            let client = try harness.makeClient()
            let token = makeDeviceTokens(1)[0]
            var notification = harness.notification(to: token, collapseID: "score")
            notification.expiration = 1_900_000_000
            let result = await client.send(notification)
            #expect(result.isAccepted)
            #expect(result.status == 200)
            #expect(result.attempts == 1)
            #expect(result.apnsID == notification.apnsID)
            let inbox = harness.simulator.state.inbox(for: token)
            #expect(inbox.count == 1)
            let entry = try #require(inbox.first)
            #expect(entry.apnsID == notification.apnsID.uuidString.lowercased())
            #expect(entry.topic == harness.bundleID)
            #expect(entry.pushType == "alert")
            #expect(entry.priority == 10)
            #expect(entry.collapseID == "score")
            #expect(entry.expiration == 1_900_000_000)
            let aps = try #require(entry.payloadObject?["aps"] as? [String: Any])
            #expect((aps["alert"] as? [String: Any])?["body"] as? String == "Hello")
            await client.shutdown()
        }
    }

    @Test("2,000 sends share one provider token: one signature check per connection")
    func manyWithOneJWT() async throws {
        try await withSimulator { harness in
            let client = try harness.makeClient {
                $0.connections = 4
                $0.maximumStreamsPerConnection = 100
            }
            let tokens = makeDeviceTokens(2_000)
            let results = await Self.sendAll(client, tokens.map { harness.notification(to: $0) })
            #expect(results.count == 2_000)
            #expect(results.values.allSatisfy { $0.isAccepted })
            let counters = harness.simulator.state.counters
            #expect(counters.accepted == 2_000)
            #expect(counters.signatureVerifications == counters.connections)
            #expect(counters.connections <= 4)
            #expect(counters.tokenChanges == 0)
            let summary = harness.simulator.state.inboxSummary()
            #expect(summary.tokens == 2_000)
            #expect(summary.duplicates == 0)
            await client.shutdown()
        }
    }

    @Test("one device's single sends, submitted in order, arrive in order while the connections open")
    func oneDeviceInOrder() async throws {
        try await withSimulator { harness in
            // Four connections, all still to open: round-robin would put consecutive sends on
            // different connections, and whichever opened first would deliver first.
            let client = try harness.makeClient { $0.connections = 4 }
            let tokens = makeDeviceTokens(3)
            for index in 0..<40 {
                for token in tokens {
                    client.submit([harness.notification(to: token, body: "\(index)")]) { _ in }
                }
            }
            await client.waitUntilIdle()
            for token in tokens {
                let bodies = harness.simulator.state.inbox(for: token).map {
                    (($0.payloadObject?["aps"] as? [String: Any])?["alert"] as? [String: Any])?["body"] as? String
                }
                #expect(bodies == (0..<40).map { "\($0)" })
            }
            await client.shutdown()
        }
    }

    @Test("every documented reason reaches the caller with its disposition")
    func everyReason() async throws {
        try await withSimulator { harness in
            for (status, reason) in APNSReason.documented {
                // A fresh client per reason: configuration errors disable the credential.
                let client = try harness.makeClient {
                    $0.connections = 1
                    $0.retry.maximumAttempts = 2
                }
                let token = makeDeviceTokens(1)[0]
                harness.simulator.state.script(token, status: status, reason: reason.rawValue)
                let result = await client.send(harness.notification(to: token))
                // ExpiredProviderToken for a token made a moment ago means the clocks disagree:
                // resending cannot help, so it is a configuration error (the refresh path has its own test).
                let expected =
                    reason == .expiredProviderToken
                    ? .configurationError : APNSDispositionTests.expected[reason.rawValue]
                #expect(result.reason == reason, "\(reason)")
                #expect(result.status == status, "\(reason)")
                #expect(result.disposition == expected, "\(reason)")
                // Retryable answers were retried up to the limit; final ones were not.
                #expect(result.attempts == (expected?.isRetryable == true ? 2 : 1), "\(reason)")
                if expected == .configurationError {
                    #expect(client.disabledReason == reason)
                    let next = await client.send(harness.notification(to: makeDeviceTokens(1)[0]))
                    #expect(next.status == nil, "nothing more is sent after \(reason)")
                    #expect(next.reason == reason)
                } else {
                    #expect(client.disabledReason == nil, "\(reason)")
                }
                await client.shutdown()
            }
        }
    }

    @Test("the simulator's own validations: dead token, unknown key, foreign topic")
    func simulatorValidations() async throws {
        try await withSimulator { harness in
            let client = try harness.makeClient()
            let dead = makeDeviceTokens(1)[0]
            let when = Date(timeIntervalSince1970: 1_790_000_000)
            harness.simulator.state.markDead(dead, at: when)
            let result = await client.send(harness.notification(to: dead))
            #expect(result.status == 410)
            #expect(result.reason == .unregistered)
            #expect(result.disposition == .tokenDead)
            #expect(result.timestamp == when)
            // Other tokens on the same connection keep going.
            #expect(await client.send(harness.notification(to: makeDeviceTokens(1)[0])).isAccepted)
            var foreign = harness.notification(to: makeDeviceTokens(1)[0])
            foreign.bundleID = "com.other.app"
            let disallowed = await client.send(foreign)
            #expect(disallowed.reason == .topicDisallowed)
            #expect(disallowed.disposition == .configurationError)
            await client.shutdown()

            let stranger = try APNSClient(
                key: TestSigningKey(keyID: "OTHERKEY01").signingKey,
                configuration: APNSClientConfiguration(
                    endpoint: APNSEndpoint(host: "127.0.0.1", port: harness.simulator.port),
                    additionalCAFile: harness.simulator.caFile))
            let rejected = await stranger.send(harness.notification(to: makeDeviceTokens(1)[0]))
            #expect(rejected.status == 403)
            #expect(rejected.reason == .invalidProviderToken)
            #expect(rejected.disposition == .configurationError)
            await stranger.shutdown()
        }
    }

    @Test("an expired provider token is refreshed and the notification resent on a new connection")
    func expiredTokenRefresh() async throws {
        let clock = ManualClock(Date())
        try await withSimulator({
            $0.clock = clock.clock
            $0.tokenMaximumAge = 30 * 60
        }) { harness in
            let client = try harness.makeClient(clock: clock.clock) { $0.connections = 1 }
            #expect(await client.send(harness.notification(to: makeDeviceTokens(1)[0])).isAccepted)
            clock.advance(by: 45 * 60)
            let token = makeDeviceTokens(1)[0]
            let result = await client.send(harness.notification(to: token))
            #expect(result.isAccepted)
            #expect(result.attempts == 2)
            let counters = harness.simulator.state.counters
            #expect(counters.byReason["ExpiredProviderToken"] == 1)
            #expect(counters.byReason["TooManyProviderTokenUpdates"] == nil)
            #expect(counters.connections == 2)
            #expect(harness.simulator.state.inbox(for: token).count == 1)
            await client.shutdown()
        }
    }

    @Test("429 and 5xx answers are retried with backoff until accepted")
    func retriesUntilAccepted() async throws {
        try await withSimulator({
            // 30% of answers fail: with 20 attempts a token runs out with probability 0.3^20 ≈ 3e-11.
            $0.faults.internalServerErrorRate = 0.15
            $0.faults.serviceUnavailableRate = 0.05
            $0.faults.tooManyRequestsRate = 0.1
        }) { harness in
            let client = try harness.makeClient {
                $0.connections = 2
                $0.retry.maximumAttempts = 20
            }
            let tokens = makeDeviceTokens(400)
            let results = await Self.sendAll(client, tokens.map { harness.notification(to: $0) })
            #expect(results.values.allSatisfy { $0.isAccepted })
            #expect(results.values.contains { $0.attempts > 1 })
            let counters = harness.simulator.state.counters
            #expect(counters.byStatus[500, default: 0] > 0)
            #expect(counters.byStatus[429, default: 0] > 0)
            #expect(counters.requests == results.values.reduce(0) { $0 + $1.attempts })
            #expect(harness.simulator.state.inboxSummary().duplicates == 0)
            await client.shutdown()
        }
    }

    @Test("a token that keeps failing gets exactly the allowed attempts, then its last answer")
    func retryBudget() async throws {
        try await withSimulator { harness in
            let client = try harness.makeClient { $0.retry.maximumAttempts = 3 }
            let token = makeDeviceTokens(1)[0]
            harness.simulator.state.script(token, status: 500, reason: "InternalServerError")
            let result = await client.send(harness.notification(to: token))
            #expect(result.attempts == 3)
            #expect(result.status == 500)
            #expect(result.disposition == .retryWithBackoff)
            #expect(harness.simulator.state.counters.byReason["InternalServerError"] == 3)
            await client.shutdown()
        }
    }

    @Test("a hung stream hits its deadline; the connection keeps serving others")
    func hungStreamDeadline() async throws {
        let hung = makeDeviceTokens(1)[0]
        try await withSimulator({ $0.faults.hangTokens = [hung] }) { harness in
            let client = try harness.makeClient {
                $0.connections = 1
                $0.requestDeadline = 0.3
                $0.retry.maximumAttempts = 1
            }
            async let stuck = client.send(harness.notification(to: hung))
            let fine = await client.send(harness.notification(to: makeDeviceTokens(1)[0]))
            #expect(fine.isAccepted)
            let result = await stuck
            #expect(result.reason == .timeout)
            #expect(result.status == nil)
            #expect(!result.isAccepted)
            #expect(harness.simulator.state.counters.connections == 1)
            await client.shutdown()
        }
    }

    @Test(
        "a TLS handshake that fails is a failed connect: retried with backoff, then the notification fails as unreachable"
    )
    func handshakeFailureBacksOff() async throws {
        try await withSimulator { harness in
            // Without the simulator's CA its certificate is untrusted: TCP connects, TLS fails.
            let client = try harness.makeClient {
                $0.additionalCAFile = nil
                $0.connections = 1
                $0.reconnectBaseDelay = 0.05
                $0.maximumConnectFailures = 3
            }
            let started = ContinuousClock.now
            let result = await client.send(harness.notification(to: makeDeviceTokens(1)[0]))
            #expect(result.reason == .connectionFailed)
            #expect(!result.isAccepted)
            // Three handshakes, not a reconnect loop: counted on the simulator's side.
            #expect(
                harness.simulator.state.counters.connections <= 3,
                "\(harness.simulator.state.counters.connections) connections")
            #expect(ContinuousClock.now - started < .seconds(30))
            await client.shutdown()
        }
    }

    @Test("a request waiting for a connection that never comes times out at its deadline from submission")
    func deadlineFromSubmission() async throws {
        try await withSimulator { harness in
            let client = try harness.makeClient {
                $0.additionalCAFile = nil
                $0.connections = 1
                $0.requestDeadline = 0.3
                // Connects keep failing slowly: the request never gets a stream.
                $0.reconnectBaseDelay = 5
                $0.maximumReconnectDelay = 5
                $0.maximumConnectFailures = 100
                $0.retry.maximumAttempts = 1
            }
            let result = await client.send(harness.notification(to: makeDeviceTokens(1)[0]))
            #expect(result.reason == .timeout)
            #expect(result.attempts == 1)
            await client.shutdown()
        }
    }

    @Test("GOAWAY in the middle of a burst: everything delivered, nothing twice")
    func goAwayMidBurst() async throws {
        try await withSimulator({ $0.faults.goAwayAfterStreams = 150 }) { harness in
            let client = try harness.makeClient {
                $0.connections = 2
                $0.maximumStreamsPerConnection = 100
            }
            let tokens = makeDeviceTokens(3_000)
            let results = await Self.sendAll(client, tokens.map { harness.notification(to: $0) })
            #expect(results.count == 3_000)
            #expect(results.values.allSatisfy { $0.isAccepted })
            let counters = harness.simulator.state.counters
            #expect(counters.goAways >= 10)
            let summary = harness.simulator.state.inboxSummary()
            #expect(summary.tokens == 3_000)
            #expect(summary.duplicates == 0)
            await client.shutdown()
        }
    }

    @Test("the server's stream limit is followed as it changes, before and after the first JWT")
    func followsStreamLimit() async throws {
        try await withSimulator({ $0.faults.maximumConcurrentStreams = 3 }) { harness in
            let client = try harness.makeClient { $0.connections = 1 }
            let first = await Self.sendAll(client, makeDeviceTokens(200).map { harness.notification(to: $0) })
            #expect(first.values.allSatisfy { $0.isAccepted })
            harness.simulator.state.faults.maximumConcurrentStreams = 50
            let second = await Self.sendAll(client, makeDeviceTokens(500).map { harness.notification(to: $0) })
            #expect(second.values.allSatisfy { $0.isAccepted })
            #expect(harness.simulator.state.counters.byReason.isEmpty)
            await client.shutdown()
        }
    }

    @Test("payload limits: 4096 bytes go, 4097 are refused before sending, VoIP allows 5120")
    func payloadLimits() async throws {
        try await withSimulator { harness in
            let client = try harness.makeClient()
            func sized(_ size: Int, _ pushType: APNSPushType = .alert) -> APNSNotification {
                let filler = String(repeating: "x", count: size - #"{"aps":{},"f":""}"#.utf8.count)
                return APNSNotification(
                    deviceToken: makeDeviceTokens(1)[0], pushType: pushType, bundleID: harness.bundleID,
                    payload: Data(#"{"aps":{},"f":"\#(filler)"}"#.utf8))
            }
            #expect(await client.send(sized(4096)).isAccepted)
            let tooLarge = await client.send(sized(4097))
            #expect(tooLarge.reason == .payloadTooLarge)
            #expect(tooLarge.attempts == 0)
            #expect(tooLarge.status == nil)
            #expect(await client.send(sized(5120, .voip)).isAccepted)
            #expect(await client.send(sized(5121, .voip)).reason == .payloadTooLarge)
            var collapse = sized(100)
            collapse.collapseID = String(repeating: "c", count: 65)
            #expect(await client.send(collapse).reason == .badCollapseID)
            #expect(harness.simulator.state.counters.requests == 2)
            await client.shutdown()
        }
    }

    @Test("simulator shutdown sends GOAWAY; queued work moves to a new connection")
    func reconnectsAfterServerGoAway() async throws {
        try await withSimulator { harness in
            let client = try harness.makeClient { $0.connections = 1 }
            #expect(await client.send(harness.notification(to: makeDeviceTokens(1)[0])).isAccepted)
            await harness.simulator.goAwayAll()
            // The client has seen the GOAWAY once its connection is closed.
            for _ in 0..<500 where client.openConnections > 0 { try await Task.sleep(for: .milliseconds(10)) }
            #expect(await client.send(harness.notification(to: makeDeviceTokens(1)[0])).isAccepted)
            #expect(harness.simulator.state.counters.connections == 2)
            await client.shutdown()
        }
    }
}
