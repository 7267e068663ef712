import XCTest
@testable import LedgerCore

/// Refund cases for auditors, from both sources, order-independent.
final class RefundCaseTests: XCTestCase {
    typealias W = WX
    static let ms: EpochMillis = 1

    /// The subscription of WX.otid: signed day 0, periods O1 (0–30) and O2 (30–60); Apple asks three
    /// times about O2 on day 31; the ledger answers once (40 ms after the first asking); WeChat
    /// reports the refund failed on day 32 and succeeded on day 33.
    func wechatEvents() -> [RecordedEvent] {
        var events = [
            W.event(W.signing(signed: 0, renewal: 30), position: 1),
            W.event(W.deliver(order: "O1", paid: 0.0001, renewal: 30), position: 2),
            W.event(W.deliver(order: "O2", paid: 30, renewal: 60, price: 990), position: 3),
        ]
        var first = W.event(W.inquiry(order: "O2", asked: 31, orderTime: 30), position: 4)
        first.recordedAt = W.d(31) + 700
        events.append(first)
        events.append(W.ledger(W.answer(order: "O2", allow: true), type: XPayEventName.refundInquiryAnswer,
                               position: 5, recorded: 31))
        events[4].recordedAt = W.d(31) + 740
        for (i, later) in [31.0001, 31.0002].enumerated() {
            var e = W.event(W.inquiry(order: "O2", asked: later, orderTime: 30), position: Int64(6 + i))
            e.recordedAt = W.d(later) + 500
            events.append(e)
        }
        events.append(W.event(W.refundNotify(order: "O2", at: 32, ok: false, fee: 990), position: 8))
        events.append(W.event(W.refundNotify(order: "O2", at: 33, fee: 990), position: 9))
        return events
    }

    func appleEvent(_ type: String, position: Int64, signed: Double, tx: String = "t9", revoked: Double? = nil,
                    percentage: Int? = nil, reason: String? = nil, stream: String = "S1") -> RecordedEvent {
        var transaction: [String: Any] = ["transactionId": tx, "originalTransactionId": stream, "price": 4990,
                                          "currency": "USD", "appAccountToken": "tok-1", "productId": "com.example.monthly",
                                          "signedDate": Fixture.d(signed)]
        if let revoked {
            transaction["revocationDate"] = Fixture.d(revoked)
            transaction["revocationReason"] = 1
            transaction["revocationType"] = percentage == nil ? "REFUND_FULL" : "REFUND_PRORATED"
        }
        if let percentage { transaction["revocationPercentage"] = percentage }
        var data: [String: Any] = ["bundleId": "com.example.app", "environment": "Production", "status": 1]
        if let reason { data["consumptionRequestReason"] = reason }
        let payload: [String: Any] = ["notificationType": type, "notificationUUID": "uuid-\(position)",
                                      "signedDate": Fixture.d(signed), "data": data, "transactionInfo": transaction]
        let json = try! JSONSerialization.data(withJSONObject: payload, options: [.sortedKeys])
        return RecordedEvent(position: position, recordedAt: Fixture.d(signed) + 1000, event: NewEvent(
            streamId: stream, dedupeKey: "uuid-\(position)", source: .apple, type: type, environment: "Production",
            signedAt: Fixture.d(signed), payload: json, raw: json))
    }

    func testThreeAskingsOneAnswerAndTheRefundOutcomesFormOneWeChatCase() throws {
        let cases = RefundCaseFold.cases(from: wechatEvents())
        XCTAssertEqual(cases.count, 1, "deliveries and contract messages are context, not cases")
        let c = try XCTUnwrap(cases.first)
        XCTAssertEqual(c.caseId, "wechat:O2")
        XCTAssertEqual(c.source, .wechat)
        XCTAssertEqual(c.orderId, "O2")
        XCTAssertEqual(c.originalTransactionId, W.otid)
        XCTAssertEqual(c.openId, W.openId)
        XCTAssertEqual(c.productId, W.product)
        XCTAssertEqual(c.openedAt, W.sec(31) * 1000, "the first asking's refund_time")
        XCTAssertEqual(c.decision, .allow)
        XCTAssertEqual(c.decisionRule, "short_use")
        XCTAssertEqual(c.outcome, .refunded, "a success is final even after a failure")
        XCTAssertEqual(c.outcomeAt, W.sec(33) * 1000)
        XCTAssertEqual(c.reason, "UNINTENDED_PURCHASE")
        XCTAssertEqual(c.orderAmount, .init(milliunits: 9_900, currency: "CNY"))
        XCTAssertEqual(c.refundedAmount, .init(milliunits: 9_900, currency: "CNY"))
        XCTAssertEqual(c.deliveryPosition, 3)
        XCTAssertEqual(c.links, [3, 4, 5, 6, 7, 8, 9])
        XCTAssertEqual(c.inquiries.map(\.position), [4, 6, 7])
        XCTAssertEqual(c.inquiries.map(\.answerPosition), [5, 5, 5])
        XCTAssertEqual(c.inquiries.map(\.repeatedAnswer), [false, true, true])
        XCTAssertEqual(c.inquiries.first?.provideStatus, 1)
        XCTAssertEqual(c.answers.count, 1)
        let answer = try XCTUnwrap(c.answers.first)
        XCTAssertEqual(answer.inquiryPosition, 4)
        XCTAssertEqual(answer.latencyMs, 40)
        XCTAssertEqual(answer.latencyFromAskedMs, W.d(31) + 740 - W.sec(31) * 1000)
        XCTAssertEqual(answer.evidence, #"{"rule":"short_use"}"#)
        XCTAssertEqual(answer.resultCode, 0)
        XCTAssertEqual(c.refundOutcomes.map(\.succeeded), [false, true])
        XCTAssertEqual(c.refundOutcomes.last?.succeededAt, W.sec(33) * 1000)
        XCTAssertNil(c.refundOutcomes.first?.succeededAt)
    }

    func testCasesDoNotDependOnOrderOrDuplicates() {
        let events = wechatEvents() + [
            appleEvent("CONSUMPTION_REQUEST", position: 20, signed: 10, reason: "UNINTENDED_PURCHASE"),
            appleEvent("REFUND", position: 21, signed: 12, revoked: 12),
            appleEvent("REFUND_REVERSED", position: 22, signed: 15),
            appleEvent("REFUND_DECLINED", position: 23, signed: 11, tx: "t10"),
            appleEvent("DID_RENEW", position: 24, signed: 9, tx: "t11"),
        ]
        let reference = RefundCaseFold.cases(from: events)
        XCTAssertEqual(reference.map(\.caseId), ["apple:t9", "apple:t10", "wechat:O2"], "sorted by openedAt, then id")
        var rng = SplitMix64(seed: 0xCA5E)
        for _ in 0..<200 {
            var shuffled = events + (0..<3).map { _ in rng.pick(events) }
            shuffled.shuffle(using: &rng)
            XCTAssertEqual(RefundCaseFold.cases(from: shuffled), reference)
        }
    }

    func testAppleCasesCarryReasonRevocationAmountAndTheLatestWord() throws {
        let refunded = RefundCaseFold.cases(from: [
            appleEvent("CONSUMPTION_REQUEST", position: 1, signed: 10, reason: "UNINTENDED_PURCHASE"),
            appleEvent("REFUND", position: 2, signed: 12, revoked: 11.5, percentage: 50_000),
        ])
        let c = try XCTUnwrap(refunded.first)
        XCTAssertEqual(c.caseId, "apple:t9")
        XCTAssertEqual(c.originalTransactionId, "S1")
        XCTAssertEqual(c.customerId, "tok-1")
        XCTAssertNil(c.openId)
        XCTAssertNil(c.decision, "the ledger does not decide Apple refunds")
        XCTAssertEqual(c.outcome, .refunded)
        XCTAssertEqual(c.outcomeAt, Fixture.d(11.5))
        XCTAssertEqual(c.reason, "UNINTENDED_PURCHASE")
        XCTAssertEqual(c.orderAmount, .init(milliunits: 4_990, currency: "USD"))
        XCTAssertEqual(c.refundedAmount, .init(milliunits: 2_495, currency: "USD"), "prorated 50 %")
        XCTAssertEqual(c.revocationPercentage, 50_000)
        XCTAssertEqual(c.revocationReason, 1)
        XCTAssertEqual(c.revocationType, "REFUND_PRORATED")
        XCTAssertEqual(c.openedAt, Fixture.d(10))
        XCTAssertEqual(c.links, [1, 2])
        XCTAssertEqual(c.appleNotifications.map(\.notificationType), ["CONSUMPTION_REQUEST", "REFUND"])

        let reversed = try XCTUnwrap(RefundCaseFold.cases(from: [
            appleEvent("REFUND_REVERSED", position: 3, signed: 20),
            appleEvent("REFUND", position: 2, signed: 12, revoked: 12),
        ]).first)
        XCTAssertEqual(reversed.outcome, .reversed)
        XCTAssertNil(reversed.refundedAmount)
        XCTAssertNil(reversed.revocationDate, "a reversed refund leaves no revocation in force")
        let pending = try XCTUnwrap(RefundCaseFold.cases(from: [appleEvent("CONSUMPTION_REQUEST", position: 1, signed: 10)]).first)
        XCTAssertEqual(pending.outcome, .pending)
        XCTAssertTrue(RefundCaseFold.cases(from: [appleEvent("DID_RENEW", position: 1, signed: 10)]).isEmpty)
    }

    func testAProvisionalInquiryJoinsTheSubscriptionThroughTheLinkEvent() throws {
        let provisional = StreamNames.wechatProvisional(orderId: "X9")
        let inquiry = W.event(W.inquiry(order: "X9", asked: 40), position: 10, stream: provisional)
        let answer = W.ledger(W.answer(order: "X9", allow: false, rule: "long_use"), type: XPayEventName.refundInquiryAnswer,
                              position: 11, stream: provisional, recorded: 40)
        let unlinked = try XCTUnwrap(RefundCaseFold.cases(from: [inquiry, answer]).first)
        XCTAssertNil(unlinked.originalTransactionId, "a provisional stream is no subscription")
        XCTAssertEqual(unlinked.decision, .refuse)
        XCTAssertEqual(unlinked.outcome, .pending)

        let link = W.ledger(W.link(order: "X9"), type: XPayEventName.orderLinked, position: 14, recorded: 41)
        let delivery = W.event(W.deliver(order: "X9", paid: 39, renewal: 69), position: 13)
        let later = W.event(W.inquiry(order: "X9", asked: 41), position: 15)   // asked again, now in the subscription stream
        let events = [inquiry, answer, delivery, link, later]
        let linked = RefundCaseFold.cases(from: events)
        XCTAssertEqual(linked.count, 1, "one case per pay_order_id, whichever stream each asking went to")
        let c = try XCTUnwrap(linked.first)
        XCTAssertEqual(c.originalTransactionId, W.otid)
        XCTAssertEqual(c.openId, W.openId)
        XCTAssertEqual(c.links, [10, 11, 13, 14, 15])
        XCTAssertEqual(c.inquiries.map(\.streamId), [provisional, W.otid])
        // The link alone (no delivery in the input) is enough to name the subscription.
        XCTAssertEqual(RefundCaseFold.cases(from: [inquiry, answer, link]).first?.originalTransactionId, W.otid)
        XCTAssertEqual(RefundCaseFold.cases(from: [inquiry, answer, link]).first?.links, [10, 11, 14])
    }

    func testARefundNotifyWithoutInquiryIsACaseAndOneNamingTheWeChatOrderIdJoinsItsInquiry() throws {
        let alone = RefundCaseFold.cases(from: [W.event(W.refundNotify(order: "O7", at: 50), position: 1)])
        XCTAssertEqual(alone.map(\.caseId), ["wechat:O7"])
        XCTAssertEqual(alone.first?.outcome, .refunded)
        XCTAssertTrue(alone.first?.inquiries.isEmpty ?? false)
        // pay_order_id is WeChat's order id here: the refund notify names it as WxOrderId and
        // carries OutTradeNo as MchOrderId, which finds the delivery and its amount.
        let events = [
            W.event(W.deliver(order: "O7", paid: 40, renewal: 70, price: 1500), position: 2),
            W.event(W.inquiry(order: "WX-77", asked: 45), position: 3),
            W.event(W.refundNotify(order: "O7", wxOrder: "WX-77", at: 50, fee: 1500), position: 4),
        ]
        let c = try XCTUnwrap(RefundCaseFold.cases(from: events).first)
        XCTAssertEqual(RefundCaseFold.cases(from: events).count, 1)
        XCTAssertEqual(c.caseId, "wechat:WX-77")
        XCTAssertEqual(c.orderAmount?.milliunits, 15_000)
        XCTAssertEqual(c.deliveryPosition, 2)
        XCTAssertEqual(c.links, [2, 3, 4])
        XCTAssertEqual(c.outcome, .refunded)
        let failedOnly = RefundCaseFold.cases(from: [W.event(W.refundNotify(order: "O8", at: 50, ok: false), position: 1)])
        XCTAssertEqual(failedOnly.first?.outcome, .refundFailed)
        XCTAssertNil(failedOnly.first?.refundedAmount)
    }

    func testCaseIdsOfAnEventNameEveryCaseItCanJoin() {
        let events = wechatEvents()
        XCTAssertEqual(RefundCaseFold.caseIds(of: events[0]), [], "a signing is no case")
        XCTAssertEqual(RefundCaseFold.caseIds(of: events[2]), ["wechat:O2", "wechat:mch-O2", "wechat:tx-O2"])
        XCTAssertEqual(RefundCaseFold.caseIds(of: events[3]), ["wechat:O2"])
        XCTAssertEqual(RefundCaseFold.caseIds(of: events[4]), ["wechat:O2"])
        XCTAssertEqual(RefundCaseFold.caseIds(of: events[8]), ["wechat:O2", "wechat:wx-O2"])
        XCTAssertEqual(RefundCaseFold.caseIds(of: W.ledger(W.link(order: "X9"), type: XPayEventName.orderLinked,
                                                           position: 1, recorded: 1)), ["wechat:X9"])
        XCTAssertEqual(RefundCaseFold.caseIds(of: appleEvent("REFUND", position: 1, signed: 1, revoked: 1)), ["apple:t9"])
        XCTAssertEqual(RefundCaseFold.caseIds(of: appleEvent("DID_RENEW", position: 1, signed: 1)), [])
        // Every case's events are found under its id.
        let all = events + [appleEvent("REFUND", position: 30, signed: 1, revoked: 1)]
        for c in RefundCaseFold.cases(from: all) {
            let indexed = all.filter { RefundCaseFold.caseIds(of: $0).contains(c.caseId) }
            XCTAssertEqual(RefundCaseFold.cases(from: indexed + all.filter { $0.event.source == .wechat && RefundCaseFold.caseIds(of: $0).isEmpty })
                .first { $0.caseId == c.caseId }, c)
        }
    }

    func testHostileEventsAreIgnoredNotFatal() {
        let junk: [RecordedEvent] = [
            RecordedEvent(position: 1, recordedAt: 0, event: NewEvent(streamId: "x", dedupeKey: "a", source: .wechat,
                                                                      type: "x", payload: Data("not json".utf8), raw: Data())),
            RecordedEvent(position: 2, recordedAt: 0, event: NewEvent(streamId: "x", dedupeKey: "b", source: .apple,
                                                                      type: "REFUND", payload: Data("[]".utf8), raw: Data())),
            RecordedEvent(position: 3, recordedAt: 0, event: NewEvent(streamId: "x", dedupeKey: "c", source: .ledger,
                                                                      type: XPayEventName.refundInquiryAnswer,
                                                                      payload: Data(#"{"result_code":"zero"}"#.utf8), raw: Data())),
            W.event(W.inquiry(order: "O1", asked: 5).removing(["pay_order_id"]), position: 4),
        ]
        XCTAssertTrue(RefundCaseFold.cases(from: junk).isEmpty)
        // An Apple refund without a transaction id is still a case (keyed by its position), not lost.
        let bare = #"{"notificationType":"REFUND","signedDate":1}"#
        let e = RecordedEvent(position: 7, recordedAt: 5, event: NewEvent(streamId: "S", dedupeKey: "d", source: .apple,
                                                                          type: "REFUND", payload: Data(bare.utf8), raw: Data()))
        XCTAssertEqual(RefundCaseFold.cases(from: [e]).map(\.caseId), ["apple:event-7"])
    }

    func testFiltersMatchTheDocumentedFieldsAndRejectUnknownValues() throws {
        let events = wechatEvents() + [appleEvent("REFUND_DECLINED", position: 23, signed: 11, tx: "t10")]
        let cases = RefundCaseFold.cases(from: events)
        func ids(_ q: [String: String]) throws -> [String] {
            let f = try RefundCaseFilter(query: q)
            return cases.filter(f.matches).map(\.caseId)
        }
        XCTAssertEqual(try ids([:]), ["apple:t10", "wechat:O2"])
        XCTAssertEqual(try ids(["decision": "none"]), ["apple:t10"])
        XCTAssertEqual(try ids(["decision": "allow"]), ["wechat:O2"])
        XCTAssertEqual(try ids(["decision": "refuse"]), [])
        XCTAssertEqual(try ids(["outcome": "declined"]), ["apple:t10"])
        XCTAssertEqual(try ids(["openid": W.openId]), ["wechat:O2"])
        XCTAssertEqual(try ids(["originalTransactionId": "S1"]), ["apple:t10"])
        XCTAssertEqual(try ids(["source": "wechat"]), ["wechat:O2"])
        XCTAssertEqual(try ids(["from": String(W.sec(31) * 1000)]), ["wechat:O2"], "from is inclusive")
        XCTAssertEqual(try ids(["until": String(W.sec(31) * 1000)]), ["apple:t10"], "until is exclusive")
        for bad in [["decision": "maybe"], ["outcome": "REFUNDED"], ["from": "yesterday"], ["source": "google"]] {
            XCTAssertThrowsError(try RefundCaseFilter(query: bad)) { error in
                XCTAssertTrue(String(describing: error).contains("use one of"), "\(error)")
            }
        }
    }
}
