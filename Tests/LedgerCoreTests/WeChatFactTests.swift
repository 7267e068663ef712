import Foundation
import XCTest
@testable import LedgerCore

/// `WeChatFacts`, row by row of its doc table, in JSON and XML style (every scalar a string):
/// which facts each push states, with which business time, and what a push the ledger cannot
/// order becomes. Then the WeChat rules of the fold on the facts the decoder gives.
final class WeChatFactTests: XCTestCase {
    typealias W = WX

    func facts(_ payload: JSONValue, position: Int64 = 1, xml: Bool = false, signedAt: EpochMillis? = nil) -> [Fact] {
        FactDecoder.facts(of: W.event(xml ? W.xmlStyle(payload) : payload, position: position, signedAt: signedAt))
    }

    func testEachPushDecodesWithItsOwnBusinessTimeInJSONAndXMLStyle() throws {
        for xml in [false, true] {
            let sign = facts(W.signing(signed: 0, renewal: 30), xml: xml)
            XCTAssertEqual(sign.map(\.kind), [.renewal], "xml \(xml)")
            XCTAssertEqual(sign[0].signedAt, W.d(0), "SignedTime (ms), not CreateTime")
            XCTAssertEqual(sign[0].subscription, W.key)
            XCTAssertEqual(sign[0].customerId, W.openId)
            XCTAssertEqual(sign[0].origin, .wechat)
            XCTAssertEqual(sign[0].message, XPayEventName.signingResult)
            XCTAssertEqual(sign[0].renewal?.productId, W.product)
            XCTAssertEqual(sign[0].renewal?.autoRenewStatus, 1)
            XCTAssertEqual(sign[0].renewal?.renewalDate, W.d(30))

            let deliver = facts(W.deliver(order: "O1", paid: 1, renewal: 30, price: 990), xml: xml)
            XCTAssertEqual(deliver.map(\.kind), [.transaction, .renewal, .orderAlias, .orderAlias], "xml \(xml)")
            let tx = deliver[0]
            XCTAssertEqual(tx.signedAt, W.sec(1) * 1000, "PaidTime (s), not CreateTime")
            XCTAssertEqual(tx.effectiveAt, tx.signedAt)
            XCTAssertEqual(tx.transactionId, "O1")
            XCTAssertEqual(tx.transaction?.expiresDate, W.d(30), "the period ends at RenewalDate")
            XCTAssertEqual(tx.transaction?.purchaseDate, W.sec(1) * 1000)
            XCTAssertEqual(tx.transaction?.price, 9_900, "990 fen = 9.90 CNY = 9,900 milliunits")
            XCTAssertEqual(tx.transaction?.currency, "CNY")
            XCTAssertEqual(tx.transaction?.productId, W.product, "GoodsInfo.ProductId")
            XCTAssertEqual(tx.transaction?.type, ProductType.autoRenewable)
            XCTAssertEqual(tx.customerId, W.openId, "OpenId, never FromUserName")
            XCTAssertEqual(deliver[1].renewal?.autoRenewStatus, 1)
            XCTAssertEqual(deliver[1].renewal?.renewalDate, W.d(30))
            XCTAssertEqual(Set(deliver[2...].compactMap(\.orderAlias)), ["mch-O1", "tx-O1"])
            XCTAssertTrue(deliver[2...].allSatisfy { $0.transactionId == "O1" })

            let unsign = facts(W.unsigning(unsigned: 10, renewal: 30), xml: xml)
            XCTAssertEqual(unsign.map(\.kind), [.renewal])
            XCTAssertEqual(unsign[0].signedAt, W.d(10), "UnsignedTime")
            XCTAssertEqual(unsign[0].renewal?.autoRenewStatus, 0)
            XCTAssertEqual(unsign[0].renewal?.renewalDate, W.d(30))

            let refund = facts(W.refundNotify(order: "O1", at: 12), xml: xml)
            XCTAssertEqual(refund.map(\.kind), [.revocation, .orderAlias])
            XCTAssertNil(refund[0].subscription, "a refund names only orders")
            XCTAssertEqual(refund[0].signedAt, W.sec(12) * 1000, "RefundSuccTimestamp")
            XCTAssertEqual(refund[0].effectiveAt, W.sec(12) * 1000)
            XCTAssertEqual(refund[0].transactionId, "O1", "MchOrderId")
            XCTAssertEqual(refund[0].orderAlias, "wx-O1", "WxOrderId")
            XCTAssertEqual(refund[0].transaction?.revocationDate, W.sec(12) * 1000)
            XCTAssertEqual(refund[0].details["refund_fee"]?.int64, 3000)

            let failed = facts(W.refundNotify(order: "O1", at: 12, ok: false), xml: xml)
            XCTAssertEqual(failed.map(\.kind), [.refundFailed, .orderAlias])
            XCTAssertNil(failed[0].transaction?.revocationDate, "a failed refund revokes nothing")
            XCTAssertEqual(failed[0].signedAt, W.sec(11.5) * 1000, "a failure's success time is 0: the start time is used")

            let inquiry = facts(W.inquiry(order: "O1", asked: 11), xml: xml)
            XCTAssertEqual(inquiry.map(\.kind), [.refundInquiry])
            XCTAssertEqual(inquiry[0].signedAt, W.sec(11) * 1000, "refund_time")
            XCTAssertEqual(inquiry[0].transactionId, "O1")
            XCTAssertEqual(inquiry[0].details["provide_status"]?.int64, 1)
            XCTAssertEqual(inquiry[0].details["refund_request_reason"]?.text, "UNINTENDED_PURCHASE")
        }
    }

    func testEnvAndOrdersWithoutASubscription() {
        var sandbox = W.deliver(order: "O1", paid: 1, renewal: 30).objectValue!
        sandbox["Env"] = .integer(1)
        XCTAssertEqual(facts(.object(sandbox)).first?.subscription?.environment, "Sandbox", "Env 1 is WeChat's sandbox")
        // An ordinary (non-subscription) delivery states nothing about subscriptions: one `purchase`
        // fact (order, alias, amount, customer) for auditors.
        var ordinary = W.deliver(order: "P1", paid: 1, renewal: 30).objectValue!
        ordinary["AppleSubscriptionInfo"] = nil
        let purchase = facts(.object(ordinary))
        XCTAssertEqual(purchase.map(\.kind), [.purchase])
        XCTAssertNil(purchase.first?.subscription)
        XCTAssertEqual(purchase.first?.transactionId, "P1")
        XCTAssertEqual(purchase.first?.customerId, W.openId)
        XCTAssertEqual(purchase.first?.transaction?.price, 30_000)
        XCTAssertEqual(purchase.first?.transaction?.purchaseDate, W.sec(1) * 1000)
        // It changes no fold, even one that states the same order.
        var fold = SubscriptionFold(key: SubscriptionKey(environment: "Production", originalTransactionId: W.otid),
                                    facts: facts(W.signing(signed: 0, renewal: 30)))
        let before = fold.state(at: W.d(2))
        for f in purchase { fold.apply(f) }
        XCTAssertEqual(fold.state(at: W.d(2)), before)
        XCTAssertEqual(facts(.object(["MsgType": .string("event"), "Event": .string("debug_demo"), "CreateTime": .integer(1)])), [])
    }

    /// Without PaidTime a delivery carries no purchase date: the fold starts its period where the
    /// one before it ended (CreateTime, the send time, is only a placeholder no rule orders by).
    func testDeliveryWithoutPayInfoHasNoPurchaseDateAndIsPlacedAfterThePeriodBefore() {
        let noPay = facts(W.deliver(order: "O1", paid: 3, renewal: 30, payInfo: false))
        XCTAssertNil(noPay.first?.transaction?.purchaseDate)
        XCTAssertEqual(noPay.first?.signedAt, W.sec(3.002) * 1000, "CreateTime, kept as the placeholder")
        XCTAssertEqual(noPay.map(\.kind), [.transaction, .renewal], "no WeChatPayInfo: no aliases")
        XCTAssertEqual(noPay.last?.transactionId, "O1", "the delivery's renewal statement names its order")
        // Placed: the first period at the signing; a renewal at the previous RenewalDate — even when
        // its push (re-sent) came days later, and whatever order the facts arrive in.
        let key = SubscriptionKey(environment: "Production", originalTransactionId: W.otid)
        var renewal = W.deliver(order: "O2", paid: 30, renewal: 60, payInfo: false).objectValue!
        renewal["CreateTime"] = .integer(W.sec(34))
        let all = facts(W.signing(signed: 0, renewal: 30)) + noPay + facts(.object(renewal))
        for order in [all, all.reversed()] {
            let fold = SubscriptionFold(key: key, facts: order)
            XCTAssertEqual(fold.transaction("O1")?.purchaseDate, W.d(0), "the signing's time")
            XCTAssertEqual(fold.transaction("O2")?.purchaseDate, W.d(30), "the previous RenewalDate, not CreateTime (day 34)")
            XCTAssertEqual(fold.state(at: W.d(31))?.latestTransactionId, "O2", "paid at the renewal: in effect from day 30")
            XCTAssertEqual(fold.state(at: W.d(31))?.status, .active)
            XCTAssertEqual(fold.state(at: W.d(29))?.latestTransactionId, "O1")
        }
        var neither = W.deliver(order: "O1", paid: 3, renewal: 30, payInfo: false).objectValue!
        neither["CreateTime"] = nil
        XCTAssertEqual(facts(.object(neither)).map(\.kind), [.unreadable])
    }

    /// Schema 7: a contract change without its own time (SignedTime / UnsignedTime, seed 000 §4.2 /
    /// §4.4) is placed at the push's CreateTime (§4.2: 消息发送时间, seconds), the basis named in the
    /// fact's detail — folded, not evidence only. Without CreateTime too it cannot be ordered.
    func testAContractChangeWithoutItsOwnTimeFallsBackToCreateTimeWithTheBasisNamed() {
        var signing = W.signing(signed: 0, renewal: 30).objectValue!
        signing["AppleSubscriptionInfo"] = .object(["OriginalTransactionId": .string(W.otid), "ProductId": .string(W.product),
                                                    "RenewalDate": .integer(W.d(30))])
        signing["CreateTime"] = .integer(W.sec(0.5))
        var unsigning = W.unsigning(unsigned: 1, renewal: 30).objectValue!
        unsigning["AppleSubscriptionInfo"] = .object(["OriginalTransactionId": .string(W.otid), "ProductId": .string(W.product),
                                                      "AutoRenewStatus": .integer(0), "RenewalDate": .integer(W.d(30))])
        unsigning["CreateTime"] = .integer(W.sec(2))
        for (name, payload, at, field) in [("signing", signing, W.d(0.5), "AppleSubscriptionInfo.SignedTime"),
                                           ("unsigning", unsigning, W.d(2), "AppleSubscriptionInfo.UnsignedTime")] {
            let f = facts(.object(payload))
            XCTAssertEqual(f.map(\.kind), [.renewal], name)
            XCTAssertEqual(f.first?.signedAt, at, "\(name): placed at CreateTime")
            XCTAssertEqual(f.first?.details["time_basis"]?.text, "CreateTime", name)
            XCTAssertEqual(f.first?.details["missing"]?.text, field, name)
            var neither = payload
            neither["CreateTime"] = nil
            let u = facts(.object(neither))
            XCTAssertEqual(u.map(\.kind), [.unreadable], "\(name) without CreateTime either")
            XCTAssertTrue(u.first?.details["reason"]?.text?.contains(field) ?? false, "\(u)")
        }
        // A push stating its own time names no basis (the ordinary case stays as it was).
        XCTAssertNil(facts(W.signing(signed: 0, renewal: 30)).first?.details["time_basis"])
        // Folded: the unsigning placed at CreateTime turns auto-renew off after the signing.
        let fold = SubscriptionFold(key: SubscriptionKey(environment: "Production", originalTransactionId: W.otid),
                                    facts: facts(.object(signing)) + facts(.object(unsigning)))
        XCTAssertEqual(fold.state(at: W.d(1))?.autoRenewStatus, 1)
        XCTAssertEqual(fold.state(at: W.d(3))?.autoRenewStatus, 0)
    }

    func testPushesThatCannotBeOrderedOrPlacedAreUnreadable() {
        var noSignedTime = W.signing(signed: 0, renewal: 30).objectValue!
        noSignedTime["AppleSubscriptionInfo"] = .object(["OriginalTransactionId": .string(W.otid), "RenewalDate": .integer(W.d(30))])
        noSignedTime["CreateTime"] = nil
        var noUnsignedTime = W.unsigning(unsigned: 1, renewal: 30).objectValue!
        noUnsignedTime["AppleSubscriptionInfo"] = .object(["OriginalTransactionId": .string(W.otid), "AutoRenewStatus": .integer(0)])
        noUnsignedTime["CreateTime"] = nil
        var noOrder = W.deliver(order: "O1", paid: 1, renewal: 30).objectValue!
        noOrder["OutTradeNo"] = .string("")
        var noOtid = W.deliver(order: "O1", paid: 1, renewal: 30).objectValue!
        noOtid["AppleSubscriptionInfo"] = .object(["AutoRenewStatus": .integer(1)])
        var refundNoOrder = W.refundNotify(order: "O1", at: 2).objectValue!
        refundNoOrder["MchOrderId"] = nil
        refundNoOrder["WxOrderId"] = nil
        var inquiryNoTime = W.inquiry(order: "O1", asked: 2).objectValue!
        inquiryNoTime["refund_time"] = .string("0")
        let cases: [(String, [String: JSONValue], String)] = [
            ("signing without SignedTime or CreateTime", noSignedTime, "SignedTime"),
            ("unsigning without UnsignedTime or CreateTime", noUnsignedTime, "UnsignedTime"),
            ("delivery without OutTradeNo", noOrder, "OutTradeNo"),
            ("delivery without OriginalTransactionId", noOtid, "OriginalTransactionId"),
            ("refund naming no order", refundNoOrder, "MchOrderId"),
            ("inquiry without refund_time", inquiryNoTime, "refund_time"),
        ]
        for (name, payload, mentions) in cases {
            let f = facts(.object(payload))
            XCTAssertEqual(f.map(\.kind), [.unreadable], name)
            XCTAssertEqual(f.first?.origin, .wechat)
            XCTAssertTrue(f.first?.details["reason"]?.text?.contains(mentions) ?? false, "\(name): \(f)")
        }
        for bytes in ["not json", "[1,2]", "\"x\"", ""] {
            let e = RecordedEvent(position: 1, recordedAt: 0, event: NewEvent(
                streamId: W.otid, dedupeKey: "k", source: .wechat, type: "x", payload: Data(bytes.utf8), raw: Data()))
            XCTAssertEqual(FactDecoder.facts(of: e).map(\.kind), [.unreadable], bytes)
        }
    }

    func testHostileNumbersAreAbsentOrClampedNeverTraps() {
        // Seconds that overflow milliseconds, negative and zero times: absent, then the fallbacks.
        var o = W.deliver(order: "O1", paid: 1, renewal: 30).objectValue!
        o["WeChatPayInfo"] = .object(["PaidTime": .integer(Int64.max)])
        o["CreateTime"] = .integer(-5)
        XCTAssertEqual(facts(.object(o)).map(\.kind), [.unreadable], "no usable time at all")
        var s = W.signing(signed: 0, renewal: 30).objectValue!
        s["AppleSubscriptionInfo"] = .object(["OriginalTransactionId": .string(W.otid), "SignedTime": .integer(W.d(0)),
                                              "RenewalDate": .integer(0), "AutoRenewStatus": .integer(Int64.max)])
        let f = facts(.object(s))
        XCTAssertNil(f.first?.renewal?.renewalDate, "RenewalDate 0 is no date")
        XCTAssertEqual(f.first?.renewal?.autoRenewStatus, Int.max, "clamped, not trapped")
        // Fen that overflow milliunits are no price rather than a wrapped one.
        let rich = facts(W.deliver(order: "O3", paid: 1, renewal: 30, price: Int64.max))
        XCTAssertEqual(rich.first?.kind, .transaction)
        XCTAssertNil(rich.first?.transaction?.price)
    }

    // MARK: - The WeChat rules of the fold

    func testSignedDeliveredUnsignedIsActiveUntilTheRenewalDateThenExpired() throws {
        let facts = W.facts([
            W.event(W.signing(signed: 0, renewal: 30), position: 1),
            W.event(W.deliver(order: "O1", paid: 0.0001, renewal: 30), position: 2),
            W.event(W.deliver(order: "O2", paid: 30, renewal: 60), position: 3),
            W.event(W.unsigning(unsigned: 40, renewal: 60), position: 4),
        ])
        let during = try XCTUnwrap(W.state(facts, at: 45))
        XCTAssertEqual(during.status, .active, "unsigned, still entitled until RenewalDate")
        XCTAssertEqual(during.autoRenewStatus, 0)
        XCTAssertEqual(during.expiresDate, W.d(60))
        XCTAssertEqual(during.renewalDate, W.d(60))
        XCTAssertEqual(during.productId, W.product)
        XCTAssertEqual(during.customerId, W.openId)
        XCTAssertEqual(during.customerSource, .openId)
        XCTAssertEqual(during.latestTransactionId, "O2")
        XCTAssertEqual(during.recentSubscriptionStartDate, W.d(0))
        XCTAssertEqual(W.state(facts, at: 35)?.autoRenewStatus, 1, "before the unsigning")
        XCTAssertEqual(W.state(facts, at: 20)?.latestTransactionId, "O1")
        XCTAssertEqual(W.state(facts, at: 60)?.status, .expired)
        let grants = SubscriptionProjection(facts: facts).view(at: W.d(45)).entitlements(catalog: W.catalog, customerId: W.openId)
        XCTAssertEqual(grants.map(\.entitlement), ["vip"])
        XCTAssertEqual(grants.first?.expiresDate, W.d(60))
    }

    func testARefundJoinsItsOrderThroughAnyIdWhateverArrivesFirst() throws {
        // The refund names only the WeChat order id; the delivery's aliases and the refund's own
        // MchOrderId ~ WxOrderId link are the only ways to reach the subscription.
        var refund = W.refundNotify(order: "O2", wxOrder: "WX-77", at: 45).objectValue!
        refund["MchOrderId"] = .string("tx-O2")  // named by its WeChat Pay transaction id
        let events = [
            W.event(W.signing(signed: 0, renewal: 30), position: 1),
            W.event(W.deliver(order: "O1", paid: 0.0001, renewal: 30), position: 2),
            W.event(W.deliver(order: "O2", paid: 30, renewal: 60), position: 3),
            W.event(.object(refund), position: 4, stream: StreamId.wechatOrder("tx-O2").text),
            W.event(W.inquiry(order: "WX-77", asked: 44), position: 5, stream: StreamId.wechatOrder("WX-77").text),
        ]
        let facts = W.facts(events)
        for order in [facts, facts.reversed(), Array(facts[3...] + facts[..<3])] {
            let state = try XCTUnwrap(W.state(order, at: 50))
            XCTAssertEqual(state.status, .revoked)
            XCTAssertEqual(state.revocationDate, W.sec(45) * 1000)
            let folds = SubscriptionProjection(facts: order).subscriptions
            let o2 = try XCTUnwrap(folds[W.key]?.transaction("O2"))
            XCTAssertEqual(o2.revocationDate, W.sec(45) * 1000)
            XCTAssertTrue(folds[W.key]?.orderIds.isSuperset(of: ["O2", "tx-O2", "mch-O2", "WX-77"]) ?? false)
            XCTAssertNil(folds[W.key]?.transaction("O1")?.revocationDate, "the other order is untouched")
        }
        // Without any delivery naming the order, the refund belongs to nobody.
        let orphan = W.facts([W.event(W.signing(signed: 0, renewal: 30), position: 1), events[3]])
        XCTAssertEqual(W.state(orphan, at: 10)?.status, .active)
        XCTAssertNil(W.state(orphan, at: 10)?.revocationDate)
    }

    func testAContractChangeOutranksADeliveryOfTheSamePeriodWhateverItsTime() {
        // The delivery of O1 re-pushed without PaidTime long after the unsigning: CreateTime is its
        // resend time. It must neither turn auto-renew back on nor move the period's start.
        let facts = W.facts([
            W.event(W.signing(signed: 0, renewal: 30), position: 1),
            W.event(W.deliver(order: "O1", paid: 0, renewal: 30, payInfo: false), position: 2),
            W.event(W.unsigning(unsigned: 5, renewal: 30), position: 3),
            W.event(W.deliver(order: "O1", paid: 20, renewal: 30, payInfo: false), position: 4),
        ])
        for order in [facts, facts.reversed()] {
            XCTAssertEqual(W.state(order, at: 1)?.latestTransactionId, "O1", "in effect from its first push")
            XCTAssertEqual(W.state(order, at: 25)?.autoRenewStatus, 0)
            XCTAssertEqual(W.state(order, at: 25)?.status, .active)
        }
        // A delivery of the *next* period does say the contract runs on.
        let renewed = facts + W.facts([W.event(W.deliver(order: "O2", paid: 30, renewal: 60), position: 5)])
        XCTAssertEqual(W.state(renewed, at: 35)?.autoRenewStatus, 1)
    }

    /// Seed 000 §4.3: Apple's charges carry no PaidTime in the delivery (only RenewalDate, and
    /// CreateTime, 消息发送时间: seconds after the charge); §4.4: the unsigning states UnsignedTime and
    /// the current period's end. Apple charges up to 24 h early, so the charge of R2 can precede an
    /// unsigning that still states R1. Without PaidTime the charge happened by its push's
    /// CreateTime — whenever the ledger recorded it. Charge sent at day 29.2, unsigning at 29.6:
    /// the unsigning is the later act — auto-renew 0 for good, the paid period R1 → R2 runs — in
    /// every order of the facts, the charge recorded before the unsigning or days after it. A
    /// charge sent after the unsigning (day 29.8) is the later act and says the contract runs on
    /// from its period (auto-renew 1 from day 30), however early the ledger recorded it.
    func testAnUnsigningIsComparedWithAChargeWithoutPaidTimeByItsSendTimeNotWhenRecorded() {
        func events(chargeSent: Double, recorded: Double) -> [RecordedEvent] {
            [W.event(W.signing(signed: 0, renewal: 30), position: 1),
             W.event(W.deliver(order: "O1", paid: 0, renewal: 30), position: 2),
             W.event(W.deliver(order: "O2", paid: chargeSent, renewal: 60, payInfo: false), position: 3, recorded: recorded),
             W.event(W.unsigning(unsigned: 29.6, renewal: 30), position: 4, recorded: 29.6)]
        }
        for recorded in [29.2, 29.9, 33] {
            let early = events(chargeSent: 29.2, recorded: recorded)
            for order in DocumentedScenarioTests.permutations([0, 1, 2, 3]) {
                let facts = W.facts(order.map { early[$0] })
                let label = "\(order), charge recorded at day \(recorded)"
                XCTAssertEqual(W.state(facts, at: 29.5)?.autoRenewStatus, 1, "\(label): on until the unsigning")
                XCTAssertEqual(W.state(facts, at: 29.7)?.autoRenewStatus, 0, label)
                let renewed = W.state(facts, at: 45)
                XCTAssertEqual(renewed?.autoRenewStatus, 0, "\(label): the early charge does not turn it back on")
                XCTAssertEqual(renewed?.status, .active, "\(label): the paid period R1 → R2 runs")
                XCTAssertEqual(renewed?.expiresDate, W.d(60), label)
            }
        }
        for recorded in [29.8, 31] {
            let late = events(chargeSent: 29.8, recorded: recorded)
            for order in DocumentedScenarioTests.permutations([0, 1, 2, 3]) {
                let contrast = W.facts(order.map { late[$0] })
                let label = "\(order), charge recorded at day \(recorded)"
                XCTAssertEqual(W.state(contrast, at: 29.7)?.autoRenewStatus, 0, "\(label): the unsigning, until the charge's period")
                XCTAssertEqual(W.state(contrast, at: 45)?.autoRenewStatus, 1, "\(label): charged after the unsigning")
            }
        }
    }

    func testASigningAloneOpensThePeriodAndADeliveryThenTakesOver() {
        let facts = W.facts([W.event(W.signing(signed: 0, renewal: 7), position: 1)])
        let trial = W.state(facts, at: 3)
        XCTAssertEqual(trial?.status, .active, "seed 000: a free trial is signed without a charge")
        XCTAssertEqual(trial?.expiresDate, W.d(7))
        XCTAssertNil(trial?.latestTransactionId)
        XCTAssertNil(trial?.productType)
        XCTAssertEqual(trial?.productId, W.product)
        XCTAssertEqual(W.state(facts, at: 8)?.status, .expired)
        XCTAssertNil(W.state(facts, at: -1), "nothing had begun")
        let paid = facts + W.facts([W.event(W.deliver(order: "O1", paid: 7, renewal: 37), position: 2)])
        XCTAssertEqual(W.state(paid, at: 8)?.expiresDate, W.d(37))
        XCTAssertEqual(W.state(paid, at: 8)?.latestTransactionId, "O1")
        XCTAssertEqual(W.state(paid, at: 8)?.recentSubscriptionStartDate, W.d(0), "one run: trial and paid period")
    }
}
