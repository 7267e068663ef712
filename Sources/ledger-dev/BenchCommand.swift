import Foundation
import LedgerCommandLine
import LedgerTesting

/// `ledger-dev bench <name>`: each benchmark prints its figure next to a baseline measured in the
/// same run, and the ratio, so a result means something on any machine.
enum BenchCommand {
    static let help = """
    usage: ledger-dev bench <append|ingest|read|rebuild|refund-inquiry|refunds|reports|verify|fold|webhooks|ties> [options]

      append          EventStore appends (≈3 KB raw, ≈400 B jsonb) with C writers vs pgbench single-row
                      inserts at the same concurrency      --events N (20000) --concurrency 1,8,32
      ingest          signed V2 notifications over HTTP into a spawned `ledger serve` vs pgbench single-row
                      commits of the same bytes, streams of 1, 10 and 100 prior events
                      --notifications N (2000 per run) --connections C (32) --runs R (3) --priors 1,10,100
      read            state, entitlements and ?at= reads on a spawned service over N seeded subscriptions (COPY,
                      derived facts, rebuilt projections): each read's max req/s against /healthz's max measured
                      right before it, and p99 open-loop at half that      --subscriptions N (100000) --connections C (32)
                      --seconds S per phase (3) --runs R (3)
      rebuild         rebuild every projection from N seeded events vs COPY of the same rows
                      --events N (1000000) --keep-database
      refund-inquiry  WeChat refund inquiries in secure mode against a spawned service, C=16: req/s, p50/p99 and the
                      service's decidedInMs percentiles, median of 3 runs beside the URL check
                      --inquiries N (2000) --connections C (16) --runs R (3)
      refunds         the refund-case list (projection, pages of 100 by cursor) at N cases vs folding every
                      refund fact per request, as the list did before      --cases N (100000)
      reports         a year of N App Store subscribers appended (EventStore, 8 appenders) while the catch-up worker
                      keeps the reports projection: its events/s against the ingest's of the same run (keeps up: ≥ 0.9);
                      then `ledger serve` over it: every report × interval × filter, p99 against /healthz's (target
                      p99 < 100 ms)      --subscribers N (100000) --days D (365) --requests R per run (300)
                      --connections C (4) --runs R (3: ingest segments and answer runs)
      verify          SignedDataVerifier verifications/s (cached chain) vs `openssl speed ecdsap256`
      fold            pure projection folds: facts/s vs JSON decoding of the same payloads
      webhooks        signed V2 notifications into a spawned `ledger serve` with one webhook endpoint (a loopback
                      receiver verifying each request): events delivered/s against the events/s the same run's
                      ingest derived (keeps up: ≥ 1.0), and the lag from each event's commit to its delivery
                      --notifications N (2000) --connections C (8)
      ties            one subscription renewed, then tied and untied in a loop through the app API, then renewed
                      again: the renewals' p99 after the loop against before it (≤ 1.2)
                      --pairs P (5000) --renewals R (200)

    Every benchmark takes --runs R (3): it prints the median of the runs with min and max, its
    same-run baseline and one `ratio:` line, and records them in .build/bench.json (LEDGER_BENCH_JSON).

    Needs the project cluster (make db-start; the LEDGER_TEST_DATABASE_URL superuser URL from
    `eval "$(scripts/db.sh env)"`), creates scratch databases and drops them afterwards.
    ingest, read and refund-inquiry spawn the `ledger` executable next to this one.
    Build with `swift build -c release` first: debug figures are not meaningful.
    """

    static func run(_ raw: [String]) async throws {
        guard let name = raw.first, name != "--help", name != "-h" else {
            print(help)
            if raw.isEmpty { throw CommandFailure(message: "name a benchmark", exitCode: 2) }
            return
        }
        let args = try parse(Array(raw.dropFirst()), command: "bench \(name)",
                             valued: ["events", "concurrency", "notifications", "connections", "subscriptions", "rate",
                                      "seconds", "inquiries", "runs", "cases", "priors", "subscribers", "days", "requests", "pairs", "renewals"],
                             boolean: ["keep-database"], help: help)
        let server = ProcessInfo.processInfo.environment["LEDGER_TEST_DATABASE_URL"] ?? ""
        func needServer() throws -> String {
            guard !server.isEmpty else {
                throw CommandFailure(message: "LEDGER_TEST_DATABASE_URL is not set: run `make db-start` and `eval \"$(scripts/db.sh env)\"`", exitCode: 2)
            }
            return server
        }
        let runs = max(1, try args.int("runs", default: 3))
        switch name {
        case "append":
            let levels = (args.options["concurrency"] ?? "1,8,32").split(separator: ",").compactMap { Int($0) }
            let events = try args.int("events", default: 20_000)
            print("bench append: \(events) events per level, EventStore (group commit) vs pgbench single-row INSERT, \(runs) runs each")
            for c in levels {
                var results: [AppendBenchmark.Report] = []
                for _ in 0..<runs {
                    let result = try await AppendBenchmark.run(conninfo: try needServer(), events: events, concurrency: c)
                    print(result)
                    results.append(result)
                }
                let baseline = results.compactMap(\.pgbenchTPS)
                guard baseline.count == results.count else {
                    throw CommandFailure(message: "pgbench did not run (\(results.last?.pgbenchNote ?? "?")): install postgresql-contrib or put pgbench on PATH", exitCode: 1)
                }
                try report(BenchSummary(name: "append/c\(c)", command: "ledger-dev bench append --concurrency \(c)", unit: "events/s",
                                        ledgerLabel: "EventStore.append (group commit, facts, chain)", ledger: results.map(\.eventsPerSecond),
                                        baselineLabel: "pgbench single-row INSERT of the same rows", baseline: baseline))
            }
        case "ingest":
            // Dropped after the service stops (declared first, its defer runs last): see
            // IngestSuite.Options.pgbenchDatabase.
            let pgbenchDatabase = try TestDatabase.create(serverConninfo: try needServer(), prefix: "ledger_bench")
            defer { try? pgbenchDatabase.drop() }
            let spawned = try SpawnedService(options: try ReliabilityOptions(quick: false), environment: ["LEDGER_TOKENS": "admin:bench-ingest-admin-0123456789abcdef0123456789abcdef"])
            defer { spawned.stop() }
            let summaries = try await IngestSuite.run(
                .init(baseURL: spawned.baseURL, databaseConninfo: spawned.database.adminConninfo, serverConninfo: try needServer(),
                      adminToken: "bench-ingest-admin-0123456789abcdef0123456789abcdef", notifications: try args.int("notifications", default: 2_000),
                      connections: try args.int("connections", default: 32), runs: try args.int("runs", default: 3),
                      priors: (args.options["priors"] ?? "1,10,100").split(separator: ",").compactMap { Int($0) },
                      pgbenchDatabase: pgbenchDatabase),
                authority: spawned.authority, log: progress)
            print("bench ingest: signed V2 notifications (3 JWS each) into a spawned `ledger serve` vs pgbench single-row commits of the same bytes (service pid \(spawned.pid.map(String.init) ?? "?"))")
            let rss = spawned.pid.flatMap(Self.peakResidentMegabytes)
            print("  ledger serve peak RSS: \(rss.map { String(format: "%.0f MB", $0) } ?? "unknown")")
            for var summary in summaries {
                if let rss { summary.details[Self.peakRSSDetail] = rss }
                print(summary.lines.joined(separator: "\n"))
                try summary.record()
            }
        case "webhooks":
            var delivered: [Double] = [], derived: [Double] = [], p99: [Double] = [], p50: [Double] = [], ingest: [Double] = [], rss: [Double] = []
            for run in 1...runs {
                let receiver = WebhookBenchmark.receiver()
                try receiver.start()
                let spawned = try SpawnedService(options: try ReliabilityOptions(quick: false),
                                                 environment: WebhookBenchmark.environment(receiver))
                do {
                    let result = try await WebhookBenchmark.run(
                        baseURL: spawned.baseURL, database: spawned.database, receiver: receiver, authority: spawned.authority,
                        notifications: try args.int("notifications", default: 2_000), connections: try args.int("connections", default: 8),
                        log: progress)
                    let peak = spawned.pid.flatMap(Self.peakResidentMegabytes)
                    print("run \(run): " + result.text + "; ledger serve peak RSS \(peak.map { String(format: "%.0f MB", $0) } ?? "unknown")")
                    if let peak { rss.append(peak) }
                    delivered.append(result.deliveredPerSecond)
                    derived.append(result.derivedPerSecond)
                    ingest.append(result.ingestPerSecond)
                    p50.append(result.lag.p50)
                    p99.append(result.lag.p99)
                } catch {
                    spawned.stop()
                    await receiver.stop()
                    throw error
                }
                spawned.stop()
                await receiver.stop()
            }
            try report(BenchSummary(
                name: "webhooks", command: "ledger-dev bench webhooks" + (raw.count > 1 ? " " + raw.dropFirst().joined(separator: " ") : ""),
                unit: "events/s", ledgerLabel: "webhook events delivered (first post → last received)", ledger: delivered,
                baselineLabel: "webhook events derived by the same run's ingest", baseline: derived,
                target: ("≥ 1.0", { $0 >= 1.0 }),
                details: ["ingest notifications/s": BenchSummary.Figure(ingest).median, "lag p50 ms": BenchSummary.Figure(p50).median,
                          "lag p99 ms": BenchSummary.Figure(p99).median].merging(rss.isEmpty ? [:] : [Self.peakRSSDetail: rss.max()!]) { a, _ in a }))
        case "ties":
            let token = "bench-ties-app-0123456789abcdef0123456789abcdef"
            var before: [Double] = [], after: [Double] = [], rate: [Double] = []
            for run in 1...runs {
                let spawned = try SpawnedService(options: try ReliabilityOptions(quick: false), environment: [
                    "LEDGER_TOKENS": "app:" + token, "LEDGER_TIES_PER_SUBSCRIPTION_PER_DAY": "1000000",
                    "LEDGER_APP_APPENDS_PER_MINUTE": "1000000", "LEDGER_APP_APPEND_BURST": "1000000",
                ])
                defer { spawned.stop() }
                let result = try await TieBenchmark.run(
                    baseURL: spawned.baseURL, authority: spawned.authority, appToken: token,
                    pairs: try args.int("pairs", default: 5_000), renewals: try args.int("renewals", default: 200), log: progress)
                print("run \(run): " + result.text)
                before.append(result.before.p99)
                after.append(result.after.p99)
                rate.append(result.tiesPerSecond)
            }
            try report(BenchSummary(
                name: "ties", command: "ledger-dev bench ties" + (raw.count > 1 ? " " + raw.dropFirst().joined(separator: " ") : ""),
                unit: "ms", ledgerLabel: "V2 renewal p99 after 5,000 tie/untie pairs on its subscription", ledger: after,
                baselineLabel: "the same subscription's renewal p99 before them", baseline: before,
                higherIsBetter: false, ratioIsLedgerOverBaseline: true, target: ("≤ 1.2", { $0 <= 1.2 }),
                details: ["ties per second": BenchSummary.Figure(rate).median]))
        case "read":
            let options = try ReliabilityOptions(quick: false)
            let spawned = try SpawnedService(options: options, environment: ["LEDGER_TOKENS": "app:bench-read-token-0123456789abcdef0123456789abcdef"], start: false)
            defer { spawned.stop() }
            let subscriptions = try args.int("subscriptions", default: 100_000)
            let dataset = try await ReadBenchmark.seed(conninfo: spawned.database.adminConninfo, subscriptions: subscriptions, log: progress)
            print(String(format: "read: seeded %d subscriptions (%d events; COPY, derived facts, rebuilt projections) in %.1f s",
                         dataset.ids.count, dataset.events, dataset.seconds))
            try spawned.start()
            let comparison = try await ReadBenchmark.compare(
                baseURL: spawned.baseURL, dataset: dataset, token: "bench-read-token-0123456789abcdef0123456789abcdef",
                connections: try args.int("connections", default: 32), duration: .seconds(try args.int("seconds", default: 3)),
                runs: try args.int("runs", default: 3), command: "ledger-dev bench read" + (raw.count > 1 ? " " + raw.dropFirst().joined(separator: " ") : ""),
                log: progress)
            print(comparison.text)
            for summary in comparison.summaries {
                summary.lines.forEach { print($0) }
                try summary.record()
            }
        case "rebuild":
            let events = try args.int("events", default: 1_000_000)
            let bar = ProgressBar(total: events, label: "rebuild")
            let report = try await RebuildBenchmark.run(conninfo: try needServer(), events: events,
                                                        keepDatabase: args.has("keep-database"), runs: runs) { phase, done, total in
                if phase != "seed" { bar.update(done) }
            }
            bar.finish(events)
            print(report)
            try Self.report(report.summary)
        case "refund-inquiry":
            let result = try await RefundInquiryBenchmark.run(serverConninfo: try needServer(),
                                                              inquiries: try args.int("inquiries", default: 2_000),
                                                              connections: try args.int("connections", default: 16),
                                                              runs: runs, log: progress)
            print(result)
            try report(result.summary)
        case "refunds":
            let result = try await RefundListBenchmark.run(serverConninfo: try needServer(), cases: try args.int("cases", default: 100_000),
                                                           log: progress)
            print(result)
            try report(result.summary)
        case "reports":
            var options = ReportBenchmark.Options()
            options.subscribers = try args.int("subscribers", default: options.subscribers)
            options.days = try args.int("days", default: options.days)
            options.requests = try args.int("requests", default: options.requests)
            options.connections = try args.int("connections", default: options.connections)
            options.runs = runs
            guard options.subscribers >= runs, options.days >= 1, options.requests >= 1, options.connections >= 1 else {
                throw CommandFailure(message: "--subscribers must be at least --runs, --days, --requests and --connections at least 1", exitCode: 2)
            }
            let command = "ledger-dev bench reports" + (raw.count > 1 ? " " + raw.dropFirst().joined(separator: " ") : "")
            let result = try await ReportBenchmark.run(serverConninfo: try needServer(), options: options, command: command, log: progress)
            print(result)
            for summary in result.summaries { try report(summary) }
        case "verify":
            let result = try VerifierBenchmark.run(seconds: Double(try args.int("seconds", default: 3)), runs: runs)
            print(result)
            guard let summary = result.summary else {
                throw CommandFailure(message: "openssl speed did not run (\(result.opensslNote)): the verify benchmark has no baseline", exitCode: 1)
            }
            try report(summary)
        case "fold":
            let (result, summary) = FoldBenchmark.summary(events: try args.int("events", default: 300_000), runs: runs)
            print(result)
            try report(summary)
        default:
            throw CommandFailure(message: "unknown benchmark '\(name)'\n\n\(help)", exitCode: 2)
        }
    }

    /// Prints a summary's lines (its one `ratio:` line last) and records it in .build/bench.json
    /// (`LEDGER_BENCH_JSON` to write elsewhere), which `scripts/bench-table.py` turns into README's table.
    static func report(_ summary: BenchSummary) throws {
        for line in summary.lines { print(line) }
        try summary.record()
    }

    static let peakRSSDetail = "ledger serve peak RSS MB"

    /// A process's peak resident set (`VmHWM` of /proc/<pid>/status), in MB; nil off Linux.
    static func peakResidentMegabytes(_ pid: Int32) -> Double? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix("VmHWM:") {
            let kB = line.split(separator: " ").compactMap { Double($0) }.first
            return kB.map { $0 / 1024 }
        }
        return nil
    }

    static let progress: @Sendable (String) -> Void = { line in
        FileHandle.standardError.write(Data("  \(line)\n".utf8))
    }
}
