import Foundation
import LedgerCore

// The reports' oracle: each daily figure of a generated population computed straight from what
// the simulated App Store stated (the generator's notifications: each transaction as signed at
// each moment, the renewal info, `data.status`), never through `FactDecoder`, `SubscriptionFold`,
// `SubscriptionProjection` or `SubscriptionRollup`. Only the value types of the answer (ReportCell,
// ReportValues, ReportDay, CohortKey) are shared. The definitions are README's "Charts and revenue".
// WeChat subscribers are modelled from the simulated WeChat's own orders (`WeChatSimulation`).

public enum ReportModel {
    private static let dayMs: EpochMillis = 86_400_000
    private static let retryLimit: EpochMillis = 60 * 86_400_000

    /// The daily cells of every lifecycle, summed.
    public static func cells(of lifecycles: [SimulatedLifecycle]) -> [ReportCell: ReportValues] {
        figures(of: lifecycles).cells
    }

    /// Every daily cell and cohort of Apple and WeChat lifecycles, summed.
    public static func figures(of lifecycles: [SimulatedLifecycle], wechat: [WeChatSimulatedLifecycle] = [])
        -> (cells: [ReportCell: ReportValues], cohorts: [CohortKey: CohortCount]) {
        var out: [ReportCell: ReportValues] = [:]
        var cohorts: [CohortKey: CohortCount] = [:]
        let each = lifecycles.map { figures(of: $0) } + wechat.map { figures(ofWeChat: $0) }
        for f in each {
            for (cell, v) in f.cells { out[cell, default: ReportValues()].add(v) }
            for (k, c) in f.cohorts {
                cohorts[k, default: CohortCount()].members += c.members
                cohorts[k, default: CohortCount()].retained += c.retained
            }
        }
        return (out.filter { !$0.value.isZero }, cohorts)
    }

    /// Retention as the report shows it: per cohort month (summed over dimensions), members and the
    /// share still paid-active at the end of each month that ended by `to` (four decimals, half up).
    public static func retention(_ cohorts: [CohortKey: CohortCount], to: ReportDay) -> [String: (members: Int64, shares: [String])] {
        var members: [ReportDay: Int64] = [:], retained: [ReportDay: [Int: Int64]] = [:]
        for (k, c) in cohorts where k.cohort.monthStart(adding: Int64(k.monthsLater)).monthEnd <= to {
            if k.monthsLater == 0 { members[k.cohort, default: 0] += c.members }
            retained[k.cohort, default: [:]][k.monthsLater, default: 0] += c.retained
        }
        var out: [String: (Int64, [String])] = [:]
        for (cohort, n) in members {
            let months = (retained[cohort] ?? [:]).keys.max().map { $0 + 1 } ?? 0
            out[cohort.monthText] = (n, (0..<months).map { share(retained[cohort]?[$0] ?? 0, of: n) })
        }
        return out
    }

    /// `part / whole` to four decimals, rounded half up (with Foundation's decimal arithmetic, not
    /// the ledger's integer rule).
    public static func share(_ part: Int64, of whole: Int64) -> String {
        var value = Decimal(part) / Decimal(whole)
        var rounded = Decimal()
        NSDecimalRound(&rounded, &value, 4, .plain)
        let text = "\(rounded)"
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        let fraction = parts.count > 1 ? String(parts[1]) : ""
        return String(parts[0]) + "." + fraction + String(repeating: "0", count: 4 - fraction.count)
    }

    /// Cohort membership from a subscription's first paid day: one member of the cohort of that
    /// month, retained each month whose last day it is paid-active on (24 months followed).
    static func cohorts(firstPaid: Int64?, dims: ReportDimensions?, paid: (Int64) -> Bool) -> [CohortKey: CohortCount] {
        guard let firstPaid, let dims else { return [:] }
        let cohort = ReportDay(index: firstPaid).monthStart
        var out: [CohortKey: CohortCount] = [:]
        for n in 0..<24 {
            let monthEnd = cohort.monthStart(adding: Int64(n)).monthEnd
            out[CohortKey(cohort: cohort, dimensions: dims, monthsLater: n)] = CohortCount(members: 1, retained: paid(monthEnd.index) ? 1 : 0)
        }
        return out
    }

    /// A paid period's revenue, straight line by time in plain Int64 (the simulators' prices × a
    /// year in ms fit): each day's recognised part and the deferred balance at its end.
    static func recognise(price: Int64, start: EpochMillis, end: EpochMillis, refundedAt r: EpochMillis?, share: Int64,
                          replacedAt: EpochMillis?, _ add: (ReportMetric, Int64, EpochMillis) -> Void) {
        func earned(_ t: EpochMillis) -> Int64 {
            let until = min(t, replacedAt ?? t)
            return until <= start ? 0 : until >= end ? price : price * (until - start) / (end - start)
        }
        var previous: Int64 = 0
        var d = start / dayMs
        let lastDay = max(((replacedAt ?? end) - 1) / dayMs, r.map { $0 / dayMs } ?? .min)
        while d <= lastDay {
            let dayEnd = (d + 1) * dayMs
            var e = earned(dayEnd)
            var paidSoFar = replacedAt.map { $0 <= dayEnd } == true ? e : price
            if let r, r < dayEnd {
                e -= e * share / 100_000
                paidSoFar -= price * share / 100_000
            }
            add(.recognisedRevenue, e - previous, dayEnd - 1)
            add(.deferredRevenue, paidSoFar - e, dayEnd - 1)
            previous = e
            d += 1
        }
    }

    struct Snapshot {
        var signed: EpochMillis
        var tx: AppleTransaction
    }

    /// One lifecycle's cells.
    public static func cells(of l: SimulatedLifecycle) -> [ReportCell: ReportValues] { figures(of: l).cells }

    /// One Apple lifecycle's cells and cohort.
    public static func figures(of l: SimulatedLifecycle) -> (cells: [ReportCell: ReportValues], cohorts: [CohortKey: CohortCount]) {
        var seen = Set<String>()
        let notes = l.notifications.filter { seen.insert($0.notificationUUID).inserted }.sorted { $0.signedDate < $1.signedDate }
        guard let env = notes.first?.environment else { return ([:], [:]) }
        var history: [String: [Snapshot]] = [:]
        for n in notes { history[n.transaction.transactionId!, default: []].append(Snapshot(signed: n.signedDate, tx: n.transaction)) }
        // Same purchase instant: Apple's transaction ids are increasing numbers, so the shorter is the
        // earlier. Left to the dictionary's order, the model's answer changed from process to process.
        let finals = history.values.map { $0.last!.tx }.sorted {
            ($0.purchaseDate!.millis, $0.transactionId!.count, $0.transactionId!) < ($1.purchaseDate!.millis, $1.transactionId!.count, $1.transactionId!)
        }
        var out: [ReportCell: ReportValues] = [:]
        func dims(_ product: String?, _ tx: AppleTransaction) -> ReportDimensions {
            ReportDimensions(environment: env, source: .apple, product: product ?? "unknown",
                             currency: tx.price == nil ? ReportDimensions.noPrice : (tx.currency ?? ReportDimensions.noPrice))
        }
        func add(_ m: ReportMetric, _ v: Int64, _ t: EpochMillis, _ product: String?, _ tx: AppleTransaction) {
            guard v != 0 else { return }
            let day = ReportDay(index: t >= 0 ? t / dayMs : (t - dayMs + 1) / dayMs)
            out[ReportCell(day: day, dimensions: dims(product, tx)), default: ReportValues()][m] += v
        }
        func isTrial(_ tx: AppleTransaction) -> Bool { tx.offerType == 1 && tx.price == 0 }

        // Status at the last millisecond of each day, as the App Store's statements say it.
        func revoked(_ id: String, at t: EpochMillis) -> Bool {
            guard let s = history[id]?.last(where: { $0.signed <= t }), let r = s.tx.revocationDate?.millis else { return false }
            return r <= t
        }
        enum Status { case active, trial, grace, retry, revoked, expired }
        func status(at t: EpochMillis) -> (Status, AppleTransaction, AppleRenewalInfo?)? {
            guard let tx = finals.last(where: { $0.purchaseDate!.millis <= t }) else { return nil }
            let renewal = notes.last { $0.signedDate <= t }?.renewal
            if revoked(tx.transactionId!, at: t) { return (.revoked, tx, renewal) }
            let e = tx.expiresDate!.millis
            if t < e { return (isTrial(tx) ? .trial : .active, tx, renewal) }
            // A trial in grace is still a trial (peers count in-grace trials as trials until they convert).
            if let g = renewal?.gracePeriodExpiresDate?.millis, g > e, t < g { return (isTrial(tx) ? .trial : .grace, tx, renewal) }
            if renewal?.isInBillingRetryPeriod == true, t < e + retryLimit { return (.retry, tx, renewal) }
            return (.expired, tx, renewal)
        }

        let first = finals.first!.purchaseDate!.millis / dayMs
        let last = (max(l.end, finals.map { $0.expiresDate!.millis }.max()!) + retryLimit) / dayMs + 2
        var prevPaid = false
        var prevTx: AppleTransaction?
        var everPaid = false
        var runStarts = Set<Int64>()
        var paidDays = Set<Int64>()
        var firstPaid: (day: Int64, dims: ReportDimensions)?
        for d in first...last {
            let t = (d + 1) * dayMs - 1
            guard let (s, tx, renewal) = status(at: t) else { continue }
            let paid = s == .active || s == .grace
            if paid {
                paidDays.insert(d)
                if firstPaid == nil { firstPaid = (d, dims(tx.productId, tx)) }
            }
            if paid { add(.active, 1, t, tx.productId, tx) }
            if s == .grace { add(.grace, 1, t, tx.productId, tx) }
            if s == .trial { add(.trial, 1, t, tx.productId, tx) }
            if s == .retry { add(.billingRetry, 1, t, tx.productId, tx) }
            if paid && !prevPaid {
                add(everPaid ? .reactivated : .new, 1, t, tx.productId, tx)
                runStarts.insert(d)
                everPaid = true
            }
            if prevPaid && !paid && s != .trial, let from = prevTx {
                let reason: ReportMetric = s == .revoked ? .churnedRefund
                    : (s == .retry || renewal?.expirationIntent == 2) ? .churnedBilling : .churnedVoluntary
                add(.churned, 1, t, from.productId, from)
                add(reason, 1, t, from.productId, from)
            }
            if s != .trial { prevPaid = paid }
            if paid { prevTx = tx }
        }

        // Money and per-period movements, from each transaction's last statement.
        for (i, tx) in finals.enumerated() {
            let p = tx.purchaseDate!.millis
            guard let price = tx.price else {
                // Counted, never priced: its refund is a refund of an unknown amount.
                add(.noPrice, 1, p, tx.productId, tx)
                if let r = tx.revocationDate?.millis { add(.refunds, 1, r, tx.productId, tx) }
                continue
            }
            let paidPeriod = !isTrial(tx)
            if paidPeriod { add(.grossRevenue, price, p, tx.productId, tx) }
            func replaces(_ a: AppleTransaction, _ b: AppleTransaction) -> Bool {
                let bp = b.purchaseDate!.millis
                return bp < a.expiresDate!.millis && a.productId != b.productId && (a.revocationDate.map { $0.millis > bp } ?? true)
            }
            if i > 0 {
                let prev = finals[i - 1]
                if replaces(prev, tx) {
                    add(.upgrades, 1, p, tx.productId, tx)
                } else if paidPeriod && !runStarts.contains(p / dayMs) {
                    add(.renewed, 1, p, tx.productId, tx)
                    if !isTrial(prev) && prev.productId != tx.productId { add(.downgrades, 1, p, tx.productId, tx) }
                }
            }
            let share = Int64(tx.revocationPercentage ?? 100_000)
            let r = tx.revocationDate?.millis
            if let r {
                add(.refunds, 1, r, tx.productId, tx)
                add(.refundAmount, price * share / 100_000, r, tx.productId, tx)
            } else if let h = history[tx.transactionId!], let lastRefund = h.lastIndex(where: { $0.tx.revocationDate != nil }),
                      let reversal = h[(lastRefund + 1)...].first(where: { $0.tx.revocationDate == nil }) {
                add(.reversals, 1, reversal.signed, tx.productId, tx)
            }
            guard paidPeriod, price > 0 else { continue }
            let replacedAt = i + 1 < finals.count && replaces(tx, finals[i + 1]) ? finals[i + 1].purchaseDate!.millis : nil
            recognise(price: price, start: p, end: tx.expiresDate!.millis, refundedAt: r, share: share, replacedAt: replacedAt) { m, v, t in
                add(m, v, t, tx.productId, tx)
            }
        }
        return (out, cohorts(firstPaid: firstPaid?.day, dims: firstPaid?.dims) { paidDays.contains($0) })
    }

    /// One WeChat subscriber's cells and cohort, from the simulated WeChat's orders: each order is
    /// paid from its PaidTime to its RenewalDate at its ActualPrice (fen; milliunits are fen × 10),
    /// the order in effect at T is the latest-ending one paid by T, a refund revokes its order in
    /// full at RefundSuccTimestamp. WeChat has no trials, grace or billing retry in this simulation.
    public static func figures(ofWeChat l: WeChatSimulatedLifecycle) -> (cells: [ReportCell: ReportValues], cohorts: [CohortKey: CohortCount]) {
        let orders = l.orders.filter { $0.paid < l.end }.sorted { $0.paid < $1.paid }
        guard let firstOrder = orders.first else { return ([:], [:]) }
        var out: [ReportCell: ReportValues] = [:]
        func dims(_ o: WeChatSimulatedOrder) -> ReportDimensions {
            ReportDimensions(environment: "Production", source: .wechat, product: o.productId, currency: "CNY")
        }
        func add(_ m: ReportMetric, _ v: Int64, _ t: EpochMillis, _ o: WeChatSimulatedOrder) {
            guard v != 0 else { return }
            out[ReportCell(day: ReportDay(index: t / dayMs), dimensions: dims(o)), default: ReportValues()][m] += v
        }
        func inEffect(_ t: EpochMillis) -> WeChatSimulatedOrder? {
            orders.filter { $0.paid <= t }.max { $0.renewalDate < $1.renewalDate }
        }
        var prevPaid = false, everPaid = false
        var prevOrder: WeChatSimulatedOrder?
        var runStarts = Set<Int64>(), paidDays = Set<Int64>()
        var firstPaid: (day: Int64, dims: ReportDimensions)?
        let last = (max(l.end, orders.map(\.renewalDate).max()!) + retryLimit) / dayMs + 2
        for d in (firstOrder.paid / dayMs)...last {
            let t = (d + 1) * dayMs - 1
            guard let o = inEffect(t) else { continue }
            let revoked = o.refundedAt.map { $0 <= t } ?? false
            let paid = !revoked && t < o.renewalDate
            if paid {
                add(.active, 1, t, o)
                paidDays.insert(d)
                if firstPaid == nil { firstPaid = (d, dims(o)) }
                if !prevPaid {
                    add(everPaid ? .reactivated : .new, 1, t, o)
                    runStarts.insert(d)
                    everPaid = true
                }
            } else if prevPaid, let from = prevOrder {
                add(.churned, 1, t, from)
                add(revoked ? .churnedRefund : .churnedVoluntary, 1, t, from)
            }
            prevPaid = paid
            if paid { prevOrder = o }
        }
        for (i, o) in orders.enumerated() {
            let price = o.priceFen * 10
            add(.grossRevenue, price, o.paid, o)
            if i > 0, !runStarts.contains(o.paid / dayMs) {
                add(.renewed, 1, o.paid, o)
                if orders[i - 1].productId != o.productId { add(.downgrades, 1, o.paid, o) }
            }
            let r = o.refundedAt.flatMap { $0 < l.end ? $0 : nil }
            if let r {
                add(.refunds, 1, r, o)
                add(.refundAmount, price, r, o)
            }
            recognise(price: price, start: o.paid, end: o.renewalDate, refundedAt: r, share: 100_000, replacedAt: nil) { m, v, t in
                add(m, v, t, o)
            }
        }
        return (out, cohorts(firstPaid: firstPaid?.day, dims: firstPaid?.dims) { paidDays.contains($0) })
    }
}
