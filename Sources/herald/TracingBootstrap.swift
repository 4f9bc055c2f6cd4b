import Foundation
import HeraldEngine
import Logging
import OTel
import ServiceLifecycle
import Tracing

/// `telemetry` in `herald serve`: the process's tracer, exporting spans over OTLP/HTTP
/// (protobuf) through swift-otel's batch processor.
enum TracingBootstrap {
    /// With `telemetry.otlp_endpoint`, bootstraps the tracer and returns the exporter's service
    /// (for the service group: run first and stopped last, so the spans of the server's own
    /// stop are still sent). Nil, and nothing bootstrapped, without an endpoint.
    ///
    /// The standard `OTEL_*` variables apply on top (e.g. `OTEL_EXPORTER_OTLP_HEADERS` for a
    /// collector that wants a key, `OTEL_EXPORTER_OTLP_CERTIFICATE` for a private CA).
    static func bootstrap(_ telemetry: HeraldConfiguration.Telemetry, logger: Logger) throws -> (any Service)? {
        guard let url = telemetry.tracesURL else { return nil }
        var configuration = OTel.Configuration.default
        configuration.serviceName = "herald"
        configuration.resourceAttributes["service.version"] = HeraldVersion.release
        configuration.diagnosticLogger = .custom(logger)
        configuration.diagnosticLogLevel = .warning
        configuration.logs.enabled = false
        configuration.metrics.enabled = false
        configuration.traces.enabled = true
        configuration.traces.sampler =
            .parentBasedTraceIDRatio(ratio: telemetry.sampleRatio) ?? .parentBasedAlwaysOn
        configuration.traces.otlpExporter.endpoint = url
        configuration.traces.otlpExporter.protocol = .httpProtobuf
        let backend = try OTel.makeTracingBackend(configuration: configuration)
        InstrumentationSystem.bootstrap(backend.factory)
        // Where to, without any user or query part the URL may carry.
        var shown = URLComponents(string: url)
        shown?.user = nil
        shown?.password = nil
        shown?.query = nil
        logger.info(
            "Traces are exported over OTLP/HTTP",
            metadata: [
                "herald.otlp_traces_url": "\(shown?.string ?? "?")", "herald.sample_ratio": "\(telemetry.sampleRatio)",
            ])
        return backend.service
    }
}
