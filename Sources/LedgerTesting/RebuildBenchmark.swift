import Foundation
#if canImport(Glibc)
import Glibc
#endif
import LedgerCore
import LedgerStore
import Postgres

/// `ledger-dev bench rebuild`: seeds a scratch database with N events carrying realistic decoded
/// payloads (the LifecycleGenerator's notifications), derives their facts (`ledger rederive`'s
/// work, timed), rebuilds every projection from the facts, and reports the rebuild's events/s and
/// peak RSS next to a plain `COPY (SELECT …) TO STDOUT` of the same fact rows (the rebuild's own
/// read) timed in the same run.
///
/// The COPY and the rebuild run `runs` times, alternately (each rebuild starts from the tables
/// the previous one left); the medians are compared, with min–max, and the CPU time of this
/// process and of the whole machine (/proc/stat: PostgreSQL's share, and anything else running)
/// is printed for each, since wall times on a shared machine move with its load.
///
/// Targets: ≥ 100k events/s, ≤ 1.5× the COPY time of what it reads, peak RSS < 200 MB.
public enum RebuildBenchmark {
    public struct Result: Sendable, CustomStringConvertible {
        public var events: Int
        public var streams: Int
        public var seedSeconds: Double
        /// Deriving every event's facts from its payload (`ledger rederive`).
        public var deriveSeconds: Double
        /// Fact rows the rebuild reads.
        public var facts: Int
        /// The rebuild's read alone, rows discarded.
        public var copySeconds: Double
        public var rebuild: RebuildReport
        /// Peak RSS of the rebuild phase (the high-water mark is reset after seeding where Linux allows).
        public var rebuildPeakRSSBytes: Int?
        /// CPU time of this process (user + system) during the rebuild: the client's share of
        /// the work, independent of what else runs on the machine.
        public var rebuildCPUSeconds: Double
        /// Every run's COPY and rebuild seconds (the fields above hold the medians' runs).
        public var copyRuns: [Double] = []
        public var rebuildRuns: [Double] = []
        /// CPU of the whole machine (every process, PostgreSQL's included) during the median COPY
        /// and the median rebuild, and the 1-minute load average when the runs began.
        public var copyMachineCPUSeconds: Double?
        public var rebuildMachineCPUSeconds: Double?
        public var loadAverage: Double?

        public var copyEventsPerSecond: Double { Double(events) / max(copySeconds, 1e-9) }
        public var ratio: Double { rebuild.seconds / max(copySeconds, 1e-9) }

        /// The rebuild's time against the COPY of the rows it reads, run by run (× the COPY:
        /// smaller is better; target ≤ 1.5), with the throughput target (≥ 100k events/s) and
        /// peak RSS (< 200 MB) beside it.
        public var summary: BenchSummary {
            var details = ["rebuild events/s": rebuild.eventsPerSecond, "derive events/s": Double(events) / max(deriveSeconds, 1e-9)]
            if let rss = rebuildPeakRSSBytes { details["peak RSS MB"] = Double(rss) / 1_048_576 }
            return BenchSummary(name: "rebuild", command: "ledger-dev bench rebuild --events \(events)", unit: "s",
                                ledgerLabel: "rebuild of every projection (fold + COPY IN + swap)", ledger: rebuildRuns,
                                baselineLabel: "COPY of the same fact rows to the client", baseline: copyRuns,
                                higherIsBetter: false, ratioIsLedgerOverBaseline: true,
                                target: ("≤ 1.5× the COPY", { $0 <= 1.5 }), details: details, loadAverage: loadAverage)
        }

        var runsText: String {
            func span(_ xs: [Double]) -> String {
                String(format: "%.2f–%.2f s", xs.min() ?? 0, xs.max() ?? 0)
            }
            func cpu(_ x: Double?) -> String { x.map { String(format: "%.2f s", $0) } ?? "n/a" }
            return "medians of \(copyRuns.count) runs (COPY \(span(copyRuns)), rebuild \(span(rebuildRuns)), load \(loadAverage.map { String(format: "%.2f", $0) } ?? "n/a")); "
                + "machine CPU: COPY \(cpu(copyMachineCPUSeconds)), rebuild \(cpu(rebuildMachineCPUSeconds))"
        }

        public var description: String {
            let rss = rebuildPeakRSSBytes.map { String(format: "%.1f MB", Double($0) / 1_048_576) } ?? "n/a"
            return String(
                format: """
                    rebuild benchmark: %d events, %d subscriptions (seeded in %.1f s)
                      derive facts (ledger rederive): %.2f s, %.0f events/s, %d fact rows
                      COPY (SELECT <fact columns> FROM facts … ORDER BY subscription, position) TO STDOUT: %.2f s, %.0f events/s
                      rebuild (all projections, fold + COPY IN + swap):             %.2f s, %.0f events/s, %.2f× the COPY
                        (bulk read + fold + COPY IN %.2f s, keys and indexes %.2f s, swap %.3f s)
                      client CPU during the rebuild: %.2f s (%.0f events per CPU-second)
                      %@
                      peak RSS during the rebuild: %@
                      targets: ≥ 100000 events/s, ≤ 1.5× the COPY, RSS < 200 MB
                    """,
                events, streams, seedSeconds, deriveSeconds, Double(events) / max(deriveSeconds, 1e-9), facts,
                copySeconds, copyEventsPerSecond, rebuild.seconds,
                rebuild.eventsPerSecond, ratio, rebuild.bulkSeconds, rebuild.indexSeconds, rebuild.swapSeconds, rebuildCPUSeconds, Double(events) / max(rebuildCPUSeconds, 1e-9), runsText, rss)
        }
    }

    /// - Parameters:
    ///   - conninfo: a superuser connection to the server (any database); a scratch database is
    ///     created next to it and dropped afterwards unless `keepDatabase`.
    ///   - progress: (phase, done, total) for a progress bar.
    public static func run(
        conninfo: String, events: Int = 1_000_000, seed: UInt64 = 1, keepDatabase: Bool = false, runs runCount: Int = 3,
        progress: @escaping @Sendable (String, Int, Int) -> Void = { _, _, _ in }
    ) async throws -> Result {
        let database = try TestDatabase.create(serverConninfo: conninfo, prefix: "ledger_bench")
        let target = database.adminConninfo
        if keepDatabase { FileHandle.standardError.write(Data("keeping the benchmark database: \(target)\n".utf8)) }
        defer { if !keepDatabase { try? database.drop() } }

        let clock = ContinuousClock()
        let seedStart = clock.now
        let seeded = try seedEvents(conninfo: target, count: events, seed: seed, progress: progress)
        let seedSeconds = seconds(seedStart.duration(to: clock.now))
        let analyze = try database.connect()
        try analyze.query("VACUUM ANALYZE events", name: "vacuum")
        let deriveStart = clock.now
        let owner = database.store(as: .admin, poolSize: 1, catalog: catalog, clock: { start + 730 * 86_400_000 }, liveProjections: false)
        defer { owner.close() }
        _ = try await owner.facts.run(batch: 5_000) { done, total in progress("derive", Int(done), Int(total)) }
        let deriveSeconds = seconds(deriveStart.duration(to: clock.now))
        try analyze.query("VACUUM ANALYZE facts", name: "vacuum facts")
        let facts = try analyze.query("SELECT count(*) AS n FROM facts WHERE subscription IS NOT NULL", name: "facts")
            .first?.decode(Int64.self, "n") ?? 0

        // The read alone, same query, same rows: the floor the rebuild is compared with. Each run
        // is a COPY then a rebuild; the medians are compared.
        let loadAverage = Self.loadAverage()
        var runs: [(copy: Double, copyMachine: Double?, report: RebuildReport, cpu: Double, machine: Double?)] = []
        resetPeakRSS()
        for _ in 0..<max(1, runCount) {
            let reader = try database.connect()
            let machineBeforeCopy = machineCPUSeconds()
            let copyStart = clock.now
            var copied = 0
            try reader.copyOut(Rebuilder.bulkQuery(head: Int64(seeded))) { _ in copied += 1 }
            let copySeconds = seconds(copyStart.duration(to: clock.now))
            let copyMachine = machineCPUSeconds().flatMap { after in machineBeforeCopy.map { after - $0 } }
            guard copied == Int(facts) else { throw BenchmarkFailure("COPY returned \(copied) rows for \(facts) facts") }

            let cpuBefore = processCPUSeconds()
            let machineBefore = machineCPUSeconds()
            let report = try await owner.rebuilder().run { done, total in progress("rebuild", done, total) }
            let machine = machineCPUSeconds().flatMap { after in machineBefore.map { after - $0 } }
            runs.append((copySeconds, copyMachine, report, processCPUSeconds() - cpuBefore, machine))
        }
        let copyMedian = runs.sorted { $0.copy < $1.copy }[runs.count / 2]
        let rebuildMedian = runs.sorted { $0.report.seconds < $1.report.seconds }[runs.count / 2]
        var result = Result(
            events: seeded, streams: rebuildMedian.report.streams, seedSeconds: seedSeconds, deriveSeconds: deriveSeconds,
            facts: Int(facts), copySeconds: copyMedian.copy, rebuild: rebuildMedian.report,
            rebuildPeakRSSBytes: runs.compactMap(\.report.peakRSSBytes).max(), rebuildCPUSeconds: rebuildMedian.cpu)
        result.copyRuns = runs.map(\.copy)
        result.rebuildRuns = runs.map(\.report.seconds)
        result.copyMachineCPUSeconds = copyMedian.copyMachine
        result.rebuildMachineCPUSeconds = rebuildMedian.machine
        result.loadAverage = loadAverage
        return result
    }

    /// user + nice + system of every CPU (/proc/stat), in seconds; nil off Linux.
    static func machineCPUSeconds() -> Double? {
        guard let stat = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
              let line = stat.split(separator: "\n").first, line.hasPrefix("cpu ") else { return nil }
        let ticks = line.split(separator: " ").dropFirst().prefix(3).compactMap { Double($0) }
        guard ticks.count == 3 else { return nil }
        return ticks.reduce(0, +) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    static func loadAverage() -> Double? {
        guard let text = try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8) else { return nil }
        return text.split(separator: " ").first.flatMap { Double($0) }
    }

    static let start: EpochMillis = 1_735_689_600_000
    static let catalog = ProductCatalog(entitlementsByProduct: [
        "com.example.monthly": ["basic"], "com.example.yearly": ["basic"],
        "com.example.premium.monthly": ["basic", "premium"], "com.example.premium.yearly": ["basic", "premium"],
    ])

    struct BenchmarkFailure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    /// Writes `count` events with COPY, customers in groups (memory stays bounded) and each group
    /// in delivery order, so a stream's events are spread over the table as in a live log.
    /// `raw` is a small placeholder: a rebuild never reads it, and real raw bodies are TOASTed
    /// out of line, so their size does not change what the rebuild scans.
    static func seedEvents(conninfo: String, count: Int, seed: UInt64, progress: (String, Int, Int) -> Void) throws -> Int {
        let connection = try TestDatabase.connect(conninfo)
        let generator = LifecycleGenerator(customers: 0, days: 730, start: start, seed: seed)
        let groupSize = 500
        var written = 0
        var customer = 0
        let raw = "\\\\x" + String(repeating: "5b706c616365686f6c6465725d", count: 4)  // bytea hex in COPY text
        try connection.transaction { connection in
            // Positions are assigned here, so move the head first (the insert trigger checks it).
            try connection.query("UPDATE event_head SET position = $1", [.int64(Int64(count))], name: "bench head")
            try connection.copyIn(
                "COPY events (position, stream_id, dedupe_key, source, type, environment, signed_at, expires_at, payload, raw, recorded_at) FROM STDIN"
            ) { writer in
                while written < count {
                    var group: [SimulatedNotification] = []
                    for index in customer..<(customer + groupSize) { group += generator.lifecycle(customerIndex: index).notifications }
                    customer += groupSize
                    group.sort { ($0.deliveredAt, $0.signedDate, $0.notificationUUID) < ($1.deliveredAt, $1.signedDate, $1.notificationUUID) }
                    // A retried delivery repeats a notificationUUID; the store keeps the first only.
                    var seen = Set<String>()
                    group.removeAll { !seen.insert($0.notificationUUID).inserted }
                    if group.count > count - written { group.removeLast(group.count - (count - written)) }
                    let rows = encode(group, firstPosition: written + 1, raw: raw)
                    try writer.write(rows)
                    written += group.count
                    progress("seed", written, count)
                }
            }
        }
        return written
    }

    /// COPY text rows for a group, JSON-encoded on every core.
    static func encode(_ group: [SimulatedNotification], firstPosition: Int, raw: String) -> [UInt8] {
        let chunks = max(1, ProcessInfo.processInfo.activeProcessorCount)
        let per = (group.count + chunks - 1) / chunks
        let parts = ChunkResults(count: chunks)
        DispatchQueue.concurrentPerform(iterations: chunks) { chunk in
            let encoder = JSONEncoder()
            var out: [UInt8] = []
            let lower = chunk * per, upper = min(group.count, lower + per)
            guard lower < upper else { return }
            for i in lower..<upper {
                let n = group[i]
                guard let json = try? encoder.encode(n.payload) else { continue }
                let key = n.notificationUUID
                let type = n.subtype.map { "\(n.notificationType)/\($0)" } ?? n.notificationType
                var line = "\(firstPosition + i)\t\(n.transaction.originalTransactionId ?? "")\t\(key)\tapple\t\(type)\t\(n.environment)\t"
                line += timestamptz(n.signedDate) + "\t" + (n.transaction.expiresDate.map { timestamptz($0.millis) } ?? "\\N") + "\t"
                out.append(contentsOf: line.utf8)
                appendEscaped(json, to: &out)
                out.append(contentsOf: "\t\(raw)\t\(timestamptz(n.deliveredAt))\n".utf8)
            }
            parts.set(chunk, out)
        }
        return parts.joined()
    }

    /// JSON text in a COPY text field: backslashes doubled (the encoder never emits raw tabs or newlines).
    static func appendEscaped(_ json: Data, to out: inout [UInt8]) {
        for byte in json {
            if byte == 0x5C { out.append(0x5C) }
            out.append(byte)
        }
    }

    /// `YYYY-MM-DD HH:MM:SS.mmm+00` for epoch milliseconds.
    static func timestamptz(_ millis: EpochMillis) -> String {
        guard let t = CivilTime(epochMillis: millis) else { return "epoch" }
        let p = CivilTime.padded
        return "\(p(t.year, 4))-\(p(t.month, 2))-\(p(t.day, 2)) \(p(t.hour, 2)):\(p(t.minute, 2)):\(p(t.second, 2)).\(p(t.millisecond, 3))+00"
    }

    /// Linux: `echo 5 > /proc/self/clear_refs` resets VmHWM to the current RSS, so the rebuild's
    /// peak is not the seeding's.
    static func resetPeakRSS() {
        guard let handle = FileHandle(forWritingAtPath: "/proc/self/clear_refs") else { return }
        handle.write(Data("5".utf8))
        try? handle.close()
    }
}

private func seconds(_ duration: Duration) -> Double {
    let (s, atto) = duration.components
    return Double(s) + Double(atto) / 1e18
}

private func processCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}

/// Per-chunk output of a concurrentPerform, joined in chunk order.
private final class ChunkResults: @unchecked Sendable {
    private var parts: [[UInt8]]
    private let lock = NSLock()
    init(count: Int) { parts = Array(repeating: [], count: count) }
    func set(_ index: Int, _ bytes: [UInt8]) { lock.lock(); parts[index] = bytes; lock.unlock() }
    func joined() -> [UInt8] { lock.lock(); defer { lock.unlock() }; return parts.flatMap { $0 } }
}
