import Foundation

extension WeChatContractState {
    /// Whose contract for which product a fact speaks of: the (openid, product) of a WeChat renewal
    /// statement (a signing, a delivery's renewal, an unsigning, a contract answer), the facts
    /// `SubscriptionFold.weChatContractHead` ranks. A subscription with such a fact is a candidate
    /// for that contract in `of(openId:productId:facts:)`; a subscription without one never is,
    /// so the contract projection (LedgerStore) refolds a contract from its candidates' facts only.
    public struct Party: Sendable, Hashable, Comparable {
        public var openId: String
        public var productId: String

        public init(openId: String, productId: String) {
            self.openId = openId
            self.productId = productId
        }

        public static func < (a: Party, b: Party) -> Bool { (a.openId, a.productId) < (b.openId, b.productId) }
    }

    /// The party `fact` names, when it is a WeChat renewal statement.
    public static func party(of fact: Fact) -> Party? {
        guard fact.origin == .wechat, fact.kind == .renewal, let openId = fact.customerId, let productId = fact.renewal?.productId else {
            return nil
        }
        return Party(openId: openId, productId: productId)
    }
}
