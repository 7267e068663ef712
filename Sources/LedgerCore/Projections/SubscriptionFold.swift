import Foundation

/// All facts of one subscription (one originalTransactionId), merged so that the same set of
/// facts gives the same result in any order, and a fact seen twice changes nothing.
///
/// Two merges, per DESIGN.md §Ordering:
/// - per transaction, the snapshot with the greatest (transaction signedDate, signedDate) wins
///   (purchase, expiry, revocation and its reversal); `isUpgraded` is sticky once seen;
/// - per subscription, the fact with the greatest version (transaction expiresDate, signedDate)
///   decides the subscription-level fields, skipping transactions an upgrade superseded.
/// Exact ties are broken by content, never by position or arrival.
/// Status is not stored: it is a function of the merged facts and the evaluation time,
/// because a subscription expires (or leaves grace) without any event.
public struct SubscriptionFold: Sendable {
    public let originalTransactionId: String

    /// Longest billing retry Apple runs; a retry still open after this is treated as expired
    /// even if the EXPIRED/BILLING_RETRY notification never arrives.
    public static let billingRetryLimit: EpochMillis = 60 * 86_400_000

    struct TransactionSlot: Sendable {
        /// The fact whose transaction snapshot wins the per-transaction merge.
        var snapshot: SubscriptionFact
        /// The fact carrying this transaction with the greatest subscription version.
        var head: SubscriptionFact
        var upgraded: Bool
        var refundSigned: EpochMillis?
        var reversalSigned: EpochMillis?

        mutating func merge(_ fact: SubscriptionFact, upgraded isUpgraded: Bool, refund: EpochMillis?, reversal: EpochMillis?) {
            if SubscriptionFold.snapshotPrecedes(snapshot, fact) { snapshot = fact }
            if SubscriptionFold.versionPrecedes(head, fact) { head = fact }
            if isUpgraded { upgraded = true }
            if let refund, refund > (refundSigned ?? .min) { refundSigned = refund }
            if let reversal, reversal > (reversalSigned ?? .min) { reversalSigned = reversal }
        }
    }

    private var slots: [String: TransactionSlot] = [:]
    /// Facts that carry no transaction (renewal-only sources): the latest-signed one overlays the
    /// head's renewal fields when it was signed later.
    private var renewalOnly: SubscriptionFact?
    /// The purchaseDate of the newest transaction an upgrade introduced: transactions bought
    /// before it were superseded at that moment, even if no message says `isUpgraded` for them.
    private var upgradeCutoff: EpochMillis?
    /// Every upgrade's moment (its new transaction's purchaseDate): the transaction whose period
    /// spans one of them is the one that was upgraded, whether or not a message says so.
    private var upgradeTimes: Set<EpochMillis> = []
    /// WeChat xpay facts have their own merge (a refund names only an order); see WeChatSubscriptionFold.
    /// Created on the first WeChat fact, so Apple-only folds pay nothing for it.
    private var wechat: WeChatSubscriptionFold?

    public init(originalTransactionId: String) {
        self.originalTransactionId = originalTransactionId
    }

    public init(originalTransactionId: String, facts: some Sequence<SubscriptionFact>) {
        self.init(originalTransactionId: originalTransactionId)
        for fact in facts { apply(fact) }
    }

    /// Folds one fact. Facts of other subscriptions are ignored (callers route by
    /// `originalTransactionId`; see `SubscriptionProjection`).
    public mutating func apply(_ fact: SubscriptionFact) {
        guard fact.originalTransactionId == originalTransactionId else { return }
        if fact.source.isWeChat {
            if wechat == nil { wechat = WeChatSubscriptionFold(originalTransactionId: originalTransactionId) }
            wechat!.apply(fact)
            // A contract message (no transaction) still overlays the renewal fields of a stream
            // that also has Apple transactions; WeChat orders never enter the Apple slots.
            if fact.transaction != nil { return }
        }
        guard let tx = fact.transaction else {
            if let current = renewalOnly {
                if Self.renewalPrecedes(current, fact) { renewalOnly = fact }
            } else {
                renewalOnly = fact
            }
            return
        }
        if fact.isUpgrade, let purchased = tx.purchaseDate {
            upgradeCutoff = max(upgradeCutoff ?? purchased, purchased)
            upgradeTimes.insert(purchased)
        }
        let refund = fact.isRefund ? fact.signedDate : nil
        let reversal = fact.isRefundReversal ? fact.signedDate : nil
        // Mutate in place: copying a slot (two facts) per event would dominate the rebuild.
        if let index = slots.index(forKey: tx.transactionId) {
            slots.values[index].merge(fact, upgraded: tx.isUpgraded, refund: refund, reversal: reversal)
        } else {
            slots[tx.transactionId] = TransactionSlot(
                snapshot: fact, head: fact, upgraded: tx.isUpgraded, refundSigned: refund, reversalSigned: reversal)
        }
    }

    /// True when no fact with a transaction or renewal info has been folded.
    public var isEmpty: Bool { slots.isEmpty && renewalOnly == nil && (wechat?.isEmpty ?? true) }

    /// The merged transactions, ordered by purchaseDate then transactionId.
    public var transactions: [TransactionRecord] {
        (slots.values.map(record(of:)) + (wechat?.transactions ?? []))
            .sorted { ($0.purchaseDate ?? .min, $0.transactionId) < ($1.purchaseDate ?? .min, $1.transactionId) }
    }

    public func transaction(_ transactionId: String) -> TransactionRecord? {
        slots[transactionId].map(record(of:)) ?? wechat?.transactions.first { $0.transactionId == transactionId }
    }

    /// The subscription as the merged facts describe it, with its status evaluated at `asOf`.
    /// Nil when no fact has been folded. For the state at a past time use the time-travel
    /// functions of `SubscriptionProjection`, which also leave out facts not yet signed/recorded.
    public func state(at asOf: EpochMillis) -> SubscriptionState? {
        let headSlot = currentSlot()
        if headSlot == nil, let wechat, !wechat.isEmpty { return wechat.state(at: asOf) }
        if headSlot == nil && renewalOnly == nil { return nil }
        let head = headSlot?.head
        let tx = head?.transaction
        var renewal = head?.renewal
        if let late = renewalOnly, let lateRenewal = late.renewal,
           head == nil || late.signedDate > head!.signedDate {
            renewal = Self.overlay(lateRenewal, on: renewal)
        }
        let revokedAt = headSlot.flatMap(Self.revocationInForce)
        let status = Self.status(
            hasTransaction: headSlot != nil, revokedAt: revokedAt,
            expires: tx?.expiresDate, renewal: renewal, asOf: asOf)
        let token = tx?.appAccountToken ?? headSlot?.snapshot.transaction?.appAccountToken ?? renewal?.appAccountToken
        let openId = head?.openId ?? renewalOnly?.openId
        return SubscriptionState(
            originalTransactionId: originalTransactionId,
            evaluatedAt: asOf,
            status: status,
            bundleId: tx?.bundleId ?? head?.bundleId ?? renewalOnly?.bundleId,
            environment: tx?.environment ?? head?.environment ?? renewalOnly?.environment,
            productId: tx?.productId ?? renewal?.productId,
            autoRenewProductId: renewal?.autoRenewProductId,
            expiresDate: tx?.expiresDate,
            gracePeriodExpiresDate: renewal?.gracePeriodExpiresDate,
            isInBillingRetryPeriod: renewal?.isInBillingRetryPeriod ?? false,
            autoRenewStatus: renewal?.autoRenewStatus,
            expirationIntent: renewal?.expirationIntent,
            priceIncreaseStatus: renewal?.priceIncreaseStatus,
            offerType: renewal?.offerType,
            offerIdentifier: renewal?.offerIdentifier,
            appAccountToken: token,
            customerId: token ?? openId,
            latestTransactionId: tx?.transactionId,
            recentSubscriptionStartDate: renewal?.recentSubscriptionStartDate,
            renewalDate: renewal?.renewalDate,
            versionExpiresDate: tx?.expiresDate,
            versionSignedDate: head?.signedDate,
            revocationDate: revokedAt
        )
    }

    // MARK: - Status

    /// The status rules, in order: a revocation in force wins; before expiry the subscription is
    /// active whatever auto-renew says; after expiry, a grace period still running keeps access;
    /// an open billing retry (at most 60 days) does not; otherwise it has expired.
    static func status(
        hasTransaction: Bool, revokedAt: EpochMillis?, expires: EpochMillis?, renewal: RenewalFact?, asOf: EpochMillis
    ) -> SubscriptionStatus {
        guard hasTransaction else { return .expired }
        if let revokedAt, revokedAt <= asOf { return .revoked }
        guard let expires else { return .expired }
        if asOf < expires { return .active }
        if let grace = renewal?.gracePeriodExpiresDate, grace > expires, asOf < grace { return .gracePeriod }
        if renewal?.isInBillingRetryPeriod == true,
           expires > EpochMillis.max - billingRetryLimit || asOf < expires + billingRetryLimit {
            return .billingRetry
        }
        return .expired
    }

    // MARK: - Merge orders

    /// The transaction in effect: the greatest-version head among transactions no upgrade
    /// superseded (falling back to all transactions if, against the rules, every one was).
    private func currentSlot() -> TransactionSlot? {
        var best: TransactionSlot?
        var fallback: TransactionSlot?
        for slot in slots.values {
            if fallback == nil || Self.versionPrecedes(fallback!.head, slot.head) { fallback = slot }
            if isSuperseded(slot) { continue }
            if best == nil || Self.versionPrecedes(best!.head, slot.head) { best = slot }
        }
        return best ?? fallback
    }

    private func isSuperseded(_ slot: TransactionSlot) -> Bool {
        if slot.upgraded { return true }
        guard let cutoff = upgradeCutoff else { return false }
        let purchased = slot.snapshot.transaction?.purchaseDate ?? slot.head.transaction?.purchaseDate ?? .min
        return purchased < cutoff
    }

    /// Subscription version: (transaction expiresDate, signedDate), then content.
    static func versionPrecedes(_ a: SubscriptionFact, _ b: SubscriptionFact) -> Bool {
        let ea = a.transaction?.expiresDate ?? .min
        let eb = b.transaction?.expiresDate ?? .min
        if ea != eb { return ea < eb }
        if a.signedDate != b.signedDate { return a.signedDate < b.signedDate }
        return a.contentPrecedes(b)
    }

    /// Per-transaction merge: (transaction signedDate, notification signedDate), then content.
    static func snapshotPrecedes(_ a: SubscriptionFact, _ b: SubscriptionFact) -> Bool {
        let sa = a.transaction?.signedDate ?? a.signedDate
        let sb = b.transaction?.signedDate ?? b.signedDate
        if sa != sb { return sa < sb }
        if a.signedDate != b.signedDate { return a.signedDate < b.signedDate }
        return a.contentPrecedes(b)
    }

    static func renewalPrecedes(_ a: SubscriptionFact, _ b: SubscriptionFact) -> Bool {
        if a.signedDate != b.signedDate { return a.signedDate < b.signedDate }
        return a.contentPrecedes(b)
    }

    private static func overlay(_ top: RenewalFact, on base: RenewalFact?) -> RenewalFact {
        guard var merged = base else { return top }
        if let v = top.productId { merged.productId = v }
        if let v = top.autoRenewProductId { merged.autoRenewProductId = v }
        if let v = top.autoRenewStatus { merged.autoRenewStatus = v }
        if let v = top.expirationIntent { merged.expirationIntent = v }
        if let v = top.isInBillingRetryPeriod { merged.isInBillingRetryPeriod = v }
        if let v = top.gracePeriodExpiresDate { merged.gracePeriodExpiresDate = v }
        if let v = top.priceIncreaseStatus { merged.priceIncreaseStatus = v }
        if let v = top.offerType { merged.offerType = v }
        if let v = top.offerIdentifier { merged.offerIdentifier = v }
        if let v = top.recentSubscriptionStartDate { merged.recentSubscriptionStartDate = v }
        if let v = top.renewalDate { merged.renewalDate = v }
        if let v = top.appAccountToken { merged.appAccountToken = v }
        if let v = top.signedDate { merged.signedDate = v }
        return merged
    }

    /// The revocation date of the transaction's winning snapshot, unless that snapshot is a
    /// reversal: a reversal reinstates the transaction even if it still lists the revocation.
    static func revocationInForce(_ slot: TransactionSlot) -> EpochMillis? {
        slot.snapshot.isRefundReversal ? nil : slot.snapshot.transaction?.revocationDate
    }

    private func wasUpgraded(_ slot: TransactionSlot) -> Bool {
        if slot.upgraded { return true }
        guard !upgradeTimes.isEmpty, let tx = slot.snapshot.transaction,
              let purchased = tx.purchaseDate, let expires = tx.expiresDate else { return false }
        return upgradeTimes.contains { purchased < $0 && $0 < expires }
    }

    private func record(of slot: TransactionSlot) -> TransactionRecord {
        let fact = slot.snapshot
        let tx = fact.transaction!
        let revoked = Self.revocationInForce(slot) != nil
        return TransactionRecord(
            transactionId: tx.transactionId,
            originalTransactionId: tx.originalTransactionId ?? originalTransactionId,
            webOrderLineItemId: tx.webOrderLineItemId,
            bundleId: tx.bundleId ?? fact.bundleId,
            productId: tx.productId,
            purchaseDate: tx.purchaseDate,
            expiresDate: tx.expiresDate,
            revocationDate: revoked ? tx.revocationDate : nil,
            revocationReason: revoked ? tx.revocationReason : nil,
            revocationType: revoked ? tx.revocationType : nil,
            revocationPercentage: revoked ? tx.revocationPercentage : nil,
            refundSignedDate: slot.refundSigned,
            refundReversedSignedDate: slot.reversalSigned,
            isUpgraded: wasUpgraded(slot),
            price: tx.price,
            currency: tx.currency,
            offerType: tx.offerType,
            offerIdentifier: tx.offerIdentifier,
            appAccountToken: tx.appAccountToken,
            environment: tx.environment ?? fact.environment,
            type: tx.type,
            inAppOwnershipType: tx.inAppOwnershipType,
            signedDate: tx.signedDate ?? fact.signedDate
        )
    }
}
