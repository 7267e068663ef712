import Foundation
import LedgerCore

// The differential test's oracle: what a lifecycle's own script says the subscription is at an
// instant. It is written from the rules of issue 9 (item 3) and Apple's and WeChat's documents,
// straight from the scripted world (which transaction the script bought when, what it refunded,
// when it turned auto-renew off), never from the notifications and never through the ledger's
// fold or decoders: `SubscriptionFold`, `SubscriptionProjection` and `FactDecoder` are not used
// anywhere under Differential/.

public enum DiffTime {
    static let second: EpochMillis = 1000
    static let minute: EpochMillis = 60_000
    static let hour: EpochMillis = 3_600_000
    static let day: EpochMillis = 86_400_000
    /// Apple retries a failed renewal for at most 60 days.
    static let billingRetryLimit: EpochMillis = 60 * day

    /// ISO 8601 UTC with milliseconds (CivilTime: a formatter per call was a third of the
    /// generator's time on Linux).
    public static func iso(_ t: EpochMillis) -> String {
        guard let c = CivilTime(epochMillis: t) else { return String(t) }
        let p = CivilTime.padded
        return "\(p(c.year, 4))-\(p(c.month, 2))-\(p(c.day, 2))T\(p(c.hour, 2)):\(p(c.minute, 2)):\(p(c.second, 2)).\(p(c.millisecond, 3))Z"
    }
}

/// The fields of `GET /v1/subscriptions/{id}` the model predicts.
public struct ExpectedSubscription: Sendable, Equatable, CustomStringConvertible {
    public var status: String
    public var productId: String?
    public var expiresDate: EpochMillis?
    public var autoRenewStatus: Int?
    public var customerId: String?
    public var latestTransactionId: String?

    public init(status: String, productId: String?, expiresDate: EpochMillis?, autoRenewStatus: Int?,
                customerId: String?, latestTransactionId: String?) {
        self.status = status
        self.productId = productId
        self.expiresDate = expiresDate
        self.autoRenewStatus = autoRenewStatus
        self.customerId = customerId
        self.latestTransactionId = latestTransactionId
    }

    /// Field by field, in a fixed order, for precise mismatch reports.
    public var fields: [(String, String)] {
        [("status", status), ("productId", productId ?? "null"),
         ("expiresDate", expiresDate.map { "\($0) (\(DiffTime.iso($0)))" } ?? "null"),
         ("autoRenewStatus", autoRenewStatus.map(String.init) ?? "null"), ("customer", customerId ?? "null"),
         ("latestTransactionId", latestTransactionId ?? "null")]
    }

    public var description: String { fields.map { "\($0.0)=\($0.1)" }.joined(separator: " ") }
}

/// One entitlement the model expects a customer to hold (default catalog: a product grants an
/// entitlement named after its productId).
public struct ExpectedGrant: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var environment: String
    public var entitlement: String
    public var productId: String
    public var originalTransactionId: String
    public var status: String
    public var expiresDate: EpochMillis?

    public init(environment: String, entitlement: String, productId: String, originalTransactionId: String,
                status: String, expiresDate: EpochMillis?) {
        self.environment = environment
        self.entitlement = entitlement
        self.productId = productId
        self.originalTransactionId = originalTransactionId
        self.status = status
        self.expiresDate = expiresDate
    }

    public static func < (a: ExpectedGrant, b: ExpectedGrant) -> Bool { a.description < b.description }

    public var description: String {
        "\(environment)/\(originalTransactionId):\(entitlement)[\(productId), \(status), until \(expiresDate.map(String.init) ?? "-")]"
    }
}

// MARK: - Apple

/// One scripted Apple subscription (or one-time purchase): every transaction the script bought,
/// what happened to each, and the renewal state over time.
struct AppleWorld: Sendable {
    enum Kind: Sendable, Equatable { case autoRenewable, nonConsumable, consumable }

    struct Revocation: Sendable {
        /// When Apple signed the REFUND / REVOKE (V1: the body's business time).
        var signedAt: EpochMillis
        /// When access ended (revocationDate / cancellation_date_ms).
        var date: EpochMillis
        var type: String
    }

    struct ExpiryChange: Sendable {
        var at: EpochMillis
        var expires: EpochMillis
    }

    struct Tx: Sendable {
        var id: String
        var productId: String
        var kind: Kind
        var purchase: EpochMillis
        /// The expiry as first sold, then each RENEWAL_EXTENDED (when signed, new expiry).
        var expiries: [ExpiryChange]
        var revocations: [Revocation] = []
        /// When Apple signed each REFUND_REVERSED.
        var reversals: [EpochMillis] = []
        var upgradedAt: EpochMillis?
        /// A renewal Apple charged before an upgrade inside the 24-hour pre-charge window: never
        /// in effect (the upgrade covers its period), though Apple never marks it isUpgraded.
        var supersededByUpgrade = false
        var offerType: Int?
        var offerId: String?
        var reason: String
        /// REFUNDs of it that were never delivered (the ledger must still open a refund case).
        var lostRefunds = 0

        /// The expiry as the ledger knows it now (the last extension).
        var finalExpires: EpochMillis? { expiries.last?.expires }
        func expires(asOf t: EpochMillis) -> EpochMillis? { expiries.last { $0.at <= t }?.expires ?? expiries.first?.expires }

        /// Issue 9 item 3: revoked iff the latest REFUND/REVOKE in effect at T (its revocation date
        /// has come) was signed later than every REFUND_REVERSED signed by T.
        func isRevoked(at t: EpochMillis) -> Bool {
            guard let last = revocations.filter({ $0.date <= t }).max(by: { $0.signedAt < $1.signedAt }) else { return false }
            return !reversals.contains { $0 <= t && $0 >= last.signedAt }
        }

        /// What a snapshot of this transaction signed at `t` says about its revocation (Apple
        /// states the revocation in force when it signs).
        func revocationAsSigned(at t: EpochMillis) -> Revocation? {
            guard let last = revocations.filter({ $0.signedAt <= t }).max(by: { $0.signedAt < $1.signedAt }) else { return nil }
            return reversals.contains { $0 <= t && $0 >= last.signedAt } ? nil : last
        }
    }

    /// The renewal state Apple reports (JWSRenewalInfo) from `at` until the next change.
    struct Renewal: Sendable, Equatable {
        var autoRenewStatus: Int
        var autoRenewProductId: String
        var retry = false
        var graceEnd: EpochMillis?
        var expirationIntent: Int?
        var offerType: Int?
        var offerId: String?
        var priceIncrease: Int?
    }

    struct RenewalChange: Sendable {
        var at: EpochMillis
        var state: Renewal
    }

    /// A failed renewal of `txId`: Apple said so (renewal info signed) at `failAt`; access
    /// continues until `graceEnd` when a grace period is configured.
    struct Billing: Sendable {
        var txId: String
        var failAt: EpochMillis
        var graceEnd: EpochMillis?
    }

    var environment: String
    var originalTransactionId: String
    /// The appAccountToken as Apple (or the script) spells it; customers are lowercase.
    var token: String?
    var transactions: [Tx] = []
    var renewals: [RenewalChange] = []
    var billing: [Billing] = []

    var customerId: String? { token?.lowercased() }

    func index(of txId: String) -> Int? { transactions.firstIndex { $0.id == txId } }

    /// The transaction in effect at T: the latest purchased by T, but renewals an upgrade
    /// superseded (charged before it, issue 20 rule 2). (The script never buys two at one instant,
    /// and an upgrade always buys later than what it replaces.)
    func current(at t: EpochMillis) -> Tx? {
        transactions.filter { $0.purchase <= t && !$0.supersededByUpgrade }.max { $0.purchase < $1.purchase }
    }

    /// The renewal state Apple had signed last by T (changes are recorded in time order).
    func renewal(at t: EpochMillis) -> Renewal? { renewals.last { $0.at <= t }?.state }

    func expected(at t: EpochMillis) -> ExpectedSubscription? {
        guard let tx = current(at: t) else { return nil }
        let status: String
        if tx.isRevoked(at: t) {
            // The transaction in effect was refunded/revoked: an older, unexpired period does not take over.
            status = "revoked"
        } else {
            switch tx.kind {
            case .nonConsumable: status = "active"  // lifetime, until refunded
            case .consumable: status = "purchased"  // nothing lasting
            case .autoRenewable:
                let expires = tx.finalExpires!
                if t < expires {
                    status = "active"
                } else if let b = billing.first(where: { $0.txId == tx.id }), b.failAt <= t, t < expires + DiffTime.billingRetryLimit {
                    status = b.graceEnd.map { t < $0 } == true ? "grace_period" : "billing_retry"
                } else {
                    status = "expired"
                }
            }
        }
        return ExpectedSubscription(
            status: status, productId: tx.productId, expiresDate: tx.kind == .autoRenewable ? tx.finalExpires : nil,
            autoRenewStatus: renewal(at: t)?.autoRenewStatus, customerId: customerId, latestTransactionId: tx.id)
    }

    /// Until when an entitled state lasts (the grace end in a grace period).
    func entitledUntil(_ e: ExpectedSubscription, at t: EpochMillis) -> EpochMillis? {
        if e.status == "grace_period", let tx = current(at: t), let b = billing.first(where: { $0.txId == tx.id }) {
            return b.graceEnd
        }
        return e.expiresDate
    }
}

// MARK: - WeChat

/// One scripted WeChat xpay Apple subscription: the contract's signings and unsignings, the paid
/// orders (deliveries), and refunds of orders.
struct WeChatWorld: Sendable {
    struct Order: Sendable {
        var id: String
        var productId: String
        /// WeChatPayInfo.PaidTime (whole seconds).
        var paid: EpochMillis
        /// AppleSubscriptionInfo.RenewalDate: the end of the period the order paid.
        var renewalDate: EpochMillis
        /// RefundSuccTimestamp of a successful refund.
        var refundedAt: EpochMillis?
    }

    struct Signing: Sendable {
        var at: EpochMillis
        var renewalDate: EpochMillis
        var productId: String
    }

    struct ContractChange: Sendable {
        var at: EpochMillis
        var autoRenew: Int
    }

    var originalTransactionId: String
    var openId: String
    var orders: [Order] = []
    var signings: [Signing] = []
    /// The contract's auto-renew state over time (signing → 1, each paid renewal → 1, unsigning → 0).
    var contract: [ContractChange] = []

    /// WeChat opens the benefit on signing, and each delivery is a paid period from its PaidTime to
    /// its RenewalDate; a refund ends the refunded order's benefit from the refund's time.
    func expected(at t: EpochMillis) -> ExpectedSubscription? {
        let order = orders.filter { $0.paid <= t }.max { $0.paid < $1.paid }
        // A signing is the period itself only until a delivery has paid that period (by T).
        let paidByT = Set(orders.filter { $0.paid <= t }.map(\.renewalDate))
        let signing = signings.filter { $0.at <= t && !paidByT.contains($0.renewalDate) }.max { $0.at < $1.at }
        let autoRenew = contract.filter { $0.at <= t }.max { $0.at < $1.at }?.autoRenew
        if let s = signing, order.map({ s.at > $0.paid }) ?? true {
            return ExpectedSubscription(
                status: t < s.renewalDate ? "active" : "expired", productId: s.productId, expiresDate: s.renewalDate,
                autoRenewStatus: autoRenew, customerId: openId, latestTransactionId: nil)
        }
        guard let order else { return nil }
        let status: String
        if let r = order.refundedAt, r <= t {
            status = "revoked"
        } else {
            status = t < order.renewalDate ? "active" : "expired"
        }
        return ExpectedSubscription(
            status: status, productId: order.productId, expiresDate: order.renewalDate,
            autoRenewStatus: autoRenew, customerId: openId, latestTransactionId: order.id)
    }
}

enum DiffModel: Sendable {
    case apple(AppleWorld)
    case wechat(WeChatWorld)

    func expected(at t: EpochMillis) -> ExpectedSubscription? {
        switch self {
        case .apple(let w): w.expected(at: t)
        case .wechat(let w): w.expected(at: t)
        }
    }

    func grants(at t: EpochMillis, environment: String, originalTransactionId: String) -> [ExpectedGrant] {
        guard let e = expected(at: t), e.status == "active" || e.status == "grace_period", e.customerId != nil,
              let product = e.productId else { return [] }
        let until: EpochMillis?
        switch self {
        case .apple(let w): until = w.entitledUntil(e, at: t)
        case .wechat: until = e.expiresDate
        }
        return [ExpectedGrant(environment: environment, entitlement: product, productId: product,
                              originalTransactionId: originalTransactionId, status: e.status, expiresDate: until)]
    }
}
