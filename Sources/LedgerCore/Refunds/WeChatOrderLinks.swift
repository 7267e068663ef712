import Foundation

/// What the facts say about WeChat orders: which ids name the same order, which delivery paid it,
/// which subscription it belongs to. Built from facts only (`FactDecoder` read the payloads once),
/// so a refund or an inquiry joins its order the same way whichever arrived first — the way
/// `SubscriptionProjection.attach` joins them to a subscription.
///
/// Two ids name one order when one fact states both: a delivery's `order_alias` facts (OutTradeNo ~
/// WeChatPayInfo.MchOrderNo / TransactionId) and a refund's own pair (MchOrderId ~ WxOrderId). The
/// ledger's link facts (`ledger_wechat_order_linked`) tie an order to a subscription without naming
/// a second id. An inquiry's `channel_bill` is Apple's bill, not a WeChat order id, and joins nothing.
///
/// Order-independent: every answer is a function of the set of facts given.
public struct WeChatOrderLinks: Sendable {
    /// Each id's group, named by the least id in it (quick-find: groups are a few ids each).
    private var root: [String: String] = [:]
    /// The ids of each group, under its name.
    private var members: [String: [String]] = [:]
    /// Each order's deliveries (WeChat `transaction` facts), under their OutTradeNo.
    private var deliveriesById: [String: [Fact]] = [:]
    /// Subscriptions each id is tied to (deliveries, aliases with a subscription, link facts).
    private var subscriptionsById: [String: Set<SubscriptionKey>] = [:]
    /// Link facts (`order_alias` of origin ledger) under the order they name.
    private var linksById: [String: [Fact]] = [:]

    public init() {}

    public init(facts: some Sequence<Fact>) {
        for f in facts { add(f) }
    }

    /// Reads one fact; facts that state nothing about WeChat orders are ignored.
    public mutating func add(_ fact: Fact) {
        guard fact.origin == .wechat || fact.origin == .ledger, let id = fact.transactionId, !id.isEmpty else { return }
        switch (fact.kind, fact.origin) {
        case (.transaction, .wechat), (.purchase, .wechat):
            insert(id)
            deliveriesById[id, default: []].append(fact)
            // An ordinary purchase states its WeChatPayInfo id beside its OutTradeNo.
            if fact.kind == .purchase, let alias = fact.orderAlias, !alias.isEmpty { union(id, alias) }
        case (.orderAlias, _), (.revocation, .wechat), (.refundFailed, .wechat):
            insert(id)
            if let alias = fact.orderAlias, !alias.isEmpty { union(id, alias) }
            if fact.origin == .ledger && fact.kind == .orderAlias { linksById[id, default: []].append(fact) }
        case (.refundInquiry, _), (.refundAnswer, _):
            insert(id)
        default:
            return
        }
        if let key = fact.subscription { subscriptionsById[id, default: []].insert(key) }
    }

    /// Every id known to name the same order as `id` (itself included), sorted.
    public func ids(of id: String) -> [String] {
        guard let r = root[id] else { return [id] }
        return members[r]!.sorted()
    }

    /// One id naming the group (its least id): the same for every id of the group.
    public func group(of id: String) -> String { root[id] ?? id }

    /// The delivery that paid one of `ids`: the earliest recorded (least position, then content),
    /// so a later re-delivery of the same order never replaces the evidence.
    public func delivery(among ids: some Sequence<String>) -> Fact? {
        ids.flatMap { deliveriesById[$0] ?? [] }.min { a, b in
            a.position != b.position ? a.position < b.position : a.contentPrecedes(b)
        }
    }

    /// The subscriptions the orders `ids` belong to, least first.
    public func subscriptions(of ids: some Sequence<String>) -> [SubscriptionKey] {
        Set(ids.flatMap { subscriptionsById[$0] ?? [] }).sorted()
    }

    /// The link facts that tied one of `ids` to a subscription.
    public func links(of ids: some Sequence<String>) -> [Fact] {
        ids.flatMap { linksById[$0] ?? [] }
    }

    private mutating func insert(_ id: String) {
        if root[id] == nil {
            root[id] = id
            members[id] = [id]
        }
    }

    private mutating func union(_ a: String, _ b: String) {
        insert(a)
        insert(b)
        let ra = root[a]!, rb = root[b]!
        if ra == rb { return }
        // The least id names the merged group, so the name never depends on the order of facts.
        let (keep, gone) = ra < rb ? (ra, rb) : (rb, ra)
        let moved = members.removeValue(forKey: gone)!
        for id in moved { root[id] = keep }
        members[keep]!.append(contentsOf: moved)
    }
}
