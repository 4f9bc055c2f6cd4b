// swift-tools-version: 6.1
// Lucid's Library comments service (issue #13 §5): what a team's own backend looks like when it
// sends its pushes through Herald's HTTP API. Its own package: it depends on Herald only over HTTP.
import PackageDescription

let package = Package(
    name: "LucidComments",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "lucid-comments", targets: ["lucid-comments"]),
        .library(name: "LucidComments", targets: ["LucidComments"]),
    ],
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/vapor/sqlite-nio.git", from: "1.13.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
    ],
    targets: [
        .target(
            name: "LucidComments",
            dependencies: [
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "SQLiteNIO", package: "sqlite-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .executableTarget(name: "lucid-comments", dependencies: ["LucidComments"]),
        .testTarget(
            name: "LucidCommentsTests",
            dependencies: [
                "LucidComments",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
            ]
        ),
    ]
)
