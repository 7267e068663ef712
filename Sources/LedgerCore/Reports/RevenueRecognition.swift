/// Revenue recognition of one paid period, straight line by time (ASC 606 / IFRS 15: a subscription
/// is a performance obligation satisfied over time; what is paid and not yet earned is deferred
/// revenue, a contract liability). README "Charts and revenue" cites the sources.
///
/// - By the end of each day the period has earned `price × elapsed / duration` (integer
///   milliunits, rounded down; the last day earns the remainder, so the days sum to the price).
/// - A refund of share `p` at R reverses, on R's day, `p` of what was recognised so far, and from
///   then on only `(1 − p)` of each later day is earned: a full refund (p = 1) takes back everything
///   recognised for the period on the day the refund happened, earlier days are not rewritten, and
///   the deferred balance drops to zero. A prorated refund reverses its proportion.
public enum RevenueRecognition {
    /// One day of a period: revenue recognised that day (negative on a refund's day when it takes
    /// back more than the day earns) and the deferred balance at its end.
    public struct Day: Sendable, Hashable {
        public var day: ReportDay
        public var recognised: Int64
        public var deferred: Int64
    }

    /// 100 % in Apple's milli-percent (`revocationPercentage`).
    public static let whole: Int64 = 100_000

    /// `price × elapsed / duration` without overflow (a year in ms times a large price exceeds Int64).
    static func earned(price: Int64, start: EpochMillis, end: EpochMillis, through t: EpochMillis) -> Int64 {
        let elapsed = t - start
        if elapsed <= 0 { return 0 }
        let duration = end - start
        if elapsed >= duration { return price }
        let product = price.multipliedFullWidth(by: elapsed)
        return duration.dividingFullWidth(product).quotient
    }

    /// The part of `price` a refund of `share` milli-percent returns (nil share: a full refund).
    public static func refunded(price: Int64, share: Int64?) -> Int64 {
        let s = min(max(share ?? whole, 0), whole)
        return price * s / whole
    }

    /// Every day from the period's first to the later of its last and the refund's day. Empty for
    /// a period without a positive price or with end ≤ start (nothing to spread).
    ///
    /// `replacedAt`: an upgrade replaced the period then (Apple upgrades at once and refunds the
    /// prorated rest of the old period): it is earned up to that instant and nothing after, and
    /// the unearned rest leaves deferred revenue on that day.
    public static func schedule(price: Int64, start: EpochMillis, end: EpochMillis,
                                refundedAt: EpochMillis? = nil, refundShare: Int64? = nil,
                                replacedAt: EpochMillis? = nil) -> [Day] {
        guard price > 0, end > start else { return [] }
        let share = min(max(refundShare ?? whole, 0), whole)
        let first = ReportDay(containing: start)
        let replaced = replacedAt.flatMap { $0 > start && $0 < end ? $0 : nil }
        var last = ReportDay(containing: (replaced ?? end) - 1)
        if let r = refundedAt { last = max(last, ReportDay(containing: r)) }
        var out: [Day] = []
        out.reserveCapacity(Int(last.index - first.index + 1))
        var previous: Int64 = 0
        var day = first
        while day <= last {
            let t = day.lastMillisecond + 1
            var earned = Self.earned(price: price, start: start, end: end, through: min(t, replaced ?? t))
            var paid = price
            if let u = replaced, u <= t { paid = earned }
            if let r = refundedAt, r <= day.lastMillisecond {
                earned -= earned * share / whole
                paid -= price * share / whole
            }
            out.append(Day(day: day, recognised: earned - previous, deferred: paid - earned))
            previous = earned
            day = day.adding(days: 1)
        }
        return out
    }
}
