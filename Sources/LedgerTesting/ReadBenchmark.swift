import Foundation

/// `ledger-dev bench read`: `GET /v1/subscriptions/{id}` over C keep-alive connections against a
/// running service with a populated database. Two runs: closed loop (each connection sends as
/// fast as answers come: the maximum req/s) and open loop at a fixed rate (issue 4's target:
/// p99 < 2 ms at 2,000 req/s, latency measured from when each request was due).
public enum ReadBenchmark {
    public struct Options: Sendable {
        public var baseURL: String
        /// originalTransactionIds known to the service; requests cycle through them.
        public var ids: [String]
        /// Bearer token with the `app` (or higher) role.
        public var token: String?
        public var connections: Int
        public var duration: Duration
        /// nil skips the fixed-rate run.
        public var fixedRate: Double?
        public var warmup: Duration

        public init(baseURL: String, ids: [String], token: String?, connections: Int = 32, duration: Duration = .seconds(10),
                    fixedRate: Double? = 2000, warmup: Duration = .seconds(1)) {
            self.baseURL = baseURL
            self.ids = ids
            self.token = token
            self.connections = connections
            self.duration = duration
            self.fixedRate = fixedRate
            self.warmup = warmup
        }
    }

    public struct Report: Sendable {
        public var connections: Int
        public var ids: Int
        /// Closed loop: the maximum.
        public var maximum: LoadReport
        public var fixedRate: Double?
        public var atFixedRate: LoadReport?

        public var text: String {
            var lines = [
                "read: GET /v1/subscriptions/{id} over \(connections) connections, \(ids) distinct subscriptions",
                String(format: "  maximum:      %8.0f req/s   p50 %.2f ms   p90 %.2f ms   p99 %.2f ms   max %.2f ms",
                       maximum.requestsPerSecond, maximum.latency.p50, maximum.latency.p90, maximum.latency.p99, maximum.latency.max),
            ]
            if let fixedRate, let r = atFixedRate {
                lines.append(String(format: "  at %5.0f/s:   %8.0f req/s   p50 %.2f ms   p90 %.2f ms   p99 %.2f ms   max %.2f ms (target p99 < 2 ms)",
                                    fixedRate, r.requestsPerSecond, r.latency.p50, r.latency.p90, r.latency.p99, r.latency.max))
            }
            return lines.joined(separator: "\n")
        }
    }

    /// Populates a service for the benchmark: one signed notification per subscription, posted
    /// over `connections`; returns the subscriptions' originalTransactionIds.
    public static func populate(baseURL: String, authority: AppleTestAuthority, subscriptions: Int, connections: Int = 32,
                                bundleId: String = "com.example", environment: String = "Sandbox") async throws -> [String] {
        let target = try LoopbackTarget(url: baseURL)
        let mint = NotificationMint(authority: authority, notificationsPerStream: 1, bundleId: bundleId, environment: environment)
        let generator = try LoadGenerator(target: target, options: LoadOptions(connections: connections, limit: .count(subscriptions)),
                                          source: mint.loadSource())
        try requireAllOK(await generator.run(), fix: "start the service trusting the authority's root and accepting \(bundleId)/\(environment)")
        return (0..<subscriptions).map(mint.streamId)
    }

    static func requests(_ options: Options) -> [LoadRequest] {
        var headers: [(String, String)] = []
        if let token = options.token { headers.append(("Authorization", "Bearer \(token)")) }
        let allowed = CharacterSet.urlPathAllowed.subtracting(CharacterSet(charactersIn: "/"))
        return options.ids.map { id in
            LoadRequest(path: "/v1/subscriptions/" + (id.addingPercentEncoding(withAllowedCharacters: allowed) ?? id), headers: headers)
        }
    }

    public static func run(_ options: Options, log: @Sendable (String) -> Void = { _ in }) async throws -> Report {
        guard !options.ids.isEmpty else { throw BenchmarkError.invalid("no subscription ids: populate the database first (ledger-dev simulate) and pass its ids") }
        let target = try LoopbackTarget(url: options.baseURL)
        let requests = requests(options)
        let fix = "check the ids exist and the token has the app role (LEDGER_TOKENS)"
        if options.warmup > .zero {
            let w = try LoadGenerator(target: target, options: LoadOptions(connections: options.connections, limit: .duration(options.warmup)), cycling: requests)
            try requireAllOK(await w.run(), fix: fix)
        }
        log("closed loop for \(options.duration)…")
        let maximum = try await LoadGenerator(target: target, options: LoadOptions(connections: options.connections, limit: .duration(options.duration)),
                                              cycling: requests).run()
        try requireAllOK(maximum, fix: fix)
        var atRate: LoadReport?
        if let rate = options.fixedRate {
            log("open loop at \(Int(rate)) req/s for \(options.duration)…")
            let r = try await LoadGenerator(target: target, options: LoadOptions(connections: options.connections, limit: .duration(options.duration), rate: rate),
                                            cycling: requests).run()
            try requireAllOK(r, fix: fix)
            atRate = r
        }
        return Report(connections: options.connections, ids: options.ids.count, maximum: maximum, fixedRate: options.fixedRate, atFixedRate: atRate)
    }
}
