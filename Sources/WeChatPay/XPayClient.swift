import Foundation
import LedgerCore

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
        /// False when WeChat's answer left `auto_renew_status` out and `autoRenewStatus` is the
        /// default its authorization state implies (`decode`).
        public var autoRenewStatusStated: Bool = true

        enum CodingKeys: String, CodingKey {
            case originalTransactionId = "original_transaction_id"
            case autoRenewStatus = "auto_renew_status"
            case recentSubscriptionStartDate = "recent_subscription_start_date"
            case renewalDate = "renewal_date"
        }

        public init(originalTransactionId: String, autoRenewStatus: Int, recentSubscriptionStartDate: Int64?, renewalDate: Int64?,
                    autoRenewStatusStated: Bool = true) {
            self.autoRenewStatusStated = autoRenewStatusStated
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
    /// WeChat's answer, read as leniently as its meaning allows (seed 000 §6.3): `auto_renew_status`
    /// may be missing or a string ("1"); `apple_subscription_info` may be missing, null or empty
    /// (`{}`, then nil: the answer names no subscription). A missing auto-renew is 0 when the
    /// contract is TERMINATED (已解约: nothing renews) and 1 when SIGNED (签约生效中: the contract
    /// renews); `autoRenewStatusStated` says which. Refused: a non-2xx status, a non-zero errcode,
    /// anything but SIGNED/TERMINATED/UNBINDUSER, an info whose id is not a string, or an
    /// auto-renew that is neither 0 nor 1.
    public static func decode(status: Int, body: Data) throws(XPayClientError) -> SubscribeContract {
        guard (200..<300).contains(status) else { throw .http(status: status) }
        guard let value = try? JSONDecoder().decode(JSONValue.self, from: body), value.objectValue != nil else {
            throw .invalidResponse("not a JSON object")
        }
        if let code = value.int64("errcode"), code != 0 {
            throw .wechat(errcode: code, errmsg: String((value.text("errmsg") ?? "").prefix(200)))
        }
        guard let stateText = value.text("authorization_state"), let state = AuthorizationState(rawValue: stateText) else {
            throw .invalidResponse("authorization_state must be SIGNED, TERMINATED or UNBINDUSER")
        }
        var info: AppleSubscriptionInfo?
        switch value["apple_subscription_info"] {
        case nil, .null?: break
        case .object(let o)? where o.isEmpty: break
        case .object(let o)?:
            guard case .string(let otid)? = o["original_transaction_id"], !otid.isEmpty else {
                throw .invalidResponse("apple_subscription_info.original_transaction_id must be a non-empty string")
            }
            var autoRenew = state == .terminated ? 0 : 1
            var stated = false
            if let v = o["auto_renew_status"], v != .null {
                guard let n = v.int64, n == 0 || n == 1 else {
                    throw .invalidResponse("apple_subscription_info.auto_renew_status must be 0 or 1 (a number or its text)")
                }
                autoRenew = Int(n)
                stated = true
            }
            // TERMINATED means nothing renews, whatever a stale auto_renew_status says.
            if state == .terminated { autoRenew = 0 }
            func millis(_ key: String) throws(XPayClientError) -> Int64? {
                guard let v = o[key], v != .null else { return nil }
                guard let n = v.int64 else { throw .invalidResponse("apple_subscription_info.\(key) must be a millisecond time") }
                return n > 0 ? n : nil
            }
            info = AppleSubscriptionInfo(originalTransactionId: otid, autoRenewStatus: autoRenew,
                                         recentSubscriptionStartDate: try millis("recent_subscription_start_date"),
                                         renewalDate: try millis("renewal_date"), autoRenewStatusStated: stated)
        default:
            throw .invalidResponse("apple_subscription_info must be an object")
        }
        return SubscribeContract(authorizationState: state, appleSubscriptionInfo: info)
    }
}
