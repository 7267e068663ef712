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
        "LEDGER_WECHAT_ALLOW_PLAINTEXT": "true", "LEDGER_DEVELOPMENT": "true",
        "LEDGER_WECHAT_OFFER_ID": "1450000000", "LEDGER_WECHAT_APP_KEY": "app-key-secret",
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

    /// A plaintext XML push, signed now (plaintext pushes outside the replay window are refused).
    func plainXML(_ inner: String, nonce: String = UUID().uuidString) -> (String, Data) {
        let ts = String(Int64(Date().timeIntervalSince1970))
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

    func refundNotify(order: String, wxOrder: String, at: Int, ok: Bool = true, fee: Int = 990, openId: String = "oUser1") -> [String: Any] {
        header(XPayEventName.refundNotify, at).merging(["OpenId": openId, "WxRefundId": "wxr-\(order)-\(ok ? 0 : 1)",
            "MchRefundId": "", "WxOrderId": wxOrder, "MchOrderId": order, "RefundFee": fee, "RetCode": ok ? 0 : 268_490_001,
            "RetMsg": ok ? "" : "refund failed", "RefundStartTimestamp": at - 60, "RefundSuccTimestamp": ok ? at : 0,
            "RetryTimes": 0]) { $1 }
    }

    /// Posts each message in secure mode and expects 200 with a success reply (or an answer).
    @discardableResult
    func push(_ h: ServiceHarness, _ messages: [[String: Any]], file: StaticString = #filePath, line: UInt = #line) async throws -> [[String: Any]] {
        var replies: [[String: Any]] = []
        for m in messages {
            let (path, body) = try secure(m)
            let a = try await h.post(path, body)
            XCTAssertEqual(a.status, 200, a.text, file: file, line: line)
            replies.append(try decryptedReply(a))
        }
        return replies
    }

    /// The refund cases an auditor sees.
    func cases(_ h: ServiceHarness, _ query: String = "") async throws -> [[String: Any]] {
        let a = try await h.request("GET", "/v1/refunds" + query, token: "auditor-token-for-tests-0123456789abcdef")
        XCTAssertEqual(a.status, 200, a.text)
        return a.json["cases"] as? [[String: Any]] ?? []
    }

    /// One case by id; asserts it is the same case the list shows.
    func oneCase(_ h: ServiceHarness, _ listed: [String: Any], file: StaticString = #filePath, line: UInt = #line) async throws -> [String: Any] {
        let id = listed["caseId"] as? String ?? ""
        let a = try await h.request("GET", "/v1/refunds/\(id.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)", token: "auditor-token-for-tests-0123456789abcdef")
        XCTAssertEqual(a.status, 200, a.text, file: file, line: line)
        var one = a.json
        one["events"] = nil
        XCTAssertEqual(NSDictionary(dictionary: one), NSDictionary(dictionary: listed), "the single case is the listed case", file: file, line: line)
        return a.json
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
            let contract = try await h.request("GET", "/v1/wechat/contracts?openid=oUser1&product_id=vip_monthly", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(contract.status, 200, contract.text)
            XCTAssertEqual(contract.json["authorization_state"] as? String, "TERMINATED")
            let info = contract.json["apple_subscription_info"] as? [String: Any]
            XCTAssertEqual(info?["original_transaction_id"] as? String, otid)
            XCTAssertEqual(info?["renewal_date"] as? Int64, 1_777_818_065_000)
            let unknown = try await h.request("GET", "/v1/wechat/contracts?openid=nobody&product_id=vip_monthly", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(unknown.json["authorization_state"] as? String, "UNBINDUSER")
            let state = try await h.request("GET", "/v1/subscriptions/\(otid)?at=1776500000000", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(state.status, 200, state.text)
            XCTAssertEqual(state.json["productId"] as? String, "vip_monthly")
            XCTAssertEqual(state.json["expiresDate"] as? Int64, 1_777_818_065_000)
            XCTAssertEqual(state.json["status"] as? String, "active")
            XCTAssertEqual(state.json["autoRenewStatus"] as? Int, 0)
        }
    }

    /// Apple asks three times: each asking is decided from the facts known when it arrives and
    /// stored with its own answer in the order's stream (linked to the subscription), the answer
    /// records how long the ledger took, and the auditor sees one case with three askings.
    func testEachAskingIsAnsweredWithEvidenceAndItsOwnLatency() async throws {
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
            // Delivered (no WeChatPayInfo: its period starts at the signing, 1775226065) and asked
            // 20.5 h later: under 48 h.
            XCTAssertEqual(answers[0]["result_code"] as? Int, 0)
            XCTAssertFalse((answers[0]["evidence"] as? String ?? "").isEmpty, "the answer carries evidence")
            let evidence = try JSONSerialization.jsonObject(with: Data((answers[0]["evidence"] as? String ?? "").utf8)) as? [String: Any]
            XCTAssertEqual(evidence?["rule"] as? String, "short_use")
            let facts = evidence?["facts"] as? [String: Any]
            XCTAssertEqual(facts?["customer"] as? String, "oUser1")
            XCTAssertEqual(facts?["product_id"] as? String, "vip_monthly")
            XCTAssertEqual((facts?["price_paid"] as? [String: Any])?["milliunits"] as? Int64, 9_900)
            let delivery = facts?["ledger_delivery"] as? [String: Any]
            XCTAssertEqual(delivery?["delivered_at"] as? Int64, 1_775_226_065_000)
            XCTAssertEqual(delivery?["delivered_at_basis"] as? String, "period_start")
            XCTAssertEqual((delivery?["raw_sha256"] as? String)?.count, 64, "the SHA-256 of the delivery push as received")
            let subscription = facts?["subscription"] as? [String: Any]
            XCTAssertEqual(subscription?["status_at_asking"] as? String, "active")
            XCTAssertEqual(subscription?["auto_renew_at_asking"] as? Int, 1)
            XCTAssertEqual((facts?["usage"] as? [String: Any])?["basis"] as? String, "time_since_delivery")
            XCTAssertEqual((evidence?["policy"] as? [String: Any])?["maxEntitlementUseHours"] as? Int, 48)
            // Each asking decided anew: its own asking time in its own evidence.
            XCTAssertEqual(Set(answers.compactMap { $0["evidence"] as? String }).count, 3)
            XCTAssertEqual(answers.compactMap { $0["result_code"] as? Int }, [0, 0, 0])
            // The askings and their answers are in the order's stream, linked to the subscription.
            let orderStream = try h.events(stream: StreamId.wechatOrder("ORDER-0001").text).map(\.type)
            XCTAssertEqual(orderStream.filter { $0 == XPayEventName.refundInquiry }.count, 3)
            XCTAssertEqual(orderStream.filter { $0 == XPayEventName.refundInquiryAnswer }.count, 3)
            try await waitForLink(h, "ORDER-0001")
            // Each answer records its decidedInMs and the reply's plaintext body.
            let stored = try h.admin.query(
                "SELECT payload, raw FROM events WHERE type = $1 ORDER BY position", [.text(XPayEventName.refundInquiryAnswer)],
                name: "answers").rows
            XCTAssertEqual(stored.count, 3)
            for row in stored {
                let payload = try JSONSerialization.jsonObject(with: try row.decode(Data.self, "payload")) as? [String: Any]
                let decided = try XCTUnwrap(payload?["decidedInMs"] as? Int)
                XCTAssertGreaterThanOrEqual(decided, 0)
                XCTAssertLessThan(decided, 2_500)
                let raw = try JSONSerialization.jsonObject(with: try row.decode(Data.self, "raw")) as? [String: Any]
                XCTAssertEqual(raw?["evidence"] as? String, payload?["evidence"] as? String, "raw is the plaintext reply")
            }
            // The auditor sees one case with three askings, each with its own answer.
            let cases = try await h.request("GET", "/v1/refunds?source=wechat", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual(cases.status, 200, cases.text)
            let list = cases.json["cases"] as? [[String: Any]] ?? []
            XCTAssertEqual(list.count, 1, cases.text)
            let listed = try XCTUnwrap(list.first)
            XCTAssertEqual(listed["caseId"] as? String, "wechat:ORDER-0001")
            XCTAssertEqual(listed["originalTransactionId"] as? String, otid)
            XCTAssertEqual(listed["openId"] as? String, "oUser1")
            XCTAssertEqual(listed["decision"] as? String, "allow")
            XCTAssertEqual(listed["decisionRule"] as? String, "short_use")
            XCTAssertEqual(listed["outcome"] as? String, "pending")
            XCTAssertEqual((listed["orderAmount"] as? [String: Any])?["milliunits"] as? Int64, 9_900)
            let answerRows = listed["answers"] as? [[String: Any]] ?? []
            XCTAssertEqual(answerRows.count, 3)
            XCTAssertEqual(answerRows.first?["resultCode"] as? Int64, 0)
            XCTAssertEqual(answerRows.compactMap { $0["latencyMs"] as? Int64 }, answerRows.compactMap { $0["decidedInMs"] as? Int64 },
                           "the latency is the measured one")
            let inquiries = listed["inquiries"] as? [[String: Any]] ?? []
            XCTAssertEqual(inquiries.compactMap { $0["repeatedAnswer"] as? Bool }, [false, false, false])
            XCTAssertEqual(Set(inquiries.compactMap { $0["answerPosition"] as? Int64 }), Set(answerRows.compactMap { $0["position"] as? Int64 }),
                           "each asking has its own answer")
            let one = try await oneCase(h, listed)
            // The evidence trail: the delivery, the link, three askings and three answers, with their facts.
            let trail = one["events"] as? [[String: Any]] ?? []
            XCTAssertEqual(trail.compactMap { $0["position"] as? Int64 }, listed["links"] as? [Int64])
            XCTAssertEqual(trail.count, 8)
            XCTAssertEqual(trail.compactMap { ($0["facts"] as? [[String: Any]])?.first?["kind"] as? String }.sorted(),
                           ["order_alias", "refund_answer", "refund_answer", "refund_answer", "refund_inquiry", "refund_inquiry", "refund_inquiry",
                            "transaction"])
            XCTAssertTrue(trail.allSatisfy { ($0["raw"] as? String)?.isEmpty == false }, "raw bytes shown by position")
            let missing = try await h.request("GET", "/v1/refunds/wechat%3ANO-SUCH-ORDER", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual(missing.status, 404, missing.text)
            let bogus = try await h.request("GET", "/v1/refunds/nothing-like-a-case", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual(bogus.status, 404, bogus.text)
            let csv = try await h.request("GET", "/v1/refunds?format=csv", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual(csv.status, 200)
            XCTAssertTrue(csv.headers["content-type"]?.hasPrefix("text/csv") ?? false)
            // RFC 4180 lines end in CRLF (one grapheme in Swift, so count bytes): the export's position
            // line, a header and one case.
            XCTAssertEqual(csv.body.split(separator: 0x0A).count, 3, csv.text)
            // The CSV's latency column is the measured decidedInMs of the first answer.
            let header = String(decoding: csv.body.split(separator: 0x0A)[1], as: UTF8.self).split(separator: ",")
            let row = String(decoding: csv.body.split(separator: 0x0A)[2], as: UTF8.self)
            let latencyColumn = try XCTUnwrap(header.firstIndex(of: "first_answer_latency_ms"))
            XCTAssertEqual(Int64(row.split(separator: ",", omittingEmptySubsequences: false)[latencyColumn]),
                           answerRows.first?["decidedInMs"] as? Int64)
            let denied = try await h.request("GET", "/v1/refunds", token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(denied.status, 403)
        }
    }

    /// The link of an inquiry's order stream is written after the answer is sent (off the 3 s
    /// budget): wait for it.
    func waitForLink(_ h: ServiceHarness, _ order: String, file: StaticString = #filePath, line: UInt = #line) async throws {
        let key = DedupeKey.orderLink(StreamId.wechatOrder(order))
        for _ in 0..<100 {
            if try h.admin.query("SELECT 1 FROM events WHERE dedupe_key = $1", [.text(key)], name: "link").count > 0 { return }
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        XCTFail("no link for \(order)", file: file, line: line)
    }

    func testInquiryBeforeItsDeliveryWaitsAndIsLinked() async throws {
        try await withService(environment: Self.environment) { h in
            let (path, body) = try secure(inquiry(order: "ORDER-LATE"))
            let posted2 = try await h.post(path, body)
            XCTAssertEqual(posted2.status, 200)
            let first = try decryptedReply(posted2)
            XCTAssertEqual(try h.events(stream: StreamId.wechatOrder("ORDER-LATE").text).count, 2,
                           "the inquiry and its answer wait in the order's stream")
            let (p2, b2) = try secure(deliver(order: "ORDER-LATE"))
            let posted3 = try await h.post(p2, b2)
            XCTAssertEqual(posted3.status, 200)
            let linked = try h.events(stream: otid).map(\.type)
            XCTAssertTrue(linked.contains(XPayEventName.orderLinked), "\(linked)")
            XCTAssertEqual(try h.events(stream: StreamId.wechatOrder("ORDER-LATE").text).count, 2, "never rewritten")
            // The case found its delivery and subscription through the order id, and lists the link.
            let list = try await cases(h)
            XCTAssertEqual(list.count, 1)
            let c = try XCTUnwrap(list.first)
            XCTAssertEqual(c["caseId"] as? String, "wechat:ORDER-LATE")
            XCTAssertEqual(c["originalTransactionId"] as? String, otid)
            XCTAssertEqual(c["openId"] as? String, "oUser1")
            // Decided on what was known when asked: no ledger delivery, WeChat's provide_status 1,
            // use measured from order_time (and named so).
            XCTAssertEqual(c["decisionRule"] as? String, "short_use")
            let firstEvidence = (c["answers"] as? [[String: Any]])?.first?["evidence"] as? String ?? ""
            XCTAssertFalse(firstEvidence.contains("ledger_delivery"), firstEvidence)
            XCTAssertTrue(firstEvidence.contains("time_since_order_time"), firstEvidence)
            XCTAssertNotNil(c["deliveryPosition"] as? Int64)
            XCTAssertEqual((c["links"] as? [Int64])?.count, 4, "inquiry, answer, delivery, link")
            _ = try await oneCase(h, c)
            // WeChat re-pushes the first asking after the delivery arrived: stored once (where it
            // went first: its order's stream), answered with the stored answer word for word.
            let again = try await push(h, [inquiry(order: "ORDER-LATE")])
            XCTAssertEqual(again[0]["evidence"] as? String, first["evidence"] as? String)
            XCTAssertEqual(again[0]["evidence"] as? String, firstEvidence)
            XCTAssertEqual(try h.events(stream: StreamId.wechatOrder("ORDER-LATE").text).count, 2, "not stored again")
            // A new asking is decided anew, from the facts known now: the delivery.
            let later = try await push(h, [inquiry(order: "ORDER-LATE", refundTime: "1775300300")])
            XCTAssertNotEqual(later[0]["evidence"] as? String, firstEvidence)
            XCTAssertTrue((later[0]["evidence"] as? String ?? "").contains("ledger_delivery"))
            XCTAssertEqual(try h.events(stream: StreamId.wechatOrder("ORDER-LATE").text).filter { $0.type == XPayEventName.refundInquiryAnswer }.count, 2)
            let after = try await cases(h)
            XCTAssertEqual((after.first?["inquiries"] as? [[String: Any]])?.compactMap { $0["streamId"] as? String },
                           [StreamId.wechatOrder("ORDER-LATE").text, StreamId.wechatOrder("ORDER-LATE").text])
            XCTAssertEqual((after.first?["answers"] as? [Any])?.count, 2)
        }
    }

    /// The customer's refund of another order counts against a new asking (the policy's earlier
    /// refunds rule), found through the customer's subscriptions and the refund's order ids — the
    /// refund push names only orders; one that came before its delivery joins it all the same.
    func testEarlierRefundsOfTheCustomerAndRefundsBeforeTheirDelivery() async throws {
        try await withService(environment: Self.environment) { h in
            try await push(h, [
                signing(),
                // The refund of ORDER-A reaches the ledger before its delivery.
                refundNotify(order: "ORDER-A", wxOrder: "WX-A", at: 1775230000),
                deliver(order: "ORDER-A"),
                deliver(order: "ORDER-B"),
            ])
            let reply = try await push(h, [inquiry(order: "ORDER-B", refundTime: "1775300000")])[0]
            XCTAssertEqual(reply["result_code"] as? Int, 1, "\(reply)")
            let evidence = try JSONSerialization.jsonObject(with: Data((reply["evidence"] as? String ?? "").utf8)) as? [String: Any]
            XCTAssertEqual(evidence?["rule"] as? String, "earlier_refunds")
            let earlier = (evidence?["facts"] as? [String: Any])?["earlier_refunds_in_window"] as? [[String: Any]]
            XCTAssertEqual(earlier?.compactMap { $0["order_id"] as? String }, ["ORDER-A"])
            XCTAssertEqual(earlier?.first?["refunded_at"] as? Int64, 1_775_230_000_000)

            let refunded = try await cases(h, "?outcome=refunded")
            XCTAssertEqual(refunded.count, 1)
            let a = try XCTUnwrap(refunded.first)
            XCTAssertEqual(a["caseId"] as? String, "wechat:ORDER-A")
            XCTAssertEqual(a["originalTransactionId"] as? String, otid, "joined its delivery, which came later")
            XCTAssertEqual((a["orderAmount"] as? [String: Any])?["milliunits"] as? Int64, 9_900)
            XCTAssertEqual((a["refundedAmount"] as? [String: Any])?["milliunits"] as? Int64, 9_900)
            XCTAssertEqual(a["outcomeAt"] as? Int64, 1_775_230_000_000)
            _ = try await oneCase(h, a)
            let all = try await cases(h)
            XCTAssertEqual(all.compactMap { $0["caseId"] as? String }, ["wechat:ORDER-A", "wechat:ORDER-B"])
            let refused = try await cases(h, "?decision=refuse")
            XCTAssertEqual(refused.compactMap { $0["caseId"] as? String }, ["wechat:ORDER-B"])
            let customers = try await cases(h, "?openid=oUser1")
            XCTAssertEqual(customers.count, 2)
            let csv = try await h.request("GET", "/v1/refunds?format=csv&decision=refuse", token: "auditor-token-for-tests-0123456789abcdef")
            XCTAssertEqual(csv.status, 200)
            XCTAssertTrue(csv.text.contains("\r\nwechat:ORDER-B,wechat,ORDER-B,\(otid),oUser1,"), csv.text)
        }
    }

    /// WeChat may ask under another id of the order than OutTradeNo: the delivery's own alias facts
    /// (WeChatPayInfo.MchOrderNo / TransactionId) find it, for the answer and for the case.
    func testAnAskingUnderAnotherIdOfTheOrderFindsTheDelivery() async throws {
        try await withService(environment: Self.environment) { h in
            var paid = deliver(order: "ORDER-M")
            paid["WeChatPayInfo"] = ["MchOrderNo": "MCH-M", "TransactionId": "4200-M", "PaidTime": 1775226000]
            try await push(h, [signing(), paid])
            let reply = try await push(h, [inquiry(order: "4200-M", refundTime: "1775400000")])[0]
            let evidence = try JSONSerialization.jsonObject(with: Data((reply["evidence"] as? String ?? "").utf8)) as? [String: Any]
            let delivery = (evidence?["facts"] as? [String: Any])?["ledger_delivery"] as? [String: Any]
            XCTAssertEqual(delivery?["order_id"] as? String, "ORDER-M", "\(evidence ?? [:])")
            XCTAssertEqual(delivery?["delivered_at"] as? Int64, 1_775_226_000_000, "PaidTime, not CreateTime")
            XCTAssertEqual(evidence?["rule"] as? String, "long_use", "48.3 h after payment")
            // The refund names MchOrderNo and WeChat's own order id: one case with the asking.
            try await push(h, [refundNotify(order: "MCH-M", wxOrder: "WXO-M", at: 1775400100)])
            let list = try await cases(h)
            XCTAssertEqual(list.compactMap { $0["caseId"] as? String }, ["wechat:4200-M"])
            let c = try XCTUnwrap(list.first)
            XCTAssertEqual(c["outcome"] as? String, "refunded")
            XCTAssertEqual(c["originalTransactionId"] as? String, otid)
            XCTAssertEqual(c["decision"] as? String, "refuse")
            XCTAssertNotNil(c["deliveryPosition"] as? Int64)
            _ = try await oneCase(h, c)
        }
    }

    /// Copies of one asking that race (WeChat re-sends before the first is answered) get one
    /// answer, word for word; different askings racing get one answer each.
    func testConcurrentCopiesOfOneAskingGetOneAnswer() async throws {
        try await withService(environment: Self.environment) { h in
            try await push(h, [signing(), deliver()])
            let copies = try (0..<4).map { _ in try secure(inquiry(refundTime: "1775300000")) }
            let askings = try ["1775300001", "1775300002", "1775300003"].map { try secure(inquiry(refundTime: $0)) }
            let sender = self.sender
            func post(_ requests: [(String, Data)]) async throws -> [String?] {
                try await withThrowingTaskGroup(of: String?.self) { group in
                    for (path, body) in requests {
                        group.addTask { [h] in
                            let a = try await h.post(path, body)
                            XCTAssertEqual(a.status, 200, a.text)
                            let plain = try sender.openReply(a.body, format: .json)
                            return (try JSONSerialization.jsonObject(with: Data(plain)) as? [String: Any])?["evidence"] as? String
                        }
                    }
                    var out: [String?] = []
                    for try await r in group { out.append(r) }
                    return out
                }
            }
            let same = try await post(copies)
            XCTAssertEqual(same.count, 4)
            XCTAssertFalse(same.contains(nil), "every copy got an answer")
            XCTAssertEqual(Set(same.compactMap { $0 }).count, 1, "one answer, word for word")
            let different = try await post(askings)
            XCTAssertEqual(Set(different.compactMap { $0 }).count, 3, "each asking decided on its own")
            let stream = StreamId.wechatOrder("ORDER-0001").text
            XCTAssertEqual(try h.events(stream: stream).filter { $0.type == XPayEventName.refundInquiry }.count, 4)
            XCTAssertEqual(try h.events(stream: stream).filter { $0.type == XPayEventName.refundInquiryAnswer }.count, 4)
            let c = try await cases(h)
            XCTAssertEqual((c.first?["inquiries"] as? [Any])?.count, 4)
            XCTAssertEqual((c.first?["answers"] as? [Any])?.count, 4)
        }
    }

    /// Apple's refund notifications through the real webhook become Apple cases, from their facts.
    func testAppleRefundCasesThroughTheService() async throws {
        try await withService(environment: Self.environment) { h in
            let t0: EpochMillis = 1_767_225_600_000
            let day: EpochMillis = 86_400_000
            var buy = AppleTestAuthority.sample(environment: "Production", originalTransactionId: "7000000000000001",
                                                transactionId: "7000000000000002", signedDate: t0, expiresDate: t0 + 30 * day)
            buy.transaction.appAccountToken = "6F0C1B2A-0000-4000-8000-0000000000AA"
            func message(_ type: String, at d: EpochMillis, _ edit: (inout AppleTestAuthority.Sample) -> Void = { _ in }) -> AppleTestAuthority.Sample {
                var s = buy
                s.notification.notificationType = type
                s.notification.subtype = nil
                s.notification.notificationUUID = UUID().uuidString.lowercased()
                s.notification.signedDate = AppleTime(t0 + d * day)
                s.transaction.signedDate = AppleTime(t0 + d * day)
                edit(&s)
                return s
            }
            let samples = [
                message("REFUND_REVERSED", at: 6),
                message("REFUND", at: 5) { s in
                    s.transaction.revocationDate = AppleTime(t0 + 5 * day)
                    s.transaction.revocationReason = 0
                    s.transaction.revocationType = "REFUND_FULL"
                },
                message("CONSUMPTION_REQUEST", at: 4) { s in s.notification.data?.consumptionRequestReason = "UNINTENDED_PURCHASE" },
                buy,
            ]
            for s in samples {   // out of order: the latest word first
                let a = try await h.post("/v1/apple/notifications", try h.authority.signSample(s))
                XCTAssertEqual(a.status, 200, a.text)
            }
            let list = try await cases(h, "?source=apple")
            XCTAssertEqual(list.count, 1, "\(list)")
            let c = try XCTUnwrap(list.first)
            XCTAssertEqual(c["caseId"] as? String, "apple:7000000000000002")
            XCTAssertEqual(c["outcome"] as? String, "reversed")
            XCTAssertEqual(c["originalTransactionId"] as? String, "7000000000000001")
            XCTAssertEqual(c["customerId"] as? String, "6f0c1b2a-0000-4000-8000-0000000000aa")
            XCTAssertEqual(c["reason"] as? String, "UNINTENDED_PURCHASE")
            XCTAssertEqual((c["orderAmount"] as? [String: Any])?["milliunits"] as? Int64, 9_990)
            XCTAssertEqual((c["appleNotifications"] as? [[String: Any]])?.compactMap { $0["notificationType"] as? String },
                           ["CONSUMPTION_REQUEST", "REFUND", "REFUND_REVERSED"])
            XCTAssertEqual((c["links"] as? [Int64])?.count, 3, "the purchase is no part of the case")
            let one = try await oneCase(h, c)
            XCTAssertEqual((one["events"] as? [[String: Any]])?.count, 3)
            let wechatCases = try await cases(h, "?source=wechat")
            XCTAssertEqual(wechatCases.count, 0)
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
            let a = try await h.request("POST", "/v1/wechat/sign-params", body: body, token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(a.status, 200, a.text)
            let signData = a.json["signData"] as? String ?? ""
            XCTAssertTrue(signData.contains("\"productId\":\"vip_monthly\""), signData)
            XCTAssertEqual(a.json["paySig"] as? String,
                           Hex.encode(Digest.hmacSHA256(key: Array("app-key-secret".utf8), Array(("requestAppleSubscribeSign&" + signData).utf8))))
            XCTAssertEqual(a.json["signature"] as? String, Hex.encode(Digest.hmacSHA256(key: Array("session-key".utf8), Array(signData.utf8))))
            let bad = try await h.request("POST", "/v1/wechat/sign-params", body: json(["openid": "o", "productId": "p", "goodsPrice": 1, "sessionKey": "k", "attach": String(repeating: "x", count: 201)]), token: "app-token-for-tests-0123456789abcdef")
            XCTAssertEqual(bad.status, 400, bad.text)
            XCTAssertFalse(a.text.contains("app-key-secret"))
        }
    }
}
