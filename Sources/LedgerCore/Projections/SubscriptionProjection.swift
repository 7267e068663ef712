import Foundation

/// Every subscription's folded facts: the input of the subscriptions, transactions and
/// entitlements projections, and of time travel. Pure and order-independent like `SubscriptionFold`.
public struct SubscriptionProjection: Sendable {
    public private(set) var subscriptions: [String: SubscriptionFold] = [:]

    public init() {}

    public init(facts: some Sequence<SubscriptionFact>) {
        for fact in facts { apply(fact) }
    }

    public mutating func apply(_ fact: SubscriptionFact) {
        let id = fact.originalTransactionId
        if let index = subscriptions.index(forKey: id) {
            subscriptions.values[index].apply(fact)
        } else {
            var fold = SubscriptionFold(originalTransactionId: id)
            fold.apply(fact)
            subscriptions[id] = fold
        }
    }

    /// The projections as they stand for facts folded so far, status evaluated at `now`.
    public func view(at now: EpochMillis) -> ProjectionView {
        ProjectionView(projection: self, evaluatedAt: now)
    }

    /// "As of business time T": only facts the source signed at or before T, evaluated at T.
    public static func asOfBusinessTime(
        _ time: EpochMillis, facts: some Sequence<SubscriptionFact>
    ) -> ProjectionView {
        SubscriptionProjection(facts: facts.lazy.filter { $0.signedDate <= time }).view(at: time)
    }

    /// "As the ledger knew it at recorded time R": only facts recorded at or before R, evaluated at R.
    public static func asKnownAt(
        recordedTime time: EpochMillis, facts: some Sequence<SubscriptionFact>
    ) -> ProjectionView {
        SubscriptionProjection(facts: facts.lazy.filter { $0.recordedAt <= time }).view(at: time)
    }
}

/// The three projections read at one evaluation time. Every list is in a deterministic order.
public struct ProjectionView: Sendable {
    public let projection: SubscriptionProjection
    public let evaluatedAt: EpochMillis

    public init(projection: SubscriptionProjection, evaluatedAt: EpochMillis) {
        self.projection = projection
        self.evaluatedAt = evaluatedAt
    }

    public func subscription(_ originalTransactionId: String) -> SubscriptionState? {
        projection.subscriptions[originalTransactionId]?.state(at: evaluatedAt)
    }

    /// Subscription states ordered by originalTransactionId.
    public var subscriptions: [SubscriptionState] {
        projection.subscriptions.keys.sorted().compactMap { projection.subscriptions[$0]!.state(at: evaluatedAt) }
    }

    /// Transactions ordered by originalTransactionId, then purchaseDate, then transactionId.
    public var transactions: [TransactionRecord] {
        projection.subscriptions.keys.sorted().flatMap { projection.subscriptions[$0]!.transactions }
    }

    /// Entitlements in force at the evaluation time, for one customer or for everyone.
    public func entitlements(catalog: ProductCatalog, customerId: String? = nil) -> [EntitlementGrant] {
        var grants: [EntitlementGrant] = []
        for fold in projection.subscriptions.values {
            guard let state = fold.state(at: evaluatedAt) else { continue }
            if let customerId, state.customerId != customerId { continue }
            grants += EntitlementGrant.grants(of: state, catalog: catalog)
        }
        return grants.sorted(by: EntitlementGrant.ordered)
    }
}
