import Crypto
import Foundation
import HTTPServer
import LedgerCore
@testable import LedgerService
import LedgerTesting
import WeChatPay
import XCTest

/// WeChat's side of the tests: builds xpay pushes (JSON secure, XML secure, XML plaintext signed
/// now), posts them, reads the replies. Messages are `JSONValue` objects; the XML form writes every
/// value as text (numbers bare, strings in CDATA), as WeChat does.
struct WeChatSide {
    enum Mode: String, CaseIterable, Sendable {
        case jsonSecure = "json-secure"
        case xmlSecure = "xml-secure"
        case xmlPlain = "xml-plaintext"
    }

    static let environment = WeChatWebhookTests.environment
    let sender = PushReceiver(config: try! WeChatPushConfig(
        appId: WeChatWebhookTests.appId, token: WeChatWebhookTests.token, aesKey: try! EncodingAESKey(WeChatWebhookTests.keyText)))

    static func nowSeconds() -> Int64 { Int64(Date().timeIntervalSince1970) }

    static func xml(_ v: JSONValue, name: String? = nil) -> String {
        switch v {
        case .object(let o):
            let inner = o.keys.sorted().map { xml(o[$0]!, name: $0) }.joined()
            return name.map { "<\($0)>\(inner)</\($0)>" } ?? "<xml>\(inner)</xml>"
        case .integer(let i): return "<\(name!)>\(i)</\(name!)>"
        case .string(let s): return "<\(name!)><![CDATA[\(s)]]></\(name!)>"
        default: return "<\(name!)></\(name!)>"
        }
    }

    /// (path with query, body) as WeChat would send `message` in `mode`. Plaintext pushes are
    /// signed at `timestamp` (default now: the ledger refuses stale plaintext query strings).
    func request(_ message: JSONValue, _ mode: Mode, nonce: String = UUID().uuidString, timestamp: Int64? = nil) throws -> (String, Data) {
        let ts = String(timestamp ?? Self.nowSeconds())
        let signature = PushSignature.compute([WeChatWebhookTests.token, ts, nonce])
        switch mode {
        case .xmlPlain:
            let q = "signature=\(signature)&timestamp=\(ts)&nonce=\(nonce)"
            return ("/v1/wechat/notifications?" + q.addingPercentEncoding(withAllowedCharacters: .urlQueryAllowed)!, Data(Self.xml(message).utf8))
        case .jsonSecure, .xmlSecure:
            let inner = mode == .jsonSecure ? Array(message.canonicalJSON()) : Array(Self.xml(message).utf8)
            let sealed = try sender.encryptReply(inner, format: .json, timestamp: Int64(ts)!, nonce: nonce)
            let encrypt = (try JSONSerialization.jsonObject(with: sealed) as! [String: Any])["Encrypt"] as! String
            let msgSignature = PushSignature.compute([WeChatWebhookTests.token, ts, nonce, encrypt])
            let q = "signature=\(signature)&timestamp=\(ts)&nonce=\(nonce)&encrypt_type=aes&msg_signature=\(msgSignature)"
            let body = mode == .jsonSecure
                ? JSONValue.object(["ToUserName": "gh_97417a04a28d", "Encrypt": .string(encrypt)]).canonicalJSON()
                : Data("<xml><ToUserName><![CDATA[gh_97417a04a28d]]></ToUserName><Encrypt><![CDATA[\(encrypt)]]></Encrypt></xml>".utf8)
            return ("/v1/wechat/notifications?" + q.addingPercentEncoding(withAllowedCharacters: .urlQueryAllowed)!, body)
        }
    }

    /// The reply's members (decrypted in secure mode; XML members as text).
    func reply(_ answer: ServiceHarness.Answer, _ mode: Mode) throws -> [String: String] {
        let format: PushFormat = mode == .jsonSecure ? .json : .xml
        let plain = mode == .xmlPlain ? Array(answer.body) : try sender.openReply(answer.body, format: format)
        if format == .json {
            let o = try JSONSerialization.jsonObject(with: Data(plain)) as? [String: Any] ?? [:]
            return o.mapValues { "\($0)" }
        }
        let text = String(decoding: plain, as: UTF8.self)
        var out: [String: String] = [:]
        let pattern = try NSRegularExpression(pattern: #"<([A-Za-z_]+)>(?:<!\[CDATA\[(.*?)\]\]>|([^<]*))</\1>"#, options: [.dotMatchesLineSeparators])
        for m in pattern.matches(in: text, range: NSRange(text.startIndex..., in: text)) {
            let name = String(text[Range(m.range(at: 1), in: text)!])
            let value = Range(m.range(at: 2), in: text).map { String(text[$0]) } ?? Range(m.range(at: 3), in: text).map { String(text[$0]) } ?? ""
            out[name] = value
        }
        return out
    }

    /// Posts and returns the answer (any status).
    func post(_ h: ServiceHarness, _ message: JSONValue, _ mode: Mode, nonce: String = UUID().uuidString,
              timestamp: Int64? = nil) async throws -> ServiceHarness.Answer {
        let (path, body) = try request(message, mode, nonce: nonce, timestamp: timestamp)
        return try await h.post(path, body)
    }

    /// Posts, expects 200, returns the reply's members.
    @discardableResult
    func push(_ h: ServiceHarness, _ message: JSONValue, _ mode: Mode = .jsonSecure,
              file: StaticString = #filePath, line: UInt = #line) async throws -> [String: String] {
        let a = try await post(h, message, mode)
        XCTAssertEqual(a.status, 200, a.text, file: file, line: line)
        return a.status == 200 ? try reply(a, mode) : [:]
    }

    // MARK: messages (times in ms; WeChat's push times are seconds, AppleSubscriptionInfo's ms)

    static func header(_ event: String, create: EpochMillis) -> [String: JSONValue] {
        ["ToUserName": "gh_97417a04a28d", "FromUserName": "o_wechat_official", "CreateTime": .integer(create / 1000),
         "MsgType": "event", "Event": .string(event)]
    }

    static func signing(otid: String, openId: String, product: String, signed: EpochMillis, renewal: EpochMillis) -> JSONValue {
        .object(header(XPayEventName.signingResult, create: signed + 1000).merging([
            "OpenId": .string(openId), "Attach": "uid=1",
            "AppleSubscriptionInfo": .object(["OriginalTransactionId": .string(otid), "ProductId": .string(product),
                                              "AutoRenewStatus": 1, "RenewalDate": .integer(renewal), "SignedTime": .integer(signed)]),
        ]) { $1 })
    }

    /// `paid` nil: no WeChatPayInfo (Apple payments), sent at `create`.
    static func deliver(otid: String?, openId: String, product: String, order: String, paid: EpochMillis?, create: EpochMillis,
                        renewal: EpochMillis, price: Int64 = 3000, env: Int64 = 0, mchOrderNo: String? = nil,
                        transactionId: String? = nil) -> JSONValue {
        var o = header(XPayEventName.goodsDeliver, create: create).merging([
            "OpenId": .string(openId), "OutTradeNo": .string(order), "Env": .integer(env),
            "GoodsInfo": .object(["ProductId": .string(product), "Quantity": 1, "OrigPrice": 3000, "ActualPrice": .integer(price), "Attach": "uid=1"]),
        ]) { $1 }
        if paid != nil || mchOrderNo != nil || transactionId != nil {
            var pay: [String: JSONValue] = ["MchOrderNo": .string(mchOrderNo ?? "mch-" + order), "TransactionId": .string(transactionId ?? "4200-" + order)]
            if let paid { pay["PaidTime"] = .integer(paid / 1000) }
            o["WeChatPayInfo"] = .object(pay)
        }
        if let otid {
            o["AppleSubscriptionInfo"] = .object(["OriginalTransactionId": .string(otid), "AutoRenewStatus": 1, "RenewalDate": .integer(renewal)])
        }
        return .object(o)
    }

    static func unsigning(otid: String, openId: String, product: String, unsigned: EpochMillis, renewal: EpochMillis) -> JSONValue {
        .object(header(XPayEventName.unsigning, create: unsigned + 1000).merging([
            "OpenId": .string(openId), "Attach": "uid=1", "Action": "unsubscribe",
            "AppleSubscriptionInfo": .object(["OriginalTransactionId": .string(otid), "ProductId": .string(product),
                                              "AutoRenewStatus": 0, "RenewalDate": .integer(renewal), "UnsignedTime": .integer(unsigned)]),
        ]) { $1 })
    }

    static func inquiry(order: String, asked: EpochMillis, orderTime: EpochMillis, product: String, provide: String = "1") -> JSONValue {
        var o = header(XPayEventName.refundInquiry, create: asked)
        for (k, v) in [("refund_time", String(asked / 1000)), ("order_time", String(orderTime / 1000)), ("channel_bill", "5100" + order),
                       ("bundleid", "com.tencent.xin"), ("product_id", product), ("p_count", "1"),
                       ("refund_request_reason", "UNINTENDED_PURCHASE"), ("provide_status", provide), ("pay_order_id", order),
                       ("service_type", "unipdt"), ("consumption_status", "0")] { o[k] = .string(v) }
        return .object(o)
    }

    /// `mchOrderId` "" and `wxOrderId` set: a refund naming only WeChat's order id.
    static func refund(openId: String, mchOrderId: String, wxOrderId: String, at: EpochMillis, refundId: String,
                       ok: Bool = true, fee: Int64 = 3000) -> JSONValue {
        .object(header(XPayEventName.refundNotify, create: at + 1000).merging([
            "OpenId": .string(openId), "WxRefundId": .string(refundId), "MchRefundId": "", "WxOrderId": .string(wxOrderId),
            "MchOrderId": .string(mchOrderId), "RefundFee": .integer(fee), "RetCode": .integer(ok ? 0 : 268_490_001),
            "RetMsg": .string(ok ? "" : "refund failed"), "RefundStartTimestamp": .integer(at / 1000 - 60),
            "RefundSuccTimestamp": .integer(ok ? at / 1000 : 0), "RetryTimes": 0,
        ]) { $1 })
    }
}

extension ServiceHarness {
    /// A subscription state (`?at=` ms, or live) as JSON; nil for 404.
    func state(_ otid: String, at: EpochMillis? = nil, environment: String? = nil) async throws -> [String: Any]? {
        var q: [String] = []
        if let at { q.append("at=\(at)") }
        if let environment { q.append("environment=\(environment)") }
        let a = try await request("GET", "/v1/subscriptions/\(otid)" + (q.isEmpty ? "" : "?" + q.joined(separator: "&")), token: "app-token-for-tests-0123456789abcdef")
        if a.status == 404 { return nil }
        XCTAssertEqual(a.status, 200, a.text)
        return a.json
    }

    /// Entitlement names of a customer (`?at=` ms, or live).
    func entitlements(_ customer: String, at: EpochMillis? = nil, environment: String? = nil) async throws -> [String] {
        var q: [String] = []
        if let at { q.append("at=\(at)") }
        if let environment { q.append("environment=\(environment)") }
        let a = try await request("GET", "/v1/customers/\(customer)/entitlements" + (q.isEmpty ? "" : "?" + q.joined(separator: "&")), token: "app-token-for-tests-0123456789abcdef")
        XCTAssertEqual(a.status, 200, a.text)
        return (a.json["entitlements"] as? [[String: Any]] ?? []).compactMap { $0["entitlement"] as? String }
    }

    /// Rebuilds every projection through the admin route.
    func rebuild(file: StaticString = #filePath, line: UInt = #line) async throws {
        let a = try await request("POST", "/v1/admin/rebuild", body: Data("{}".utf8), token: "admin-token-for-tests-0123456789abcdef")
        XCTAssertEqual(a.status, 200, a.text, file: file, line: line)
    }

    /// Link events tying `orderStream` to a subscription.
    func links(of orderStream: String) throws -> Int {
        try admin.query("SELECT count(*) AS n FROM events WHERE dedupe_key = $1", [.text(DedupeKey.orderLink(StreamId(orderStream)))],
                        name: "links").first!.decode(Int.self, "n")
    }

    func metricsText() async throws -> String {
        try await request("GET", "/metrics", token: "admin-token-for-tests-0123456789abcdef").text
    }
}

/// The value of a Prometheus line (first match of `name` with exactly `labels`), or nil.
func metricValue(_ text: String, _ name: String, _ labels: String = "") -> Double? {
    let prefix = labels.isEmpty ? name + " " : name + "{" + labels + "} "
    for line in text.split(separator: "\n") where line.hasPrefix(prefix) {
        return Double(line.dropFirst(prefix.count).trimmingCharacters(in: .whitespaces))
    }
    return nil
}
