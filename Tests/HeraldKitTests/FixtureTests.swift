import Foundation
import HeraldKit
import HeraldKitTesting
import HeraldPayload
import Testing

/// HeraldKit reads what the server sends: the payloads under Tests/Fixtures/payloads/ are the
/// server's own (its PayloadFixtureTests compare them with what the simulator received).
@Suite("HeraldKit reads the server's payloads")
struct FixtureTests {
    static func payload(_ name: String) throws -> [AnyHashable: Any] {
        let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/payloads/\(name)")
        return try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: file)) as? [AnyHashable: Any])
    }

    @Test(
        "Cocotte's approval: the stamp with both action tokens, a high-stakes tap behind authentication, the card model from its alert, a commit of APPROVE with its token"
    )
    func cocotteApproval() async throws {
        let userInfo = try Self.payload("cocotte-approval.apns.json")
        let appData = try #require(JSONValue(any: userInfo["cocotte"])?.objectValue)
        let stamp = try #require(HeraldStamp(appData: appData))
        #expect(stamp.deliveryID == 1 && stamp.actionTokens == ["APPROVE": "TOKEN-APPROVE", "REJECT": "TOKEN-REJECT"])
        let catalog = CategoryCatalog(types: [
            TypeSpec(type: "approval", id: nil, category: "COCOTTE_APPROVAL", stakes: .high)
        ])
        let router = NotificationRouter(schemes: ["cocotte"], stakes: { catalog.stakes(ofType: $0) })
        #expect(router.route(appData: appData) == .openBehindAuthentication(URL(string: "cocotte://approval/c1")!))
        let alert = try #require((userInfo["aps"] as? [String: Any])?["alert"] as? [String: Any])
        let card = NotificationCardModel(
            title: alert["title"] as? String ?? "", body: alert["body"] as? String ?? "", appData: appData,
            stakes: .high, reduceMotion: false)
        #expect(
            card.title == "Refund order c1" && card.chips == ["conf 0.92"] && card.why == "Why: Damaged in transit.")
        let transport = RecordingTransport()
        transport.answer(.status(200, #"{"status":"committed","result":{"ok":true}}"#))
        let client = HeraldClient(
            configuration: HeraldKitConfiguration(appID: "cocotte", clientKey: "ck"), transport: transport,
            store: InMemoryKeyValueStore())
        #expect(
            await client.commitAction(appData: appData, action: "APPROVE")
                == .committed(result: .object(["ok": .bool(true)])))
        let body = try #require(transport.requests.first?.body)
        #expect(
            (try JSONSerialization.jsonObject(with: body) as? [String: Any])?["token"] as? String == "TOKEN-APPROVE")
    }

    @Test(
        "Lucid's comment: its deep link to the comment on the lucid scheme, the thread per entry; SyncWell's FCM data: the stamp as a JSON string reads the same"
    )
    func lucidAndFCM() throws {
        let lucid = try Self.payload("lucid-comment.apns.json")
        let appData = try #require(JSONValue(any: lucid["lucid"])?.objectValue)
        #expect(
            NotificationRouter(schemes: ["lucid"]).route(appData: appData)
                == .open(URL(string: "lucid://library/e42/comments/c7")!))
        #expect((lucid["aps"] as? [String: Any])?["thread-id"] as? String == "library-e42")
        #expect(HeraldStamp(appData: appData)?.deliveryID == 1)
        let fcm = try Self.payload("syncwell-sync-error.fcm.json")
        let data = try #require(JSONValue(any: (fcm["message"] as? [String: Any])?["data"])?.objectValue)
        let stamp = try #require(HeraldStamp(appData: data))
        #expect(
            stamp.notificationID == "00000000-0000-0000-0000-000000000000" && stamp.actionTokens == ["FIX": "TOKEN-FIX"]
        )
        #expect(
            NotificationRouter(schemes: ["syncwell"]).route(appData: data)
                == .open(URL(string: "syncwell://connection/strava")!))
    }
}
