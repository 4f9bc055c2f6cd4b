import Foundation
import HeraldKit
import HeraldKitTesting
import HeraldPayload
import Testing

/// Categories and routing.
@Suite("HeraldKit categories and routing")
struct RoutingTests {
    static let herald = CategoryCatalog(
        categories: [
            CategorySpec(
                id: "APPROVAL", types: ["approval"],
                actions: [
                    ActionSpec(id: "APPROVE", title: "Approve"),
                    ActionSpec(id: "REJECT", title: "Reject", destructive: true),
                    ActionSpec(id: "LATER", title: "Later"),
                ]),
            CategorySpec(id: "DIGEST", types: ["digest"], actions: [ActionSpec(id: "OPEN", title: "Open")]),
        ],
        types: [
            TypeSpec(type: "approval", id: "C-03", category: "APPROVAL", stakes: .high),
            TypeSpec(type: "digest", id: nil, category: "DIGEST", stakes: .low),
        ])

    @Test(
        "merged with the app's own (same id: the app's wins), at most 2 actions, a high-stakes category's actions behind authentication"
    )
    func merge() {
        let merged = Self.herald.merged(with: [
            CategorySpec(id: "DIGEST", actions: [ActionSpec(id: "MUTE", title: "Mute")]),
            CategorySpec(id: "CHAT", actions: []),
        ])
        #expect(merged.map(\.id) == ["APPROVAL", "DIGEST", "CHAT"])
        let approval = merged[0]
        #expect(
            approval.actions.map(\.id) == ["APPROVE", "REJECT"] && approval.actions.allSatisfy(\.authenticationRequired)
        )
        #expect(merged[1].actions.map(\.id) == ["MUTE"] && !merged[1].actions[0].authenticationRequired)
        #expect(Self.herald.stakes(ofType: "C-03") == .high && Self.herald.stakes(ofType: "nope") == nil)
    }

    @Test(
        "Herald's categories are fetched with the client key and kept; offline or on an error the last good copy is used"
    )
    func lastGoodCopy() async throws {
        let transport = RecordingTransport()
        let body = String(decoding: try JSONEncoder().encode(Self.herald), as: UTF8.self)
        let client = HeraldClient(
            configuration: HeraldKitConfiguration(appID: "cocotte", clientKey: "ck"), transport: transport,
            store: InMemoryKeyValueStore())
        transport.answer(.status(200, body), .offline, .status(503))
        #expect(await client.categories() == Self.herald)
        #expect(
            transport.requests.first?.path == "/v1/apps/cocotte/catalog/categories"
                && transport.requests.first?.headers["Authorization"] == "Bearer ck")
        #expect(await client.categories() == Self.herald)
        #expect(await client.categories() == Self.herald)
    }

    @Test(
        "a tap opens the payload's deep link on an allowed scheme or host; a high-stakes type opens behind authentication; other schemes, hosts and dismissals open nothing; the app's resolver goes first"
    )
    func routes() {
        let router = NotificationRouter(
            schemes: ["lucid", "cocotte"], hosts: ["app.cocotte.example"],
            resolve: { data, _ in data["chat_query"]?.stringValue.flatMap { URL(string: "lucidpal://chat?q=\($0)") } },
            stakes: { Self.herald.stakes(ofType: $0) })
        #expect(
            router.route(appData: [
                "type": .string("library_comment"), "deep_link": .string("lucid://library/e1/comments/c1"),
            ])
                == .open(URL(string: "lucid://library/e1/comments/c1")!))
        #expect(
            router.route(appData: ["type": .string("approval"), "deep_link": .string("cocotte://approve/c1")])
                == .openBehindAuthentication(URL(string: "cocotte://approve/c1")!))
        #expect(
            router.route(appData: ["deep_link": .string("https://app.cocotte.example/card/1")])
                == .open(URL(string: "https://app.cocotte.example/card/1")!))
        for link in [
            "javascript:alert(1)", "https://evil.example/x", "file:///etc/passwd", "http://app.cocotte.example/x",
        ] {
            guard case .none = router.route(appData: ["deep_link": .string(link)]) else {
                Issue.record("\(link) was allowed")
                continue
            }
        }
        #expect(
            router.route(appData: ["deep_link": .string("lucid://x")], action: NotificationRouter.dismissAction)
                == .none(reason: "dismissed"))
        #expect(router.route(appData: [:]) == .none(reason: "no deep link"))
        // LucidPal's tap: a pre-seeded chat from its data (the resolver), not a deep link.
        #expect(
            router.route(appData: ["chat_query": .string("trial")])
                == .none(reason: "lucidpal scheme or host not allowed"))
        let lucidPal = NotificationRouter(schemes: ["lucidpal"], resolve: router.resolve)
        #expect(
            lucidPal.route(appData: ["chat_query": .string("trial")]) == .open(URL(string: "lucidpal://chat?q=trial")!))
    }

    @Test("a destination decided at a cold start survives the launch and is taken once")
    func pending() {
        let store = InMemoryKeyValueStore()
        PendingRoute(store: store).park(.openBehindAuthentication(URL(string: "cocotte://approve/c1")!))
        PendingRoute(store: store).park(.none(reason: "dismissed"))
        let relaunched = PendingRoute(store: store)
        #expect(relaunched.take() == .openBehindAuthentication(URL(string: "cocotte://approve/c1")!))
        #expect(relaunched.take() == nil)
    }
}

/// `JSONValue(any:)`: what an app's delegate hands HeraldKit from `userInfo`.
@Suite("HeraldKit userInfo conversion")
struct UserInfoTests {
    @Test("a payload parsed by Foundation converts with booleans, integers and doubles apart, and its stamp reads")
    func convert() throws {
        let payload =
            #"{"aps":{"alert":"x","content-available":1},"cocotte":{"herald":{"n":"abc","d":42,"a":{"APPROVE":"t"}},"flag":true,"ratio":0.82,"n":1,"list":[1,"a",null]}}"#
        let object = try JSONSerialization.jsonObject(with: Data(payload.utf8))
        let userInfo = try #require(object as? [AnyHashable: Any])
        let appData = try #require(JSONValue(any: userInfo["cocotte"])?.objectValue)
        #expect(appData["flag"] == .bool(true) && appData["n"] == .int(1) && appData["ratio"] == .double(0.82))
        #expect(appData["list"] == .array([.int(1), .string("a"), .null]))
        let stamp = try #require(HeraldStamp(appData: appData))
        #expect(stamp.deliveryID == 42 && stamp.actionTokens == ["APPROVE": "t"])
        #expect(JSONValue(any: Date()) == nil)
    }
}
