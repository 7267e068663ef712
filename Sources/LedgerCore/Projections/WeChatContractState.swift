import Foundation

/// The answer to `GET /v1/wechat/contracts?openid=&product_id=`, shaped like WeChat's
/// `query_subscribe_contract` (mode=apple), computed from the ledger's own facts.
///
/// - `UNBINDUSER`: no signing, delivery or unsigning of that product names the openid.
/// - Otherwise the contract is the subscription (stream) of that openid and product whose latest
///   contract message has the greatest version (RenewalDate, signedDate): a re-signing after a
///   lapse wins over the old contract. It is `TERMINATED` when that message says auto-renew is off
///   (an unsigning, or a later message with AutoRenewStatus 0), `SIGNED` otherwise. A terminated
///   contract still entitles until `renewal_date`; that is the subscription state's business.
/// Like WeChat's own answer, the state does not depend on the time asked: to ask "as of T", pass
/// only the facts signed by T.
public struct WeChatContractState: Sendable, Equatable, Codable {
    public enum AuthorizationState: String, Sendable, Equatable, Codable {
        case signed = "SIGNED"
        case terminated = "TERMINATED"
        case unbindUser = "UNBINDUSER"
    }

    public struct AppleSubscriptionInfo: Sendable, Equatable, Codable {
        public var originalTransactionId: String
        public var autoRenewStatus: Int?
        public var recentSubscriptionStartDate: EpochMillis?
        public var renewalDate: EpochMillis?

        public init(originalTransactionId: String, autoRenewStatus: Int?, recentSubscriptionStartDate: EpochMillis?,
                    renewalDate: EpochMillis?) {
            self.originalTransactionId = originalTransactionId
            self.autoRenewStatus = autoRenewStatus
            self.recentSubscriptionStartDate = recentSubscriptionStartDate
            self.renewalDate = renewalDate
        }

        enum CodingKeys: String, CodingKey {
            case originalTransactionId = "original_transaction_id"
            case autoRenewStatus = "auto_renew_status"
            case recentSubscriptionStartDate = "recent_subscription_start_date"
            case renewalDate = "renewal_date"
        }
    }

    public var authorizationState: AuthorizationState
    /// Nil exactly when `authorizationState` is `UNBINDUSER`.
    public var appleSubscriptionInfo: AppleSubscriptionInfo?

    public init(authorizationState: AuthorizationState, appleSubscriptionInfo: AppleSubscriptionInfo? = nil) {
        self.authorizationState = authorizationState
        self.appleSubscriptionInfo = appleSubscriptionInfo
    }

    enum CodingKeys: String, CodingKey {
        case authorizationState = "authorization_state"
        case appleSubscriptionInfo = "apple_subscription_info"
    }

    /// The contract of `openId` for `productId` among `facts` (the facts of every subscription that
    /// openid appears in; facts of other customers or products are ignored, as are Apple facts).
    /// Order-independent.
    public static func of(openId: String, productId: String, facts: some Sequence<Fact>) -> WeChatContractState {
        var best: (fold: SubscriptionFold, head: Fact)?
        for fold in SubscriptionProjection(facts: facts).subscriptions.values.sorted(by: { $0.key < $1.key }) {
            // The fold's latest WeChat renewal state naming this customer and product.
            guard let head = fold.weChatContractHead(openId: openId, productId: productId) else { continue }
            if let current = best, !SubscriptionFold.renewalPrecedes(current.head, head) { continue }
            best = (fold, head)
        }
        guard let (fold, head) = best else { return WeChatContractState(authorizationState: .unbindUser) }
        let autoRenew = head.renewal?.autoRenewStatus
        let terminated = autoRenew == 0
        return WeChatContractState(
            authorizationState: terminated ? .terminated : .signed,
            appleSubscriptionInfo: AppleSubscriptionInfo(
                originalTransactionId: fold.key.originalTransactionId,
                autoRenewStatus: autoRenew,
                recentSubscriptionStartDate: fold.weChatRunStart(at: .max),
                renewalDate: fold.latestRenewalDate))
    }

    /// The body `query_subscribe_contract` would send: `errcode` 0, `errmsg` "ok", the state and,
    /// unless UNBINDUSER, `apple_subscription_info`. Sorted keys, so equal states give equal bytes.
    public func responseJSON() -> Data {
        var o: [String: JSONValue] = [
            "errcode": .integer(0), "errmsg": .string("ok"),
            "authorization_state": .string(authorizationState.rawValue),
        ]
        if let info = appleSubscriptionInfo {
            var i: [String: JSONValue] = ["original_transaction_id": .string(info.originalTransactionId)]
            if let v = info.autoRenewStatus { i["auto_renew_status"] = .integer(Int64(v)) }
            if let v = info.recentSubscriptionStartDate { i["recent_subscription_start_date"] = .integer(v) }
            if let v = info.renewalDate { i["renewal_date"] = .integer(v) }
            o["apple_subscription_info"] = .object(i)
        }
        return JSONValue.object(o).canonicalJSON()
    }
}
