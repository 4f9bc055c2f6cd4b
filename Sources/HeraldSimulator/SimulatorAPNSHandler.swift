import Foundation
import HeraldCore
import HeraldHTTP2
import NIOCore
import NIOHPACK

/// One simulated APNs connection, on the TLS byte stream: reads request frames, answers each
/// stream as APNs would, enforces the advertised stream limit (REFUSED_STREAM), and injects
/// the configured faults. Answers of one read are written as one buffer.
final class SimulatorAPNSHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private struct Stream {
        var headers: HPACKHeaders
        var body: ByteBuffer?
    }

    private let evaluator: APNSRequestEvaluator
    private let fcmEvaluator: FCMRequestEvaluator
    /// Set once the connection carried an FCM request (FCM has no per-connection JWT step).
    private var speaksFCM = false
    private let state: SimulatorState
    private let isSandbox: Bool
    private var parser = HTTP2FrameParser()
    private var encoder = HPACKEncoder(allocator: ByteBufferAllocator(), useHuffmanEncoding: false)
    private var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
    private var output = ByteBuffer()
    private var receivedPreface = false
    private var streams: [Int32: Stream] = [:]
    /// Streams opened and not yet answered (receiving, delayed, hanging).
    private var openStreams: Set<Int32> = []
    private var lastClientStreamID: Int32 = 0
    private var authentication = SimulatorConnectionAuthentication()
    /// The limit last advertised, and the one enforced: the higher of old and new until the client ACKs.
    private var advertisedStreamLimit = 1
    private var enforcedStreamLimit = 1
    private var pendingLimitAcknowledgements: [Int] = []
    private var processed = 0
    private var highestStreamID: Int32 = 0
    private var goAwayLastStreamID: Int32?
    private var unacknowledgedBytes = 0
    private var connectionSendWindow = HTTP2Wire.defaultWindow
    private var random = SimulatorRandom()

    init(evaluator: APNSRequestEvaluator, state: SimulatorState, isSandbox: Bool) {
        self.evaluator = evaluator
        self.fcmEvaluator = FCMRequestEvaluator(configuration: evaluator.configuration)
        self.state = state
        self.isSandbox = isSandbox
    }

    func channelActive(context: ChannelHandlerContext) {
        state.count { $0.connections += 1 }
        output = context.channel.allocator.buffer(capacity: 16_384)
        // Server preface: SETTINGS (one stream until a valid JWT), and a 16 MiB connection window
        // as a busy APNs front end would grant.
        HTTP2Wire.writeSettings(
            into: &output,
            [(.maximumConcurrentStreams, 1), (.maximumHeaderListSize, 16_384), (.initialWindowSize, 65_535)])
        HTTP2Wire.writeWindowUpdate(into: &output, streamID: 0, increment: (16 << 20) - HTTP2Wire.defaultWindow)
        flush(context: context)
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = unwrapInboundIn(data)
        parser.append(&bytes)
        do {
            if !receivedPreface {
                guard let preface = parser.readRaw(count: HTTP2Wire.clientPreface.count) else { return }
                guard preface == HTTP2Wire.clientPreface else {
                    throw HTTP2ConnectionError(.protocolError, "not an HTTP/2 client preface")
                }
                receivedPreface = true
            }
            while let frame = try parser.next() {
                try process(frame, context: context)
            }
        } catch let error as HTTP2ConnectionError {
            HTTP2Wire.writeGoAway(
                into: &output, lastStreamID: highestStreamID, code: error.code, debugData: error.message)
            flush(context: context)
            context.close(promise: nil)
        } catch {
            context.close(promise: nil)
        }
    }

    private func process(_ frame: HTTP2ReadFrame, context: ChannelHandlerContext) throws(HTTP2ConnectionError) {
        let streamID = frame.streamID
        switch HTTP2Wire.FrameType(rawValue: frame.type) {
        case .headers?:
            let headers = try decoder.decodeBlock(of: frame)
            if streams[streamID] != nil {
                // Trailers: the request ends here.
                let stream = streams.removeValue(forKey: streamID)!
                complete(streamID: streamID, headers: stream.headers, body: stream.body, context: context)
                return
            }
            guard streamID % 2 == 1, streamID > lastClientStreamID else {
                throw HTTP2ConnectionError(.protocolError, "stream \(streamID) is not a new client stream")
            }
            lastClientStreamID = streamID
            if let last = goAwayLastStreamID, streamID > last { return }
            highestStreamID = streamID
            guard openStreams.count < enforcedStreamLimit else {
                HTTP2Wire.writeResetStream(into: &output, streamID: streamID, code: .refusedStream)
                state.count { $0.refusedStreams += 1 }
                return
            }
            openStreams.insert(streamID)
            if frame.endStream {
                complete(streamID: streamID, headers: headers, body: nil, context: context)
            } else {
                streams[streamID] = Stream(headers: headers, body: nil)
            }
        case .data?:
            unacknowledgedBytes += frame.flowControlledLength
            guard var stream = streams[streamID] else { return }
            var data = frame.payload
            if stream.body == nil {
                stream.body = ByteBuffer(buffer: data)
            } else {
                stream.body!.writeBuffer(&data)
            }
            guard stream.body!.readableBytes <= HTTP2Wire.defaultWindow else {
                streams[streamID] = nil
                openStreams.remove(streamID)
                HTTP2Wire.writeResetStream(into: &output, streamID: streamID, code: .flowControlError)
                return
            }
            if frame.endStream {
                streams[streamID] = nil
                complete(streamID: streamID, headers: stream.headers, body: stream.body, context: context)
            } else {
                streams[streamID] = stream
            }
        case .rstStream?:
            streams[streamID] = nil
            openStreams.remove(streamID)
        case .settings?:
            if frame.isAcknowledgement {
                if !pendingLimitAcknowledgements.isEmpty {
                    enforcedStreamLimit = pendingLimitAcknowledgements.removeFirst()
                    if let newer = pendingLimitAcknowledgements.max() {
                        enforcedStreamLimit = max(enforcedStreamLimit, newer)
                    }
                }
            } else {
                for (identifier, value) in frame.settings where identifier == HTTP2Wire.Setting.headerTableSize.rawValue
                {
                    try? encoder.setDynamicTableSize(min(Int(value), HPACKEncoder.defaultDynamicTableSize))
                }
                HTTP2Wire.writeSettingsAcknowledgement(into: &output)
            }
        case .ping?:
            var payload = frame.payload
            if !frame.isAcknowledgement, let data = payload.readInteger(as: UInt64.self) {
                HTTP2Wire.writePing(into: &output, data: data, acknowledgement: true)
            }
        case .windowUpdate?:
            var payload = frame.payload
            if streamID == 0, let increment = payload.readInteger(as: UInt32.self) {
                connectionSendWindow += Int(increment & 0x7fff_ffff)
            }
        case .goAway?:
            context.close(promise: nil)
        case .pushPromise?:
            throw HTTP2ConnectionError(.protocolError, "clients cannot push")
        default:
            break
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if unacknowledgedBytes >= 1 << 20 {
            HTTP2Wire.writeWindowUpdate(into: &output, streamID: 0, increment: unacknowledgedBytes)
            unacknowledgedBytes = 0
        }
        flush(context: context)
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
        HTTP2Wire.writeGoAway(
            into: &output, lastStreamID: highestStreamID, code: .noError, debugData: #"{"reason":"Shutdown"}"#)
        flush(context: context)
        closeIfGoneAway(context: context)
    }

    private func flush(context: ChannelHandlerContext) {
        guard output.readableBytes > 0 else { return }
        context.writeAndFlush(wrapOutboundOut(output), promise: nil)
        output = context.channel.allocator.buffer(capacity: 16_384)
    }

    private func closeIfGoneAway(context: ChannelHandlerContext) {
        guard goAwayLastStreamID != nil, openStreams.isEmpty else { return }
        flush(context: context)
        context.close(promise: nil)
    }

    private func complete(streamID: Int32, headers: HPACKHeaders, body: ByteBuffer?, context: ChannelHandlerContext) {
        let faults = state.faults
        if let path = headers.first(name: ":path"), FCMRequestEvaluator.handles(path: path) {
            speaksFCM = true
            let answer = fcmEvaluator.evaluate(
                headers: headers, body: body, state: state, faults: faults, random: &random)
            adjustStreamLimit(faults)
            processed += 1
            if let reason = answer.reason { state.reject(status: answer.status, reason: reason) }
            guard !answer.hang else { return }
            respond(streamID: streamID, latency: faults.latencyMilliseconds, context: context) { handler in
                handler.write(streamID: streamID, status: answer.status, headers: answer.headers, body: answer.body)
            }
            if let limit = faults.goAwayAfterStreams, limit > 0, processed >= limit { goAway(context: context) }
            return
        }
        if let path = headers.first(name: ":path"), SimulatorWebPush.handles(path: path) {
            speaksFCM = true
            let answer = state.webpush.evaluate(
                headers: headers, body: body.map { Data($0.readableBytesView) } ?? Data(), state: state, now: Date())
            adjustStreamLimit(faults)
            processed += 1
            if let reason = answer.reason { state.reject(status: answer.status, reason: reason) }
            respond(streamID: streamID, latency: faults.latencyMilliseconds, context: context) { handler in
                handler.write(streamID: streamID, status: answer.status, headers: answer.headers, body: answer.body)
            }
            return
        }
        if let path = headers.first(name: ":path"), ChannelRequestEvaluator.handles(path: path) {
            let answer = ChannelRequestEvaluator(apns: evaluator).evaluate(
                headers: headers, body: body, authentication: &authentication, state: state, random: &random)
            adjustStreamLimit(faults)
            processed += 1
            if let reason = answer.reason { state.reject(status: answer.status, reason: reason) }
            respond(streamID: streamID, latency: faults.latencyMilliseconds, context: context) { handler in
                handler.write(streamID: streamID, status: answer.status, headers: answer.headers, body: answer.body)
            }
            return
        }
        let (verdict, apnsID) = evaluator.evaluate(
            headers: headers, body: body, authentication: &authentication, state: state, faults: faults, random: &random
        )
        adjustStreamLimit(faults)
        processed += 1
        switch verdict {
        case .hang:
            break
        case .accepted(let entry):
            state.accept(entry)
            answer(
                streamID: streamID, status: 200, apnsID: apnsID, body: nil, latency: faults.latencyMilliseconds,
                context: context)
        case .rejected(let status, let reason, let timestamp):
            state.reject(status: status, reason: reason)
            var json = #"{"reason":"\#(reason)""#
            if let timestamp { json += #","timestamp":\#(timestamp)"# }
            json += "}"
            answer(
                streamID: streamID, status: status, apnsID: apnsID, body: json, latency: faults.latencyMilliseconds,
                context: context)
        }
        if let limit = faults.goAwayAfterStreams, limit > 0, processed >= limit {
            goAway(context: context)
        }
    }

    /// Once a connection is authenticated (APNs JWT, or any FCM request) it may use the configured limit.
    private func adjustStreamLimit(_ faults: SimulatorFaults) {
        let wanted = authentication.isAuthenticated || speaksFCM ? max(1, faults.maximumConcurrentStreams) : 1
        if wanted != advertisedStreamLimit {
            // Until the client acknowledges, streams it opened under the old limit stay allowed.
            enforcedStreamLimit = max(enforcedStreamLimit, wanted)
            pendingLimitAcknowledgements.append(wanted)
            advertisedStreamLimit = wanted
            HTTP2Wire.writeSettings(into: &output, [(.maximumConcurrentStreams, UInt32(wanted))])
        }
    }

    private func answer(
        streamID: Int32, status: Int, apnsID: String, body: String?, latency: Int, context: ChannelHandlerContext
    ) {
        respond(streamID: streamID, latency: latency, context: context) { handler in
            handler.write(streamID: streamID, status: status, apnsID: apnsID, body: body)
        }
    }

    /// Writes an answer now, or after the configured latency if the stream is still open then.
    private func respond(
        streamID: Int32, latency: Int, context: ChannelHandlerContext, _ write: @escaping (SimulatorAPNSHandler) -> Void
    ) {
        if latency > 0 {
            let loopBoundContext = NIOLoopBound(context, eventLoop: context.eventLoop)
            let loopBoundWrite = NIOLoopBound(write, eventLoop: context.eventLoop)
            context.eventLoop.assumeIsolated().scheduleTask(in: .milliseconds(Int64(latency))) { [self] in
                let context = loopBoundContext.value
                guard context.channel.isActive, openStreams.contains(streamID) else { return }
                loopBoundWrite.value(self)
                flush(context: context)
                closeIfGoneAway(context: context)
            }
        } else {
            write(self)
        }
    }

    private func write(streamID: Int32, status: Int, apnsID: String, body: String?) {
        var headers: [(String, String)] = [("apns-id", apnsID)]
        if isSandbox { headers.append(("apns-unique-id", SimulatorIdentifiers.randomUUIDString(using: &random))) }
        write(streamID: streamID, status: status, headers: headers, body: body)
    }

    private func write(streamID: Int32, status: Int, headers extra: [(String, String)], body: String?) {
        openStreams.remove(streamID)
        var headers = HPACKHeaders()
        headers.reserveCapacity(extra.count + 2)
        headers.add(name: ":status", value: status == 200 ? "200" : String(status))
        for (name, value) in extra { headers.add(name: name, value: value, indexing: .nonIndexable) }
        var bodyBuffer: ByteBuffer?
        if let body {
            headers.add(name: "content-type", value: "application/json")
            bodyBuffer = ByteBuffer(string: body)
            if bodyBuffer!.readableBytes > connectionSendWindow {
                // The client stopped granting window: a broken client; end the stream without a body.
                bodyBuffer = nil
            }
        }
        try? HTTP2Wire.writeHeaders(
            into: &output, encoder: &encoder, headers: headers, streamID: streamID, endStream: bodyBuffer == nil)
        if let bodyBuffer {
            connectionSendWindow -= bodyBuffer.readableBytes
            HTTP2Wire.writeData(into: &output, streamID: streamID, data: bodyBuffer, endStream: true)
        }
    }
}

/// Fast identifiers for the simulator's answers.
enum SimulatorIdentifiers {
    private static let digits: [UInt8] = Array("0123456789abcdef".utf8)

    /// A random version-4 UUID in canonical lowercase form.
    static func randomUUIDString(using generator: inout SimulatorRandom) -> String {
        var high = generator.next() as UInt64
        var low = generator.next() as UInt64
        high = (high & 0xffff_ffff_ffff_0fff) | 0x0000_0000_0000_4000
        low = (low & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000
        return String(unsafeUninitializedCapacity: 36) { output in
            var index = 0
            for (word, shiftStart) in [(high, 60), (low, 60)] {
                var shift = shiftStart
                while shift >= 0 {
                    if index == 8 || index == 13 || index == 18 || index == 23 {
                        output[index] = UInt8(ascii: "-")
                        index += 1
                    }
                    output[index] = digits[Int((word >> UInt64(shift)) & 0xf)]
                    index += 1
                    shift -= 4
                }
            }
            return 36
        }
    }

    /// Whether `text` is a UUID `8-4-4-4-12` of hex digits (either case).
    static func isUUID(_ text: String) -> Bool {
        var count = 0
        for (index, byte) in text.utf8.enumerated() {
            count += 1
            if index == 8 || index == 13 || index == 18 || index == 23 {
                guard byte == UInt8(ascii: "-") else { return false }
            } else {
                guard byte.isHexDigit else { return false }
            }
        }
        return count == 36
    }
}

/// A fast pseudo-random generator (xorshift64*) for ids and fault rolls: nothing here is a secret,
/// and the system generator costs a system call per value. Seeded once per connection.
package struct SimulatorRandom: RandomNumberGenerator {
    private var state: UInt64

    package init() {
        var seed: UInt64 = 0
        while seed == 0 { seed = UInt64.random(in: .min ... .max) }
        state = seed
    }

    package mutating func next() -> UInt64 {
        state ^= state >> 12
        state ^= state << 25
        state ^= state >> 27
        return state &* 2_685_821_657_736_338_717
    }
}
