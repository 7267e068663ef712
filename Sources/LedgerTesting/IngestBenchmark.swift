import Foundation
import LedgerCore

/// A same-run baseline a benchmark is compared with (e.g. pgbench single-row insert tps at the
/// same concurrency, from the store's AppendBenchmark). The caller supplies it, so there is one
/// pgbench runner in the project.
public struct BaselineMeasurement: Sendable {
    public var name: String
    public var perSecond: Double
    public var detail: String
    public init(name: String, perSecond: Double, detail: String = "") {
        self.name = name
        self.perSecond = perSecond
        self.detail = detail
    }
}

public typealias BaselineRunner = @Sendable (_ connections: Int) async throws -> BaselineMeasurement

/// Errors of the HTTP benchmarks: a benchmark of refusals measures nothing, so any non-200 ends it.
public enum BenchmarkError: Error, CustomStringConvertible {
    case rejected(status: Int, count: Int, body: String, fix: String)
    case transport(String)
    case invalid(String)

    public var description: String {
        switch self {
        case .rejected(let status, let count, let body, let fix):
            return "\(count) requests were answered \(status) (\(body)); \(fix)"
        case .transport(let what): return "the service stopped answering: \(what); is it running on that URL?"
        case .invalid(let why): return "invalid benchmark options: \(why)"
        }
    }
}

func requireAllOK(_ load: LoadReport, fix: String) throws(BenchmarkError) {
    if let (status, count) = load.statusCounts.filter({ $0.key != 200 }).max(by: { $0.value < $1.value }) {
        throw .rejected(status: status, count: count, body: load.sampleBodies[status] ?? "", fix: fix)
    }
    if load.transportErrors > 0 { throw .transport("\(load.transportErrors) transport errors \(load.transportErrorKinds)") }
}

/// `ledger-dev bench ingest`: posts pre-minted, distinct V2 notifications (outer, transaction and
/// renewal JWS each, one production-like chain) to a running service over C keep-alive
/// connections, and puts notifications/s next to a same-run baseline (pgbench single-row inserts
/// at the same concurrency). Issue 3's target: ratio ≥ 1.0 at C = 32.
public enum IngestBenchmark {
    public struct Options: Sendable {
        /// The running service, e.g. http://127.0.0.1:8080 (loopback only).
        public var baseURL: String
        public var notifications: Int
        public var connections: Int
        /// Posted first and not measured: connections, the chain cache and the pool warm up.
        public var warmup: Int
        /// Must be accepted by the service (LEDGER_APPLE_BUNDLE_IDS / _ENVIRONMENTS).
        public var bundleId: String
        public var environment: String
        /// nil: no baseline. `IngestBenchmark.pgbenchBaseline(serverConninfo:)` is the one issue 3 asks for.
        public var baseline: BaselineRunner?

        public init(baseURL: String, notifications: Int = 10_000, connections: Int = 32, warmup: Int = 500,
                    bundleId: String = "com.example", environment: String = "Sandbox", baseline: BaselineRunner? = nil) {
            self.baseURL = baseURL
            self.notifications = notifications
            self.connections = connections
            self.warmup = warmup
            self.bundleId = bundleId
            self.environment = environment
            self.baseline = baseline
        }
    }

    public struct Report: Sendable {
        public var notifications: Int
        public var connections: Int
        public var bodyBytes: Int
        public var load: LoadReport
        public var baseline: BaselineMeasurement?

        public var notificationsPerSecond: Double { load.requestsPerSecond }
        /// Notifications/s divided by the baseline's per-second rate.
        public var ratio: Double? { baseline.flatMap { $0.perSecond > 0 ? notificationsPerSecond / $0.perSecond : nil } }

        public var text: String {
            var lines = [
                String(format: "ingest: %d V2 notifications (3 JWS each, %.1f KB average body) over %d connections",
                       notifications, Double(bodyBytes) / Double(max(1, notifications)) / 1024, connections),
                String(format: "  ledger:   %8.0f notifications/s   p50 %.2f ms   p99 %.2f ms   max %.2f ms",
                       notificationsPerSecond, load.latency.p50, load.latency.p99, load.latency.max),
            ]
            if let baseline {
                lines.append(String(format: "  baseline: %8.0f /s  %@ %@", baseline.perSecond, baseline.name, baseline.detail))
                lines.append(String(format: "  ratio:    %.2f (target ≥ 1.0 at 32 connections)", ratio ?? 0))
            } else {
                lines.append("  baseline: not measured (no pgbench runner given)")
            }
            return lines.joined(separator: "\n")
        }
    }

    /// pgbench single-row INSERT transactions per second at the benchmark's concurrency, in a
    /// scratch database on `serverConninfo`'s cluster (AppendBenchmark's runner, so the project has
    /// one), each row carrying `rawBytes` of raw evidence like one ingested notification.
    public static func pgbenchBaseline(serverConninfo: String, transactionsPerClient: Int = 300, rawBytes: Int = 12 * 1024) -> BaselineRunner {
        { connections in
            let database = try TestDatabase.create(serverConninfo: serverConninfo, prefix: "ledger_bench")
            defer { try? database.drop() }
            var random = SystemRandomNumberGenerator()
            let sample = NewEvent(
                streamId: "7000000000000001", dedupeKey: "pgbench", source: .apple, type: "DID_RENEW", environment: "Sandbox",
                signedAt: 1_767_225_600_000, expiresAt: 1_769_817_600_000,
                payload: Data(#"{"notificationType":"DID_RENEW","data":{"bundleId":"com.example","environment":"Sandbox"}}"#.utf8),
                raw: Data((0..<max(1, rawBytes)).map { _ in UInt8.random(in: 0...255, using: &random) }))
            let result = try AppendBenchmark.runPgbench(database: database, sample: sample, transactionsPerClient: transactionsPerClient, clients: connections)
            return BaselineMeasurement(name: "pgbench single-row INSERT tps",
                                       perSecond: result.tps, detail: "(\(connections) clients × \(transactionsPerClient), \(rawBytes / 1024) KB raw per row)")
        }
    }

    public static func run(_ options: Options, authority: AppleTestAuthority,
                           log: @Sendable (String) -> Void = { _ in }) async throws -> Report {
        guard options.notifications > 0, options.connections > 0, options.warmup >= 0 else {
            throw BenchmarkError.invalid("notifications and connections must be positive, warmup non-negative")
        }
        let target = try LoopbackTarget(url: options.baseURL)
        // One stream per notification: every notification carries its own freshly signed nested JWS.
        let mint = NotificationMint(authority: authority, notificationsPerStream: 1, bundleId: options.bundleId, environment: options.environment)
        log("minting \(options.warmup + options.notifications) notifications…")
        let minted = try mint.premint(options.warmup + options.notifications)
        let warm = minted.prefix(options.warmup).map(\.request)
        let measured = minted.dropFirst(options.warmup).map(\.request)
        let fix = "start the service trusting the benchmark authority's root (LEDGER_APPLE_ROOT_CERTS) and accepting \(options.bundleId)/\(options.environment)"
        if !warm.isEmpty {
            log("warming up with \(warm.count)…")
            let w = try LoadGenerator(target: target, options: LoadOptions(connections: options.connections, limit: .count(warm.count))) { warm[$0] }
            try requireAllOK(await w.run(), fix: fix)
        }
        log("posting \(measured.count) over \(options.connections) connections…")
        let generator = try LoadGenerator(target: target, options: LoadOptions(connections: options.connections, limit: .count(measured.count))) { measured[$0] }
        let load = await generator.run()
        try requireAllOK(load, fix: fix)
        var baseline: BaselineMeasurement?
        if let runner = options.baseline {
            log("measuring the baseline at \(options.connections) connections…")
            baseline = try await runner(options.connections)
        }
        return Report(notifications: measured.count, connections: options.connections,
                      bodyBytes: measured.reduce(0) { $0 + $1.body.count }, load: load, baseline: baseline)
    }
}
