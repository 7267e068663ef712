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
        (ProjectionTable.refundCases.qualified(next: next), ProjectionTable.refundCaseOrders.qualified(next: next))
    }

    // MARK: which cases a batch of facts may change

    static func seeds(from facts: [Fact], next: Bool = false, on connection: Connection) throws -> Seeds {
        var seeds = Seeds()
        var context: Set<String> = []
        var subscriptions: Set<String> = []
        // Reversals (V2 snapshots and App Store API answers): they change only a case that exists.
        var apiReversals: Set<String> = []
        for f in facts {
            switch f.origin {
            case .appleV2:
                guard let tx = f.transactionId, !tx.isEmpty else { break }
                // Every snapshot without a revocationDate states a reversal (`detail.basis`): it
                // matters only to a transaction that has a case. Seeding each one refolded a case per
                // notification. A REFUND_REVERSED notification's own reversal (no basis) is a case fact.
                if f.kind == .reversal, f.details["basis"] != nil {
                    apiReversals.insert(tx)
                } else if RefundCaseFold.caseKinds.contains(f.kind) {
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
            // Each case under the ids of its own order only (as the rebuild's load indexes it), not
            // under every id the seeds reached: a batch touching two orders of one customer would
            // otherwise index each case under the other's ids, and a later refold of that other
            // order would delete the case and not bring it back (found by `ledger-dev soak`).
            let components = OrderComponents(facts)
            try replace(indexedUnder: reached, caseIds: [], with: cases, orderIds: { components.ids(of: $0.orderId) }, next: next, on: connection)
        }
        if !seeds.appleTransactions.isEmpty {
            let facts = try RefundCaseFacts.apple(seeds.appleTransactions, upTo: upTo, on: connection)
            let cases = RefundCaseFold.cases(from: facts).filter { $0.source == .apple }
            try replace(indexedUnder: [], caseIds: Set(seeds.appleTransactions.map { "apple:" + $0 }), with: cases,
                        orderIds: { _ in [] }, next: next, on: connection)
        }
    }

    /// Deletes the cases indexed under `ids` and those named `caseIds` (and the new cases' ids),
    /// then inserts `cases`, each WeChat one indexed under `orderIds(case)`.
    static func replace(
        indexedUnder ids: Set<String>, caseIds: Set<String>, with cases: [RefundCase], orderIds: (RefundCase) -> Set<String>, next: Bool,
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
        try insert(cases, orderIds: orderIds, next: next, on: connection)
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
    /// Returns the orders and Apple transactions refolded.
    @discardableResult
    static func apply(_ range: ClosedRange<Int64>, next: Bool = false, on connection: Connection) throws -> Int {
        let facts = try RefundCaseFacts.facts(in: range, on: connection)
        let seeds = try seeds(from: facts, next: next, on: connection)
        if !seeds.isEmpty { try refold(seeds, upTo: range.upperBound, next: next, on: connection) }
        return seeds.orderIds.count + seeds.appleTransactions.count
    }
}

extension RefundCaseProjection {
    /// The rebuild's bulk pass: every case of the facts up to `load.head` (read in the rebuild's
    /// snapshot), each WeChat one indexed under every id of its order, as COPY rows.
    static func load(into load: BulkLoad) throws -> BulkLoad.Counts {
        let facts = try RefundCaseFacts.all(upTo: load.head, on: load.reader)
        load.progress(0, facts.count)
        let cases = RefundCaseFold.cases(from: facts)
        let components = OrderComponents(facts)
        let chunk = load.rebuilder.flushBytes
        var caseRows: [UInt8] = [], orderRows: [UInt8] = []
        for (done, c) in cases.enumerated() {
            try RefundCaseRow(c).append(to: &caseRows)
            if c.source == .wechat {
                for id in components.ids(of: c.orderId).union([c.orderId]).sorted() {
                    orderRows.field(id)
                    orderRows.field(c.caseId, last: true)
                }
            }
            if caseRows.count + orderRows.count >= chunk {
                try load.send(caseRows, to: .refundCases)
                try load.send(orderRows, to: .refundCaseOrders)
                (caseRows, orderRows) = ([], [])
                load.progress(facts.count * (done + 1) / max(cases.count, 1), facts.count)
            }
        }
        try load.send(caseRows, to: .refundCases)
        try load.send(orderRows, to: .refundCaseOrders)
        return BulkLoad.Counts(facts: facts.count, units: cases.count)
    }
}

extension ProjectionTable {
    /// Migrations/0009.
    static let refundCases = ProjectionTable(
        name: "refund_cases",
        columns: "case_id, source, order_id, opened_at, original_transaction_id, open_id, decision, outcome, body",
        statisticsColumns: "case_id, source, order_id, opened_at, original_transaction_id, open_id, decision, outcome",
        indexes: ["ALTER TABLE {table} ADD PRIMARY KEY (case_id)",
                  "CREATE INDEX ON {table} (opened_at, case_id COLLATE \"C\")",
                  "CREATE INDEX ON {table} (original_transaction_id)",
                  "CREATE INDEX ON {table} (open_id)",
                  "CREATE INDEX ON {table} (order_id)"])
    static let refundCaseOrders = ProjectionTable(
        name: "refund_case_orders", columns: "order_id, case_id", statisticsColumns: "order_id, case_id",
        indexes: ["ALTER TABLE {table} ADD PRIMARY KEY (order_id, case_id)", "CREATE INDEX ON {table} (case_id)"])
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
        body = String(decoding: try Projections.bodyEncoder.encode(c), as: UTF8.self)
    }

    /// The row in COPY text, in `ProjectionTable.refundCases.columns` order.
    func append(to rows: inout [UInt8]) {
        rows.field(caseId); rows.field(source); rows.field(orderId); rows.field(openedAt); rows.field(originalTransactionId)
        rows.field(openId); rows.field(decision); rows.field(outcome); rows.field(body, last: true)
    }

    static func decode(body: String) throws -> RefundCase {
        do { return try JSONDecoder().decode(RefundCase.self, from: Data(body.utf8)) } catch {
            throw ProjectionError.corrupt("a stored refund case does not decode (\(error)); rebuild it: ledger rebuild --projection refund_cases")
        }
    }
}

/// Which order ids name the same order: the ids each WeChat or ledger fact names together
/// (transactionId and orderAlias), joined transitively — what `RefundCaseFacts.orders` reaches
/// from any one of them.
struct OrderComponents {
    private var parent: [String: String] = [:]

    init(_ facts: [Fact]) {
        for f in facts where f.origin == .wechat || f.origin == .ledger {
            let ids = RefundFactQueries.orderIds(of: f)
            guard let first = ids.first else { continue }
            _ = find(first)
            for id in ids.dropFirst() { union(first, id) }
        }
        var members: [String: Set<String>] = [:]
        for id in parent.keys { members[find(id), default: []].insert(id) }
        groups = members
    }

    private var groups: [String: Set<String>] = [:]

    mutating func find(_ id: String) -> String {
        guard let p = parent[id] else { parent[id] = id; return id }
        if p == id { return id }
        let root = find(p)
        parent[id] = root
        return root
    }

    mutating func union(_ a: String, _ b: String) {
        let (ra, rb) = (find(a), find(b))
        if ra != rb { parent[max(ra, rb)] = min(ra, rb) }
    }

    func ids(of id: String) -> Set<String> {
        var root = id
        while let p = parent[root], p != root { root = p }
        return groups[root] ?? [id]
    }
}
