// swift-tools-version:6.0
import PackageDescription

// One set of settings for every Swift target, so the whole package is held to the same rules.
let swiftSettings: [SwiftSetting] = [
    // SE-0335: spell existential types `any P`, so a protocol used as a type is visible at a glance.
    .enableUpcomingFeature("ExistentialAny"),
]

let package = Package(
    name: "SubscriptionLedger",
    platforms: [.macOS(.v14)],
    products: [
        // The product: serve, migrate, rebuild, project, rederive, verify-payload. No test support.
        .executable(name: "ledger", targets: ["ledger"]),
        // Development tools around it: simulate, bench, reliability. Never deployed.
        .executable(name: "ledger-dev", targets: ["ledger-dev"]),
    ],
    targets: [
        // C libraries from Debian, wrapped once each (module map + one shim header).
        .systemLibrary(name: "CLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CMicroHTTPD", pkgConfig: "libmicrohttpd", providers: [.apt(["libmicrohttpd-dev"])]),

        // Pure domain: no I/O, no C.
        .target(name: "LedgerCore", swiftSettings: swiftSettings),
        // OpenSSL behind Swift types: digests, HMAC, AES, ECDSA, X.509.
        .target(name: "Crypto", dependencies: ["COpenSSL"], swiftSettings: swiftSettings),
        // libpq behind Swift types.
        .target(name: "Postgres", dependencies: ["CLibPQ"], swiftSettings: swiftSettings),
        // libmicrohttpd behind Swift types.
        .target(name: "HTTPServer", dependencies: ["CMicroHTTPD"], swiftSettings: swiftSettings),

        // The one metrics registry: every Prometheus family is registered here and rendered once.
        .target(name: "LedgerMetrics", swiftSettings: swiftSettings),
        // The one outbound HTTP client (FoundationNetworking): https only, no redirects, typed
        // timeouts, capped answers, Retry-After, one metrics family per target.
        .target(name: "Outbound", dependencies: ["LedgerMetrics"], swiftSettings: swiftSettings),

        .target(name: "LedgerStore", dependencies: ["LedgerCore", "Postgres", "Crypto"], swiftSettings: swiftSettings),
        .target(name: "AppStore", dependencies: ["LedgerCore", "Crypto", "Outbound"], swiftSettings: swiftSettings),
        .target(name: "WeChatPay", dependencies: ["LedgerCore", "Crypto", "Outbound"], swiftSettings: swiftSettings),
        .target(
            name: "LedgerService",
            dependencies: ["LedgerCore", "LedgerStore", "AppStore", "WeChatPay", "HTTPServer", "Crypto", "LedgerMetrics", "Outbound"],
            swiftSettings: swiftSettings
        ),
        // Option parsing, failures with exit codes and progress bars, shared by both executables
        // (Foundation only).
        .target(name: "LedgerCommandLine", swiftSettings: swiftSettings),
        .executableTarget(
            name: "ledger",
            dependencies: ["LedgerService", "LedgerCommandLine"],
            swiftSettings: swiftSettings
        ),

        // Test support: never a dependency of `ledger` (PackageGraphTests checks the graph).
        // Key generation and certificate minting for test PKIs (the only other OpenSSL user).
        .target(name: "CryptoTesting", dependencies: ["Crypto", "COpenSSL"], swiftSettings: swiftSettings),
        // Test authority (signs Apple notifications with a test PKI), lifecycle generator,
        // simulator, benchmarks, reliability scenarios and throw-away databases: used by the test
        // suites and `ledger-dev`.
        .target(
            name: "LedgerTesting",
            dependencies: ["LedgerCore", "AppStore", "WeChatPay", "Crypto", "CryptoTesting", "LedgerStore", "Postgres", "HTTPServer"],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "ledger-dev",
            dependencies: ["LedgerTesting", "LedgerCommandLine", "LedgerCore"],
            swiftSettings: swiftSettings
        ),

        .testTarget(name: "LedgerCoreTests", dependencies: ["LedgerCore", "LedgerTesting"], swiftSettings: swiftSettings),
        .testTarget(name: "CryptoTests", dependencies: ["Crypto", "CryptoTesting"], swiftSettings: swiftSettings),
        .testTarget(name: "PostgresTests", dependencies: ["Postgres", "LedgerTesting"], swiftSettings: swiftSettings),
        .testTarget(name: "LedgerStoreTests", dependencies: ["LedgerStore", "LedgerTesting"], swiftSettings: swiftSettings),
        .testTarget(name: "AppStoreTests", dependencies: ["AppStore", "LedgerTesting", "CryptoTesting"], swiftSettings: swiftSettings),
        .testTarget(name: "WeChatPayTests", dependencies: ["WeChatPay", "LedgerTesting"], swiftSettings: swiftSettings),
        .testTarget(name: "OutboundTests", dependencies: ["Outbound", "LedgerMetrics", "HTTPServer"], swiftSettings: swiftSettings),
        .testTarget(name: "HTTPServerTests", dependencies: ["HTTPServer", "LedgerTesting"], swiftSettings: swiftSettings),
        .testTarget(name: "LedgerServiceTests", dependencies: ["LedgerService", "LedgerTesting", "CryptoTesting"], swiftSettings: swiftSettings),
        // Reads the package graph (`swift package dump-package`): `ledger` links no test support.
        .testTarget(name: "PackageGraphTests", swiftSettings: swiftSettings),
    ]
)
