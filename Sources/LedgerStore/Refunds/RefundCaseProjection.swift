import Foundation
import LedgerCore
internal import Postgres

/// The refund-case projection (`projections.refund_cases`, Migrations/0009): `RefundCaseFold` of
/// the facts, kept like the other projections — by the live hook in the append transaction, by
/// the catch-up worker from its checkpoint (`refund_cases`), and rebuilt from position 0 by
/// `ledger rebuild --projection refund_cases` — so listing 100k cases is an indexed read, not a
/// fold of every refund fact per request.
///
/// A case is not a subscription: it is one WeChat order (all its ids, whichever arrived first) or
/// one Apple transaction. So the unit of refolding is a set of *seeds*: the order ids and Apple
/// transaction ids a batch's facts touch. A WeChat case is indexed (`refund_case_orders`) under
/// every id its order's facts reached, so any later fact naming one of them — or a delivery or
/// contract change of the case's subscription, which can change its customer — refolds it, and
/// the cases that order had before are replaced whole (an unasked refund's case may merge into an
/// asked one).
enum RefundCaseProjection {
    static let name = ProjectionName.refundCases

    struct Seeds: Equatable {
        var orderIds: Set<String> = []
        var appleTransactions: Set<String> = []
        var isEmpty: Bool { orderIds.isEmpty && appleTransactions.isEmpty }
    }

    static func tables(next: Bool) -> (cases: String, orders: String) {
        next ? ("projections.refund_cases_next", "projections.refund_case_orders_next")
             : ("projections.refund_cases", "projections.refund_case_orders")
    }

    // MARK: which cases a batch of facts may change

    static func seeds(from facts: [Fact], next: Bool = false, on connection: Connection) throws -> Seeds {
        var seeds = Seeds()
        var context: Set<String> = []
        var subscriptions: Set<String> = []
        var apiReversals: Set<String> = []
        for f in facts {
            switch f.origin {
            case .appleV2:
                if RefundCaseFold.caseKinds.contains(f.kind), let tx = f.transactionId, !tx.isEmpty {
                    seeds.appleTransactions.insert(tx)
                }
            case .appleAPI:
                // An App Store API answer states a refund (its notification lost) or, for every
                // transaction it lists, "not revoked": the latter matters only to a case that exists.
                guard let tx = f.transactionId, !tx.isEmpty else { break }
                if f.kind == .revocation { seeds.appleTransactions.insert(tx) }
                if f.kind == .reversal { apiReversals.insert(tx) }
            case .ledger where f.kind == .consumptionAnswer:
                // The ledger's answer to a consumption request joins its Apple transaction's case.
                if let tx = f.transactionId, !tx.isEmpty { seeds.appleTransactions.insert(tx) }
            case .wechat, .ledger:
                let ids = RefundFactQueries.orderIds(of: f)
                if RefundCaseFold.caseKinds.contains(f.kind) {
                    seeds.orderIds.formUnion(ids)
                } else {
                    context.formUnion(ids)
                }
                if f.origin == .wechat, f.kind == .transaction || f.kind == .renewal, let key = f.subscription,
                   f.customerId != nil {
                    subscriptions.insert(key.originalTransactionId)
                }
            case .appleV1:
                break
            }
        }
        let (cases, orders) = tables(next: next)
        apiReversals.subtract(seeds.appleTransactions)
        if !apiReversals.isEmpty {
            for row in try connection.query(
                "SELECT order_id FROM \(cases) WHERE case_id = ANY($1)",
                [.array(apiReversals.sorted().map { .text("apple:" + $0) }, of: .text)], name: "apple refund cases of reversals").rows {
                seeds.appleTransactions.insert(try row.decode(String.self, "order_id"))
            }
        }
        // Context (deliveries, aliases, links) matters only to an order some case already holds:
        // an order without an inquiry or a refund has no case to change.
        context.subtract(seeds.orderIds)
        if !context.isEmpty {
            for row in try connection.query(
                "SELECT DISTINCT order_id FROM \(orders) WHERE order_id = ANY($1)",
                [.array(context.sorted().map { .text($0) }, of: .text)], name: "orders with refund cases").rows {
                seeds.orderIds.insert(try row.decode(String.self, "order_id"))
            }
        }
        // A subscription's WeChat deliveries and contract changes name its customer (openid).
        if !subscriptions.isEmpty {
            for row in try connection.query(
                """
                SELECT DISTINCT o.order_id FROM \(cases) c JOIN \(orders) o ON o.case_id = c.case_id
                WHERE c.source = 'wechat' AND c.original_transaction_id = ANY($1)
                """, [.array(subscriptions.sorted().map { .text($0) }, of: .text)], name: "orders of subscriptions' refund cases").rows {
                seeds.orderIds.insert(try row.decode(String.self, "order_id"))
            }
        }
        return seeds
    }

    // MARK: refolding

    /// Replaces the cases of `seeds` with a fold of their facts up to `upTo`.
    static func refold(_ seeds: Seeds, upTo: Int64, next: Bool = false, on connection: Connection) throws {
        if !seeds.orderIds.isEmpty {
            let (facts, reached) = try RefundCaseFacts.orders(seeds.orderIds, upTo: upTo, on: connection)
            let cases = RefundCaseFold.cases(from: facts).filter { $0.source == .wechat }
            try replace(indexedUnder: reached, caseIds: [], with: cases, orderIds: reached, next: next, on: connection)
        }
        if !seeds.appleTransactions.isEmpty {
            let facts = try RefundCaseFacts.apple(seeds.appleTransactions, upTo: upTo, on: connection)
            let cases = RefundCaseFold.cases(from: facts).filter { $0.source == .apple }
            try replace(indexedUnder: [], caseIds: Set(seeds.appleTransactions.map { "apple:" + $0 }), with: cases,
                        orderIds: [], next: next, on: connection)
        }
    }

    /// Deletes the cases indexed under `ids` and those named `caseIds` (and the new cases' ids),
    /// then inserts `cases`, each WeChat one indexed under `orderIds`.
    static func replace(
        indexedUnder ids: Set<String>, caseIds: Set<String>, with cases: [RefundCase], orderIds: Set<String>, next: Bool,
        on connection: Connection
    ) throws {
        let (casesTable, ordersTable) = tables(next: next)
        let named = PostgresValue.array((caseIds.union(cases.map(\.caseId))).sorted().map { .text($0) }, of: .text)
        try connection.query(
            """
            WITH gone AS (
                DELETE FROM \(ordersTable)
                WHERE case_id IN (SELECT case_id FROM \(ordersTable) WHERE order_id = ANY($1)) OR case_id = ANY($2)
                RETURNING case_id)
            DELETE FROM \(casesTable) WHERE case_id IN (SELECT case_id FROM gone) OR case_id = ANY($2)
            """, [.array(ids.sorted().map { .text($0) }, of: .text), named], name: "clear refund cases")
        try insert(cases, orderIds: { _ in orderIds }, next: next, on: connection)
    }

    /// Inserts `cases`, each WeChat one indexed under `orderIds(case)` and its own order id.
    static func insert(_ cases: [RefundCase], orderIds: (RefundCase) -> Set<String>, next: Bool, on connection: Connection) throws {
        guard !cases.isEmpty else { return }
        let (casesTable, ordersTable) = tables(next: next)
        let rows = try cases.map(RefundCaseRow.init)
        try connection.query(
            """
            INSERT INTO \(casesTable) (case_id, source, order_id, opened_at, original_transaction_id, open_id, decision, outcome, body)
            SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[])
            """,
            [.array(rows.map { .text($0.caseId) }, of: .text), .array(rows.map { .text($0.source) }, of: .text),
             .array(rows.map { .text($0.orderId) }, of: .text), .array(rows.map { .int64($0.openedAt) }, of: .int8),
             .array(rows.map { .optional($0.originalTransactionId) }, of: .text), .array(rows.map { .optional($0.openId) }, of: .text),
             .array(rows.map { .optional($0.decision) }, of: .text), .array(rows.map { .text($0.outcome) }, of: .text),
             .array(rows.map { .text($0.body) }, of: .text)],
            name: "insert refund cases")
        var orderRows: [(String, String)] = []
        for c in cases where c.source == .wechat {
            for id in orderIds(c).union([c.orderId]).sorted() { orderRows.append((id, c.caseId)) }
        }
        guard !orderRows.isEmpty else { return }
        try connection.query(
            "INSERT INTO \(ordersTable) (order_id, case_id) SELECT * FROM unnest($1::text[], $2::text[]) ON CONFLICT DO NOTHING",
            [.array(orderRows.map { .text($0.0) }, of: .text), .array(orderRows.map { .text($0.1) }, of: .text)],
            name: "index refund case orders")
    }

    // MARK: applying committed facts (the worker's pass and the rebuild's catch-up)

    /// Refolds what the facts at `range` touch, as known at the range's end.
    static func apply(_ range: ClosedRange<Int64>, next: Bool = false, on connection: Connection) throws {
        let facts = try RefundCaseFacts.facts(in: range, on: connection)
        let seeds = try seeds(from: facts, next: next, on: connection)
        if !seeds.isEmpty { try refold(seeds, upTo: range.upperBound, next: next, on: connection) }
    }
}

/// The live refund-case projection: joins the append transaction like `LiveProjectionHook`, and
/// advances only when its checkpoint is exactly before the batch (else the worker owns the gap).
struct RefundCaseHook: AppendHook {
    let name = "refund_cases"

    func didAppend(_ events: [RecordedEvent], facts: [Fact], in connection: Connection) throws -> AfterCommit? {
        guard let first = events.first?.position, let last = events.last?.position else { return nil }
        let advanced = try connection.query(
            """
            UPDATE projection_checkpoints SET position = $2, updated_at = now()
            WHERE projection = $3 AND position = $1 AND status = 'running'
            RETURNING projection
            """, [.int64(first - 1), .int64(last), .text(RefundCaseProjection.name.rawValue)], name: "advance refund cases checkpoint")
        guard advanced.count == 1 else { return nil }
        let seeds = try RefundCaseProjection.seeds(from: facts, on: connection)
        if !seeds.isEmpty { try RefundCaseProjection.refold(seeds, upTo: last, on: connection) }
        return nil
    }
}

/// One row of `projections.refund_cases`.
struct RefundCaseRow {
    var caseId: String
    var source: String
    var orderId: String
    var openedAt: Int64
    var originalTransactionId: String?
    var openId: String?
    var decision: String?
    var outcome: String
    var body: String

    init(_ c: RefundCase) throws {
        caseId = c.caseId
        source = c.source.rawValue
        orderId = c.orderId
        openedAt = c.openedAt
        originalTransactionId = c.originalTransactionId
        openId = c.openId
        decision = c.decision?.rawValue
        outcome = c.outcome.rawValue
        body = String(decoding: try RefundCaseRow.encoder.encode(c), as: UTF8.self)
    }

    static let encoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return e
    }()

    static func decode(body: String) throws -> RefundCase {
        do { return try JSONDecoder().decode(RefundCase.self, from: Data(body.utf8)) } catch {
            throw ProjectionError.corrupt("a stored refund case does not decode (\(error)); rebuild it: ledger rebuild --projection refund_cases")
        }
    }
}
