import Foundation
import LedgerCore

/// The stored form of one subscription's `SubscriptionContribution` (`report_subscriptions.body`,
/// Migrations/0020): exact, so applying a range can subtract what a subscription added before.
///
/// A contribution is mostly runs of days: a level such as `active` is 1 on every day of a paid
/// run, a period's recognised revenue and deferred balance change a little each day. So each
/// (dimensions, metric) series is kept as runs of consecutive days with a non-zero figure, each
/// run as the zigzag varint deltas of its values (a run of zero deltas as one count). A year of a
/// monthly subscriber takes about 1 KB. Dimensions and metric names are spelled once per body, by
/// name, so a body never depends on the order of `ReportMetric.allCases`.
///
/// The same runs are the drill-down rows (`report_members`): a chart's point names the
/// subscriptions with a run that meets its days.
enum ReportRows {
    static let version: UInt8 = 1

    /// One run of consecutive days on which a series is not zero.
    struct Run: Equatable {
        var dimensions: ReportDimensions
        var metric: ReportMetric
        var first: ReportDay
        var values: [Int64]
        var last: ReportDay { first.adding(days: Int64(values.count - 1)) }
        var series: ReportSeries { ReportSeries(dimensions: dimensions, metric: metric) }
    }

    /// The contribution's figures as runs, ordered by dimensions, metric name, day.
    static func runs(of c: SubscriptionContribution) -> [Run] {
        var out: [Run] = []
        // Each run's values copied from the series in one slice (appending them one by one, through
        // an optional run and the figures' iterator, was most of this).
        for (series, figures) in c.series.sorted(by: { $0.key < $1.key }) {
            let days = figures.days, values = figures.values
            var start = 0
            while start < days.count {
                var end = start + 1
                while end < days.count, days[end] == days[end - 1] &+ 1 { end += 1 }
                out.append(Run(dimensions: series.dimensions, metric: series.metric, first: ReportDay(index: days[start]),
                               values: Array(values[start..<end])))
                start = end
            }
        }
        return out
    }

    /// Adds to `delta` what replacing the runs `old` by `new` (each as `runs(of:)` orders them)
    /// changes: only the days whose figure differs. A renewal extends a run or two and adds a
    /// period's; adding the whole new contribution and subtracting the whole old one cost a cell
    /// update per day of the subscription's life, on every pass.
    static func addDifference(from old: [Run], to new: [Run], into delta: inout ReportRollup) {
        var i = 0, j = 0
        while i < old.count || j < new.count {
            // The next series in order, and the runs each side has of it.
            let series: ReportSeries
            if i < old.count, j < new.count {
                series = min(old[i].series, new[j].series)
            } else {
                series = i < old.count ? old[i].series : new[j].series
            }
            var oi = i, nj = j
            while oi < old.count, old[oi].series == series { oi += 1 }
            while nj < new.count, new[nj].series == series { nj += 1 }
            let before = old[i..<oi], after = new[j..<nj]
            if !before.elementsEqual(after) {
                var a = Figures(before), b = Figures(after)
                var x = a.next(), y = b.next()
                while x != nil || y != nil {
                    if let fx = x, y == nil || fx.day < y!.day {
                        delta.add(series.metric, 0 &- fx.value, on: ReportDay(index: fx.day), series.dimensions)
                        x = a.next()
                    } else if let fy = y, x == nil || fy.day < x!.day {
                        delta.add(series.metric, fy.value, on: ReportDay(index: fy.day), series.dimensions)
                        y = b.next()
                    } else {
                        delta.add(series.metric, y!.value &- x!.value, on: ReportDay(index: x!.day), series.dimensions)
                        x = a.next()
                        y = b.next()
                    }
                }
            }
            (i, j) = (oi, nj)
        }
    }

    /// The figures of one series' runs, day by day in order.
    struct Figures {
        let runs: ArraySlice<Run>
        var run: Int
        var offset = 0

        init(_ runs: ArraySlice<Run>) {
            self.runs = runs
            run = runs.startIndex
        }

        mutating func next() -> (day: Int64, value: Int64)? {
            while run < runs.endIndex {
                let r = runs[run]
                if offset < r.values.count {
                    defer { offset += 1 }
                    return (r.first.index &+ Int64(offset), r.values[offset])
                }
                run += 1
                offset = 0
            }
            return nil
        }
    }

    static func encode(_ c: SubscriptionContribution) -> Data { encode(c, runs: runs(of: c)) }

    /// The body of `c` whose runs (`runs(of: c)`) the caller already has: the projection writes
    /// both the body and the drill-down rows from one computation of them.
    static func encode(_ c: SubscriptionContribution, runs: [Run]) -> Data {
        let cohorts = c.cohorts.sorted { $0.key < $1.key }
        let dims = Array(Set(runs.map(\.dimensions) + cohorts.map(\.key.dimensions))).sorted()
        let metrics = Array(Set(runs.map(\.metric))).sorted { $0.rawValue < $1.rawValue }
        let dimIndex = Dictionary(uniqueKeysWithValues: dims.enumerated().map { ($1, $0) })
        let metricIndex = Dictionary(uniqueKeysWithValues: metrics.enumerated().map { ($1, $0) })
        var w = Writer()
        w.bytes.append(version)
        w.unsigned(UInt64(dims.count))
        for d in dims {
            for s in [d.environment, d.source.rawValue, d.product, d.currency] { w.string(s) }
        }
        w.unsigned(UInt64(metrics.count))
        for m in metrics { w.string(m.rawValue) }
        w.unsigned(UInt64(runs.count))
        for r in runs {
            w.unsigned(UInt64(dimIndex[r.dimensions]!))
            w.unsigned(UInt64(metricIndex[r.metric]!))
            w.signed(r.first.index)
            w.unsigned(UInt64(r.values.count))
            var previous: Int64 = 0
            var zeros = 0
            func flushZeros() {
                if zeros > 0 { w.signed(0); w.unsigned(UInt64(zeros)); zeros = 0 }
            }
            for v in r.values {
                let delta = v &- previous
                previous = v
                if delta == 0 { zeros += 1; continue }
                flushZeros()
                w.signed(delta)
            }
            flushZeros()
        }
        w.unsigned(UInt64(cohorts.count))
        for (k, v) in cohorts {
            w.unsigned(UInt64(dimIndex[k.dimensions]!))
            w.signed(k.cohort.index)
            w.unsigned(UInt64(k.monthsLater))
            w.signed(v.members)
            w.signed(v.retained)
        }
        return Data(w.bytes)
    }

    static func decode(_ data: Data) throws -> SubscriptionContribution {
        let (runs, cohorts) = try decodeRuns(data)
        var c = SubscriptionContribution()
        for r in runs {
            var figures = c.series.removeValue(forKey: r.series) ?? ReportFigures()
            for (i, value) in r.values.enumerated() { figures.add(value, on: r.first.index &+ Int64(i)) }
            c.series[r.series] = figures
        }
        c.cohorts = cohorts
        return c
    }

    /// A stored contribution as its runs (ordered as `runs(of:)` orders them) and cohorts.
    static func decodeRuns(_ data: Data) throws -> (runs: [Run], cohorts: [CohortKey: CohortCount]) {
        var r = Reader(bytes: [UInt8](data))
        guard try r.byte() == version else { throw r.corrupt("unknown version") }
        var dims: [ReportDimensions] = []
        for _ in 0..<(try r.count()) {
            let env = try r.string(), source = try r.string(), product = try r.string(), currency = try r.string()
            guard let s = ReportSource(rawValue: source) else { throw r.corrupt("unknown source \(source)") }
            dims.append(ReportDimensions(environment: env, source: s, product: product, currency: currency))
        }
        var metrics: [ReportMetric] = []
        for _ in 0..<(try r.count()) {
            let name = try r.string()
            guard let m = ReportMetric(rawValue: name) else { throw r.corrupt("unknown metric \(name)") }
            metrics.append(m)
        }
        var runs: [Run] = []
        for _ in 0..<(try r.count()) {
            let d = try r.index(dims), m = try r.index(metrics)
            let first = try r.signed()
            let length = try r.count()
            guard length > 0 else { throw r.corrupt("an empty run") }
            var values: [Int64] = []
            var value: Int64 = 0
            while values.count < length {
                let delta = try r.signed()
                if delta == 0 {
                    let zeros = try r.count()
                    guard zeros > 0, values.count + zeros <= length else { throw r.corrupt("a run of \(zeros) days overflows") }
                    values.append(contentsOf: repeatElement(value, count: zeros))
                    continue
                }
                value &+= delta
                values.append(value)
            }
            guard values.allSatisfy({ $0 != 0 }) else { throw r.corrupt("a zero figure") }
            // `addDifference` walks each series' days in order.
            let series = ReportSeries(dimensions: d, metric: m)
            if let last = runs.last, last.series > series || last.series == series && last.last.index >= first {
                throw r.corrupt("runs out of order")
            }
            runs.append(Run(dimensions: d, metric: m, first: ReportDay(index: first), values: values))
        }
        var cohorts: [CohortKey: CohortCount] = [:]
        for _ in 0..<(try r.count()) {
            let d = try r.index(dims)
            let cohort = try r.signed(), months = try r.count(), members = try r.signed(), retained = try r.signed()
            cohorts[CohortKey(cohort: ReportDay(index: cohort), dimensions: d, monthsLater: months)] =
                CohortCount(members: members, retained: retained)
        }
        guard r.offset == r.bytes.count else { throw r.corrupt("\(r.bytes.count - r.offset) bytes after the end") }
        return (runs, cohorts)
    }

    struct Writer {
        var bytes: [UInt8] = []

        mutating func unsigned(_ v: UInt64) {
            var v = v
            while v >= 0x80 {
                bytes.append(UInt8(v & 0x7F) | 0x80)
                v >>= 7
            }
            bytes.append(UInt8(v))
        }

        mutating func signed(_ v: Int64) { unsigned(UInt64(bitPattern: (v << 1) ^ (v >> 63))) }

        mutating func string(_ s: String) {
            unsigned(UInt64(s.utf8.count))
            bytes.append(contentsOf: s.utf8)
        }
    }

    struct Reader {
        let bytes: [UInt8]
        var offset = 0

        func corrupt(_ why: String) -> ProjectionError {
            .corrupt("a stored report contribution does not decode (\(why) at byte \(offset)); rebuild it: ledger rebuild --projection reports")
        }

        mutating func byte() throws -> UInt8 {
            guard offset < bytes.count else { throw corrupt("truncated") }
            defer { offset += 1 }
            return bytes[offset]
        }

        mutating func unsigned() throws -> UInt64 {
            var v: UInt64 = 0
            var shift: UInt64 = 0
            while true {
                let b = try byte()
                guard shift < 64 else { throw corrupt("varint too long") }
                v |= UInt64(b & 0x7F) << shift
                if b < 0x80 { return v }
                shift += 7
            }
        }

        mutating func signed() throws -> Int64 {
            let u = try unsigned()
            return Int64(bitPattern: (u >> 1) ^ (0 &- (u & 1)))
        }

        /// A count of items that follow: never more than the bytes left could hold (one byte each).
        mutating func count() throws -> Int {
            let n = try unsigned()
            guard n <= UInt64(Int32.max) else { throw corrupt("count \(n) out of range") }
            return Int(n)
        }

        mutating func index<T>(_ items: [T]) throws -> T {
            let i = try count()
            guard i < items.count else { throw corrupt("index \(i) of \(items.count)") }
            return items[i]
        }

        mutating func string() throws -> String {
            let n = try count()
            guard n <= bytes.count - offset else { throw corrupt("truncated string") }
            defer { offset += n }
            return String(decoding: bytes[offset..<(offset + n)], as: UTF8.self)
        }
    }
}
