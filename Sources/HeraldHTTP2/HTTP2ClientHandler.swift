package import NIOCore
package import NIOHPACK
import Synchronization

/// What a generic HTTP/2 request ends with.
package struct HTTP2Response: Sendable {
    package var status: Int
    package var headers: HPACKHeaders
    package var body: ByteBuffer?

    /// The first value of a response header.
    package func header(_ name: String) -> String? { headers.first(name: name) }
}

/// Why a request got no answer. `unanswered` requests never reached the server's application
/// (refused stream, above a GOAWAY's last stream, connection lost before any answer): they may
/// be sent again as they are.
package enum HTTP2RequestFailure: Error, Sendable, Hashable {
    case unanswered
    case timedOut
    case invalidRequest
    /// The answer's body was over 64 KiB: its stream was reset.
    case responseTooLarge
}

/// Whether a connection still takes new requests, readable from any thread.
package final class HTTP2ConnectionStatus: Sendable {
    private let usable = Atomic<Bool>(true)

    package init() {}

    package var isUsable: Bool { usable.load(ordering: .relaxed) }
    func markUnusable() { usable.store(false, ordering: .relaxed) }
}

/// A general HTTP/2 client on one TLS byte stream (for FCM and OAuth2; APNs has its own tuned
/// handler): requests wait until the server's stream limit and flow-control windows let them
/// out, every request has a deadline from its submission, idle connections are PINGed, and
/// answers, refusals and GOAWAY are reported per request through its promise. A NIO shell over
/// ``HTTP2ClientStreams``. All calls on the channel's event loop.
package final class HTTP2ClientHandler: ChannelDuplexHandler {
    package typealias InboundIn = ByteBuffer
    package typealias OutboundIn = Never
    package typealias OutboundOut = ByteBuffer

    private struct Pending {
        var headers: HPACKHeaders
        var body: ByteBuffer
        var deadline: NIODeadline
        var promise: EventLoopPromise<HTTP2Response>
    }

    package let status: HTTP2ConnectionStatus
    private let authority: String
    private let idlePingInterval: TimeAmount
    private let pingTimeout: TimeAmount
    private var context: ChannelHandlerContext?
    private var parser = HTTP2FrameParser()
    private var streams = HTTP2ClientStreams(streamLimitCap: 1000, keepsResponseHeaders: true)
    /// Submitted requests waiting for a stream.
    private var waiting = CircularBuffer<Pending>()
    private var isClosed = false
    private var sentPreface = false
    private var flushScheduled = false
    private var sweepTask: RepeatedTask?

    package init(
        authority: String, status: HTTP2ConnectionStatus = HTTP2ConnectionStatus(),
        idlePingInterval: TimeAmount = .seconds(60),
        pingTimeout: TimeAmount = .seconds(10)
    ) {
        self.authority = authority
        self.status = status
        self.idlePingInterval = idlePingInterval
        self.pingTimeout = pingTimeout
    }

    /// Sends a request once there is room; `headers` are the regular (non-pseudo) headers.
    /// `deadline` counts from now, waiting for a stream included.
    package func submit(
        method: String, path: String, headers: HPACKHeaders, body: ByteBuffer, deadline: NIODeadline,
        promise: EventLoopPromise<HTTP2Response>
    ) {
        guard !isClosed, !streams.isGoingAway else {
            promise.fail(HTTP2RequestFailure.unanswered)
            return
        }
        var all = HPACKHeaders()
        all.reserveCapacity(headers.count + 5)
        all.add(name: ":method", value: method)
        all.add(name: ":scheme", value: "https")
        all.add(name: ":authority", value: authority)
        all.add(name: ":path", value: path, indexing: .nonIndexable)
        all.add(contentsOf: headers)
        all.add(name: "content-length", value: String(body.readableBytes), indexing: .nonIndexable)
        waiting.append(Pending(headers: all, body: body, deadline: deadline, promise: promise))
        drain()
        scheduleFlush()
    }

    /// Flushes after the submissions already queued on the event loop have been written, so a
    /// burst of requests goes out in one TLS record and one `write`, not one each.
    private func scheduleFlush() {
        guard !flushScheduled, let context else { return }
        flushScheduled = true
        context.eventLoop.assumeIsolated().execute {
            self.flushScheduled = false
            self.flush()
        }
    }

    private func drain() {
        guard !isClosed else { return }
        while streams.availableStreams > 0, let next = waiting.first, streams.mayOpen(bodySize: next.body.readableBytes)
        {
            let pending = waiting.removeFirst()
            if !streams.open(
                PromiseBox(pending.promise), headers: pending.headers, body: pending.body, deadline: pending.deadline)
            {
                pending.promise.fail(HTTP2RequestFailure.invalidRequest)
            }
        }
    }

    private func flush() {
        guard let context, streams.output.readableBytes > 0 else { return }
        context.writeAndFlush(wrapOutboundOut(streams.output), promise: nil)
        streams.output = context.channel.allocator.buffer(capacity: 4096)
    }

    /// Stops taking requests and closes once the streams in flight are answered.
    package func retire() {
        streams.retire()
        status.markUnusable()
        failWaiting()
        closeIfDrained()
    }

    // MARK: Channel events

    package func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        streams.output = context.channel.allocator.buffer(capacity: 4096)
        let bound = NIOLoopBound(self, eventLoop: context.eventLoop)
        sweepTask = context.eventLoop.scheduleRepeatedTask(initialDelay: .milliseconds(100), delay: .milliseconds(100))
        { _ in
            bound.value.sweep()
        }
        if context.channel.isActive { sendPreface() }
    }

    package func handlerRemoved(context: ChannelHandlerContext) {
        sweepTask?.cancel()
        sweepTask = nil
        self.context = nil
    }

    package func channelActive(context: ChannelHandlerContext) {
        sendPreface()
        context.fireChannelActive()
    }

    private func sendPreface() {
        guard !sentPreface else { return }
        sentPreface = true
        streams.writePreface()
        flush()
    }

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = unwrapInboundIn(data)
        parser.append(&bytes)
        streams.didRead(now: .now())
        do {
            while let frame = try parser.next() {
                if let event = try streams.read(frame) { handle(event) }
            }
        } catch {
            streams.fail(with: error)
            flush()
            context.close(promise: nil)
        }
    }

    private func handle(_ event: HTTP2StreamEvent) {
        switch event {
        case .answered(let box, let status, let headers, let body):
            PromiseBox.promise(box).succeed(HTTP2Response(status: status, headers: headers, body: body))
        case .unanswered(let box):
            PromiseBox.promise(box).fail(HTTP2RequestFailure.unanswered)
        case .responseTooLarge(let box, _):
            PromiseBox.promise(box).fail(HTTP2RequestFailure.responseTooLarge)
        case .goingAway(_, _, let orphans):
            status.markUnusable()
            for box in orphans { PromiseBox.promise(box).fail(HTTP2RequestFailure.unanswered) }
            failWaiting()
        }
    }

    package func channelReadComplete(context: ChannelHandlerContext) {
        streams.readComplete()
        drain()
        flush()
        closeIfDrained()
    }

    package func channelInactive(context: ChannelHandlerContext) {
        isClosed = true
        status.markUnusable()
        for box in streams.closed() { PromiseBox.promise(box).fail(HTTP2RequestFailure.unanswered) }
        failWaiting()
        sweepTask?.cancel()
        sweepTask = nil
        context.fireChannelInactive()
    }

    package func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    private func failWaiting() {
        while let pending = waiting.popFirst() { pending.promise.fail(HTTP2RequestFailure.unanswered) }
    }

    private func closeIfDrained() {
        if streams.isDrained, !isClosed {
            isClosed = true
            flush()
            context?.close(promise: nil)
        }
    }

    private func sweep() {
        guard !isClosed, let context else { return }
        let now = NIODeadline.now()
        for box in streams.expire(now: now) { PromiseBox.promise(box).fail(HTTP2RequestFailure.timedOut) }
        while let first = waiting.first, first.deadline <= now {
            waiting.removeFirst().promise.fail(HTTP2RequestFailure.timedOut)
        }
        guard streams.keepAlive(now: now, idle: idlePingInterval, timeout: pingTimeout) else {
            context.close(promise: nil)
            return
        }
        flush()
        closeIfDrained()
    }
}

/// A request's promise as the stream table holds it (an object).
private final class PromiseBox {
    let promise: EventLoopPromise<HTTP2Response>
    init(_ promise: EventLoopPromise<HTTP2Response>) { self.promise = promise }

    static func promise(_ object: AnyObject) -> EventLoopPromise<HTTP2Response> {
        unsafeDowncast(object, to: PromiseBox.self).promise
    }
}
