import Crypto
import Foundation
import LedgerTesting
@testable import WeChatPay
import XCTest

/// A client whose base is never reached (requests that fail before sending), or `base`.
func serverAPI(_ base: String = "https://wechat.example.test/base", allowsLoopback: Bool = false) throws -> WeChatServerAPI {
    try WeChatServerAPI(configuration: WeChatServerAPIConfiguration(baseURL: URL(string: base)!, appId: "wxapp",
                                                                     appSecret: "APP_SECRET_456", appKey: "12345",
                                                                     allowsPlainHTTPLoopback: allowsLoopback),
                        sleep: { _ in })
}

final class XPayClientTests: XCTestCase {
    let seedAnswer = #"{"errcode":0,"errmsg":"ok","authorization_state":"SIGNED","apple_subscription_info":{"original_transaction_id":"2000001147426510","auto_renew_status":1,"recent_subscription_start_date":1775226065000,"renewal_date":1775226245000}}"#

    /// Through the outbound client to the loopback fake, which checks the token and pay_sig over
    /// the exact body it received.
    func testRequestIsSignedOverTheBodySent() async throws {
        let fake = FakeWeChatAPI(appId: "wxapp", appSecret: "APP_SECRET_456", appKey: "12345")
        try fake.start()
        defer { Task { await fake.shutdown() } }
        let expected = SubscribeContract(authorizationState: .signed, appleSubscriptionInfo: .init(
            originalTransactionId: "2000001147426510", autoRenewStatus: 1,
            recentSubscriptionStartDate: 1_775_226_065_000, renewalDate: 1_775_226_245_000))
        fake.setContract(openId: "oUser1", productId: "subscription_vip_monthly", expected)
        let client = try serverAPI(fake.baseURL.appendingPathComponent("").absoluteString, allowsLoopback: true)
        let contract = try await client.subscribeContract(openId: "oUser1", productId: "subscription_vip_monthly").value
        XCTAssertEqual(contract, expected)
        let seen = fake.seen
        XCTAssertEqual(seen.map(\.path), ["/cgi-bin/stable_token", "/xpay/query_subscribe_contract"], "a token, then the question")
        XCTAssertEqual(seen.map(\.refusal), [nil, nil], "the fake accepted the token and pay_sig")
        let question = try XCTUnwrap(seen.last)
        XCTAssertEqual(question.query["pay_sig"],
                       Hex.encode(Digest.hmacSHA256(key: Array("12345".utf8), Array("/xpay/query_subscribe_contract&".utf8) + [UInt8](question.body))))
        let sentBody = try JSONSerialization.jsonObject(with: question.body) as? [String: String]
        XCTAssertEqual(sentBody, ["mode": "apple", "openid": "oUser1", "product_id": "subscription_vip_monthly"])
        // A plain-http base is refused unless the loopback setting allows it: nothing is sent.
        let strict = try? serverAPI(fake.baseURL.absoluteString, allowsLoopback: false)
        XCTAssertNil(strict, "plain http accepted without LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK")
        XCTAssertThrowsError(try serverAPI("http://api.weixin.qq.com", allowsLoopback: true)) { error in
            XCTAssertTrue("\(error)".contains("LEDGER_WECHAT_API_BASE_URL"), "\(error)")
        }
        XCTAssertEqual(fake.seen.count, 2)
    }

    func testAnswersDecoded() throws {
        let terminated = try SubscribeContract.decode(status: 200, body: Data(#"{"errcode":0,"authorization_state":"TERMINATED","apple_subscription_info":{"original_transaction_id":"1","auto_renew_status":0,"renewal_date":5}}"#.utf8))
        XCTAssertEqual(terminated.authorizationState, .terminated)
        XCTAssertEqual(terminated.appleSubscriptionInfo?.recentSubscriptionStartDate, nil)
        let never = try SubscribeContract.decode(status: 200, body: Data(#"{"errcode":0,"errmsg":"ok","authorization_state":"UNBINDUSER"}"#.utf8))
        XCTAssertEqual(never, SubscribeContract(authorizationState: .unbindUser, appleSubscriptionInfo: nil))
    }

    func testErrorsTyped() async throws {
        func error(_ status: Int, _ body: String) -> XPayClientError? {
            do {
                _ = try SubscribeContract.decode(status: status, body: Data(body.utf8))
                return nil
            } catch {
                return error
            }
        }
        let sig = error(200, #"{"errcode":268490003,"errmsg":"signature error"}"#)
        XCTAssertEqual(sig, .wechat(errcode: 268490003, errmsg: "signature error"))
        XCTAssertTrue(sig?.message.contains("LEDGER_WECHAT_APP_KEY") ?? false)
        XCTAssertTrue(error(200, #"{"errcode":268490009,"errmsg":"x"}"#)?.message.contains("session_key") ?? false)
        XCTAssertEqual(error(502, "<html>bad gateway</html>"), .http(status: 502))
        XCTAssertEqual(error(200, "not json")?.code, "wechat_invalid_response")
        XCTAssertEqual(error(200, #"{"errcode":0,"authorization_state":"MAYBE"}"#)?.code, "wechat_invalid_response")

        let client = try serverAPI()
        do {
            _ = try await client.subscribeContract(openId: "", productId: "p")
            XCTFail("empty openid accepted")
        } catch {
            XCTAssertEqual(error.code, "wechat_invalid_request")
        }
    }

    /// A real socket: nothing listens on port 9 of localhost, so the outbound client fails (after the
    /// client's retries); the error is typed and repeats no secret.
    func testUnreachableServerWithRealURLSession() async throws {
        let client = try serverAPI("http://127.0.0.1:9", allowsLoopback: true)
        do {
            _ = try await client.subscribeContract(openId: "o", productId: "p")
            XCTFail("no server, yet an answer")
        } catch {
            XCTAssertEqual(error.code, "wechat_unreachable")
            XCTAssertFalse(error.message.contains("APP_SECRET_456"))
            XCTAssertFalse(error.message.contains("12345"))
        }
    }
}
