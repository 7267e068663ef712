import Foundation
import LedgerCore
import LedgerStore
import Postgres
import Synchronization

/// `ledger-dev bench ingest`: the ledger's ingest rate against PostgreSQL's own single-row commits
/// of the same bytes, for renewals landing in streams of 1, 10 and 100 prior events.
///
/// Each run, per workload: the prior events are seeded straight into the service's database (not
/// measured; their payloads are what ingestion stores, their raw a short placeholder) and the
/// service's projections are left to catch up with them (history that arrived long ago), then
/// `notifications` fresh V2 notifications — outer, transaction and renewal JWS each signed for
/// this notification, a new transaction per renewal — are posted over `connections` keep-alive
/// connections; every 200 means all three JWS were verified and the event, its facts and the
/// projections were committed. Then pgbench runs `scripts/pgbench-ingest.sql` at the same
/// concurrency: one INSERT per transaction of a row carrying one stored notification's raw body,
/// payload and fact rows (as text), read back from the ledger's tables in this run. Runs alternate
/// ledger and pgbench, so each ratio compares moments of the same load.
public enum IngestSuite {
    public struct Options: Sendable {
        public var baseURL: String
        /// The service's database as a superuser (seeding, reading back what was stored).
        public var databaseConninfo: String
        /// The cluster's superuser URL: pgbench runs in a scratch database there.
        public var serverConninfo: String
        /// An admin token of the service, for `/metrics` (the chain cache and fold counters).
        public var adminToken: String?
        /// Posted per run and workload.
        public var notifications: Int
        public var connections: Int
        public var runs: Int
        public var priors: [Int]
        /// Posted once before the first run, not measured.
        public var warmup: Int
        public var bundleId: String
        public var environment: String
        /// `scripts/pgbench-ingest.sql`.
        public var pgbenchScript: String
        /// The scratch database pgbench runs in, dropped by the caller once the service has
        /// stopped; nil: created here and dropped at the end. PostgreSQL 15's DROP DATABASE waits
        /// for every backend of the cluster to close its files (a ProcSignalBarrier), and the
        /// service's idle LISTEN connection was seen holding that wait for good while it ran.
        public var pgbenchDatabase: TestDatabase?

        public init(baseURL: String, databaseConninfo: String, serverConninfo: String, adminToken: String? = nil,
                    notifications: Int = 2_000, connections: Int = 32, runs: Int = 3, priors: [Int] = [1, 10, 100],
                    warmup: Int = 400, bundleId: String = "com.example", environment: String = "Sandbox",
                    pgbenchScript: String = IngestSuite.locateScript(), pgbenchDatabase: TestDatabase? = nil) {
            self.baseURL = baseURL
            self.databaseConninfo = databaseConninfo
            self.serverConninfo = serverConninfo
            self.adminToken = adminToken
            self.notifications = notifications
            self.connections = connections
            self.runs = runs
            self.priors = priors
            self.warmup = warmup
            self.bundleId = bundleId
            self.environment = environment
            self.pgbenchScript = pgbenchScript
            self.pgbenchDatabase = pgbenchDatabase
        }
    }

    /// What the ledger stored per measured notification (averages over the run's notifications).
    public struct StoredBytes: Sendable {
        public var raw: Double
        public var payload: Double
        public var facts: Double
        public var total: Double { raw + payload + facts }
    }

    /// One ledger run of one workload, with its pgbench run.
    public struct Run: Sendable {
        public var priorEvents: Int
        public var perSecond: Double
        public var p50: Double
        public var p99: Double
        public var pgbench: Double
        public var bytes: StoredBytes
        /// Verifications whose certificate chain came from the cache, of all verifications, this run.
        public var chainCacheHitRate: Double?
        /// Subscriptions the live projection refolded from a snapshot, of all it refolded, this run.
        public var foldSnapshotHitRate: Double?
        /// Subscriptions the reports' catch-up folded onto a live snapshot, of all it folded (the
        /// counters are read when the posting ends, while the catch-up may still run).
        public var reportSnapshotRate: Double?
        /// Subscriptions whose new Apple statement the status checks' catch-up checked on a live
        /// snapshot, of all it checked (read as the reports' rate is).
        public var statusSnapshotRate: Double?
        public var eventsPerBatch: Double?
        /// Facts the service's live fold snapshots hold when the posting ends (what their memory
        /// grows with).
        public var snapshotFacts: Double?
    }

    /// Posts prior events per stream: renewals `0..<prior` seeded, the measured ones after them.
    /// Streams get `perStream` measured notifications each (prior count grows by that much).
    static func perStream(prior: Int) -> Int { prior >= 50 ? 10 : 1 }

    public static func locateScript() -> String {
        let name = "scripts/pgbench-ingest.sql"
        var candidates = [FileManager.default.currentDirectoryPath + "/" + name]
        // .build/<config>/ledger-dev → the checkout.
        let executable = URL(fileURLWithPath: CommandLine.arguments.first ?? "").resolvingSymlinksInPath()
        var dir = executable.deletingLastPathComponent()
        for _ in 0..<4 {
            dir = dir.deletingLastPathComponent()
            candidates.append(dir.appendingPathComponent(name).path)
        }
        return candidates.first { FileManager.default.fileExists(atPath: $0) } ?? candidates[0]
    }

    public static func run(_ o: Options, authority: AppleTestAuthority, log: @Sendable (String) -> Void = { _ in }) async throws -> [BenchSummary] {
        guard o.notifications > 0, o.connections > 0, o.runs > 0, !o.priors.isEmpty, o.priors.allSatisfy({ $0 >= 1 }) else {
            throw BenchmarkError.invalid("notifications, connections and runs must be positive; priors at least 1")
        }
        guard FileManager.default.fileExists(atPath: o.pgbenchScript) else {
            throw BenchmarkError.invalid("the pgbench script \(o.pgbenchScript) is missing; run from the checkout (scripts/pgbench-ingest.sql)")
        }
        let load = BenchSummary.currentLoadAverage()
        let target = try LoopbackTarget(url: o.baseURL)
        let tag = UInt64.random(in: 0..<100_000)
        let store = Store(.init(databaseURL: o.databaseConninfo, poolSize: 2, acquireTimeout: .seconds(60)))
        defer { store.close() }
        let pgbenchDatabase = try o.pgbenchDatabase ?? TestDatabase.create(serverConninfo: o.serverConninfo, prefix: "ledger_bench")
        defer { if o.pgbenchDatabase == nil { try? pgbenchDatabase.drop() } }
        try PgbenchIngest.createTable(in: pgbenchDatabase, compressedLikeEventsOf: o.databaseConninfo)
        let fix = "start the service trusting the benchmark authority's root (LEDGER_APPLE_ROOT_CERTS) and accepting \(o.bundleId)/\(o.environment)"

        if o.warmup > 0 {
            log("warming up with \(o.warmup) notifications…")
            let mint = Mint(authority: authority, bundleId: o.bundleId, environment: o.environment, tag: tag, slot: 99)
            let warm = try mint.premint((0..<o.warmup).map { (stream: $0, renewal: 0) }).map(\.request)
            let w = try LoadGenerator(target: target, options: LoadOptions(connections: o.connections, limit: .count(warm.count))) { warm[$0] }
            try requireAllOK(await w.run(), fix: fix)
        }

        let admin = try TestDatabase.connect(o.databaseConninfo)
        var runs: [[Run]] = Array(repeating: [], count: o.priors.count)
        for run in 0..<o.runs {
            for (w, prior) in o.priors.enumerated() {
                let perStream = perStream(prior: prior)
                let streams = max(1, o.notifications / perStream)
                let mint = Mint(authority: authority, bundleId: o.bundleId, environment: o.environment, tag: tag, slot: run * 10 + w)
                log("run \(run + 1)/\(o.runs), \(prior) prior events: seeding \(streams * prior) events in \(streams) streams…")
                try await seed(mint: mint, streams: streams, prior: prior, into: store)
                // The priors stand for history that arrived long ago: the service's catch-up of them
                // (reports, Apple status, …) is finished before the measured posting, not raced by it.
                guard let waited = try await ProjectionCatchUp.wait(admin, timeout: .seconds(600)) else {
                    throw BenchmarkError.invalid("the service's projections are still behind the seeded events after 600 s")
                }
                log(String(format: "  projections caught up with the seeded events in %.1f s", Double(waited.components.seconds) + Double(waited.components.attoseconds) / 1e18))
                log("  minting \(streams * perStream) notifications…")
                let plan = (0..<(streams * perStream)).map { i in (stream: i % streams, renewal: prior + i / streams) }
                let minted = try mint.premint(plan)
                let requests = minted.map(\.request)
                let before = try o.adminToken.map { try ServiceCounters.read(target: target, token: $0) }
                log("  posting \(requests.count) over \(o.connections) connections…")
                let generator = try LoadGenerator(target: target, options: LoadOptions(connections: o.connections, limit: .count(requests.count))) { requests[$0] }
                let report = await generator.run()
                try requireAllOK(report, fix: fix)
                let after = try o.adminToken.map { try ServiceCounters.read(target: target, token: $0) }
                let (bytes, sample) = try PgbenchIngest.storedBytes(dedupeKeys: minted.map(\.dedupeKey), conninfo: o.databaseConninfo)
                log("  pgbench at \(o.connections) clients with the same bytes…")
                let tps = try PgbenchIngest.run(script: o.pgbenchScript, database: pgbenchDatabase, sample: sample,
                                                clients: o.connections, transactionsPerClient: max(50, requests.count / o.connections))
                var result = Run(priorEvents: prior, perSecond: report.requestsPerSecond, p50: report.latency.p50, p99: report.latency.p99,
                                 pgbench: tps, bytes: bytes)
                if let before, let after {
                    result.chainCacheHitRate = after.chainHitRate(since: before)
                    result.foldSnapshotHitRate = after.foldHitRate(since: before)
                    result.reportSnapshotRate = after.reportSnapshotRate(since: before)
                    result.statusSnapshotRate = after.statusSnapshotRate(since: before)
                    let batches = after.batches - before.batches
                    if batches > 0 { result.eventsPerBatch = (after.appended - before.appended) / batches }
                    result.snapshotFacts = after.snapshotFacts
                }
                log(String(format: "  %.0f notifications/s (p99 %.1f ms) vs pgbench %.0f tps", result.perSecond, result.p99, tps))
                runs[w].append(result)
            }
        }
        return summaries(runs, priors: o.priors, connections: o.connections, notifications: o.notifications, load: load)
    }

    static func summaries(_ runs: [[Run]], priors: [Int], connections: Int, notifications: Int, load: Double?) -> [BenchSummary] {
        func median(_ xs: [Double]) -> Double { BenchSummary.Figure(xs).median }
        var out: [BenchSummary] = []
        for (w, prior) in priors.enumerated() {
            let r = runs[w]
            var details: [String: Double] = [
                "p50 ms": median(r.map(\.p50)), "p99 ms": median(r.map(\.p99)),
                "stored bytes per notification: raw": median(r.map(\.bytes.raw)),
                "stored bytes per notification: payload": median(r.map(\.bytes.payload)),
                "stored bytes per notification: facts": median(r.map(\.bytes.facts)),
            ]
            let chain = r.compactMap(\.chainCacheHitRate)
            if !chain.isEmpty { details["verifier chain-cache hit rate"] = median(chain) }
            let fold = r.compactMap(\.foldSnapshotHitRate)
            if !fold.isEmpty { details["live fold snapshot hit rate"] = median(fold) }
            let reports = r.compactMap(\.reportSnapshotRate)
            if !reports.isEmpty { details["reports fold snapshot rate"] = median(reports) }
            let statuses = r.compactMap(\.statusSnapshotRate)
            if !statuses.isEmpty { details["apple status checks snapshot rate"] = median(statuses) }
            let batch = r.compactMap(\.eventsPerBatch)
            if !batch.isEmpty { details["events per append batch"] = median(batch) }
            let held = r.compactMap(\.snapshotFacts)
            if !held.isEmpty { details["fold snapshot facts held at the posting's end"] = median(held) }
            if w > 0, priors[0] == 1 {
                details["rate ÷ 1-prior rate (target ≥ 0.85)"] = median(zip(r, runs[0]).map { $0.perSecond / max($1.perSecond, 1e-9) })
            }
            out.append(BenchSummary(
                name: prior == 1 ? "ingest" : "ingest/\(prior)-prior", command: "ledger-dev bench ingest",
                unit: "notifications/s",
                ledgerLabel: "ledger ingest at \(connections) connections (HTTP, 3 JWS verified, committed before the 200), streams of \(prior) prior event\(prior == 1 ? "" : "s")",
                ledger: r.map(\.perSecond),
                baselineLabel: "pgbench single-row INSERT commits of the same bytes (scripts/pgbench-ingest.sql), \(connections) clients",
                baseline: r.map(\.pgbench),
                target: prior == 1 ? ("≥ 1.0", { $0 >= 1.0 }) : nil, details: details, loadAverage: load))
        }
        if let longest = priors.indices.last, longest > 0, priors[0] == 1 {
            out.append(BenchSummary(
                name: "ingest/\(priors[longest])-prior-vs-1-prior", command: "ledger-dev bench ingest", unit: "notifications/s",
                ledgerLabel: "ledger ingest, streams of \(priors[longest]) prior events", ledger: runs[longest].map(\.perSecond),
                baselineLabel: "ledger ingest, streams of 1 prior event (same run)", baseline: runs[0].map(\.perSecond),
                target: ("≥ 0.85", { $0 >= 0.85 }), loadAverage: load))
        }
        return out
    }

    /// Prior events straight into the store: what ingestion would store for these renewals (the
    /// merged payload), with a placeholder raw body (they are set-up, not measured).
    static func seed(mint: Mint, streams: Int, prior: Int, into store: Store) async throws {
        var batch: [NewEvent] = []
        batch.reserveCapacity(512)
        for renewal in 0..<prior {
            for stream in 0..<streams {
                batch.append(try mint.seededEvent(stream: stream, renewal: renewal))
                if batch.count == 512 {
                    _ = try await store.events.append(batch)
                    batch.removeAll(keepingCapacity: true)
                }
            }
        }
        if !batch.isEmpty { _ = try await store.events.append(batch) }
    }

    /// Renewal `renewal` of stream `stream`: a new transaction (its own id and period) each time.
    struct Mint: Sendable {
        let authority: AppleTestAuthority
        let bundleId: String
        let environment: String
        let tag: UInt64
        let slot: Int

        func streamId(_ stream: Int) -> String {
            String(6_000_000_000_000_000 + tag * 10_000_000_000 + UInt64(slot) * 10_000_000 + UInt64(stream))
        }

        func sample(stream: Int, renewal: Int) -> AppleTestAuthority.Sample {
            let id = streamId(stream)
            let signed: EpochMillis = 1_767_225_600_000 + EpochMillis(renewal) * 30 * 86_400_000 + EpochMillis(stream)
            var s = AppleTestAuthority.sample(
                type: renewal == 0 ? "SUBSCRIBED" : "DID_RENEW", subtype: renewal == 0 ? "INITIAL_BUY" : nil,
                uuid: Self.uuid(tag: tag, slot: slot, stream: stream, renewal: renewal),
                bundleId: bundleId, environment: environment, originalTransactionId: id,
                transactionId: renewal == 0 ? id : id + String(format: "%04d", renewal),
                signedDate: signed, expiresDate: signed + 30 * 86_400_000)
            s.transaction.webOrderLineItemId = id + String(format: "%04d", renewal)
            return s
        }

        /// UUID-shaped like Apple's notificationUUID, unique per (benchmark, run and workload, stream, renewal).
        static func uuid(tag: UInt64, slot: Int, stream: Int, renewal: Int) -> String {
            func hex(_ v: UInt64, _ width: Int) -> String {
                let h = String(v, radix: 16)
                return String(repeating: "0", count: max(0, width - h.count)) + h
            }
            return "\(hex(tag, 8))-\(hex(UInt64(slot), 4))-4000-8000-\(hex(UInt64(stream) << 16 | UInt64(renewal), 12))"
        }

        func minted(stream: Int, renewal: Int) throws -> MintedNotification {
            let s = sample(stream: stream, renewal: renewal)
            return MintedNotification(dedupeKey: s.notification.notificationUUID!, streamId: streamId(stream), body: try authority.signSample(s))
        }

        func seededEvent(stream: Int, renewal: Int) throws -> NewEvent {
            let s = sample(stream: stream, renewal: renewal)
            var outer = try AppleTestAuthority.json(s.notification) { _ in }
            // The merged payload AppleNotificationIngestor stores: the notification, then the
            // decoded nested documents beside it.
            guard outer.last == UInt8(ascii: "}") else { throw BenchmarkError.invalid("unexpected notification JSON") }
            outer.removeLast()
            outer.append(contentsOf: Data(#","transactionInfo":"#.utf8))
            outer.append(try AppleTestAuthority.json(s.transaction) { _ in })
            outer.append(contentsOf: Data(#","renewalInfo":"#.utf8))
            outer.append(try AppleTestAuthority.json(s.renewal) { _ in })
            outer.append(UInt8(ascii: "}"))
            return NewEvent(
                streamId: streamId(stream), dedupeKey: s.notification.notificationUUID!, source: .apple,
                type: renewal == 0 ? "SUBSCRIBED/INITIAL_BUY" : "DID_RENEW", environment: environment,
                signedAt: s.notification.signedDate?.millis, expiresAt: s.transaction.expiresDate?.millis,
                payload: outer, raw: Data(#"{"signedPayload":"seeded by ledger-dev bench ingest"}"#.utf8))
        }

        func premint(_ plan: [(stream: Int, renewal: Int)], threads: Int = ProcessInfo.processInfo.activeProcessorCount) throws -> [MintedNotification] {
            let slots = Mutex<[Int: MintedNotification]>([:])
            let failure = Mutex<(any Error)?>(nil)
            let group = DispatchGroup()
            let workers = max(1, min(threads, plan.count))
            for w in 0..<workers {
                group.enter()
                Thread {
                    var local: [Int: MintedNotification] = [:]
                    var i = w
                    while i < plan.count {
                        do { local[i] = try self.minted(stream: plan[i].stream, renewal: plan[i].renewal) } catch {
                            failure.withLock { $0 = error }
                            break
                        }
                        i += workers
                    }
                    slots.withLock { $0.merge(local) { a, _ in a } }
                    group.leave()
                }.start()
            }
            group.wait()
            if let error = failure.withLock({ $0 }) { throw error }
            let all = slots.withLock { $0 }
            return plan.indices.map { all[$0]! }
        }
    }

    /// Counters read from the service's `/metrics`.
    struct ServiceCounters {
        var chainHits = 0.0, chainMisses = 0.0
        var foldHits = 0.0, foldMisses = 0.0, foldFull = 0.0
        var reportSnapshot = 0.0, reportFull = 0.0
        var statusSnapshot = 0.0, statusFull = 0.0
        var batches = 0.0, appended = 0.0
        var snapshotFacts = 0.0

        static func read(target: LoopbackTarget, token: String) throws -> ServiceCounters {
            guard let port = Int(target.description.split(separator: ":").last ?? "") else {
                throw BenchmarkError.invalid("no port in \(target.description)")
            }
            let response = try RawClient.request(port: port, path: "/metrics", headers: ["Authorization": "Bearer \(token)", "Connection": "close"])
            guard response.status == 200 else { throw BenchmarkError.transport("/metrics answered \(response.status)") }
            var c = ServiceCounters()
            for line in String(decoding: response.body, as: UTF8.self).split(separator: "\n") where !line.hasPrefix("#") {
                let parts = line.split(separator: " ")
                guard parts.count == 2, let value = Double(parts[1]) else { continue }
                switch parts[0] {
                case #"ledger_apple_chain_cache_total{result="hit"}"#: c.chainHits = value
                case #"ledger_apple_chain_cache_total{result="miss"}"#: c.chainMisses = value
                case #"ledger_live_fold_total{result="hit"}"#: c.foldHits = value
                case #"ledger_live_fold_total{result="miss"}"#: c.foldMisses = value
                case #"ledger_live_fold_total{result="full"}"#: c.foldFull = value
                case #"ledger_report_fold_total{result="snapshot"}"#: c.reportSnapshot = value
                case #"ledger_report_fold_total{result="full"}"#: c.reportFull = value
                case #"ledger_apple_status_check_total{result="snapshot"}"#: c.statusSnapshot = value
                case #"ledger_apple_status_check_total{result="full"}"#: c.statusFull = value
                case "ledger_append_batches_total": c.batches = value
                case "ledger_events_appended_total": c.appended = value
                case "ledger_live_fold_snapshot_facts": c.snapshotFacts = value
                default: continue
                }
            }
            return c
        }

        func chainHitRate(since b: ServiceCounters) -> Double? {
            let hits = chainHits - b.chainHits, all = hits + chainMisses - b.chainMisses
            return all > 0 ? hits / all : nil
        }

        func reportSnapshotRate(since b: ServiceCounters) -> Double? {
            let hits = reportSnapshot - b.reportSnapshot, all = hits + reportFull - b.reportFull
            return all > 0 ? hits / all : nil
        }

        func statusSnapshotRate(since b: ServiceCounters) -> Double? {
            let hits = statusSnapshot - b.statusSnapshot, all = hits + statusFull - b.statusFull
            return all > 0 ? hits / all : nil
        }

        func foldHitRate(since b: ServiceCounters) -> Double? {
            let hits = foldHits - b.foldHits, all = hits + foldMisses - b.foldMisses + foldFull - b.foldFull
            return all > 0 ? hits / all : nil
        }
    }
}

/// The baseline: pgbench running scripts/pgbench-ingest.sql, whose variables carry one notification
/// as the ledger stored it in this run (raw body, payload, fact rows).
enum PgbenchIngest {
    struct Sample: Sendable {
        /// bytea hex of the raw body, the payload's JSON text, the fact rows' text.
        var rawHex: String
        var payload: String
        var facts: String
    }

    /// The table the script inserts into: the events table's columns plus the facts as text.
    static func createTable(in database: TestDatabase, compressedLikeEventsOf ledgerConninfo: String) throws {
        let admin = try database.connect()
        try admin.query("""
            CREATE TABLE bench_ingest (
                position bigserial PRIMARY KEY, stream_id text NOT NULL, dedupe_key text NOT NULL,
                source text NOT NULL, type text NOT NULL, environment text, signed_at timestamptz,
                expires_at timestamptz, payload jsonb NOT NULL, raw bytea NOT NULL, facts text NOT NULL,
                recorded_at timestamptz NOT NULL DEFAULT now(), UNIQUE (stream_id, dedupe_key))
            """, name: "create bench_ingest")
        // The same TOAST compression as the ledger's events (Migrations/0010 sets lz4 where the
        // server has it): the baseline stores the same bytes the same way, so the comparison is of
        // the work around the insert, not of two compressors.
        let compression = try TestDatabase.connect(ledgerConninfo).query("""
            SELECT attcompression::text AS c FROM pg_attribute WHERE attrelid = 'public.events'::regclass AND attname = 'raw'
            """, name: "events compression").first?.decode(String.self, "c")
        if compression == "l" {
            try admin.query("""
                ALTER TABLE bench_ingest ALTER COLUMN raw SET COMPRESSION lz4, ALTER COLUMN payload SET COMPRESSION lz4,
                    ALTER COLUMN facts SET COMPRESSION lz4
                """, name: "bench_ingest lz4")
        }
    }

    /// Average bytes the ledger stored for these notifications, and one of them as a sample.
    static func storedBytes(dedupeKeys: [String], conninfo: String) throws -> (IngestSuite.StoredBytes, Sample) {
        let connection = try TestDatabase.connect(conninfo)
        let keys = PostgresValue.array(dedupeKeys.map { .text($0) }, of: .text)
        guard let row = try connection.query("""
            WITH m AS (SELECT position, octet_length(raw) AS raw, octet_length(payload::text) AS payload
                       FROM events WHERE dedupe_key = ANY($1))
            SELECT avg(m.raw)::float8 AS raw, avg(m.payload)::float8 AS payload,
                   ((SELECT sum(octet_length(f::text)) FROM public.facts f WHERE f.position IN (SELECT position FROM m))::float8
                    / greatest(count(*), 1))::float8 AS facts,
                   count(*) AS n
            FROM m
            """, [keys], name: "stored bytes").first else { throw BenchmarkError.invalid("no stored notifications found") }
        let stored = try row.decode(Int64.self, "n")
        guard stored == Int64(dedupeKeys.count) else {
            throw BenchmarkError.invalid("\(stored) of \(dedupeKeys.count) posted notifications are stored")
        }
        let bytes = IngestSuite.StoredBytes(raw: try row.decode(Double.self, "raw"), payload: try row.decode(Double.self, "payload"),
                                           facts: try row.decode(Double.self, "facts"))
        guard let s = try connection.query("""
            SELECT encode(e.raw, 'hex') AS raw, e.payload::text AS payload,
                   (SELECT string_agg(f::text, E'\\n' ORDER BY f.ordinal) FROM public.facts f WHERE f.position = e.position) AS facts
            FROM events e WHERE e.dedupe_key = $1
            """, [.text(dedupeKeys[dedupeKeys.count / 2])], name: "sample notification").first else {
            throw BenchmarkError.invalid("the sample notification is not stored")
        }
        return (bytes, Sample(rawHex: try s.decode(String.self, "raw"), payload: try s.decode(String.self, "payload"),
                              facts: try s.decode(String?.self, "facts") ?? ""))
    }

    /// Transactions per second pgbench reports (without connection time).
    static func run(script: String, database: TestDatabase, sample: Sample, clients: Int, transactionsPerClient: Int) throws -> Double {
        guard let pgbench = AppendBenchmark.pgbenchPath() else {
            throw BenchmarkError.invalid("pgbench not found (install postgresql or set LEDGER_PG_BIN)")
        }
        func literal(_ text: String) -> String { "'" + text.replacingOccurrences(of: "'", with: "''") + "'" }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: pgbench)
        process.arguments = ["-n", "-f", script, "-c", "\(clients)", "-j", "\(min(clients, 4))", "-t", "\(transactionsPerClient)",
                             "-D", "raw=" + literal("\\x" + sample.rawHex), "-D", "payload=" + literal(sample.payload),
                             "-D", "facts=" + literal(sample.facts), database.adminConninfo]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let text = String(decoding: data, as: UTF8.self)
        guard process.terminationStatus == 0 else {
            throw BenchmarkError.invalid("pgbench exited with \(process.terminationStatus): \(text.suffix(600))")
        }
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("tps = ") }),
              let tps = Double(line.dropFirst("tps = ".count).prefix { $0 != " " }) else {
            throw BenchmarkError.invalid("no tps line in pgbench output: \(text.suffix(400))")
        }
        return tps
    }
}
