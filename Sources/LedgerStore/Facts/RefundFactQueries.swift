import Foundation
import LedgerCore
internal import Postgres

/// Reads of `public.facts` (this build's `FactDecoder.schemaVersion`) for refund cases and refund
/// inquiries: `RefundCaseFold` and `RefundEvidence` fold what these return. Nothing here reads
/// `events.payload`; the facts are the one reading of every event.
///
/// What a case needs beyond its own facts is its order's context: every WeChat/ledger fact naming
/// one of the order's ids — followed through the ids those facts bring in, as
/// `WeChatOrderLinks` joins them (a delivery's MchOrderNo / TransactionId, a refund's WxOrderId, a
/// link to a subscription) — and the WeChat facts (deliveries, contract changes) of the
/// subscriptions they name, which give the customer (openid). A refund or an inquiry that arrived
/// before its delivery finds it the same way.
///
/// Facts exist only up to the facts checkpoint (`facts.v<version>`): an event whose facts the
/// catch-up has not derived yet is not in any answer here, like in every other projection.
public struct RefundFactQueries: Sendable {
    let pool: ConnectionPool

    /// How many rounds an order's ids are followed. Each round adds the ids the facts found in the
    /// previous one state; a WeChat order has at most four ids (OutTradeNo, MchOrderNo,
    /// TransactionId, WxOrderId), so real chains end in two or three rounds.
    static let maxRounds = 16

    init(pool: ConnectionPool) {
        self.pool = pool
    }

    /// Every fact the list of all refund cases needs: the case facts (`RefundCaseFold.caseKinds`
    /// of WeChat, the ledger and Apple V2; the revocations App Store API answers state, and their
    /// reversals of transactions that have a revocation) and their orders' context.
    public func allCaseFacts() async throws(ProjectionError) -> [Fact] {
        try await read { connection in
            let own = try connection.query(
                """
                SELECT \(FactRows.columns) FROM public.facts
                WHERE schema_version = $1 AND kind IN (\(Self.caseKindList))
                  AND (origin IN ('wechat', 'ledger')
                       OR (origin = 'apple.v2' AND kind <> 'reversal')
                       OR (origin IN ('apple.api', 'apple.v2') AND kind = 'revocation')
                       OR (origin IN ('apple.api', 'apple.v2') AND kind = 'reversal' AND transaction_id IN (
                           SELECT r.transaction_id FROM public.facts r
                           WHERE r.schema_version = $1 AND r.kind = 'revocation' AND r.origin IN ('apple.v2', 'apple.api'))))
                ORDER BY position, ordinal
                """, [.int64(Int64(FactStore.version))], name: "refund case facts")
                .facts()
            return try Self.withContext(own, on: connection)
        }
    }

    /// The facts of one case (`RefundCase.caseId`): for `wechat:<id>` the order's facts and
    /// context, for `apple:<transactionId>` the Apple case facts of that transaction (notifications,
    /// API answers, the ledger's consumption answers). Folding them
    /// gives the same case as folding `allCaseFacts()` (a case depends only on its order's facts).
    /// Empty for an id of neither form.
    public func caseFacts(caseId: String) async throws(ProjectionError) -> [Fact] {
        if let id = caseId.dropPrefix("wechat:") {
            return try await orderFacts(naming: [id])
        }
        guard let tx = caseId.dropPrefix("apple:") else { return [] }
        return try await read { connection in
            try connection.query(
                """
                SELECT \(FactRows.columns) FROM public.facts
                WHERE schema_version = $1 AND kind IN (\(Self.caseKindList)) AND origin IN ('apple.v2', 'apple.api', 'ledger')
                  AND transaction_id = $2
                ORDER BY position, ordinal
                """, [.int64(Int64(FactStore.version)), .text(tx)], name: "apple refund case facts")
                .facts()
        }
    }

    /// The facts naming `orderIds` or any id they bring in, and the WeChat facts of the
    /// subscriptions those orders belong to (what `RefundEvidence.facts` decides an inquiry on).
    public func orderFacts(naming orderIds: [String]) async throws(ProjectionError) -> [Fact] {
        let ids = orderIds.filter { !$0.isEmpty }
        if ids.isEmpty { return [] }
        return try await read { connection in
            try Self.withContext([], ids: Set(ids), on: connection)
        }
    }

    /// The facts of the subscriptions and their orders' context: a customer's refund history
    /// (fold with `RefundCaseFold` and keep the cases naming the customer).
    public func subscriptionFacts(_ keys: [SubscriptionKey]) async throws(ProjectionError) -> [Fact] {
        if keys.isEmpty { return [] }
        return try await read { connection in
            let own = try connection.query(
                """
                SELECT \(FactRows.columns) FROM public.facts
                WHERE schema_version = $1 AND subscription = ANY($2) AND origin IN ('wechat', 'ledger')
                ORDER BY position, ordinal
                """, [.int64(Int64(FactStore.version)), .array(keys.map { .text($0.text) }, of: .text)],
                name: "wechat facts of subscriptions")
                .facts()
            return try Self.withContext(own, loaded: Set(keys), on: connection)
        }
    }

    /// The stored answers to inquiries about `payOrderId` (`refund_answer` facts), earliest first:
    /// the first is the answer every asking gets.
    public func answers(payOrderId: String) async throws(ProjectionError) -> [Fact] {
        try await read { connection in
            try connection.query(
                """
                SELECT \(FactRows.columns) FROM public.facts
                WHERE schema_version = $1 AND origin = 'ledger' AND kind = 'refund_answer' AND transaction_id = $2
                ORDER BY position, ordinal
                """, [.int64(Int64(FactStore.version)), .text(payOrderId)], name: "refund answers of order")
                .facts()
        }
    }

    // MARK: -

    /// Case kinds as SQL literals (constants, not parameters, so the planner can use the partial
    /// index `facts_kind`, which excludes transactions and renewals).
    static let caseKindList = RefundCaseFold.caseKinds.map { "'\($0.rawValue)'" }.sorted().joined(separator: ", ")

    /// `facts` plus their orders' context: the WeChat/ledger facts naming their order ids and `ids`
    /// (followed through the ids those bring in) and the WeChat facts of every subscription named
    /// (but `loaded`, whose facts `facts` already holds).
    static func withContext(
        _ facts: [Fact], ids extra: Set<String> = [], loaded: Set<SubscriptionKey> = [], on connection: Connection
    ) throws -> [Fact] {
        var found: [FactPlace: Fact] = [:]
        var ids = extra
        for f in facts {
            found[FactPlace(f)] = f
            if f.origin == .wechat || f.origin == .ledger { ids.formUnion(orderIds(of: f)) }
        }
        var frontier = Array(ids)
        var rounds = 0
        while !frontier.isEmpty && rounds < maxRounds {
            rounds += 1
            let rows = try connection.query(
                """
                SELECT \(FactRows.columns) FROM public.facts
                WHERE schema_version = $1 AND origin IN ('wechat', 'ledger') AND (transaction_id = ANY($2) OR order_alias = ANY($2))
                """, [.int64(Int64(FactStore.version)), .array(frontier.map { .text($0) }, of: .text)],
                name: "facts of orders")
            frontier = []
            for fact in try rows.facts() {
                found[FactPlace(fact)] = fact
                for id in orderIds(of: fact) where ids.insert(id).inserted { frontier.append(id) }
            }
        }
        // The WeChat deliveries and contract changes (their openids) of every subscription named,
        // except those whose facts the caller started from.
        let missing = Set(found.values.filter { $0.origin == .wechat || $0.origin == .ledger }.compactMap(\.subscription))
            .subtracting(loaded).sorted()
        if !missing.isEmpty {
            let rows = try connection.query(
                """
                SELECT \(FactRows.columns) FROM public.facts
                WHERE schema_version = $1 AND subscription = ANY($2) AND origin = 'wechat' AND kind IN ('transaction', 'renewal')
                """, [.int64(Int64(FactStore.version)), .array(missing.map { .text($0.text) }, of: .text)],
                name: "wechat facts of order subscriptions")
            for fact in try rows.facts() {
                found[FactPlace(fact)] = fact
            }
        }
        return found.keys.sorted().map { found[$0]! }
    }

    /// The WeChat order ids a fact names.
    static func orderIds(of f: Fact) -> [String] {
        [f.transactionId, f.orderAlias].compactMap { $0 }.filter { !$0.isEmpty }
    }

    private func read<T: Sendable>(_ body: @escaping @Sendable (Connection) throws -> T) async throws(ProjectionError) -> T {
        do { return try await pool.withConnection(body) } catch { throw ProjectionError(error) }
    }
}

/// A fact's place in the log: (position, ordinal) is the primary key of `public.facts` within a version.
struct FactPlace: Hashable, Comparable {
    var position: Int64
    var ordinal: Int
    init(_ f: Fact) {
        position = f.position
        ordinal = f.ordinal
    }
    static func < (a: FactPlace, b: FactPlace) -> Bool { (a.position, a.ordinal) < (b.position, b.ordinal) }
}

extension EventStore {
    /// The events at `positions` (the evidence trail of a refund case: raw bytes by position), in
    /// position order. Positions that do not exist are left out.
    public func events(positions: [Int64]) async throws(StoreError) -> [RecordedEvent] {
        guard !positions.isEmpty else { return [] }
        return try await select(
            "SELECT \(Self.columns) FROM events WHERE position = ANY($1) ORDER BY position",
            [.array(positions.map { .int64($0) }, of: .int8)], name: "events at positions")
    }
}

private extension String {
    func dropPrefix(_ prefix: String) -> String? {
        hasPrefix(prefix) ? String(dropFirst(prefix.count)) : nil
    }
}
