import Foundation
import LedgerCore
import LedgerStore
import Postgres

/// `ledger-dev bench append`: how fast `EventStore.append` ingests realistic events with C concurrent
/// writers, next to what PostgreSQL itself does for single-row INSERT transactions of the same
/// shape (pgbench, same server, same concurrency, same number of rows, same run). The ratio says
/// what group commit buys over one commit per event.
public enum AppendBenchmark {
    public static let rawBytes = 3072
    public static let payloadBytes = 400

    public struct Report: Sendable, CustomStringConvertible {
        public var events: Int
        public var concurrency: Int
        public var storeSeconds: Double
        public var eventsPerSecond: Double
        public var batches: Int
        public var pgbenchTransactions: Int
        public var pgbenchSeconds: Double?
        /// nil when pgbench could not run; `pgbenchNote` says why.
        public var pgbenchTPS: Double?
        public var pgbenchNote: String?

        /// EventStore events/s divided by pgbench single-row transactions/s.
        public var ratio: Double? { pgbenchTPS.map { $0 > 0 ? eventsPerSecond / $0 : 0 } }

        public var description: String {
            func number(_ value: Double, _ decimals: Int = 1) -> String { String(format: "%.\(decimals)f", value) }
            func pad(_ text: String, _ width: Int) -> String { text.count >= width ? text : text + String(repeating: " ", count: width - text.count) }
            func left(_ text: String, _ width: Int) -> String { text.count >= width ? text : String(repeating: " ", count: width - text.count) + text }
            var lines = [
                "append benchmark: \(events) events (\(AppendBenchmark.rawBytes) B incompressible raw, ~\(AppendBenchmark.payloadBytes) B jsonb), \(concurrency) concurrent writers",
                pad("", 26) + left("rows/s", 10) + left("seconds", 10) + "   notes",
                pad("EventStore.append", 26) + left(number(eventsPerSecond), 10) + left(number(storeSeconds, 2), 10)
                    + "   \(batches) transactions, \(number(Double(events) / Double(max(batches, 1)))) events each",
            ]
            if let tps = pgbenchTPS, let seconds = pgbenchSeconds {
                lines.append(pad("pgbench single-row INSERT", 26) + left(number(tps), 10) + left(number(seconds, 2), 10)
                    + "   \(pgbenchTransactions) transactions, 1 row each")
                lines.append(pad("ratio store / pgbench", 26) + left(number(ratio ?? 0, 2), 10))
            } else {
                lines.append(pad("pgbench single-row INSERT", 26) + left("n/a", 10) + "   " + (pgbenchNote ?? "not run"))
            }
            return lines.joined(separator: "\n")
        }
    }

    public enum BenchmarkError: Error, CustomStringConvertible {
        case invalidArguments(String)
        public var description: String {
            switch self { case .invalidArguments(let why): return "invalid benchmark arguments: \(why)" }
        }
    }

    /// Creates a scratch database next to `conninfo`'s (which must be allowed to CREATE DATABASE),
    /// runs both halves there, and drops it.
    public static func run(conninfo: String, events: Int, concurrency: Int) async throws -> Report {
        guard events > 0, concurrency > 0 else { throw BenchmarkError.invalidArguments("events and concurrency must be positive") }
        let database = try TestDatabase.create(serverConninfo: conninfo, prefix: "ledger_bench")
        defer { try? database.drop() }

        // One random pool; each event takes a different window of it, so every raw value is
        // incompressible and distinct without generating megabytes of randomness.
        var generator = SystemRandomNumberGenerator()
        let entropy = Data((0..<(64 * 1024)).map { _ in UInt8.random(in: 0...255, using: &generator) })
        let filler = String(repeating: "x", count: 240)
        func event(_ index: Int) -> NewEvent {
            let offset = (index &* 977) % (entropy.count - rawBytes)
            let payload = #"{"notificationType":"DID_RENEW","subtype":"BILLING_RECOVERY","notificationUUID":"\#(index)","data":{"bundleId":"com.example.app","environment":"Sandbox","note":"\#(filler)"}}"#
            return NewEvent(
                streamId: "20000\(index % 997)", dedupeKey: "bench-\(index)", source: .apple, type: "DID_RENEW",
                environment: "Sandbox", signedAt: 1_700_000_000_000 + Int64(index), expiresAt: 1_702_592_000_000,
                payload: Data(payload.utf8), raw: entropy.subdata(in: offset..<(offset + rawBytes)))
        }

        let ledger = Store(.init(databaseURL: database.adminConninfo, poolSize: 4, acquireTimeout: .seconds(30), liveProjections: false))
        defer { ledger.close() }
        let store = ledger.events
        let perWriter = (events + concurrency - 1) / concurrency
        let start = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<concurrency {
                group.addTask {
                    let range = (writer * perWriter)..<min(events, (writer + 1) * perWriter)
                    for index in range { _ = try await store.append(event(index)) }
                }
            }
            try await group.waitForAll()
        }
        let elapsed = seconds(ContinuousClock.now - start)
        let metrics = store.metrics

        var report = Report(
            events: events, concurrency: concurrency, storeSeconds: elapsed, eventsPerSecond: Double(events) / elapsed,
            batches: metrics.batches, pgbenchTransactions: perWriter * concurrency)
        do {
            let pgbench = try runPgbench(database: database, sample: event(0), transactionsPerClient: perWriter, clients: concurrency)
            report.pgbenchTPS = pgbench.tps
            report.pgbenchSeconds = Double(perWriter * concurrency) / max(pgbench.tps, 0.001)
        } catch {
            report.pgbenchNote = "\(error)"
        }
        return report
    }

    static func seconds(_ duration: Duration) -> Double {
        let (s, attos) = duration.components
        return Double(s) + Double(attos) / 1e18
    }

    struct PgbenchError: Error, CustomStringConvertible {
        let description: String
    }

    static func pgbenchPath() -> String? {
        let environment = ProcessInfo.processInfo.environment
        var candidates: [String] = []
        for key in ["LEDGER_PG_BIN", "PG_BIN"] { if let dir = environment[key] { candidates.append(dir + "/pgbench") } }
        let versions = ((try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? [])
            .sorted { (Int($0) ?? 0) > (Int($1) ?? 0) }
        candidates += versions.map { "/usr/lib/postgresql/\($0)/bin/pgbench" }
        candidates += (environment["PATH"] ?? "").split(separator: ":").map { "\($0)/pgbench" }
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// Single-row INSERTs, one per transaction, into a scratch table shaped like `events` (same
    /// columns, unique key and primary key; a plain sequence instead of the head counter).
    static func runPgbench(database: TestDatabase, sample: NewEvent, transactionsPerClient: Int, clients: Int) throws -> (tps: Double, output: String) {
        guard let pgbench = pgbenchPath() else {
            throw PgbenchError(description: "pgbench not found (install postgresql or set LEDGER_PG_BIN)")
        }
        let admin = try database.connect()
        try admin.query("""
            CREATE TABLE bench_single (
                position bigserial PRIMARY KEY, stream_id text NOT NULL, dedupe_key text NOT NULL,
                source text NOT NULL, type text NOT NULL, environment text, signed_at timestamptz,
                expires_at timestamptz, payload jsonb NOT NULL, raw bytea NOT NULL,
                recorded_at timestamptz NOT NULL DEFAULT now(), UNIQUE (stream_id, dedupe_key))
            """, name: "create bench_single")
        let payload = String(decoding: sample.payload, as: UTF8.self).replacingOccurrences(of: "'", with: "''")
        let hex = sample.raw.map { byte in
            let digits = Array("0123456789abcdef")
            return String([digits[Int(byte >> 4)], digits[Int(byte & 0xf)]])
        }.joined()
        let script = """
            \\set n random(1, 2000000000)
            INSERT INTO bench_single (stream_id, dedupe_key, source, type, environment, signed_at, expires_at, payload, raw) VALUES ('20000' || :client_id, 'bench-' || :client_id || '-' || :n || '-' || clock_timestamp(), 'apple', 'DID_RENEW', 'Sandbox', now(), now() + interval '30 days', '\(payload)'::jsonb, '\\x\(hex)'::bytea);

            """
        let scriptURL = FileManager.default.temporaryDirectory.appendingPathComponent("ledger-bench-\(UUID().uuidString).sql")
        try Data(script.utf8).write(to: scriptURL)
        defer { try? FileManager.default.removeItem(at: scriptURL) }

        let process = Process()
        process.executableURL = URL(fileURLWithPath: pgbench)
        process.arguments = ["-n", "-f", scriptURL.path, "-c", "\(clients)", "-j", "\(min(clients, 4))",
                             "-t", "\(transactionsPerClient)", database.adminConninfo]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let text = String(decoding: data, as: UTF8.self)
        guard process.terminationStatus == 0 else {
            throw PgbenchError(description: "pgbench exited with \(process.terminationStatus): \(text.suffix(400))")
        }
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("tps = ") }),
              let tps = Double(line.dropFirst("tps = ".count).prefix { $0 != " " }) else {
            throw PgbenchError(description: "no tps line in pgbench output: \(text.suffix(400))")
        }
        return (tps, text)
    }
}
