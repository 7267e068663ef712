import Foundation

/// Derives the webhook events of one subscription from its fold: pure, and a function of the set
/// of facts folded (never of the order they arrived in).
///
/// How: the fold answers "the state at business time T" for any T. The derivation walks T over
/// every time at which something can change (each fact taking effect, each expiry, grace end and
/// the end of the longest billing retry), up to `now`, and compares consecutive states. Each
/// difference is an event, effective at that T, carrying the state at T.
///
/// Which events (the rules, in the order they are checked at each T):
/// - a new transaction in effect: the first ever → `subscription.started`; another product than
///   the period before → `subscription.product_changed` (`upgrade` when Apple marked the period
///   before as upgraded, else `downgrade` when it costs less in the same currency, else
///   `crossgrade` — Apple's group levels are not in the facts); the same product →
///   `subscription.renewed`; and after a billing issue, also `subscription.recovered`;
/// - the status entering `grace_period` or `billing_retry` → `subscription.billing_issue`
///   (`stage`); entering `expired` → `subscription.expired` (`reason`);
/// - a transaction becoming revoked / no longer revoked → `subscription.refunded` /
///   `subscription.refund_reversed`, with whether it was the period in effect;
/// - auto-renew changing between two stated values → `subscription.auto_renew_changed`;
/// - an entitlement held by a customer appearing / disappearing → `entitlement.granted` /
///   `entitlement.revoked`.
///
/// Identity: each event is named by what it is about (the transaction that began a period or was
/// refunded, the n-th grant of an entitlement to a customer, the n-th auto-renew change), not by
/// when it was learned, so a later fact that refines a known event (a renewal info arriving after
/// the renewal) names the same event, which is not sent again. A late fact that reveals a change
/// the ledger did not know (a refund of a past period) derives a new event, sent when learned.
/// A caller sends `events(after) − events(before)` by identity for each committed batch.
///
/// An expiry at a renewal boundary settles before it is announced. When a period ends with
/// auto-renew on, no expiration intent and no refund, the store usually renews it or says why not
/// — a renewal, a grace period (`DID_FAIL_TO_RENEW`/`GRACE_PERIOD`), billing retry — in a notice
/// that may be signed some time after the expiry instant; Apple asks apps to keep full service
/// through a grace period. So such an expiry is announced only once `expirySettle` has passed
/// after it with nothing superseding it; a period, grace period or billing retry taking effect
/// within that window supersedes it: the walk goes from the state before the expiry straight to
/// the superseding one (a grace period then grants nothing anew, a billing retry revokes once),
/// and the backend never sees `expired`/`revoked` then `granted` for a paying customer. The
/// window is business time (when each fact took effect), so the decision is the same whenever
/// the notice arrived; `GET` answers still say exactly what the facts say at each instant.
public struct WebhookDerivation: Sendable {
    public let catalog: ProductCatalog
    /// identity → id (a digest: `StandardWebhooks.messageId(for:)`); LedgerCore has no digests.
    public let makeId: @Sendable (String) -> String
    /// How long after an expiry at a renewal boundary a renewal, grace period or billing retry
    /// may still supersede it (0: every expiry is announced as it happens).
    public let expirySettle: EpochMillis

    /// Six hours: Apple signs a renewal's outcome within minutes to hours of the period's end,
    /// and a backend learns of a real lapse a few hours late at worst.
    public static let defaultExpirySettle: EpochMillis = 6 * 3_600_000

    public init(catalog: ProductCatalog, expirySettle: EpochMillis = WebhookDerivation.defaultExpirySettle,
                makeId: @escaping @Sendable (String) -> String) {
        self.catalog = catalog
        self.expirySettle = max(expirySettle, 0)
        self.makeId = makeId
    }

    /// Upper bound on change points walked for one subscription (a subscription has at most
    /// hundreds of facts; this only stops a pathological fold from spinning).
    static let pointLimit = 100_000

    /// Every event of the subscription effective at or before `now`, in effective-time order
    /// (then by type within one instant, so the order is deterministic). `position`: the ledger
    /// position the caller derives at (stamped on each event).
    public func events(of fold: SubscriptionFold, now: EpochMillis, position: Int64) -> [WebhookEvent] {
        var walk = WebhookWalk()
        return self.walk(fold, from: &walk, now: now, position: position)
    }

    /// The events of `fold` at `now` from where `log`'s walk stands (its latest walk that stopped
    /// by `now`; from the beginning without one), and records where this walk stopped. The caller
    /// first forgets the walks a new fact can change (`WebhookWalkLog.forget(from:)`, with
    /// `SubscriptionFold.earliestEffect`): a walk resumed from a time before every new fact's effect
    /// derives what the whole walk derives after it, so a batch costs its change points, not the
    /// subscription's history. Events before the resumed time are not derived again: they were,
    /// by the walk that stopped there (the caller keeps only a log whose events were stored).
    public func events(of fold: SubscriptionFold, now: EpochMillis, position: Int64, log: inout WebhookWalkLog) -> [WebhookEvent] {
        var walk = log.resume(upTo: now)
        let out = self.walk(fold, from: &walk, now: now, position: position)
        log.lookBack = max(log.lookBack, expirySettle)
        log.record(walk)
        return out
    }

    private func walk(_ fold: SubscriptionFold, from w: inout WebhookWalk, now: EpochMillis, position: Int64) -> [WebhookEvent] {
        let key = fold.key
        let source = fold.isWeChat ? "wechat" : "apple"
        // Only a transaction some revocation names can be revoked, and a record is built only for
        // an event that names one: listing every transaction's record on each walk (sorted, with
        // its refunds) cost a resumed walk of a long history as much as walking it.
        let revocable = fold.revocableTransactionIds
        var out: [WebhookEvent] = []

        func emit(_ type: WebhookEventType, _ discriminator: String, at t: EpochMillis, state: SubscriptionState?,
                  customer: String? = nil, _ details: [String: JSONValue] = [:]) {
            let identity = key.text + "|" + type.rawValue + "|" + discriminator
            out.append(WebhookEvent(
                id: makeId(identity), identity: identity, type: type, source: source, environment: key.environment,
                originalTransactionId: key.originalTransactionId, customerId: customer ?? state?.customerId,
                effectiveAt: t, position: position, details: details, state: state))
        }

        let timeline = fold.isWeChat ? SubscriptionFold.WeChatTimeline(fold) : nil
        // A resumed walk asks the fold it resumes on for the next change: the state it stopped at
        // was evaluated by an older fold, which did not know the new facts' times.
        var next = w.at.map { Self.nextPoint(after: $0, state: w.previous, fold: fold, validUntil: fold.nextChange(after: $0, timeline)) }
            ?? fold.nextChange(after: .min, timeline)
        var steps = 0
        walking: while let point = next, point <= now, steps < Self.pointLimit {
            steps += 1
            var t = point
            var state = fold.state(at: t)
            if let s = state, let before = w.previous, awaitsRenewal(s, before: before, at: t) {
                switch settle(fold, expiredAt: t, state: s, now: now) {
                case .announce: w.announcedExpiry = t
                case .hold: break walking
                case .superseded(let at, let by):
                    t = at
                    state = by
                }
            }
            let revoked = Set(revocable.filter { fold.revocationInForce(of: $0, at: t) != nil })
            var grants: [GrantKey: EntitlementGrant] = [:]
            for g in state.map({ EntitlementGrant.grants(of: $0, catalog: catalog) }) ?? [] { grants[GrantKey(g)] = g }

            if let s = state {
                // A new period.
                if let tx = s.latestTransactionId, tx != w.lastPeriodTransaction {
                    if !w.started {
                        emit(.subscriptionStarted, "first", at: t, state: s,
                             ["transactionId": .string(tx), "productId": .optional(s.productId)])
                        w.started = true
                    } else if let from = w.lastPeriodProduct, let to = s.productId, from != to {
                        let kind = Self.changeKind(from: w.lastPeriodTransaction.flatMap(fold.transaction), to: fold.transaction(tx))
                        emit(.subscriptionProductChanged, tx, at: t, state: s,
                             ["transactionId": .string(tx), "from": .string(from), "to": .string(to), "kind": .string(kind)])
                    } else {
                        let lapsed = w.previous.map { !$0.status.isEntitled && $0.status != .billingRetry } ?? false
                        emit(.subscriptionRenewed, tx, at: t, state: s,
                             ["transactionId": .string(tx), "productId": .optional(s.productId), "resubscribed": .bool(lapsed)])
                    }
                    if w.billingIssueOpen && s.status == .active {
                        emit(.subscriptionRecovered, tx, at: t, state: s, ["transactionId": .string(tx)])
                        w.billingIssueOpen = false
                    }
                    w.lastPeriodTransaction = tx
                    w.lastPeriodProduct = s.productId
                }
                // The status crossing into a billing issue or expiry.
                let before = w.previous?.status
                let period = s.latestTransactionId ?? "-"
                if s.status == .gracePeriod, before != .gracePeriod {
                    emit(.subscriptionBillingIssue, period + "|grace_period", at: t, state: s,
                         ["stage": "grace_period", "transactionId": .optional(s.latestTransactionId),
                          "gracePeriodExpiresDate": .optional(s.gracePeriodExpiresDate)])
                    w.billingIssueOpen = true
                }
                if s.status == .billingRetry, before != .billingRetry {
                    emit(.subscriptionBillingIssue, period + "|billing_retry", at: t, state: s,
                         ["stage": "billing_retry", "transactionId": .optional(s.latestTransactionId),
                          "gracePeriodExpiresDate": .optional(s.gracePeriodExpiresDate),
                          "gracePeriodEnded": .bool(before == .gracePeriod)])
                    w.billingIssueOpen = true
                }
                if s.status == .expired, let before, before != .expired, before != .revoked {
                    emit(.subscriptionExpired, period, at: t, state: s,
                         ["reason": .string(Self.expiryReason(s, before: before)), "transactionId": .optional(s.latestTransactionId)])
                    w.billingIssueOpen = false
                }
                // Auto-renew, once two values were stated.
                if let was = w.previous?.autoRenewStatus, let now = s.autoRenewStatus, was != now {
                    w.autoRenewChanges += 1
                    emit(.subscriptionAutoRenewChanged, String(w.autoRenewChanges), at: t, state: s,
                         ["autoRenewStatus": .integer(Int64(now)), "autoRenewProductId": .optional(s.autoRenewProductId)])
                }
            }
            // Refunds and reversals, per transaction.
            for tx in revoked.subtracting(w.previousRevoked).sorted() {
                w.refundCounts[tx, default: 0] += 1
                let record = fold.transaction(tx)
                emit(.subscriptionRefunded, tx + "|" + String(w.refundCounts[tx]!), at: t, state: state,
                     ["transactionId": .string(tx), "periodInEffect": .bool(state?.latestTransactionId == tx),
                      "productId": .optional(record?.productId), "revocationDate": .integer(t),
                      "revocationReason": .optional(record?.revocationReason)])
            }
            for tx in w.previousRevoked.subtracting(revoked).sorted() {
                w.reversalCounts[tx, default: 0] += 1
                emit(.subscriptionRefundReversed, tx + "|" + String(w.reversalCounts[tx]!), at: t, state: state,
                     ["transactionId": .string(tx), "periodInEffect": .bool(state?.latestTransactionId == tx),
                      "productId": .optional(fold.transaction(tx)?.productId)])
            }
            // Entitlements, per customer and name.
            for g in grants.keys.filter({ w.previousGrants[$0] == nil }).sorted() {
                w.grantCounts[g, default: 0] += 1
                emit(.entitlementGranted, g.discriminator + "|" + String(w.grantCounts[g]!), at: t, state: state,
                     customer: g.customerId, ["entitlement": .string(g.entitlement), "productId": .string(grants[g]!.productId),
                                              "expiresDate": .optional(state?.entitledUntil)])
            }
            for g in w.previousGrants.keys.filter({ grants[$0] == nil }).sorted() {
                w.revokeCounts[g, default: 0] += 1
                emit(.entitlementRevoked, g.discriminator + "|" + String(w.revokeCounts[g]!), at: t, state: state,
                     customer: g.customerId, ["entitlement": .string(g.entitlement), "productId": .string(w.previousGrants[g]!.productId),
                                              "reason": .string(Self.revokeReason(g, state: state))])
            }

            w.at = t
            w.previous = state
            w.previousRevoked = revoked
            w.previousGrants = grants
            next = Self.nextPoint(after: t, state: state, fold: fold)
        }
        return out
    }

    /// The events of `after` at `now` that `before` did not derive at `derivedAt` (by identity):
    /// what a committed batch adds (`derivedAt` = `now`), or time passing (`before` = `after`,
    /// `derivedAt` the last clock it was derived at: an expiry no notification announced).
    /// `before` nil: the subscription was unknown.
    public func newEvents(
        before: SubscriptionFold?, derivedAt: EpochMillis? = nil, after: SubscriptionFold, now: EpochMillis, position: Int64
    ) -> [WebhookEvent] {
        let known = Set((before.map { events(of: $0, now: derivedAt ?? now, position: position) } ?? []).map(\.identity))
        return events(of: after, now: now, position: position).filter { !known.contains($0.identity) }
    }

    /// `refund_case.decided` for the ledger's own answers among `facts` (a WeChat refund inquiry
    /// answer, an Apple consumption answer). `subscription`: the one the caller attached an answer
    /// naming only an order to (nil: the answer's own). Named by the answer's position in the log:
    /// a decision is one ledger event.
    public func decisions(in facts: [Fact], subscription: SubscriptionKey?, state: SubscriptionState?) -> [WebhookEvent] {
        facts.compactMap { f -> WebhookEvent? in
            guard f.origin == .ledger, f.kind == .refundAnswer || f.kind == .consumptionAnswer else { return nil }
            let key = f.subscription ?? subscription
            let subject = key?.text ?? ("order:" + (f.transactionId ?? ""))
            let discriminator = String(f.position) + "." + String(f.ordinal)
            let identity = subject + "|" + WebhookEventType.refundCaseDecided.rawValue + "|" + discriminator
            var details: [String: JSONValue] = [
                "case": .string(f.kind == .refundAnswer ? "wechat_refund_inquiry" : "apple_consumption_request"),
                "transactionId": .optional(f.transactionId),
            ]
            let detail = f.details
            if f.kind == .refundAnswer {
                details["decision"] = detail["decision"] ?? .null
                details["rule"] = detail["rule"] ?? .null
            } else {
                details["outcome"] = detail["outcome"] ?? .null
                details["reason"] = detail["reason"] ?? .null
            }
            return WebhookEvent(
                id: makeId(identity), identity: identity, type: .refundCaseDecided,
                source: f.kind == .refundAnswer ? "wechat" : "apple",
                environment: key?.environment ?? SubscriptionKey.production,
                originalTransactionId: key?.originalTransactionId, customerId: state?.customerId,
                effectiveAt: f.signedAt, position: f.position, details: details, state: state)
        }
    }

    /// An expiry at a renewal boundary that may still be superseded: the period in effect just
    /// ended (`t` is its expiry), auto-renew not turned off (on, or not stated yet: the first
    /// renewal info known may be the late notice itself), no expiration intent, nothing revoked.
    func awaitsRenewal(_ s: SubscriptionState, before: SubscriptionState, at t: EpochMillis) -> Bool {
        guard expirySettle > 0, s.status == .expired, before.status == .active, s.expiresDate == t else { return false }
        return (s.autoRenewStatus ?? before.autoRenewStatus) != 0 && s.expirationIntent == nil
    }

    enum Settlement {
        /// Nothing superseded the expiry within the window: announce it.
        case announce
        /// The window is still open at `now` and nothing superseded it yet: stop the walk before it.
        case hold
        /// A period, grace period or billing retry took effect at `at` within the window.
        case superseded(at: EpochMillis, by: SubscriptionState)
    }

    /// What becomes of the expiry at `t` (`awaitsRenewal`): the change points after it up to the
    /// window's end (and `now`) are looked at for a state that supersedes it.
    func settle(_ fold: SubscriptionFold, expiredAt t: EpochMillis, state: SubscriptionState, now: EpochMillis) -> Settlement {
        let end = t > EpochMillis.max - expirySettle ? EpochMillis.max : t + expirySettle
        var at = t
        var current = state
        for _ in 0..<Self.pointLimit {
            guard let point = Self.nextPoint(after: at, state: current, fold: fold), point <= end else { break }
            if point > now { return .hold }
            guard let s = fold.state(at: point) else { break }
            if s.status == .active || s.status == .gracePeriod || s.status == .billingRetry { return .superseded(at: point, by: s) }
            at = point
            current = s
        }
        return now >= end ? .announce : .hold
    }

    /// The next time after `t` at which the state can differ: a fact taking effect (the state's
    /// `validUntil`), or time alone moving the status (expiry, grace end, end of the longest retry).
    /// `validUntil`: the fold's next change after `t` when `state` was evaluated by another fold.
    static func nextPoint(after t: EpochMillis, state: SubscriptionState?, fold: SubscriptionFold,
                          validUntil: EpochMillis?? = nil) -> EpochMillis? {
        var candidates: [EpochMillis] = []
        if let s = state {
            if let v = validUntil ?? s.validUntil { candidates.append(v) }
            if let e = s.expiresDate {
                candidates.append(e)
                if e <= EpochMillis.max - SubscriptionFold.billingRetryLimit { candidates.append(e + SubscriptionFold.billingRetryLimit) }
            }
            if let g = s.gracePeriodExpiresDate { candidates.append(g) }
        } else if let n = fold.nextChange(after: t, fold.isWeChat ? SubscriptionFold.WeChatTimeline(fold) : nil) {
            candidates.append(n)
        }
        return candidates.filter { $0 > t }.min()
    }

    /// Apple's expirationIntent when stated; else what the state before says.
    static func expiryReason(_ s: SubscriptionState, before: SubscriptionStatus) -> String {
        switch s.expirationIntent {
        case 1?: return "unsubscribe"
        case 2?: return "billing_error"
        case 3?: return "price_increase"
        case 4?: return "product_unavailable"
        case 5?: return "other"
        default: break
        }
        if before == .billingRetry || before == .gracePeriod || s.isInBillingRetryPeriod { return "billing_error" }
        if s.autoRenewStatus == 0 { return "unsubscribe" }
        return "unknown"
    }

    static func changeKind(from: TransactionRecord?, to: TransactionRecord?) -> String {
        if from?.isUpgraded == true { return "upgrade" }
        if let a = from?.price, let b = to?.price, from?.currency != nil, from?.currency == to?.currency, b < a {
            return "downgrade"
        }
        return "crossgrade"
    }

    static func revokeReason(_ g: GrantKey, state: SubscriptionState?) -> String {
        guard let s = state else { return "unknown" }
        if s.customerId != g.customerId { return "customer_changed" }
        switch s.status {
        case .revoked: return "refunded"
        case .expired: return "expired"
        case .billingRetry: return "billing_issue"
        default: return "product_changed"
        }
    }

    /// An entitlement held by a customer, whichever product gives it (a product change that keeps
    /// `basic` neither revokes nor grants it).
    struct GrantKey: Hashable, Comparable {
        var customerId: String
        var entitlement: String
        init(_ g: EntitlementGrant) {
            customerId = g.customerId
            entitlement = g.entitlement
        }
        /// Customer ids are arbitrary text: length-prefixed so no two pairs read alike.
        var discriminator: String { String(customerId.utf8.count) + ":" + customerId + "|" + entitlement }
        static func < (a: GrantKey, b: GrantKey) -> Bool {
            (a.customerId, a.entitlement) < (b.customerId, b.entitlement)
        }
    }
}

/// Where a walk of a subscription's change points stopped (`WebhookDerivation`): the time of the
/// last point walked, the state there and what the walk counted so far — all a function of the
/// fold's states up to that time.
public struct WebhookWalk: Sendable {
    /// The last change point walked (nil: none).
    public internal(set) var at: EpochMillis?
    var previous: SubscriptionState?
    var previousRevoked: Set<String> = []
    var previousGrants: [WebhookDerivation.GrantKey: EntitlementGrant] = [:]
    var started = false
    var lastPeriodProduct: String?
    var lastPeriodTransaction: String?
    var billingIssueOpen = false
    var grantCounts: [WebhookDerivation.GrantKey: Int] = [:]
    var revokeCounts: [WebhookDerivation.GrantKey: Int] = [:]
    var refundCounts: [String: Int] = [:]
    var reversalCounts: [String: Int] = [:]
    var autoRenewChanges = 0
    /// The last expiry announced after its settle window (`WebhookDerivation.awaitsRenewal`): a
    /// fact taking effect up to the window after it would have superseded it.
    var announcedExpiry: EpochMillis?

    public init() {}
}

/// The last few walks of one subscription, each where a derivation stopped, oldest first. A new
/// fact makes every walk that stopped at or after its earliest effect stale (`forget(from:)`); the
/// next derivation resumes from the latest that stands. A notification usually acts after every
/// point already walked (a renewal, a renewal-state change, a tie), so the last walk stands; a
/// fact from far in the past (out of order) forgets them all and the walk starts over.
public struct WebhookWalkLog: Sendable {
    /// Walks kept: a fact acting before all of them costs one whole walk, no more.
    public static let capacity = 4
    /// The position of the fold the walks were taken on (every fact at or before it).
    public var position: Int64
    private(set) var walks: [WebhookWalk] = []
    /// The longest `WebhookDerivation.expirySettle` the walks were taken with: a fact may
    /// supersede an announced expiry up to that long before it, so it changes the walks that
    /// went past such an expiry.
    var lookBack: EpochMillis = 0

    public init(position: Int64) { self.position = position }

    /// A fact acting from `time` on (`SubscriptionFold.earliestEffect`) was folded.
    public mutating func forget(from time: EpochMillis) {
        let window = time > EpochMillis.min + lookBack ? time - lookBack : .min
        walks.removeAll { ($0.at ?? .min) >= time || ($0.announcedExpiry ?? .min) >= window }
    }

    /// Nothing recorded stands: the next derivation walks from the beginning.
    public var isEmpty: Bool { walks.isEmpty }

    public func resume(upTo now: EpochMillis) -> WebhookWalk {
        walks.last { ($0.at ?? .min) <= now } ?? WebhookWalk()
    }

    mutating func record(_ walk: WebhookWalk) {
        guard walk.at != nil else { return }
        walks.removeAll { ($0.at ?? .min) >= walk.at! }
        walks.append(walk)
        if walks.count > Self.capacity { walks.removeFirst(walks.count - Self.capacity) }
    }
}
