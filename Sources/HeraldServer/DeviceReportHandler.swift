package import HTTPTypes
package import HeraldAPI
package import NIOCore
package import NIOHTTPTypes

/// Takes `POST /v1/apps/{app}/opened` and `…/received` off the connection's event loop to
/// `DeviceReports`, and writes its answer on the loop when it comes: no task, router or
/// middleware per report. Anything else goes on to the router as before, and so do these with
/// a body of unknown length or over `DeviceReports.bodyLimit`, an `Origin` (the router adds
/// CORS), `Connection`, `Expect` or `Transfer-Encoding`, or while a request passed on is still
/// being answered (answers keep their order). While a report is answered, the connection reads
/// nothing more, and what it had read waits.
package final class DeviceReportHandler: ChannelDuplexHandler, RemovableChannelHandler {
    package typealias InboundIn = HTTPRequestPart
    package typealias InboundOut = HTTPRequestPart
    package typealias OutboundIn = HTTPResponsePart
    package typealias OutboundOut = HTTPResponsePart

    private enum State {
        /// Between requests, or passing a request on.
        case idle
        /// Reading a report's body.
        case collecting(DeviceReports.Route, app: String, head: HTTPRequest, body: ByteBuffer)
        /// The report is with `DeviceReports`; its answer is awaited.
        case answering
    }

    private let reports: DeviceReports
    private let extraHeaders: HTTPFields
    private var state = State.idle
    /// Requests passed on and not yet answered on this connection.
    private var inFlight = 0
    /// Parts read while a report was answered, handled after its answer.
    private var held: [HTTPRequestPart] = []
    /// A read asked for while a report was answered, made after its answer.
    private var readWanted = false

    package init(reports: DeviceReports, extraHeaders: HTTPFields = [:]) {
        self.reports = reports
        self.extraHeaders = extraHeaders
    }

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        if case .answering = state { return held.append(part) }
        handle(part, context: context)
    }

    private func handle(_ part: HTTPRequestPart, context: ChannelHandlerContext) {
        switch (state, part) {
        case (.idle, .head(let head)):
            guard inFlight == 0, let (route, app) = Self.taken(head) else {
                inFlight += 1
                return context.fireChannelRead(wrapInboundOut(part))
            }
            state = .collecting(route, app: app, head: head, body: context.channel.allocator.buffer(capacity: 0))
        case (.idle, _):
            context.fireChannelRead(wrapInboundOut(part))
        case (.collecting(let route, let app, let head, var body), .body(var chunk)):
            guard body.readableBytes + chunk.readableBytes <= DeviceReports.bodyLimit else {
                // More than its length said: the router reads and refuses it.
                return passOn(head, body, then: part, context: context)
            }
            body.writeBuffer(&chunk)
            state = .collecting(route, app: app, head: head, body: body)
        case (.collecting(let route, let app, let head, let body), .end):
            state = .answering
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            let taken = reports.answer(
                route, app: app, headers: head.headerFields,
                peer: context.channel.remoteAddress?.ipAddress ?? "unknown", body: body
            ) { answer in
                bound.eventLoop.execute {
                    let (handler, context) = bound.value
                    handler.respond(answer, context: context)
                }
            }
            guard !taken else { return }
            passOn(head, body, then: part, context: context)
        case (.collecting, .head), (.answering, _):
            // The HTTP decoder never sends a head inside a request; `channelRead` holds the rest.
            context.fireChannelRead(wrapInboundOut(part))
        }
    }

    /// Hands a request this handler began to read to the router after all: its head, the body
    /// read so far, then `part`.
    private func passOn(
        _ head: HTTPRequest, _ body: ByteBuffer, then part: HTTPRequestPart, context: ChannelHandlerContext
    ) {
        state = .idle
        inFlight += 1
        context.fireChannelRead(wrapInboundOut(.head(head)))
        context.fireChannelRead(wrapInboundOut(.body(body)))
        context.fireChannelRead(wrapInboundOut(part))
    }

    /// The route and app of a request this handler takes.
    private static func taken(_ head: HTTPRequest) -> (DeviceReports.Route, app: String)? {
        let fields = head.headerFields
        guard head.method == .post, let path = head.path, let (route, app) = DeviceReports.route(path),
            fields[.origin] == nil, fields[.connection] == nil, fields[.expect] == nil,
            fields[.transferEncoding] == nil, let length = fields[.contentLength],
            let bytes = Int(length), (0...DeviceReports.bodyLimit).contains(bytes)
        else { return nil }
        return (route, app)
    }

    private func respond(_ answer: DeviceReports.Answer, context: ChannelHandlerContext) {
        var fields = extraHeaders
        if !answer.body.isEmpty { fields[.contentType] = "application/json" }
        fields[.contentLength] = "\(answer.body.count)"
        if let retryAfter = answer.retryAfter { fields[.retryAfter] = "\(retryAfter)" }
        fields[.date] = HTTPDate.now()
        fields[.server] = "herald"
        context.write(wrapOutboundOut(.head(HTTPResponse(status: answer.status, headerFields: fields))), promise: nil)
        if !answer.body.isEmpty {
            context.write(wrapOutboundOut(.body(context.channel.allocator.buffer(bytes: answer.body))), promise: nil)
        }
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        state = .idle
        let parts = held
        held = []
        for part in parts {
            if case .answering = state { held.append(part) } else { handle(part, context: context) }
        }
        // What was passed on is delivered downstream at a read's completion (NIOAsyncChannel's
        // handler buffers until then).
        if !parts.isEmpty { context.fireChannelReadComplete() }
        if readWanted {
            if case .answering = state { return }
            readWanted = false
            context.read()
        }
    }

    package func read(context: ChannelHandlerContext) {
        if case .answering = state {
            readWanted = true
            return
        }
        context.read()
    }

    package func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data) { inFlight = max(0, inFlight - 1) }
        context.write(data, promise: promise)
    }
}
