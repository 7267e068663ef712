import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// What every benchmark reports the same way: the ledger's figure and its same-run baseline over
/// `runs` runs (median, min, max of each), and one ratio — the median of the per-run ratios, so
/// a run on a busier moment is compared with its own baseline, not with a quieter run's.
///
/// `ledger-dev bench` prints `lines` after the benchmark's own description and appends `json`
/// to `.build/bench.json` (`BenchSummary.record`), from which `scripts/bench-table.py` writes
/// README's performance table. A benchmark with several workloads (ingest with streams of 1, 10
/// and 100 prior events; read of states, entitlements and `?at=`) reports one summary per workload.
public struct BenchSummary: Sendable, Codable, Equatable {
    /// Spread of one figure over the runs.
    public struct Figure: Sendable, Codable, Equatable {
        public var runs: [Double]
        public var median: Double { Self.median(runs) }
        public var min: Double { runs.min() ?? 0 }
        public var max: Double { runs.max() ?? 0 }

        public init(_ runs: [Double]) { self.runs = runs }

        static func median(_ xs: [Double]) -> Double {
            guard !xs.isEmpty else { return 0 }
            let s = xs.sorted()
            return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
        }

        private enum CodingKeys: String, CodingKey { case runs, median, min, max }
        public init(from decoder: any Decoder) throws {
            runs = try decoder.container(keyedBy: CodingKeys.self).decode([Double].self, forKey: .runs)
        }
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(runs, forKey: .runs)
            try c.encode(median, forKey: .median)
            try c.encode(min, forKey: .min)
            try c.encode(max, forKey: .max)
        }
    }

    /// `ingest`, `read`, `read/entitlements`, `rebuild`, …: the key in bench.json.
    public var name: String
    /// The command that produced it (for README's table).
    public var command: String
    /// What `ledger` and `baseline` measure, e.g. "notifications/s", "s".
    public var unit: String
    /// What the ledger's figure is, e.g. "ledger ingest (HTTP, verify, commit)".
    public var ledgerLabel: String
    public var ledger: Figure
    /// What the baseline is, e.g. "pgbench single-row INSERT of the same bytes".
    public var baselineLabel: String
    public var baseline: Figure
    /// True when a larger figure is better (rates); false for times. The ratio is always
    /// "how the ledger does against the baseline", > 1 better, for rates ledger ÷ baseline and
    /// for times baseline ÷ ledger — unless `ratioIsLedgerOverBaseline` forces ledger ÷ baseline
    /// (e.g. rebuild's "× the COPY time", where smaller is better and the target reads that way).
    public var higherIsBetter: Bool
    public var ratioIsLedgerOverBaseline: Bool
    /// The target the ratio is held to, as text ("≥ 1.0", "≤ 1.5"), or nil.
    public var target: String?
    /// Whether the target is met by the median ratio (nil without a target).
    public var targetMet: Bool?
    /// Figures worth keeping beside the ratio (p99 ms, hit rate, peak RSS …), medians.
    public var details: [String: Double]
    /// When and where: ISO 8601 time, CPU count, the 1-minute load average when the runs began.
    public var measuredAt: String
    public var cpus: Int
    public var loadAverage: Double?

    public init(name: String, command: String, unit: String, ledgerLabel: String, ledger: [Double],
                baselineLabel: String, baseline: [Double], higherIsBetter: Bool = true,
                ratioIsLedgerOverBaseline: Bool = false, target: (String, (Double) -> Bool)? = nil,
                details: [String: Double] = [:], loadAverage: Double? = BenchSummary.currentLoadAverage()) {
        self.name = name
        self.command = command
        self.unit = unit
        self.ledgerLabel = ledgerLabel
        self.ledger = Figure(ledger)
        self.baselineLabel = baselineLabel
        self.baseline = Figure(baseline)
        self.higherIsBetter = higherIsBetter
        self.ratioIsLedgerOverBaseline = ratioIsLedgerOverBaseline
        self.details = details
        self.measuredAt = ISO8601DateFormatter().string(from: Date())
        self.cpus = ProcessInfo.processInfo.activeProcessorCount
        self.loadAverage = loadAverage
        self.target = target?.0
        self.targetMet = nil
        self.targetMet = target.map { $0.1(ratio) }
    }

    /// Per-run ratios (runs are paired by index; an unpaired tail is ignored).
    public var ratios: [Double] {
        zip(ledger.runs, baseline.runs).map { l, b in
            let (num, den) = (ratioIsLedgerOverBaseline || higherIsBetter) ? (l, b) : (b, l)
            return den > 0 ? num / den : 0
        }
    }

    /// The median of the per-run ratios.
    public var ratio: Double { Figure.median(ratios) }

    /// The lines `ledger-dev bench` prints: both figures with min–max, then one `ratio:` line.
    public var lines: [String] {
        func f(_ x: Double) -> String {
            abs(x) >= 100 ? String(format: "%.0f", x) : abs(x) >= 1 ? String(format: "%.2f", x) : String(format: "%.4f", x)
        }
        func fig(_ x: Figure) -> String { "\(f(x.median)) \(unit) (min \(f(x.min)), max \(f(x.max)))" }
        let load = loadAverage.map { String(format: ", load %.2f", $0) } ?? ""
        var out = [
            "  [\(name)] medians of \(ledger.runs.count) runs, \(cpus) CPUs\(load)",
            "    ledger:   \(ledgerLabel): \(fig(ledger))",
            "    baseline: \(baselineLabel): \(fig(baseline))",
        ]
        for (k, v) in details.sorted(by: { $0.key < $1.key }) { out.append("    \(k): \(f(v))") }
        let spread = ratios.map { String(format: "%.2f", $0) }.joined(separator: ", ")
        let verdict = target.map { t in " — target \(t): \(targetMet == true ? "met" : "NOT met")" } ?? ""
        out.append(String(format: "ratio: %.2f", ratio) + " [\(name)] (per run: \(spread))\(verdict)")
        return out
    }

    /// Appends (replacing an entry of the same name) to the JSON file at `path`
    /// (`LEDGER_BENCH_JSON`, else `.build/bench.json`): `{"<name>": summary, …}`.
    public func record(to path: String = ProcessInfo.processInfo.environment["LEDGER_BENCH_JSON"] ?? ".build/bench.json") throws {
        let url = URL(fileURLWithPath: path)
        var all: [String: BenchSummary] = [:]
        if let data = try? Data(contentsOf: url), !data.isEmpty {
            all = (try? JSONDecoder().decode([String: BenchSummary].self, from: data)) ?? [:]
        }
        all[name] = self
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try encoder.encode(all).write(to: url, options: .atomic)
    }

    public static func currentLoadAverage() -> Double? {
        guard let text = try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8),
              let first = text.split(separator: " ").first else { return nil }
        return Double(first)
    }
}
