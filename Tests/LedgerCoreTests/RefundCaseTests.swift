import LedgerTesting
import XCTest
@testable import LedgerCore

/// Refund cases for auditors, from both sources, folded from facts (`FactDecoder` reads every
/// stored event once; the fold never sees a payload), order-independent.
final class RefundCaseTests: XCTestCase {
    typealias W = WX

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

    static let appleBase: EpochMillis = 1_735_689_600_000  // 2025-01-01T00:00:00Z
    func day(_ d: Double) -> EpochMillis { Self.appleBase + EpochMillis(d * 86_400_000) }

    /// A stored, verified V2 notification (payload as the ingestor writes it: nested JWS decoded).
    func appleEvent(_ type: String, _ subtype: String? = nil, position: Int64, signed: Double, tx: String = "t9",
                    revoked: Double? = nil, percentage: Int? = nil, reason: String? = nil, stream: String = "S1",
                    token: String = "tok-1", environment: String = "Production") -> RecordedEvent {
        var transaction: [String: Any] = ["transactionId": tx, "originalTransactionId": stream, "price": 4990,
                                          "currency": "USD", "appAccountToken": token, "productId": "com.example.monthly",
                                          "signedDate": day(signed), "purchaseDate": day(0), "expiresDate": day(30),
                                          "environment": environment]
        if let revoked {
            transaction["revocationDate"] = day(revoked)
            transaction["revocationReason"] = 1
            transaction["revocationType"] = percentage == nil ? "REFUND_FULL" : "REFUND_PRORATED"
        }
        if let percentage { transaction["revocationPercentage"] = percentage }
        var data: [String: Any] = ["bundleId": "com.example.app", "environment": environment, "status": 1]
        if let reason { data["consumptionRequestReason"] = reason }
        var payload: [String: Any] = ["notificationType": type, "notificationUUID": "uuid-\(position)",
                                      "signedDate": day(signed), "data": data, "transactionInfo": transaction]
        if let subtype { payload["subtype"] = subtype }
        let json = try! JSONSerialization.data(withJSONObject: payload, options: [.sortedKeys])
        return RecordedEvent(position: position, recordedAt: day(signed) + 1000, event: NewEvent(
            streamId: stream, dedupeKey: "uuid-\(position)", source: .apple, type: type, environment: environment,
            signedAt: day(signed), payload: json, raw: json))
    }

    /// The cases of stored events, read through the one decoder (an unreadable event fails the test).
    func cases(_ events: [RecordedEvent], file: StaticString = #filePath, line: UInt = #line) -> [RefundCase] {
        RefundCaseFold.cases(from: W.facts(events, file: file, line: line))
    }

    func testThreeAskingsOneAnswerAndTheRefundOutcomesFormOneWeChatCase() throws {
        let all = cases(wechatEvents())
        XCTAssertEqual(all.count, 1, "deliveries and contract messages are context, not cases")
        let c = try XCTUnwrap(all.first)
        XCTAssertEqual(c.caseId, "wechat:O2")
        XCTAssertEqual(c.source, .wechat)
        XCTAssertEqual(c.orderId, "O2")
        XCTAssertEqual(c.originalTransactionId, W.otid)
        XCTAssertEqual(c.openId, W.openId)
        XCTAssertEqual(c.customerId, W.openId)
        XCTAssertEqual(c.productId, W.product)
        XCTAssertEqual(c.openedAt, W.sec(31) * 1000, "the first asking's refund_time")
        XCTAssertEqual(c.lastRecordedAt, W.d(33.01), "the success push's CreateTime")
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
        XCTAssertEqual(c.inquiries.first?.orderTime, W.sec(30) * 1000)
        XCTAssertEqual(c.inquiries.first?.channelBill, "510001234567890")
        XCTAssertEqual(c.inquiries.first?.streamId, W.otid)
        XCTAssertEqual(c.answers.count, 1)
        let answer = try XCTUnwrap(c.answers.first)
        XCTAssertEqual(answer.inquiryPosition, 4)
        XCTAssertEqual(answer.latencyMs, 40)
        XCTAssertEqual(answer.latencyFromAskedMs, W.d(31) + 740 - W.sec(31) * 1000)
        XCTAssertEqual(answer.evidence, #"{"rule":"short_use"}"#)
        XCTAssertEqual(answer.resultCode, 0)
        XCTAssertEqual(answer.resultInfo, "entitlement used 5 minutes")
        XCTAssertEqual(c.refundOutcomes.map(\.succeeded), [false, true])
        XCTAssertEqual(c.refundOutcomes.map(\.retCode), [268_490_001, 0])
        XCTAssertEqual(c.refundOutcomes.first?.retMsg, "refund failed")
        XCTAssertEqual(c.refundOutcomes.last?.wxOrderId, "wx-O2")
        XCTAssertEqual(c.refundOutcomes.last?.mchOrderId, "O2")
        XCTAssertEqual(c.refundOutcomes.last?.wxRefundId, "wxrefund-O2-0")
        XCTAssertEqual(c.refundOutcomes.last?.refundFee, .init(milliunits: 9_900, currency: "CNY"))
        XCTAssertEqual(c.refundOutcomes.last?.startedAt, W.sec(32.5) * 1000)
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
            // An inquiry that arrived before its delivery (a provisional stream), and the delivery.
            W.event(W.inquiry(order: "O3", asked: 61), position: 25, stream: StreamId.wechatOrder("O3").text),
            W.event(W.deliver(order: "O3", paid: 60, renewal: 90), position: 26),
            W.event(W.refundNotify(order: "O3", at: 62), position: 27),
        ]
        let facts = W.facts(events)
        let reference = RefundCaseFold.cases(from: facts)
        XCTAssertEqual(reference.map(\.caseId), ["apple:t9", "apple:t10", "wechat:O2", "wechat:O3"], "sorted by openedAt, then id")
        XCTAssertEqual(reference.last?.originalTransactionId, W.otid, "found its delivery whichever came first")
        var rng = SplitMix64(seed: 0xCA5E)
        for _ in 0..<200 {
            var shuffled = facts + (0..<5).map { _ in rng.pick(facts) }
            shuffled.shuffle(using: &rng)
            XCTAssertEqual(RefundCaseFold.cases(from: shuffled), reference)
        }
    }

    func testAppleCasesCarryReasonRevocationAmountAndTheLatestWord() throws {
        let refunded = cases([
            appleEvent("CONSUMPTION_REQUEST", position: 1, signed: 10, reason: "UNINTENDED_PURCHASE"),
            appleEvent("REFUND", position: 2, signed: 12, revoked: 11.5, percentage: 50_000),
        ])
        let c = try XCTUnwrap(refunded.first)
        XCTAssertEqual(refunded.count, 1)
        XCTAssertEqual(c.caseId, "apple:t9")
        XCTAssertEqual(c.source, .apple)
        XCTAssertEqual(c.originalTransactionId, "S1")
        XCTAssertEqual(c.customerId, "tok-1")
        XCTAssertEqual(c.productId, "com.example.monthly")
        XCTAssertNil(c.openId)
        XCTAssertNil(c.decision, "the ledger does not decide Apple refunds")
        XCTAssertEqual(c.outcome, .refunded)
        XCTAssertEqual(c.outcomeAt, day(11.5), "the revocationDate, not the notification's signing")
        XCTAssertEqual(c.reason, "UNINTENDED_PURCHASE")
        XCTAssertEqual(c.orderAmount, .init(milliunits: 4_990, currency: "USD"))
        XCTAssertEqual(c.refundedAmount, .init(milliunits: 2_495, currency: "USD"), "prorated 50 %")
        XCTAssertEqual(c.revocationDate, day(11.5))
        XCTAssertEqual(c.revocationPercentage, 50_000)
        XCTAssertEqual(c.revocationReason, 1)
        XCTAssertEqual(c.revocationType, "REFUND_PRORATED")
        XCTAssertEqual(c.openedAt, day(10))
        XCTAssertEqual(c.lastRecordedAt, day(12) + 1000)
        XCTAssertEqual(c.links, [1, 2])
        XCTAssertEqual(c.appleNotifications.map(\.notificationType), ["CONSUMPTION_REQUEST", "REFUND"])
        XCTAssertEqual(c.appleNotifications.map(\.signedDate), [day(10), day(12)])
        XCTAssertEqual(c.appleNotifications.first?.consumptionRequestReason, "UNINTENDED_PURCHASE")
        XCTAssertEqual(c.appleNotifications.last?.revocationDate, day(11.5))

        let reversed = try XCTUnwrap(cases([
            appleEvent("REFUND_REVERSED", position: 3, signed: 20),
            appleEvent("REFUND", position: 2, signed: 12, revoked: 12),
        ]).first)
        XCTAssertEqual(reversed.outcome, .reversed)
        XCTAssertEqual(reversed.outcomeAt, day(20))
        XCTAssertNil(reversed.refundedAmount)
        XCTAssertNil(reversed.revocationDate, "a reversed refund leaves no revocation in force")
        // Refunded again after the reversal: the latest word (by Apple's signing, not arrival) wins.
        let again = try XCTUnwrap(cases([
            appleEvent("REFUND", position: 9, signed: 25, revoked: 24),
            appleEvent("REFUND_REVERSED", position: 3, signed: 20),
            appleEvent("REFUND", position: 2, signed: 12, revoked: 12),
        ]).first)
        XCTAssertEqual(again.outcome, .refunded)
        XCTAssertEqual(again.revocationDate, day(24))
        XCTAssertEqual(again.appleNotifications.map(\.notificationType), ["REFUND", "REFUND_REVERSED", "REFUND"])
        // A consumption request after the decline is evidence, not a new word.
        let declined = try XCTUnwrap(cases([
            appleEvent("REFUND_DECLINED", position: 4, signed: 12),
            appleEvent("CONSUMPTION_REQUEST", position: 5, signed: 13, reason: "OTHER"),
        ]).first)
        XCTAssertEqual(declined.outcome, .declined)
        XCTAssertEqual(declined.outcomeAt, day(12))
        XCTAssertEqual(declined.reason, "OTHER")
        XCTAssertNil(declined.refundedAmount)
        let pending = try XCTUnwrap(cases([appleEvent("CONSUMPTION_REQUEST", position: 1, signed: 10)]).first)
        XCTAssertEqual(pending.outcome, .pending)
        XCTAssertNil(pending.outcomeAt)
        XCTAssertTrue(cases([appleEvent("DID_RENEW", position: 1, signed: 10)]).isEmpty)
        // REVOKE (Family Sharing ended) is no refund request.
        XCTAssertTrue(cases([appleEvent("REVOKE", position: 1, signed: 10, revoked: 10)]).isEmpty)
        // A subtype is kept apart from the type; appAccountToken is the normalised (lowercase) one.
        let token = "7D8F0C52-9A43-4B7E-A0A4-1F9A2C3E4B5D"
        let sub = try XCTUnwrap(cases([appleEvent("CONSUMPTION_REQUEST", "FUTURE", position: 1, signed: 10, token: token)]).first)
        XCTAssertEqual(sub.appleNotifications.first?.notificationType, "CONSUMPTION_REQUEST")
        XCTAssertEqual(sub.appleNotifications.first?.subtype, "FUTURE")
        XCTAssertEqual(sub.customerId, token.lowercased())
    }

    func testAProvisionalInquiryJoinsTheSubscriptionThroughTheLinkEvent() throws {
        let provisional = StreamId.wechatOrder("X9").text
        let inquiry = W.event(W.inquiry(order: "X9", asked: 40), position: 10, stream: provisional)
        let answer = W.ledger(W.answer(order: "X9", allow: false, rule: "long_use"), type: XPayEventName.refundInquiryAnswer,
                              position: 11, stream: provisional, recorded: 40)
        let unlinked = try XCTUnwrap(cases([inquiry, answer]).first)
        XCTAssertNil(unlinked.originalTransactionId, "a provisional order is no subscription")
        XCTAssertNil(unlinked.openId)
        XCTAssertEqual(unlinked.decision, .refuse)
        XCTAssertEqual(unlinked.outcome, .pending)

        let link = W.ledger(W.link(order: "X9"), type: XPayEventName.orderLinked, position: 14, recorded: 41)
        let delivery = W.event(W.deliver(order: "X9", paid: 39, renewal: 69), position: 13)
        let later = W.event(W.inquiry(order: "X9", asked: 41), position: 15)   // asked again, now in the subscription stream
        let linked = cases([inquiry, answer, delivery, link, later])
        XCTAssertEqual(linked.count, 1, "one case per pay_order_id, whichever stream each asking went to")
        let c = try XCTUnwrap(linked.first)
        XCTAssertEqual(c.originalTransactionId, W.otid)
        XCTAssertEqual(c.openId, W.openId)
        XCTAssertEqual(c.links, [10, 11, 13, 14, 15])
        XCTAssertEqual(c.inquiries.map(\.streamId), [provisional, W.otid])
        XCTAssertEqual(c.inquiries.map(\.answerPosition), [11, 11])
        XCTAssertEqual(c.inquiries.map(\.repeatedAnswer), [false, true])
        // The link alone (no delivery among the facts) is enough to name the subscription.
        let linkOnly = try XCTUnwrap(cases([inquiry, answer, link]).first)
        XCTAssertEqual(linkOnly.originalTransactionId, W.otid)
        XCTAssertEqual(linkOnly.links, [10, 11, 14])
        XCTAssertNil(linkOnly.deliveryPosition)
    }

    /// No link event at all: the delivery's own order ids join the inquiry that came first, and the
    /// delivery's aliases (MchOrderNo, TransactionId) join askings and refunds naming those.
    func testAnInquiryBeforeItsDeliveryFindsItThroughTheOrderIds() throws {
        let early = W.event(W.inquiry(order: "X7", asked: 40), position: 1, stream: StreamId.wechatOrder("X7").text)
        let delivery = W.event(W.deliver(order: "X7", paid: 39, renewal: 69, price: 1200), position: 2)
        for events in [[early, delivery], [delivery, early]] {
            let c = try XCTUnwrap(cases(events).first)
            XCTAssertEqual(c.originalTransactionId, W.otid)
            XCTAssertEqual(c.openId, W.openId)
            XCTAssertEqual(c.deliveryPosition, 2)
            XCTAssertEqual(c.orderAmount?.milliunits, 12_000)
            XCTAssertEqual(c.links, [1, 2])
        }
        // Asked under the delivery's MchOrderNo; WeChat then refunds OutTradeNo / its own id.
        let byAlias = [
            W.event(W.inquiry(order: "mch-X7", asked: 40), position: 1, stream: StreamId.wechatOrder("mch-X7").text),
            delivery,
            W.event(W.refundNotify(order: "X7", at: 41, fee: 1200), position: 3),
        ]
        let all = cases(byAlias)
        XCTAssertEqual(all.map(\.caseId), ["wechat:mch-X7"], "the refund joins the asking about the same order")
        XCTAssertEqual(all.first?.outcome, .refunded)
        XCTAssertEqual(all.first?.deliveryPosition, 2)
        XCTAssertEqual(all.first?.links, [1, 2, 3])
        // Without the delivery nothing says mch-X7 and X7 are one order: two cases.
        XCTAssertEqual(cases([byAlias[0], byAlias[2]]).map(\.caseId).sorted(), ["wechat:X7", "wechat:mch-X7"])
        // The channel bill (Apple's) is not a WeChat order id and joins nothing.
        XCTAssertNil(cases([W.event(W.inquiry(order: "Y1", asked: 40), position: 1),
                            W.event(W.deliver(order: "510001234567890", paid: 39, renewal: 69), position: 2)]).first?.deliveryPosition)
    }

    func testARefundNotifyWithoutInquiryIsACaseAndOneNamingTheWeChatOrderIdJoinsItsInquiry() throws {
        let alone = cases([W.event(W.refundNotify(order: "O7", at: 50), position: 1)])
        XCTAssertEqual(alone.map(\.caseId), ["wechat:O7"])
        XCTAssertEqual(alone.first?.outcome, .refunded)
        XCTAssertEqual(alone.first?.openId, W.openId, "the refund names its customer")
        XCTAssertEqual(alone.first?.openedAt, W.sec(49.5) * 1000, "RefundStartTimestamp")
        XCTAssertTrue(alone.first?.inquiries.isEmpty ?? false)
        // pay_order_id is WeChat's order id here: the refund notify names it as WxOrderId and
        // carries OutTradeNo as MchOrderId, which finds the delivery and its amount.
        let events = [
            W.event(W.deliver(order: "O7", paid: 40, renewal: 70, price: 1500), position: 2),
            W.event(W.inquiry(order: "WX-77", asked: 45), position: 3),
            W.event(W.refundNotify(order: "O7", wxOrder: "WX-77", at: 50, fee: 1500), position: 4),
        ]
        let all = cases(events)
        XCTAssertEqual(all.count, 1)
        let c = try XCTUnwrap(all.first)
        XCTAssertEqual(c.caseId, "wechat:WX-77")
        XCTAssertEqual(c.orderAmount?.milliunits, 15_000)
        XCTAssertEqual(c.deliveryPosition, 2)
        XCTAssertEqual(c.links, [2, 3, 4])
        XCTAssertEqual(c.outcome, .refunded)
        let failedOnly = cases([W.event(W.refundNotify(order: "O8", at: 50, ok: false), position: 1)])
        XCTAssertEqual(failedOnly.first?.outcome, .refundFailed)
        XCTAssertEqual(failedOnly.first?.outcomeAt, W.sec(49.5) * 1000, "a failure's time is its start")
        XCTAssertNil(failedOnly.first?.refundedAmount)
        // A refund without an openid takes the customer of the order's subscription (its contract).
        let quiet = cases([W.event(W.signing(signed: 0, renewal: 30, openId: "oContract"), position: 1),
                           W.event(W.deliver(order: "O9", paid: 1, renewal: 31, openId: ""), position: 2),
                           W.event(W.refundNotify(order: "O9", at: 5, openId: ""), position: 3)])
        XCTAssertEqual(quiet.first?.openId, "oContract")
    }

    func testHostileEventsAndFactsAreIgnoredNotFatal() {
        let junk: [RecordedEvent] = [
            RecordedEvent(position: 1, recordedAt: 0, event: NewEvent(streamId: "x", dedupeKey: "a", source: .wechat,
                                                                      type: "x", payload: Data("not json".utf8), raw: Data())),
            RecordedEvent(position: 2, recordedAt: 0, event: NewEvent(streamId: "x", dedupeKey: "b", source: .apple,
                                                                      type: "REFUND", payload: Data("[]".utf8), raw: Data())),
            RecordedEvent(position: 3, recordedAt: 0, event: NewEvent(streamId: "x", dedupeKey: "c", source: .ledger,
                                                                      type: XPayEventName.refundInquiryAnswer,
                                                                      payload: Data(#"{"result_code":"zero"}"#.utf8), raw: Data())),
            W.event(W.inquiry(order: "O1", asked: 5).removing(["pay_order_id"]), position: 4),
            W.event(W.inquiry(order: "O1", asked: 5).removing(["refund_time"]), position: 5),
            // A refund without transactionInfo names nothing to refund: kept as unreadable evidence.
            RecordedEvent(position: 7, recordedAt: 5, event: NewEvent(streamId: "S", dedupeKey: "d", source: .apple, type: "REFUND",
                                                                      payload: Data(#"{"notificationType":"REFUND","signedDate":1}"#.utf8), raw: Data())),
        ]
        let facts = junk.flatMap(FactDecoder.facts(of:))
        XCTAssertEqual(facts.filter { $0.kind == .unreadable }.count, 6, "kept on record as unreadable, folded by nobody")
        XCTAssertTrue(RefundCaseFold.cases(from: facts).isEmpty)
        // Facts no decoder writes, handed to the fold directly: no trap, nothing invented.
        let forged = [
            Fact(position: 1, subscription: nil, kind: .refundInquiry, origin: .wechat, signedAt: 0, transactionId: ""),
            Fact(position: 2, subscription: nil, kind: .refundAnswer, origin: .ledger, signedAt: 0, transactionId: "A",
                 detail: #"{"result_code":"0","evidence":["x"],"result_info":7}"#),
            Fact(position: 3, subscription: nil, kind: .revocation, origin: .wechat, signedAt: 0, transactionId: "B",
                 transaction: TransactionFact(transactionId: "B", price: .max, currency: "CNY")),
            Fact(position: 4, subscription: nil, kind: .revocation, origin: .appleV2, message: "REFUND", signedAt: 0,
                 transactionId: "T", transaction: TransactionFact(transactionId: "T", revocationPercentage: 100_000, price: .max)),
            Fact(position: 5, subscription: nil, kind: .revocation, origin: .appleV1, message: "V1/CANCEL", signedAt: 0, transactionId: "V"),
            Fact(position: 6, subscription: nil, kind: .consumptionRequest, origin: .appleV2, message: "CONSUMPTION_REQUEST",
                 signedAt: 0, transactionId: "U", detail: "not json"),
        ]
        let c = RefundCaseFold.cases(from: forged)
        XCTAssertEqual(c.map(\.caseId).sorted(), ["apple:T", "apple:U", "wechat:A", "wechat:B"], "V1 cancellations open no case")
        let answer = c.first { $0.caseId == "wechat:A" }?.answers.first
        XCTAssertEqual(answer?.decision, .allow, "result_code as text reads as 0")
        XCTAssertNil(answer?.resultInfo, "a non-text result_info is not shown as text")
        XCTAssertNil(answer?.evidence)
        XCTAssertEqual(c.first { $0.caseId == "wechat:B" }?.refundedAmount?.milliunits, .max)
        XCTAssertNil(c.first { $0.caseId == "apple:T" }?.refundedAmount, "price × percentage overflows: unknown, not a trap")
        XCTAssertNil(c.first { $0.caseId == "apple:U" }?.reason)
    }

    /// Stored before the link existed (dedupe keys are unique per stream): the same asking and
    /// the same refund push stored once in the provisional stream and once in the subscription's.
    /// Each counts once; both stay on the case's evidence trail.
    func testTheSameMessageStoredInTwoStreamsCountsOnce() throws {
        let provisional = StreamId.wechatOrder("O4").text
        let once = [
            W.event(W.inquiry(order: "O4", asked: 40), position: 1, stream: provisional),
            W.event(W.refundNotify(order: "O4", at: 41), position: 2, stream: provisional),
            W.event(W.deliver(order: "O4", paid: 39, renewal: 69), position: 3),
        ]
        var again = once + [W.event(W.inquiry(order: "O4", asked: 40), position: 4),
                            W.event(W.refundNotify(order: "O4", at: 41), position: 5)]
        again[3].recordedAt += 60_000
        again[4].recordedAt += 60_000
        let single = try XCTUnwrap(cases(once).first)
        let twice = try XCTUnwrap(cases(again).first)
        XCTAssertEqual(twice.inquiries.map(\.position), [1])
        XCTAssertEqual(twice.refundOutcomes.map(\.position), [2])
        XCTAssertEqual(twice.links, [1, 2, 3, 4, 5])
        XCTAssertEqual(twice.lastRecordedAt, again[4].recordedAt)
        var expected = single
        expected.links = twice.links
        expected.lastRecordedAt = twice.lastRecordedAt
        XCTAssertEqual(twice, expected, "nothing else changes")
        // A different asking (another refund_time) is another inquiry.
        XCTAssertEqual(cases(once + [W.event(W.inquiry(order: "O4", asked: 40.5), position: 6)]).first?.inquiries.count, 2)
        // Apple: the same notification content twice counts once.
        let refund = appleEvent("REFUND", position: 7, signed: 12, revoked: 12)
        var copy = refund
        copy.position = 8
        let apple = try XCTUnwrap(cases([refund, copy]).first)
        XCTAssertEqual(apple.appleNotifications.count, 1)
        XCTAssertEqual(apple.links, [7, 8])
    }

    func testTwoFactsClaimingOnePlaceResolveByContentNotArrival() {
        let a = Fact(position: 1, recordedAt: 5, subscription: nil, kind: .refundInquiry, origin: .wechat, signedAt: 10,
                     transactionId: "P1")
        let b = Fact(position: 1, recordedAt: 5, subscription: nil, kind: .refundInquiry, origin: .wechat, signedAt: 10,
                     transactionId: "P2")
        XCTAssertEqual(RefundCaseFold.cases(from: [a, b]), RefundCaseFold.cases(from: [b, a]))
        XCTAssertEqual(RefundCaseFold.cases(from: [a, b]).count, 1)
    }

    func testFiltersMatchTheDocumentedFieldsAndRejectUnknownValues() throws {
        let all = cases(wechatEvents() + [appleEvent("REFUND_DECLINED", position: 23, signed: 11, tx: "t10")])
        func ids(_ q: [String: String]) throws -> [String] {
            let f = try RefundCaseFilter(query: q)
            return all.filter(f.matches).map(\.caseId)
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
