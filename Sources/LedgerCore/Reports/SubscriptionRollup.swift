/// What one subscription adds to the daily rollups: a pure function of its fold, so the reports
/// are order-independent like every projection (the same facts in any order give the same fold,
/// hence the same contribution), and a subscription's contribution can be replaced whole when a
/// fact about it arrives.
///
/// Levels (active, trial, grace, billing retry) are the fold's state at the last millisecond of
/// each UTC day; movements compare a day with the day before; flows (gross revenue, refunds,
/// recognition) come from the merged transactions. Only auto-renewable subscriptions (Apple) and
/// WeChat xpay Apple subscriptions count: one-time purchases are not subscriptions.
public struct SubscriptionContribution: Sendable, Hashable {
    /// Each series' non-zero figures, by day (`ReportDay.index`). Kept per series rather than per
    /// (day, dimensions) cell: a contribution has figures on most days of a subscription's life,
    /// and a cell keyed by four strings and a day, holding a slot for every metric, cost a hash of
    /// the strings and an allocation per day — most of the reports' pass over long histories.
    public var series: [ReportSeries: ReportFigures] = [:]
    public var cohorts: [CohortKey: CohortCount] = [:]

    public init() {}

    public var isEmpty: Bool { series.isEmpty && cohorts.isEmpty }

    /// The same figures by (day, dimensions), as the rollups hold them.
    public var cells: [ReportCell: ReportValues] {
        var out: [ReportCell: ReportValues] = [:]
        for (s, figures) in series {
            for (day, value) in figures { out[ReportCell(day: ReportDay(index: day), dimensions: s.dimensions), default: ReportValues()][s.metric] += value }
        }
        return out
    }

    public mutating func add(_ metric: ReportMetric, _ value: Int64, on day: ReportDay, _ dims: ReportDimensions) {
        guard value != 0 else { return }
        series[ReportSeries(dimensions: dims, metric: metric), default: ReportFigures()].add(value, on: day.index)
    }

    /// `value` on every day of `days` (a level held over a stretch): the series is found once.
    public mutating func add(_ metric: ReportMetric, _ value: Int64, on days: Range<ReportDay>, _ dims: ReportDimensions) {
        guard value != 0, !days.isEmpty else { return }
        series[ReportSeries(dimensions: dims, metric: metric), default: ReportFigures()].add(value, on: days.lowerBound.index..<days.upperBound.index)
    }

    /// Drops the series left without a figure (their figures summed to zero): equal contributions
    /// are then equal values.
    mutating func dropEmptySeries() {
        if series.values.contains(where: \.isEmpty) { series = series.filter { !$0.value.isEmpty } }
    }
}

/// One series of figures: a metric under one set of dimensions. Ordered by dimensions, then
/// metric name (the order of a stored contribution's runs).
public struct ReportSeries: Sendable, Hashable, Comparable {
    public var dimensions: ReportDimensions
    public var metric: ReportMetric

    public init(dimensions: ReportDimensions, metric: ReportMetric) {
        self.dimensions = dimensions
        self.metric = metric
    }

    public static func < (a: ReportSeries, b: ReportSeries) -> Bool {
        a.dimensions != b.dimensions ? a.dimensions < b.dimensions : a.metric.rawValue < b.metric.rawValue
    }
}

/// One series' figures: its non-zero values by day (`ReportDay.index`), days strictly increasing.
/// A contribution adds its figures mostly in day order (the walk goes forward, a period's revenue
/// day after day), so an add is usually an append; one before the last day is found by halving.
public struct ReportFigures: Sendable, Hashable, Sequence {
    public private(set) var days: [Int64] = []
    public private(set) var values: [Int64] = []

    public init() {}

    public var isEmpty: Bool { days.isEmpty }

    /// Adds `value` on `day`, keeping no zero figure.
    public mutating func add(_ value: Int64, on day: Int64) {
        guard value != 0 else { return }
        guard let last = days.last, day <= last else {
            days.append(day)
            values.append(value)
            return
        }
        let i = index(of: day)
        if i < days.count, days[i] == day {
            values[i] &+= value
            if values[i] == 0 {
                days.remove(at: i)
                values.remove(at: i)
            }
        } else {
            days.insert(day, at: i)
            values.insert(value, at: i)
        }
    }

    /// `value` on every day of `range`.
    public mutating func add(_ value: Int64, on range: Range<Int64>) {
        guard value != 0, !range.isEmpty else { return }
        if days.last.map({ $0 < range.lowerBound }) ?? true {
            days.append(contentsOf: range)
            values.append(contentsOf: repeatElement(value, count: range.count))
        } else {
            for day in range { add(value, on: day) }
        }
    }

    public mutating func add(_ figures: some Sequence<(ReportDay, Int64)>) {
        for (day, value) in figures { add(value, on: day.index) }
    }

    /// The figure on `day` (nil: none, as no figure is zero).
    public subscript(day: Int64) -> Int64? {
        let i = index(of: day)
        return i < days.count && days[i] == day ? values[i] : nil
    }

    /// Whether any figure falls on a day of `range`.
    public func hasFigure(in range: ClosedRange<Int64>) -> Bool {
        let i = index(of: range.lowerBound)
        return i < days.count && days[i] <= range.upperBound
    }

    /// The first place whose day is not before `day`.
    func index(of day: Int64) -> Int {
        var lo = 0, hi = days.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if days[mid] < day { lo = mid + 1 } else { hi = mid }
        }
        return lo
    }

    public func makeIterator() -> some IteratorProtocol<(day: Int64, value: Int64)> {
        zip(days, values).lazy.map { (day: $0, value: $1) }.makeIterator()
    }
}

/// Members of a cohort and how many of them are paid-active at the end of a later month.
public struct CohortCount: Sendable, Hashable {
    public var members: Int64
    public var retained: Int64

    public init(members: Int64 = 0, retained: Int64 = 0) {
        self.members = members
        self.retained = retained
    }
}

public enum SubscriptionRollup {
    /// How many months after its own a cohort is followed (0 … 23).
    public static let cohortMonths = 24

    /// A free trial: an introductory offer (offerType 1) at price 0. A period without a price is
    /// paid "no price", not guessed to be a trial.
    public static func isTrial(_ tx: TransactionRecord) -> Bool { tx.offerType == 1 && tx.price == 0 }

    /// `next` replaced `prev` at once: Apple marked `prev` upgraded, or `next` is another product
    /// bought while `prev` was running and not refunded (an upgrade; downgrades and crossgrades wait
    /// for the renewal). Apple rarely re-signs the replaced transaction, so the marking alone is not enough.
    public static func isUpgrade(from prev: TransactionRecord, to next: TransactionRecord) -> Bool {
        if prev.isUpgraded { return true }
        guard let p = next.purchaseDate, let e = prev.expiresDate, p < e, prev.productId != next.productId else { return false }
        return prev.revocationDate.map { $0 > p } ?? true
    }

    static func isSubscription(_ type: String?) -> Bool { type == nil || type == ProductType.autoRenewable }

    static func dimensions(_ key: SubscriptionKey, _ source: ReportSource, product: String?, _ tx: TransactionRecord?) -> ReportDimensions {
        let currency = tx.flatMap { $0.price == nil ? nil : $0.currency.map(ReportDimensions.currencyCode) } ?? ReportDimensions.noPrice
        return ReportDimensions(environment: key.environment, source: source, product: product ?? tx?.productId ?? "unknown",
                                currency: currency)
    }

    public static func contribution(of fold: SubscriptionFold) -> SubscriptionContribution {
        var out = SubscriptionContribution()
        let key = fold.key
        let source: ReportSource = fold.isWeChat ? .wechat : .apple
        // In purchase order (same instant: the numeric order of transaction ids, "9" before "10"),
        // as `transactions` lists them.
        let txs = fold.transactions.filter { isSubscription($0.type) && $0.purchaseDate != nil }
        guard let firstPurchase = txs.first?.purchaseDate else { return out }
        let byId = Dictionary(txs.map { ($0.transactionId, $0) }, uniquingKeysWith: { a, _ in a })

        // The last instant any known fact can still move the state: after it plus the longest
        // billing retry, nothing changes without a new fact.
        var lastKnown = firstPurchase
        for tx in txs {
            lastKnown = max(lastKnown, tx.expiresDate ?? tx.purchaseDate!, tx.revocationDate ?? .min,
                            tx.refundReversedSignedDate ?? .min)
        }
        let endDay = ReportDay(containing: lastKnown &+ SubscriptionFold.billingRetryLimit).adding(days: 1)

        // Paid-active runs, as [start, end) day ranges, for movements and cohorts.
        var paidRuns: [(start: ReportDay, end: ReportDay, dims: ReportDimensions)] = []
        var runStarts = Set<ReportDay>()
        var prevPaid = false
        var prevDims: ReportDimensions?
        var everPaid = false
        var day = ReportDay(containing: firstPurchase)
        while day <= endDay {
            let t = day.lastMillisecond
            let state = fold.state(at: t)
            var nextDay = day.adding(days: 1)
            if let state, isSubscription(state.productType) {
                let tx = state.latestTransactionId.flatMap { byId[$0] }
                let entitled = state.status.isEntitled
                let trial = entitled && (tx.map(isTrial) ?? false)
                let paid = entitled && !trial
                let dims = dimensions(key, source, product: state.productId, tx)
                // The state holds until its next boundary: a known fact taking effect, or the
                // period, grace or retry ending.
                var next = state.validUntil
                func consider(_ c: EpochMillis?) {
                    guard let c, c > t else { return }
                    if next.map({ c < $0 }) ?? true { next = c }
                }
                consider(state.expiresDate)
                consider(state.gracePeriodExpiresDate)
                if let e = state.expiresDate, state.isInBillingRetryPeriod { consider(e &+ SubscriptionFold.billingRetryLimit) }
                nextDay = min(next.map { ReportDay(containing: $0) } ?? endDay.adding(days: 1), endDay.adding(days: 1))
                if nextDay <= day { nextDay = day.adding(days: 1) }

                if paid && !prevPaid {
                    out.add(everPaid ? .reactivated : .new, 1, on: day, dims)
                    runStarts.insert(day)
                    everPaid = true
                    paidRuns.append((day, nextDay, dims))
                } else if paid, let last = paidRuns.indices.last {
                    paidRuns[last].end = nextDay
                }
                if prevPaid && !entitled, let from = prevDims {
                    let reason: ReportMetric
                    if state.status == .revoked {
                        reason = .churnedRefund
                    } else if state.status == .billingRetry || state.expirationIntent == 2 {
                        reason = .churnedBilling
                    } else {
                        reason = .churnedVoluntary
                    }
                    out.add(.churned, 1, on: day, from)
                    out.add(reason, 1, on: day, from)
                }
                if day < nextDay {
                    if paid { out.add(.active, 1, on: day..<nextDay, dims) }
                    if trial { out.add(.trial, 1, on: day..<nextDay, dims) }
                    if paid && state.status == .gracePeriod { out.add(.grace, 1, on: day..<nextDay, dims) }
                    if state.status == .billingRetry { out.add(.billingRetry, 1, on: day..<nextDay, dims) }
                }
                if paid || !entitled { prevPaid = paid }
                prevDims = paid ? dims : prevDims
            } else if state == nil {
                // Nothing had begun by then (cannot happen after the first purchase; kept total).
                nextDay = day.adding(days: 1)
            }
            day = nextDay
        }

        // Per-transaction flows.
        for (i, tx) in txs.enumerated() {
            let pday = ReportDay(containing: tx.purchaseDate!)
            let dims = dimensions(key, source, product: tx.productId, tx)
            let paidPeriod = !isTrial(tx)
            guard let price = tx.price else {
                out.add(.noPrice, 1, on: pday, dims)
                if let r = tx.revocationDate { out.add(.refunds, 1, on: ReportDay(containing: r), dims) }
                continue
            }
            if paidPeriod { out.add(.grossRevenue, price, on: pday, dims) }
            if i > 0 {
                let prev = txs[i - 1]
                if isUpgrade(from: prev, to: tx) {
                    out.add(.upgrades, 1, on: pday, dims)
                } else if paidPeriod && !runStarts.contains(pday) {
                    out.add(.renewed, 1, on: pday, dims)
                    if !isTrial(prev), prev.productId != tx.productId { out.add(.downgrades, 1, on: pday, dims) }
                }
            }
            if let r = tx.revocationDate {
                let rday = ReportDay(containing: r)
                out.add(.refunds, 1, on: rday, dims)
                out.add(.refundAmount, RevenueRecognition.refunded(price: price, share: tx.revocationPercentage.map(Int64.init)), on: rday, dims)
            } else if let reversed = tx.refundReversedSignedDate {
                out.add(.reversals, 1, on: ReportDay(containing: reversed), dims)
            }
            if paidPeriod, let end = tx.expiresDate {
                let replacedAt = i + 1 < txs.count && isUpgrade(from: tx, to: txs[i + 1]) ? txs[i + 1].purchaseDate : nil
                let schedule = RevenueRecognition.schedule(price: price, start: tx.purchaseDate!, end: end, refundedAt: tx.revocationDate,
                                                           refundShare: tx.revocationPercentage.map(Int64.init), replacedAt: replacedAt)
                // Each series found once per period, not once per day.
                out.series[ReportSeries(dimensions: dims, metric: .recognisedRevenue), default: ReportFigures()].add(schedule.lazy.map { ($0.day, $0.recognised) })
                out.series[ReportSeries(dimensions: dims, metric: .deferredRevenue), default: ReportFigures()].add(schedule.lazy.map { ($0.day, $0.deferred) })
            }
        }

        // Cohort: the month of the first paid day; retained N months later when paid-active on the
        // last day of that month.
        if let first = paidRuns.first {
            let cohort = first.start.monthStart
            for n in 0..<cohortMonths {
                let monthEnd = cohort.monthStart(adding: Int64(n)).monthEnd
                let retained = paidRuns.contains { $0.start <= monthEnd && monthEnd < $0.end }
                out.cohorts[CohortKey(cohort: cohort, dimensions: first.dims, monthsLater: n)] =
                    CohortCount(members: 1, retained: retained ? 1 : 0)
            }
        }
        out.dropEmptySeries()
        return out
    }
}
