import Foundation

/// Every fact about one subscription (one `SubscriptionKey`), merged so that the same set of facts
/// gives the same answer in any order, a fact seen twice changes nothing, and the answer can be
/// asked for any evaluation time (docs/projections.md states the rules with examples):
///
/// - **Transactions.** Per transactionId the snapshot signed last wins (ties: content);
///   `isUpgraded` is sticky once any snapshot says it.
/// - **The transaction in effect at T** is the latest-purchased transaction with purchaseDate ≤ T
///   that no transaction superseded by T (an upgrade: Apple marks the replaced one `isUpgraded`; it
///   is out of effect from the upgrade's purchase; a renewal of the old product Apple charged in
///   the 24 hours before the upgrade is out of effect altogether — `supersession()`). Ties on
///   purchaseDate go to the greater transactionId as a number (`TransactionIdOrder`).
///   A renewal signed before its period starts takes effect at its purchaseDate; a resubscription
///   after a refund is in effect from its purchase, whatever the refunded period's expiry.
/// - **V1 never outranks Apple's signature.** Per transaction a V2 or App Store API snapshot beats
///   any V1 one; a V1 renewal state counts only while no signed one is in effect; a transaction only
///   V1 states is never in effect after the latest signed transaction's purchase; a V1 cancellation
///   does not revoke a transaction Apple signed. At one V1 business time, a renewal-state message
///   (DID_FAIL_TO_RENEW, DID_CHANGE_RENEWAL_PREF, …) outranks the purchase it shares the time with.
/// - **Revocations.** A transaction is revoked at T iff the latest revocation naming it that is in
///   effect at T (revocationDate ≤ T) was signed later than the latest reversal signed by T. If the
///   transaction in effect is revoked, the subscription is `revoked`: an older, unexpired period
///   does not take over.
/// - **Renewal info** (auto-renew, pending product, grace, retry, expiration intent, offers) is the
///   snapshot signed last by T, taken whole from whichever message carried it, so fields can clear.
///   WeChat's renewal state ranks by (RenewalDate, contract change over delivery, signed time): a
///   delivery never outranks a signing or unsigning of the same period. WeChat's answer to the
///   ledger's `query_subscribe_contract` (unsigned, timed when asked) is a contract change that
///   overrides every push statement older than it, and none newer.
/// - **WeChat periods.** A delivery is a paid order (transaction) from its PaidTime to its
///   RenewalDate; without PaidTime (expected for Apple payments) from the end of the period before
///   it (the latest RenewalDate of another period, or the SignedTime of a signing of its period,
///   before its RenewalDate) — never from CreateTime, the send time, unless nothing else bounds it —
///   and never earlier than its RenewalDate minus the product's longest period (after a lapse the
///   period before it ended long ago). An unsigning outranks every delivery charged before it.
///   Deliveries are per-order facts, not versions of each other: the period in effect at T is the
///   one begun by T with the latest RenewalDate. A signing whose period no delivery has paid yet
///   counts as a period from its SignedTime (WeChat opens the benefit on signing), and a contract
///   answer naming a period end no push states counts as a period (a renewal the ledger missed).
///   Refunds name orders; they reach the subscription through the order's ids (OutTradeNo,
///   MchOrderNo, TransactionId, WxOrderId, and the ledger's links).
/// - **Customer.** The latest explicit tie (`customer_tie`, by recording time) wins; else the
///   appAccountToken of the transaction in effect (else of the renewal info, else of any
///   transaction); else the WeChat openid.
/// - **One-time purchases** (ONE_TIME_CHARGE): a non-consumable is `active` without expiry until
///   revoked; a consumable or non-renewing purchase is `purchased` (nothing lasting).
public struct SubscriptionFold: Sendable {
    public let key: SubscriptionKey

    /// Longest billing retry Apple runs; a retry still open after this is treated as expired
    /// even if the EXPIRED/BILLING_RETRY notification never arrives.
    public static let billingRetryLimit: EpochMillis = 60 * 86_400_000

    struct Slot: Sendable {
        var snapshot: Fact
        var upgraded: Bool
        /// Some snapshot of it came with DID_CHANGE_RENEWAL_PREF/UPGRADE: it is the new
        /// transaction of an upgrade (sticky, like `upgraded`).
        var statedUpgrade: Bool = false
        var purchaseDate: EpochMillis { snapshot.effectiveAt }
        var transaction: TransactionFact { snapshot.transaction! }
    }

    private var slots: [String: Slot] = [:]
    /// Every slot's (purchaseDate, transactionId), in the order of `purchasePrecedes`: the
    /// transaction in effect at T and the next purchase after T are found by halving, so a walk
    /// over a long history's states (reports, webhooks) does not scan every transaction per state.
    private var slotOrder: [SlotPlace] = []
    /// Some transaction folded states an appAccountToken (else no slot can give one).
    private var anyToken = false
    /// Some transaction is upgraded or an upgrade: only then is `supersession` worked out.
    private var hasUpgrades = false
    /// The latest purchaseDate of a transaction Apple signed (V2 notification, App Store API): a
    /// transaction only V1 states (unsigned, shared secret) is never in effect after it.
    private var latestSignedPurchase: EpochMillis?
    private var revocations: [Fact] = []
    private var reversals: [Fact] = []
    /// In signedAt order (equal times as they arrived): the renewal state in effect at T and the
    /// next one after it are found by halving.
    private var renewals: [Fact] = []
    /// In (recordedAt, position) order: the tie in effect and the next one are found by halving,
    /// so a subscription tied and untied thousands of times folds as fast as one tied once.
    private var ties: [Fact] = []
    /// WeChat order ids known to name one order (undirected).
    private var aliasEdges: [String: Set<String>] = [:]
    /// True once a WeChat fact was folded (the reports split figures by source).
    public private(set) var isWeChat = false
    /// Product → its period (ms) as the product catalog states it (`durationDays`,
    /// `ProductCatalog.periods`): the first basis of a WeChat delivery's "longest period" when it
    /// states no PaidTime (`WeChatTimeline.longestPeriod`). Empty: the catalog states none, and the
    /// messages' own periods decide. Configuration, not a fact: set by whoever builds the fold
    /// from the catalog it runs with (a catalog change needs `ledger rebuild`, as for entitlements).
    public var catalogPeriods: [String: EpochMillis] = [:]
    /// Every customer id any fact of this subscription named (for the customer → subscriptions index).
    public private(set) var customersNamed: Set<String> = []
    /// The latest signing time of a fact folded, Apple's statements aside: a fold none of whose
    /// facts is signed after a time is the fold "as signed by then" (`AppleStatusCheck`).
    public private(set) var latestSignedAt: EpochMillis?
    /// The customer id inserted last: a subscription's facts name the same customer over and
    /// over, and comparing with the previous one (usually the same String) is cheaper than hashing.
    private var lastCustomerNamed: String?

    public init(key: SubscriptionKey) {
        self.key = key
    }

    public init(key: SubscriptionKey, facts: some Sequence<Fact>, catalogPeriods: [String: EpochMillis] = [:]) {
        self.init(key: key)
        self.catalogPeriods = catalogPeriods
        for fact in facts { apply(fact) }
    }

    /// Folds one fact. The caller routes: facts of this subscription, plus order facts without a
    /// subscription that name one of its orders (`orderIds`).
    public mutating func apply(_ fact: Fact) {
        if let s = fact.subscription, s != key { return }
        if fact.kind != .appleStatus, latestSignedAt.map({ $0 < fact.signedAt }) ?? true { latestSignedAt = fact.signedAt }
        if fact.origin == .wechat { isWeChat = true }
        if let c = fact.customerId, !c.isEmpty, fact.kind != .customerTie, c != lastCustomerNamed {
            customersNamed.insert(c)
            lastCustomerNamed = c
        }
        switch fact.kind {
        case .transaction:
            guard let tx = fact.transaction else { return }
            let statedUpgrade = fact.message == Self.upgradeMessage
            if tx.appAccountToken != nil { anyToken = true }
            if let i = slots.index(forKey: tx.transactionId) {
                if Self.snapshotPrecedes(slots.values[i].snapshot, fact) {
                    let was = slots.values[i].purchaseDate
                    slots.values[i].snapshot = fact
                    if was != fact.effectiveAt {
                        slotOrder.remove(at: place(of: SlotPlace(purchaseDate: was, transactionId: tx.transactionId)))
                        slotOrder.insert(SlotPlace(purchaseDate: fact.effectiveAt, transactionId: tx.transactionId),
                                         at: place(of: SlotPlace(purchaseDate: fact.effectiveAt, transactionId: tx.transactionId)))
                    }
                }
                if tx.isUpgraded { slots.values[i].upgraded = true }
                if statedUpgrade { slots.values[i].statedUpgrade = true }
            } else {
                slots[tx.transactionId] = Slot(snapshot: fact, upgraded: tx.isUpgraded, statedUpgrade: statedUpgrade)
                let new = SlotPlace(purchaseDate: fact.effectiveAt, transactionId: tx.transactionId)
                if let last = slotOrder.last, !last.precedes(new) {
                    slotOrder.insert(new, at: place(of: new))
                } else {
                    slotOrder.append(new)
                }
            }
            if tx.isUpgraded || statedUpgrade { hasUpgrades = true }
            if fact.origin == .appleV2 || fact.origin == .appleAPI {
                latestSignedPurchase = max(latestSignedPurchase ?? fact.effectiveAt, fact.effectiveAt)
            }
        case .revocation:
            revocations.append(fact)
            link(fact.transactionId, fact.orderAlias)
        case .reversal:
            reversals.append(fact)
        case .renewal:
            if let last = renewals.last, last.signedAt > fact.signedAt {
                renewals.insert(fact, at: renewalsSigned(by: fact.signedAt))
            } else {
                renewals.append(fact)
            }
        case .customerTie:
            ties.append(fact)
            var i = ties.count - 1
            while i > 0, Self.tiePrecedes(ties[i], ties[i - 1]) {
                ties.swapAt(i, i - 1)
                i -= 1
            }
            if let c = fact.customerId { customersNamed.insert(c) }
        case .orderAlias:
            link(fact.transactionId, fact.orderAlias)
        case .refundDeclined, .consumptionRequest, .refundInquiry, .refundAnswer, .refundFailed, .catalog, .unreadable,
             .consent, .consumptionAnswer:
            link(fact.transactionId, fact.orderAlias)
        case .appleStatus, .consentRescinded, .extensionSummary:
            // Apple's statements about the subscription, its customer or a mass extension:
            // compared with the fold (AppleStatusCheck, ExtensionSummaryCheck), never folded.
            return
        case .purchase:
            // An ordinary purchase belongs to no subscription: nothing to fold.
            return
        }
    }

    /// A slot's key in `slotOrder`.
    struct SlotPlace: Sendable {
        var purchaseDate: EpochMillis
        var transactionId: String

        /// `purchasePrecedes`.
        func precedes(_ other: SlotPlace) -> Bool {
            if purchaseDate != other.purchaseDate { return purchaseDate < other.purchaseDate }
            return TransactionIdOrder.precedes(transactionId, other.transactionId)
        }
    }

    /// The first index of `ordered` whose element is not `before` (every one before it is).
    private static func partition<T>(_ ordered: [T], _ before: (T) -> Bool) -> Int {
        var low = 0, high = ordered.count
        while low < high {
            let mid = (low + high) / 2
            if before(ordered[mid]) { low = mid + 1 } else { high = mid }
        }
        return low
    }

    /// The index of `p` in `slotOrder`, or where it goes.
    private func place(of p: SlotPlace) -> Int { Self.partition(slotOrder) { $0.precedes(p) } }

    /// How many slots were purchased by `asOf` (the first `slotOrder` index after it).
    private func slotsPurchased(by asOf: EpochMillis) -> Int { Self.partition(slotOrder) { $0.purchaseDate <= asOf } }

    /// How many renewal states were signed by `asOf` (the first `renewals` index after it).
    private func renewalsSigned(by asOf: EpochMillis) -> Int { Self.partition(renewals) { $0.signedAt <= asOf } }

    private mutating func link(_ a: String?, _ b: String?) {
        guard let a, let b, a != b else { return }
        aliasEdges[a, default: []].insert(b)
        aliasEdges[b, default: []].insert(a)
    }

    /// True when nothing that describes the subscription has been folded.
    public var isEmpty: Bool { slots.isEmpty && renewals.isEmpty }

    /// Every id of the subscription's orders and transactions (with WeChat aliases): the ids that
    /// facts without a subscription (refunds, inquiries) are matched against.
    public var orderIds: Set<String> {
        var ids = Set(slots.keys)
        var frontier = Array(ids)
        while let id = frontier.popLast() {
            for other in aliasEdges[id] ?? [] where ids.insert(other).inserted { frontier.append(other) }
        }
        return ids
    }

    /// The names a revocation or reversal may give `transactionId` by: the id itself, or (WeChat)
    /// every id of its order. A fact's missing id reads as "" (as it always did).
    struct Names {
        let id: String
        let aliases: Set<String>?
        func contain(_ name: String?) -> Bool {
            if let aliases { return aliases.contains(name ?? "") }
            return (name ?? "") == id
        }
    }

    /// Apple ids need no set (one name each); building one per transaction and evaluation was a
    /// visible share of a rebuild.
    func names(of transactionId: String) -> Names {
        Names(id: transactionId, aliases: isWeChat ? ids(of: transactionId) : nil)
    }

    /// The ids one order is known by (itself and its aliases).
    func ids(of transactionId: String) -> Set<String> {
        var ids: Set<String> = [transactionId]
        var frontier = [transactionId]
        while let id = frontier.popLast() {
            for other in aliasEdges[id] ?? [] where ids.insert(other).inserted { frontier.append(other) }
        }
        return ids
    }

    // MARK: - State

    /// The subscription at `asOf`: every fact folded so far, each in effect from its own business
    /// time. Nil when nothing it knows had begun by then.
    public func state(at asOf: EpochMillis) -> SubscriptionState? {
        let timeline = isWeChat ? WeChatTimeline(self) : nil
        let renewal = renewalInEffect(at: asOf, timeline)
        guard let period = periodInEffect(at: asOf, timeline) else { return nil }
        let tx = period.slot?.transaction
        let revokedAt = period.slot.flatMap { revocationInForce(of: $0.transaction.transactionId, at: asOf) }
        let productType = tx?.type
        let status = Self.status(
            productType: productType, revokedAt: revokedAt, expires: period.end,
            gracePeriodExpiresDate: renewal?.renewal?.gracePeriodExpiresDate,
            isInBillingRetryPeriod: renewal?.renewal?.isInBillingRetryPeriod ?? false, asOf: asOf)
        let r = renewal?.renewal
        let token = tx?.appAccountToken ?? r?.appAccountToken ?? latestToken(at: asOf)
        let openId = isWeChat ? (period.slot?.snapshot.customerId ?? period.signing?.customerId ?? renewal?.customerId) : nil
        let implicit = token ?? openId
        let tie = tieInEffect(at: asOf)
        let customer: String?
        let customerSource: CustomerSource?
        if let tie, let tied = tie.customerId {
            customer = tied
            customerSource = .tie
        } else if let token {
            customer = token
            customerSource = .appAccountToken
        } else if let openId {
            customer = openId
            customerSource = .openId
        } else {
            customer = nil
            customerSource = nil
        }
        return SubscriptionState(
            originalTransactionId: key.originalTransactionId,
            evaluatedAt: asOf,
            status: status,
            bundleId: tx?.bundleId,
            environment: key.environment,
            productId: tx?.productId ?? period.signing?.renewal?.productId,
            productType: productType,
            autoRenewProductId: r?.autoRenewProductId,
            expiresDate: period.end,
            gracePeriodExpiresDate: r?.gracePeriodExpiresDate,
            isInBillingRetryPeriod: r?.isInBillingRetryPeriod ?? false,
            autoRenewStatus: r?.autoRenewStatus,
            expirationIntent: r?.expirationIntent,
            priceIncreaseStatus: r?.priceIncreaseStatus,
            offerType: r?.offerType,
            offerIdentifier: r?.offerIdentifier,
            appAccountToken: token,
            customerId: customer,
            customerSource: customerSource,
            implicitCustomerId: customerSource == .tie && implicit != customer ? implicit : nil,
            latestTransactionId: tx?.transactionId,
            recentSubscriptionStartDate: timeline.map { weChatRunStart(at: asOf, $0) } ?? r?.recentSubscriptionStartDate,
            renewalDate: isWeChat ? period.end : r?.renewalDate,
            revocationDate: revokedAt,
            validUntil: nextChange(after: asOf, timeline),
            purchaseDate: period.start,
            renewalExtras: r?.extras ?? AppleExtras()
        )
    }

    /// The appAccountToken of the latest-purchased transaction bought by T that states one: one
    /// pass (sorting every transaction per evaluation made a walk over a long history quadratic).
    func latestToken(at asOf: EpochMillis) -> String? {
        guard anyToken else { return nil }
        for place in slotOrder[..<slotsPurchased(by: asOf)].reversed() {
            if let token = slots[place.transactionId]?.transaction.appAccountToken { return token }
        }
        return nil
    }

    /// The period in effect at T: a transaction, or (WeChat) a signing no delivery has paid yet, or
    /// a period only WeChat's contract answer states.
    struct Period {
        var slot: Slot?
        /// The signing (or contract answer) that opened a period no delivery paid.
        var signing: Fact?
        var start: EpochMillis
        var end: EpochMillis?
    }

    func periodInEffect(at asOf: EpochMillis, _ timeline: WeChatTimeline? = nil) -> Period? {
        if let timeline { return timeline.period(at: asOf) }
        if !hasUpgrades {
            // Nothing superseded: the latest purchased by T that may be in effect (a V1-only
            // transaction after Apple's latest signed purchase may not).
            for place in slotOrder[..<slotsPurchased(by: asOf)].reversed() {
                guard let slot = slots[place.transactionId] else { continue }
                if slot.snapshot.origin == .appleV1, let signed = latestSignedPurchase, slot.purchaseDate > signed { continue }
                return Period(slot: slot, start: slot.purchaseDate, end: slot.transaction.expiresDate)
            }
            return nil
        }
        var best: Slot?
        var fallback: Slot?
        let superseded = hasUpgrades ? supersession() : [:]
        for slot in slots.values where slot.purchaseDate <= asOf {
            if slot.snapshot.origin == .appleV1, let signed = latestSignedPurchase, slot.purchaseDate > signed { continue }
            if fallback == nil || Self.purchasePrecedes(fallback!, slot) { fallback = slot }
            if let from = superseded[slot.transaction.transactionId], from <= asOf { continue }
            if best == nil || Self.purchasePrecedes(best!, slot) { best = slot }
        }
        let current = best ?? fallback
        return current.map { Period(slot: $0, start: $0.purchaseDate, end: $0.transaction.expiresDate) }
    }

    /// Apple's message for an upgrade, which takes effect at once with a new transaction.
    static let upgradeMessage = "DID_CHANGE_RENEWAL_PREF/UPGRADE"

    /// Apple charges a renewal up to 24 hours before the period ends ("the App Store attempts to
    /// renew … starting 24 hours before the subscription expires"): a renewal of the old product
    /// can already exist when the customer upgrades inside that window.
    static let preChargeWindow: EpochMillis = 86_400_000

    /// From when each superseded transaction is out of effect (by transactionId):
    /// - an upgraded transaction (`isUpgraded`) from the purchase of the upgrade that replaced it
    ///   (the earliest transaction of another product bought inside its period), so `?at=` before
    ///   the upgrade still answers it; from its own purchase when that upgrade is unknown;
    /// - a renewal of another product that begins after an upgrade's purchase but at most 24 hours
    ///   after it (charged before the upgrade, for the period the upgrade now covers), from its start.
    /// An upgrade is a transaction stated with DID_CHANGE_RENEWAL_PREF/UPGRADE, or the one that
    /// replaced an upgraded transaction; an upgrade is never superseded this way itself.
    func supersession() -> [String: EpochMillis] {
        var from: [String: EpochMillis] = [:]
        let all = Array(slots.values)
        var upgrades = Set(all.filter(\.statedUpgrade).map(\.transaction.transactionId))
        for u in all where u.upgraded {
            let end = u.transaction.expiresDate ?? .max
            var by: Slot?
            for c in all where c.transaction.transactionId != u.transaction.transactionId
                && c.transaction.productId != u.transaction.productId && c.purchaseDate >= u.purchaseDate && c.purchaseDate < end {
                if by == nil || Self.purchasePrecedes(c, by!) { by = c }
            }
            if let by { upgrades.insert(by.transaction.transactionId) }
            from[u.transaction.transactionId] = by?.purchaseDate ?? u.purchaseDate
        }
        for c in all where upgrades.contains(c.transaction.transactionId) {
            for x in all where !upgrades.contains(x.transaction.transactionId) && x.transaction.productId != c.transaction.productId
                && x.purchaseDate > c.purchaseDate && x.purchaseDate - c.purchaseDate <= Self.preChargeWindow {
                let id = x.transaction.transactionId
                from[id] = min(from[id] ?? .max, x.purchaseDate)
            }
        }
        return from
    }

    /// The renewal state in effect at T: Apple's signed last; WeChat's by `WeChatTimeline.renewal`.
    func renewalInEffect(at asOf: EpochMillis, _ timeline: WeChatTimeline? = nil) -> Fact? {
        if let timeline { return timeline.renewal(at: asOf) }
        // Apple's signed: of those signed last by T, the one `renewalPrecedes` puts last.
        let signedBy = renewalsSigned(by: asOf)
        var latest: Fact?
        for f in renewals[..<signedBy].reversed() {
            if let l = latest, f.signedAt < l.signedAt { break }
            if f.origin != .appleV1, latest == nil || Self.renewalPrecedes(latest!, f) { latest = f }
        }
        if let latest { return latest }
        // V1 (unsigned) renewal state counts only while Apple signed none by T.
        var v1: Fact?
        for f in renewals[..<signedBy] where f.origin == .appleV1 {
            if v1 == nil || Self.renewalPrecedes(v1!, f) { v1 = f }
        }
        return v1
    }

    func tieInEffect(at asOf: EpochMillis) -> Fact? {
        let i = firstTie(after: asOf)
        return i > 0 ? ties[i - 1] : nil
    }

    static func tiePrecedes(_ a: Fact, _ b: Fact) -> Bool { (a.recordedAt, a.position) < (b.recordedAt, b.position) }

    /// The index of the first tie recorded after `asOf` (`ties.count`: none).
    private func firstTie(after asOf: EpochMillis) -> Int { Self.partition(ties) { $0.recordedAt <= asOf } }

    /// The earliest business time at which folding `fact` can change what `state(at:)` answers
    /// (nil: at no time). Before it every state — and every time at which the state can change —
    /// is the same with or without the fact, so a walk over the states (`WebhookDerivation`) up
    /// to a time before it stands. Each rule follows from the fold's reading of its kind: a
    /// transaction acts from its purchase (supersession, the 24-hour window, the customer's token,
    /// V1 after a signed purchase all act later), or from the purchase it replaces, or from a
    /// revocation naming it; a revocation from its date; a reversal or renewal state from its
    /// signing; a tie from its recording. A WeChat fold places every period from every message:
    /// any of its facts can act at any time (`.min`).
    public func earliestEffect(of fact: Fact) -> EpochMillis? {
        if let s = fact.subscription, s != key { return nil }
        if isWeChat || fact.origin == .wechat { return .min }
        switch fact.kind {
        case .transaction:
            guard let tx = fact.transaction else { return nil }
            var from = fact.effectiveAt
            if let slot = slots[tx.transactionId] { from = min(from, slot.purchaseDate) }
            for r in revocations where r.transactionId == tx.transactionId || r.orderAlias == tx.transactionId {
                from = min(from, r.effectiveAt)
            }
            return from
        case .revocation: return fact.effectiveAt
        case .reversal, .renewal: return fact.signedAt
        case .customerTie: return fact.recordedAt
        case .appleStatus, .consentRescinded, .extensionSummary, .purchase: return nil
        case .refundDeclined, .consumptionRequest, .refundInquiry, .refundAnswer, .refundFailed, .catalog, .unreadable,
             .consent, .consumptionAnswer:
            // They only link order ids, which name transactions only in a WeChat fold.
            return nil
        case .orderAlias: return .min
        }
    }

    /// The revocation date in force on `transactionId` at T (nil: not revoked then).
    func revocationInForce(of transactionId: String, at asOf: EpochMillis?) -> EpochMillis? {
        if revocations.isEmpty { return nil }
        let names = names(of: transactionId)
        var latest: Fact?
        // A V1 cancellation (unsigned) does not count against a transaction Apple signed.
        let signed = slots[transactionId].map { $0.snapshot.origin != .appleV1 } ?? false
        for f in revocations where names.contain(f.transactionId) || names.contain(f.orderAlias) {
            if let asOf, f.effectiveAt > asOf { continue }
            if signed, f.origin == .appleV1 { continue }
            if latest == nil || Self.signedPrecedes(latest!, f) { latest = f }
        }
        guard let revocation = latest else { return nil }
        for f in reversals where names.contain(f.transactionId) {
            if let asOf, f.signedAt > asOf { continue }
            if f.signedAt >= revocation.signedAt { return nil }
        }
        return revocation.effectiveAt
    }

    /// The earliest time after `asOf` at which a known fact takes effect (a renewal signed early,
    /// a future revocation date, a tie recorded later): until then, re-evaluating a stored state at
    /// a later time (`SubscriptionState.reevaluated(at:)`) equals folding again.
    func nextChange(after asOf: EpochMillis, _ timeline: WeChatTimeline? = nil) -> EpochMillis? {
        var next: EpochMillis?
        func consider(_ t: EpochMillis) { if t > asOf, next.map({ t < $0 }) ?? true { next = t } }
        if let timeline {
            for t in timeline.changeTimes { consider(t) }
        } else {
            let purchased = slotsPurchased(by: asOf)
            if purchased < slotOrder.count { consider(slotOrder[purchased].purchaseDate) }
        }
        for f in revocations { consider(f.effectiveAt) }
        for f in reversals { consider(f.signedAt) }
        let signed = renewalsSigned(by: asOf)
        if signed < renewals.count { consider(renewals[signed].signedAt) }
        let tie = firstTie(after: asOf)
        if tie < ties.count { consider(ties[tie].recordedAt) }
        return next
    }

    /// Apple's "earliest start of the run of paid periods, ignoring lapses of 60 days or less",
    /// for WeChat, which does not send it in pushes: the start of the last run of periods
    /// (delivery, signing or contract answer → RenewalDate) begun by T whose gaps are at most 60 days.
    func weChatRunStart(at asOf: EpochMillis, _ timeline: WeChatTimeline? = nil) -> EpochMillis? {
        let timeline = timeline ?? WeChatTimeline(self)
        var periods = timeline.allPeriods.compactMap { p -> (EpochMillis, EpochMillis)? in
            guard p.start <= asOf, let end = p.end else { return nil }
            return (min(p.start, end), end)
        }
        periods.sort { $0 < $1 }
        guard var runStart = periods.first?.0, var runEnd = periods.first?.1 else { return nil }
        for (start, end) in periods.dropFirst() {
            if start > runEnd && start - runEnd > Self.billingRetryLimit { runStart = start }
            runEnd = max(runEnd, end)
        }
        return runStart
    }

    /// The WeChat renewal state in effect once every fact has taken effect, when the contract is
    /// this customer's for this product (nil otherwise).
    func weChatContractHead(openId: String, productId: String) -> Fact? {
        let mine = renewals.filter { $0.origin == .wechat && $0.customerId == openId && $0.renewal?.productId == productId }
        guard !mine.isEmpty else { return nil }
        return WeChatTimeline(self).renewal(at: .max)
    }

    /// The auto-renew status the latest WeChat statement that states one gives (ranked like
    /// `weChatContractHead`), for a head that does not state it (a delivery without AutoRenewStatus).
    func weChatLatestStatedAutoRenew() -> Int? {
        WeChatTimeline(self).renewal(at: .max, where: { $0.renewal?.autoRenewStatus != nil })?.renewal?.autoRenewStatus
    }

    /// The latest period end any WeChat message states (RenewalDate of signings, deliveries,
    /// unsignings and contract answers).
    var latestRenewalDate: EpochMillis? {
        (renewals.compactMap { $0.renewal?.renewalDate } + slots.values.compactMap(\.transaction.expiresDate)).max()
    }

    /// WeChat's periods and renewal statements placed in time. Built from the fold's facts on each
    /// evaluation (a WeChat subscription has tens of facts), so it never depends on arrival order.
    struct WeChatTimeline {
        struct Span {
            var slot: Slot?
            var opener: Fact?
            var start: EpochMillis
            var end: EpochMillis?
            /// 0 delivery, 1 signing, 2 contract answer: at equal ends a payment wins.
            var rank: Int
        }

        /// Every delivery's period, with its start (PaidTime, else placed after the period before it).
        let deliveries: [Span]
        /// Signings (each a candidate period while no delivery has paid its end).
        let signings: [Span]
        /// Contract answers naming a period end no push states.
        let answers: [Span]
        /// Renewal statements with the time each takes effect.
        let statements: [Statement]
        typealias Statement = (fact: Fact, at: EpochMillis, rank: EpochMillis)
        /// Start of each delivery's period, by order id.
        let startByOrder: [String: EpochMillis]
        /// Why each delivery's period starts where it does (`PlacementBasis`), by order id.
        let basisByOrder: [String: String]

        /// Consecutive months differ by up to a day (30 → 31) except February (28 → 31): a period
        /// stated one month bounds the next with a day's slack. Only a renewal after a lapse is
        /// placed by it (a consecutive one starts at the period before it), so after a February
        /// period such a renewal may start up to 2 days late; never earlier than the charge allows.
        static let monthSlack: EpochMillis = 86_400_000
        /// The longest period when nothing states one: a month of 31 days.
        static let defaultPeriod: EpochMillis = 31 * 86_400_000

        /// The product's longest period and its basis: the catalog's `durationDays` for the product,
        /// else a period the subscription's messages state for the product (plus `monthSlack`),
        /// else the gap to the previous RenewalDate, else 31 days.
        static func longestPeriod(product: String?, catalogPeriods: [String: EpochMillis], statedPeriod: [String: EpochMillis],
                                  previousEnd: EpochMillis?, end: EpochMillis) -> (EpochMillis, String) {
            if let p = catalogPeriods[product ?? ""], p > 0 { return (p, PlacementBasis.catalogDuration) }
            if let p = statedPeriod[product ?? ""], p > 0 { return (p + monthSlack, PlacementBasis.statedPeriod) }
            if let previousEnd, previousEnd < end { return (end - previousEnd, PlacementBasis.renewalGap) }
            return (defaultPeriod, PlacementBasis.defaultPeriod)
        }

        init(_ fold: SubscriptionFold) {
            let wechatRenewals = fold.renewals.filter { $0.origin == .wechat }
            let signingFacts = wechatRenewals.filter { $0.message == XPayEventName.signingResult }
            let answerFacts = wechatRenewals.filter { $0.message == XPayEventName.contractQueryAnswer }
            // Ends every push states, and the signings' times: what places a period without PaidTime.
            var ends = Set(fold.slots.values.compactMap(\.transaction.expiresDate))
            for f in signingFacts { if let e = f.renewal?.renewalDate { ends.insert(e) } }
            // A signing after an unsigning of the same period turns auto-renew back on within a
            // period already begun: it starts nothing (seed 000 §3: a new contract only after the
            // current period ends).
            let unsignings = wechatRenewals.filter { $0.message == XPayEventName.unsigning }
            let signed = signingFacts.compactMap { f -> (at: EpochMillis, end: EpochMillis)? in
                guard let end = f.renewal?.renewalDate else { return nil }
                if unsignings.contains(where: { $0.renewal?.renewalDate == end && $0.signedAt < f.signedAt }) { return nil }
                return (f.signedAt, end)
            }
            func placed(before end: EpochMillis) -> EpochMillis? {
                var best: EpochMillis?
                for e in ends where e < end { best = max(best ?? e, e) }
                for s in signed where s.end <= end && s.at < end { best = max(best ?? s.at, s.at) }
                return best
            }
            // The product's longest period, stated where a period's both ends are (a delivery's
            // PaidTime → RenewalDate, a signing's SignedTime → RenewalDate), per product.
            var statedPeriod: [String: EpochMillis] = [:]
            for slot in fold.slots.values {
                let tx = slot.transaction
                guard let paid = tx.purchaseDate, let end = tx.expiresDate, end > paid else { continue }
                statedPeriod[tx.productId ?? "", default: 0] = max(statedPeriod[tx.productId ?? ""] ?? 0, end - paid)
            }
            for f in signingFacts {
                guard let end = f.renewal?.renewalDate, end > f.signedAt else { continue }
                let product = f.renewal?.productId ?? ""
                statedPeriod[product] = max(statedPeriod[product] ?? 0, end - f.signedAt)
            }
            // A free trial (seed 000 §2, §3.3: `activitySellingPrice` 0, the first period costs
            // nothing) is a signing whose period no delivery pays — no charge, no delivery push
            // (§4.3) — and is shorter than the product's: taken alone it would cut every paid month
            // short. The first paid period after it states the product's: the gap from the trial's
            // end to the next RenewalDate of the product, when at most a month (a longer gap may be
            // a lapse after the trial).
            var endsByProduct: [String: [EpochMillis]] = [:]
            for slot in fold.slots.values { if let e = slot.transaction.expiresDate { endsByProduct[slot.transaction.productId ?? "", default: []].append(e) } }
            for f in signingFacts {
                guard let trialEnd = f.renewal?.renewalDate else { continue }
                let product = f.renewal?.productId ?? ""
                guard endsByProduct[product]?.contains(trialEnd) != true,
                      let next = endsByProduct[product]?.filter({ $0 > trialEnd }).min(),
                      next - trialEnd <= Self.defaultPeriod + Self.monthSlack else { continue }
                statedPeriod[product] = max(statedPeriod[product] ?? 0, next - trialEnd)
            }
            var starts: [String: EpochMillis] = [:]
            var bases: [String: String] = [:]
            deliveries = fold.slots.values.map { slot in
                let tx = slot.transaction
                var start: EpochMillis
                var basis: String
                if let paid = tx.purchaseDate {
                    (start, basis) = (paid, PlacementBasis.paidTime)
                } else if let end = tx.expiresDate {
                    // No PaidTime: after the period before it, but never earlier than RenewalDate
                    // minus the product's longest period — after a lapse (or a billing-retry
                    // recovery) the period before it ended long ago, and starting there would
                    // backdate the charge (issue 20).
                    let (longest, floorBasis) = WeChatTimeline.longestPeriod(product: tx.productId, catalogPeriods: fold.catalogPeriods,
                                                                            statedPeriod: statedPeriod,
                                                                            previousEnd: placed(before: end), end: end)
                    let floor = end - longest
                    if let previous = placed(before: end) {
                        (start, basis) = previous >= floor ? (previous, PlacementBasis.periodStart) : (floor, floorBasis)
                    } else {
                        // Nothing before it: the send time (seconds after Apple's charge), within the floor.
                        let sent = slot.snapshot.effectiveAt
                        (start, basis) = sent >= floor ? (sent, PlacementBasis.createTime) : (floor, floorBasis)
                    }
                } else {
                    (start, basis) = (slot.snapshot.effectiveAt, PlacementBasis.createTime)
                }
                starts[tx.transactionId] = start
                bases[tx.transactionId] = basis
                return Span(slot: slot, start: start, end: tx.expiresDate, rank: 0)
            }
            startByOrder = starts
            basisByOrder = bases
            signings = signingFacts.map { Span(opener: $0, start: $0.signedAt, end: $0.renewal?.renewalDate, rank: 1) }
            answers = answerFacts.compactMap { f in
                guard let end = f.renewal?.renewalDate, !ends.contains(end) else { return nil }
                let start = placed(before: end) ?? f.renewal?.recentSubscriptionStartDate.flatMap { $0 < end ? $0 : nil } ?? f.signedAt
                return Span(opener: f, start: min(start, f.signedAt), end: end, rank: 2)
            }
            // An unsigning outranks every delivery charged before it, whatever RenewalDate each
            // states: Apple charges a renewal up to 24 h before the period ends (the delivery
            // states the next period's end), and an unsigning after that charge may still state
            // the old period's end (seed 000 §4.4: RenewalDate is 当前订阅周期的结束时间). Compared by
            // when each happened — UnsignedTime vs the charge — its rank is the latest RenewalDate
            // charged before it. A charge happened at its PaidTime, else by the push's CreateTime
            // (§4.3: 消息发送时间, seconds after Apple's charge; the fact's `signedAt` either way):
            // never when the ledger recorded it, which would make the answer depend on arrival.
            let charges = wechatRenewals.compactMap { f -> (at: EpochMillis, end: EpochMillis)? in
                guard f.message == XPayEventName.goodsDeliver, let end = f.renewal?.renewalDate else { return nil }
                return (f.signedAt, end)
            }
            statements = wechatRenewals.map { f in
                var rank = f.renewal?.renewalDate ?? .min
                if f.message == XPayEventName.unsigning {
                    for c in charges where c.at <= f.signedAt { rank = max(rank, c.end) }
                }
                if f.message == XPayEventName.goodsDeliver, let order = f.transactionId, let start = starts[order] { return (f, start, rank) }
                return (f, f.signedAt, rank)
            }
        }

        var allPeriods: [Span] { deliveries + signings + answers }

        /// Times at which something changes: period starts and statements taking effect.
        var changeTimes: [EpochMillis] { allPeriods.map(\.start) + statements.map(\.at) }

        /// The period begun by T with the latest end. A signing (or contract answer) counts only
        /// while no delivery begun by T has paid its end; at equal ends a payment wins, then a
        /// signing, then the later start, then content.
        func period(at t: EpochMillis) -> Period? {
            let paid = Set(deliveries.filter { $0.start <= t }.compactMap(\.end))
            var best: Span?
            for span in allPeriods where span.start <= t {
                if span.rank > 0, let end = span.end, paid.contains(end) { continue }
                if let b = best, !Self.precedes(b, span) { continue }
                best = span
            }
            return best.map { Period(slot: $0.slot, signing: $0.opener, start: $0.start, end: $0.end) }
        }

        static func precedes(_ a: Span, _ b: Span) -> Bool {
            let ea = a.end ?? .min, eb = b.end ?? .min
            if ea != eb { return ea < eb }
            if a.rank != b.rank { return a.rank > b.rank }
            if a.start != b.start { return a.start < b.start }
            let fa = a.slot?.snapshot ?? a.opener, fb = b.slot?.snapshot ?? b.opener
            guard let fa, let fb else { return false }
            return fa.contentPrecedes(fb)
        }

        /// The renewal statement in effect at T. The latest contract answer in effect overrides
        /// every statement that took effect before it (it is newer evidence of the same contract);
        /// the rest rank by (RenewalDate, contract change over delivery, time, content).
        func renewal(at t: EpochMillis, where keep: (Fact) -> Bool = { _ in true }) -> Fact? {
            let inEffect = statements.filter { $0.at <= t && keep($0.fact) }
            let answer = inEffect.filter { $0.fact.message == XPayEventName.contractQueryAnswer }
                .max { a, b in a.at != b.at ? a.at < b.at : a.fact.contentPrecedes(b.fact) }
            var best: Statement?
            for s in inEffect {
                if let answer, s.at < answer.at { continue }
                if let b = best, !Self.statementPrecedes(b, s) { continue }
                best = s
            }
            return best?.fact
        }

        static func statementPrecedes(_ a: Statement, _ b: Statement) -> Bool {
            let ra = a.rank, rb = b.rank
            if ra != rb { return ra < rb }
            let ca = a.fact.message != XPayEventName.goodsDeliver, cb = b.fact.message != XPayEventName.goodsDeliver
            if ca != cb { return cb }
            if a.at != b.at { return a.at < b.at }
            return a.fact.contentPrecedes(b.fact)
        }
    }

    /// Where a WeChat delivery's period starts (its placement), and why.
    public enum PlacementBasis {
        public static let paidTime = "PaidTime"
        /// No PaidTime: the end of the period before it (within the product's longest period).
        public static let periodStart = "period_start"
        /// No PaidTime, the period before it ended longer ago than the product's longest period:
        /// RenewalDate minus the product catalog's `durationDays`.
        public static let catalogDuration = "renewal_date_minus_catalog_duration"
        /// As above, no catalog duration: RenewalDate minus the longest period the subscription's
        /// messages state (plus a day).
        public static let statedPeriod = "renewal_date_minus_stated_period"
        /// As above, the longest period being the gap to the previous RenewalDate.
        public static let renewalGap = "renewal_date_minus_renewal_gap"
        /// As above, nothing stating a period: RenewalDate minus 31 days.
        public static let defaultPeriod = "renewal_date_minus_31_days"
        /// No PaidTime and no RenewalDate: the send time, the last resort.
        public static let createTime = "CreateTime"
    }

    /// The placement basis of a WeChat order's period (nil for Apple, or an unknown order).
    public func weChatPlacementBasis(of order: String) -> String? {
        isWeChat ? WeChatTimeline(self).basisByOrder[order] : nil
    }

    // MARK: - Status

    /// The status rules, in order: a revocation in force wins; a one-time purchase is a lifetime
    /// entitlement (non-consumable) or nothing lasting (anything else); before expiry the
    /// subscription is active whatever auto-renew says; after expiry a grace period still running
    /// keeps access; an open billing retry (at most 60 days) does not; otherwise it has expired.
    public static func status(
        productType: String?, revokedAt: EpochMillis?, expires: EpochMillis?, gracePeriodExpiresDate: EpochMillis?,
        isInBillingRetryPeriod: Bool, asOf: EpochMillis
    ) -> SubscriptionStatus {
        if let revokedAt, revokedAt <= asOf { return .revoked }
        switch productType {
        case ProductType.nonConsumable?: return .active
        case ProductType.consumable?, ProductType.nonRenewing?: return .purchased
        default: break
        }
        guard let expires else { return .expired }
        if asOf < expires { return .active }
        if let grace = gracePeriodExpiresDate, grace > expires, asOf < grace { return .gracePeriod }
        if isInBillingRetryPeriod, expires > EpochMillis.max - billingRetryLimit || asOf < expires + billingRetryLimit {
            return .billingRetry
        }
        return .expired
    }

    // MARK: - Orders

    /// Transaction in effect: latest purchaseDate, then transactionId (as a number).
    static func purchasePrecedes(_ a: Slot, _ b: Slot) -> Bool {
        if a.purchaseDate != b.purchaseDate { return a.purchaseDate < b.purchaseDate }
        return TransactionIdOrder.precedes(a.transaction.transactionId, b.transaction.transactionId)
    }

    /// Per-transaction merge: signed later wins, then content (Apple).
    static func snapshotPrecedes(_ a: Fact, _ b: Fact) -> Bool {
        if a.origin == .wechat, b.origin == .wechat {
            // Two pushes of one order are the same payment, not versions: the one stating
            // PaidTime wins, then content — never CreateTime (the send time of a re-push).
            let pa = a.transaction?.purchaseDate != nil, pb = b.transaction?.purchaseDate != nil
            if pa != pb { return pb }
            return a.contentPrecedes(b)
        }
        // Apple-signed snapshots (V2, App Store API) always outrank V1's (unsigned: whoever holds
        // the shared secret can post one).
        let va = a.origin == .appleV1, vb = b.origin == .appleV1
        if va != vb { return va }
        return signedPrecedes(a, b)
    }

    static func signedPrecedes(_ a: Fact, _ b: Fact) -> Bool {
        if a.signedAt != b.signedAt { return a.signedAt < b.signedAt }
        return a.contentPrecedes(b)
    }

    /// Renewal state: Apple by signedDate; WeChat by (RenewalDate, contract change over delivery,
    /// signed time) so that a delivery (re-)pushed after an unsigning of its period cannot turn
    /// auto-renew back on, while a renewal paid for a later period does say the contract runs.
    static func renewalPrecedes(_ a: Fact, _ b: Fact) -> Bool {
        if a.origin == .wechat && b.origin == .wechat {
            let ra = a.renewal?.renewalDate ?? .min, rb = b.renewal?.renewalDate ?? .min
            if ra != rb { return ra < rb }
            let ca = a.message != XPayEventName.goodsDeliver, cb = b.message != XPayEventName.goodsDeliver
            if ca != cb { return cb }
        }
        if a.origin == .appleV1, b.origin == .appleV1, a.signedAt == b.signedAt {
            // V1 dates a body by its receipt's dates, so a DID_FAIL_TO_RENEW or
            // DID_CHANGE_RENEWAL_PREF about the current period carries the very time of the
            // purchase that began it (or of the last auto-renew change): at one time, the
            // renewal-state message is the later news, and among those a message with no date of
            // its own (a preference change) comes after the auto-renew change whose date it
            // carries, and a failure to renew (at the period's end) after both (`v1RenewalRank`).
            let ra = v1RenewalRank(a.message), rb = v1RenewalRank(b.message)
            if ra != rb { return ra < rb }
        }
        return signedPrecedes(a, b)
    }

    /// V1 messages that state renewal state about a period already begun (Apple's
    /// `notification_type`, App Store Server Notifications V1).
    static let v1RenewalStateMessages: Set<String> = [
        "V1/DID_FAIL_TO_RENEW", "V1/DID_CHANGE_RENEWAL_PREF", "V1/DID_CHANGE_RENEWAL_STATUS", "V1/PRICE_INCREASE_CONSENT",
    ]

    /// Which of two V1 renewal states at one business time is the later news: purchases (0) <
    /// DID_CHANGE_RENEWAL_STATUS (1, dated by its own change) < DID_CHANGE_RENEWAL_PREF and
    /// PRICE_INCREASE_CONSENT (2, no date of their own) < DID_FAIL_TO_RENEW (3, the period's end).
    static func v1RenewalRank(_ message: String?) -> Int {
        switch message {
        case "V1/DID_FAIL_TO_RENEW"?: 3
        case "V1/DID_CHANGE_RENEWAL_PREF"?, "V1/PRICE_INCREASE_CONSENT"?: 2
        case "V1/DID_CHANGE_RENEWAL_STATUS"?: 1
        default: 0
        }
    }

    // MARK: - Transactions

    /// The merged transactions (every fact known, whatever the time), ordered by purchaseDate then
    /// transactionId. A transaction's revocation is the one in force once every known fact has
    /// taken effect.
    public var transactions: [TransactionRecord] {
        guard !isWeChat else {
            // A WeChat order's record starts where the timeline places it, which the slots do not know.
            let starts = WeChatTimeline(self).startByOrder
            return slots.values.map { record(of: $0, start: starts[$0.transaction.transactionId]) }.sorted(by: Self.recordPrecedes)
        }
        // An Apple transaction fact takes effect at its purchaseDate, which is its record's, so
        // `slotOrder` is already the records' order: checked, not sorted.
        var records = slotOrder.map { record(of: slots[$0.transactionId]!, start: nil) }
        if zip(records, records.dropFirst()).contains(where: { Self.recordPrecedes($1, $0) }) { records.sort(by: Self.recordPrecedes) }
        return records
    }

    static func recordPrecedes(_ a: TransactionRecord, _ b: TransactionRecord) -> Bool {
        let (pa, pb) = (a.purchaseDate ?? .min, b.purchaseDate ?? .min)
        return pa != pb ? pa < pb : TransactionIdOrder.precedes(a.transactionId, b.transactionId)
    }

    /// The transactions a revocation may name (by their id or, WeChat, an alias of their order):
    /// none while no revocation is known, which is most subscriptions.
    public var revocableTransactionIds: [String] {
        revocations.isEmpty ? [] : Array(slots.keys)
    }

    public func transaction(_ transactionId: String) -> TransactionRecord? {
        let starts = isWeChat ? WeChatTimeline(self).startByOrder : [:]
        return slots[transactionId].map { record(of: $0, start: starts[transactionId]) }
    }

    /// `start`: a WeChat order's placed start (its PaidTime, else the end of the period before it).
    private func record(of slot: Slot, start: EpochMillis?) -> TransactionRecord {
        let tx = slot.transaction
        let id = tx.transactionId
        let revokedAt = revocationInForce(of: id, at: nil)
        let names = names(of: id)
        let mine = revocations.filter { names.contain($0.transactionId) || names.contain($0.orderAlias) }
        let winning = revokedAt == nil ? nil : mine.max(by: Self.signedPrecedes)?.transaction
        return TransactionRecord(
            transactionId: id,
            originalTransactionId: tx.originalTransactionId ?? key.originalTransactionId,
            webOrderLineItemId: tx.webOrderLineItemId,
            bundleId: tx.bundleId,
            productId: tx.productId,
            purchaseDate: tx.purchaseDate ?? start ?? slot.purchaseDate,
            expiresDate: tx.expiresDate,
            revocationDate: revokedAt,
            revocationReason: winning?.revocationReason,
            revocationType: winning?.revocationType,
            revocationPercentage: winning?.revocationPercentage,
            refundSignedDate: mine.map(\.signedAt).max(),
            // Every snapshot without revocationDate states a reversal (V2 and App Store API alike),
            // so later snapshots repeat that the transaction is not revoked: a refund's reversal is
            // the first reversal signed at or after it; the record names the latest refund's that was.
            // Only a refunded transaction has one: every snapshot states a reversal, so scanning
            // them for each transaction made listing a subscription's transactions quadratic.
            refundReversedSignedDate: mine.isEmpty ? nil : {
                let mineReversals = reversals.filter { names.contain($0.transactionId) }.map(\.signedAt).sorted()
                return mine.map(\.signedAt).compactMap { refund in mineReversals.first { $0 >= refund } }.max()
            }(),
            isUpgraded: slot.upgraded,
            price: tx.price,
            currency: tx.currency,
            offerType: tx.offerType,
            offerIdentifier: tx.offerIdentifier,
            appAccountToken: tx.appAccountToken,
            environment: key.environment,
            type: tx.type,
            inAppOwnershipType: tx.inAppOwnershipType,
            signedDate: slot.snapshot.signedAt,
            extras: tx.extras
        )
    }
}

/// Apple issues transaction ids as decimal numbers that grow over time but not in width
/// ("999999999999999" is older than "1000000000000000"), so ties on time compare them as numbers:
/// all-digit ids by their value (leading zeros ignored, then by length), then as text; an all-digit
/// id precedes any other (WeChat order ids are text).
public enum TransactionIdOrder {
    public static func precedes(_ a: String, _ b: String) -> Bool {
        let da = isDigits(a), db = isDigits(b)
        if da != db { return da }
        if da {
            let ta = a.drop { $0 == "0" }, tb = b.drop { $0 == "0" }
            if ta.utf8.count != tb.utf8.count { return ta.utf8.count < tb.utf8.count }
            if ta != tb { return ta < tb }
        }
        return a < b
    }

    static func isDigits(_ s: String) -> Bool {
        !s.isEmpty && s.utf8.allSatisfy { $0 >= 0x30 && $0 <= 0x39 }
    }
}

/// Apple's product types (`JWSTransaction.type`).
public enum ProductType {
    public static let autoRenewable = "Auto-Renewable Subscription"
    public static let nonConsumable = "Non-Consumable"
    public static let consumable = "Consumable"
    public static let nonRenewing = "Non-Renewing Subscription"
}

/// Where a subscription's customer id came from.
public enum CustomerSource: String, Sendable, Hashable, Codable {
    /// `POST /v1/customers/{id}/subscriptions`: an explicit tie, which wins over a token.
    case tie
    case appAccountToken
    /// The WeChat user (OpenId) of a WeChat purchase.
    case openId = "openid"
}
