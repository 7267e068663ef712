import XCTest
@testable import LedgerCore

/// RefundEvidence.facts: what the refund policy is told, from facts only (the inquiry's own fact
/// and the facts of its order and subscription).
final class RefundCaseEvidenceTests: XCTestCase {
    typealias W = WX

    /// The inquiry's fact, as the service derives it from the event it is about to store.
    func inquiry(_ order: String, asked: Double, provide: String = "1", orderTime: Double = 30,
                 stream: String = WX.otid) throws -> Fact {
        try RefundEvidence.inquiry(in: FactDecoder.facts(of: W.event(W.inquiry(order: order, asked: asked, orderTime: orderTime,
                                                                               provide: provide), position: 0, stream: stream).event))
    }

    var stream: [RecordedEvent] {
        [
            W.event(W.signing(signed: 0, renewal: 30), position: 1),
            W.event(W.deliver(order: "O1", paid: 0.0001, renewal: 30), position: 2),
            W.event(W.deliver(order: "O2", paid: 30, renewal: 60), position: 3),
        ]
    }

    func testDeliveryUseWindowAndCustomerComeFromTheFacts() throws {
        let known = W.facts(stream)
        let facts = try RefundEvidence.facts(for: inquiry("O2", asked: 30.5), known: known, customerRefundCases: [])
        XCTAssertEqual(facts.payOrderId, "O2")
        XCTAssertEqual(facts.customer, W.openId)
        XCTAssertEqual(facts.askedAt, W.sec(30.5) * 1000)
        XCTAssertEqual(facts.orderTime, W.sec(30) * 1000)
        XCTAssertEqual(facts.provideStatus, .delivered)
        XCTAssertEqual(facts.delivery, .init(orderId: "O2", deliveredAt: W.sec(30) * 1000, periodEndsAt: W.d(60), position: 3,
                                             deliveredAtBasis: "PaidTime"))
        // What the answer's evidence names: product, price paid, the subscription at the asking.
        XCTAssertEqual(facts.productId, W.product)
        XCTAssertEqual(facts.pricePaid, .init(milliunits: 30_000, currency: "CNY"))
        XCTAssertEqual(facts.subscription?.originalTransactionId, W.otid)
        XCTAssertEqual(facts.statusAtAsking, "active")
        XCTAssertEqual(facts.autoRenewAtAsking, 1)
        XCTAssertEqual(facts.entitlementUse, .init(from: W.sec(30) * 1000, until: nil), "still entitled when asked")
        XCTAssertEqual(RefundPolicy.default.decide(facts).verdict, .allow, "12 hours of use, under 48")
        // The facts in any order, twice over: the same answer.
        XCTAssertEqual(try RefundEvidence.facts(for: inquiry("O2", asked: 30.5), known: (known + known).reversed(),
                                                customerRefundCases: []), facts)

        let late = try RefundEvidence.facts(for: inquiry("O1", asked: 45), known: known, customerRefundCases: [])
        XCTAssertEqual(late.entitlementUse?.until, W.d(30), "the period had ended before the asking")
        let decision = RefundPolicy.default.decide(late)
        XCTAssertEqual(decision.rule, "long_use")
        XCTAssertTrue(decision.evidence.contains("\"event_position\":2"), decision.evidence)
    }

    func testARefundOfTheOrderEndsTheUseWindowAndMapsWeChatsOrderIdToTheDelivery() throws {
        // pay_order_id is WeChat's id; an earlier refund notify names both ids.
        let known = W.facts(stream + [W.event(W.refundNotify(order: "O2", wxOrder: "WX-2", at: 31), position: 4)])
        let facts = try RefundEvidence.facts(for: inquiry("WX-2", asked: 32), known: known, customerRefundCases: [])
        XCTAssertEqual(facts.delivery?.orderId, "O2")
        XCTAssertEqual(facts.entitlementUse, .init(from: W.sec(30) * 1000, until: W.sec(31) * 1000))
        // Asked under the delivery's MchOrderNo: the delivery's alias facts find it.
        let byMch = try RefundEvidence.facts(for: inquiry("mch-O2", asked: 32), known: known, customerRefundCases: [])
        XCTAssertEqual(byMch.delivery?.position, 3)
        XCTAssertEqual(byMch.entitlementUse?.until, W.sec(31) * 1000, "the refund of O2 is the refund of mch-O2")
        // A refund that failed ends nothing.
        let failed = W.facts(stream + [W.event(W.refundNotify(order: "O2", at: 31, ok: false), position: 4)])
        XCTAssertNil(try RefundEvidence.facts(for: inquiry("O2", asked: 32), known: failed, customerRefundCases: []).entitlementUse?.until)
    }

    func testNothingKnownLeavesTheInquirysOwnFactsForThePolicy() throws {
        let facts = try RefundEvidence.facts(for: inquiry("O9", asked: 40, provide: "0"), known: [], customerRefundCases: [])
        XCTAssertNil(facts.delivery)
        XCTAssertNil(facts.entitlementUse)
        XCTAssertNil(facts.customer)
        XCTAssertEqual(facts.provideStatus, .notDelivered)
        XCTAssertEqual(RefundPolicy.default.decide(facts).rule, "not_delivered")
        // An undocumented provide_status is no status.
        XCTAssertNil(try RefundEvidence.facts(for: inquiry("O9", asked: 40, provide: "7"), known: [], customerRefundCases: []).provideStatus)
    }

    /// Without a delivery of its own (not arrived yet, or arrived under no id the facts join), a
    /// link to a subscription still names the customer through the subscription's contract.
    func testTheCustomerFallsBackToTheSubscriptionsContract() throws {
        let known = W.facts([
            W.event(W.signing(signed: 0, renewal: 30, openId: "oContract"), position: 1),
            W.ledger(W.link(order: "O5"), type: XPayEventName.orderLinked, position: 2, recorded: 1),
        ])
        let facts = try RefundEvidence.facts(for: inquiry("O5", asked: 2), known: known, customerRefundCases: [])
        XCTAssertEqual(facts.customer, "oContract")
        XCTAssertNil(facts.delivery)
        // A delivery without an OpenId: the contract's customer too.
        let quiet = W.facts([W.event(W.signing(signed: 0, renewal: 30, openId: "oContract"), position: 1),
                             W.event(W.deliver(order: "O6", paid: 1, renewal: 31, openId: ""), position: 2)])
        XCTAssertEqual(try RefundEvidence.facts(for: inquiry("O6", asked: 2), known: quiet, customerRefundCases: []).customer, "oContract")
        // Facts of another subscription never name this order's customer.
        let other = W.facts([W.event(W.signing(signed: 0, renewal: 30, otid: "999", openId: "oOther"), position: 1)])
        XCTAssertNil(try RefundEvidence.facts(for: inquiry("O5", asked: 2), known: other, customerRefundCases: []).customer)
    }

    func testEarlierRefundsAreTheCustomersRefundedCasesOfOtherOrders() throws {
        let history = RefundCaseFold.cases(from: W.facts([
            W.event(W.refundNotify(order: "O1", at: 20), position: 10),             // refunded: counts
            W.event(W.refundNotify(order: "O5", at: 21, ok: false), position: 11),  // failed: does not
            W.event(W.inquiry(order: "O6", asked: 22), position: 12),               // pending: does not
            W.event(W.refundNotify(order: "O2", at: 29), position: 13),             // this order: does not
            W.event(W.refundNotify(order: "mch-O2", at: 29), position: 14),         // this order under its alias: does not
        ]))
        let facts = try RefundEvidence.facts(for: inquiry("O2", asked: 30.5), known: W.facts(stream), customerRefundCases: history)
        XCTAssertEqual(facts.earlierRefunds, [.init(orderId: "O1", refundedAt: W.sec(20) * 1000, refundIds: ["wxrefund-O1-0"])],
                       "with the refund's own ids, for the evidence")
        let decision = RefundPolicy.default.decide(facts)
        XCTAssertEqual(decision.verdict, .refuse)
        XCTAssertEqual(decision.rule, "earlier_refunds")
    }

    func testMalformedInquiriesAreClearErrors() throws {
        var q = try inquiry("O2", asked: 30)
        q.transactionId = nil
        XCTAssertThrowsError(try RefundEvidence.facts(for: q, known: [], customerRefundCases: [])) {
            XCTAssertEqual($0 as? RefundEvidenceError, .missing(field: "pay_order_id"))
        }
        // Not an inquiry: a delivery's facts.
        let delivery = FactDecoder.facts(of: stream[1])
        XCTAssertThrowsError(try RefundEvidence.inquiry(in: delivery)) {
            XCTAssertEqual($0 as? RefundEvidenceError, .notAnInquiry(position: 2))
        }
        XCTAssertThrowsError(try RefundEvidence.facts(for: delivery[0], known: [], customerRefundCases: [])) {
            XCTAssertEqual($0 as? RefundEvidenceError, .notAnInquiry(position: 2))
        }
        // The decoder could not read it: its reason reaches the error.
        let noTime = FactDecoder.facts(of: W.event(W.inquiry(order: "O2", asked: 30).removing(["refund_time"]), position: 9))
        XCTAssertThrowsError(try RefundEvidence.inquiry(in: noTime)) { error in
            guard case .unreadable(let reason)? = error as? RefundEvidenceError else { return XCTFail("\(error)") }
            XCTAssertTrue(reason.contains("refund_time"), reason)
            XCTAssertTrue(String(describing: error).contains("decoded from the right format"), "\(error)")
        }
        XCTAssertThrowsError(try RefundEvidence.inquiry(in: [])) {
            XCTAssertEqual($0 as? RefundEvidenceError, .notAnInquiry(position: 0))
        }
        // A stored inquiry (placed) decides the same as the one about to be stored.
        let stored = FactDecoder.facts(of: W.event(W.inquiry(order: "O2", asked: 30.5), position: 20))
        XCTAssertEqual(try RefundEvidence.facts(for: RefundEvidence.inquiry(in: stored), known: W.facts(stream),
                                                customerRefundCases: []).delivery?.position, 3)
    }

    func testAStoredAnswerFactGivesTheDecisionBack() throws {
        let decision = RefundPolicy.default.decide(try RefundEvidence.facts(for: inquiry("O2", asked: 30.5), known: W.facts(stream),
                                                                            customerRefundCases: []))
        let payload: JSONValue = .object([
            "pay_order_id": .string("O2"), "result_code": .integer(Int64(decision.resultCode)),
            "result_info": .string(decision.resultInfo), "evidence": .string(decision.evidence),
            "rule": .string(decision.rule), "decision": .string("allow"),
        ])
        let facts = FactDecoder.facts(of: W.ledger(payload, type: XPayEventName.refundInquiryAnswer, position: 5, recorded: 31))
        XCTAssertEqual(facts.map(\.kind), [.refundAnswer])
        XCTAssertEqual(RefundDecision(answer: facts[0]), decision)
        XCTAssertNil(RefundDecision(answer: W.facts(stream)[0]), "not an answer")
        var broken = facts[0]
        broken.detail = #"{"result_code":2,"result_info":"x","evidence":"{}"}"#
        XCTAssertNil(RefundDecision(answer: broken), "result_code 2 is no verdict")
    }
}
