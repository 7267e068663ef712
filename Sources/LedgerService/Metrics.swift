import Foundation
import Synchronization

/// Prometheus text exposition for the service's own counters, histograms and gauges.
/// Counters and histograms are recorded by handlers; gauges are read at scrape time.
public final class Metrics: Sendable {
    private struct Key: Hashable { var name: String; var labels: String }

    private struct Histogram {
        var buckets: [Double]
        var counts: [UInt64]
        var sum: Double = 0
        var count: UInt64 = 0
    }

    private struct State {
        var help: [String: (type: String, text: String)] = [:]
        var counters: [Key: Double] = [:]
        var histograms: [Key: Histogram] = [:]
        var gauges: [(name: String, help: String, read: @Sendable () -> [(labels: [String: String], value: Double)])] = []
    }

    private let state = Mutex(State())
    /// Latency buckets in seconds: from 0.5 ms (a cached read) to 10 s (a request timing out).
    public static let latencyBuckets: [Double] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]

    public init() {}

    public func describe(_ name: String, type: String, help: String) {
        state.withLock { $0.help[name] = (type, help) }
    }

    public func increment(_ name: String, _ labels: [String: String] = [:], by value: Double = 1) {
        let key = Key(name: name, labels: Self.render(labels))
        state.withLock { $0.counters[key, default: 0] += value }
    }

    public func observe(_ name: String, _ labels: [String: String] = [:], value: Double, buckets: [Double] = Metrics.latencyBuckets) {
        let key = Key(name: name, labels: Self.render(labels))
        state.withLock { s in
            var h = s.histograms[key] ?? Histogram(buckets: buckets, counts: Array(repeating: 0, count: buckets.count))
            for (i, b) in h.buckets.enumerated() where value <= b { h.counts[i] += 1 }
            h.sum += value
            h.count += 1
            s.histograms[key] = h
        }
    }

    public func gauge(_ name: String, help: String, _ read: @escaping @Sendable () -> [(labels: [String: String], value: Double)]) {
        state.withLock { $0.gauges.append((name, help, read)) }
    }

    public func counterValue(_ name: String, _ labels: [String: String] = [:]) -> Double {
        state.withLock { $0.counters[Key(name: name, labels: Self.render(labels))] ?? 0 }
    }

    /// The Prometheus text format, version 0.0.4.
    public func render() -> String {
        let (help, counters, histograms, gauges) = state.withLock { ($0.help, $0.counters, $0.histograms, $0.gauges) }
        var out = ""
        func header(_ name: String, _ fallbackType: String) {
            let h = help[name]
            out += "# HELP \(name) \(h?.text ?? name)\n# TYPE \(name) \(h?.type ?? fallbackType)\n"
        }
        for name in Set(counters.keys.map(\.name)).sorted() {
            header(name, "counter")
            for (k, v) in counters.filter({ $0.key.name == name }).sorted(by: { $0.key.labels < $1.key.labels }) {
                out += "\(name)\(k.labels.isEmpty ? "" : "{\(k.labels)}") \(Self.number(v))\n"
            }
        }
        for name in Set(histograms.keys.map(\.name)).sorted() {
            header(name, "histogram")
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
        for g in gauges.sorted(by: { $0.name < $1.name }) {
            out += "# HELP \(g.name) \(g.help)\n# TYPE \(g.name) gauge\n"
            for sample in g.read() {
                let labels = Self.render(sample.labels)
                out += "\(g.name)\(labels.isEmpty ? "" : "{\(labels)}") \(Self.number(sample.value))\n"
            }
        }
        return out
    }

    /// `name="value",…` with keys in byte order; values escaped per the exposition format, on
    /// bytes (this runs for every request: Foundation's string replacing is slow on Linux).
    static func render(_ labels: [String: String]) -> String {
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

    static func number(_ v: Double) -> String {
        if v == v.rounded(), abs(v) < 1e15 { return String(Int64(v)) }
        return String(v)
    }
}
