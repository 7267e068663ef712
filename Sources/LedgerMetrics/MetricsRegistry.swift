import Synchronization

/// The one place the service's Prometheus text is written (text exposition format 0.0.4). Every
/// family — counters and histograms recorded as things happen, gauges and counters read when
/// `/metrics` is scraped — is registered here, so HELP and TYPE appear once per family, label
/// values are escaped one way, and no feature writes exposition text by hand.
///
/// How a feature (a slice, the kernel, a worker) adds its metrics:
/// 1. At start, `describe("ledger_<feature>_<what>_total", type: .counter, help: "…")` for what it
///    records, then `increment(name, labels)` / `observe(name, labels, value:)` as things happen.
/// 2. For a value it already holds (a cache's counters): `gauge(name, help:) { [Sample(…)] }`,
///    read synchronously at scrape time.
/// 3. For a value that needs a query (a count in PostgreSQL): `collect(name, type:, help:) { … }`,
///    an async reader run at scrape time; it returns nil when the source did not answer, and the
///    family is then rendered as a comment saying so instead of a wrong number.
/// Names follow Prometheus conventions (`_total` for counters, base units such as seconds and
/// bytes); label values must never carry a secret, a token or a URL with its query.
public final class MetricsRegistry: Sendable {
    public enum Kind: String, Sendable {
        case counter, gauge, histogram
    }

    /// One sample of a family read at scrape time.
    public struct Sample: Sendable {
        public var labels: [String: String]
        public var value: Double
        public init(_ labels: [String: String] = [:], _ value: Double) {
            self.labels = labels
            self.value = value
        }
    }

    public typealias Reader = @Sendable () -> [Sample]
    public typealias AsyncReader = @Sendable () async -> [Sample]?

    private struct Key: Hashable { var name: String; var labels: String }

    private struct Histogram {
        var buckets: [Double]
        var counts: [UInt64]
        var sum: Double = 0
        var count: UInt64 = 0
    }

    private enum Source {
        case read(Reader)
        case collect(AsyncReader)
    }

    private struct State {
        var help: [String: (type: Kind, text: String)] = [:]
        var counters: [Key: Double] = [:]
        var histograms: [Key: Histogram] = [:]
        /// In registration order per name; one family per name.
        var readers: [String: Source] = [:]
    }

    private let state = Mutex(State())
    /// Latency buckets in seconds: from 0.5 ms (a cached read) to 10 s (a request timing out).
    public static let latencyBuckets: [Double] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

    public init() {}

    /// HELP and TYPE of a family that is recorded (`increment`, `observe`). Describing a name
    /// twice keeps the last text (features may describe at every start).
    public func describe(_ name: String, type: Kind, help: String) {
        state.withLock { $0.help[name] = (type, help) }
    }

    public func increment(_ name: String, _ labels: [String: String] = [:], by value: Double = 1) {
        let key = Key(name: name, labels: Self.render(labels))
        state.withLock { $0.counters[key, default: 0] += value }
    }

    public func observe(_ name: String, _ labels: [String: String] = [:], value: Double, buckets: [Double] = MetricsRegistry.latencyBuckets) {
        let key = Key(name: name, labels: Self.render(labels))
        state.withLock { s in
            var h = s.histograms[key] ?? Histogram(buckets: buckets, counts: Array(repeating: 0, count: buckets.count))
            for (i, b) in h.buckets.enumerated() where value <= b { h.counts[i] += 1 }
            h.sum += value
            h.count += 1
            s.histograms[key] = h
        }
    }

    /// A gauge read synchronously at scrape time (a value the caller already holds).
    public func gauge(_ name: String, help: String, _ read: @escaping Reader) {
        state.withLock {
            $0.help[name] = (.gauge, help)
            $0.readers[name] = .read(read)
        }
    }

    /// A family (gauge or counter) read asynchronously at scrape time, e.g. from the database.
    /// nil from `read` means "unavailable": rendered as a comment, never as a made-up value.
    public func collect(_ name: String, type: Kind = .gauge, help: String, _ read: @escaping AsyncReader) {
        state.withLock {
            $0.help[name] = (type, help)
            $0.readers[name] = .collect(read)
        }
    }

    public func counterValue(_ name: String, _ labels: [String: String] = [:]) -> Double {
        state.withLock { $0.counters[Key(name: name, labels: Self.render(labels))] ?? 0 }
    }

    /// Every family, sorted by name, each with one HELP and one TYPE line.
    public func render() async -> String {
        let (help, counters, histograms, readers) = state.withLock { ($0.help, $0.counters, $0.histograms, $0.readers) }
        var read: [String: [Sample]?] = [:]
        for (name, source) in readers {
            switch source {
            case .read(let r): read[name] = r()
            case .collect(let c): read[name] = await c()
            }
        }
        let names = Set(counters.keys.map(\.name)).union(histograms.keys.map(\.name)).union(readers.keys)
        var out = ""
        for name in names.sorted() {
            let h = help[name]
            if let samples = read[name], samples == nil {
                out += "# \(name) unavailable: its source did not answer\n"
                continue
            }
            let kind = h?.type ?? (histograms.keys.contains { $0.name == name } ? .histogram : .counter)
            out += "# HELP \(name) \(Self.escapeHelp(h?.text ?? name))\n# TYPE \(name) \(kind.rawValue)\n"
            if let samples = read[name] ?? nil {
                for sample in samples {
                    let labels = Self.render(sample.labels)
                    out += "\(name)\(labels.isEmpty ? "" : "{\(labels)}") \(Self.number(sample.value))\n"
                }
                continue
            }
            for (k, v) in counters.filter({ $0.key.name == name }).sorted(by: { $0.key.labels < $1.key.labels }) {
                out += "\(name)\(k.labels.isEmpty ? "" : "{\(k.labels)}") \(Self.number(v))\n"
            }
            for (k, h) in histograms.filter({ $0.key.name == name }).sorted(by: { $0.key.labels < $1.key.labels }) {
                let sep = k.labels.isEmpty ? "" : ","
                for (i, b) in h.buckets.enumerated() {
                    out += "\(name)_bucket{\(k.labels)\(sep)le=\"\(Self.number(b))\"} \(h.counts[i])\n"
                }
                out += "\(name)_bucket{\(k.labels)\(sep)le=\"+Inf\"} \(h.count)\n"
                out += "\(name)_sum\(k.labels.isEmpty ? "" : "{\(k.labels)}") \(Self.number(h.sum))\n"
                out += "\(name)_count\(k.labels.isEmpty ? "" : "{\(k.labels)}") \(h.count)\n"
            }
        }
        return out
    }

    /// `name="value",…` with keys in byte order; values escaped per the exposition format, on
    /// bytes (this runs for every request: Foundation's string replacing is slow on Linux).
    public static func render(_ labels: [String: String]) -> String {
        var out = ""
        for k in labels.keys.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) {
            if !out.isEmpty { out += "," }
            out += k
            out += "=\""
            let v = labels[k]!
            if v.utf8.contains(where: { $0 == 0x5C || $0 == 0x22 || $0 == 0x0A }) {
                for scalar in v.unicodeScalars {
                    switch scalar {
                    case "\\": out += "\\\\"
                    case "\"": out += "\\\""
                    case "\n": out += "\\n"
                    default: out.unicodeScalars.append(scalar)
                    }
                }
            } else {
                out += v
            }
            out += "\""
        }
        return out
    }

    /// HELP text escapes backslash and line feed (a newline would start a bogus line).
    static func escapeHelp(_ text: String) -> String {
        guard text.utf8.contains(where: { $0 == 0x5C || $0 == 0x0A }) else { return text }
        var out = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    public static func number(_ v: Double) -> String {
        if v.isNaN { return "NaN" }
        if v.isInfinite { return v > 0 ? "+Inf" : "-Inf" }
        if v == v.rounded(), abs(v) < 1e15 { return String(Int64(v)) }
        return String(v)
    }
}
