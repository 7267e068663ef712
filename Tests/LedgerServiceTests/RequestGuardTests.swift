import Crypto
import Foundation
import LedgerCore
@testable import LedgerService
import LedgerTesting
import WeChatPay
import XCTest

/// Issue 22 item 3: one JSON guard (`JSONGuard`, LedgerCore) for WeChat's JSON and every app and
/// admin request body — nesting beyond 32, the NUL escape, trailing commas, huge numbers and a
/// member name twice are 400 before anything is decoded or stored.
final class RequestGuardTests: XCTestCase {
    func testAppAndAdminBodiesAreGuarded() async throws {
        try await withService { h in
            let deep = String(repeating: "[", count: 40) + String(repeating: "]", count: 40)
            let bodies: [(String, String)] = [
                (#"{"originalTransactionId": "1000000000000001",}"#, "comma before a closing bracket"),
                (#"{"originalTransactionId": "1000000000000001", "x": \#(deep)}"#, "nested more than 32 levels"),
                (#"{"originalTransactionId": "1000000000000001", "originalTransactionId": "1000000000000002"}"#, "same member name twice"),
                (#"{"originalTransactionId": "1000000000000001", "n": 1e5000}"#, "exponent beyond"),
                (#"{"originalTransactionId": "10000000\u0000"}"#, "\\u0000"),
            ]
            for (body, reason) in bodies {
                let answer = try await h.request("POST", "/v1/customers/c-1/subscriptions", body: Data(body.utf8), token: ServiceHarness.appToken)
                XCTAssertEqual(answer.status, 400, "\(body): \(answer.text)")
                XCTAssertEqual(answer.errorCode, "malformed", body)
                XCTAssertTrue((answer.json["message"] as? String ?? "").contains(reason), "\(body): \(answer.text)")
            }
            // An admin body goes through the same guard.
            let admin = try await h.request("POST", "/v1/admin/rebuild", body: Data(#"{"dryRun": true,}"#.utf8), token: ServiceHarness.adminToken)
            XCTAssertEqual(admin.status, 400, admin.text)
            XCTAssertEqual(admin.errorCode, "malformed")
            XCTAssertEqual(try h.eventCount(), 0, "nothing refused was stored")
            // A well-formed body still works.
            let ok = try await h.request("POST", "/v1/customers/c-1/subscriptions",
                                         body: Data(#"{"originalTransactionId": "1000000000000001"}"#.utf8), token: ServiceHarness.appToken)
            XCTAssertEqual(ok.status, 200, ok.text)
        }
    }

    /// An authenticated WeChat JSON push whose message jsonb cannot store was accepted and then
    /// failed the append (500, which WeChat retries forever). It is authentic, so it is kept as
    /// evidence (the exact body in raw, nothing in the jsonb that jsonb refuses) and answered 200.
    func testAnAuthenticWeChatPushThatJSONBCannotStoreIsKeptAsEvidenceNotA500() async throws {
        try await withService(environment: WeChatSide.environment) { h in
            let sender = WeChatSide().sender
            let message = Array(JSONValue.object(["ToUserName": "gh_97417a04a28d", "MsgType": "event",
                                                  "Event": "xpay_subscribe_ios_deliver_notify", "CreateTime": 1775226065]).canonicalJSON())
            for inner in [Array(message.dropLast()) + Array(",}".utf8),
                          Array(message.dropLast()) + Array(#","Amount":1\#(String(repeating: "0", count: 1200))}"#.utf8)] {
                let ts = String(WeChatSide.nowSeconds()), nonce = UUID().uuidString
                let sealed = try sender.encryptReply(inner, format: .json, timestamp: Int64(ts)!, nonce: nonce)
                let encrypt = (try JSONSerialization.jsonObject(with: sealed) as! [String: Any])["Encrypt"] as! String
                let q = "signature=\(PushSignature.compute([WeChatWebhookTests.token, ts, nonce]))&timestamp=\(ts)&nonce=\(nonce)"
                    + "&encrypt_type=aes&msg_signature=\(PushSignature.compute([WeChatWebhookTests.token, ts, nonce, encrypt]))"
                let body = JSONValue.object(["ToUserName": "gh_97417a04a28d", "Encrypt": .string(encrypt)]).canonicalJSON()
                let answer = try await h.post("/v1/wechat/notifications?" + q.addingPercentEncoding(withAllowedCharacters: .urlQueryAllowed)!, body)
                XCTAssertEqual(answer.status, 200, answer.text)
                XCTAssertEqual(try h.events(stream: "wechat:unreadable:unparsable").last.flatMap { RawPush.body(of: $0.raw) }, Array(body))
            }
            XCTAssertEqual(try h.events(stream: "wechat:unreadable:unparsable").map(\.type), ["unreadable", "unreadable"])
            XCTAssertEqual(try h.eventCount(), 2)
        }
    }
}
