import Foundation
import HeraldKit
import HeraldKitTesting
import HeraldPayload
import Testing

/// Delegate events buffered until the app attaches: the cold-start tap is reported once.
@Suite("HeraldKit delegate events")
struct DelegateEventTests {
    static func card(_ delivery: Int) -> [String: JSONValue] {
        ["herald": .object(["n": .string("n"), "d": .int(delivery)])]
    }

    @Test(
        "a tap that launched the app, posted before HeraldKit exists, is reported once when it attaches; the same tap again and a dismissal are not reported; later taps go straight through; a foreground arrival is a receipt, once"
    )
    func coldStart() async throws {
        let events = NotificationEvents()
        events.post(.response(appData: Self.card(7), action: "default", text: nil))
        events.post(.response(appData: Self.card(7), action: "default", text: nil))  // the system hands it twice
        events.post(
            .response(appData: Self.card(8), action: "com.apple.UNNotificationDismissActionIdentifier", text: nil))
        let transport = RecordingTransport()
        let client = HeraldClient(
            configuration: HeraldKitConfiguration(appID: "lucid", clientKey: "ck"), transport: transport,
            store: InMemoryKeyValueStore())
        let listening = client.attach(events)
        func opens() -> [Int] {
            transport.requests.filter { $0.path == "/v1/apps/lucid/opened" }.compactMap {
                ($0.body.flatMap { try? JSONSerialization.jsonObject(with: $0) } as? [String: Any])?["delivery_id"]
                    as? Int
            }
        }
        for _ in 0..<2000 where opens().count < 1 { try await Task.sleep(for: .milliseconds(1)) }
        events.post(.response(appData: Self.card(9), action: "APPROVE", text: nil))
        for _ in 0..<2000 where opens().count < 2 { try await Task.sleep(for: .milliseconds(1)) }
        #expect(opens() == [7, 9])
        // A notification arriving in the foreground is a receipt (once per delivery).
        events.post(.willPresent(appData: Self.card(10)))
        events.post(.willPresent(appData: Self.card(10)))
        events.post(.response(appData: Self.card(11), action: "default", text: nil))
        for _ in 0..<2000 where opens().count < 3 { try await Task.sleep(for: .milliseconds(1)) }
        let receipts = transport.requests.filter { $0.path == "/v1/apps/lucid/received" }.compactMap {
            ($0.body.flatMap { try? JSONSerialization.jsonObject(with: $0) } as? [String: Any])?["delivery_id"] as? Int
        }
        #expect(receipts == [10] && opens() == [7, 9, 11])
        listening.cancel()
    }

    @Test("the fake notification center: a provisional request shows no prompt, a full one does and answers its status")
    func center() async throws {
        let center = FakeNotificationCenter(answer: .denied)
        #expect(try await center.requestAuthorization(provisional: true) == .provisional && center.promptsShown == 0)
        #expect(try await center.requestAuthorization(provisional: false) == .denied && center.promptsShown == 1)
        await center.setCategories([CategorySpec(id: "A", actions: [])])
        let status = await center.authorizationStatus()
        #expect(center.categories.map(\.id) == ["A"] && status == .denied)
    }
}

extension DelegateEventTests {
    @Test(
        "a second listener replaces the first, which ends; events then go to the second, none lost to the first's ending"
    )
    func secondListener() async throws {
        let events = NotificationEvents()
        var first = events.events().makeAsyncIterator()
        let second = events.events()
        #expect(await first.next() == nil)
        events.post(.willPresent(appData: ["k": .string("v")]))
        var iterator = second.makeAsyncIterator()
        #expect(await iterator.next() == .willPresent(appData: ["k": .string("v")]))
    }
}
