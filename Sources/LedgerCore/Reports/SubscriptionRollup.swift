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
    public var cells: [ReportCell: ReportValues] = [:]
    public var cohorts: [CohortKey: CohortCount] = [:]

    public init() {}

    public var isEmpty: Bool { cells.isEmpty && cohorts.isEmpty }

    mutating func add(_ metric: ReportMetric, _ value: Int64, on day: ReportDay, _ dims: ReportDimensions) {
        guard value != 0 else { return }
        cells[ReportCell(day: day, dimensions: dims), default: ReportValues()][metric] += value
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
        let txs = fold.transactions.filter { isSubscription($0.type) && $0.purchaseDate != nil }
            .sorted { a, b in
                // Same purchase instant: the numeric order of transaction ids the folds use ("9" before "10").
                a.purchaseDate! != b.purchaseDate! ? a.purchaseDate! < b.purchaseDate! : TransactionIdOrder.precedes(a.transactionId, b.transactionId)
            }
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
                var d = day
                while d < nextDay {
                    if paid { out.add(.active, 1, on: d, dims) }
                    if trial { out.add(.trial, 1, on: d, dims) }
                    if paid && state.status == .gracePeriod { out.add(.grace, 1, on: d, dims) }
                    if state.status == .billingRetry { out.add(.billingRetry, 1, on: d, dims) }
                    d = d.adding(days: 1)
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
                for d in RevenueRecognition.schedule(price: price, start: tx.purchaseDate!, end: end, refundedAt: tx.revocationDate,
                                                     refundShare: tx.revocationPercentage.map(Int64.init), replacedAt: replacedAt) {
                    out.add(.recognisedRevenue, d.recognised, on: d.day, dims)
                    out.add(.deferredRevenue, d.deferred, on: d.day, dims)
                }
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
        return out
    }
}
