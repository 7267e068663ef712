import Crypto
import Foundation
import LedgerCore
@testable import LedgerService
import LedgerTesting
import WeChatPay
import XCTest

/// WeChat pushes through the real service: secure-mode JSON and plaintext XML, the refund inquiry
/// answered from ledger facts and recorded with its evidence, re-pushes stored once, and the
/// contract and refund-case views.
final class WeChatWebhookTests: XCTestCase {
    static let appId = "wxba5fad812f8e6fb9"
    static let token = "t0kenForTests"
    static let keyText = "kWxPEV2UEDyxWpmPdKC3F4dgPDmOvfKX1HGnEUDS1aR"
    static let environment = [
        "LEDGER_WECHAT_APPID": appId, "LEDGER_WECHAT_TOKEN": token, "LEDGER_WECHAT_AES_KEY": keyText,
        "LEDGER_WECHAT_ALLOW_PLAINTEXT": "true", "LEDGER_WECHAT_OFFER_ID": "1450000000", "LEDGER_WECHAT_APP_KEY": "app-key-secret",
    ]
    let otid = "2000001147426510"

    // The client side of WeChat, built on the module's public encryption (the decrypting side is
    // what the service runs, so a mismatch fails these tests).
    let sender = PushReceiver(config: try! WeChatPushConfig(appId: appId, token: token, aesKey: try! EncodingAESKey(keyText)))

    func sha1(_ parts: [String]) -> String {
        Hex.encode(Digest.sha1(Array(parts.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }.joined().utf8)))
    }

    func json(_ o: [String: Any]) -> Data { try! JSONSerialization.data(withJSONObject: o, options: [.sortedKeys]) }

    /// A secure-mode JSON push: (path with query, body).
    func secure(_ message: [String: Any], nonce: String = UUID().uuidString) throws -> (String, Data) {
        let ts = "1775226065"
        let sealed = try sender.encryptReply(Array(json(message)), format: .json, timestamp: 1775226065, nonce: nonce)
        let encrypt = (try JSONSerialization.jsonObject(with: sealed) as! [String: Any])["Encrypt"] as! String
        let q = "signature=\(sha1([Self.token, ts, nonce]))&timestamp=\(ts)&nonce=\(nonce)&encrypt_type=aes&msg_signature=\(sha1([Self.token, ts, nonce, encrypt]))"
        let escaped = q.addingPercentEncoding(withAllowedCharacters: .urlQueryAllowed)!
        return ("/v1/wechat/notifications?" + escaped, json(["ToUserName": "gh_97417a04a28d", "Encrypt": encrypt]))
    }

    func plainXML(_ inner: String, nonce: String = "123") -> (String, Data) {
        let ts = "1775226065"
        return ("/v1/wechat/notifications?signature=\(sha1([Self.token, ts, nonce]))&timestamp=\(ts)&nonce=\(nonce)",
                Data("<xml>\(inner)</xml>".utf8))
    }

    func header(_ event: String, _ createTime: Int = 1775226065) -> [String: Any] {
        ["ToUserName": "gh_97417a04a28d", "FromUserName": "o_wechat_official", "CreateTime": createTime, "MsgType": "event", "Event": event]
    }

    func signing() -> [String: Any] {
        header(XPayEventName.signingResult).merging(["OpenId": "oUser1", "Attach": "uid=1", "AppleSubscriptionInfo": [
            "OriginalTransactionId": otid, "ProductId": "vip_monthly", "AutoRenewStatus": 1,
            "RenewalDate": 1_777_818_065_000, "SignedTime": 1_775_226_065_000]]) { $1 }
    }

    func deliver(order: String = "ORDER-0001") -> [String: Any] {
        header(XPayEventName.goodsDeliver, 1775226066).merging(["OpenId": "oUser1", "OutTradeNo": order, "Env": 0,
            "GoodsInfo": ["ProductId": "vip_monthly", "Quantity": 1, "OrigPrice": 3000, "ActualPrice": 990, "Attach": "uid=1"],
            "AppleSubscriptionInfo": ["OriginalTransactionId": otid, "AutoRenewStatus": 1, "RenewalDate": 1_777_818_065_000]]) { $1 }
    }

    func unsigning() -> [String: Any] {
        header(XPayEventName.unsigning, 1776000000).merging(["OpenId": "oUser1", "Attach": "uid=1", "Action": "unsubscribe",
            "AppleSubscriptionInfo": ["OriginalTransactionId": otid, "ProductId": "vip_monthly", "AutoRenewStatus": 0,
                                      "RenewalDate": 1_777_818_065_000, "UnsignedTime": 1_776_000_000_000]]) { $1 }
    }

    func inquiry(order: String = "ORDER-0001", refundTime: String = "1775300000") -> [String: Any] {
        var o = header(XPayEventName.refundInquiry, 1775300000)
        for (k, v) in [("refund_time", refundTime), ("order_time", "1775226066"), ("channel_bill", "510001234567890"),
                       ("bundleid", "com.tencent.xin"), ("product_id", "vip_monthly"), ("p_count", "1"),
                       ("refund_request_reason", "UNINTENDED_PURCHASE"), ("provide_status", "1"),
                       ("pay_order_id", order), ("service_type", "unipdt"), ("consumption_status", "0")] { o[k] = v }
        return o
    }

    func decryptedReply(_ answer: ServiceHarness.Answer) throws -> [String: Any] {
        let plain = try sender.openReply(answer.body, format: .json)
        return try JSONSerialization.jsonObject(with: Data(plain)) as! [String: Any]
    }

    func testURLCheckEchoesAndRefusesBadSignatures() async throws {
        try await withService(environment: Self.environment) { h in
            let good = try await h.request("GET", "/v1/wechat/notifications?signature=\(sha1([Self.token, "1714036504", "1514711492"]))&timestamp=1714036504&nonce=1514711492&echostr=4375120948345356249")
            XCTAssertEqual(good.status, 200)
            XCTAssertEqual(good.text, "4375120948345356249")
            let bad = try await h.request("GET", "/v1/wechat/notifications?signature=0000&timestamp=1714036504&nonce=1514711492&echostr=1")
            XCTAssertEqual(bad.status, 401, bad.text)
        }
    }

    func testSecureLifecycleOutOfOrderStoresOnceAndProjects() async throws {
        try await withService(environment: Self.environment) { h in
            // Unsign, deliver, sign: the reverse of their business order.
            for message in [unsigning(), deliver(), signing()] {
                let (path, body) = try secure(message)
                let a = try await h.post(path, body)
                XCTAssertEqual(a.status, 200, a.text)
                XCTAssertEqual(try decryptedReply(a)["ErrCode"] as? Int, 0)
            }
            // WeChat re-pushes (new nonce, new ciphertext): stored once.
            for _ in 0..<3 {
                let (path, body) = try secure(deliver())
                let answer = try await h.post(path, body)
                XCTAssertEqual(answer.status, 200)
            }
            XCTAssertEqual(try h.events(stream: otid).count, 3)
            let contract = try await h.request("GET", "/v1/wechat/contracts?openid=oUser1&product_id=vip_monthly", token: "app-token")
            XCTAssertEqual(contract.status, 200, contract.text)
            XCTAssertEqual(contract.json["authorization_state"] as? String, "TERMINATED")
            let info = contract.json["apple_subscription_info"] as? [String: Any]
            XCTAssertEqual(info?["original_transaction_id"] as? String, otid)
            XCTAssertEqual(info?["renewal_date"] as? Int64, 1_777_818_065_000)
            let unknown = try await h.request("GET", "/v1/wechat/contracts?openid=nobody&product_id=vip_monthly", token: "app-token")
            XCTAssertEqual(unknown.json["authorization_state"] as? String, "UNBINDUSER")
            let state = try await h.request("GET", "/v1/subscriptions/\(otid)?at=1776500000000", token: "app-token")
            XCTAssertEqual(state.status, 200, state.text)
            XCTAssertEqual(state.json["productId"] as? String, "vip_monthly")
            XCTAssertEqual(state.json["expiresDate"] as? Int64, 1_777_818_065_000)
            XCTAssertEqual(state.json["status"] as? String, "active")
            XCTAssertEqual(state.json["autoRenewStatus"] as? Int, 0)
        }
    }

    func testRefundInquiryIsAnsweredWithEvidenceOnceForThreeAskings() async throws {
        try await withService(environment: Self.environment) { h in
            for message in [signing(), deliver()] {
                let (path, body) = try secure(message)
                let posted1 = try await h.post(path, body)
                XCTAssertEqual(posted1.status, 200)
            }
            var answers: [[String: Any]] = []
            for asking in ["1775300000", "1775300060", "1775300120"] {
                let (path, body) = try secure(inquiry(refundTime: asking))
                let a = try await h.post(path, body)
                XCTAssertEqual(a.status, 200, a.text)
                answers.append(try decryptedReply(a))
            }
            XCTAssertNotNil(answers[0]["result_code"] as? Int)
            XCTAssertFalse((answers[0]["evidence"] as? String ?? "").isEmpty, "the answer carries evidence")
            for a in answers.dropFirst() {
                XCTAssertEqual(a["result_code"] as? Int, answers[0]["result_code"] as? Int)
                XCTAssertEqual(a["evidence"] as? String, answers[0]["evidence"] as? String)
            }
            // Three inquiries and one ledger answer are stored in the subscription's stream.
            let types = try h.events(stream: otid).map(\.type)
            XCTAssertEqual(types.filter { $0 == XPayEventName.refundInquiry }.count, 3)
            XCTAssertEqual(types.filter { $0 == XPayEventName.refundInquiryAnswer }.count, 1)
            // The auditor sees one case with three askings.
            let cases = try await h.request("GET", "/v1/refunds?source=wechat", token: "auditor-token")
            XCTAssertEqual(cases.status, 200, cases.text)
            let list = cases.json["cases"] as? [[String: Any]] ?? []
            XCTAssertEqual(list.count, 1, cases.text)
            XCTAssertEqual((list.first?["inquiries"] as? [Any])?.count, 3)
            let caseId = list.first?["caseId"] as? String ?? ""
            let one = try await h.request("GET", "/v1/refunds/\(caseId.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed)!)", token: "auditor-token")
            XCTAssertEqual(one.status, 200, one.text)
            XCTAssertGreaterThanOrEqual((one.json["events"] as? [Any])?.count ?? 0, 4)
            let csv = try await h.request("GET", "/v1/refunds?format=csv", token: "auditor-token")
            XCTAssertEqual(csv.status, 200)
            XCTAssertTrue(csv.headers["content-type"]?.hasPrefix("text/csv") ?? false)
            // RFC 4180 lines end in CRLF (one grapheme in Swift, so count bytes): a header and one case.
            XCTAssertEqual(csv.body.split(separator: 0x0A).count, 2, csv.text)
            let denied = try await h.request("GET", "/v1/refunds", token: "app-token")
            XCTAssertEqual(denied.status, 403)
        }
    }

    func testInquiryBeforeItsDeliveryWaitsAndIsLinked() async throws {
        try await withService(environment: Self.environment) { h in
            let (path, body) = try secure(inquiry(order: "ORDER-LATE"))
            let posted2 = try await h.post(path, body)
            XCTAssertEqual(posted2.status, 200)
            XCTAssertEqual(try h.events(stream: StreamNames.wechatProvisional(orderId: "ORDER-LATE")).count, 2,
                           "the inquiry and its answer wait in the provisional stream")
            let (p2, b2) = try secure(deliver(order: "ORDER-LATE"))
            let posted3 = try await h.post(p2, b2)
            XCTAssertEqual(posted3.status, 200)
            let linked = try h.events(stream: otid).map(\.type)
            XCTAssertTrue(linked.contains(XPayEventName.orderLinked), "\(linked)")
            XCTAssertEqual(try h.events(stream: StreamNames.wechatProvisional(orderId: "ORDER-LATE")).count, 2, "never rewritten")
        }
    }

    func testPlaintextXMLAndHostilePushes() async throws {
        try await withService(environment: Self.environment) { h in
            let inner = "<ToUserName><![CDATA[gh_x]]></ToUserName><FromUserName><![CDATA[o_official]]></FromUserName><CreateTime>1775226066</CreateTime><MsgType><![CDATA[event]]></MsgType><Event><![CDATA[xpay_goods_deliver_notify]]></Event><OpenId><![CDATA[oUser2]]></OpenId><OutTradeNo><![CDATA[ORDER-XML]]></OutTradeNo><Env>0</Env><GoodsInfo><ProductId><![CDATA[vip_monthly]]></ProductId><Quantity>1</Quantity><OrigPrice>3000</OrigPrice><ActualPrice>990</ActualPrice></GoodsInfo><AppleSubscriptionInfo><OriginalTransactionId><![CDATA[2000009999]]></OriginalTransactionId><AutoRenewStatus>1</AutoRenewStatus><RenewalDate>1777818065000</RenewalDate></AppleSubscriptionInfo>"
            let (path, body) = plainXML(inner)
            let ok = try await h.post(path, body)
            XCTAssertEqual(ok.status, 200, ok.text)
            XCTAssertTrue(ok.text.contains("<ErrCode>0</ErrCode>"), ok.text)
            XCTAssertEqual(try h.events(stream: "2000009999").count, 1)
            let before = try h.eventCount()

            let (securePath, secureBody) = try secure(deliver(order: "ORDER-H"))
            let tampered = Data(String(decoding: secureBody, as: UTF8.self).replacingOccurrences(of: "\"Encrypt\":\"", with: "\"Encrypt\":\"A").utf8)
            let xxe = plainXML("").0
            let hostile: [(String, String, Data, Int)] = [
                ("bad msg_signature", securePath, tampered, 401),
                ("bad plaintext signature", "/v1/wechat/notifications?signature=00&timestamp=1&nonce=1", body, 401),
                ("DOCTYPE / external entity", xxe, Data("<!DOCTYPE xml [<!ENTITY x SYSTEM \"file:///etc/passwd\">]><xml><Event>&x;</Event></xml>".utf8), 400),
                ("missing query", "/v1/wechat/notifications", secureBody, 400),
                ("not XML nor JSON", xxe, Data("hello".utf8), 400),
                ("10 MB body", xxe, Data(repeating: 0x41, count: 10 << 20), 413),
            ]
            for (name, p, b, status) in hostile {
                let a = try await h.post(p, b)
                XCTAssertEqual(a.status, status, "\(name): \(a.text)")
                XCTAssertNotNil(a.errorCode, "\(name): JSON error body expected")
                XCTAssertEqual(try h.eventCount(), before, "\(name): nothing stored")
            }
        }
    }

    func testSignParams() async throws {
        try await withService(environment: Self.environment) { h in
            let body = json(["openid": "oUser1", "productId": "vip_monthly", "goodsPrice": 990, "activitySellingPrice": 0,
                             "attach": "uid=1", "sessionKey": "session-key"])
            let a = try await h.request("POST", "/v1/wechat/sign-params", body: body, token: "app-token")
            XCTAssertEqual(a.status, 200, a.text)
            let signData = a.json["signData"] as? String ?? ""
            XCTAssertTrue(signData.contains("\"productId\":\"vip_monthly\""), signData)
            XCTAssertEqual(a.json["paySig"] as? String,
                           Hex.encode(Digest.hmacSHA256(key: Array("app-key-secret".utf8), Array(("requestAppleSubscribeSign&" + signData).utf8))))
            XCTAssertEqual(a.json["signature"] as? String, Hex.encode(Digest.hmacSHA256(key: Array("session-key".utf8), Array(signData.utf8))))
            let bad = try await h.request("POST", "/v1/wechat/sign-params", body: json(["openid": "o", "productId": "p", "goodsPrice": 1, "sessionKey": "k", "attach": String(repeating: "x", count: 201)]), token: "app-token")
            XCTAssertEqual(bad.status, 400, bad.text)
            XCTAssertFalse(a.text.contains("app-key-secret"))
        }
    }
}
