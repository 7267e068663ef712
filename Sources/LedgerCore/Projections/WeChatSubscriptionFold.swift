import Foundation

/// The WeChat xpay facts of one subscription (one OriginalTransactionId), folded so that the same
/// set of facts gives the same state in any order and a fact seen twice changes nothing.
///
/// Why not the Apple merge: a WeChat refund notify names only an order and carries none of the
/// period's fields, so a per-transaction "latest snapshot wins" would replace the period by a
/// bare refund. Here the facts are kept as a set (duplicates collapse: position and recordedAt
/// are not content) and every answer is computed from the whole set:
/// - contract fields (productId, autoRenewStatus, openid, environment) come from the fact with the
///   greatest version (RenewalDate, signedDate), content breaking exact ties — DESIGN.md §Ordering
///   with RenewalDate as the expiry; an older message never moves them back;
/// - `expiresDate` = `renewalDate` = the latest RenewalDate of any signing, delivery or unsigning;
///   the subscription is active before it and expired from it (no grace or billing retry on WeChat);
/// - the current period is paid by the deliveries whose RenewalDate is that latest one; when every
///   one of them has a successful refund (matched by MchOrderId or WxOrderId = OutTradeNo), the
///   subscription is revoked from the (latest) refund time. A refund of an earlier period marks
///   only that period's transaction. A signing whose first delivery has not arrived yet has no
///   order to refund, so it cannot be revoked until the delivery arrives.
public struct WeChatSubscriptionFold: Sendable {
    public let originalTransactionId: String
    /// Every fact with position and recordedAt cleared: a re-push is the same element.
    private var facts: Set<SubscriptionFact> = []

    public init(originalTransactionId: String) {
        self.originalTransactionId = originalTransactionId
    }

    public init(originalTransactionId: String, facts: some Sequence<SubscriptionFact>) {
        self.init(originalTransactionId: originalTransactionId)
        for f in facts { apply(f) }
    }

    /// Folds one WeChat fact of this subscription; others are ignored.
    public mutating func apply(_ fact: SubscriptionFact) {
        guard fact.source.isWeChat, fact.originalTransactionId == originalTransactionId else { return }
        var content = fact
        (content.position, content.recordedAt) = (0, 0)
        facts.insert(content)
    }

    /// True when no signing, delivery or unsigning has been folded (refund outcomes alone describe
    /// no subscription).
    public var isEmpty: Bool { !facts.contains { $0.source != .wechatRefundOutcome } }

    /// Facts that say something about the contract: signing, delivery, unsigning.
    private var contractFacts: [SubscriptionFact] { facts.filter { $0.source != .wechatRefundOutcome } }

    /// The latest version of the contract, or nil with no contract fact.
    public var head: SubscriptionFact? { contractFacts.max(by: Self.versionPrecedes) }

    /// The end of the latest known period: the greatest RenewalDate.
    public var latestRenewalDate: EpochMillis? {
        contractFacts.compactMap(Self.periodEnd).max()
    }

    /// One delivery per order: re-pushes are identical; should two differ, the later-signed
    /// (then content) wins.
    private var deliveries: [String: SubscriptionFact] {
        var byOrder: [String: SubscriptionFact] = [:]
        for f in facts where f.source == .wechatPeriodDelivered {
            guard let id = f.transaction?.transactionId else { continue }
            if let current = byOrder[id], !Self.signedPrecedes(current, f) { continue }
            byOrder[id] = f
        }
        return byOrder
    }

    /// Successful refunds per order id they name (both MchOrderId and WxOrderId).
    private var successfulRefunds: [String: [SubscriptionFact]] {
        var byOrder: [String: [SubscriptionFact]] = [:]
        for f in facts where f.source == .wechatRefundOutcome && f.transaction?.revocationDate != nil {
            for id in Set(f.refundOrderIds) { byOrder[id, default: []].append(f) }
        }
        return byOrder
    }

    /// When the order's refund took effect: the earliest successful refund naming it.
    private func refundTime(of order: String, in refunds: [String: [SubscriptionFact]]) -> EpochMillis? {
        refunds[order]?.compactMap { $0.transaction?.revocationDate }.min()
    }

    /// When the current period was revoked (every delivery paying it refunded), else nil.
    public var currentPeriodRevokedAt: EpochMillis? {
        guard let end = latestRenewalDate else { return nil }
        let refunds = successfulRefunds
        let paying = deliveries.values.filter { $0.transaction?.expiresDate == end }
        guard !paying.isEmpty else { return nil }
        var latest: EpochMillis = .min
        for d in paying {
            guard let t = refundTime(of: d.transaction!.transactionId, in: refunds) else { return nil }
            latest = max(latest, t)
        }
        return latest
    }

    /// The subscription as the Apple fold describes it, status evaluated at `asOf`; nil when no
    /// contract fact has been folded.
    public func state(at asOf: EpochMillis) -> SubscriptionState? {
        let contract = contractFacts
        guard let head = contract.max(by: Self.versionPrecedes) else { return nil }
        let byVersion = contract.sorted { Self.versionPrecedes($1, $0) }
        let end = contract.compactMap(Self.periodEnd).max()
        let status: SubscriptionStatus
        if let revoked = currentPeriodRevokedAt, revoked <= asOf {
            status = .revoked
        } else if let end, asOf < end {
            status = .active
        } else {
            status = .expired
        }
        let productId = byVersion.lazy.compactMap { $0.renewal?.productId ?? $0.transaction?.productId }.first
        let openId = byVersion.lazy.compactMap(\.openId).first
        let latestDelivery = deliveries.values.max(by: Self.versionPrecedes)
        return SubscriptionState(
            originalTransactionId: originalTransactionId,
            evaluatedAt: asOf,
            status: status,
            environment: byVersion.lazy.compactMap(\.environment).first,
            productId: productId,
            autoRenewProductId: productId,
            expiresDate: end,
            autoRenewStatus: head.renewal?.autoRenewStatus,
            customerId: openId,
            latestTransactionId: latestDelivery?.transaction?.transactionId,
            recentSubscriptionStartDate: recentSubscriptionStartDate,
            renewalDate: end,
            versionExpiresDate: Self.periodEnd(head),
            versionSignedDate: head.signedDate
        )
    }

    /// Apple's "earliest start of the run of paid periods, ignoring lapses of 60 days or less":
    /// the start of the last run of periods (signing: SignedTime → RenewalDate; delivery: paid →
    /// RenewalDate) whose gaps are at most 60 days.
    public var recentSubscriptionStartDate: EpochMillis? {
        let periods = contractFacts.compactMap { f -> (EpochMillis, EpochMillis)? in
            guard f.source != .wechatContractTerminated, let end = Self.periodEnd(f) else { return nil }
            return (min(f.transaction?.purchaseDate ?? f.signedDate, end), end)
        }.sorted { $0 < $1 }
        guard var runStart = periods.first?.0, var runEnd = periods.first?.1 else { return nil }
        for (start, end) in periods.dropFirst() {
            if start > runEnd && start - runEnd > SubscriptionFold.billingRetryLimit { runStart = start }
            runEnd = max(runEnd, end)
        }
        return runStart
    }

    /// One record per delivered order (the period it paid), with its refund when one succeeded.
    public var transactions: [TransactionRecord] {
        let refunds = successfulRefunds
        let allRefunds = Dictionary(grouping: facts.filter { $0.source == .wechatRefundOutcome }.flatMap { f in
            Set(f.refundOrderIds).map { ($0, f) }
        }, by: \.0)
        return deliveries.values.map { d -> TransactionRecord in
            let tx = d.transaction!
            let revokedAt = refundTime(of: tx.transactionId, in: refunds)
            return TransactionRecord(
                transactionId: tx.transactionId, originalTransactionId: originalTransactionId,
                productId: tx.productId, purchaseDate: tx.purchaseDate, expiresDate: tx.expiresDate,
                revocationDate: revokedAt, revocationType: revokedAt == nil ? nil : "REFUND",
                refundSignedDate: allRefunds[tx.transactionId]?.map(\.1.signedDate).max(),
                price: tx.price, currency: tx.currency, environment: tx.environment ?? d.environment,
                type: tx.type, inAppOwnershipType: tx.inAppOwnershipType, signedDate: tx.signedDate ?? d.signedDate)
        }.sorted { ($0.purchaseDate ?? .min, $0.transactionId) < ($1.purchaseDate ?? .min, $1.transactionId) }
    }

    // MARK: - Orders

    static func periodEnd(_ f: SubscriptionFact) -> EpochMillis? {
        f.renewal?.renewalDate ?? f.transaction?.expiresDate
    }

    /// Contract version: (RenewalDate, signedDate), then content.
    static func versionPrecedes(_ a: SubscriptionFact, _ b: SubscriptionFact) -> Bool {
        let ea = periodEnd(a) ?? .min, eb = periodEnd(b) ?? .min
        if ea != eb { return ea < eb }
        return signedPrecedes(a, b)
    }

    static func signedPrecedes(_ a: SubscriptionFact, _ b: SubscriptionFact) -> Bool {
        if a.signedDate != b.signedDate { return a.signedDate < b.signedDate }
        return a.contentPrecedes(b)
    }
}
