import Crypto
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
@testable import WeChatPay
import XCTest

/// Answers like WeChat would and records what was sent: `stable_token` gets an access token
/// (containing '+', '/' and '='), every other endpoint `body`.
final class RecordingTransport: XPayTransport, @unchecked Sendable {
    static let accessToken = "AT+/=x"
    let status: Int
    let body: Data
    private let lock = NSLock()
    private var _sent: [URLRequest] = []
    var sent: [URLRequest] { lock.withLock { _sent } }

    init(status: Int = 200, body: String) {
        self.status = status
        self.body = Data(body.utf8)
    }

    func send(_ request: URLRequest) async throws -> (status: Int, body: Data) {
        lock.withLock { _sent.append(request) }
        if request.url?.path.hasSuffix("/cgi-bin/stable_token") == true {
            return (200, Data(#"{"access_token":"\#(Self.accessToken)","expires_in":7200}"#.utf8))
        }
        return (status, body)
    }
}

/// The server API client as the reconciliation builds it, over `transport`.
func serverAPI(_ base: String = "https://wechat.example.test/base", transport: any XPayTransport) throws -> WeChatServerAPI {
    try WeChatServerAPI(configuration: WeChatServerAPIConfiguration(baseURL: URL(string: base)!, appId: "wxapp",
                                                                     appSecret: "APP_SECRET_456", appKey: "12345"),
                        transport: transport)
}

final class XPayClientTests: XCTestCase {
    let seedAnswer = #"{"errcode":0,"errmsg":"ok","authorization_state":"SIGNED","apple_subscription_info":{"original_transaction_id":"2000001147426510","auto_renew_status":1,"recent_subscription_start_date":1775226065000,"renewal_date":1775226245000}}"#

    func testRequestIsSignedOverTheBodySent() async throws {
        let t = RecordingTransport(body: seedAnswer)
        let client = try serverAPI(transport: t)
        let contract = try await client.subscribeContract(openId: "oUser1", productId: "subscription_vip_monthly").value
        XCTAssertEqual(contract, SubscribeContract(authorizationState: .signed, appleSubscriptionInfo: .init(
            originalTransactionId: "2000001147426510", autoRenewStatus: 1,
            recentSubscriptionStartDate: 1_775_226_065_000, renewalDate: 1_775_226_245_000)))
        XCTAssertEqual(t.sent.count, 2, "a token, then the question")
        let req = try XCTUnwrap(t.sent.last)
        XCTAssertEqual(req.httpMethod, "POST")
        XCTAssertEqual(req.value(forHTTPHeaderField: "Content-Type"), "application/json")
        let url = try XCTUnwrap(req.url)
        XCTAssertEqual(url.host, "wechat.example.test")
        XCTAssertEqual(url.path, "/base/xpay/query_subscribe_contract")
        let items = URLComponents(url: url, resolvingAgainstBaseURL: false)?.queryItems ?? []
        XCTAssertEqual(items.first { $0.name == "access_token" }?.value, "AT+/=x", "'+' survives the query encoding")
        let body = try XCTUnwrap(req.httpBody)
        XCTAssertEqual(items.first { $0.name == "pay_sig" }?.value,
                       Hex.encode(Digest.hmacSHA256(key: Array("12345".utf8), Array("/xpay/query_subscribe_contract&".utf8) + [UInt8](body))))
        let sentBody = try JSONSerialization.jsonObject(with: body) as? [String: String]
        XCTAssertEqual(sentBody, ["mode": "apple", "openid": "oUser1", "product_id": "subscription_vip_monthly"])
    }

    func testAnswersDecoded() throws {
        let terminated = try SubscribeContract.decode(status: 200, body: Data(#"{"errcode":0,"authorization_state":"TERMINATED","apple_subscription_info":{"original_transaction_id":"1","auto_renew_status":0,"renewal_date":5}}"#.utf8))
        XCTAssertEqual(terminated.authorizationState, .terminated)
        XCTAssertEqual(terminated.appleSubscriptionInfo?.recentSubscriptionStartDate, nil)
        let never = try SubscribeContract.decode(status: 200, body: Data(#"{"errcode":0,"errmsg":"ok","authorization_state":"UNBINDUSER"}"#.utf8))
        XCTAssertEqual(never, SubscribeContract(authorizationState: .unbindUser, appleSubscriptionInfo: nil))
    }

    /// Seed 000 §6.3 states `auto_renew_status` as a Number; answers leave it out, send it as text,
    /// or send an empty `apple_subscription_info`: each is read (TERMINATED ⇒ 0, SIGNED ⇒ 1 when
    /// missing), never refused — a refused answer would leave a missed unsigning unhealed.
    func testLenientAnswersDecoded() throws {
        func decode(_ body: String) throws -> SubscribeContract { try SubscribeContract.decode(status: 200, body: Data(body.utf8)) }
        let missing = try decode(#"{"errcode":0,"authorization_state":"TERMINATED","apple_subscription_info":{"original_transaction_id":"1","renewal_date":1775226245000}}"#)
        XCTAssertEqual(missing.appleSubscriptionInfo?.autoRenewStatus, 0)
        XCTAssertEqual(missing.appleSubscriptionInfo?.autoRenewStatusStated, false)
        let signedMissing = try decode(#"{"errcode":0,"authorization_state":"SIGNED","apple_subscription_info":{"original_transaction_id":"1"}}"#)
        XCTAssertEqual(signedMissing.appleSubscriptionInfo?.autoRenewStatus, 1)
        let text = try decode(#"{"errcode":0,"authorization_state":"SIGNED","apple_subscription_info":{"original_transaction_id":"1","auto_renew_status":"0","renewal_date":"1775226245000"}}"#)
        XCTAssertEqual(text.appleSubscriptionInfo?.autoRenewStatus, 0)
        XCTAssertEqual(text.appleSubscriptionInfo?.renewalDate, 1_775_226_245_000)
        XCTAssertEqual(text.appleSubscriptionInfo?.autoRenewStatusStated, true)
        let staleOne = try decode(#"{"errcode":0,"authorization_state":"TERMINATED","apple_subscription_info":{"original_transaction_id":"1","auto_renew_status":1}}"#)
        XCTAssertEqual(staleOne.appleSubscriptionInfo?.autoRenewStatus, 0, "TERMINATED: nothing renews")
        let empty = try decode(#"{"errcode":0,"authorization_state":"TERMINATED","apple_subscription_info":{}}"#)
        XCTAssertEqual(empty, SubscribeContract(authorizationState: .terminated, appleSubscriptionInfo: nil))
        let null = try decode(#"{"errcode":0,"authorization_state":"SIGNED","apple_subscription_info":null}"#)
        XCTAssertNil(null.appleSubscriptionInfo)
        for hostile in [#"{"authorization_state":"SIGNED","apple_subscription_info":{"original_transaction_id":"1","auto_renew_status":7}}"#,
                        #"{"authorization_state":"SIGNED","apple_subscription_info":{"original_transaction_id":1}}"#,
                        #"{"authorization_state":"SIGNED","apple_subscription_info":[]}"#,
                        #"{"authorization_state":"SIGNED","apple_subscription_info":{"original_transaction_id":"1","renewal_date":"soon"}}"#] {
            XCTAssertThrowsError(try decode(hostile), hostile) { XCTAssertEqual(($0 as? XPayClientError)?.code, "wechat_invalid_response") }
        }
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

        let client = try serverAPI(transport: RecordingTransport(body: "{}"))
        do {
            _ = try await client.subscribeContract(openId: "", productId: "p")
            XCTFail("empty openid accepted")
        } catch {
            XCTAssertEqual(error.code, "wechat_invalid_request")
        }
    }

    /// A real socket: nothing listens on port 9 of localhost, so URLSession fails (after the
    /// client's retries); the error is typed and repeats no secret.
    func testUnreachableServerWithRealURLSession() async throws {
        let client = try serverAPI("http://127.0.0.1:9", transport: URLSessionTransport(timeout: 2))
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
