import Foundation

extension SubscriptionState {
    /// The same state with its status evaluated at `time` instead of `evaluatedAt`.
    ///
    /// A stored state goes stale without any event: it expires, or leaves its grace period, as
    /// time passes. The status rule (`SubscriptionFold.status`) needs only the product type, the
    /// revocation in force, the expiry, the grace end and the retry flag, which the state carries,
    /// so a reader of the projection tables gets exactly what folding the facts again and
    /// evaluating at `time` would give — as long as no event arrived since the fold and `time` is
    /// before `validUntil` (`needsRefold(at:)` says when it is not).
    public func reevaluated(at time: EpochMillis) -> SubscriptionState {
        var copy = self
        copy.evaluatedAt = time
        copy.status = SubscriptionFold.status(
            productType: productType, revokedAt: revocationDate, expires: expiresDate,
            gracePeriodExpiresDate: gracePeriodExpiresDate, isInBillingRetryPeriod: isInBillingRetryPeriod, asOf: time)
        return copy
    }

    /// True when a fact already known takes effect between the fold and `time` (e.g. a renewal
    /// signed before its period started): the stored state must be folded again, not re-evaluated.
    public func needsRefold(at time: EpochMillis) -> Bool {
        guard let validUntil else { return false }
        return time >= validUntil
    }
}
