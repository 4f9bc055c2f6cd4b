package import NIOCore

/// How many streams one connection keeps open: enough to carry the rate it achieves at its
/// shortest round trip, twice over (the bandwidth × delay product with a gain of 2), plus
/// `floor`, and never more than the server allows (the caller takes the smaller). Streams
/// beyond that only wait in the server's queue: they add no speed, and each is a request that a
/// crash leaves sent and unanswered, to be sent again after the restart.
///
/// The rate is measured per `interval` of answers and the shortest round trip over the last one
/// to two `epoch`s (so a route that got slower is seen). When the window is what holds the rate
/// back, each interval's rate at a round trip near the shortest lets it double, so a burst on a
/// far link (APNs at 50 ms) reaches the server's limit within a few round trips; a near, busy
/// server (the simulator on this host) keeps a few hundred open instead of thousands. A pure
/// value: the owner feeds it the time.
package struct HTTP2StreamWindow: Sendable {
    /// Streams kept open however little was measured.
    package let floor: Int
    /// Streams that may be open now.
    package private(set) var limit: Int
    private var shortestNow: Int64 = .max
    private var shortestBefore: Int64 = .max
    private var epochStart: NIODeadline
    private var intervalStart: NIODeadline
    private var answers = 0

    package static let interval = TimeAmount.milliseconds(50)
    package static let epoch = TimeAmount.seconds(10)
    package static let gain = 2.0

    package init(floor: Int, now: NIODeadline) {
        self.floor = max(1, floor)
        limit = self.floor
        epochStart = now
        intervalStart = now
    }

    /// An answer came `roundTrip` after its request was written, at `now`.
    package mutating func answered(roundTrip: TimeAmount, now: NIODeadline) {
        let nanoseconds = max(0, roundTrip.nanoseconds)
        if nanoseconds < shortestNow { shortestNow = nanoseconds }
        answers += 1
        let elapsed = now - intervalStart
        guard elapsed >= Self.interval else { return }
        let shortest = min(shortestNow, shortestBefore)
        let rate = Double(answers) / (Double(elapsed.nanoseconds) / 1e9)
        let product = rate * Double(shortest) / 1e9
        // A product past any stream limit (a stalled clock, a huge round trip) stays finite.
        limit = floor + Int(min(Self.gain * product, 1_000_000))
        answers = 0
        intervalStart = now
        if now - epochStart >= Self.epoch {
            shortestBefore = shortestNow
            shortestNow = .max
            epochStart = now
        }
    }
}
