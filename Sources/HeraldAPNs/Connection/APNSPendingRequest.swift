import Foundation
import HeraldCore
import NIOCore

/// One notification on its way: owned by exactly one event loop at a time (the loop of the
/// connection queue or stream it sits in); handed between loops only through `execute`.
final class APNSPendingRequest: @unchecked Sendable {
    let notification: APNSNotification
    let payload: ByteBuffer
    let completion: @Sendable (APNSResult) -> Void
    /// Answers received so far.
    var attempts = 0
    /// Times it was sent again after going unanswered (GOAWAY, REFUSED_STREAM, lost connection).
    var resends = 0
    /// The provider token generation it was last sent with.
    var tokenGeneration = 0
    /// Until when it may wait in a connection's queue for a stream: set when it is handed to
    /// the connection, so a request whose connection never comes up still times out.
    var waitDeadline = NIODeadline.distantFuture
    /// When the answer must have come, once written (a fresh `requestDeadline` on the wire, so
    /// a request written late is not cut short and sent twice).
    var deadline = NIODeadline.distantFuture
    /// When it was last written to a stream.
    var writtenAt: NIODeadline?
    /// When it was submitted: retries stop at the policy's `retryDeadline` after it.
    let submittedAt = NIODeadline.now()
    /// Seconds since it was submitted.
    var elapsed: TimeInterval { Double((NIODeadline.now() - submittedAt).nanoseconds) / 1e9 }
    /// The last answer, kept for the final result.
    var lastStatus: Int?
    var lastReason: APNSReason?
    private var finished = false

    init(notification: APNSNotification, payload: ByteBuffer, completion: @escaping @Sendable (APNSResult) -> Void) {
        self.notification = notification
        self.payload = payload
        self.completion = completion
    }

    /// Delivers the final result exactly once.
    func finish(status: Int?, reason: APNSReason?, disposition: APNSDisposition, timestamp: Date? = nil) {
        guard !finished else { return }
        finished = true
        let latency = writtenAt.map { Double((NIODeadline.now() - $0).nanoseconds) / 1e9 }
        completion(
            APNSResult(
                apnsID: notification.apnsID, deviceToken: notification.deviceToken, status: status, reason: reason,
                disposition: disposition, timestamp: timestamp, attempts: attempts, latency: latency))
    }
}
