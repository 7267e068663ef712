import Foundation
import LedgerCore
import LedgerStore

/// `ledger-dev bench reports`: the reports over a year of N subscribers (issue 23: p99 < 100 ms),
/// and whether the reporting projection keeps up with ingest, both beside the same run's baselines.
///
/// 1. Ingest: a year of `subscribers` App Store lifecycles (`LifecycleGenerator`, Production) is
///    appended through the ledger's own append path (`EventStore`: group commit, facts, the live
///    projections) into a spawned service's database, in blocks of 5,000 subscribers whose
///    notifications are interleaved in delivery order (so each projection batch touches as many
///    subscriptions as a real day's traffic would), by 8 concurrent appenders. The catch-up worker
///    (`ProjectionWorker`, the one runner) keeps the reports projection meanwhile. The subscribers are
///    split into `runs` segments; per segment: the ingest rate (events/s until the last append) and
///    the projection's rate (the same events over the time until the projection reached the head).
///    Ratio: projection ÷ ingest; ≥ 0.9 means the projection drains what ingest writes within a
///    tenth of the time it took to write it (it cannot go faster than events arrive).
/// 2. Answers: `ledger serve` starts over that database; every report (5) × interval (3) × filter
///    (3), JSON and CSV, the default year, over 4 keep-alive connections: p50/p99 per run, against
///    `/healthz` over the same connections in the same run (the HTTP floor of this machine).
public enum ReportBenchmark {
    public struct Options: Sendable {
        public var subscribers = 100_000
        public var days = 365
        public var runs = 3
        /// Requests per run of the answer phase.
        public var requests = 300
        public var connections = 4
        public var seed: UInt64 = 23
        public var block = 5_000

        public init() {}
    }

    struct Segment {
        var events: Int
        var ingestSeconds: Double
        var projectionSeconds: Double
        var lagAtIngestEnd: Int64
        var maxLag: Int64
        var ingestRate: Double { Double(events) / max(ingestSeconds, 1e-9) }
        var projectionRate: Double { Double(events) / max(projectionSeconds, 1e-9) }
    }

    public struct Result: Sendable, CustomStringConvertible {
        public var subscribers: Int
        public var days: Int
        public var events: Int
        public var reportsP99: [Double]
        public var reportsP50: [Double]
        public var healthzP99: [Double]
        public var drillP50: Double
        public var ingestRates: [Double]
        public var projectionRates: [Double]
        public var lagsAtIngestEnd: [Double]
        public var maxLags: [Double]
        public var catchUpSeconds: [Double]
        public var command: String

        static func median(_ xs: [Double]) -> Double { BenchSummary.Figure(xs).median }

        public var p99: Double { Self.median(reportsP99) }

        public var summaries: [BenchSummary] {
            let p99 = self.p99
            return [
                BenchSummary(
                    name: "reports/projection", command: command, unit: "events/s",
                    ledgerLabel: "reports projection (catch-up worker) over the events ingested", ledger: projectionRates,
                    baselineLabel: "ingest of the same events, same run (EventStore.append, 8 appenders)", baseline: ingestRates,
                    target: ("≥ 0.90 (keeps up)", { $0 >= 0.9 }),
                    details: ["lag at ingest end, events": Self.median(lagsAtIngestEnd), "max lag, events": Self.median(maxLags),
                              "catch-up after ingest, s": Self.median(catchUpSeconds)]),
                BenchSummary(
                    name: "reports", command: command, unit: "ms p99",
                    ledgerLabel: "GET /v1/reports/{name} (5 reports × 3 intervals × 3 filters, JSON and CSV, a year)", ledger: reportsP99,
                    baselineLabel: "GET /healthz on the same connections, same run", baseline: healthzP99, higherIsBetter: false,
                    target: ("report p99 < 100 ms", { _ in p99 < 100 }),
                    details: ["reports p50 ms": Self.median(reportsP50), "drill-down p50 ms": drillP50,
                              "ingest events/s": Self.median(ingestRates)]),
            ]
        }

        public var description: String {
            [
                "bench reports: a year (\(days) days) of \(subscribers) App Store subscribers, \(events) events, \(reportsP99.count) runs",
                String(format: "  ingest %.0f events/s; reports projection %.0f events/s over the same events (lag at ingest end %.0f events, caught up %.2f s later)",
                       Self.median(ingestRates), Self.median(projectionRates), Self.median(lagsAtIngestEnd), Self.median(catchUpSeconds)),
                String(format: "  reports p50 %.1f ms, p99 %.1f ms (target p99 < 100 ms: %@); /healthz p99 %.1f ms; a drill-down (subscriptions behind a point) p50 %.1f ms",
                       Self.median(reportsP50), p99, p99 < 100 ? "met" : "NOT met", Self.median(healthzP99), drillP50),
            ].joined(separator: "\n")
        }
    }

    public static func run(serverConninfo: String, options: Options, command: String,
                           log: @escaping @Sendable (String) -> Void = { _ in }) async throws -> Result {
        let spawned = try SpawnedService(options: try ReliabilityOptions(serverConninfo: serverConninfo),
                                         environment: ["LEDGER_TOKENS": "auditor:bench-reports-token-0123456789abcdef0123456789"], start: false)
        defer { spawned.stop() }
        let store = Store(.init(databaseURL: spawned.database.adminConninfo, poolSize: 12))
        let start = SimulationOptions.defaultStart(days: options.days)
        let generator = LifecycleGenerator(customers: options.subscribers, days: options.days, start: start, seed: options.seed,
                                           environment: "Production", duplicateRate: 0.02)
        let runs = max(1, options.runs)
        var segments: [Segment] = []
        var events = 0
        try await withThrowingTaskGroup(of: Void.self) { group in
            // The one runner, as `ledger serve` runs it (stopped once every segment is caught up).
            group.addTask { await store.worker.run(pollInterval: .milliseconds(200)) }
            defer { store.worker.stop() }
            for run in 0..<runs {
                let customers = (options.subscribers * run / runs)..<(options.subscribers * (run + 1) / runs)
                log("segment \(run + 1) of \(runs): subscribers \(customers.lowerBound)…\(customers.upperBound - 1)")
                let segment = try await ingest(customers, generator: generator, block: options.block, store: store, log: log)
                events += segment.events
                segments.append(segment)
                log(String(format: "  %d events: ingest %.0f/s, projection %.0f/s, lag at ingest end %d", segment.events,
                           segment.ingestRate, segment.projectionRate, segment.lagAtIngestEnd))
            }
            store.worker.stop()
            try await group.waitForAll()
        }
        store.close()

        log("starting ledger serve over \(events) events…")
        try spawned.start()
        let target = try LoopbackTarget(url: spawned.baseURL)
        let auth = [("Authorization", "Bearer bench-reports-token-0123456789abcdef0123456789")]
        var requests: [LoadRequest] = []
        for name in ReportName.allCases {
            for interval in ReportInterval.allCases {
                for filter in ["", "&source=apple", "&environment=Production&product=com.example.monthly"] {
                    for format in ["", "&format=csv"] {
                        requests.append(LoadRequest(path: "/v1/reports/\(name.rawValue)?interval=\(interval.rawValue)\(filter)\(format)", headers: auth))
                    }
                }
            }
        }
        // A month in the middle of the year, for the drill-down.
        let mid = ReportDay(containing: start).adding(days: Int64(options.days / 2)).monthStart.text
        let drill = LoadRequest(path: "/v1/reports/movements/subscriptions?interval=month&period=\(mid)&metric=new", headers: auth)
        var reportsP99: [Double] = [], reportsP50: [Double] = [], healthzP99: [Double] = []
        var drills: [Double] = []
        let load = LoadOptions(connections: options.connections, limit: .count(options.requests))
        for run in 1...runs {
            log("answers, run \(run) of \(runs)…")
            let healthz = try await LoadGenerator(target: target, options: load, cycling: [LoadRequest(path: "/healthz")]).run()
            let reports = try await LoadGenerator(target: target, options: load, cycling: requests).run()
            guard reports.count(200) == options.requests else {
                throw BenchmarkError.invalid("\(reports.count(200)) of \(options.requests) report requests answered 200: \(reports.summary) \(reports.sampleBodies)")
            }
            let drilled = try await LoadGenerator(target: target, options: LoadOptions(connections: 1, limit: .count(5)), cycling: [drill]).run()
            guard drilled.count(200) == 5 else { throw BenchmarkError.invalid("drill-down: \(drilled.summary) \(drilled.sampleBodies)") }
            reportsP99.append(reports.latency.p99)
            reportsP50.append(reports.latency.p50)
            healthzP99.append(healthz.latency.p99)
            drills.append(drilled.latency.p50)
        }
        return Result(subscribers: options.subscribers, days: options.days, events: events, reportsP99: reportsP99, reportsP50: reportsP50,
                      healthzP99: healthzP99, drillP50: BenchSummary.Figure(drills).median,
                      ingestRates: segments.map(\.ingestRate), projectionRates: segments.map(\.projectionRate),
                      lagsAtIngestEnd: segments.map { Double($0.lagAtIngestEnd) }, maxLags: segments.map { Double($0.maxLag) },
                      catchUpSeconds: segments.map { max(0, $0.projectionSeconds - $0.ingestSeconds) }, command: command)
    }

    /// Appends the lifecycles of `customers`, block by block in delivery order, and times the
    /// ingest and the reports projection reaching the head.
    static func ingest(_ customers: Range<Int>, generator: LifecycleGenerator, block: Int, store: Store,
                       log: @Sendable (String) -> Void) async throws -> Segment {
        let started = ContinuousClock.now
        var events = 0
        var maxLag: Int64 = 0
        for first in stride(from: customers.lowerBound, to: customers.upperBound, by: block) {
            let notes = (first..<min(first + block, customers.upperBound)).flatMap { generator.lifecycle(customerIndex: $0).notifications }
                .sorted { ($0.deliveredAt, $0.notificationUUID) < ($1.deliveredAt, $1.notificationUUID) }
            let batches = stride(from: 0, to: notes.count, by: 50).map { Array(notes[$0..<min($0 + 50, notes.count)]) }
            try await withThrowingTaskGroup(of: Void.self) { group in
                var next = 0, running = 0
                while next < batches.count || running > 0 {
                    while running < 8 && next < batches.count {
                        let batch = batches[next]
                        next += 1
                        running += 1
                        group.addTask { _ = try await store.events.append(try batch.map { try $0.recordedEvent(position: 0, recordedAt: 0).event }) }
                    }
                    try await group.next()
                    running -= 1
                }
            }
            events += notes.count
            maxLag = max(maxLag, try await lag(store))
        }
        let ingested = ContinuousClock.now
        let lagAtEnd = try await lag(store)
        while try await lag(store) > 0 { try await Task.sleep(for: .milliseconds(20)) }
        let caughtUp = ContinuousClock.now
        func seconds(_ d: Duration) -> Double { Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18 }
        return Segment(events: events, ingestSeconds: seconds(started.duration(to: ingested)),
                       projectionSeconds: seconds(started.duration(to: caughtUp)), lagAtIngestEnd: lagAtEnd, maxLag: max(maxLag, lagAtEnd))
    }

    /// Events the reports projection has not applied yet (a stopped projection is an error).
    static func lag(_ store: Store) async throws -> Int64 {
        guard let reports = try await store.projectionStatuses().first(where: { $0.name == ProjectionName.reports.rawValue }) else {
            throw BenchmarkError.invalid("no reports checkpoint: is Migrations/0020 applied?")
        }
        if reports.isFailed { throw BenchmarkError.invalid("the reports projection stopped: \(reports.lastError ?? "?")") }
        return reports.lag
    }

    public enum BenchmarkError: Error, CustomStringConvertible {
        case invalid(String)
        public var description: String {
            switch self { case .invalid(let m): "bench reports: \(m)" }
        }
    }
}
