import XCTest
@testable import LedgerCore

/// WeChat xpay events → SubscriptionFact, and the subscription state they fold to.
final class WeChatFactTests: XCTestCase {
    typealias W = WX

    /// A month bought on day 0 (signing + first delivery), renewed on day 30, auto-renew turned off
    /// on day 40, so the subscription runs to day 60.
    func lifecycle() -> [RecordedEvent] {
        [
            W.event(W.signing(signed: 0, renewal: 30), position: 1),
            W.event(W.deliver(order: "O1", paid: 0.0001, renewal: 30), position: 2),
            W.event(W.deliver(order: "O2", paid: 30, renewal: 60), position: 3),
            W.event(W.unsigning(unsigned: 40, renewal: 60), position: 4),
        ]
    }

    func testEachEventKindDecodesWithItsOwnBusinessTimeInJSONAndXMLStyle() throws {
        for xml in [false, true] {
            func style(_ v: PushValue) -> PushValue { xml ? W.xmlStyle(v) : v }
            let sign = try XCTUnwrap(SubscriptionFact.decode(W.event(style(W.signing(signed: 0, renewal: 30)), position: 1)))
            XCTAssertEqual(sign.source, .wechatContractSigned)
            XCTAssertEqual(sign.signedDate, W.d(0), "SignedTime (ms), not CreateTime")
            XCTAssertEqual(sign.openId, W.openId)
            XCTAssertEqual(sign.originalTransactionId, W.otid)
            XCTAssertNil(sign.transaction)
            XCTAssertEqual(sign.renewal?.productId, W.product)
            XCTAssertEqual(sign.renewal?.autoRenewStatus, 1)
            XCTAssertEqual(sign.renewal?.renewalDate, W.d(30))

            let deliver = try XCTUnwrap(SubscriptionFact.decode(W.event(style(W.deliver(order: "O1", paid: 1, renewal: 30, price: 990)), position: 2)))
            XCTAssertEqual(deliver.source, .wechatPeriodDelivered)
            XCTAssertEqual(deliver.signedDate, W.sec(1) * 1000, "PaidTime, not CreateTime")
            XCTAssertEqual(deliver.transaction?.transactionId, "O1")
            XCTAssertEqual(deliver.transaction?.expiresDate, W.d(30))
            XCTAssertEqual(deliver.transaction?.purchaseDate, W.sec(1) * 1000)
            XCTAssertEqual(deliver.transaction?.price, 9_900, "990 fen = 9.90 CNY = 9,900 milliunits")
            XCTAssertEqual(deliver.transaction?.currency, "CNY")
            XCTAssertEqual(deliver.transaction?.productId, W.product, "GoodsInfo.ProductId")
            XCTAssertEqual(deliver.renewal?.renewalDate, W.d(30))

            let unsign = try XCTUnwrap(SubscriptionFact.decode(W.event(style(W.unsigning(unsigned: 10, renewal: 30)), position: 3)))
            XCTAssertEqual(unsign.source, .wechatContractTerminated)
            XCTAssertEqual(unsign.signedDate, W.d(10), "UnsignedTime")
            XCTAssertEqual(unsign.renewal?.autoRenewStatus, 0)

            let refund = try XCTUnwrap(SubscriptionFact.decode(W.event(style(W.refundNotify(order: "O1", at: 12)), position: 4)))
            XCTAssertEqual(refund.source, .wechatRefundOutcome)
            XCTAssertEqual(refund.signedDate, W.sec(12) * 1000, "RefundSuccTimestamp")
            XCTAssertEqual(refund.transaction?.revocationDate, W.sec(12) * 1000)
            XCTAssertEqual(refund.transaction?.transactionId, "O1")
            XCTAssertEqual(refund.transaction?.webOrderLineItemId, "wx-O1")

            let failed = try XCTUnwrap(SubscriptionFact.decode(W.event(style(W.refundNotify(order: "O1", at: 12, ok: false)), position: 5)))
            XCTAssertNil(failed.transaction?.revocationDate, "a failed refund revokes nothing")
            XCTAssertEqual(failed.signedDate, W.sec(11.5) * 1000, "a failure's success time is 0: the start time is used")
        }
    }

    func testDeliveryWithoutPayInfoFallsBackToCreateTimeThenSignedAt() throws {
        let e = W.event(W.deliver(order: "O1", paid: 3, renewal: 30, payInfo: false), position: 1)
        XCTAssertEqual(try SubscriptionFact.decode(e)?.signedDate, W.sec(3.002) * 1000)
        var noTimes = W.deliver(order: "O2", paid: 3, renewal: 30, payInfo: false).removing(["CreateTime"])
        XCTAssertThrowsError(try SubscriptionFact.decode(W.event(noTimes, position: 2))) { error in
            XCTAssertEqual(error as? SubscriptionFactError, .missingSignedDate(position: 2))
        }
        noTimes = W.deliver(order: "O2", paid: 3, renewal: 30, payInfo: false).removing(["CreateTime"])
        XCTAssertEqual(try SubscriptionFact.decode(W.event(noTimes, position: 3, signedAt: 42))?.signedDate, 42)
    }

    func testEventsAboutNoSubscriptionGiveNoFact() throws {
        var ordinary = W.deliver(order: "P1", paid: 1, renewal: 30).objectValue!
        ordinary["AppleSubscriptionInfo"] = nil
        XCTAssertNil(try SubscriptionFact.decode(W.event(.object(ordinary), position: 1, stream: "wechat:order:P1")))
        XCTAssertNil(try SubscriptionFact.decode(W.event(W.inquiry(order: "O1", asked: 5), position: 2)))
        XCTAssertNil(try SubscriptionFact.decode(W.ledger(W.answer(order: "O1", allow: true),
                                                          type: XPayEventName.refundInquiryAnswer, position: 3, recorded: 5)))
        XCTAssertNil(try SubscriptionFact.decode(W.event(.object(["MsgType": .string("event"), "Event": .string("debug_demo")]),
                                                         position: 4, stream: "wechat:other:debug_demo")))
    }

    func testHostilePayloadsAreClearErrorsOrIgnoredFieldsNeverTraps() {
        // Not JSON, not an object.
        for (i, bytes) in ["not json", "[1,2]", "\"x\"", ""].enumerated() {
            let e = RecordedEvent(position: Int64(i), recordedAt: 0, event: NewEvent(
                streamId: W.otid, dedupeKey: "k", source: .wechat, type: "x", payload: Data(bytes.utf8), raw: Data()))
            XCTAssertThrowsError(try SubscriptionFact.decode(e)) { error in
                guard case .undecodablePayload(let p, _)? = error as? SubscriptionFactError else {
                    return XCTFail("expected undecodablePayload, got \(error)")
                }
                XCTAssertEqual(p, Int64(i))
            }
        }
        // Times that overflow milliseconds, negative and zero times: absent, then the fallbacks.
        var o = W.deliver(order: "O1", paid: 1, renewal: 30).objectValue!
        o["WeChatPayInfo"] = .object(["PaidTime": .integer(Int64.max)])
        o["CreateTime"] = .integer(-5)
        XCTAssertThrowsError(try SubscriptionFact.decode(W.event(.object(o), position: 9)))
        XCTAssertEqual(try SubscriptionFact.decode(W.event(.object(o), position: 9, signedAt: 7))?.signedDate, 7)
        var s = W.signing(signed: 0, renewal: 30).objectValue!
        s["AppleSubscriptionInfo"] = .object(["OriginalTransactionId": .string(W.otid), "SignedTime": .string("soon"),
                                              "RenewalDate": .integer(0), "AutoRenewStatus": .integer(Int64.max)])
        let fact = try? SubscriptionFact.decode(W.event(.object(s), position: 10))
        XCTAssertEqual(fact?.signedDate, W.sec(0.001) * 1000, "an unreadable SignedTime falls back to CreateTime")
        XCTAssertNil(fact?.renewal?.renewalDate, "RenewalDate 0 is no date")
        XCTAssertEqual(fact?.renewal?.autoRenewStatus, Int.max, "clamped, not trapped")
        // Fen that overflow milliunits are no price rather than a wrapped one.
        let rich = try? SubscriptionFact.decode(W.event(W.deliver(order: "O3", paid: 1, renewal: 30, price: Int64.max), position: 11))
        XCTAssertNotNil(rich)
        XCTAssertNil(rich?.transaction?.price)
    }

    func testSignedDeliveredTerminatedIsActiveUntilTheLatestRenewalDateThenExpired() throws {
        let facts = W.facts(lifecycle())
        let during = try XCTUnwrap(W.state(facts, at: 45))
        XCTAssertEqual(during.status, .active, "terminated, still entitled until RenewalDate")
        XCTAssertEqual(during.autoRenewStatus, 0)
        XCTAssertEqual(during.expiresDate, W.d(60))
        XCTAssertEqual(during.renewalDate, W.d(60))
        XCTAssertEqual(during.productId, W.product)
        XCTAssertEqual(during.customerId, W.openId)
        XCTAssertEqual(during.latestTransactionId, "O2")
        XCTAssertEqual(during.recentSubscriptionStartDate, W.d(0))
        XCTAssertEqual(W.state(facts, at: 60)?.status, .expired)
        XCTAssertEqual(W.state(facts, at: 35)?.status, .active)
        let grants = SubscriptionProjection(facts: facts).view(at: W.d(45)).entitlements(catalog: W.catalog, customerId: W.openId)
        XCTAssertEqual(grants.map(\.entitlement), ["vip"])
        XCTAssertEqual(grants.first?.expiresDate, W.d(60))
        XCTAssertTrue(SubscriptionProjection(facts: facts).view(at: W.d(61)).entitlements(catalog: W.catalog).isEmpty)
        // Before the unsigning, auto-renew was on (time travel at business time).
        XCTAssertEqual(SubscriptionProjection.asOfBusinessTime(W.d(35), facts: facts).subscription(W.otid)?.autoRenewStatus, 1)
        let txs = SubscriptionProjection(facts: facts).view(at: W.d(45)).transactions
        XCTAssertEqual(txs.map(\.transactionId), ["O1", "O2"])
        XCTAssertEqual(txs.map(\.price), [30_000, 30_000])
    }

    func testSigningAloneEntitlesUntilItsRenewalDate() {
        let facts = W.facts([W.event(W.signing(signed: 0, renewal: 7), position: 1)])
        XCTAssertEqual(W.state(facts, at: 6)?.status, .active)
        XCTAssertEqual(W.state(facts, at: 7)?.status, .expired)
        XCTAssertNil(W.state(facts, at: 6)?.latestTransactionId)
    }

    func testRefundOfTheOrderThatPaidTheCurrentPeriodRevokesFromTheRefundTime() {
        let facts = W.facts(lifecycle() + [W.event(W.refundNotify(order: "O2", at: 50), position: 5)])
        XCTAssertEqual(W.state(facts, at: 49)?.status, .active)
        XCTAssertEqual(W.state(facts, at: 50)?.status, .revoked)
        XCTAssertEqual(W.state(facts, at: 55)?.status, .revoked)
        XCTAssertTrue(SubscriptionProjection(facts: facts).view(at: W.d(55)).entitlements(catalog: W.catalog).isEmpty)
        let o2 = SubscriptionProjection(facts: facts).view(at: W.d(55)).transactions.first { $0.transactionId == "O2" }
        XCTAssertEqual(o2?.revocationDate, W.sec(50) * 1000)
        XCTAssertEqual(o2?.revocationType, "REFUND")
    }

    func testRefundOfAnEarlierPeriodDoesNotEndTheCurrentOne() {
        let facts = W.facts(lifecycle() + [W.event(W.refundNotify(order: "O1", at: 50), position: 5)])
        XCTAssertEqual(W.state(facts, at: 55)?.status, .active)
        let txs = SubscriptionProjection(facts: facts).view(at: W.d(55)).transactions
        XCTAssertNotNil(txs.first { $0.transactionId == "O1" }?.revocationDate)
        XCTAssertNil(txs.first { $0.transactionId == "O2" }?.revocationDate)
    }

    func testAFailedRefundRevokesNothingAndARefundNamingTheWeChatOrderIdStillMatches() {
        let failed = W.facts(lifecycle() + [W.event(W.refundNotify(order: "O2", at: 50, ok: false), position: 5)])
        XCTAssertEqual(W.state(failed, at: 55)?.status, .active)
        // MchOrderId missing: only WxOrderId names the order (here equal to OutTradeNo).
        var o = W.refundNotify(order: "O2", at: 50).objectValue!
        o["MchOrderId"] = .string("")
        o["WxOrderId"] = .string("O2")
        let byWx = W.facts(lifecycle() + [W.event(.object(o), position: 5)])
        XCTAssertEqual(W.state(byWx, at: 55)?.status, .revoked)
    }

    func testARefundBeforeItsDeliveryAndADuplicateDeliveryGiveTheSameState() {
        let events = lifecycle() + [W.event(W.refundNotify(order: "O2", at: 50), position: 5)]
        let reference = W.state(W.facts(events), at: 55)
        var again = events[2]
        again.position = 9
        again.recordedAt += 3 * W.dayMs
        let reordered = [events[4], again] + events.reversed()
        XCTAssertEqual(W.state(W.facts(reordered), at: 55), reference)
        XCTAssertEqual(SubscriptionProjection(facts: W.facts(reordered)).view(at: W.d(55)).transactions,
                       SubscriptionProjection(facts: W.facts(events)).view(at: W.d(55)).transactions)
    }

    func testEveryOrderOfSignDeliverUnsignRefundFoldsTheSame() {
        let events = lifecycle() + [W.event(W.refundNotify(order: "O1", at: 50), position: 5),
                                    W.event(W.refundNotify(order: "O2", at: 52, ok: false), position: 6)]
        let facts = W.facts(events)
        let days: [Double] = [0.5, 20, 35, 45, 59.9, 60, 90]
        let reference = days.map { SubscriptionProjection(facts: facts).view(at: W.d($0)) }
        for order in Fixture.permutations(Array(facts.indices)) {
            let projection = SubscriptionProjection(facts: order.map { facts[$0] })
            for (k, day) in days.enumerated() {
                let view = projection.view(at: W.d(day))
                XCTAssertEqual(view.subscription(W.otid), reference[k].subscription(W.otid), "order \(order) day \(day)")
                XCTAssertEqual(view.transactions, reference[k].transactions)
                if view.subscription(W.otid) != reference[k].subscription(W.otid) { return }
            }
        }
    }

    func testResigningAfterALapseStartsANewRunAndLaterContract() {
        let events = lifecycle() + [
            W.event(W.signing(signed: 200, renewal: 230), position: 5),
            W.event(W.deliver(order: "O3", paid: 200, renewal: 230), position: 6),
        ]
        let s = W.state(W.facts(events), at: 210)
        XCTAssertEqual(s?.status, .active)
        XCTAssertEqual(s?.autoRenewStatus, 1)
        XCTAssertEqual(s?.recentSubscriptionStartDate, W.d(200), "a lapse of more than 60 days starts a new run")
        XCTAssertEqual(s?.latestTransactionId, "O3")
    }

    func testProvisionalRefundIsMovedToTheSubscriptionByTheLinkEvent() {
        let provisional = StreamNames.wechatProvisional(orderId: "O2")
        let refund = W.event(W.refundNotify(order: "O2", at: 50), position: 5, stream: provisional)
        let link = W.ledger(W.link(order: "O2"), type: XPayEventName.orderLinked, position: 6, recorded: 51)
        let links = WeChatOrderLinks(events: [refund, link])
        XCTAssertEqual(links.subscriptionStream(of: provisional), W.otid)
        XCTAssertEqual(links.provisionalStreams(linkedTo: W.otid), [provisional])
        let unlinked = W.facts(lifecycle() + [refund])
        XCTAssertEqual(W.state(unlinked, at: 55)?.status, .active, "the refund sits in another stream until linked")
        XCTAssertNil(W.state(unlinked, at: 55, otid: provisional), "a bare refund describes no subscription")
        let linked = unlinked.map(links.relinked)
        XCTAssertEqual(W.state(linked, at: 55)?.status, .revoked)
        XCTAssertEqual(WeChatOrderLinks(events: [link, link, refund]), links, "order and duplicates do not matter")
    }

    func testAppleFactsOfTheSameStreamStillFoldTheAppleWay() {
        // The hook only diverts WeChat kinds: an Apple-only subscription is unchanged.
        let apple = Fixture.renewedTwice()
        XCTAssertEqual(Fixture.state(apple, at: 45)?.status, .active)
        XCTAssertEqual(Fixture.state(apple, at: 45)?.latestTransactionId, "t2")
    }
}
