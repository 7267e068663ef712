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
        let a = XPayNotification(secure), b = XPayNotification(plain)
        XCTAssertNil(a.unreadableReason, file: file, line: line)
        XCTAssertNil(b.unreadableReason, file: file, line: line)
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
        XCTAssertEqual(n.orderIds, ["4200-1", "PLAIN-7", "mch-1"])
        XCTAssertNil(n.subscriptionStream, "an ordinary purchase belongs to no subscription")
        // Its facts: one `purchase` (order, aliases, amount, customer), for auditors; no subscription.
        let facts = FactDecoder.facts(of: e)
        XCTAssertEqual(facts.map(\.kind), [.purchase])
        XCTAssertNil(facts.first?.subscription)
        XCTAssertEqual(facts.first?.transactionId, "PLAIN-7")
        XCTAssertEqual(facts.first?.orderAlias, "4200-1")
        XCTAssertEqual(facts.first?.transaction?.price, 9_900)
        XCTAssertEqual(facts.first?.transaction?.environment, "Sandbox")
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

    /// Order-named pushes go to the order's own stream whatever the ledger holds, so a re-push
    /// lands where its first copy did (the log's stream-keyed uniqueness stores it once).
    func testRefundInquiryGoesToItsOrderStream() throws {
        let (n, _) = try both(PushFixture.refundInquiry())
        XCTAssertEqual(n.dedupeKey, "refund-inquiry:93594000000005171:1776100000")
        XCTAssertEqual(n.stream, "wechat:order:93594000000005171")
        XCTAssertEqual(n.orderIds, ["93594000000005171"], "channel_bill is Apple's bill, not an order id")
        XCTAssertEqual(n.event().streamId, "wechat:order:93594000000005171")
        XCTAssertEqual(n.event().signedAt, 1_776_100_000_000)
        XCTAssertEqual(n.asking?.payOrderId, "93594000000005171")
        XCTAssertEqual(n.asking?.refundTime, 1_776_100_000)
        guard case .refundInquiry(let q) = n.message else { return XCTFail("not an inquiry") }
        XCTAssertEqual(q.provideStatus, .delivered)
        XCTAssertEqual(q.refundRequestReason, "UNINTENDED_PURCHASE")
        XCTAssertEqual(q.channelBill, "510001234567890")
    }

    func testRefundNotify() throws {
        let (n, _) = try both(PushFixture.refundNotify())
        XCTAssertEqual(n.dedupeKey, "refund:wxrefund-1:0")
        XCTAssertEqual(n.stream, "wechat:order:ORDER-0001", "MchOrderId names the stream")
        XCTAssertEqual(n.orderIds, ["93594000000005171", "ORDER-0001"])
        XCTAssertEqual(n.event().signedAt, 1_776_199_000_000)
        guard case .refundOutcome(let o) = n.message else { return XCTFail("not a refund outcome") }
        XCTAssertTrue(o.succeeded)
        XCTAssertEqual(o.refundFee, 990)
        XCTAssertNil(o.mchRefundId, "empty strings read as absent")
        // A failure then a success of the same refund are two facts.
        let (failed, _) = try both(PushFixture.refundNotify(retCode: 1))
        XCTAssertNotEqual(failed.dedupeKey, n.dedupeKey)
        // Naming only WeChat's order id: that id's stream.
        var only = PushFixture.refundNotify().objectValue!
        only["MchOrderId"] = .string("")
        let (wx, _) = try both(.object(only))
        XCTAssertEqual(wx.stream, "wechat:order:93594000000005171")
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

    /// An authentic push the ledger cannot fully interpret is kept as evidence (never a 400 that
    /// WeChat would retry until it gives up): its own stream, a content key, one unreadable fact
    /// naming the reason the fact decoder gives.
    func testAuthenticPushesTheLedgerCannotReadAreKeptAsUnreadable() throws {
        func open(_ m: JSONValue, plain: Bool = false, _ format: PushFormat = .json) throws -> XPayNotification {
            let (q, body) = plain ? PushFixture.plaintext(m, format) : PushFixture.secure(m, format)
            return XPayNotification(try r.open(query: q, body: body))
        }
        var deliver = PushFixture.deliver().objectValue!
        deliver["OutTradeNo"] = nil
        var signing = PushFixture.signing().objectValue!
        signing["AppleSubscriptionInfo"] = .object(["ProductId": .string("p")])
        var hostileStream = PushFixture.signing().objectValue!
        hostileStream["AppleSubscriptionInfo"] = .object([
            "OriginalTransactionId": .string("ledger:admin"), "ProductId": .string("p"), "SignedTime": .integer(1_775_226_065_000)])
        var inquiry = PushFixture.refundInquiry().objectValue!
        inquiry["pay_order_id"] = .string("")
        var longOrder = PushFixture.refundNotify().objectValue!
        longOrder["MchOrderId"] = .string(String(repeating: "9", count: 129))
        var refund = PushFixture.refundNotify().objectValue!
        refund["MchOrderId"] = nil
        refund["WxOrderId"] = nil
        var unsigning = PushFixture.unsigning().objectValue!
        unsigning["AppleSubscriptionInfo"] = .object(["OriginalTransactionId": .string("2000001147426510"), "ProductId": .string("p")])
        // Without UnsignedTime the push's CreateTime places it (schema 7); without both, nothing does.
        unsigning["CreateTime"] = nil
        let cases: [(String, JSONValue, String, String)] = [
            ("delivery without OutTradeNo", .object(deliver), XPayEventName.goodsDeliver, "OutTradeNo"),
            ("signing without OriginalTransactionId", .object(signing), XPayEventName.signingResult, "OriginalTransactionId"),
            ("signing naming a ledger stream", .object(hostileStream), XPayEventName.signingResult, "1 to 20 digits"),
            ("inquiry without pay_order_id", .object(inquiry), XPayEventName.refundInquiry, "pay_order_id"),
            ("refund naming a 129-byte order", .object(longOrder), XPayEventName.refundNotify, "at most 128"),
            ("refund naming no order", .object(refund), XPayEventName.refundNotify, "neither MchOrderId nor WxOrderId"),
            ("unsigning without UnsignedTime or CreateTime", .object(unsigning), XPayEventName.unsigning, "UnsignedTime"),
        ]
        for (name, message, event, reason) in cases {
            for plain in [false, true] {
                let n = try open(message, plain: plain, plain ? .xml : .json)
                XCTAssertTrue(n.unreadableReason?.contains(reason) ?? false, "\(name): \(n.unreadableReason ?? "readable")")
                XCTAssertEqual(n.stream, StreamId.wechatUnreadable(event: event).text, name)
                XCTAssertTrue(n.dedupeKey.hasPrefix("sha256:"), name)
                XCTAssertEqual(n.orderIds, [], name)
                XCTAssertNil(n.asking, name)
                let e = n.event()
                XCTAssertNil(e.signedAt, "\(name): an unreadable push states no business time")
                let facts = FactDecoder.facts(of: e)
                XCTAssertEqual(facts.map(\.kind), [.unreadable], name)
                XCTAssertTrue(facts.first?.details["reason"]?.text?.contains(reason) ?? false, name)
            }
        }
        // A re-push with a new CreateTime is the same evidence.
        var retried = deliver
        retried["CreateTime"] = .integer(1_775_999_999)
        XCTAssertEqual(try open(.object(retried)).dedupeKey, try open(.object(deliver)).dedupeKey)
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
                let e = XPayNotification(try r.open(query: q, body: body)).event()
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
        let e = XPayNotification(try r.open(query: q, body: body)).event()
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
        let key = SubscriptionKey(environment: "Production", originalTransactionId: "2000001147426510")
        let e = OrderLink.event(orderId: "93594000000005171", provisionalStream: "wechat:order:93594000000005171",
                                subscription: key, linkedVia: "ORDER-0001", at: 1_776_100_500_000)
        XCTAssertEqual(e.streamId, "2000001147426510")
        XCTAssertEqual(e.source, .ledger)
        XCTAssertEqual(e.type, XPayEventName.orderLinked)
        XCTAssertEqual(e.dedupeKey, "link:wechat:order:93594000000005171")
        let p = try JSONDecoder().decode(JSONValue.self, from: e.payload)
        XCTAssertEqual(p.text("provisional_stream"), "wechat:order:93594000000005171")
        XCTAssertEqual(p.text("order_id"), "93594000000005171")
        XCTAssertEqual(p.text("environment"), "Production")
        XCTAssertEqual(p.text("linked_via"), "ORDER-0001")
        // Its fact ties the stream's order to the order it matched, in the subscription.
        let facts = FactDecoder.facts(of: e)
        XCTAssertEqual(facts.map(\.kind), [.orderAlias])
        XCTAssertEqual(facts.first?.subscription, key)
        XCTAssertEqual(facts.first?.transactionId, "93594000000005171")
        XCTAssertEqual(facts.first?.orderAlias, "ORDER-0001")
        // Linking twice gives the same event (idempotent append).
        XCTAssertEqual(e, OrderLink.event(orderId: "93594000000005171", provisionalStream: "wechat:order:93594000000005171",
                                          subscription: key, linkedVia: "ORDER-0001", at: 1_776_100_500_000))
        // A Sandbox subscription's link names Sandbox.
        let sandbox = OrderLink.event(orderId: "X", provisionalStream: "wechat:order:X",
                                      subscription: SubscriptionKey(environment: "Sandbox", originalTransactionId: "9"))
        XCTAssertEqual(FactDecoder.facts(of: sandbox).first?.subscription?.environment, "Sandbox")
    }

    /// The raw evidence names the keys that opened the push (by fingerprint, never by value).
    func testRawNamesTheKeysThatOpenedItByFingerprint() throws {
        let (q, body) = PushFixture.secure(PushFixture.deliver(), .json)
        let push = try r.open(query: q, body: body)
        let raw = try JSONValue(json: push.raw)
        XCTAssertEqual(raw.int64("v"), 2)
        XCTAssertEqual(raw["opened_with"]?.text("token"), WeChatKeyFingerprint.token(PushFixture.token))
        XCTAssertEqual(raw["opened_with"]?.text("aes_key"), WeChatKeyFingerprint.aesKey(PushFixture.key))
        XCTAssertEqual(push.aesKeyFingerprint?.count, 16)
        XCTAssertFalse(String(decoding: push.raw, as: UTF8.self).contains(PushFixture.keyText))
        XCTAssertFalse(String(decoding: push.raw, as: UTF8.self).contains(PushFixture.token))
        let (pq, pbody) = PushFixture.plaintext(PushFixture.deliver(), .xml)
        let plain = try JSONValue(json: try r.open(query: pq, body: pbody).raw)
        XCTAssertEqual(plain["opened_with"]?.text("token"), WeChatKeyFingerprint.token(PushFixture.token))
        XCTAssertNil(plain["opened_with"]?.text("aes_key"), "plaintext: no key decrypted it")
    }
}
