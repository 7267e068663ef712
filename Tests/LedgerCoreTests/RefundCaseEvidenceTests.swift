import XCTest
@testable import LedgerCore

/// RefundEvidence.facts: what the refund policy is told, from loaded events only.
final class RefundCaseEvidenceTests: XCTestCase {
    typealias W = WX

    func inquiry(_ order: String, asked: Double, provide: String = "1", orderTime: Double = 30) -> XPayRefundInquiry {
        guard case .refundInquiry(let q) = XPayMessage(W.inquiry(order: order, asked: asked, orderTime: orderTime, provide: provide)) else {
            fatalError("fixture is not an inquiry")
        }
        return q
    }

    var stream: [RecordedEvent] {
        [
            W.event(W.signing(signed: 0, renewal: 30), position: 1),
            W.event(W.deliver(order: "O1", paid: 0.0001, renewal: 30), position: 2),
            W.event(W.deliver(order: "O2", paid: 30, renewal: 60), position: 3),
        ]
    }

    func testDeliveryUseWindowAndCustomerComeFromTheStream() throws {
        let facts = try RefundEvidence.facts(for: inquiry("O2", asked: 30.5), streamEvents: stream, customerRefundCases: [])
        XCTAssertEqual(facts.payOrderId, "O2")
        XCTAssertEqual(facts.customer, W.openId)
        XCTAssertEqual(facts.askedAt, W.sec(30.5) * 1000)
        XCTAssertEqual(facts.orderTime, W.sec(30) * 1000)
        XCTAssertEqual(facts.provideStatus, .delivered)
        XCTAssertEqual(facts.delivery, .init(orderId: "O2", deliveredAt: W.sec(30) * 1000, periodEndsAt: W.d(60), position: 3))
        XCTAssertEqual(facts.entitlementUse, .init(from: W.sec(30) * 1000, until: nil), "still entitled when asked")
        XCTAssertEqual(RefundPolicy.default.decide(facts).verdict, .allow, "12 hours of use, under 48")

        let late = try RefundEvidence.facts(for: inquiry("O1", asked: 45), streamEvents: stream, customerRefundCases: [])
        XCTAssertEqual(late.entitlementUse?.until, W.d(30), "the period had ended before the asking")
        let decision = RefundPolicy.default.decide(late)
        XCTAssertEqual(decision.rule, "long_use")
        XCTAssertTrue(decision.evidence.contains("\"event_position\":2"), decision.evidence)
    }

    func testARefundOfTheOrderEndsTheUseWindowAndMapsWeChatsOrderIdToTheDelivery() throws {
        // pay_order_id is WeChat's id; an earlier refund notify names both ids.
        let events = stream + [W.event(W.refundNotify(order: "O2", wxOrder: "WX-2", at: 31), position: 4)]
        let facts = try RefundEvidence.facts(for: inquiry("WX-2", asked: 32), streamEvents: events, customerRefundCases: [])
        XCTAssertEqual(facts.delivery?.orderId, "O2")
        XCTAssertEqual(facts.entitlementUse, .init(from: W.sec(30) * 1000, until: W.sec(31) * 1000))
    }

    func testNothingKnownLeavesTheInquirysOwnFactsForThePolicy() throws {
        let facts = try RefundEvidence.facts(for: inquiry("O9", asked: 40, provide: "0"), streamEvents: [], customerRefundCases: [])
        XCTAssertNil(facts.delivery)
        XCTAssertNil(facts.entitlementUse)
        XCTAssertNil(facts.customer)
        XCTAssertEqual(RefundPolicy.default.decide(facts).rule, "not_delivered")
    }

    func testEarlierRefundsAreTheCustomersRefundedCasesOfOtherOrders() throws {
        let history = RefundCaseFold.cases(from: [
            W.event(W.refundNotify(order: "O1", at: 20), position: 10),             // refunded: counts
            W.event(W.refundNotify(order: "O5", at: 21, ok: false), position: 11),  // failed: does not
            W.event(W.inquiry(order: "O6", asked: 22), position: 12),               // pending: does not
            W.event(W.refundNotify(order: "O2", at: 29), position: 13),             // this order: does not
        ])
        let facts = try RefundEvidence.facts(for: inquiry("O2", asked: 30.5), streamEvents: stream, customerRefundCases: history)
        XCTAssertEqual(facts.earlierRefunds, [.init(orderId: "O1", refundedAt: W.sec(20) * 1000)])
        let decision = RefundPolicy.default.decide(facts)
        XCTAssertEqual(decision.verdict, .refuse)
        XCTAssertEqual(decision.rule, "earlier_refunds")
    }

    func testMalformedInquiriesAreClearErrors() {
        var q = inquiry("O2", asked: 30)
        q.payOrderId = nil
        XCTAssertThrowsError(try RefundEvidence.facts(for: q, streamEvents: [], customerRefundCases: [])) {
            XCTAssertEqual($0 as? RefundEvidenceError, .missing(field: "pay_order_id"))
        }
        q = inquiry("O2", asked: 30)
        q.refundTime = 0
        XCTAssertThrowsError(try RefundEvidence.facts(for: q, streamEvents: [], customerRefundCases: [])) {
            XCTAssertEqual($0 as? RefundEvidenceError, .missing(field: "refund_time"))
        }
        let notInquiry = stream[1]
        XCTAssertThrowsError(try RefundEvidence.facts(forInquiryEvent: notInquiry, streamEvents: [], customerRefundCases: [])) {
            XCTAssertEqual($0 as? RefundEvidenceError, .notAnInquiry(position: 2))
        }
        let stored = W.event(W.inquiry(order: "O2", asked: 30.5), position: 20)
        XCTAssertEqual(try RefundEvidence.facts(forInquiryEvent: stored, streamEvents: stream, customerRefundCases: []).delivery?.position, 3)
    }
}
