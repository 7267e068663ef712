import Foundation

/// Every subscription's folded facts: the input of the subscriptions, transactions and
/// entitlements projections, and of time travel. Pure and order-independent like `SubscriptionFold`.
///
/// Facts without a subscription (a WeChat refund or inquiry that names only an order) join the
/// subscription whose orders they name — through the ids of its deliveries and every alias any fact
/// states — whichever arrived first; until then they belong to nobody.
public struct SubscriptionProjection: Sendable {
    private var folds: [SubscriptionKey: SubscriptionFold] = [:]
    private var unattached: [Fact] = []
    /// Handed to every fold (`SubscriptionFold.catalogPeriods`).
    public let catalogPeriods: [String: EpochMillis]

    public init(catalogPeriods: [String: EpochMillis] = [:]) {
        self.catalogPeriods = catalogPeriods
    }

    public init(facts: some Sequence<Fact>, catalogPeriods: [String: EpochMillis] = [:]) {
        self.catalogPeriods = catalogPeriods
        for fact in facts { apply(fact) }
    }

    public mutating func apply(_ fact: Fact) {
        guard let key = fact.subscription else {
            if fact.transactionId != nil { unattached.append(fact) }
            return
        }
        if let index = folds.index(forKey: key) {
            folds.values[index].apply(fact)
        } else {
            var fold = SubscriptionFold(key: key)
            fold.catalogPeriods = catalogPeriods
            fold.apply(fact)
            folds[key] = fold
        }
    }

    /// Each subscription with the facts that joined it through its orders.
    public var subscriptions: [SubscriptionKey: SubscriptionFold] {
        if unattached.isEmpty { return folds }
        var out = folds
        for (key, fold) in folds {
            out[key] = Self.attach(unattached, to: fold)
        }
        return out
    }

    /// Folds into `fold` every fact of `candidates` that names one of its orders, repeating while
    /// a joined fact brings in another id (a refund naming OutTradeNo and WxOrderId lets an inquiry
    /// naming WxOrderId join).
    public static func attach(_ candidates: [Fact], to fold: SubscriptionFold) -> SubscriptionFold {
        var fold = fold
        var pending = candidates
        while true {
            let ids = fold.orderIds
            if ids.isEmpty { return fold }
            var joined = false
            pending.removeAll { fact in
                guard ids.contains(fact.transactionId ?? "") || ids.contains(fact.orderAlias ?? "") else { return false }
                var routed = fact
                routed.subscription = fold.key
                fold.apply(routed)
                joined = true
                return true
            }
            if !joined { return fold }
        }
    }

    /// The projections at `time` (business time: every fact known, each in effect from its own time).
    public func view(at time: EpochMillis) -> ProjectionView {
        ProjectionView(subscriptions: subscriptions, evaluatedAt: time)
    }

    /// "What was true at T as the ledger knew it at R": only facts recorded at or before R,
    /// evaluated at T (R alone: T = R).
    public static func view(
        at time: EpochMillis, recordedBy recorded: EpochMillis? = nil, facts: some Sequence<Fact>,
        catalogPeriods: [String: EpochMillis] = [:]
    ) -> ProjectionView {
        if let recorded {
            return SubscriptionProjection(facts: facts.lazy.filter { $0.recordedAt <= recorded }, catalogPeriods: catalogPeriods).view(at: time)
        }
        return SubscriptionProjection(facts: facts, catalogPeriods: catalogPeriods).view(at: time)
    }
}

/// The three projections read at one evaluation time. Every list is in a deterministic order.
public struct ProjectionView: Sendable {
    public let subscriptions: [SubscriptionKey: SubscriptionFold]
    public let evaluatedAt: EpochMillis

    public init(subscriptions: [SubscriptionKey: SubscriptionFold], evaluatedAt: EpochMillis) {
        self.subscriptions = subscriptions
        self.evaluatedAt = evaluatedAt
    }

    public func subscription(_ key: SubscriptionKey) -> SubscriptionState? {
        subscriptions[key]?.state(at: evaluatedAt)
    }

    /// Subscription states ordered by key.
    public var states: [SubscriptionState] {
        subscriptions.keys.sorted().compactMap { subscriptions[$0]!.state(at: evaluatedAt) }
    }

    /// Transactions ordered by subscription key, then purchaseDate, then transactionId.
    public var transactions: [TransactionRecord] {
        subscriptions.keys.sorted().flatMap { subscriptions[$0]!.transactions }
    }

    /// Entitlements in force at the evaluation time, for one customer (and environment) or for everyone.
    public func entitlements(catalog: ProductCatalog, customerId: String? = nil, environment: String? = nil) -> [EntitlementGrant] {
        var grants: [EntitlementGrant] = []
        for (key, fold) in subscriptions {
            if let environment, key.environment != environment { continue }
            guard let state = fold.state(at: evaluatedAt) else { continue }
            if let customerId, state.customerId != customerId { continue }
            grants += EntitlementGrant.grants(of: state, catalog: catalog)
        }
        return grants.sorted(by: EntitlementGrant.ordered)
    }
}
