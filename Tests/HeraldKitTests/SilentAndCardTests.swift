import Foundation
import HeraldKit
import HeraldKitTesting
import HeraldPayload
import Synchronization
import Testing

/// Silent sync pushes and the content extension's card.
@Suite("HeraldKit silent push and card model")
struct SilentAndCardTests {
    @Test(
        "a sync push calls the pull with its cursor and answers newData / noData / failed; a push without a cursor is not Herald's"
    )
    func silent() async {
        let seen = Mutex<[String]>([])
        let changed = SilentPushHandler(clock: SteppedKitClock()) { cursor in
            seen.withLock { $0.append(cursor) }
            return cursor != "c-same"
        }
        #expect(await changed.handle(appData: ["cursor": .string("c-42")]) == .newData)
        #expect(await changed.handle(appData: ["cursor": .string("c-same")]) == .noData)
        #expect(await changed.handle(appData: ["other": .string("x")]) == nil)
        #expect(seen.withLock { $0 } == ["c-42", "c-same"])
        struct Down: Error {}
        #expect(
            await SilentPushHandler(clock: SteppedKitClock()) { _ in throw Down() }.handle(appData: [
                "cursor": .string("c")
            ]) == .failed)
    }

    @Test("a pull longer than the budget is cancelled and answers failed at the budget")
    func slowPull() async {
        let clock = SteppedKitClock()
        let cancelled = Mutex(false)
        let handler = SilentPushHandler(budget: 25, clock: clock) { _ in
            do {
                try await Task.sleep(for: .seconds(3600))
            } catch {
                cancelled.withLock { $0 = true }
                throw error
            }
            return true
        }
        let running = Task { await handler.handle(appData: ["cursor": .string("c")]) }
        for _ in 0..<2000 where clock.waiting == 0 { try? await Task.sleep(for: .milliseconds(1)) }
        clock.advance(by: 24)
        clock.advance(by: 1)
        #expect(await running.value == .failed)
        #expect(cancelled.withLock { $0 })
    }

    @Test(
        "Cocotte's approval card: title ≤ 50, banner ≤ 90 with an ellipsis at a character, full body on expand, chips, stakes label and colour, Why line, VoiceOver order, reduced motion"
    )
    func card() {
        let body =
            "Buyer profile matches paid-tier signals; $48 is 1σ above your median and the last three PPVs sold within an hour. 👩‍👩‍👧 approved similar."
        let card = NotificationCardModel(
            title: "Approve PPV pricing — $48 for new sub, the buyer is a returning subscriber", body: body,
            appData: [
                "specialist": .string("content-onlyfans"), "confidence": .string("0.82"),
                "reason": .string("Matches paid-tier signals."),
            ],
            stakes: .high, reduceMotion: false)
        #expect(
            card.title.count <= 50 && card.title.hasSuffix("…")
                && card.title.hasPrefix("Approve PPV pricing — $48 for new sub, the buyer"))
        #expect(card.bannerBody.count <= 90 && card.bannerBody.hasSuffix("…") && card.fullBody == body)
        #expect(card.chips == ["content-onlyfans", "conf 0.82"])
        #expect(card.stakesLabel == "High" && card.stakesColor == "rose" && card.animatesEmphasis)
        #expect(card.why == "Why: Matches paid-tier signals.")
        #expect(
            card.accessibilityElements == [
                "High stakes", card.title, "content-onlyfans", "conf 0.82", body, "Why: Matches paid-tier signals.",
            ])
        // A family emoji (one grapheme of several scalars) at the cut is kept whole or left out.
        let emoji = String(repeating: "a", count: 88) + "👩‍👩‍👧👩‍👩‍👧xyz"
        let cut = NotificationCardModel.truncated(emoji, to: 90)
        #expect(cut.count == 90 && cut.hasSuffix("👩‍👩‍👧…"))
        let calm = NotificationCardModel(
            title: "Last night with Cocotte", body: "Bumped Tryst 6×.", appData: ["confidence": .double(1.7)],
            stakes: .low, reduceMotion: true)
        #expect(
            calm.chips.isEmpty && calm.stakesColor == "neutral" && calm.why == nil && !calm.animatesEmphasis
                && calm.bannerBody == "Bumped Tryst 6×.")
        #expect(
            NotificationCardModel(title: "t", body: "b", appData: [:], stakes: .high, reduceMotion: true)
                .animatesEmphasis == false)
        #expect(
            NotificationCardModel(title: "t", body: "b", appData: [:], stakes: .failure, reduceMotion: false)
                .stakesLabel == "Needs attention")
    }
}
