import Foundation
import LedgerCore
internal import Postgres

/// The facts `RefundCaseFold` needs, bounded by a log position: the refund-case projection folds
/// what was known up to the position it is at, and `?asOfPosition=N` folds what was known at N.
/// The same reading as `RefundFactQueries` (case facts, their orders' context followed through the
/// ids the facts bring in, the WeChat deliveries and contract changes of the subscriptions those
/// orders belong to), with every query limited to `position <= upTo`.
enum RefundCaseFacts {
    static var version: Int64 { Int64(FactStore.version) }

    /// Every fact the cases of the whole log up to `upTo` need: the case facts (with the
    /// revocations App Store API answers state, and their reversals of revoked transactions, as
    /// `RefundFactQueries.allCaseFacts`), every WeChat or ledger fact naming an order (deliveries, aliases, links: a superset of what the cases'
    /// orders reach), and the WeChat deliveries and contract changes of the subscriptions named.
    /// Facts that belong to no case change no case, so the fold equals the fold of each case's own.
    static func all(upTo: Int64, on connection: Connection) throws -> [Fact] {
        var found: [FactPlace: Fact] = [:]
        let own = try connection.query(
            """
            SELECT \(FactRows.columns) FROM public.facts
            WHERE schema_version = $1 AND position <= $2 AND (
                (kind IN (\(RefundFactQueries.caseKindList)) AND origin IN ('wechat', 'ledger', 'apple.v2'))
                OR (origin IN ('wechat', 'ledger') AND (transaction_id IS NOT NULL OR order_alias IS NOT NULL))
                OR (origin = 'apple.api' AND kind = 'revocation')
                OR (origin = 'apple.api' AND kind = 'reversal' AND transaction_id IN (
                    SELECT r.transaction_id FROM public.facts r
                    WHERE r.schema_version = $1 AND r.position <= $2 AND r.kind = 'revocation' AND r.origin IN ('apple.v2', 'apple.api'))))
            """, [.int64(version), .int64(upTo)], name: "refund case facts up to")
        for fact in try own.facts() {
            found[FactPlace(fact)] = fact
        }
        try addSubscriptionContext(to: &found, loaded: [], upTo: upTo, on: connection)
        return found.keys.sorted().map { found[$0]! }
    }

    /// The facts of the orders `ids` name, followed through the ids those facts bring in, with
    /// their subscriptions' WeChat context; and the ids reached (what the cases folded from them
    /// are indexed under).
    static func orders(_ ids: Set<String>, upTo: Int64, on connection: Connection) throws -> (facts: [Fact], ids: Set<String>) {
        var found: [FactPlace: Fact] = [:]
        var reached = Set(ids.filter { !$0.isEmpty })
        var frontier = Array(reached)
        var rounds = 0
        while !frontier.isEmpty && rounds < RefundFactQueries.maxRounds {
            rounds += 1
            let rows = try connection.query(
                """
                SELECT \(FactRows.columns) FROM public.facts
                WHERE schema_version = $1 AND position <= $3 AND origin IN ('wechat', 'ledger')
                  AND (transaction_id = ANY($2) OR order_alias = ANY($2))
                """, [.int64(version), .array(frontier.map { .text($0) }, of: .text), .int64(upTo)],
                name: "facts of orders up to")
            frontier = []
            for fact in try rows.facts() {
                found[FactPlace(fact)] = fact
                for id in RefundFactQueries.orderIds(of: fact) where reached.insert(id).inserted { frontier.append(id) }
            }
        }
        try addSubscriptionContext(to: &found, loaded: [], upTo: upTo, on: connection)
        return (found.keys.sorted().map { found[$0]! }, reached)
    }

    /// The Apple case facts of `transactionIds` (an Apple case is its transaction's facts: the
    /// notifications, what App Store API answers state, the ledger's consumption answers), as
    /// `RefundFactQueries.caseFacts` reads one case.
    static func apple(_ transactionIds: Set<String>, upTo: Int64, on connection: Connection) throws -> [Fact] {
        guard !transactionIds.isEmpty else { return [] }
        return try connection.query(
            """
            SELECT \(FactRows.columns) FROM public.facts
            WHERE schema_version = $1 AND position <= $3 AND origin IN ('apple.v2', 'apple.api', 'ledger')
              AND kind IN (\(RefundFactQueries.caseKindList)) AND transaction_id = ANY($2)
            ORDER BY position, ordinal
            """, [.int64(version), .array(transactionIds.sorted().map { .text($0) }, of: .text), .int64(upTo)],
            name: "apple refund case facts up to")
            .facts()
    }

    /// The facts at positions `range` (what a batch of the worker brings).
    static func facts(in range: ClosedRange<Int64>, on connection: Connection) throws -> [Fact] {
        try FactStore.facts(in: range, on: connection)
    }

    /// The WeChat deliveries and contract changes (their openids) of every subscription the
    /// WeChat or ledger facts found name.
    private static func addSubscriptionContext(
        to found: inout [FactPlace: Fact], loaded: Set<SubscriptionKey>, upTo: Int64, on connection: Connection
    ) throws {
        let named = Set(found.values.filter { $0.origin == .wechat || $0.origin == .ledger }.compactMap(\.subscription))
            .subtracting(loaded).sorted()
        guard !named.isEmpty else { return }
        let rows = try connection.query(
            """
            SELECT \(FactRows.columns) FROM public.facts
            WHERE schema_version = $1 AND position <= $3 AND subscription = ANY($2) AND origin = 'wechat'
              AND kind IN ('transaction', 'renewal')
            """, [.int64(version), .array(named.map { .text($0.text) }, of: .text), .int64(upTo)],
            name: "wechat facts of order subscriptions up to")
        for fact in try rows.facts() {
            found[FactPlace(fact)] = fact
        }
    }
}
