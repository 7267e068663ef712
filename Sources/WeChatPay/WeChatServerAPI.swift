import Foundation
import LedgerCore
import LedgerMetrics
import Outbound
import Synchronization

/// Which id a `query_order` names: the developer's order id (OutTradeNo, `order_id`) or WeChat's
/// (`wx_order_id`, a refund's WxOrderId).
public enum XPayOrderReference: Sendable, Equatable {
    case orderId(String)
    case wxOrderId(String)

    public var parameter: String {
        switch self {
        case .orderId: "order_id"
        case .wxOrderId: "wx_order_id"
        }
    }

    public var id: String {
        switch self {
        case .orderId(let id), .wxOrderId(let id): id
        }
    }
}

/// The `order` of a `query_order` answer (wechat-server-api.md §3.2). Amounts in fen, times in s.
public struct XPayOrder: Sendable, Equatable, Decodable {
    public var orderId: String
    public var wxOrderId: String?
    public var status: Int?
    public var orderType: Int?
    public var paidFee: Int64?
    public var paidTime: Int64?
    public var createTime: Int64?
    public var provideTime: Int64?
    /// 1 production, 2 sandbox (not `env`'s encoding).
    public var envType: Int?
    /// The WeChat Pay merchant number (a delivery's WeChatPayInfo.MchOrderNo).
    public var channelOrderId: String?
    /// The WeChat Pay transaction id (a delivery's WeChatPayInfo.TransactionId).
    public var wxpayOrderId: String?

    enum CodingKeys: String, CodingKey {
        case orderId = "order_id", wxOrderId = "wx_order_id", status, orderType = "order_type", paidFee = "paid_fee"
        case paidTime = "paid_time", createTime = "create_time", provideTime = "provide_time", envType = "env_type"
        case channelOrderId = "channel_order_id", wxpayOrderId = "wxpay_order_id"
    }

    public init(orderId: String, wxOrderId: String? = nil, status: Int? = nil, orderType: Int? = nil, paidFee: Int64? = nil,
                paidTime: Int64? = nil, createTime: Int64? = nil, provideTime: Int64? = nil, envType: Int? = nil,
                channelOrderId: String? = nil, wxpayOrderId: String? = nil) {
        self.orderId = orderId
        self.wxOrderId = wxOrderId
        self.status = status
        self.orderType = orderType
        self.paidFee = paidFee
        self.paidTime = paidTime
        self.createTime = createTime
        self.provideTime = provideTime
        self.envType = envType
        self.channelOrderId = channelOrderId
        self.wxpayOrderId = wxpayOrderId
    }
}

/// Where and as whom the ledger calls WeChat's server API. Secrets never print.
public struct WeChatServerAPIConfiguration: Sendable, CustomStringConvertible {
    public var baseURL: URL
    public var appId: String
    public var appSecret: String
    /// The production AppKey (Apple payments have no sandbox), for `pay_sig`.
    public var appKey: String
    /// `baseURL` may be plain http to a loopback fake (tests; `LEDGER_OUTBOUND_ALLOW_PLAIN_HTTP_LOOPBACK`).
    public let allowsPlainHTTPLoopback: Bool
    /// Per HTTP attempt.
    public var timeout: Duration = .seconds(5)

    public init(baseURL: URL, appId: String, appSecret: String, appKey: String, allowsPlainHTTPLoopback: Bool = false) throws(XPayClientError) {
        self.allowsPlainHTTPLoopback = allowsPlainHTTPLoopback
        self.baseURL = baseURL
        guard !appId.isEmpty else { throw .invalidRequest("the AppID is required (LEDGER_WECHAT_APPID)") }
        guard !appSecret.isEmpty else { throw .invalidRequest("the AppSecret is required (LEDGER_WECHAT_APP_SECRET)") }
        guard !appKey.isEmpty else { throw .invalidRequest("the xpay AppKey is required for pay_sig (LEDGER_WECHAT_APP_KEY)") }
        self.appId = appId
        self.appSecret = appSecret
        self.appKey = appKey
        // The access token and pay_sig travel in the query, the AppSecret in stable_token's body.
        do { try outboundTarget.validate() } catch { throw .invalidRequest(error.message) }
    }

    /// The outbound target `wechat_api`.
    public var outboundTarget: OutboundTarget {
        OutboundTarget(name: "wechat_api", baseURL: baseURL, setting: "LEDGER_WECHAT_API_BASE_URL",
                       allowsPlainHTTPLoopback: allowsPlainHTTPLoopback, timeout: timeout)
    }

    public var description: String {
        "WeChatServerAPIConfiguration(baseURL: \(baseURL), appId: \(appId), appSecret: redacted, appKey: redacted)"
    }
}

/// WeChat's server API as the ledger uses it for reconciliation: an access token from
/// `cgi-bin/stable_token` (normal mode: every instance gets the same token, so several ledgers
/// never revoke each other's; cached until five minutes before it expires), then
/// `query_subscribe_contract` and `query_order`, each body serialised once and `pay_sig` computed
/// over those exact bytes. A token WeChat calls invalid or expired (40001, 42001, 40014) is fetched
/// again and the call retried once; a busy answer (-1) or an HTTP 5xx is retried twice with backoff.
public final class WeChatServerAPI: Sendable, CustomStringConvertible {
    public let configuration: WeChatServerAPIConfiguration
    /// The one outbound client, target `wechat_api` (https only; redirects never followed).
    let http: OutboundClient
    let clock: @Sendable () -> EpochMillis
    /// How the client waits between retries; tests may record instead of sleeping.
    let sleep: @Sendable (Duration) async -> Void
    private let token = Mutex<(value: String, expiresAt: EpochMillis)?>(nil)
    private let counters = Mutex<[String: Int]>([:])

    public init(configuration: WeChatServerAPIConfiguration, metrics: MetricsRegistry? = nil,
                clock: @escaping @Sendable () -> EpochMillis = { EpochMillis(Date().timeIntervalSince1970 * 1000) },
                sleep: @escaping @Sendable (Duration) async -> Void = { try? await Task.sleep(for: $0) }) {
        self.configuration = configuration
        http = OutboundClient(target: configuration.outboundTarget, metrics: metrics)
        self.clock = clock
        self.sleep = sleep
    }

    public var description: String { "WeChatServerAPI(\(configuration))" }

    /// Calls made by endpoint (`stable_token`, `query_subscribe_contract`, `query_order`).
    public var calls: [String: Int] { counters.withLock { $0 } }

    /// One answer with the exact bytes WeChat sent and when the ledger asked.
    public struct Answer<Value: Sendable>: Sendable {
        public var value: Value
        public var body: Data
        public var askedAt: EpochMillis
    }

    // MARK: access token

    /// The cached token, or a fresh one from `cgi-bin/stable_token` (normal mode, never
    /// `force_refresh`: that revokes the token for every other instance and is limited to 20 a day).
    public func accessToken(refresh: Bool = false) async throws(XPayClientError) -> String {
        let now = clock()
        if !refresh, let cached = token.withLock({ $0 }), cached.expiresAt > now { return cached.value }
        let body = JSONValue.object([
            "grant_type": "client_credential", "appid": .string(configuration.appId),
            "secret": .string(configuration.appSecret), "force_refresh": false,
        ]).canonicalJSON()
        let request = OutboundRequest(method: "POST", path: "/cgi-bin/stable_token", headers: [("Content-Type", "application/json")], body: body)
        let (_, data) = try await send(request, endpoint: "stable_token")
        guard let v = try? JSONValue(json: data) else { throw .invalidResponse("stable_token did not answer a JSON object") }
        if let code = v.int64("errcode"), code != 0 {
            throw .accessToken(errcode: code, errmsg: String((v.text("errmsg") ?? "").prefix(200)))
        }
        guard let value = v.text("access_token"), !value.isEmpty, let expires = v.int64("expires_in"), expires > 0 else {
            throw .invalidResponse("stable_token answered without access_token and expires_in")
        }
        // Renewed five minutes early (WeChat's old and new tokens overlap by five minutes).
        let expiresAt = now + max(expires - 300, 30) * 1000
        token.withLock { $0 = (value, expiresAt) }
        return value
    }

    // MARK: xpay

    public static let querySubscribeContractURI = "/xpay/query_subscribe_contract"
    public static let queryOrderURI = "/xpay/query_order"

    /// `query_subscribe_contract` with mode=apple.
    public func subscribeContract(openId: String, productId: String) async throws(XPayClientError) -> Answer<SubscribeContract> {
        guard !openId.isEmpty, !productId.isEmpty else { throw .invalidRequest("openid and product_id are required") }
        let body = JSONValue.object(["mode": "apple", "openid": .string(openId), "product_id": .string(productId)]).canonicalJSON()
        let (data, asked) = try await call(Self.querySubscribeContractURI, body: body, endpoint: "query_subscribe_contract")
        return Answer(value: try SubscribeContract.decode(status: 200, body: data), body: data, askedAt: asked)
    }

    /// `query_order` for one order of `openId` (env 0: Apple payments are production only).
    public func order(openId: String, _ reference: XPayOrderReference, env: Int = 0) async throws(XPayClientError) -> Answer<XPayOrder> {
        guard !openId.isEmpty, !reference.id.isEmpty else { throw .invalidRequest("openid and an order id are required") }
        let body = JSONValue.object([
            "openid": .string(openId), "env": .integer(Int64(env)), reference.parameter: .string(reference.id),
        ]).canonicalJSON()
        let (data, asked) = try await call(Self.queryOrderURI, body: body, endpoint: "query_order")
        struct Envelope: Decodable { var order: XPayOrder }
        guard let envelope = try? JSONDecoder().decode(Envelope.self, from: data) else {
            throw .invalidResponse("query_order answered without an order object carrying order_id")
        }
        return Answer(value: envelope.order, body: data, askedAt: asked)
    }

    /// POSTs `body` to `uri` with the access token and `pay_sig`; returns the answer once its
    /// errcode is 0. Token errors refetch the token and retry once.
    private func call(_ uri: String, body: Data, endpoint: String) async throws(XPayClientError) -> (Data, EpochMillis) {
        var refreshed = false
        while true {
            let accessToken = try await self.accessToken(refresh: refreshed)
            let request = signedRequest(uri, body: body, accessToken: accessToken)
            let asked = clock()
            let (_, data) = try await send(request, endpoint: endpoint)
            guard let v = try? JSONValue(json: data), v.objectValue != nil else {
                throw .invalidResponse("\(endpoint) did not answer a JSON object")
            }
            let code = v.int64("errcode") ?? 0
            if code == 0 { return (data, asked) }
            if [40001, 42001, 40014].contains(code), !refreshed {
                refreshed = true
                token.withLock { $0 = nil }
                continue
            }
            throw .wechat(errcode: code, errmsg: String((v.text("errmsg") ?? "").prefix(200)))
        }
    }

    func signedRequest(_ uri: String, body: Data, accessToken: String) -> OutboundRequest {
        let sig = XPaySignature.paySig(appKey: configuration.appKey, uri: uri, body: [UInt8](body))
        // The query is escaped by the outbound client (a token's '+' arrives as '+', not a space).
        return OutboundRequest(method: "POST", path: uri, query: [("access_token", accessToken), ("pay_sig", sig)],
                               headers: [("Content-Type", "application/json")], body: body)
    }

    /// Sends with retries on transport failures, HTTP 5xx and WeChat's "busy" (-1).
    private func send(_ request: OutboundRequest, endpoint: String) async throws(XPayClientError) -> (Int, Data) {
        var attempt = 0
        while true {
            attempt += 1
            counters.withLock { $0[endpoint, default: 0] += 1 }
            let retry: XPayClientError
            do {
                let response = try await http.send(request)
                let (status, body) = (response.status, response.body)
                if (500..<600).contains(status) {
                    retry = .http(status: status)
                } else if !(200..<300).contains(status) {
                    throw XPayClientError.http(status: status)
                } else if let v = try? JSONValue(json: body), v.int64("errcode") == -1 {
                    retry = .wechat(errcode: -1, errmsg: String((v.text("errmsg") ?? "system busy").prefix(200)))
                } else {
                    return (status, body)
                }
            } catch let e as XPayClientError {
                throw e
            } catch let e as OutboundError {
                // The outbound client's errors carry no URL (the query holds the access token).
                guard e.isRetryable else { throw XPayClientError.transport(e.message) }
                retry = .transport(e.message)
            } catch {
                retry = .transport("\(type(of: error))")
            }
            if attempt >= 3 { throw retry }
            await sleep(.milliseconds(200 * attempt))
        }
    }
}
