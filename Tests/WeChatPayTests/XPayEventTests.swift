import Crypto
import Foundation
import LedgerCore
@testable import WeChatPay
import XCTest

/// Every xpay event, in JSON secure mode and in XML plaintext mode, to the same domain facts.
final class XPayEventTests: XCTestCase {
    let r = PushFixture.receiver()

    /// The same message through both transports; returns both notifications.
    func both(_ message: JSONValue, file: StaticString = #filePath, line: UInt = #line) throws -> (XPayNotification, XPayNotification) {
        let (sq, sbody) = PushFixture.secure(message, .json)
        let secure = try r.open(query: sq, body: sbody)
        XCTAssertEqual(secure.mode, .secure, file: file, line: line)
        XCTAssertEqual(secure.format, .json, file: file, line: line)
        let (pq, pbody) = PushFixture.plaintext(message, .xml)
        let plain = try r.open(query: pq, body: pbody)
        XCTAssertEqual(plain.mode, .plaintext, file: file, line: line)
        XCTAssertEqual(plain.format, .xml, file: file, line: line)
        let a = try XPayNotification(secure), b = try XPayNotification(plain)
        // The formats differ (XML has only text) but the domain reading is the same.
        XCTAssertEqual(a.message, b.message, file: file, line: line)
        XCTAssertEqual(a.dedupeKey, b.dedupeKey, file: file, line: line)
        XCTAssertEqual(a.stream, b.stream, file: file, line: line)
        let ea = a.event(), eb = b.event()
        XCTAssertEqual(ea.type, eb.type, file: file, line: line)
        XCTAssertEqual(ea.signedAt, eb.signedAt, file: file, line: line)
        XCTAssertEqual(ea.expiresAt, eb.expiresAt, file: file, line: line)
        XCTAssertEqual(ea.environment, eb.environment, file: file, line: line)
        // The payload is JSON that decodes back to the same message, in both formats.
        XCTAssertEqual(try XPayMessage(payload: ea.payload), a.message, file: file, line: line)
        XCTAssertEqual(try XPayMessage(payload: eb.payload), a.message, file: file, line: line)
        XCTAssertEqual(ea.source, .wechat, file: file, line: line)
        return (a, b)
    }

    func testSigningResult() throws {
        let (n, _) = try both(PushFixture.signing())
        let e = n.event()
        XCTAssertEqual(e.streamId, "2000001147426510")
        XCTAssertEqual(e.dedupeKey, "signing:1775226065000")
        XCTAssertEqual(e.type, XPayEventName.signingResult)
        XCTAssertEqual(e.signedAt, 1_775_226_065_000)
        XCTAssertEqual(e.expiresAt, 1_777_818_065_000)
        XCTAssertEqual(e.environment, "Production")
        guard case .signingResult(let s) = n.message else { return XCTFail("not a signing result") }
        XCTAssertEqual(s.openId, "oUser1")
        XCTAssertEqual(s.subscription.productId, "subscription_vip_monthly")
        XCTAssertEqual(s.subscription.autoRenewStatus, 1)
    }

    func testGoodsDeliverWithAppleSubscription() throws {
        let (n, _) = try both(PushFixture.deliver())
        let e = n.event()
        XCTAssertEqual(e.streamId, "2000001147426510")
        XCTAssertEqual(e.dedupeKey, "deliver:ORDER-0001")
        XCTAssertEqual(e.expiresAt, 1_777_818_065_000)
        XCTAssertEqual(e.signedAt, 1_775_226_066_000)
        XCTAssertEqual(n.orderIds, ["ORDER-0001"])
        guard case .goodsDelivery(let d) = n.message else { return XCTFail("not a delivery") }
        XCTAssertEqual(d.actualPrice, 990)
        XCTAssertEqual(d.origPrice, 3000)
        XCTAssertEqual(d.productId, "subscription_vip_monthly")
        XCTAssertEqual(d.env, 0)
    }

    func testGoodsDeliverWithoutAppleSubscriptionIsAnOrdinaryPurchase() throws {
        var m = PushFixture.deliver(order: "PLAIN-7", apple: false).objectValue!
        m["WeChatPayInfo"] = .object(["MchOrderNo": .string("mch-1"), "TransactionId": .string("4200-1"), "PaidTime": .integer(1_775_000_000)])
        m["Env"] = .integer(1)
        let (n, _) = try both(.object(m))
        let e = n.event()
        XCTAssertEqual(e.streamId, StreamId.wechatOrder("PLAIN-7").text)
        XCTAssertEqual(e.dedupeKey, "deliver:PLAIN-7")
        XCTAssertNil(e.expiresAt)
        XCTAssertEqual(e.environment, "Sandbox")
        XCTAssertEqual(e.signedAt, 1_775_000_000_000, "PaidTime is the business time when present")
        XCTAssertEqual(n.orderIds, ["PLAIN-7", "mch-1", "4200-1"])
    }

    func testUnsigning() throws {
        let (n, _) = try both(PushFixture.unsigning())
        let e = n.event()
        XCTAssertEqual(e.streamId, "2000001147426510")
        XCTAssertEqual(e.dedupeKey, "unsigning:1776000000000")
        XCTAssertEqual(e.signedAt, 1_776_000_000_000)
        XCTAssertEqual(e.expiresAt, 1_777_818_065_000, "entitled until the end of the current period")
        guard case .unsigning(let u) = n.message else { return XCTFail("not an unsigning") }
        XCTAssertEqual(u.action, "unsubscribe")
        XCTAssertEqual(u.subscription.autoRenewStatus, 0)
    }

    func testRefundInquiryGoesByOrder() throws {
        let (n, _) = try both(PushFixture.refundInquiry())
        XCTAssertEqual(n.dedupeKey, "refund-inquiry:93594000000005171:1776100000")
        XCTAssertEqual(n.stream, .byOrder(orderIds: ["93594000000005171", "510001234567890"],
                                          provisional: "wechat:order:93594000000005171"))
        XCTAssertEqual(n.event().streamId, "wechat:order:93594000000005171")
        XCTAssertEqual(n.event(resolvedStream: "2000001147426510").streamId, "2000001147426510")
        XCTAssertEqual(n.event().signedAt, 1_776_100_000_000)
        guard case .refundInquiry(let q) = n.message else { return XCTFail("not an inquiry") }
        XCTAssertEqual(q.provideStatus, .delivered)
        XCTAssertEqual(q.refundRequestReason, "UNINTENDED_PURCHASE")
        XCTAssertEqual(q.channelBill, "510001234567890")
    }

    func testRefundNotify() throws {
        let (n, _) = try both(PushFixture.refundNotify())
        XCTAssertEqual(n.dedupeKey, "refund:wxrefund-1:0")
        XCTAssertEqual(n.stream, .byOrder(orderIds: ["ORDER-0001", "93594000000005171"], provisional: "wechat:order:ORDER-0001"))
        XCTAssertEqual(n.event(resolvedStream: "2000001147426510").streamId, "2000001147426510")
        XCTAssertEqual(n.event().signedAt, 1_776_199_000_000)
        guard case .refundOutcome(let o) = n.message else { return XCTFail("not a refund outcome") }
        XCTAssertTrue(o.succeeded)
        XCTAssertEqual(o.refundFee, 990)
        XCTAssertNil(o.mchRefundId, "empty strings read as absent")
        // A failure then a success of the same refund are two facts.
        let (failed, _) = try both(PushFixture.refundNotify(retCode: 1))
        XCTAssertNotEqual(failed.dedupeKey, n.dedupeKey)
    }

    func testUnknownEventsStoredUnderOtherStream() throws {
        var m = PushFixture.header("xpay_complaint_notify")
        m["RequestId"] = .string("req-1")
        m["RetryTimes"] = .integer(0)
        let (n, _) = try both(.object(m))
        XCTAssertEqual(n.event().streamId, "wechat:other:xpay_complaint_notify")
        XCTAssertTrue(n.dedupeKey.hasPrefix("sha256:"))
        XCTAssertEqual(n.event().type, "xpay_complaint_notify")
        // A retry with a new CreateTime and RetryTimes is the same event.
        m["RetryTimes"] = .integer(3)
        m["CreateTime"] = .integer(1_775_999_999)
        let (retry, _) = try both(.object(m))
        XCTAssertEqual(retry.dedupeKey, n.dedupeKey)
        // Different content is a different event.
        m["RequestId"] = .string("req-2")
        let (other, _) = try both(.object(m))
        XCTAssertNotEqual(other.dedupeKey, n.dedupeKey)
    }

    func testMissingRequiredFieldsRefused() throws {
        var deliver = PushFixture.deliver().objectValue!
        deliver["OutTradeNo"] = nil
        let (q, body) = PushFixture.secure(.object(deliver), .json)
        let e = pushError { try XPayNotification(self.r.open(query: q, body: body)) }
        XCTAssertEqual(e, .missingField(event: XPayEventName.goodsDeliver, field: "OutTradeNo"))
        XCTAssertEqual(e?.kind.httpStatus, 400)

        var signing = PushFixture.signing().objectValue!
        signing["AppleSubscriptionInfo"] = .object(["ProductId": .string("p")])
        let (q2, body2) = PushFixture.plaintext(.object(signing), .xml)
        XCTAssertEqual(pushError { try XPayNotification(self.r.open(query: q2, body: body2)) }?.code, "missing_field")

        var inquiry = PushFixture.refundInquiry().objectValue!
        inquiry["pay_order_id"] = .string("")
        let (q3, body3) = PushFixture.secure(.object(inquiry), .xml)
        XCTAssertEqual(pushError { try XPayNotification(self.r.open(query: q3, body: body3)) }?.code, "missing_field")

        var longOrder = PushFixture.refundNotify().objectValue!
        longOrder["MchOrderId"] = .string(String(repeating: "9", count: 129))
        let (q5, body5) = PushFixture.secure(.object(longOrder), .json)
        XCTAssertEqual(pushError { try XPayNotification(self.r.open(query: q5, body: body5)) }?.code, "invalid_field")

        var refund = PushFixture.refundNotify().objectValue!
        refund["MchOrderId"] = nil
        refund["WxOrderId"] = nil
        let (q4, body4) = PushFixture.secure(.object(refund), .json)
        XCTAssertEqual(pushError { try XPayNotification(self.r.open(query: q4, body: body4)) }?.code, "missing_field")
    }

    /// WeChat re-pushes (up to 15 times): new nonce, timestamp, random prefix, CreateTime and
    /// RetryTimes. Every one maps to the same stream and dedupe key.
    func testDedupeKeysStableAcrossRePushes() throws {
        let makers: [(Int64, Int64) -> JSONValue] = [
            { c, _ in PushFixture.signing(createTime: c) },
            { c, _ in PushFixture.deliver(createTime: c) },
            { c, _ in PushFixture.unsigning(createTime: c) },
            { c, _ in PushFixture.refundInquiry(createTime: c) },
            { c, t in PushFixture.refundNotify(retryTimes: t, createTime: c) },
        ]
        for make in makers {
            var keys = Set<String>(), streams = Set<String>(), raws = Set<Data>()
            for attempt in Int64(0)..<15 {
                let format: PushFormat = attempt % 2 == 0 ? .json : .xml
                let (q, body) = PushFixture.secure(make(1_775_226_065 + attempt * 7, attempt), format,
                                                   timestamp: String(1_775_226_065 + attempt * 7), nonce: String(100_000 + attempt))
                let e = try XPayNotification(r.open(query: q, body: body)).event()
                keys.insert(e.dedupeKey)
                streams.insert(e.streamId)
                raws.insert(e.raw)
            }
            XCTAssertEqual(keys.count, 1, "\(keys)")
            XCTAssertEqual(streams.count, 1)
            XCTAssertEqual(raws.count, 15, "each re-push keeps its own evidence")
        }
    }

    func testRawKeepsExactBodyAndQuery() throws {
        let (q, body) = PushFixture.secure(PushFixture.deliver(), .xml)
        let e = try XPayNotification(r.open(query: q, body: body)).event()
        XCTAssertEqual(RawPush.body(of: e.raw), [UInt8](body))
        let raw = try JSONDecoder().decode(JSONValue.self, from: e.raw)
        XCTAssertEqual(raw["query"]?.text("msg_signature"), q.msgSignature)
        XCTAssertEqual(raw["query"]?.text("timestamp"), q.timestamp)
        XCTAssertEqual(raw["query"]?.text("nonce"), q.nonce)
        XCTAssertEqual(raw.text("format"), "xml")
        // Re-verifying from the stored evidence alone succeeds.
        let stored = PushQuery(timestamp: raw["query"]?.text("timestamp"), nonce: raw["query"]?.text("nonce"),
                               encryptType: raw["query"]?.text("encrypt_type"), msgSignature: raw["query"]?.text("msg_signature"))
        XCTAssertEqual(try r.open(query: stored, body: Data(RawPush.body(of: e.raw)!)).payload, e.payload)
        // Bodies that are not UTF-8 are kept in base64.
        let binary: [UInt8] = [0x3C, 0x78, 0xFF, 0xFE]
        let rawBinary = RawPush.encode(query: q, body: binary, format: .xml)
        XCTAssertEqual(RawPush.body(of: rawBinary), binary)
    }

    func testOrderLinkIsANewEvent() throws {
        let e = OrderLink.event(orderId: "93594000000005171", provisionalStream: "wechat:order:93594000000005171",
                                subscriptionStream: "2000001147426510", at: 1_776_100_500_000)
        XCTAssertEqual(e.streamId, "2000001147426510")
        XCTAssertEqual(e.source, .ledger)
        XCTAssertEqual(e.type, XPayEventName.orderLinked)
        XCTAssertEqual(e.dedupeKey, "link:wechat:order:93594000000005171")
        let p = try JSONDecoder().decode(JSONValue.self, from: e.payload)
        XCTAssertEqual(p.text("provisional_stream"), "wechat:order:93594000000005171")
        XCTAssertEqual(p.text("order_id"), "93594000000005171")
        // Linking twice gives the same event (idempotent append).
        XCTAssertEqual(e, OrderLink.event(orderId: "93594000000005171", provisionalStream: "wechat:order:93594000000005171",
                                          subscriptionStream: "2000001147426510", at: 1_776_100_500_000))
    }
}
