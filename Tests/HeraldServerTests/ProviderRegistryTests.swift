import Foundation
import HeraldCore
import HeraldEngine
import HeraldPayload
import HeraldStore
import HeraldTesting
import Testing

/// The dispatcher through its provider registry, with recording providers in place of the
/// clients: what each device's request carries and what the answers do to the store.
@Suite struct ProviderRegistryTests {
    @Test(
        "one notification to three devices: each provider gets its devices' stamped requests; a dead token deactivates its device"
    )
    func recordedSend() async throws {
        let store = try await HeraldStore.open(url: try await TestDatabase.url("registry"))
        let dead = String(repeating: "dd", count: 32)
        let registry = RecordingRegistry(
            apns: RecordingProvider { request in
                request.message.deviceToken == dead ? (.tokenDead(since: nil), "Unregistered") : (.delivered, nil)
            })
        var configuration = HeraldConfiguration()
        configuration.apps = [.init(id: "cocotte", serverKey: "server-0123456789abcdef")]
        let runtime = try HeraldRuntime(configuration: configuration, store: store, providers: registry)
        let devices = [
            DeviceRecord(
                deviceID: "phone", userID: "ana", platform: "apns", token: String(repeating: "ab", count: 32),
                environment: "production"),
            DeviceRecord(deviceID: "old", userID: "ana", platform: "apns", token: dead, environment: "sandbox"),
            DeviceRecord(deviceID: "pixel", userID: "ana", platform: "fcm", token: "fcm-token-1", environment: ""),
        ]
        for device in devices { _ = try await store.devices.upsertDevice(appID: "cocotte", device) }
        let content = StoredNotificationContent(
            content: NotificationContent(title: "Dinner at 8", body: "Ana invited you", data: ["plan": "p1"]))
        let (notification, _) = try await store.notifications.createNotification(
            appID: "cocotte", id: UUID(), idempotencyKey: nil, content: try JSONEncoder().encode(content),
            recipients: .users(["ana"]), excludeDeviceIDs: [], dueAt: store.now)

        #expect(try await OutboxLoop(runtime: runtime).runOnce() == 3)

        let apns = registry.apns.sent
        #expect(Set(apns.map(\.message.deviceToken)) == [devices[0].token, dead])
        for request in apns {
            #expect(request.notificationID == notification.id)
            #expect(request.message.apnsID == .apnsID(notification: notification.id, delivery: request.deliveryID))
            let payload = try JSONDecoder().decode(JSONValue.self, from: request.message.payload)
            // The app's data, and the stamp beside it, go under its payload key (its id by default).
            let appData = try #require(payload.objectValue?["cocotte"]?.objectValue)
            #expect(appData["plan"] == .string("p1"))
            #expect(HeraldStamp(appData: appData)?.deliveryID == request.deliveryID)
        }
        let fcm = try #require(registry.fcm.sent.first)
        #expect(registry.fcm.sent.count == 1)
        #expect(fcm.message.token == "fcm-token-1")
        #expect(fcm.message.title == "Dinner at 8")
        #expect(HeraldStamp(appData: fcm.message.data)?.deliveryID == fcm.deliveryID)

        let counts = try await store.notifications.deliveryCounts(notificationID: notification.id)
        #expect(counts[.sent] == 2)
        #expect(counts[.failed] == 1)
        let old = try #require(try await store.devices.device(appID: "cocotte", deviceID: "old"))
        #expect(!old.active)
        #expect(old.inactiveReason == "Unregistered")
        #expect(try await store.devices.device(appID: "cocotte", deviceID: "phone")?.active == true)
        await store.close()
    }
}
