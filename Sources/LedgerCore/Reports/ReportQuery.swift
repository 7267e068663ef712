/// The reports `GET /v1/reports/{name}` answers: each a group of metrics read together.
public enum ReportName: String, Sendable, Hashable, CaseIterable {
    /// Levels: active, trial, grace, billing retry.
    case subscriptions
    /// New, renewed, reactivated, churned by reason, upgrades, downgrades.
    case movements
    /// Refunds (count, amount) and reversals.
    case refunds
    /// Gross revenue, recognised revenue, deferred balance, transactions without a price.
    case revenue
    /// Cohort retention: of a month's new subscribers, how many are still paid-active N months later.
    case retention

    public var metrics: [ReportMetric] {
        switch self {
        case .subscriptions: [.active, .trial, .grace, .billingRetry]
        case .movements: [.new, .renewed, .reactivated, .churned, .churnedVoluntary, .churnedBilling, .churnedRefund, .upgrades, .downgrades]
        case .refunds: [.refunds, .refundAmount, .reversals]
        case .revenue: [.grossRevenue, .recognisedRevenue, .deferredRevenue, .noPrice]
        case .retention: []
        }
    }

    /// Money reports have one row per period and currency (amounts are never added across
    /// currencies); count reports one row per period.
    public var perCurrency: Bool { self == .refunds || self == .revenue }

    public var title: String {
        switch self {
        case .subscriptions: "Active subscriptions"
        case .movements: "New vs churned"
        case .refunds: "Refunds"
        case .revenue: "Revenue recognised vs deferred"
        case .retention: "Cohort retention"
        }
    }
}

public enum ReportInterval: String, Sendable, Hashable, CaseIterable {
    case day, week, month

    /// The first day of the interval `day` falls in.
    public func start(of day: ReportDay) -> ReportDay {
        switch self {
        case .day: day
        case .week: day.weekStart
        case .month: day.monthStart
        }
    }

    public func end(of day: ReportDay) -> ReportDay {
        switch self {
        case .day: day
        case .week: day.weekStart.adding(days: 6)
        case .month: day.monthEnd
        }
    }
}

/// Which rows count (nil: all).
public struct ReportFilter: Sendable, Hashable {
    public var environment: String?
    public var source: ReportSource?
    public var product: String?
    public var currency: String?

    public init(environment: String? = nil, source: ReportSource? = nil, product: String? = nil, currency: String? = nil) {
        self.environment = environment
        self.source = source
        self.product = product
        self.currency = currency
    }

    public func matches(_ d: ReportDimensions) -> Bool {
        (environment.map { $0 == d.environment } ?? true) && (source.map { $0 == d.source } ?? true)
            && (product.map { $0 == d.product } ?? true) && (currency.map { $0 == d.currency } ?? true)
    }
}

/// Why a report cannot be answered as asked (the HTTP edge answers 400 with the text).
public enum ReportQueryError: Error, Sendable, Equatable, CustomStringConvertible {
    case unknownReport(String)
    case invalidDay(parameter: String, value: String)
    case reversedRange(from: String, to: String)
    case rangeTooLong(days: Int64)
    case invalidInterval(String)
    case invalidSource(String)
    case invalidEnvironment(String)
    case invalidMetric(String)

    public static let maxDays: Int64 = 3660

    public var description: String {
        switch self {
        case .unknownReport(let n):
            "no report named \(n.debugDescription); ask for one of \(ReportName.allCases.map(\.rawValue).joined(separator: ", "))"
        case .invalidDay(let p, let v):
            "\(p)=\(v.debugDescription) is not a UTC date; give it as YYYY-MM-DD, e.g. \(p)=2026-01-01"
        case .reversedRange(let f, let t):
            "from=\(f) is after to=\(t); give from on or before to"
        case .rangeTooLong(let n):
            "the range spans \(n) days; ask for at most \(Self.maxDays) days (about ten years) at a time"
        case .invalidInterval(let v):
            "interval=\(v.debugDescription) is not one of day, week, month"
        case .invalidSource(let v):
            "source=\(v.debugDescription) is not one of apple, wechat"
        case .invalidEnvironment(let v):
            "environment=\(v.debugDescription) is not one of Production, Sandbox"
        case .invalidMetric(let v):
            "metric=\(v.debugDescription) is not a metric of this report"
        }
    }
}

/// One question to a report: which, over which days, at which interval, filtered how.
public struct ReportQuery: Sendable, Hashable {
    public var name: ReportName
    public var from: ReportDay
    public var to: ReportDay
    public var interval: ReportInterval
    public var filter: ReportFilter

    public init(name: ReportName, from: ReportDay, to: ReportDay, interval: ReportInterval = .day, filter: ReportFilter = ReportFilter()) {
        self.name = name
        self.from = from
        self.to = to
        self.interval = interval
        self.filter = filter
    }

    /// The periods of the range, each as (first day, last day within the range).
    public var periods: [(start: ReportDay, last: ReportDay)] {
        var out: [(ReportDay, ReportDay)] = []
        var d = interval.start(of: from)
        while d <= to {
            let end = interval.end(of: d)
            out.append((d, min(end, to)))
            d = end.adding(days: 1)
        }
        return out
    }
}

/// One row of a report: a period (its first day), the currency for money reports, and one value
/// per metric of the report.
public struct ReportRow: Sendable, Hashable {
    public var period: ReportDay
    public var currency: String?
    public var values: [Int64]
}

/// One row of the retention report: a cohort month, its size, and how many are still paid-active
/// at the end of each following month (index 0: the cohort's own month) that has ended by `to`.
public struct CohortRow: Sendable, Hashable {
    public var cohort: ReportDay
    public var members: Int64
    public var retained: [Int64]

    /// Each month's retention as a share of the cohort: `retained / members` with four decimals,
    /// rounded half up in integers (the same text on every machine); empty for an empty cohort.
    public var shares: [String] { retained.map { Self.share($0, of: members) } }

    public static func share(_ part: Int64, of whole: Int64) -> String {
        guard whole > 0, part >= 0 else { return "" }
        let (high, low) = part.multipliedFullWidth(by: 20_000)
        let scaled = (whole.dividingFullWidth((high, low)).quotient + 1) / 2
        return "\(scaled / 10_000).\(CivilTime.padded(scaled % 10_000, 4))"
    }
}

/// A report's answer, without where it was computed from (the service adds position, chain hash,
/// fact schema version and catalog digest).
public struct ReportTable: Sendable, Hashable {
    public var query: ReportQuery
    public var metrics: [ReportMetric]
    public var rows: [ReportRow]
    public var cohorts: [CohortRow]

    /// The CSV body (after the service's comment line): `period[,currency],metric…` then one line
    /// per row; retention: `cohort,members,month_0…,share_0…` (counts, then the same as shares of
    /// the cohort). CRLF line ends, as the refund export.
    public var csv: String {
        var out = ""
        if query.name == .retention {
            let width = cohorts.map(\.retained.count).max() ?? 0
            out += (["cohort", "members"] + (0..<width).map { "month_\($0)" } + (0..<width).map { "share_\($0)" })
                .joined(separator: ",") + "\r\n"
            for c in cohorts {
                let pad = Array(repeating: "", count: width - c.retained.count)
                out += ([c.cohort.monthText, String(c.members)] + c.retained.map(String.init) + pad + c.shares + pad)
                    .joined(separator: ",") + "\r\n"
            }
            return out
        }
        let head = ["period"] + (query.name.perCurrency ? ["currency"] : []) + metrics.map(\.rawValue)
        out += head.joined(separator: ",") + "\r\n"
        for r in rows {
            out += ([r.period.text] + (r.currency.map { [ReportTable.csvField($0)] } ?? []) + r.values.map(String.init))
                .joined(separator: ",") + "\r\n"
        }
        return out
    }

    /// A text cell as the refund export writes one: neutralised against spreadsheet formulas,
    /// RFC 4180-quoted when needed (currencies are normalised to three letters, but one rule for
    /// every text cell cannot be bypassed by a value nobody expected).
    static func csvField(_ s: String) -> String { RefundCaseCSV.cell(s) }
}

extension ReportRollup {
    /// The answer to `query`: flows summed over each period's days, levels read on each period's
    /// last day within the range; every period of the range has a row (zeros included), and a
    /// money report has one row per currency seen in the range.
    public func table(_ query: ReportQuery) -> ReportTable {
        let metrics = query.name.metrics
        if query.name == .retention { return ReportTable(query: query, metrics: [], rows: [], cohorts: cohortRows(query)) }
        let periods = query.periods
        var periodOf: [ReportDay: Int] = [:]
        var lastDays = Set<ReportDay>()
        for (i, p) in periods.enumerated() {
            var d = max(p.start, query.from)
            while d <= p.last { periodOf[d] = i; d = d.adding(days: 1) }
            lastDays.insert(p.last)
        }
        var sums: [String?: [[Int64]]] = [:]
        let zero = [[Int64]](repeating: Array(repeating: 0, count: metrics.count), count: periods.count)
        if !query.name.perCurrency { sums[nil] = zero }
        for (cell, v) in cells {
            guard let i = periodOf[cell.day], query.filter.matches(cell.dimensions) else { continue }
            let currency: String? = query.name.perCurrency ? cell.dimensions.currency : nil
            if sums[currency] == nil { sums[currency] = zero }
            let isLast = lastDays.contains(cell.day)
            for (m, metric) in metrics.enumerated() where !metric.isLevel || isLast {
                sums[currency]![i][m] += v[metric]
            }
        }
        var rows: [ReportRow] = []
        for (i, p) in periods.enumerated() {
            for currency in sums.keys.sorted(by: { ($0 ?? "") < ($1 ?? "") }) {
                rows.append(ReportRow(period: p.start, currency: currency, values: sums[currency]![i]))
            }
        }
        return ReportTable(query: query, metrics: metrics, rows: rows, cohorts: [])
    }

    /// Cohorts whose month starts within the range, each followed to the last month that ended by `to`.
    func cohortRows(_ query: ReportQuery) -> [CohortRow] {
        var members: [ReportDay: Int64] = [:]
        var retained: [ReportDay: [Int64]] = [:]
        for (k, v) in cohorts where k.cohort >= query.from.monthStart && k.cohort <= query.to && query.filter.matches(k.dimensions) {
            guard k.cohort.monthStart(adding: Int64(k.monthsLater)).monthEnd <= query.to else { continue }
            if k.monthsLater == 0 { members[k.cohort, default: 0] += v.members }
            var r = retained[k.cohort] ?? Array(repeating: 0, count: SubscriptionRollup.cohortMonths)
            r[k.monthsLater] += v.retained
            retained[k.cohort] = r
        }
        return members.keys.sorted().map { c in
            var months = 0
            while months < SubscriptionRollup.cohortMonths && c.monthStart(adding: Int64(months)).monthEnd <= query.to { months += 1 }
            return CohortRow(cohort: c, members: members[c]!, retained: Array((retained[c] ?? []).prefix(months)))
        }
    }
}

extension ReportQuery {
    /// The days of the range that the period starting `period` covers: a point's flows are summed
    /// over them, its levels read on the last.
    public func span(of period: ReportDay) -> (start: ReportDay, last: ReportDay) {
        (max(interval.start(of: period), from), min(interval.end(of: period), to))
    }

    /// The subscriptions behind one point of a chart: those whose contribution to `metric` in the
    /// period starting `period` (a level: on its last day) is not zero, ordered by key. A chart's
    /// point drills down to these.
    public func members(of contributions: [SubscriptionKey: SubscriptionContribution], period: ReportDay,
                        metric: ReportMetric) -> [SubscriptionKey] {
        let (start, last) = span(of: period)
        return contributions.compactMap { key, c -> SubscriptionKey? in
            for (series, figures) in c.series where series.metric == metric && filter.matches(series.dimensions) {
                // Figures are never zero.
                if figures.hasFigure(in: (metric.isLevel ? last.index : start.index)...last.index) { return key }
            }
            return nil
        }.sorted()
    }
}

extension ReportRollup {
    /// The rollup of precomputed contributions (what `members` drills into).
    public init(contributions: [SubscriptionKey: SubscriptionContribution]) {
        for c in contributions.values { add(c) }
    }
}
