import Foundation
import NIOCore
import NIOHPACK
import NIOHTTP2

/// One simulated APNs connection: reads request frames, answers each stream the way APNs
/// would, and injects the configured faults. Frames are handled on the connection's pipeline.
final class SimulatorAPNSHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    private let evaluator: APNSRequestEvaluator
    private let state: SimulatorState
    private let isSandbox: Bool
    private var streams: [Int32: (headers: HPACKHeaders, body: ByteBuffer?)] = [:]
    private var authentication = SimulatorConnectionAuthentication()
    private var advertisedStreamLimit = 1
    private var processed = 0
    private var highestStreamID: Int32 = 0
    private var goAwayLastStreamID: Int32?
    private var pendingAnswers = 0
    private var unacknowledgedBytes = 0
    private var needsFlush = false

    init(evaluator: APNSRequestEvaluator, state: SimulatorState, isSandbox: Bool) {
        self.evaluator = evaluator
        self.state = state
        self.isSandbox = isSandbox
    }

    func channelActive(context: ChannelHandlerContext) {
        state.count { $0.connections += 1 }
        // A 16 MiB connection window, as a busy APNs front end would grant.
        context.writeAndFlush(
            wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: (16 << 20) - 65_535))),
            promise: nil)
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        let streamID = Int32(frame.streamID)
        switch frame.payload {
        case .headers(let headers):
            if let last = goAwayLastStreamID, streamID > last { return }
            highestStreamID = max(highestStreamID, streamID)
            if headers.endStream {
                complete(streamID: streamID, headers: headers.headers, body: nil, context: context)
            } else {
                streams[streamID] = (headers.headers, nil)
            }
        case .data(let data):
            guard case .byteBuffer(var bytes) = data.data else { return }
            unacknowledgedBytes += bytes.readableBytes + (data.paddingBytes ?? 0)
            guard var stream = streams[streamID] else { return }
            if stream.body == nil {
                stream.body = bytes
            } else {
                stream.body!.writeBuffer(&bytes)
            }
            if data.endStream {
                streams[streamID] = nil
                complete(streamID: streamID, headers: stream.headers, body: stream.body, context: context)
            } else {
                streams[streamID] = stream
            }
        case .rstStream:
            streams[streamID] = nil
        default:
            break
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if unacknowledgedBytes >= 1 << 20 {
            context.write(
                wrapOutboundOut(
                    HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: unacknowledgedBytes))),
                promise: nil)
            unacknowledgedBytes = 0
            needsFlush = true
        }
        if needsFlush {
            needsFlush = false
            context.flush()
        }
        closeIfGoneAway(context: context)
        context.fireChannelReadComplete()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    /// Sends GOAWAY with `{"reason":"Shutdown"}` and closes once the streams before it are answered.
    func goAway(context: ChannelHandlerContext) {
        guard goAwayLastStreamID == nil else { return }
        goAwayLastStreamID = highestStreamID
        state.count { $0.goAways += 1 }
        var reason = context.channel.allocator.buffer(capacity: 22)
        reason.writeString(#"{"reason":"Shutdown"}"#)
        context.writeAndFlush(
            wrapOutboundOut(
                HTTP2Frame(
                    streamID: .rootStream,
                    payload: .goAway(lastStreamID: HTTP2StreamID(highestStreamID), errorCode: .noError, opaqueData: reason))),
            promise: nil)
        closeIfGoneAway(context: context)
    }

    private func closeIfGoneAway(context: ChannelHandlerContext) {
        guard let last = goAwayLastStreamID, pendingAnswers == 0 else { return }
        if !streams.keys.contains(where: { $0 <= last }) {
            context.close(promise: nil)
        }
    }

    private func complete(streamID: Int32, headers: HPACKHeaders, body: ByteBuffer?, context: ChannelHandlerContext) {
        let faults = state.faults
        let (verdict, apnsID) = evaluator.evaluate(
            headers: headers, body: body, authentication: &authentication, state: state, faults: faults)
        let wanted = authentication.isAuthenticated ? faults.maximumConcurrentStreams : 1
        if wanted != advertisedStreamLimit {
            advertisedStreamLimit = wanted
            context.write(
                wrapOutboundOut(
                    HTTP2Frame(
                        streamID: .rootStream,
                        payload: .settings(.settings([HTTP2Setting(parameter: .maxConcurrentStreams, value: wanted)])))),
                promise: nil)
        }
        processed += 1
        switch verdict {
        case .hang:
            break
        case .accepted(let entry):
            state.accept(entry)
            answer(streamID: streamID, status: 200, apnsID: apnsID, body: nil, latency: faults.latencyMilliseconds, context: context)
        case .rejected(let status, let reason, let timestamp):
            state.reject(status: status, reason: reason)
            var json = #"{"reason":"\#(reason)""#
            if let timestamp { json += #","timestamp":\#(timestamp)"# }
            json += "}"
            answer(streamID: streamID, status: status, apnsID: apnsID, body: json, latency: faults.latencyMilliseconds, context: context)
        }
        if let limit = faults.goAwayAfterStreams, limit > 0, processed >= limit {
            goAway(context: context)
        }
    }

    private func answer(
        streamID: Int32, status: Int, apnsID: String, body: String?, latency: Int, context: ChannelHandlerContext
    ) {
        if latency > 0 {
            pendingAnswers += 1
            let loopBoundContext = NIOLoopBound(context, eventLoop: context.eventLoop)
            context.eventLoop.assumeIsolated().scheduleTask(in: .milliseconds(Int64(latency))) { [self] in
                pendingAnswers -= 1
                let context = loopBoundContext.value
                guard context.channel.isActive else { return }
                write(streamID: streamID, status: status, apnsID: apnsID, body: body, context: context)
                context.flush()
                closeIfGoneAway(context: context)
            }
        } else {
            write(streamID: streamID, status: status, apnsID: apnsID, body: body, context: context)
            needsFlush = true
        }
    }

    private func write(streamID: Int32, status: Int, apnsID: String, body: String?, context: ChannelHandlerContext) {
        var headers = HPACKHeaders()
        headers.reserveCapacity(4)
        headers.add(name: ":status", value: String(status))
        headers.add(name: "apns-id", value: apnsID, indexing: .nonIndexable)
        if isSandbox {
            headers.add(name: "apns-unique-id", value: UUID().uuidString.lowercased(), indexing: .nonIndexable)
        }
        let id = HTTP2StreamID(streamID)
        if let body {
            headers.add(name: "content-type", value: "application/json")
            context.write(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .headers(.init(headers: headers)))), promise: nil)
            var buffer = context.channel.allocator.buffer(capacity: body.utf8.count)
            buffer.writeString(body)
            context.write(
                wrapOutboundOut(HTTP2Frame(streamID: id, payload: .data(.init(data: .byteBuffer(buffer), endStream: true)))),
                promise: nil)
        } else {
            context.write(
                wrapOutboundOut(HTTP2Frame(streamID: id, payload: .headers(.init(headers: headers, endStream: true)))),
                promise: nil)
        }
    }
}
