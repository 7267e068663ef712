import Foundation
import LedgerCore
import LedgerStore
import Postgres

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

    // MARK: the same-run comparison (`ledger-dev bench read`)

    /// A database of subscriptions for the read benchmark: what was seeded and what to ask.
    public struct Dataset: Sendable {
        /// originalTransactionIds (Production) of every seeded subscription.
        public var ids: [String]
        /// Customer ids (normalised appAccountTokens), one per subscription.
        public var customers: [String]
        /// One business time per subscription, inside its lifecycle, for `?at=` reads.
        public var moments: [EpochMillis]
        public var events: Int
        public var seconds: Double
    }

    /// Seeds `subscriptions` realistic lifecycles (LifecycleGenerator: trials, renewals, billing
    /// retries, refunds … over `days`, ending around now, Production, bundle com.example) into the
    /// migrated database at `conninfo` (a superuser or owner connection): events by COPY, then
    /// their facts derived by the ledger's `FactDeriver` (`ledger rederive`'s work) and every
    /// projection built by the `Rebuilder` (`ledger rebuild`'s) under `catalog` — so the states the
    /// service answers are the ledger's own projections of real facts, without 100k HTTP posts.
    /// Run it before the service starts.
    public static func seed(conninfo: String, subscriptions: Int, days: Int = 40, seed: UInt64 = 15,
                            catalog: ProductCatalog = .productIds,
                            log: @Sendable (String) -> Void = { _ in }) async throws -> Dataset {
        guard subscriptions > 0 else { throw BenchmarkError.invalid("--subscriptions must be at least 1") }
        let clock = ContinuousClock()
        let started = clock.now
        let now = EpochMillis((Date().timeIntervalSince1970 * 1000).rounded(.down))
        let start = now - EpochMillis(days) * 86_400_000
        let generator = LifecycleGenerator(customers: 0, days: days, start: start, seed: seed, bundleId: "com.example",
                                           environment: "Production", duplicateRate: 0)
        var ids: [String] = [], customers: [String] = [], moments: [EpochMillis] = []
        ids.reserveCapacity(subscriptions)
        let connection = try TestDatabase.connect(conninfo)
        let raw = "\\\\x" + String(repeating: "5b706c616365686f6c6465725d", count: 4)  // bytea hex in COPY text
        var written = 0
        let groupSize = 2_000
        // Positions are assigned here and the count is known only after generating (holding every
        // lifecycle in memory first would take hundreds of MB), so the guard that refuses a
        // position past the head is set aside for this transaction (superuser only) and the head
        // is moved to the last position before it commits: the log ends gapless and consistent.
        try connection.transaction { connection in
            try connection.query("SET LOCAL session_replication_role = replica", name: "seed without triggers")
            try connection.copyIn(
                "COPY events (position, stream_id, dedupe_key, source, type, environment, signed_at, expires_at, payload, raw, recorded_at) FROM STDIN"
            ) { writer in
                var customer = 0
                while customer < subscriptions {
                    var group: [SimulatedNotification] = []
                    for index in customer..<min(subscriptions, customer + groupSize) {
                        let lifecycle = generator.lifecycle(customerIndex: index)
                        ids.append(lifecycle.originalTransactionId)
                        customers.append(CustomerId.normalised(appAccountToken: lifecycle.appAccountToken) ?? lifecycle.appAccountToken)
                        let first = lifecycle.notifications.first?.signedDate ?? start
                        moments.append(first + (max(first, min(now, lifecycle.end)) - first) / 2)
                        var seen = Set<String>()
                        group += lifecycle.notifications.filter { seen.insert($0.notificationUUID).inserted && $0.deliveredAt <= now }
                    }
                    customer += groupSize
                    group.sort { ($0.deliveredAt, $0.signedDate, $0.notificationUUID) < ($1.deliveredAt, $1.signedDate, $1.notificationUUID) }
                    try writer.write(RebuildBenchmark.encode(group, firstPosition: written + 1, raw: raw))
                    written += group.count
                }
            }
            try connection.query("UPDATE event_head SET position = $1", [.int64(Int64(written))], name: "bench head")
        }
        try connection.query("VACUUM ANALYZE events", name: "vacuum events")
        func since(_ t: ContinuousClock.Instant) -> String {
            let d = t.duration(to: clock.now)
            return String(format: "%.1f s", Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18)
        }
        log("seeded \(written) events of \(subscriptions) subscriptions in \(since(started)); deriving facts…")
        let deriving = clock.now
        let store = Store(.init(databaseURL: conninfo, poolSize: 1, catalog: catalog, liveProjections: false))
        defer { store.close() }
        _ = try await store.facts.run(batch: 5_000)
        try connection.query("VACUUM ANALYZE facts", name: "vacuum facts")
        log("derived in \(since(deriving)); rebuilding the projections…")
        let rebuilding = clock.now
        _ = try await store.rebuilder().run()
        try connection.query("VACUUM ANALYZE", name: "vacuum")
        log("rebuilt in \(since(rebuilding))")
        let elapsed = started.duration(to: clock.now)
        return Dataset(ids: ids, customers: customers, moments: moments, events: written,
                       seconds: Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
    }

    /// What `compare` measures: each workload's requests, cycled.
    public struct Workload: Sendable {
        /// The BenchSummary name: `read`, `read/entitlements`, `read/at`.
        public var name: String
        public var label: String
        public var requests: [LoadRequest]
    }

    /// The three workloads over a dataset: the state now, a customer's entitlements now, and the
    /// state at a past business time (`?at=`, a fold of the subscription's facts).
    public static func workloads(_ data: Dataset, token: String?) -> [Workload] {
        var headers: [(String, String)] = []
        if let token { headers.append(("Authorization", "Bearer \(token)")) }
        let allowed = CharacterSet.urlPathAllowed.subtracting(CharacterSet(charactersIn: "/"))
        func segment(_ s: String) -> String { s.addingPercentEncoding(withAllowedCharacters: allowed) ?? s }
        // Every phase starts at the first request: a fixed shuffle spreads each phase over the
        // whole table instead of the same leading rows (no phase reads only what the last one warmed).
        var rng = SplitMix64(seed: 0x5EAD)
        let order = Array(data.ids.indices).shuffled(using: &rng)
        let data = Dataset(ids: order.map { data.ids[$0] }, customers: order.map { data.customers[$0] },
                           moments: order.map { data.moments[$0] }, events: data.events, seconds: data.seconds)
        return [
            Workload(name: "read", label: "GET /v1/subscriptions/{id}",
                     requests: data.ids.map { LoadRequest(path: "/v1/subscriptions/" + segment($0), headers: headers) }),
            Workload(name: "read/entitlements", label: "GET /v1/customers/{id}/entitlements",
                     requests: data.customers.map { LoadRequest(path: "/v1/customers/\(segment($0))/entitlements", headers: headers) }),
            Workload(name: "read/at", label: "GET /v1/subscriptions/{id}?at=",
                     requests: zip(data.ids, data.moments).map { LoadRequest(path: "/v1/subscriptions/\(segment($0))?at=\($1)", headers: headers) }),
        ]
    }

    /// One run: for each workload, `/healthz` at its maximum, then the workload at its maximum,
    /// then the workload open-loop at half that `/healthz` maximum — all over the same connection
    /// count and the same load generator. Each workload's baseline is the healthz maximum measured
    /// right before it: on a shared machine the ceiling moves within a run.
    public struct Run: Sendable {
        public var healthz: [String: LoadReport] = [:]
        public var maximum: [String: LoadReport] = [:]
        public var atHalf: [String: LoadReport] = [:]
        public func halfRate(_ workload: String) -> Double { (healthz[workload]?.requestsPerSecond ?? 0) / 2 }
    }

    public struct Comparison: Sendable {
        public var runs: [Run]
        public var workloads: [Workload]
        public var connections: Int
        public var subscriptions: Int
        public var summaries: [BenchSummary]

        public var text: String {
            var lines = ["read: \(subscriptions) subscriptions, \(connections) connections; per run and workload: /healthz at its maximum, the read at its maximum, the read open-loop at ½ that /healthz maximum"]
            for (i, run) in runs.enumerated() {
                lines.append("  run \(i + 1):")
                for w in workloads {
                    guard let m = run.maximum[w.name], let base = run.healthz[w.name] else { continue }
                    var line = String(format: "    %-38@ max %7.0f req/s vs /healthz %7.0f (%.2f×)", w.label as NSString, m.requestsPerSecond,
                                      base.requestsPerSecond, m.requestsPerSecond / max(1, base.requestsPerSecond))
                    if let h = run.atHalf[w.name] {
                        line += String(format: "   at %.0f/s: %.0f req/s, p50 %.2f ms, p99 %.2f ms", run.halfRate(w.name), h.requestsPerSecond, h.latency.p50, h.latency.p99)
                    }
                    lines.append(line)
                }
            }
            return lines.joined(separator: "\n")
        }
    }

    /// `runs` runs (see `Run`). One BenchSummary per workload (baseline: the healthz maximum
    /// measured right before it in the same run; target ≥ 0.5), with p50/p99 at half that rate.
    public static func compare(baseURL: String, dataset: Dataset, token: String?, connections: Int = 32,
                               duration: Duration = .seconds(3), runs: Int = 3, command: String = "ledger-dev bench read",
                               log: @Sendable (String) -> Void = { _ in }) async throws -> Comparison {
        let target = try LoopbackTarget(url: baseURL)
        let workloads = workloads(dataset, token: token)
        let healthz = [LoadRequest(path: "/healthz")]
        let load = BenchSummary.currentLoadAverage()
        let fix = "check the service answers the seeded subscriptions and the token has the app role (LEDGER_TOKENS)"
        func measure(_ requests: [LoadRequest], rate: Double? = nil, for d: Duration = duration) async throws -> LoadReport {
            let r = try await LoadGenerator(target: target, options: LoadOptions(connections: connections, limit: .duration(d), rate: rate),
                                            cycling: requests).run()
            try requireAllOK(r, fix: fix)
            return r
        }
        // Warm-up: connections, the service's pool and PostgreSQL's buffers.
        for w in workloads { _ = try await measure(w.requests, for: .seconds(1)) }
        var all: [Run] = []
        for i in 0..<max(1, runs) {
            var run = Run()
            for w in workloads {
                let base = try await measure(healthz)
                run.healthz[w.name] = base
                let m = try await measure(w.requests)
                run.maximum[w.name] = m
                let h = try await measure(w.requests, rate: run.halfRate(w.name))
                run.atHalf[w.name] = h
                log(String(format: "run %d: %@ max %.0f req/s vs /healthz %.0f; at %.0f/s p99 %.2f ms", i + 1, w.name, m.requestsPerSecond,
                           base.requestsPerSecond, run.halfRate(w.name), h.latency.p99))
            }
            all.append(run)
        }
        func median(_ xs: [Double]) -> Double { BenchSummary.Figure(xs).median }
        let summaries = workloads.map { w in
            BenchSummary(
                name: w.name, command: command, unit: "req/s", ledgerLabel: "\(w.label), maximum",
                ledger: all.map { $0.maximum[w.name]?.requestsPerSecond ?? 0 },
                baselineLabel: "GET /healthz maximum right before it, same run, same \(connections) connections",
                baseline: all.map { $0.healthz[w.name]?.requestsPerSecond ?? 0 },
                target: ("≥ 0.5", { $0 >= 0.5 }),
                details: [
                    "p99 ms at half the healthz maximum": median(all.map { $0.atHalf[w.name]?.latency.p99 ?? 0 }),
                    "p50 ms at half the healthz maximum": median(all.map { $0.atHalf[w.name]?.latency.p50 ?? 0 }),
                    "req/s answered at half the healthz maximum": median(all.map { $0.atHalf[w.name]?.requestsPerSecond ?? 0 }),
                    "half the healthz maximum (req/s offered)": median(all.map { $0.halfRate(w.name) }),
                    "subscriptions": Double(dataset.ids.count),
                ],
                loadAverage: load)
        }
        return Comparison(runs: all, workloads: workloads, connections: connections, subscriptions: dataset.ids.count, summaries: summaries)
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
