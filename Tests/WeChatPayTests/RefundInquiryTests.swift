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
        XCTAssertEqual(ev["facts"]?.int64("entitlement_used_minutes"), 600)
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
        return try XPayNotification(r.open(query: q, body: body))
    }

    /// Apple asks three times: three inquiry events (one per asking) but one case, one answer.
    func testThreeAskingsOneCaseSameAnswer() throws {
        let askings = try ["1776100000", "1776100003", "1776100009"].enumerated().map { i, t in
            try inquiry(i % 2 == 0 ? .json : .xml, refundTime: t)
        }
        XCTAssertEqual(Set(askings.map(\.dedupeKey)).count, 3)
        var answers: [NewEvent] = []
        var stored: RefundDecision?
        for n in askings {
            let facts = try RefundInquiryAnswer.facts(
                for: n, customer: "oUser1", delivery: .init(orderId: "93594000000005171", deliveredAt: 1_776_000_000_000))
            // The service answers a repeat from the stored case, as documented.
            let decision = stored ?? RefundPolicy.default.decide(facts)
            let event = RefundInquiryAnswer.event(decision, for: n, streamId: n.event().streamId)
            stored = RefundInquiryAnswer.decision(fromPayload: event.payload)
            XCTAssertEqual(stored, decision, "the stored answer reproduces the decision exactly")
            // What the service repeats to a later asking: the answer's fact, through the one decoder.
            let answerFacts = FactDecoder.facts(of: event)
            XCTAssertEqual(answerFacts.map(\.kind), [FactKind.refundAnswer])
            XCTAssertEqual(answerFacts.first?.transactionId, "93594000000005171")
            XCTAssertEqual(answerFacts.first.flatMap(RefundDecision.init(answer:)), decision, "the answer's fact gives the same decision")
            answers.append(event)
        }
        XCTAssertEqual(Set(answers.map(\.dedupeKey)), [RefundInquiryAnswer.caseKey(payOrderId: "93594000000005171")])
        // Same format: the identical event; across formats only raw (the reply's encoding) differs.
        XCTAssertEqual(answers[2], answers[0], "every asking builds the identical answer event")
        XCTAssertEqual(answers[1].payload, answers[0].payload)
        XCTAssertEqual(answers[1].dedupeKey, answers[0].dedupeKey)
        XCTAssertEqual(answers[0].source, .ledger)
        XCTAssertEqual(answers[0].type, XPayEventName.refundInquiryAnswer)
        XCTAssertEqual(answers[0].streamId, "wechat:order:93594000000005171")
        // delivered 100_000 s (27.7 h) before the first asking: allowed under the 48 h default.
        XCTAssertEqual(stored?.verdict, .allow)
        // Even deciding anew from the same facts gives the same answer (the inquiry's time is the clock).
        let again = RefundPolicy.default.decide(try RefundInquiryAnswer.facts(
            for: askings[0], customer: "oUser1", delivery: .init(orderId: "93594000000005171", deliveredAt: 1_776_000_000_000)))
        XCTAssertEqual(again, stored)
    }

    func testAnswerRepliesInPushFormatEncrypted() throws {
        for format in [PushFormat.json, .xml] {
            let n = try inquiry(format, refundTime: "1776100000")
            let decision = RefundPolicy.default.decide(try RefundInquiryAnswer.facts(for: n))
            let sent = try r.reply(.refundAnswer(decision), to: n.push)
            let plain = try r.openReply(sent, format: format)
            let v = try PushCodec.parse(plain, format: format, maxDepth: 4)
            XCTAssertEqual(v.int64("result_code"), Int64(decision.resultCode))
            XCTAssertEqual(v.text("result_info"), decision.resultInfo)
            XCTAssertEqual(v.text("evidence"), decision.evidence, "evidence survives CDATA/JSON escaping byte for byte")
            XCTAssertFalse(decision.evidence.isEmpty)
            let event = RefundInquiryAnswer.event(decision, for: n, streamId: "2000001147426510")
            XCTAssertEqual(event.raw, Data(plain), "the answer event records the reply as sent (before encryption)")
        }
        // Plaintext XML push: plaintext XML answer.
        let p = try inquiry(.xml, refundTime: "1776100000", secure: false)
        let d = RefundPolicy.default.decide(try RefundInquiryAnswer.facts(for: p))
        let body = String(decoding: try r.reply(.refundAnswer(d), to: p.push), as: UTF8.self)
        XCTAssertTrue(body.hasPrefix("<xml><result_code>\(d.resultCode)</result_code><result_info><![CDATA["), body)
    }

    func testFactsOnlyFromInquiries() throws {
        let (q, body) = PushFixture.secure(PushFixture.deliver(), .json)
        let n = try XPayNotification(r.open(query: q, body: body))
        XCTAssertEqual(pushError { try RefundInquiryAnswer.facts(for: n) }?.code, "invalid_field")
        let inq = try inquiry(.json, refundTime: "1776100000")
        let f = try RefundInquiryAnswer.facts(for: inq)
        XCTAssertEqual(f.askedAt, 1_776_100_000_000)
        XCTAssertEqual(f.orderTime, 1_775_226_066_000)
        XCTAssertEqual(f.provideStatus, .delivered)
        XCTAssertEqual(f.payOrderId, "93594000000005171")
        // The inquiry's fact (what the service decides on) states the same asking.
        let asked = try RefundEvidence.inquiry(in: FactDecoder.facts(of: inq.event()))
        let fromFact = try RefundEvidence.facts(for: asked, known: [], customerRefundCases: [])
        XCTAssertEqual(fromFact, f, "the push's own reading and the fact agree")
        XCTAssertThrowsError(try RefundEvidence.inquiry(in: FactDecoder.facts(of: n.event())))
    }
}
