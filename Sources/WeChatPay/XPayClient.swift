import Foundation

/// `query_subscribe_contract` (mode=apple) answer.
public struct SubscribeContract: Sendable, Equatable, Codable {
    public enum AuthorizationState: String, Sendable, Equatable, Codable {
        case signed = "SIGNED"
        case terminated = "TERMINATED"
        case unbindUser = "UNBINDUSER"
    }

    public struct AppleSubscriptionInfo: Sendable, Equatable, Codable {
        public var originalTransactionId: String
        public var autoRenewStatus: Int
        /// ms
        public var recentSubscriptionStartDate: Int64?
        /// ms
        public var renewalDate: Int64?

        enum CodingKeys: String, CodingKey {
            case originalTransactionId = "original_transaction_id"
            case autoRenewStatus = "auto_renew_status"
            case recentSubscriptionStartDate = "recent_subscription_start_date"
            case renewalDate = "renewal_date"
        }

        public init(originalTransactionId: String, autoRenewStatus: Int, recentSubscriptionStartDate: Int64?, renewalDate: Int64?) {
            self.originalTransactionId = originalTransactionId
            self.autoRenewStatus = autoRenewStatus
            self.recentSubscriptionStartDate = recentSubscriptionStartDate
            self.renewalDate = renewalDate
        }
    }

    public var authorizationState: AuthorizationState
    public var appleSubscriptionInfo: AppleSubscriptionInfo?

    enum CodingKeys: String, CodingKey {
        case authorizationState = "authorization_state"
        case appleSubscriptionInfo = "apple_subscription_info"
    }

    public init(authorizationState: AuthorizationState, appleSubscriptionInfo: AppleSubscriptionInfo?) {
        self.authorizationState = authorizationState
        self.appleSubscriptionInfo = appleSubscriptionInfo
    }
}

public enum XPayClientError: Error, Equatable, CustomStringConvertible {
    /// WeChat answered with a non-zero errcode.
    case wechat(errcode: Int64, errmsg: String)
    case http(status: Int)
    case transport(String)
    case invalidResponse(String)
    case invalidRequest(String)
    /// `cgi-bin/stable_token` refused to issue a token.
    case accessToken(errcode: Int64, errmsg: String)

    public var code: String {
        switch self {
        case .wechat: return "wechat_errcode"
        case .http: return "wechat_http_status"
        case .transport: return "wechat_unreachable"
        case .invalidResponse: return "wechat_invalid_response"
        case .invalidRequest: return "wechat_invalid_request"
        case .accessToken: return "wechat_access_token"
        }
    }

    public var message: String {
        switch self {
        case .wechat(let c, let m):
            let hint: String
            switch c {
            case 268490003: hint = "pay_sig is wrong: check LEDGER_WECHAT_APP_KEY (production AppKey; Apple has no sandbox) and that the body sent is the body signed"
            case 268490009: hint = "the user's session_key is missing or expired: have the mini program log in again"
            case 268490001: hint = "openid is not a user of this mini program"
            case 268490002: hint = "a parameter is invalid; see errmsg"
            case 268490015: hint = "rate limited; retry later"
            case 40001, 42001, 40014: hint = "access_token is invalid or expired: fetch a new one"
            case -1: hint = "WeChat system error; retry later"
            default: hint = "see the xpay error code table"
            }
            return "WeChat answered errcode \(c) (\(m)): \(hint)"
        case .http(let s): return "WeChat answered HTTP \(s); retry later"
        case .transport(let why): return "could not reach the WeChat API: \(why)"
        case .invalidResponse(let why): return "WeChat's answer could not be read: \(why)"
        case .invalidRequest(let why): return why
        case .accessToken(let c, let m):
            let hint: String
            switch c {
            case 40001, 40125: hint = "the AppSecret is wrong: set LEDGER_WECHAT_APP_SECRET to the mini program's AppSecret"
            case 40013: hint = "the AppID is wrong: check LEDGER_WECHAT_APPID"
            case 40243: hint = "the AppSecret is frozen: unfreeze or reset it in the MP admin"
            case 40164: hint = "this server's IP is not on the mini program's API IP whitelist"
            case 45009: hint = "the daily token quota is used up; retry tomorrow"
            case -1: hint = "WeChat is busy; retry later"
            default: hint = "see the stable_token error codes"
            }
            return "WeChat refused an access token: errcode \(c) (\(m)): \(hint)"
        }
    }

    public var description: String { message }
}

/// The answer of `query_subscribe_contract` (asked by `WeChatServerAPI.subscribeContract`).
extension SubscribeContract {
    public static func decode(status: Int, body: Data) throws(XPayClientError) -> SubscribeContract {
        guard (200..<300).contains(status) else { throw .http(status: status) }
        struct Header: Decodable {
            var errcode: Int64?
            var errmsg: String?
        }
        guard let header = try? JSONDecoder().decode(Header.self, from: body) else {
            throw .invalidResponse("not a JSON object")
        }
        if let code = header.errcode, code != 0 { throw .wechat(errcode: code, errmsg: String((header.errmsg ?? "").prefix(200))) }
        do {
            return try JSONDecoder().decode(SubscribeContract.self, from: body)
        } catch {
            throw .invalidResponse("authorization_state must be SIGNED, TERMINATED or UNBINDUSER and apple_subscription_info well-formed")
        }
    }
}
