import Foundation
import HeraldKit
import HeraldKitTesting
import HeraldPayload
import Testing

/// Live Activity tokens reported through the outbox: push-to-start per attributes type, update
/// tokens per activity as they rotate, each once.
@Suite("HeraldKit Live Activity tokens")
struct ActivityTokenTests {
    static func token(_ byte: UInt8) -> Data { Data(repeating: byte, count: 32) }

    @Test(
        "a push-to-start token is PUT for the device and attributes type once; a new one replaces it; none is sent while signed out"
    )
    func pushToStart() async throws {
        let transport = RecordingTransport()
        let client = TokenAndOutboxTests.client(transport)
        #expect(await client.reportPushToStartToken(Self.token(1), attributesType: "DeliveryAttributes") == nil)
        #expect(transport.requests.isEmpty)
        await client.register(rawToken: TokenAndOutboxTests.raw, userID: "matt")
        let tokens = ActivityTokens(client: client)
        let (stream, continuation) = AsyncStream.makeStream(of: Data.self)
        for byte: UInt8 in [1, 1, 2] { continuation.yield(Self.token(byte)) }
        continuation.finish()
        await tokens.followPushToStart(attributesType: "DeliveryAttributes", stream)
        let puts = transport.requests.filter { $0.method == "PUT" }
        #expect(
            puts.map(\.path)
                == Array(
                    repeating: "/v1/apps/lucid/devices/matt-iphone/activity-tokens/start/DeliveryAttributes", count: 2))
        #expect(
            puts.map { TokenAndOutboxTests.body($0)["token"] as? String } == [
                String(repeating: "01", count: 32), String(repeating: "02", count: 32),
            ])
        #expect(
            puts.allSatisfy {
                $0.headers["X-Herald-User-Token"] == "token-for-matt"
                    && $0.headers["Authorization"] == "Bearer client-key"
            })
    }

    @Test(
        "an activity's update tokens: a rotation while offline replaces the report still waiting, so only the newest goes when the network returns; a token acknowledged is not sent again"
    )
    func rotationOffline() async throws {
        let transport = RecordingTransport()
        let clock = ManualKitClock()
        let client = TokenAndOutboxTests.client(transport, clock: clock)
        await client.register(rawToken: TokenAndOutboxTests.raw, userID: "matt")
        let sentBefore = transport.requests.count
        transport.answer(.offline, .offline, then: .status(200))
        await client.reportActivityToken(Self.token(3), activityID: "order-42", attributesType: "DeliveryAttributes")
        await client.reportActivityToken(Self.token(4), activityID: "order-42", attributesType: "DeliveryAttributes")
        // Offline: both reports were tried and failed; the rotation replaced the first.
        let offline = transport.requests.count
        // Back online: the outbox's next try sends the newest token only, once.
        clock.advance(by: 3_600)
        await client.outbox.drain()
        let online = transport.requests.dropFirst(offline)
        #expect(online.count == 1, "\(online.map(\.path))")
        let delivered = try #require(online.first)
        #expect(delivered.method == "PUT" && delivered.path == "/v1/apps/lucid/activities/order-42/tokens/matt-iphone")
        #expect(TokenAndOutboxTests.body(delivered)["token"] as? String == String(repeating: "04", count: 32))
        #expect(TokenAndOutboxTests.body(delivered)["attributes_type"] as? String == "DeliveryAttributes")
        #expect(transport.requests.count - sentBefore == offline - sentBefore + 1)
        let count = transport.requests.count
        await client.reportActivityToken(Self.token(4), activityID: "order-42")
        #expect(transport.requests.count == count)
    }
}
