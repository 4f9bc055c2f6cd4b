import HTTPTypes
import HeraldAPI
import NIOCore
import NIOHTTPTypes

/// Answers keyless `GET /livez`, `/readyz` and `/healthz` on the connection's event loop, from
/// the health report already computed, without a task or a hop to another thread: a load
/// balancer's probes (thousands a second) then cost the HTTP parse and one write. Anything
/// else — a stale report, a key, a query, a request while another on the connection is still
/// being answered (answers must keep their order) — goes on to the router as before.
final class ProbeHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    /// For a probe path: whether the answer is ready (200) or not (503); nil: let the router answer.
    typealias Answer = @Sendable (_ path: String) -> Bool?

    private let answer: Answer
    private let extraHeaders: HTTPFields
    private let counted: @Sendable (_ path: String, _ status: Int) -> Void
    /// Requests passed on and not yet answered on this connection.
    private var inFlight = 0
    /// The rest of a request this handler answered is dropped.
    private var swallowing = false

    init(answer: @escaping Answer, extraHeaders: HTTPFields, counted: @escaping @Sendable (String, Int) -> Void) {
        self.answer = answer
        self.extraHeaders = extraHeaders
        self.counted = counted
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let request):
            if inFlight == 0, !swallowing, request.method == .get, let path = request.path,
                request.headerFields[.authorization] == nil, request.headerFields[.connection] == nil,
                let ok = answer(path)
            {
                swallowing = true
                let body = ok ? HeraldAPI.readyBody : HeraldAPI.notReadyBody
                var fields = extraHeaders
                fields[.contentType] = "application/json"
                fields[.contentLength] = "\(body.readableBytes)"
                fields[.date] = HTTPDate.now()
                context.write(
                    wrapOutboundOut(.head(HTTPResponse(status: ok ? .ok : .serviceUnavailable, headerFields: fields))),
                    promise: nil)
                context.write(wrapOutboundOut(.body(body)), promise: nil)
                context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
                counted(path, ok ? 200 : 503)
                return
            }
            inFlight += 1
            context.fireChannelRead(data)
        case .body:
            if !swallowing { context.fireChannelRead(data) }
        case .end:
            if swallowing {
                swallowing = false
            } else {
                context.fireChannelRead(data)
            }
        }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data) { inFlight = max(0, inFlight - 1) }
        context.write(data, promise: promise)
    }
}
