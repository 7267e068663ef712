import Foundation
import XCTest
@testable import LedgerCore

/// Stored WeChat events as `XPayNotification.event()` writes them: `payload` is the decrypted push
/// as a JSON object — with JSON numbers for a JSON push, or every value a string for an XML push
/// (`xmlStyle`). Times: day numbers from `WX.base`.
enum WX {
    static let base: EpochMillis = 1_775_000_000_000  // 2026-03-31T23:33:20Z
    static let dayMs: EpochMillis = 86_400_000
    static let otid = "2000001147426510"
    static let openId = "oUser1"
    static let product = "subscription_vip_monthly"
    static let catalog = ProductCatalog(entitlementsByProduct: [product: ["vip"]])

    static func d(_ days: Double) -> EpochMillis { base + EpochMillis(days * Double(dayMs)) }
    static func sec(_ days: Double) -> Int64 { d(days) / 1000 }

    static func header(_ event: String, create: Double) -> [String: JSONValue] {
        ["ToUserName": .string("gh_97417a04a28d"), "FromUserName": .string("o_wechat_official"),
         "CreateTime": .integer(sec(create)), "MsgType": .string("event"), "Event": .string(event)]
    }

    static func signing(signed: Double, renewal: Double, otid: String = otid, openId: String = openId,
                        product: String = product, autoRenew: Int64 = 1) -> JSONValue {
        var o = header(XPayEventName.signingResult, create: signed + 0.001)
        o["OpenId"] = .string(openId)
        o["Attach"] = .string("uid=12345")
        o["AppleSubscriptionInfo"] = .object([
            "OriginalTransactionId": .string(otid), "ProductId": .string(product),
            "AutoRenewStatus": .integer(autoRenew), "RenewalDate": .integer(d(renewal)), "SignedTime": .integer(d(signed)),
        ])
        return .object(o)
    }

    static func deliver(order: String, paid: Double, renewal: Double, otid: String = otid, openId: String = openId,
                        product: String = product, price: Int64 = 3000, autoRenew: Int64 = 1,
                        payInfo: Bool = true) -> JSONValue {
        var o = header(XPayEventName.goodsDeliver, create: paid + 0.002)
        o["OpenId"] = .string(openId)
        o["OutTradeNo"] = .string(order)
        o["Env"] = .integer(0)
        o["GoodsInfo"] = .object(["ProductId": .string(product), "Quantity": .integer(1),
                                  "OrigPrice": .integer(3000), "ActualPrice": .integer(price), "Attach": .string("uid=12345")])
        if payInfo {
            o["WeChatPayInfo"] = .object(["MchOrderNo": .string("mch-" + order), "TransactionId": .string("tx-" + order),
                                          "PaidTime": .integer(sec(paid))])
        }
        o["AppleSubscriptionInfo"] = .object(["OriginalTransactionId": .string(otid),
                                              "AutoRenewStatus": .integer(autoRenew), "RenewalDate": .integer(d(renewal))])
        return .object(o)
    }

    static func unsigning(unsigned: Double, renewal: Double, otid: String = otid, openId: String = openId,
                          product: String = product) -> JSONValue {
        var o = header(XPayEventName.unsigning, create: unsigned + 0.001)
        o["OpenId"] = .string(openId)
        o["Attach"] = .string("uid=12345")
        o["Action"] = .string("unsubscribe")
        o["AppleSubscriptionInfo"] = .object([
            "OriginalTransactionId": .string(otid), "ProductId": .string(product),
            "AutoRenewStatus": .integer(0), "RenewalDate": .integer(d(renewal)), "UnsignedTime": .integer(d(unsigned)),
        ])
        return .object(o)
    }

    static func refundNotify(order: String, wxOrder: String? = nil, at: Double, ok: Bool = true, fee: Int64 = 3000,
                             refundId: String? = nil, openId: String = openId) -> JSONValue {
        var o = header(XPayEventName.refundNotify, create: at + 0.01)
        o["OpenId"] = .string(openId)
        o["WxRefundId"] = .string(refundId ?? "wxrefund-\(order)-\(ok ? 0 : 1)")
        o["MchRefundId"] = .string("")
        o["WxOrderId"] = .string(wxOrder ?? "wx-" + order)
        o["MchOrderId"] = .string(order)
        o["RefundFee"] = .integer(fee)
        o["RetCode"] = .integer(ok ? 0 : 268_490_001)
        o["RetMsg"] = .string(ok ? "" : "refund failed")
        o["RefundStartTimestamp"] = .integer(sec(at - 0.5))
        o["RefundSuccTimestamp"] = .integer(ok ? sec(at) : 0)
        o["RetryTimes"] = .integer(0)
        return .object(o)
    }

    /// Flat, every value a string, as WeChat sends the iOS refund inquiry.
    static func inquiry(order: String, asked: Double, orderTime: Double = 0, provide: String = "1",
                        reason: String = "UNINTENDED_PURCHASE") -> JSONValue {
        var o = header(XPayEventName.refundInquiry, create: asked)
        for (k, v) in [("refund_time", String(sec(asked))), ("order_time", String(sec(orderTime))),
                       ("channel_bill", "510001234567890"), ("bundleid", "com.tencent.xin"),
                       ("product_id", product), ("p_count", "1"), ("refund_request_reason", reason),
                       ("provide_status", provide), ("pay_order_id", order), ("service_type", "unipdt"),
                       ("consumption_status", "0")] {
            o[k] = .string(v)
        }
        return .object(o)
    }

    /// The ledger's answer event payload, as `RefundInquiryAnswer.event` writes it.
    static func answer(order: String, allow: Bool, rule: String = "short_use", evidence: String = #"{"rule":"short_use"}"#) -> JSONValue {
        .object([
            "pay_order_id": .string(order), "result_code": .integer(allow ? 0 : 1),
            "result_info": .string(allow ? "entitlement used 5 minutes" : "entitlement used 5000 minutes"),
            "evidence": .string(evidence), "rule": .string(rule), "decision": .string(allow ? "allow" : "refuse"),
            "product_id": .string(product),
        ])
    }

    static func link(order: String, to subscription: String = otid) -> JSONValue {
        .object(["order_id": .string(order), "provisional_stream": .string(StreamId.wechatOrder(order).text),
                 "subscription_stream": .string(subscription)])
    }

    /// Every scalar as text, as an XML push arrives (objects stay objects).
    static func xmlStyle(_ v: JSONValue) -> JSONValue {
        switch v {
        case .object(let o): return .object(o.mapValues(xmlStyle))
        case .integer(let i): return .string(String(i))
        default: return v
        }
    }

    static func event(_ payload: JSONValue, position: Int64, stream: String = otid, recorded: Double? = nil,
                      source: EventSource = .wechat, type: String? = nil, signedAt: EpochMillis? = nil) -> RecordedEvent {
        let data = payload.canonicalJSON()
        let t = type ?? payload.text("Event") ?? "unknown"
        return RecordedEvent(
            position: position,
            recordedAt: recorded.map(d) ?? (WeChatTime.seconds(payload.int64("CreateTime")) ?? base),
            event: NewEvent(streamId: stream, dedupeKey: "\(t):\(position)", source: source, type: t,
                            environment: "Production", signedAt: signedAt, payload: data, raw: data))
    }

    static func ledger(_ payload: JSONValue, type: String, position: Int64, stream: String = otid, recorded: Double) -> RecordedEvent {
        event(payload, position: position, stream: stream, recorded: recorded, source: .ledger, type: type)
    }

    static let key = SubscriptionKey(environment: "Production", originalTransactionId: otid)

    /// The facts of stored events, through the one decoder; an unreadable event fails the test.
    static func facts(_ events: [RecordedEvent], file: StaticString = #filePath, line: UInt = #line) -> [Fact] {
        events.flatMap { e in
            let facts = FactDecoder.facts(of: e)
            for f in facts where f.kind == .unreadable {
                XCTFail("event \(e.position) did not decode: \(f.detail ?? "")", file: file, line: line)
            }
            return facts
        }
    }

    static func state(_ facts: [Fact], at day: Double, otid: String = otid) -> SubscriptionState? {
        SubscriptionProjection(facts: facts).view(at: d(day))
            .subscription(SubscriptionKey(environment: "Production", originalTransactionId: otid))
    }
}
