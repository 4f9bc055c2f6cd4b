import HeraldHTTP2
import NIOCore
import Testing

/// The streams a connection keeps open, from the answers' rate and round trips, on a clock the
/// test moves.
@Suite("HTTP/2 stream window: the rate at the shortest round trip, twice over")
struct HTTP2StreamWindowTests {
    static let start = NIODeadline.uptimeNanoseconds(1_000_000_000_000)

    /// `count` answers spread evenly over `span`, each `roundTrip` after its request.
    static func answer(
        _ window: inout HTTP2StreamWindow, count: Int, over span: TimeAmount, roundTrip: TimeAmount,
        from start: NIODeadline
    ) -> NIODeadline {
        var now = start
        let step = TimeAmount.nanoseconds(span.nanoseconds / Int64(count))
        for _ in 0..<count {
            now = now + step
            window.answered(roundTrip: roundTrip, now: now)
        }
        return now
    }

    @Test("starts at the floor and stays there when a near server answers fast")
    func nearServer() {
        var window = HTTP2StreamWindow(floor: 250, now: Self.start)
        #expect(window.limit == 250)
        // 20,000 answers a second at 1 ms: 20 streams carry it; 2 × 20 above the floor.
        _ = Self.answer(&window, count: 2_000, over: .milliseconds(100), roundTrip: .milliseconds(1), from: Self.start)
        #expect((289...291).contains(window.limit))
    }

    @Test("a far server: the window doubles per interval while the round trip stays short")
    func farServer() {
        var window = HTTP2StreamWindow(floor: 100, now: Self.start)
        var now = Self.start
        var limits: [Int] = []
        // Each interval carries what the window allowed: limit answers per 50 ms round trip.
        for _ in 0..<4 {
            // The interval closes with the first answer past 50 ms.
            now = Self.answer(
                &window, count: window.limit, over: .milliseconds(50), roundTrip: .milliseconds(50), from: now)
            now = now + .milliseconds(1)
            window.answered(roundTrip: .milliseconds(50), now: now)
            limits.append(window.limit)
        }
        // rate × 50 ms is about the limit itself: about 100 + 2 × limit each time, so the limit
        // passes APNs' 1,000 streams within four round trips.
        for (before, after) in zip([100] + limits, limits) {
            #expect(after >= 100 + 2 * before * 9 / 10, "\(limits)")
        }
        #expect(limits.last ?? 0 >= 1_000)
    }

    @Test("a round trip that stays long after the short one is forgotten (two epochs) shrinks it")
    func forgetsOldRoundTrips() {
        var window = HTTP2StreamWindow(floor: 10, now: Self.start)
        // One fast answer, then 1,000/s at 100 ms for 25 s: the fast one is forgotten.
        window.answered(roundTrip: .microseconds(10), now: Self.start + .milliseconds(1))
        var now = Self.start + .milliseconds(1)
        for _ in 0..<500 {
            now = Self.answer(&window, count: 50, over: .milliseconds(50), roundTrip: .milliseconds(100), from: now)
        }
        // 1,000/s × 100 ms = 100 streams, twice, above the floor of 10.
        #expect((209...211).contains(window.limit))
    }

    @Test("no answers, no change; an absurd round trip stays finite")
    func bounded() {
        var window = HTTP2StreamWindow(floor: 5, now: Self.start)
        window.answered(roundTrip: .hours(10_000), now: Self.start + .milliseconds(60))
        #expect(window.limit == 5 + 1_000_000)
        window.answered(roundTrip: .nanoseconds(-5), now: Self.start + .milliseconds(61))
        #expect(window.limit == 5 + 1_000_000)
    }
}
