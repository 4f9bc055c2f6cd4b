import Foundation
package import HeraldAPNs
package import HeraldCore
package import HeraldSimulator

/// An in-process simulator with a trusted key and a client factory: the seam the transport
/// tests go through (real HTTP/2 + TLS on loopback, nothing mocked).
package struct SimulatorHarness: Sendable {
    package let simulator: APNSSimulator
    package let key: TestSigningKey
    package let bundleID: String

    /// A client for the simulator; `adjust` changes the configuration (deadlines, retry policy…).
    package func makeClient(
        clock: HeraldClock = .system,
        _ adjust: (inout APNSClientConfiguration) -> Void = { _ in }
    ) throws -> APNSClient {
        var configuration = APNSClientConfiguration(
            endpoint: APNSEndpoint(host: simulator.configuration.host, port: simulator.port),
            additionalCAFile: simulator.caFile)
        configuration.retry = APNSRetryPolicy(
            maximumAttempts: 5, baseDelay: 0.01, maximumDelay: 0.2, tooManyRequestsDelay: 0.02, maximumResends: 20)
        adjust(&configuration)
        return try APNSClient(key: key.signingKey, configuration: configuration, clock: clock)
    }

    /// An alert notification to `token` with a small JSON payload.
    package func notification(
        to token: String, body: String = "Hello", pushType: APNSPushType = .alert, collapseID: String? = nil
    ) -> APNSNotification {
        let payload = #"{"aps":{"alert":{"body":"\#(body)"}},"t":"\#(token.prefix(8))"}"#
        return APNSNotification(
            deviceToken: token, pushType: pushType, bundleID: bundleID, collapseID: collapseID,
            payload: Data(payload.utf8))
    }
}

/// Starts an in-process simulator for the body, then stops it.
package func withSimulator<Result>(
    bundleID: String = "com.example.herald",
    _ adjust: (inout SimulatorConfiguration) -> Void = { _ in },
    _ body: (SimulatorHarness) async throws -> Result
) async throws -> Result {
    let key = TestSigningKey()
    var configuration = SimulatorConfiguration(tlsDirectory: try makeTemporaryDirectory("herald-sim"))
    configuration.keys = [key.simulatorKey]
    configuration.bundleIDs = [bundleID]
    configuration.fcmAccounts = [TestServiceAccount.shared.simulatorAccount]
    configuration.controlPort = nil
    adjust(&configuration)
    let simulator = try await APNSSimulator.start(configuration)
    do {
        let result = try await body(SimulatorHarness(simulator: simulator, key: key, bundleID: bundleID))
        await simulator.shutdown()
        return result
    } catch {
        await simulator.shutdown()
        throw error
    }
}
