import XCTest
@testable import LedgerCore

/// Hand-written subscription histories for the unit tests: day numbers instead of timestamps.
enum Fixture {
    static let base: EpochMillis = 1_735_689_600_000  // 2025-01-01T00:00:00Z
    static let dayMs: EpochMillis = 86_400_000
    static let sub = "2000000000001"
    static let customer = "7d8f0c52-9a43-4b7e-a0a4-1f9a2c3e4b5d"
    static let monthly = "com.example.monthly"
    static let yearly = "com.example.yearly"
    static let premium = "com.example.premium.monthly"

    static let catalog = ProductCatalog(entitlementsByProduct: [
        monthly: ["basic"], yearly: ["basic"], premium: ["basic", "premium"],
    ])

    static func d(_ days: Double) -> EpochMillis { base + EpochMillis(days * Double(dayMs)) }

    static func tx(
        _ id: String, _ product: String = monthly, from: Double, to: Double, signed: Double,
        revoked: Double? = nil, upgraded: Bool = false, token: String? = customer
    ) -> TransactionFact {
        TransactionFact(
            transactionId: id, originalTransactionId: sub, webOrderLineItemId: "w\(id)", bundleId: "com.example.app",
            productId: product, purchaseDate: d(from), expiresDate: d(to), signedDate: d(signed),
            revocationDate: revoked.map(d), revocationReason: revoked == nil ? nil : 0,
            revocationType: revoked == nil ? nil : "REFUND_FULL", revocationPercentage: revoked == nil ? nil : 100_000,
            isUpgraded: upgraded, price: 4_990, currency: "USD", appAccountToken: token, environment: "Sandbox",
            type: "Auto-Renewable Subscription", inAppOwnershipType: "PURCHASED")
    }

    static func renewal(
        _ product: String = monthly, next: String? = nil, autoRenew: Int = 1, intent: Int? = nil,
        retry: Bool = false, grace: Double? = nil, price: Int? = nil, signed: Double
    ) -> RenewalFact {
        RenewalFact(
            productId: product, autoRenewProductId: next ?? product, autoRenewStatus: autoRenew,
            expirationIntent: intent, isInBillingRetryPeriod: retry, gracePeriodExpiresDate: grace.map(d),
            priceIncreaseStatus: price, signedDate: d(signed))
    }

    static func fact(
        _ type: String, _ subtype: String? = nil, signed: Double, tx: TransactionFact?, renewal: RenewalFact?,
        status: Int? = nil, position: Int64 = 0, recorded: Double? = nil
    ) -> SubscriptionFact {
        SubscriptionFact(
            position: position, recordedAt: d(recorded ?? signed), source: .appleNotification,
            originalTransactionId: sub, notificationType: type, subtype: subtype, signedDate: d(signed),
            status: status, bundleId: "com.example.app", environment: "Sandbox", transaction: tx, renewal: renewal)
    }

    /// A monthly subscription bought on day 0 and renewed on day 30 (tx "t1" 0–30, "t2" 30–60).
    static func renewedTwice() -> [SubscriptionFact] {
        [
            fact("SUBSCRIBED", "INITIAL_BUY", signed: 0, tx: tx("t1", from: 0, to: 30, signed: 0), renewal: renewal(signed: 0)),
            fact("DID_RENEW", signed: 29.8, tx: tx("t2", from: 30, to: 60, signed: 29.8), renewal: renewal(signed: 29.8)),
        ]
    }

    static func state(_ facts: [SubscriptionFact], at day: Double) -> SubscriptionState? {
        SubscriptionProjection(facts: facts).view(at: d(day)).subscription(sub)
    }

    static func grants(_ facts: [SubscriptionFact], at day: Double) -> [EntitlementGrant] {
        SubscriptionProjection(facts: facts).view(at: d(day)).entitlements(catalog: catalog, customerId: customer)
    }

    /// Every permutation of up to 7 facts (each with positions re-assigned in arrival order) must
    /// fold to the same states, transactions and grants as the given order.
    static func assertOrderIndependent(
        _ facts: [SubscriptionFact], at days: [Double], file: StaticString = #filePath, line: UInt = #line
    ) {
        precondition(facts.count <= 7, "all permutations of more than 7 facts is too slow for a unit test")
        let reference = days.map { snapshot(facts, at: $0) }
        for order in permutations(Array(facts.indices)) {
            let arrived = order.enumerated().map { i, index in
                var f = facts[index]
                f.position = Int64(i + 1)
                return f
            }
            for (k, day) in days.enumerated() where snapshot(arrived, at: day) != reference[k] {
                XCTFail("order \(order) folds differently at day \(day)", file: file, line: line)
                return
            }
        }
    }

    struct Snapshot: Equatable {
        var state: SubscriptionState?
        var transactions: [TransactionRecord]
        var grants: [EntitlementGrant]
    }

    static func snapshot(_ facts: [SubscriptionFact], at day: Double) -> Snapshot {
        let view = SubscriptionProjection(facts: facts).view(at: d(day))
        return Snapshot(state: view.subscription(sub), transactions: view.transactions,
                        grants: view.entitlements(catalog: catalog))
    }

    static func permutations(_ items: [Int]) -> [[Int]] {
        if items.count <= 1 { return [items] }
        var result: [[Int]] = []
        for (i, item) in items.enumerated() {
            var rest = items
            rest.remove(at: i)
            for tail in permutations(rest) { result.append([item] + tail) }
        }
        return result
    }
}
