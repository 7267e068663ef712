import Foundation

/// The ledger facts a refund inquiry is decided on (`RefundPolicy.decide`), from facts the service
/// has already loaded (`Fact`s: the one decoder's reading of each event), so answering stays within
/// WeChat's 3 s:
/// - `inquiry`: the `refund_inquiry` fact of the asking (`inquiry(in:)` picks it from an event's facts);
/// - `known`: the facts naming the order or one of its ids (deliveries, aliases, links, refunds) and
///   the WeChat facts of the subscription it belongs to (`RefundFactQueries.orderFacts`);
/// - `customerRefundCases`: the refund cases of the same customer (openid), from `RefundCaseFold`.
///
/// Rules (each visible in the answer's evidence):
/// - the order: `pay_order_id` and every id a fact states for the same order (`WeChatOrderLinks`:
///   a delivery's MchOrderNo / TransactionId, a refund's MchOrderId ~ WxOrderId), whichever arrived
///   first; the delivery is the earliest-recorded one of any of those ids;
/// - delivered at: the delivery's purchase time (PaidTime, else CreateTime);
/// - use window: from delivery until the first of (period end, a successful refund of this order)
///   that is not after the inquiry; open (still entitled) otherwise;
/// - customer: the delivery's OpenId, else the least openid the subscription's WeChat facts name;
/// - earlier refunds: the customer's refunded cases other than this order's, at their outcome time
///   (the policy keeps those inside its window).
public enum RefundEvidence {
    /// - Parameter deliveryRawSHA256: hex SHA-256 of the raw bytes of the event at the delivery's
    ///   position (`RefundInquiryFacts.Delivery.position`), when the caller read it.
    public static func facts(
        for inquiry: Fact, known: some Sequence<Fact>, customerRefundCases: [RefundCase],
        deliveryRawSHA256: (Int64) -> String? = { _ in nil }, catalogPeriods: [String: EpochMillis] = [:]
    ) throws(RefundEvidenceError) -> RefundInquiryFacts {
        guard inquiry.kind == .refundInquiry, inquiry.origin == .wechat else { throw .notAnInquiry(position: inquiry.position) }
        guard let order = inquiry.transactionId, !order.isEmpty else { throw .missing(field: "pay_order_id") }
        let detail = inquiry.details
        // The decoder takes the asking time from refund_time (an inquiry without one is unreadable).
        let askedAt = inquiry.signedAt

        let facts = RefundCaseFold.deduplicated(known)
        let links = WeChatOrderLinks(facts: facts + [inquiry])
        let ids = links.ids(of: order)
        let idSet = Set(ids)
        let match = links.delivery(among: ids)
        let subscription = match?.subscription ?? links.subscriptions(of: ids).first

        // The subscription as it stood when asked, folded from its facts (and the order facts that
        // join it), as every other reader folds it.
        var fold: SubscriptionFold?
        if let subscription {
            let own = facts.filter { $0.subscription == subscription }
            if !own.isEmpty {
                fold = SubscriptionProjection.attach(facts.filter { $0.subscription == nil }, to: SubscriptionFold(key: subscription, facts: own,
                                                                                                          catalogPeriods: catalogPeriods))
            }
        }
        let state = fold?.state(at: askedAt)

        var delivery: RefundInquiryFacts.Delivery?
        var use: RefundInquiryFacts.UseWindow?
        if let match {
            let order = match.transactionId ?? order
            let paid = match.transaction?.purchaseDate
            // Without PaidTime the delivery's period starts where the fold places it (the end of
            // the period before it); CreateTime is the last resort, named as such.
            let placed = paid == nil ? fold?.transaction(order)?.purchaseDate : nil
            let deliveredAt = paid ?? placed ?? match.effectiveAt
            let basis = paid != nil ? SubscriptionFold.PlacementBasis.paidTime
                : placed != nil ? fold?.weChatPlacementBasis(of: order) ?? SubscriptionFold.PlacementBasis.createTime
                : SubscriptionFold.PlacementBasis.createTime
            let periodEnd = match.transaction?.expiresDate
            delivery = .init(orderId: order, deliveredAt: deliveredAt, periodEndsAt: periodEnd, position: match.position,
                             deliveredAtBasis: basis, rawSHA256: deliveryRawSHA256(match.position))
            let refundedAt = facts.filter { f in
                f.kind == .revocation && f.origin == .wechat && !idSet.isDisjoint(with: WeChatInputs.ids(ofRefund: f))
            }.map(\.signedAt).min()
            let ends = [periodEnd, refundedAt].compactMap { $0 }.filter { $0 <= askedAt }
            use = .init(from: deliveredAt, until: ends.min())
        }
        let contractCustomers = facts.filter { f in
            f.origin == .wechat && (f.kind == .transaction || f.kind == .renewal) && subscription != nil && f.subscription == subscription
        }.compactMap(\.customerId).filter { !$0.isEmpty }
        let customer = match?.customerId ?? contractCustomers.min()
        let thisCase = Set(ids.map { "wechat:" + $0 })
        let earlier = customerRefundCases
            .filter { $0.outcome == .refunded && !thisCase.contains($0.caseId) && !idSet.contains($0.orderId) }
            .map { c in
                RefundInquiryFacts.EarlierRefund(
                    orderId: c.orderId, refundedAt: c.outcomeAt ?? c.openedAt,
                    refundIds: Array(Set(c.refundOutcomes.filter(\.succeeded).compactMap { $0.wxRefundId ?? $0.mchRefundId }
                        .filter { !$0.isEmpty })).sorted())
            }
            .sorted { ($0.refundedAt, $0.orderId) < ($1.refundedAt, $1.orderId) }
        let price = match?.transaction?.price.map { RefundInquiryFacts.Money(milliunits: $0, currency: match?.transaction?.currency) }
        return RefundInquiryFacts(
            payOrderId: order, customer: customer, askedAt: askedAt, orderTime: detail["order_time"]?.int64,
            provideStatus: detail["provide_status"]?.int64.flatMap(XPayProvideStatus.init(rawValue:)),
            delivery: delivery, entitlementUse: use, earlierRefunds: earlier,
            productId: match?.transaction?.productId ?? detail["product_id"]?.text, pricePaid: price,
            subscription: subscription, statusAtAsking: state?.status.rawValue, autoRenewAtAsking: state?.autoRenewStatus)
    }

    /// The `refund_inquiry` fact among an event's facts (`FactDecoder.facts(of:)`), or why there is none.
    public static func inquiry(in eventFacts: [Fact]) throws(RefundEvidenceError) -> Fact {
        if let q = eventFacts.first(where: { $0.kind == .refundInquiry }) { return q }
        if let u = eventFacts.first(where: { $0.kind == .unreadable }) {
            throw .unreadable(reason: u.details["reason"]?.text ?? "no reason recorded")
        }
        throw .notAnInquiry(position: eventFacts.first?.position ?? 0)
    }
}

extension RefundDecision {
    /// The decision a stored answer states (its `refund_answer` fact), to repeat it word for word
    /// to a later asking. Nil for any other fact, or an answer missing result_code, result_info or
    /// evidence (the ledger always writes them).
    public init?(answer fact: Fact) {
        guard fact.kind == .refundAnswer else { return nil }
        let v = fact.details
        guard let code = v["result_code"]?.int64, let verdict = Verdict(rawValue: Int(code)),
              case .string(let info)? = v["result_info"], let evidence = v["evidence"]?.text else { return nil }
        self.init(verdict: verdict, rule: v["rule"]?.text ?? "", resultInfo: info, evidence: evidence)
    }
}

public enum RefundEvidenceError: Error, Equatable, CustomStringConvertible {
    case missing(field: String)
    case notAnInquiry(position: Int64)
    /// The decoder could not read the inquiry (`unreadable` fact); its reason.
    case unreadable(reason: String)

    public var description: String {
        switch self {
        case .missing(let f):
            return "the refund inquiry has no usable \(f); WeChat always sends it — check that the push was decoded "
                + "from the right format (every inquiry field is a string)"
        case .notAnInquiry(let p):
            return "the facts of the event at position \(p) hold no \(XPayEventName.refundInquiry); pass the inquiry event's facts"
        case .unreadable(let reason):
            return "the refund inquiry could not be read (\(reason)); WeChat always sends pay_order_id and refund_time — "
                + "check that the push was decoded from the right format"
        }
    }
}
