import Foundation

extension SubscriptionState {
    /// The same state with its status evaluated at `time` instead of `evaluatedAt`.
    ///
    /// A stored state goes stale without any event: it expires, or leaves its grace period, as
    /// time passes. The status rule (`SubscriptionFold.status`) needs only the revocation in
    /// force, the expiry, the grace end and the retry flag, which the state carries, so a reader
    /// of the projection tables gets exactly what folding the events again and evaluating at
    /// `time` would give — as long as no event arrived since the fold.
    public func reevaluated(at time: EpochMillis) -> SubscriptionState {
        var renewal = RenewalFact()
        renewal.gracePeriodExpiresDate = gracePeriodExpiresDate
        renewal.isInBillingRetryPeriod = isInBillingRetryPeriod
        var copy = self
        copy.evaluatedAt = time
        copy.status = SubscriptionFold.status(
            hasTransaction: latestTransactionId != nil, revokedAt: revocationDate,
            expires: expiresDate, renewal: renewal, asOf: time)
        return copy
    }
}
