import Crypto
import Foundation
import LedgerCore
@testable import WeChatPay
import XCTest

/// Builds pushes the way WeChat sends them: the message in JSON or XML, optionally encrypted, with
/// the query signatures computed independently of the code under test's verification path.
struct PushFixture {
    static let appId = "wxba5fad812f8e6fb9"
    static let token = "t0kenForTests"
    static let keyText = "kWxPEV2UEDyxWpmPdKC3F4dgPDmOvfKX1HGnEUDS1aR"
    static let otherKeyText = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG"

    static var key: EncodingAESKey { try! EncodingAESKey(keyText) }
    static var otherKey: EncodingAESKey { try! EncodingAESKey(otherKeyText) }

    static func config(allowPlaintext: Bool = true, key: EncodingAESKey? = PushFixture.key,
                       previous: EncodingAESKey? = nil, maxBodyBytes: Int = 256 * 1024) -> WeChatPushConfig {
        try! WeChatPushConfig(appId: appId, token: token, aesKey: key, previousAESKey: previous,
                              allowPlaintext: allowPlaintext, maxBodyBytes: maxBodyBytes)
    }

    static func receiver(allowPlaintext: Bool = true, key: EncodingAESKey? = PushFixture.key,
                         previous: EncodingAESKey? = nil) -> PushReceiver {
        PushReceiver(config: config(allowPlaintext: allowPlaintext, key: key, previous: previous))
    }

    static func sha1Hex(_ parts: [String]) -> String {
        Hex.encode(Digest.sha1(Array(parts.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }.joined().utf8)))
    }

    static func encode(_ v: JSONValue, _ format: PushFormat) -> [UInt8] {
        switch format {
        case .json: return Array(v.canonicalJSON())
        case .xml: return Array("<xml>\(xmlInner(v))</xml>".utf8)
        }
    }

    static func xmlInner(_ v: JSONValue) -> String {
        guard case .object(let o) = v else { return "" }
        var s = ""
        for (k, child) in o.sorted(by: { $0.key < $1.key }) {
            switch child {
            case .object: s += "<\(k)>\(xmlInner(child))</\(k)>"
            case .string(let t): s += "<\(k)><![CDATA[\(t)]]></\(k)>"
            case .integer(let i): s += "<\(k)>\(i)</\(k)>"
            default: s += "<\(k)></\(k)>"
            }
        }
        return s
    }

    /// Plaintext mode: the message is the body; only `signature` authenticates (the query).
    static func plaintext(_ message: JSONValue, _ format: PushFormat, timestamp: String = "1775226065",
                          nonce: String = "123456789") -> (PushQuery, Data) {
        let query = PushQuery(signature: sha1Hex([token, timestamp, nonce]), timestamp: timestamp, nonce: nonce,
                              openid: "o_official")
        return (query, Data(encode(message, format)))
    }

    /// Secure mode: `{"ToUserName":…,"Encrypt":…}` with msg_signature over the Encrypt value.
    static func secure(_ message: JSONValue, _ format: PushFormat, timestamp: String = "1775226065",
                       nonce: String = "987654321", key: EncodingAESKey = PushFixture.key,
                       appId: String = PushFixture.appId, random: [UInt8]? = nil) -> (PushQuery, Data) {
        let encrypt = try! MessageCipher.encrypt(encode(message, format), appId: appId, key: key,
                                                 random: random ?? SecureRandom.bytes(16))
        return secureEnvelope(encrypt: encrypt, format: format, timestamp: timestamp, nonce: nonce)
    }

    static func secureEnvelope(encrypt: String, format: PushFormat, timestamp: String = "1775226065",
                               nonce: String = "987654321", extra: [String: JSONValue] = [:]) -> (PushQuery, Data) {
        var env: [String: JSONValue] = ["ToUserName": .string("gh_97417a04a28d"), "Encrypt": .string(encrypt)]
        for (k, v) in extra { env[k] = v }
        let query = PushQuery(signature: sha1Hex([token, timestamp, nonce]), timestamp: timestamp, nonce: nonce,
                              encryptType: "aes", msgSignature: sha1Hex([token, timestamp, nonce, encrypt]),
                              openid: "o_official")
        return (query, Data(encode(.object(env), format)))
    }

    // MARK: the five xpay messages, as the seed document describes them

    static func header(_ event: String, createTime: Int64 = 1775226065) -> [String: JSONValue] {
        ["ToUserName": .string("gh_97417a04a28d"), "FromUserName": .string("o_wechat_official"),
         "CreateTime": .integer(createTime), "MsgType": .string("event"), "Event": .string(event)]
    }

    static func signing(createTime: Int64 = 1775226065) -> JSONValue {
        var o = header(XPayEventName.signingResult, createTime: createTime)
        o["OpenId"] = .string("oUser1")
        o["Attach"] = .string("uid=12345")
        o["AppleSubscriptionInfo"] = .object([
            "OriginalTransactionId": .string("2000001147426510"), "ProductId": .string("subscription_vip_monthly"),
            "AutoRenewStatus": .integer(1), "RenewalDate": .integer(1_777_818_065_000), "SignedTime": .integer(1_775_226_065_000),
        ])
        return .object(o)
    }

    static func deliver(order: String = "ORDER-0001", apple: Bool = true, createTime: Int64 = 1775226066) -> JSONValue {
        var o = header(XPayEventName.goodsDeliver, createTime: createTime)
        o["OpenId"] = .string("oUser1")
        o["OutTradeNo"] = .string(order)
        o["Env"] = .integer(0)
        o["GoodsInfo"] = .object(["ProductId": .string("subscription_vip_monthly"), "Quantity": .integer(1),
                                  "OrigPrice": .integer(3000), "ActualPrice": .integer(990), "Attach": .string("uid=12345")])
        if apple {
            o["AppleSubscriptionInfo"] = .object(["OriginalTransactionId": .string("2000001147426510"),
                                                  "AutoRenewStatus": .integer(1), "RenewalDate": .integer(1_777_818_065_000)])
        }
        return .object(o)
    }

    static func unsigning(createTime: Int64 = 1776000000) -> JSONValue {
        var o = header(XPayEventName.unsigning, createTime: createTime)
        o["OpenId"] = .string("oUser1")
        o["Attach"] = .string("uid=12345")
        o["Action"] = .string("unsubscribe")
        o["AppleSubscriptionInfo"] = .object([
            "OriginalTransactionId": .string("2000001147426510"), "ProductId": .string("subscription_vip_monthly"),
            "AutoRenewStatus": .integer(0), "RenewalDate": .integer(1_777_818_065_000), "UnsignedTime": .integer(1_776_000_000_000),
        ])
        return .object(o)
    }

    /// All strings, flat, as WeChat sends the iOS refund inquiry.
    static func refundInquiry(order: String = "93594000000005171", refundTime: String = "1776100000",
                              provideStatus: String = "1", createTime: Int64 = 1776100000) -> JSONValue {
        var o = header(XPayEventName.refundInquiry, createTime: createTime)
        for (k, v) in [("refund_time", refundTime), ("order_time", "1775226066"), ("channel_bill", "510001234567890"),
                       ("bundleid", "com.tencent.xin"), ("product_id", "subscription_vip_monthly"), ("p_count", "1"),
                       ("refund_request_reason", "UNINTENDED_PURCHASE"), ("provide_status", provideStatus),
                       ("pay_order_id", order), ("service_type", "unipdt"), ("consumption_status", "0")] {
            o[k] = .string(v)
        }
        return .object(o)
    }

    static func refundNotify(retCode: Int64 = 0, retryTimes: Int64 = 0, createTime: Int64 = 1776200000) -> JSONValue {
        var o = header(XPayEventName.refundNotify, createTime: createTime)
        o["OpenId"] = .string("oUser1")
        o["WxRefundId"] = .string("wxrefund-1")
        o["MchRefundId"] = .string("")
        o["WxOrderId"] = .string("93594000000005171")
        o["MchOrderId"] = .string("ORDER-0001")
        o["RefundFee"] = .integer(990)
        o["RetCode"] = .integer(retCode)
        o["RetMsg"] = .string(retCode == 0 ? "" : "failed")
        o["RefundStartTimestamp"] = .integer(1_776_150_000)
        o["RefundSuccTimestamp"] = .integer(1_776_199_000)
        o["RetryTimes"] = .integer(retryTimes)
        return .object(o)
    }
}

/// Runs `body` and returns the WeChatPushError it throws (fails the test if it does not).
func pushError<T>(_ body: () throws -> T, file: StaticString = #filePath, line: UInt = #line) -> WeChatPushError? {
    do {
        _ = try body()
        XCTFail("expected a WeChatPushError", file: file, line: line)
        return nil
    } catch let error as WeChatPushError {
        return error
    } catch {
        XCTFail("expected a WeChatPushError, got \(error)", file: file, line: line)
        return nil
    }
}
