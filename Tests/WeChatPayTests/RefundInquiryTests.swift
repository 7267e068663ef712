import Foundation
import LedgerCore
@testable import WeChatPay
import XCTest

final class RefundPolicyTests: XCTestCase {
    let hour: EpochMillis = 3_600_000
    let day: EpochMillis = 86_400_000
    let asked: EpochMillis = 1_776_100_000_000

    func facts(delivery: Bool = true, provide: XPayProvideStatus? = .delivered, usedHours: EpochMillis? = 10,
               earlier: [RefundInquiryFacts.EarlierRefund] = []) -> RefundInquiryFacts {
        RefundInquiryFacts(
            payOrderId: "O1", customer: "oUser1", askedAt: asked, orderTime: asked - 100 * day, provideStatus: provide,
            delivery: delivery ? .init(orderId: "O1", deliveredAt: asked - (usedHours ?? 0) * hour, position: 42) : nil,
            entitlementUse: usedHours.map { .init(from: asked - $0 * hour) }, earlierRefunds: earlier)
    }

    func testNotDeliveredAllowed() {
        let d = RefundPolicy.default.decide(facts(delivery: false, provide: .notDelivered, usedHours: nil))
        XCTAssertEqual(d.verdict, .allow)
        XCTAssertEqual(d.resultCode, 0)
        XCTAssertEqual(d.rule, "not_delivered")
        // "Delivering" without a ledger delivery: the customer has nothing yet.
        XCTAssertEqual(RefundPolicy.default.decide(facts(delivery: false, provide: .delivering, usedHours: nil)).rule, "not_delivered")
        // Not delivered wins even over earlier refunds: nothing was consumed.
        let withEarlier = facts(delivery: false, provide: .notDelivered, usedHours: nil, earlier: [.init(orderId: "O0", refundedAt: asked - day)])
        XCTAssertEqual(RefundPolicy.default.decide(withEarlier).verdict, .allow)
        // Switched off: falls through to the use rule (measured from order_time, 100 days).
        var strict = RefundPolicy.default
        strict.allowWhenNotDelivered = false
        XCTAssertEqual(strict.decide(facts(delivery: false, provide: .notDelivered, usedHours: nil)).rule, "long_use")
    }

    func testUseWindowBoundary() {
        XCTAssertEqual(RefundPolicy.default.decide(facts(usedHours: 10)).verdict, .allow)
        XCTAssertEqual(RefundPolicy.default.decide(facts(usedHours: 10)).rule, "short_use")
        XCTAssertEqual(RefundPolicy.default.decide(facts(usedHours: 47)).verdict, .allow)
        XCTAssertEqual(RefundPolicy.default.decide(facts(usedHours: 48)).verdict, .refuse)
        XCTAssertEqual(RefundPolicy.default.decide(facts(usedHours: 48)).rule, "long_use")
        XCTAssertEqual(RefundPolicy.default.decide(facts(usedHours: 48)).resultCode, 1)
        // Use that ended (entitlement revoked) counts only up to its end.
        var f = facts(usedHours: 100)
        f.entitlementUse = .init(from: asked - 100 * hour, until: asked - 90 * hour)
        XCTAssertEqual(RefundPolicy.default.decide(f).verdict, .allow)
        // Delivered per WeChat but nothing to measure from: refused, and says so.
        var unknown = facts(delivery: false, provide: .delivered, usedHours: nil)
        unknown.orderTime = nil
        XCTAssertEqual(RefundPolicy.default.decide(unknown).rule, "use_unknown")
    }

    func testEarlierRefunds() {
        let recent = RefundInquiryFacts.EarlierRefund(orderId: "O0", refundedAt: asked - 30 * day)
        let old = RefundInquiryFacts.EarlierRefund(orderId: "O-1", refundedAt: asked - 200 * day)
        let same = RefundInquiryFacts.EarlierRefund(orderId: "O1", refundedAt: asked - day)
        XCTAssertEqual(RefundPolicy.default.decide(facts(earlier: [recent])).rule, "earlier_refunds")
        XCTAssertEqual(RefundPolicy.default.decide(facts(earlier: [recent])).verdict, .refuse)
        XCTAssertEqual(RefundPolicy.default.decide(facts(earlier: [old])).verdict, .allow, "outside the 90-day window")
        XCTAssertEqual(RefundPolicy.default.decide(facts(earlier: [same])).verdict, .allow, "this order's own refund does not count")
        var lenient = RefundPolicy.default
        lenient.maxEarlierRefunds = 1
        XCTAssertEqual(lenient.decide(facts(earlier: [recent])).verdict, .allow)
    }

    func testEvidenceIsDeterministicJSON() throws {
        let f = facts(earlier: [.init(orderId: "B", refundedAt: asked - 2 * day), .init(orderId: "A", refundedAt: asked - 2 * day)])
        let a = RefundPolicy.default.decide(f)
        var shuffled = f
        shuffled.earlierRefunds.reverse()
        XCTAssertEqual(a, RefundPolicy.default.decide(shuffled))
        XCTAssertFalse(a.evidence.isEmpty)
        let ev = try JSONDecoder().decode(JSONValue.self, from: Data(a.evidence.utf8))
        XCTAssertEqual(ev.text("rule"), "earlier_refunds")
        XCTAssertEqual(ev["policy"]?.int64("maxEntitlementUseHours"), 48)
        XCTAssertEqual(ev["facts"]?.text("pay_order_id"), "O1")
        XCTAssertEqual(ev["facts"]?["ledger_delivery"]?.int64("event_position"), 42)
        // The basis is named for what it is: time since the ledger's delivery, not app usage.
        XCTAssertEqual(ev["facts"]?["usage"]?.text("basis"), "time_since_delivery")
        XCTAssertEqual(ev["facts"]?["usage"]?.int64("minutes"), 600)
        XCTAssertNil(ev["facts"]?["entitlement_used_minutes"], "the old name claimed a use the ledger cannot see")
        XCTAssertEqual(ev["policy"]?.text("digest"), RefundPolicy.default.digest)
        XCTAssertEqual(try JSONValue(json: Data(RefundPolicy.default.decide(f, policyDigest: "abc").evidence.utf8))["policy"]?.text("digest"), "abc")
        let short = RefundPolicy.default.decide(facts(usedHours: 10))
        XCTAssertTrue(short.resultInfo.contains("600 minutes since delivery"), short.resultInfo)
    }

    /// Seed 000 §7.4: `evidence` is required and is the audit's basis; the ledger caps it at
    /// `RefundDecision.maxEvidenceBytes`, leaving out the oldest earlier refunds and saying how many
    /// (the rule still counts all of them), then long texts, never answering an empty evidence.
    func testEvidenceIsCappedWithACountOfWhatWasLeftOut() throws {
        let many = (0..<500).map { i in
            RefundInquiryFacts.EarlierRefund(orderId: "EARLIER-ORDER-\(i)", refundedAt: asked - day + EpochMillis(i) * 1000,
                                             refundIds: ["WXREFUND-\(i)-A", "WXREFUND-\(i)-B"])
        }
        let d = RefundPolicy.default.decide(facts(earlier: many))
        XCTAssertEqual(d.rule, "earlier_refunds", "the rule saw all 500")
        XCTAssertLessThanOrEqual(d.evidence.utf8.count, RefundDecision.maxEvidenceBytes)
        let e = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(d.evidence.utf8)) as? [String: Any])
        let f = try XCTUnwrap(e["facts"] as? [String: Any])
        let listed = try XCTUnwrap(f["earlier_refunds_in_window"] as? [[String: Any]])
        let leftOut = try XCTUnwrap(f["earlier_refunds_left_out"] as? Int)
        XCTAssertGreaterThan(listed.count, 0)
        XCTAssertEqual(listed.count + leftOut, 500, "every refund either listed or counted")
        XCTAssertEqual(f["earlier_refunds_count"] as? Int, 500)
        XCTAssertEqual(listed.last?["order_id"] as? String, "EARLIER-ORDER-499", "the most recent are kept")
        XCTAssertEqual(f["pay_order_id"] as? String, "O1")
        // A short one is untouched: nothing left out, nothing counted as such.
        let few = RefundPolicy.default.decide(facts(earlier: Array(many.prefix(2))))
        XCTAssertFalse(few.evidence.contains("left_out"))
        // A fallback's long error text is shortened with a count, not cut silently.
        let long = RefundDecision.fallback(.allow, reason: "decision_error", budgetMs: 2500, payOrderId: "O1", askedAt: asked,
                                           why: String(repeating: "x", count: 10_000))
        XCTAssertLessThanOrEqual(long.evidence.utf8.count, RefundDecision.maxEvidenceBytes)
        XCTAssertTrue(long.evidence.contains("(9744 characters left out)"), long.evidence)
        XCTAssertTrue(long.evidence.contains("\"rule\":\"decision_error\""))
    }

    func testPolicyFromJSON() throws {
        XCTAssertEqual(try RefundPolicy.fromJSON(Data("{}".utf8)), .default)
        let p = try RefundPolicy.fromJSON(Data(#"{"maxEntitlementUseHours": 2, "maxEarlierRefunds": 3}"#.utf8))
        XCTAssertEqual(p.maxEntitlementUseHours, 2)
        XCTAssertEqual(p.maxEarlierRefunds, 3)
        XCTAssertEqual(p.earlierRefundWindowDays, 90)
        XCTAssertTrue(p.allowWhenNotDelivered)
        XCTAssertEqual(p.decide(facts(usedHours: 3)).verdict, .refuse)
        XCTAssertThrowsError(try RefundPolicy.fromJSON(Data(#"{"maxEntitlementUseHours": "48"}"#.utf8)))
        XCTAssertThrowsError(try RefundPolicy.fromJSON(Data("[]".utf8)))
        do {
            _ = try RefundPolicy.fromJSON(Data(#"{"earlierRefundWindowDays": -1}"#.utf8))
            XCTFail("negative window accepted")
        } catch {
            XCTAssertEqual(error, .outOfRange(field: "earlierRefundWindowDays", value: -1, allowed: "0...3660"))
            XCTAssertTrue(error.description.contains("earlierRefundWindowDays"))
        }
    }
}

final class RefundInquiryAnswerTests: XCTestCase {
    let r = PushFixture.receiver()

    func inquiry(_ format: PushFormat, refundTime: String, secure: Bool = true) throws -> XPayNotification {
        let m = PushFixture.refundInquiry(refundTime: refundTime)
        let (q, body) = secure ? PushFixture.secure(m, format) : PushFixture.plaintext(m, format)
        return XPayNotification(try r.open(query: q, body: body))
    }

    /// What the service decides on: the inquiry's own fact (through the one decoder) and what the
    /// ledger knows of its order.
    func facts(_ n: XPayNotification, known: [Fact] = []) throws -> RefundInquiryFacts {
        try RefundEvidence.facts(for: RefundEvidence.inquiry(in: FactDecoder.facts(of: n.event())), known: known, customerRefundCases: [])
    }

    /// Apple asks three times: each asking is its own event and gets its own answer, decided from
    /// the facts known then; a re-push of one asking repeats its stored answer word for word.
    func testEachAskingHasItsOwnAnswerAndARePushRepeatsIt() throws {
        let askings = try ["1776100000", "1776100003", "1776100009"].enumerated().map { i, t in
            try inquiry(i % 2 == 0 ? .json : .xml, refundTime: t)
        }
        XCTAssertEqual(Set(askings.map(\.dedupeKey)).count, 3)
        var answers: [NewEvent] = []
        for (i, n) in askings.enumerated() {
            let decision = RefundPolicy.default.decide(try facts(n))
            let event = try XCTUnwrap(RefundInquiryAnswer.event(decision, for: n, decidedInMs: Int64(10 + i), budgetMs: 2500, policyDigest: "d1"))
            XCTAssertEqual(RefundInquiryAnswer.decision(fromPayload: event.payload), decision, "the stored answer reproduces the decision exactly")
            // What a re-push is answered with: the answer's fact, through the one decoder.
            let answerFacts = FactDecoder.facts(of: event)
            XCTAssertEqual(answerFacts.map(\.kind), [FactKind.refundAnswer])
            XCTAssertEqual(answerFacts.first?.transactionId, "93594000000005171")
            XCTAssertEqual(answerFacts.first.flatMap(RefundDecision.init(answer:)), decision, "the answer's fact gives the same decision")
            XCTAssertEqual(answerFacts.first?.details["decidedInMs"]?.int64, Int64(10 + i))
            XCTAssertEqual(answerFacts.first?.details["refund_time"]?.int64, n.asking?.refundTime)
            answers.append(event)
        }
        XCTAssertEqual(answers.map(\.dedupeKey), askings.map { "refund-decision:93594000000005171:\($0.asking!.refundTime)" },
                       "one answer per asking (pay_order_id, refund_time)")
        XCTAssertEqual(Set(answers.map(\.streamId)), ["wechat:order:93594000000005171"], "in the asking's own stream")
        XCTAssertEqual(answers[0].source, .ledger)
        XCTAssertEqual(answers[0].type, XPayEventName.refundInquiryAnswer)
        XCTAssertEqual(answers[0].signedAt, 1_776_100_000_000)
        let payload = try JSONValue(json: answers[0].payload)
        XCTAssertEqual(payload.int64("decidedInMs"), 10)
        XCTAssertEqual(payload.int64("budgetMs"), 2500)
        XCTAssertEqual(payload.text("policy_digest"), "d1")
        XCTAssertEqual(payload.text("reply_format"), "json")
        // Deciding anew from the same facts gives the same answer (the inquiry's time is the clock).
        XCTAssertEqual(RefundPolicy.default.decide(try facts(askings[0])), RefundInquiryAnswer.decision(fromPayload: answers[0].payload))
    }

    func testAnswerRepliesInPushFormatEncrypted() throws {
        for format in [PushFormat.json, .xml] {
            let n = try inquiry(format, refundTime: "1776100000")
            let decision = RefundPolicy.default.decide(try facts(n))
            let sent = try r.reply(.refundAnswer(decision), to: n.push)
            let plain = try r.openReply(sent, format: format)
            let v = try PushCodec.parse(plain, format: format, maxDepth: 4)
            XCTAssertEqual(v.int64("result_code"), Int64(decision.resultCode))
            XCTAssertEqual(v.text("result_info"), decision.resultInfo)
            XCTAssertEqual(v.text("evidence"), decision.evidence, "evidence survives CDATA/JSON escaping byte for byte")
            XCTAssertFalse(decision.evidence.isEmpty)
            let event = try XCTUnwrap(RefundInquiryAnswer.event(decision, for: n, decidedInMs: 3, budgetMs: 2500, policyDigest: nil))
            XCTAssertEqual(event.raw, Data(plain), "the answer event records the reply's plaintext body (before encryption)")
        }
        // Plaintext XML push: plaintext XML answer.
        let p = try inquiry(.xml, refundTime: "1776100000", secure: false)
        let d = RefundPolicy.default.decide(try facts(p))
        let body = String(decoding: try r.reply(.refundAnswer(d), to: p.push), as: UTF8.self)
        XCTAssertTrue(body.hasPrefix("<xml><result_code>\(d.resultCode)</result_code><result_info><![CDATA["), body)
    }

    /// The deadline's fallback: the configured verdict, rule `deadline`, evidence saying so.
    func testTheFallbackSaysItIsOne() throws {
        let d = RefundDecision.fallback(.refuse, reason: "deadline", budgetMs: 2500, payOrderId: "O1", askedAt: 1_776_100_000_000,
                                        why: "the decision's read did not finish within the budget")
        XCTAssertEqual(d.resultCode, 1)
        XCTAssertEqual(d.rule, "deadline")
        XCTAssertTrue(d.resultInfo.contains("2500 ms"))
        let ev = try JSONValue(json: Data(d.evidence.utf8))
        XCTAssertEqual(ev.text("rule"), "deadline")
        XCTAssertEqual(ev["fallback"]?.int64("budget_ms"), 2500)
        XCTAssertEqual(ev["facts"]?.text("pay_order_id"), "O1")
    }

    func testOnlyInquiriesHaveAnAsking() throws {
        let (q, body) = PushFixture.secure(PushFixture.deliver(), .json)
        let n = XPayNotification(try r.open(query: q, body: body))
        XCTAssertNil(n.asking)
        XCTAssertNil(RefundInquiryAnswer.event(RefundDecision(verdict: .allow, rule: "x", resultInfo: "", evidence: "{}"), for: n,
                                               decidedInMs: 0, budgetMs: 1, policyDigest: nil))
        XCTAssertThrowsError(try RefundEvidence.inquiry(in: FactDecoder.facts(of: n.event())))
        let inq = try inquiry(.json, refundTime: "1776100000")
        let f = try facts(inq)
        XCTAssertEqual(f.askedAt, 1_776_100_000_000)
        XCTAssertEqual(f.orderTime, 1_775_226_066_000)
        XCTAssertEqual(f.provideStatus, .delivered)
        XCTAssertEqual(f.payOrderId, "93594000000005171")
        XCTAssertEqual(f.productId, "subscription_vip_monthly", "the inquiry's product when no delivery is known")
    }
}
