import Foundation
import LedgerCore

// The reports' oracle: each daily figure of a generated population computed straight from what
// the simulated App Store stated (the generator's notifications: each transaction as signed at
// each moment, the renewal info, `data.status`), never through `FactDecoder`, `SubscriptionFold`,
// `SubscriptionProjection` or `SubscriptionRollup`. Only the value types of the answer (ReportCell,
// ReportValues, ReportDay) are shared. The definitions are README's "Charts and revenue".

public enum ReportModel {
    private static let dayMs: EpochMillis = 86_400_000
    private static let retryLimit: EpochMillis = 60 * 86_400_000

    /// The daily cells of every lifecycle, summed.
    public static func cells(of lifecycles: [SimulatedLifecycle]) -> [ReportCell: ReportValues] {
        var out: [ReportCell: ReportValues] = [:]
        for l in lifecycles {
            for (cell, v) in cells(of: l) { out[cell, default: ReportValues()].add(v) }
        }
        return out.filter { !$0.value.isZero }
    }

    struct Snapshot {
        var signed: EpochMillis
        var tx: AppleTransaction
    }

    /// One lifecycle's cells.
    public static func cells(of l: SimulatedLifecycle) -> [ReportCell: ReportValues] {
        var seen = Set<String>()
        let notes = l.notifications.filter { seen.insert($0.notificationUUID).inserted }.sorted { $0.signedDate < $1.signedDate }
        guard let env = notes.first?.environment else { return [:] }
        var history: [String: [Snapshot]] = [:]
        for n in notes { history[n.transaction.transactionId!, default: []].append(Snapshot(signed: n.signedDate, tx: n.transaction)) }
        let finals = history.values.map { $0.last!.tx }.sorted { $0.purchaseDate!.millis < $1.purchaseDate!.millis }
        var out: [ReportCell: ReportValues] = [:]
        func add(_ m: ReportMetric, _ v: Int64, _ t: EpochMillis, _ product: String?, _ tx: AppleTransaction) {
            guard v != 0 else { return }
            let dims = ReportDimensions(environment: env, source: .apple, product: product ?? "unknown",
                                        currency: tx.price == nil ? ReportDimensions.noPrice : (tx.currency ?? ReportDimensions.noPrice))
            let day = ReportDay(index: t >= 0 ? t / dayMs : (t - dayMs + 1) / dayMs)
            out[ReportCell(day: day, dimensions: dims), default: ReportValues()][m] += v
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
        for d in first...last {
            let t = (d + 1) * dayMs - 1
            guard let (s, tx, renewal) = status(at: t) else { continue }
            let paid = s == .active || s == .grace
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
                add(.noPrice, 1, p, tx.productId, tx)
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
            // Straight line, in plain Int64 (the generator's prices × a year in ms fit).
            let start = p, end = tx.expiresDate!.millis
            let replacedAt = i + 1 < finals.count && replaces(tx, finals[i + 1]) ? finals[i + 1].purchaseDate!.millis : nil
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
                add(.recognisedRevenue, e - previous, dayEnd - 1, tx.productId, tx)
                add(.deferredRevenue, paidSoFar - e, dayEnd - 1, tx.productId, tx)
                previous = e
                d += 1
            }
        }
        return out
    }
}
