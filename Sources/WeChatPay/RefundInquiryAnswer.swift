import Foundation
import LedgerCore

/// The ledger's answer to `xpay_subscribe_ios_refund_query_notify`, recorded as a `source = ledger`
/// event before it is sent.
///
/// Apple asks up to three times per refund request. The answer event's dedupe key is
/// `refund-decision:<pay_order_id>`, so all askings about one order form one case with one answer:
/// the service first looks for an event with that key (`caseKey`) and, when it exists, answers
/// again with `RefundInquiryAnswer.decision(fromPayload:)` instead of deciding anew.
public enum RefundInquiryAnswer {
    public static func caseKey(payOrderId: String) -> String { DedupeKey.refundDecision(payOrderId: payOrderId) }

    /// The inquiry's own facts, to be completed with the ledger's (delivery, use, earlier refunds).
    public static func facts(for notification: XPayNotification, customer: String? = nil,
                             delivery: RefundInquiryFacts.Delivery? = nil,
                             entitlementUse: RefundInquiryFacts.UseWindow? = nil,
                             earlierRefunds: [RefundInquiryFacts.EarlierRefund] = []) throws(WeChatPushError) -> RefundInquiryFacts {
        guard case .refundInquiry(let q) = notification.message else {
            throw .invalidField(event: notification.push.event ?? "push", field: "Event",
                                reason: "is not \(XPayEventName.refundInquiry)")
        }
        guard let order = q.payOrderId, let asked = q.refundTime else {
            throw .missingField(event: XPayEventName.refundInquiry, field: "pay_order_id and refund_time")
        }
        guard let askedAt = epochMillis(seconds: asked) else {
            throw .invalidField(event: XPayEventName.refundInquiry, field: "refund_time", reason: "is not a Unix time in seconds")
        }
        return RefundInquiryFacts(payOrderId: order, customer: customer, askedAt: askedAt,
                                  orderTime: q.orderTime.flatMap(epochMillis(seconds:)), provideStatus: q.provideStatus,
                                  delivery: delivery, entitlementUse: entitlementUse, earlierRefunds: earlierRefunds)
    }

    /// The decision as an event in the inquiry's stream. `raw` is the plaintext reply in the push's
    /// format (the encrypted envelope differs on every send; its content does not). Nothing in it
    /// depends on which asking triggered it, so every asking builds the identical event; the time of
    /// the answer is the event's `recorded_at`.
    public static func event(_ decision: RefundDecision, for notification: XPayNotification, streamId: String) -> NewEvent {
        let q: XPayRefundInquiry? = if case .refundInquiry(let q) = notification.message { q } else { nil }
        let order = q?.payOrderId ?? ""
        var o: [String: JSONValue] = [
            "pay_order_id": .string(order),
            "result_code": .integer(Int64(decision.resultCode)),
            "result_info": .string(decision.resultInfo),
            "evidence": .string(decision.evidence),
            "rule": .string(decision.rule),
            "decision": .string(decision.verdict == .allow ? "allow" : "refuse"),
        ]
        if let bill = q?.channelBill { o["channel_bill"] = .string(bill) }
        if let p = q?.productId { o["product_id"] = .string(p) }
        return NewEvent(streamId: streamId, dedupeKey: caseKey(payOrderId: order), source: .ledger,
                        type: XPayEventName.refundInquiryAnswer, environment: "Production",
                        payload: JSONValue.object(o).canonicalJSON(),
                        raw: PushReply.refundAnswer(decision).plaintext(format: notification.push.format))
    }

    /// The stored answer, to repeat it word for word for a later asking.
    public static func decision(fromPayload payload: Data) -> RefundDecision? {
        guard let v = try? JSONDecoder().decode(JSONValue.self, from: payload),
              let code = v.int64("result_code"), let verdict = RefundDecision.Verdict(rawValue: Int(code)),
              case .string(let info)? = v["result_info"], let evidence = v.text("evidence") else { return nil }
        return RefundDecision(verdict: verdict, rule: v.text("rule") ?? "", resultInfo: info, evidence: evidence)
    }
}
