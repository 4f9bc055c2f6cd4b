// swift-tools-version: 6.1
import PackageDescription

let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "Herald",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "herald", targets: ["herald"]),
        .library(name: "HeraldPayload", targets: ["HeraldPayload"]),
        // The client library for apps (Foundation only; builds and is tested on
        // Linux) and its fakes for app teams' tests.
        .library(name: "HeraldKit", targets: ["HeraldKit"]),
        .library(name: "HeraldKitTesting", targets: ["HeraldKitTesting"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.46.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        // NIOHTTPTypes: the HTTP parts Hummingbird's pipeline carries, for the handler that
        // answers health probes on the event loop (already in the graph through Hummingbird).
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.34.1"),
        .package(url: "https://github.com/vapor/sql-kit.git", from: "3.36.0"),
        .package(url: "https://github.com/vapor/sqlite-kit.git", from: "4.5.2"),
        .package(url: "https://github.com/vapor/sqlite-nio.git", from: "1.13.2"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/vapor/postgres-kit.git", from: "2.17.0"),
        .package(url: "https://github.com/jpsim/Yams.git", from: "6.2.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        // Webhooks: HTTP/1.1 and HTTPS to the app's backend, pooled, with deadlines;
        // not a hot path, so the well-kept client rather than one of our own.
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        // The dashboard: server-rendered pages from Mustache templates (GUIDE.md's choice).
        .package(url: "https://github.com/hummingbird-project/swift-mustache.git", from: "2.1.1"),
        // Traces: spans through swift-distributed-tracing's API (Hummingbird's tracing
        // middleware speaks it too), exported by swift-otel over OTLP/HTTP only; the gRPC
        // exporter's trait stays off so gRPC Swift is never built.
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.3"),
        .package(url: "https://github.com/swift-otel/swift-otel.git", from: "1.6.0", traits: ["OTLPHTTP"]),
    ],
    targets: [
        .target(name: "HeraldPayload", swiftSettings: strict),
        .target(name: "HeraldKit", dependencies: ["HeraldPayload"], swiftSettings: strict),
        .target(name: "HeraldKitTesting", dependencies: ["HeraldKit", "HeraldPayload"], swiftSettings: strict),
        .target(name: "HeraldCore", dependencies: ["HeraldPayload"], swiftSettings: strict),
        .target(
            name: "HeraldHTTP2",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
            ],
            swiftSettings: strict
        ),
        .target(
            name: "HeraldAPNs",
            dependencies: [
                "HeraldCore", "HeraldHTTP2",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),
        .target(
            name: "HeraldFCM",
            dependencies: [
                "HeraldCore", "HeraldHTTP2",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),
        // Web Push (RFC 8291 encryption, RFC 8292 VAPID) on swift-crypto.
        .target(
            name: "HeraldWebPush",
            dependencies: [
                "HeraldCore",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),
        .target(
            name: "HeraldSimulator",
            dependencies: [
                "HeraldCore", "HeraldHTTP2", "HeraldWebPush",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),
        .target(
            name: "HeraldStore",
            dependencies: [
                "HeraldCore",
                "HeraldPayload",
                .product(name: "SQLKit", package: "sql-kit"),
                .product(name: "SQLiteKit", package: "sqlite-kit"),
                .product(name: "SQLiteNIO", package: "sqlite-nio"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "PostgresKit", package: "postgres-kit"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            resources: [.embedInCode("Resources/migrations.sql")],
            swiftSettings: strict
        ),
        // Notification catalogs from YAML: `herald catalog check` and the catalog tests need
        // neither the store nor the server.
        .target(
            name: "HeraldCatalog",
            dependencies: ["HeraldCore", "HeraldPayload", .product(name: "Yams", package: "Yams")],
            swiftSettings: strict
        ),
        // The server below HTTP: configuration, the runtime and its apps' provider clients, the
        // outbox (claim, plan, send, record), sends, webhooks, telemetry. No Hummingbird here.
        .target(
            name: "HeraldEngine",
            dependencies: [
                "HeraldCatalog", "HeraldCore", "HeraldPayload", "HeraldAPNs", "HeraldFCM", "HeraldStore",
                "HeraldWebPush",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "Instrumentation", package: "swift-distributed-tracing"),
            ],
            swiftSettings: strict
        ),
        // What falls due by time: track steps, catalog jobs, event triggers, badge pushes.
        .target(
            name: "HeraldSchedule",
            dependencies: [
                "HeraldCatalog", "HeraldCore", "HeraldEngine", "HeraldPayload", "HeraldStore",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),
        // The HTTP API: routes, request context, auth middleware, JSON models, OpenAPI document.
        .target(
            name: "HeraldAPI",
            dependencies: [
                "HeraldCatalog", "HeraldCore", "HeraldEngine", "HeraldPayload", "HeraldSchedule", "HeraldStore",
                "HeraldAPNs", "HeraldFCM", "HeraldWebPush",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            resources: [.embedInCode("Resources/openapi.yaml")],
            swiftSettings: strict
        ),
        // The operator's dashboard: server-rendered pages over the same runtime.
        .target(
            name: "HeraldDashboard",
            dependencies: [
                "HeraldAPI", "HeraldCatalog", "HeraldCore", "HeraldEngine", "HeraldPayload", "HeraldSchedule",
                "HeraldStore",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Mustache", package: "swift-mustache"),
            ],
            resources: [
                .embedInCode("Resources/dashboard/layout.mustache"),
                .embedInCode("Resources/dashboard/login.mustache"),
                .embedInCode("Resources/dashboard/overview.mustache"),
                .embedInCode("Resources/dashboard/users.mustache"),
                .embedInCode("Resources/dashboard/notifications.mustache"),
                .embedInCode("Resources/dashboard/notification.mustache"),
                .embedInCode("Resources/dashboard/message.mustache"),
                .embedInCode("Resources/dashboard/compose.mustache"),
                .embedInCode("Resources/dashboard/analytics.mustache"),
                .embedInCode("Resources/dashboard/catalog.mustache"),
                .embedInCode("Resources/dashboard/dashboard.css"),
                .embedInCode("Resources/dashboard/dashboard.js"),
            ],
            swiftSettings: strict
        ),
        // `herald serve` put together: the services of one group, the listeners, TLS.
        .target(
            name: "HeraldServer",
            dependencies: [
                "HeraldAPI", "HeraldDashboard", "HeraldEngine", "HeraldSchedule", "HeraldCatalog", "HeraldStore",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdHTTP2", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),
        .target(
            name: "HeraldTesting",
            dependencies: [
                "HeraldAPNs", "HeraldCore", "HeraldSimulator", "HeraldStore",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
            ],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "herald",
            dependencies: [
                "HeraldAPI", "HeraldAPNs", "HeraldCatalog", "HeraldCore", "HeraldEngine", "HeraldFCM", "HeraldPayload",
                "HeraldSimulator", "HeraldServer", "HeraldStore", "HeraldWebPush",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "OTel", package: "swift-otel"),
            ],
            swiftSettings: strict
        ),
        // libFuzzer target for the HTTP/2 frame parser (scripts/fuzz-http2.sh builds it with
        // -sanitize=fuzzer); a plain build replays a corpus: herald-fuzz-http2 Fuzz/corpus/http2
        .executableTarget(
            name: "herald-fuzz-http2",
            dependencies: [
                "HeraldHTTP2",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
            ],
            path: "Fuzz/HTTP2Frames",
            swiftSettings: strict
        ),
        .testTarget(name: "HeraldCoreTests", dependencies: ["HeraldCore", "HeraldPayload"], swiftSettings: strict),
        .testTarget(
            name: "HeraldCatalogTests", dependencies: ["HeraldCatalog", "HeraldCore", "HeraldPayload"],
            swiftSettings: strict),
        .testTarget(
            name: "HeraldKitTests", dependencies: ["HeraldKit", "HeraldKitTesting", "HeraldPayload"],
            swiftSettings: strict),
        .testTarget(
            name: "HeraldServerTests",
            dependencies: [
                "HeraldServer", "HeraldEngine", "HeraldSchedule", "HeraldAPI", "HeraldDashboard", "HeraldStore",
                "HeraldSimulator", "HeraldTesting", "HeraldAPNs", "HeraldCatalog",
                "HeraldCore", "HeraldFCM", "HeraldKit", "HeraldKitTesting",
                "HeraldPayload", "HeraldWebPush",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: strict
        ),
        // The store on its own, on SQLite and (HERALD_TEST_DATABASE=postgres) PostgreSQL.
        .testTarget(
            name: "HeraldStoreTests",
            dependencies: ["HeraldStore", "HeraldCore", "HeraldTesting"],
            swiftSettings: strict
        ),
        .testTarget(
            name: "HeraldHTTP2Tests",
            dependencies: [
                "HeraldHTTP2",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "HeraldSimulatorTests",
            dependencies: [
                "HeraldSimulator", "HeraldAPNs", "HeraldCore", "HeraldPayload", "HeraldTesting",
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "HeraldFCMTests",
            dependencies: [
                "HeraldFCM", "HeraldCore", "HeraldSimulator", "HeraldTesting", "HeraldPayload",
                .product(name: "_CryptoExtras", package: "swift-crypto"),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "HeraldWebPushTests",
            dependencies: ["HeraldWebPush", "HeraldCore", .product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: strict
        ),
        .testTarget(
            name: "HeraldCLITests",
            dependencies: ["HeraldAPNs", "HeraldSimulator", "HeraldTesting"],
            swiftSettings: strict
        ),
        .testTarget(
            name: "HeraldAPNsTests",
            dependencies: [
                "HeraldAPNs", "HeraldCore", "HeraldSimulator", "HeraldTesting",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strict
        ),
    ]
)
