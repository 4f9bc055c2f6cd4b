import Foundation
import HTTPTypes
import HeraldEngine
import HeraldSimulator
import HeraldStore
import HeraldTesting
import InMemoryTracing
import Testing
import Tracing

/// The spans of sends and their deliveries, recorded by swift-distributed-tracing's in-memory
/// tracer given to the runtime (the OTLP export of the same spans from a live `herald serve`
/// is scripts/trace-check.sh).
@Suite("Traces")
struct TracingTests {
    @Test(
        "each delivery's spans sit under its send's herald.accept: claim, plan, the APNs request, record; a suppressed one's plan and a dead token's request say why"
    )
    func deliverySpans() async throws {
        let tracer = W3CInMemoryTracer()
        try await withServer(tracer: tracer) { server in
            #expect(server.runtime.traces != nil)
            let tokens = makeDeviceTokens(2)
            _ = try await server.register("ana-phone", user: "ana", token: tokens[0])
            _ = try await server.register("bo-phone", user: "bo", token: tokens[1])
            server.simulator.state.markDead(tokens[1], at: Date(timeIntervalSince1970: 1_790_000_000))
            var sends: [String: String] = [:]
            for (name, body) in [
                ("sent", #"{"to":{"user_ids":["ana"]},"type":"PN-02","data":{"Source":"Garmin","source_id":"g"}}"#),
                // Off unless the user turned it on: the policy step suppresses it.
                ("suppressed", #"{"to":{"user_ids":["ana"]},"type":"PN-01","data":{"Source":"Oura","source_id":"o"}}"#),
                ("dead", #"{"to":{"user_ids":["bo"]},"alert":{"body":"x"}}"#),
            ] {
                let id = try #require(try await server.send(body).body["id"] as? String)
                _ = try await server.settled(id)
                sends[name] = id
            }
            // The spans end just after the write the API reads commits.
            var spans: [FinishedInMemorySpan] = []
            for _ in 0..<500 {
                spans = tracer.finishedSpans
                if spans.filter({ $0.operationName == "herald.deliver" }).count == 3 { break }
                try await Task.sleep(for: .milliseconds(10))
            }
            func attribute(_ span: FinishedInMemorySpan?, _ key: String) -> String? {
                switch span?.attributes[key]?.toSpanAttribute() {
                case .string(let value): value
                case .int64(let value): String(value)
                default: nil
                }
            }
            for (name, id) in sends {
                let accept = try #require(
                    spans.first {
                        $0.operationName == "herald.accept" && attribute($0, "herald.notification_id") == id
                    },
                    "\(name): no herald.accept")
                let deliver = try #require(
                    spans.first { $0.operationName == "herald.deliver" && $0.parentSpanID == accept.spanID },
                    "\(name): no herald.deliver under herald.accept")
                #expect(deliver.traceID == accept.traceID)
                #expect(deliver.kind == .consumer)
                let steps = Dictionary(
                    spans.filter { $0.parentSpanID == deliver.spanID }.map { ($0.operationName, $0) },
                    uniquingKeysWith: { first, _ in first })
                let expected =
                    name == "suppressed"
                    ? ["herald.claim", "herald.plan", "herald.record"]
                    : ["herald.claim", "herald.plan", "herald.apns", "herald.record"]
                #expect(steps.keys.sorted() == expected.sorted(), "\(name)")
                for step in steps.values { #expect(step.traceID == accept.traceID) }
                switch name {
                case "sent":
                    #expect(attribute(deliver, "herald.status") == "sent")
                    #expect(attribute(steps["herald.apns"], "herald.disposition") == "delivered")
                    #expect(steps["herald.apns"]?.kind == .client)
                case "suppressed":
                    #expect(attribute(deliver, "herald.status") == "suppressed")
                    #expect(attribute(steps["herald.plan"], "herald.decision") == "suppressed")
                default:
                    #expect(attribute(deliver, "herald.status") == "failed")
                    #expect(attribute(deliver, "herald.reason") == "Unregistered")
                    #expect(deliver.status?.code == .error)
                    #expect(attribute(steps["herald.apns"], "herald.disposition") == "token_dead")
                }
            }
            // The device's token is nowhere in a span.
            for span in spans {
                for token in tokens {
                    #expect(!"\(span.attributes)".contains(token))
                }
            }
            // The API and the dashboard's notification page name the send's trace.
            let id = try #require(sends["sent"])
            let accept = try #require(
                spans.first { $0.operationName == "herald.accept" && attribute($0, "herald.notification_id") == id })
            let view = try await server.request(.get, "/v1/apps/demo/notifications/\(id)")
            #expect(view.body["trace_id"] as? String == accept.traceID)
            let browser = DashboardTests.Browser(server)
            #expect(try await browser.signIn(ServerHarness.server) == .seeOther)
            let page = try await browser.go(.get, "/dashboard/apps/demo/notifications/\(id)")
            #expect(page.html.contains("<code data-trace-id>\(accept.traceID)</code>"))
        }
    }

    @Test("without telemetry no tracer is made and nothing about traces is stored")
    func offByDefault() async throws {
        try await withServer { server in
            #expect(server.runtime.traces == nil)
            _ = try await server.register("phone", user: "cy", token: makeDeviceTokens(1)[0])
            let id = try #require(
                try await server.send(#"{"to":{"user_ids":["cy"]},"alert":{"body":"x"}}"#).body["id"] as? String)
            let view = try await server.settled(id)
            #expect(view["trace_id"] == nil)
            let uuid = try #require(UUID(uuidString: id))
            let record = try #require(
                try await server.runtime.store.notifications.notification(appID: "demo", id: uuid))
            #expect(!String(decoding: record.content, as: UTF8.self).contains("trace_context"))
        }
    }
}

/// swift-distributed-tracing's in-memory tracer, propagating its span contexts as W3C
/// `traceparent` (32 and 16 hex digit ids), as OpenTelemetry's tracer does.
struct W3CInMemoryTracer: Tracer {
    let memory = InMemoryTracer(
        idGenerator: .init(nextTraceID: { Self.hex(bytes: 16) }, nextSpanID: { Self.hex(bytes: 8) }))

    var finishedSpans: [FinishedInMemorySpan] { memory.finishedSpans }

    static func hex(bytes: Int) -> String {
        (0..<bytes).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
    }

    func startSpan<Instant: TracerInstant>(
        _ operationName: String, context: @autoclosure () -> InstrumentationContext, ofKind kind: SpanKind,
        at instant: @autoclosure () -> Instant, function: String, file fileID: String, line: UInt
    ) -> InMemorySpan {
        memory.startSpan(
            operationName, context: context(), ofKind: kind, at: instant(), function: function, file: fileID,
            line: line)
    }

    func forceFlush() { memory.forceFlush() }

    func inject<Carrier, Inject: Injector>(
        _ context: InstrumentationContext, into carrier: inout Carrier, using injector: Inject
    ) where Inject.Carrier == Carrier {
        guard let span = context.inMemorySpanContext else { return }
        injector.inject("00-\(span.traceID)-\(span.spanID)-01", forKey: "traceparent", into: &carrier)
    }

    func extract<Carrier, Extract: Extractor>(
        _ carrier: Carrier, into context: inout InstrumentationContext, using extractor: Extract
    ) where Extract.Carrier == Carrier {
        let parts = extractor.extract(key: "traceparent", from: carrier)?.split(separator: "-") ?? []
        guard parts.count == 4 else { return }
        context.inMemorySpanContext = InMemorySpanContext(
            traceID: String(parts[1]), spanID: String(parts[2]), parentSpanID: nil)
    }
}
