import Foundation

/// The ledger facts a refund inquiry is decided on (`RefundPolicy.decide`), gathered from events
/// the service has already loaded, so answering stays within WeChat's 3 s:
/// - `streamEvents`: the events of the stream the inquiry resolved to (the subscription's, with the
///   provisional order streams linked to it, or just the provisional stream);
/// - `customerRefundCases`: the refund cases of the same customer (openid), from `RefundCaseFold`.
///
/// Rules (each visible in the answer's evidence):
/// - the order: `pay_order_id`, plus the other id of any `xpay_refund_notify` naming it (WeChat
///   does not say whether pay_order_id is OutTradeNo or its own order id; a refund notify carries
///   both); the delivery is the one whose OutTradeNo, MchOrderNo or TransactionId is among them;
/// - delivered at: the delivery's PaidTime, else CreateTime, else its signed_at, else recordedAt;
/// - use window: from delivery until the first of (period end, a successful refund of this order)
///   that is not after the inquiry; open (still entitled) otherwise;
/// - customer: the delivery's OpenId, else the openid of the stream's contract messages;
/// - earlier refunds: the customer's refunded cases other than this order's, at their outcome time
///   (the policy keeps those inside its window).
public enum RefundEvidence {
    public static func facts(
        for inquiry: XPayRefundInquiry, streamEvents: [RecordedEvent], customerRefundCases: [RefundCase]
    ) throws(RefundEvidenceError) -> RefundInquiryFacts {
        guard let order = inquiry.payOrderId, !order.isEmpty else { throw .missing(field: "pay_order_id") }
        guard let askedAt = WeChatTime.seconds(inquiry.refundTime) else { throw .missing(field: "refund_time") }

        var deliveries: [(RecordedEvent, XPayGoodsDelivery, [String])] = []
        var refunds: [XPayRefundOutcome] = []
        var contractOpenIds: Set<String> = []
        let decoder = JSONDecoder()
        for e in RefundCaseFold.deduplicated(streamEvents) where e.event.source == .wechat {
            guard let v = try? decoder.decode(PushValue.self, from: e.event.payload) else { continue }
            switch XPayMessage(v) {
            case .goodsDelivery(let d):
                if let id = d.outTradeNo { deliveries.append((e, d, [id, d.mchOrderNo, d.transactionId].compactMap { $0 })) }
                if let o = d.openId { contractOpenIds.insert(o) }
            case .refundOutcome(let r): refunds.append(r)
            case .signingResult(let s): if let o = s.openId { contractOpenIds.insert(o) }
            case .unsigning(let u): if let o = u.openId { contractOpenIds.insert(o) }
            default: break
            }
        }
        var aliases: Set<String> = [order]
        for r in refunds {
            let ids = [r.mchOrderId, r.wxOrderId].compactMap { $0 }
            if ids.contains(order) { aliases.formUnion(ids) }
        }
        let match = deliveries.filter { !aliases.isDisjoint(with: $0.2) }.min { $0.0.position < $1.0.position }

        var delivery: RefundInquiryFacts.Delivery?
        var use: RefundInquiryFacts.UseWindow?
        if let (event, d, ids) = match {
            let deliveredAt = WeChatTime.seconds(d.paidTime) ?? WeChatTime.seconds(d.createTime)
                ?? event.event.signedAt ?? event.recordedAt
            let periodEnd = WeChatTime.millis(d.subscription?.renewalDate)
            delivery = .init(orderId: d.outTradeNo ?? ids[0], deliveredAt: deliveredAt, periodEndsAt: periodEnd,
                             position: event.position)
            aliases.formUnion(ids)
            let refundedAt = refunds.filter { r in
                r.succeeded && !aliases.isDisjoint(with: [r.mchOrderId, r.wxOrderId].compactMap { $0 })
            }.compactMap(WeChatInputs.refundTime).min()
            let ends = [periodEnd, refundedAt].compactMap { $0 }.filter { $0 <= askedAt }
            use = .init(from: deliveredAt, until: ends.min())
        }
        let customer = match?.1.openId ?? contractOpenIds.min()
        let thisCase = Set(aliases.map { "wechat:" + $0 })
        let earlier = customerRefundCases
            .filter { $0.outcome == .refunded && !thisCase.contains($0.caseId) && !aliases.contains($0.orderId) }
            .map { RefundInquiryFacts.EarlierRefund(orderId: $0.orderId, refundedAt: $0.outcomeAt ?? $0.openedAt) }
            .sorted { ($0.refundedAt, $0.orderId) < ($1.refundedAt, $1.orderId) }
        return RefundInquiryFacts(
            payOrderId: order, customer: customer, askedAt: askedAt, orderTime: WeChatTime.seconds(inquiry.orderTime),
            provideStatus: inquiry.provideStatus, delivery: delivery, entitlementUse: use, earlierRefunds: earlier)
    }

    /// Convenience for a stored inquiry event: decodes it first.
    public static func facts(
        forInquiryEvent event: RecordedEvent, streamEvents: [RecordedEvent], customerRefundCases: [RefundCase]
    ) throws(RefundEvidenceError) -> RefundInquiryFacts {
        guard let v = try? JSONDecoder().decode(PushValue.self, from: event.event.payload),
              case .refundInquiry(let q) = XPayMessage(v) else {
            throw .notAnInquiry(position: event.position)
        }
        return try facts(for: q, streamEvents: streamEvents, customerRefundCases: customerRefundCases)
    }
}

public enum RefundEvidenceError: Error, Equatable, CustomStringConvertible {
    case missing(field: String)
    case notAnInquiry(position: Int64)

    public var description: String {
        switch self {
        case .missing(let f):
            return "the refund inquiry has no usable \(f); WeChat always sends it — check that the push was decoded "
                + "from the right format (every inquiry field is a string)"
        case .notAnInquiry(let p):
            return "event at position \(p) is not an \(XPayEventName.refundInquiry) push; pass the inquiry event itself"
        }
    }
}
