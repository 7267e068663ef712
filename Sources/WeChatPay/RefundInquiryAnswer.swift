import Foundation
import LedgerCore

/// The ledger's answer to one asking of `xpay_subscribe_ios_refund_query_notify`, recorded as a
/// `source = ledger` event in the inquiry's stream, in the same transaction as the asking, before
/// it is sent.
///
/// Apple asks up to three times per refund request; each asking (`pay_order_id`, `refund_time`) is
/// decided anew from the facts known when it arrives, and gets one answer: the answer's dedupe key
/// is `refund-decision:<pay_order_id>:<refund_time>`, so a re-push of the same asking is answered
/// with the stored decision, word for word.
public enum RefundInquiryAnswer {
    public static func key(payOrderId: String, refundTime: Int64) -> String {
        DedupeKey.refundDecision(payOrderId: payOrderId, refundTime: refundTime)
    }

    /// The decision as an event in the inquiry's stream. `raw` is the plaintext reply in the push's
    /// format (before secure-mode encryption: the envelope differs on every send, its content does
    /// not). `decidedInMs` is measured in process from the asking's arrival to the reply being
    /// ready; `policyDigest` names the policy that decided (absent for a fallback).
    public static func event(_ decision: RefundDecision, for notification: XPayNotification, decidedInMs: Int64,
                             budgetMs: Int64, policyDigest: String?) -> NewEvent? {
        guard let (order, refundTime) = notification.asking else { return nil }
        var o: [String: JSONValue] = [
            "pay_order_id": .string(order),
            "refund_time": .integer(refundTime),
            "result_code": .integer(Int64(decision.resultCode)),
            "result_info": .string(decision.resultInfo),
            "evidence": .string(decision.evidence),
            "rule": .string(decision.rule),
            "decision": .string(decision.verdict == .allow ? "allow" : "refuse"),
            "decidedInMs": .integer(decidedInMs),
            "budgetMs": .integer(budgetMs),
            "reply_format": .string(notification.push.format.rawValue),
        ]
        if case .refundInquiry(let q) = notification.message {
            if let bill = q.channelBill { o["channel_bill"] = .string(bill) }
            if let p = q.productId { o["product_id"] = .string(p) }
        }
        if let policyDigest { o["policy_digest"] = .string(policyDigest) }
        return NewEvent(streamId: notification.stream, dedupeKey: key(payOrderId: order, refundTime: refundTime), source: .ledger,
                        type: XPayEventName.refundInquiryAnswer, environment: "Production",
                        signedAt: epochMillis(seconds: refundTime),
                        payload: JSONValue.object(o).canonicalJSON(),
                        raw: PushReply.refundAnswer(decision).plaintext(format: notification.push.format))
    }

    /// The answer to an authentic inquiry the ledger could not read (`unreadableReason`): stored like
    /// any answer, in the unreadable push's own stream, keyed `refund-decision:<the push's dedupe
    /// key>` (its content hash), so a re-push of the same asking repeats it word for word.
    /// `pay_order_id` is the stated id when it is one (else ""), so no refund case is opened under
    /// an id the ledger could not read.
    public static func unreadableEvent(_ decision: RefundDecision, for notification: XPayNotification, decidedInMs: Int64,
                                       budgetMs: Int64) -> NewEvent? {
        guard let reason = notification.unreadableReason, case .refundInquiry(let q) = notification.message else { return nil }
        var o: [String: JSONValue] = [
            "pay_order_id": .string(q.payOrderId.flatMap { $0.utf8.count <= 128 ? $0 : nil } ?? ""),
            "result_code": .integer(Int64(decision.resultCode)),
            "result_info": .string(decision.resultInfo),
            "evidence": .string(decision.evidence),
            "rule": .string(decision.rule),
            "decision": .string(decision.verdict == .allow ? "allow" : "refuse"),
            "unreadable_reason": .string(reason),
            "decidedInMs": .integer(decidedInMs),
            "budgetMs": .integer(budgetMs),
            "reply_format": .string(notification.push.format.rawValue),
        ]
        if let t = q.refundTime { o["refund_time"] = .integer(t) }
        return NewEvent(streamId: notification.stream, dedupeKey: unreadableKey(notification), source: .ledger,
                        type: XPayEventName.refundInquiryAnswer, environment: "Production",
                        payload: JSONValue.object(o).canonicalJSON(),
                        raw: PushReply.refundAnswer(decision).plaintext(format: notification.push.format))
    }

    public static func unreadableKey(_ notification: XPayNotification) -> String { "refund-decision:" + notification.dedupeKey }

    /// The stored answer, to repeat it word for word for a re-push of the same asking.
    public static func decision(fromPayload payload: Data) -> RefundDecision? {
        guard let v = try? JSONDecoder().decode(JSONValue.self, from: payload),
              let code = v.int64("result_code"), let verdict = RefundDecision.Verdict(rawValue: Int(code)),
              case .string(let info)? = v["result_info"], let evidence = v.text("evidence") else { return nil }
        return RefundDecision(verdict: verdict, rule: v.text("rule") ?? "", resultInfo: info, evidence: evidence)
    }
}
