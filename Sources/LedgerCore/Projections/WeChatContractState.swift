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
        /// Where `autoRenewStatus` comes from (`AutoRenewBasis`); WeChat's own answer has no such
        /// member, the ledger's names it because it may be a default.
        public var autoRenewStatusBasis: String?

        public init(originalTransactionId: String, autoRenewStatus: Int?, recentSubscriptionStartDate: EpochMillis?,
                    renewalDate: EpochMillis?, autoRenewStatusBasis: String? = nil) {
            self.autoRenewStatusBasis = autoRenewStatusBasis
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
            case autoRenewStatusBasis = "auto_renew_status_basis"
        }
    }

    /// Why `auto_renew_status` has the value stated (the answer always states one, as WeChat's does):
    public enum AutoRenewBasis {
        /// The contract's latest statement (signing, delivery, unsigning or contract answer) states it.
        public static let stated = "stated"
        /// The latest statement does not (a delivery without AutoRenewStatus): the latest that does.
        public static let latestStatement = "latest_statement"
        /// No message states it: 1, since a contract renews from its signing until it is unsigned
        /// (seed 000 §4.2: the signing result opens the relation; §4.4: unsigning turns it off).
        public static let defaultSigned = "default_signed"
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
    public static func of(openId: String, productId: String, facts: some Sequence<Fact>,
                          catalogPeriods: [String: EpochMillis] = [:]) -> WeChatContractState {
        var best: (fold: SubscriptionFold, head: Fact)?
        for fold in SubscriptionProjection(facts: facts, catalogPeriods: catalogPeriods).subscriptions.values.sorted(by: { $0.key < $1.key }) {
            // The fold's latest WeChat renewal state naming this customer and product.
            guard let head = fold.weChatContractHead(openId: openId, productId: productId) else { continue }
            if let current = best, !SubscriptionFold.renewalPrecedes(current.head, head) { continue }
            best = (fold, head)
        }
        guard let (fold, head) = best else { return WeChatContractState(authorizationState: .unbindUser) }
        var autoRenew = head.renewal?.autoRenewStatus
        var basis = AutoRenewBasis.stated
        if autoRenew == nil {
            autoRenew = fold.weChatLatestStatedAutoRenew()
            basis = autoRenew == nil ? AutoRenewBasis.defaultSigned : AutoRenewBasis.latestStatement
            if autoRenew == nil { autoRenew = 1 }
        }
        let terminated = autoRenew == 0
        return WeChatContractState(
            authorizationState: terminated ? .terminated : .signed,
            appleSubscriptionInfo: AppleSubscriptionInfo(
                originalTransactionId: fold.key.originalTransactionId,
                autoRenewStatus: autoRenew,
                recentSubscriptionStartDate: fold.weChatRunStart(at: .max),
                renewalDate: fold.latestRenewalDate, autoRenewStatusBasis: basis))
    }

    /// What `ledger reconcile --wechat` compares WeChat's answer with: the contract's head statement's
    /// RenewalDate (what the ledger's latest contract statement says, not the latest any message
    /// stated) and the last contract answer recorded for this openid and product (so an answer equal
    /// to it is not recorded again).
    public struct ReconciliationView: Sendable {
        public var state: WeChatContractState
        public var headRenewalDate: EpochMillis?
        /// The last recorded answer: (authorization_state, auto-renew, renewal_date, original_transaction_id).
        public var lastAnswer: (state: String?, autoRenew: Int?, renewalDate: EpochMillis?, originalTransactionId: String)?
    }

    public static func reconciliationView(openId: String, productId: String, facts: some Sequence<Fact>,
                                          catalogPeriods: [String: EpochMillis] = [:]) -> ReconciliationView {
        let all = Array(facts)
        let state = of(openId: openId, productId: productId, facts: all, catalogPeriods: catalogPeriods)
        var head: EpochMillis?
        if let otid = state.appleSubscriptionInfo?.originalTransactionId {
            let fold = SubscriptionProjection(facts: all, catalogPeriods: catalogPeriods).subscriptions.values.first {
                $0.key.originalTransactionId == otid && $0.weChatContractHead(openId: openId, productId: productId) != nil
            }
            head = fold?.weChatContractHead(openId: openId, productId: productId)?.renewal?.renewalDate
        }
        let last = all.filter {
            $0.origin == .wechat && $0.kind == .renewal && $0.message == XPayEventName.contractQueryAnswer
                && $0.customerId == openId && $0.renewal?.productId == productId
        }.max { a, b in a.signedAt != b.signedAt ? a.signedAt < b.signedAt : a.position < b.position }
        return ReconciliationView(
            state: state, headRenewalDate: head,
            lastAnswer: last.map { f in
                (f.details["authorization_state"]?.text, f.renewal?.autoRenewStatus, f.renewal?.renewalDate,
                 f.subscription?.originalTransactionId ?? "")
            })
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
            if let v = info.autoRenewStatusBasis { i["auto_renew_status_basis"] = .string(v) }
            o["apple_subscription_info"] = .object(i)
        }
        return JSONValue.object(o).canonicalJSON()
    }
}
