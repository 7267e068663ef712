import Crypto
import Foundation
import HTTPServer
import LedgerCore
import Synchronization
import WeChatPay

/// A local WeChat server API for tests: a real HTTP server on loopback (the project's `HTTPServer`)
/// that behaves like `api.weixin.qq.com` where the ledger depends on it (wechat-server-api.md):
///
/// - `POST /cgi-bin/stable_token` (JSON `grant_type`, `appid`, `secret`, `force_refresh`): the same
///   token while it is valid (normal mode), a new one on `force_refresh` or when `expireTokens()`
///   was called; 40013 for another AppID, 40001 for a wrong secret.
/// - `POST /xpay/query_subscribe_contract?access_token&pay_sig` and `POST /xpay/query_order?…`:
///   the token must be the current one (else 40001), `pay_sig` must be HMAC-SHA256(AppKey,
///   uri + "&" + the exact body) (else 268490003); answers come from what the test programmed
///   (`setContract`, `setOrder`), UNBINDUSER / 268490002 "order not exist" otherwise.
/// - Scripted failures (`enqueue`): an errcode (e.g. -1 busy, 42001 expired token) or an HTTP status.
///
/// Every request is recorded (`seen`) with the reason a check refused it.
public final class FakeWeChatAPI: Sendable {
    public let appId: String
    public let appSecret: String
    public let appKey: String

    public struct Seen: Sendable {
        public var path: String
        public var query: [String: String]
        public var body: Data
        /// Why the fake refused it (nil: answered normally).
        public var refusal: String?
    }

    /// An answer given instead of the real one, for the next request to `path` (nil: any).
    public struct Failure: Sendable {
        public var path: String?
        public var status: Int
        public var errcode: Int64?
        public init(path: String? = nil, status: Int = 200, errcode: Int64? = nil) {
            self.path = path
            self.status = status
            self.errcode = errcode
        }
    }

    struct State {
        var token = "fake-token-1"
        var tokenSerial = 1
        var contracts: [String: SubscribeContract] = [:]
        var orders: [String: XPayOrder] = [:]
        var failures: [Failure] = []
        var seen: [Seen] = []
    }

    private let state = Mutex(State())
    private let server: HTTPServer

    public init(appId: String = "wxba5fad812f8e6fb9", appSecret: String = "fake-app-secret", appKey: String = "app-key-secret") {
        self.appId = appId
        self.appSecret = appSecret
        self.appKey = appKey
        var router = Router()
        let box = FakeWeChatBox()
        for path in ["/cgi-bin/stable_token", "/xpay/query_subscribe_contract", "/xpay/query_order"] {
            router.add("POST", path) { request in
                guard let fake = box.fake else { return HTTPResponse(status: 503) }
                return fake.answer(request)
            }
        }
        server = HTTPServer(configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threadPoolSize: 2), router: router)
        box.fake = self
    }

    public func start() throws { try server.start() }
    public func shutdown() async { await server.shutdown(gracePeriod: .seconds(2)) }

    /// `http://127.0.0.1:<port>`, once started.
    /// Plain http on loopback: the client needs `allowsPlainHTTPLoopback: true` (or the service
    /// `LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK=true`); the outbound client refuses it otherwise.
    public var baseURL: URL { URL(string: "http://127.0.0.1:\(server.port ?? 0)")! }

    // MARK: programming

    /// What `query_subscribe_contract` answers for (openid, product).
    public func setContract(openId: String, productId: String, _ contract: SubscribeContract) {
        state.withLock { $0.contracts["\(openId)|\(productId)"] = contract }
    }

    /// What `query_order` answers for either of the order's ids (and the openid).
    public func setOrder(openId: String, _ order: XPayOrder) {
        state.withLock { s in
            s.orders["\(openId)|order_id|\(order.orderId)"] = order
            if let wx = order.wxOrderId { s.orders["\(openId)|wx_order_id|\(wx)"] = order }
        }
    }

    public func enqueue(_ failure: Failure) { state.withLock { $0.failures.append(failure) } }

    /// Makes the current token invalid (as after 2 hours): the next call gets 42001.
    public func expireTokens() { state.withLock { $0.token = "expired-\($0.tokenSerial)" } }

    public var seen: [Seen] { state.withLock { $0.seen } }

    // MARK: answers

    func answer(_ request: HTTPRequest) -> HTTPResponse {
        if let failure = state.withLock({ s -> Failure? in
            guard let i = s.failures.firstIndex(where: { $0.path == nil || $0.path == request.path }) else { return nil }
            return s.failures.remove(at: i)
        }) {
            record(request, refusal: "scripted failure")
            if let code = failure.errcode { return errcode(code, "scripted failure") }
            return HTTPResponse(status: failure.status)
        }
        guard let body = try? JSONValue(json: request.body), body.objectValue != nil else {
            record(request, refusal: "body is not a JSON object")
            return errcode(47001, "data format error")
        }
        if request.path == "/cgi-bin/stable_token" { return token(request, body) }
        let current = state.withLock { $0.token }
        guard request.query["access_token"] == current else {
            let expired = request.query["access_token"]?.hasPrefix("fake-token-") == true
            record(request, refusal: "access_token is not the current one")
            return errcode(expired ? 42001 : 40001, expired ? "access_token expired" : "invalid credential, access_token is invalid or not latest")
        }
        let expected = XPaySignature.paySig(appKey: appKey, uri: request.path, body: [UInt8](request.body))
        guard request.query["pay_sig"] == expected else {
            record(request, refusal: "pay_sig does not match HMAC-SHA256(AppKey, uri&body)")
            return errcode(268_490_003, "signature error")
        }
        switch request.path {
        case "/xpay/query_subscribe_contract":
            guard body.text("mode") == "apple", let openId = body.text("openid"), let product = body.text("product_id") else {
                record(request, refusal: "mode must be apple, openid and product_id are required")
                return errcode(268_490_002, "param error")
            }
            record(request, refusal: nil)
            let contract = state.withLock { $0.contracts["\(openId)|\(product)"] } ?? SubscribeContract(authorizationState: .unbindUser, appleSubscriptionInfo: nil)
            var o: [String: JSONValue] = ["errcode": 0, "errmsg": "ok", "authorization_state": .string(contract.authorizationState.rawValue)]
            if let info = contract.appleSubscriptionInfo {
                var i: [String: JSONValue] = ["original_transaction_id": .string(info.originalTransactionId),
                                              "auto_renew_status": .integer(Int64(info.autoRenewStatus))]
                if let v = info.recentSubscriptionStartDate { i["recent_subscription_start_date"] = .integer(v) }
                if let v = info.renewalDate { i["renewal_date"] = .integer(v) }
                o["apple_subscription_info"] = .object(i)
            }
            return .json(200, JSONValue.object(o).canonicalJSON())
        default:
            guard let openId = body.text("openid"), body.int64("env") != nil else {
                record(request, refusal: "openid and env are required")
                return errcode(268_490_002, "param error")
            }
            let key = body.text("order_id").map { "\(openId)|order_id|\($0)" } ?? body.text("wx_order_id").map { "\(openId)|wx_order_id|\($0)" }
            guard let key, let order = state.withLock({ $0.orders[key] }) else {
                record(request, refusal: "no such order")
                return errcode(268_490_002, "order not exist")
            }
            record(request, refusal: nil)
            var o: [String: JSONValue] = ["order_id": .string(order.orderId), "status": .integer(Int64(order.status ?? 4)),
                                          "order_type": .integer(Int64(order.orderType ?? 7)), "env_type": .integer(Int64(order.envType ?? 1))]
            if let v = order.wxOrderId { o["wx_order_id"] = .string(v) }
            if let v = order.channelOrderId { o["channel_order_id"] = .string(v) }
            if let v = order.wxpayOrderId { o["wxpay_order_id"] = .string(v) }
            if let v = order.paidFee { o["paid_fee"] = .integer(v) }
            if let v = order.paidTime { o["paid_time"] = .integer(v) }
            return .json(200, JSONValue.object(["errcode": 0, "errmsg": "ok", "order": .object(o)]).canonicalJSON())
        }
    }

    private func token(_ request: HTTPRequest, _ body: JSONValue) -> HTTPResponse {
        guard body.text("grant_type") == "client_credential" else {
            record(request, refusal: "grant_type must be client_credential")
            return errcode(40002, "invalid grant_type")
        }
        guard body.text("appid") == appId else {
            record(request, refusal: "appid is not this mini program's")
            return errcode(40013, "invalid appid")
        }
        guard body.text("secret") == appSecret else {
            record(request, refusal: "secret is wrong")
            return errcode(40001, "invalid credential, access_token is invalid or not latest")
        }
        let token = state.withLock { s -> String in
            if body["force_refresh"] == .bool(true) || !s.token.hasPrefix("fake-token-") {
                s.tokenSerial += 1
                s.token = "fake-token-\(s.tokenSerial)"
            }
            return s.token
        }
        record(request, refusal: nil)
        return .json(200, JSONValue.object(["access_token": .string(token), "expires_in": 7200]).canonicalJSON())
    }

    private func errcode(_ code: Int64, _ message: String) -> HTTPResponse {
        .json(200, JSONValue.object(["errcode": .integer(code), "errmsg": .string(message)]).canonicalJSON())
    }

    private func record(_ request: HTTPRequest, refusal: String?) {
        state.withLock { $0.seen.append(Seen(path: request.path, query: request.query, body: request.body, refusal: refusal)) }
    }
}

private final class FakeWeChatBox: @unchecked Sendable {
    weak var fake: FakeWeChatAPI?
}
