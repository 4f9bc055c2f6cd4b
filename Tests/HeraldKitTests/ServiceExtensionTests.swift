import Foundation
import HeraldKit
import HeraldKitTesting
import HeraldPayload
import Synchronization
import Testing

/// The service extension helper with a stepped clock: decrypt first,
/// media within 2 s, the best attempt delivered exactly once whatever calls come late or twice.
@Suite("HeraldKit service extension")
struct ServiceExtensionTests {
    /// Answers after the test releases it (or never: cancelled by the budget).
    final class GatedFetcher: MediaFetcher, @unchecked Sendable {
        private let gate = Mutex<CheckedContinuation<Void, Never>?>(nil)
        let started = Mutex(0)
        let file = URL(fileURLWithPath: "/tmp/avatar.jpg")

        func fetch(_ url: URL, maximumBytes: Int) async throws -> URL {
            started.withLock { $0 += 1 }
            try await withTaskCancellationHandler {
                await withCheckedContinuation { continuation in gate.withLock { $0 = continuation } }
                try Task.checkCancellation()
            } onCancel: {
                gate.withLock {
                    $0?.resume()
                    $0 = nil
                }
            }
            return file
        }

        func release() {
            gate.withLock {
                $0?.resume()
                $0 = nil
            }
        }
    }

    struct Reverse: PayloadDecryptor {
        func decrypt(_ ciphertext: String, appData: [String: JSONValue]) async throws -> String {
            String(ciphertext.reversed())
        }
    }

    struct Broken: PayloadDecryptor {
        struct Failure: Error {}
        func decrypt(_ ciphertext: String, appData: [String: JSONValue]) async throws -> String { throw Failure() }
    }

    static let content = ExtensionContent(
        title: "Approve PPV pricing", body: "New message",
        appData: [
            "media_url": .string("https://cdn.example/avatar.jpg"),
            "encrypted_body": .string(String("$48 is 1σ above your median".reversed())),
        ])

    final class Deliveries: @unchecked Sendable {
        let list = Mutex<[ExtensionContent]>([])
        var all: [ExtensionContent] { list.withLock { $0 } }
        func add(_ content: ExtensionContent) { list.withLock { $0.append(content) } }
    }

    static func waitUntil(_ condition: () -> Bool) async {
        for _ in 0..<2000 where !condition() { try? await Task.sleep(for: .milliseconds(1)) }
    }

    /// A session on Cocotte's card, its body decrypted, its media fetch started and its 2 s budget running.
    static func fetching() async -> (
        SteppedKitClock, GatedFetcher, Deliveries, ServiceExtensionSession, Task<Void, Never>
    ) {
        let clock = SteppedKitClock()
        let fetcher = GatedFetcher()
        let delivered = Deliveries()
        let session = ServiceExtensionSession(
            content: content, decryptor: Reverse(), fetcher: fetcher, clock: clock, deliver: delivered.add)
        let running = Task { await session.run() }
        await waitUntil { fetcher.started.withLock { $0 } == 1 && clock.waiting == 1 }
        return (clock, fetcher, delivered, session, running)
    }

    @Test("in time: decrypted body and the avatar, delivered once; the system's late expiry changes nothing")
    func inTime() async throws {
        let (clock, fetcher, delivered, session, running) = await Self.fetching()
        clock.advance(by: 1.5)
        fetcher.release()
        await running.value
        session.timeWillExpire()
        #expect(delivered.all.count == 1)
        #expect(
            delivered.all.first?.body == "$48 is 1σ above your median"
                && delivered.all.first?.attachments == [fetcher.file])
    }

    @Test(
        "the media later than 2 s: delivered at 2 s with the decrypted body and no avatar (the fetch cancelled), once")
    func mediaLate() async throws {
        let (clock, fetcher, delivered, session, running) = await Self.fetching()
        clock.advance(by: 1.9)
        #expect(delivered.all.isEmpty)
        clock.advance(by: 0.2)
        await running.value
        #expect(
            delivered.all.count == 1 && delivered.all.first?.attachments == []
                && delivered.all.first?.body == "$48 is 1σ above your median")
        fetcher.release()
        session.timeWillExpire()
        #expect(delivered.all.count == 1)
    }

    @Test(
        "the system expires first: the best attempt so far goes at once, twice called is once delivered, and the work finishing later delivers nothing more"
    )
    func expiresFirst() async throws {
        let (_, fetcher, delivered, session, running) = await Self.fetching()
        session.timeWillExpire()
        session.timeWillExpire()
        #expect(
            delivered.all.count == 1 && delivered.all.first?.body == "$48 is 1σ above your median" && session.delivered)
        fetcher.release()
        await running.value
        #expect(delivered.all.count == 1)
    }

    /// A gate the test opens: what waits on it stays waiting until then.
    final class Gate: @unchecked Sendable {
        private let state = Mutex<(open: Bool, waiting: [CheckedContinuation<Void, Never>])>((false, []))
        func wait() async {
            await withCheckedContinuation { continuation in
                let resume = state.withLock { state -> Bool in
                    if state.open { return true }
                    state.waiting.append(continuation)
                    return false
                }
                if resume { continuation.resume() }
            }
        }
        func open() {
            for continuation in state.withLock({ state -> [CheckedContinuation<Void, Never>] in
                state.open = true
                defer { state.waiting = [] }
                return state.waiting
            }) { continuation.resume() }
        }
    }

    @Test(
        "the receipt: one per delivery, through the background uploader; offline it waits in the outbox and goes when the network returns; the content is handed to the system without waiting for it"
    )
    func receipts() async throws {
        let transport = RecordingTransport()
        let uploader = RecordingTransport()
        let client = HeraldClient(
            configuration: HeraldKitConfiguration(
                appID: "cocotte", clientKey: "client-key", environment: .sandbox, userToken: { "token-for-\($0)" }),
            transport: transport, backgroundUploader: uploader, store: InMemoryKeyValueStore(), deviceID: "ana-phone")
        await client.register(rawToken: Data(repeating: 7, count: 32), userID: "ana")
        var content = Self.content
        content.appData["media_url"] = nil
        content.appData["herald"] = .object(["n": .string("n1"), "d": .int(4211)])
        // The extension runs while the device is offline, and the receipt's report is slow to
        // even start: the content still goes at once.
        uploader.answer(.offline, then: .offline)
        let gate = Gate()
        let delivered = Deliveries()
        let session = ServiceExtensionSession(
            content: content, decryptor: Reverse(), fetcher: nil, clock: SteppedKitClock(),
            reportReceipt: { appData in
                await gate.wait()
                await client.reportReceived(appData: appData)
            }, deliver: delivered.add)
        await session.run()
        #expect(delivered.all.map(\.body) == ["$48 is 1σ above your median"])
        #expect(uploader.requests.isEmpty)
        gate.open()
        await session.receiptReported()
        // Tried once while offline; it waits in the outbox.
        #expect(uploader.requests.map(\.path) == ["/v1/apps/cocotte/received"])
        #expect(await client.outbox.pending.map(\.kind) == ["received"])
        // The same delivery again (the foreground handler, or the extension run twice): nothing new.
        #expect(await client.reportReceived(appData: content.appData))
        #expect(await client.outbox.pending.count == 1)
        // The network returns.
        uploader.answer(.status(200, #"{"delivery_id":4211,"status":200,"counted":true,"reports":1}"#))
        await client.outbox.retryNow()
        try await client.outbox.drainUntilEmpty(maximumWait: 5)
        let sent = uploader.requests.filter { $0.path == "/v1/apps/cocotte/received" }
        #expect(sent.count == 2 && Set(sent.compactMap { $0.headers["Idempotency-Key"] }).count == 1)
        let body = (sent.last?.body.flatMap { try? JSONSerialization.jsonObject(with: $0) } as? [String: Any]) ?? [:]
        #expect(
            body["delivery_id"] as? Int == 4211 && body["device_id"] as? String == "ana-phone"
                && body["displayed"] as? Bool == true && body["at"] is String, "\(body)")
        #expect(sent.last?.headers["X-Herald-User-Token"] == "token-for-ana")
        #expect(!transport.requests.contains { $0.path.hasSuffix("/received") })
        // A payload that is not Herald's has no receipt.
        #expect(await client.reportReceived(appData: ["k": .string("v")]) == false)
    }

    @Test("a body that cannot be decrypted keeps the payload's neutral text; no media key, no fetch")
    func decryptFails() async throws {
        let delivered = Deliveries()
        var content = Self.content
        content.appData["media_url"] = nil
        let fetcher = GatedFetcher()
        let session = ServiceExtensionSession(
            content: content, decryptor: Broken(), fetcher: fetcher, clock: SteppedKitClock(), deliver: delivered.add)
        await session.run()
        #expect(delivered.all.map(\.body) == ["New message"] && fetcher.started.withLock { $0 } == 0)
    }
}
