import Foundation
import LedgerCore
internal import Postgres

/// WeChat contract states as a projection (Migrations/0018): what `GET /v1/wechat/contracts` and
/// the sign-params check read, instead of folding a customer's facts on every request.
///
/// - `projections.wechat_contract_parties`: every (openid, product, subscription) a WeChat renewal
///   statement names (`WeChatContractState.party(of:)`): the candidates of each contract. Facts are
///   never removed, so rows are only added.
/// - `projections.wechat_contracts`: one row per (openid, product) with a contract, the state
///   `WeChatContractState.of` gives for the facts of its candidates (and the order facts that join
///   them): the fold of LedgerCore, called, not rewritten. No row: UNBINDUSER.
///
/// A batch of facts may change the contracts of the parties it names and of every party of the
/// subscriptions it touches (`FactStore.subscriptions(touchedBy:)`: its own, and those its order
/// facts reach); those are refolded whole, as known at the batch's end. An Apple-only batch costs
/// one indexed lookup of its subscriptions in the (small) parties table.
struct WeChatContractsProjection: Projection {
    /// The catalog's periods (`SubscriptionFold.catalogPeriods`), as every fold of the ledger has them.
    let catalogPeriods: [String: EpochMillis]
    var names: [ProjectionName] { [.wechatContracts] }
    var isLive: Bool { true }

    func tables(of name: ProjectionName) -> [ProjectionTable] {
        name == .wechatContracts ? [.wechatContracts, .wechatContractParties] : []
    }

    func applyLive(_ batch: AppendedBatch, folder: SharedFold, to names: Set<ProjectionName>, on connection: Connection) throws -> AfterCommit? {
        guard let last = batch.last else { return nil }
        try Self.update(with: batch.facts, upTo: last, next: false, catalogPeriods: catalogPeriods, on: connection)
        return nil
    }

    func apply(_ range: ClosedRange<Int64>, to names: Set<ProjectionName>, next: Bool, on connection: Connection) throws -> Int {
        try Self.update(with: try FactStore.facts(in: range, on: connection), upTo: range.upperBound, next: next,
                        catalogPeriods: catalogPeriods, on: connection)
    }

    func load(_ names: Set<ProjectionName>, into load: BulkLoad) throws -> BulkLoad.Counts {
        try Self.load(into: load, catalogPeriods: catalogPeriods)
    }

    // MARK: applying a batch

    /// Records the parties `facts` name and refolds every contract they may change. Returns the
    /// contracts refolded.
    @discardableResult
    static func update(with facts: [Fact], upTo: Int64, next: Bool, catalogPeriods: [String: EpochMillis],
                       on connection: Connection) throws -> Int {
        let parties = Set(facts.compactMap { f in f.subscription.flatMap { s in WeChatContractState.party(of: f).map { ($0, s) } } }
            .map { PartyRow(party: $0.0, subscription: $0.1) })
        let touched = try FactStore.subscriptions(touchedBy: facts, on: connection)
        var contracts = Set(parties.map(\.party))
        if !touched.isEmpty {
            for row in try connection.query(
                "SELECT DISTINCT open_id, product_id FROM \(ProjectionTable.wechatContractParties.qualified(next: next)) WHERE subscription = ANY($1)",
                [.array(touched.sorted().map { .text($0.text) }, of: .text)], name: "contracts of subscriptions").rows {
                contracts.insert(WeChatContractState.Party(openId: try row.decode(String.self, "open_id"), productId: try row.decode(String.self, "product_id")))
            }
        }
        if !parties.isEmpty {
            let sorted = parties.sorted()
            try connection.query(
                """
                INSERT INTO \(ProjectionTable.wechatContractParties.qualified(next: next)) (open_id, product_id, subscription)
                SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) ON CONFLICT DO NOTHING
                """,
                [.array(sorted.map { .text($0.party.openId) }, of: .text), .array(sorted.map { .text($0.party.productId) }, of: .text),
                 .array(sorted.map { .text($0.subscription.text) }, of: .text)], name: "record contract parties")
        }
        guard !contracts.isEmpty else { return 0 }
        let rows = try refold(contracts, upTo: upTo, next: next, catalogPeriods: catalogPeriods, on: connection)
        let table = ProjectionTable.wechatContracts.qualified(next: next)
        let sorted = contracts.sorted()
        try connection.query(
            "DELETE FROM \(table) c USING unnest($1::text[], $2::text[]) AS k(open_id, product_id) WHERE c.open_id = k.open_id AND c.product_id = k.product_id",
            [.array(sorted.map { .text($0.openId) }, of: .text), .array(sorted.map { .text($0.productId) }, of: .text)],
            name: "clear contracts")
        if !rows.isEmpty {
            try connection.copyIn("COPY \(table) (\(ProjectionTable.wechatContracts.columns)) FROM STDIN") { writer in try writer.write(rows) }
        }
        return contracts.count
    }

    /// The rows (COPY text of `projections.wechat_contracts`) of `contracts`, each folded from the
    /// facts up to `upTo` of its candidates (read from the parties table, or its `_next` one).
    static func refold(_ contracts: Set<WeChatContractState.Party>, upTo: Int64, next: Bool, catalogPeriods: [String: EpochMillis],
                       on connection: Connection) throws -> [UInt8] {
        let sorted = contracts.sorted()
        var candidates: [WeChatContractState.Party: [SubscriptionKey]] = [:]
        for row in try connection.query(
            """
            SELECT p.open_id, p.product_id, p.subscription FROM \(ProjectionTable.wechatContractParties.qualified(next: next)) p
            JOIN unnest($1::text[], $2::text[]) AS k(open_id, product_id) ON p.open_id = k.open_id AND p.product_id = k.product_id
            """,
            [.array(sorted.map { .text($0.openId) }, of: .text), .array(sorted.map { .text($0.productId) }, of: .text)],
            name: "contract candidates").rows {
            let party = WeChatContractState.Party(openId: try row.decode(String.self, "open_id"), productId: try row.decode(String.self, "product_id"))
            let text = try row.decode(String.self, "subscription")
            guard let key = SubscriptionKey(text: text) else { throw ProjectionError.corrupt("contract party subscription '\(text)' is not <environment>:<id>") }
            candidates[party, default: []].append(key)
        }
        return try rows(candidates, upTo: upTo, catalogPeriods: catalogPeriods, on: connection)
    }

    /// Folds each contract of `candidates` from its candidates' facts up to `upTo` and writes its
    /// row (none for UNBINDUSER).
    static func rows(_ candidates: [WeChatContractState.Party: [SubscriptionKey]], upTo: Int64, catalogPeriods: [String: EpochMillis],
                     on connection: Connection) throws -> [UInt8] {
        let keys = Set(candidates.values.joined()).sorted()
        let (attached, orderFacts) = try FactStore.facts(of: keys, upTo: upTo, on: connection)
        var out: [UInt8] = []
        for party in candidates.keys.sorted() {
            let facts = Set(candidates[party]!).sorted().flatMap { attached[$0] ?? [] } + orderFacts
            let state = WeChatContractState.of(openId: party.openId, productId: party.productId, facts: facts, catalogPeriods: catalogPeriods)
            guard let info = state.appleSubscriptionInfo else { continue }
            out.field(party.openId)
            out.field(party.productId)
            out.field(info.originalTransactionId)
            out.field(state.authorizationState.rawValue)
            out.field(String(decoding: try Projections.bodyEncoder.encode(state), as: UTF8.self), last: true)
        }
        return out
    }


    // MARK: the rebuild's bulk pass

    /// Every party up to `load.head` (one scan of the WeChat renewal facts), then the contracts
    /// folded in groups of customers, each group's candidates' facts read once.
    static func load(into load: BulkLoad, catalogPeriods: [String: EpochMillis]) throws -> BulkLoad.Counts {
        var byParty: [WeChatContractState.Party: [SubscriptionKey]] = [:]
        var partyRows: [UInt8] = []
        for row in try load.reader.query(
            """
            SELECT DISTINCT customer_id, r_product_id, subscription FROM public.facts
            WHERE schema_version = $1 AND origin = 'wechat' AND kind = 'renewal' AND position <= $2
              AND customer_id IS NOT NULL AND r_product_id IS NOT NULL AND subscription IS NOT NULL
            ORDER BY 1, 2, 3
            """, [.int64(Int64(FactStore.version)), .int64(load.head)], name: "contract parties").rows {
            let party = WeChatContractState.Party(openId: try row.decode(String.self, "customer_id"), productId: try row.decode(String.self, "r_product_id"))
            let text = try row.decode(String.self, "subscription")
            guard let key = SubscriptionKey(text: text) else { throw ProjectionError.corrupt("fact subscription '\(text)' is not <environment>:<id>") }
            byParty[party, default: []].append(key)
            partyRows.field(party.openId)
            partyRows.field(party.productId)
            partyRows.field(text, last: true)
        }
        try load.send(partyRows, to: .wechatContractParties)
        let parties = byParty.keys.sorted()
        var done = 0
        var facts = 0
        var start = 0
        while start < parties.count {
            // Whole customers per group: a customer's contracts share their subscriptions' facts.
            var end = min(start + 500, parties.count)
            while end < parties.count && parties[end].openId == parties[end - 1].openId { end += 1 }
            var group: [WeChatContractState.Party: [SubscriptionKey]] = [:]
            for party in parties[start..<end] { group[party] = byParty[party] }
            let rows = try rows(group, upTo: load.head, catalogPeriods: catalogPeriods, on: load.reader)
            try load.send(rows, to: .wechatContracts)
            done = end
            facts += group.values.reduce(0) { $0 + $1.count }
            load.progress(done, parties.count)
            start = end
        }
        return BulkLoad.Counts(facts: facts, units: parties.count)
    }
}

/// One row of `projections.wechat_contract_parties`.
private struct PartyRow: Hashable, Comparable {
    var party: WeChatContractState.Party
    var subscription: SubscriptionKey

    static func < (a: PartyRow, b: PartyRow) -> Bool { (a.party, a.subscription) < (b.party, b.subscription) }
}

extension ProjectionTable {
    /// Migrations/0018.
    static let wechatContracts = ProjectionTable(
        name: "wechat_contracts", columns: "open_id, product_id, original_transaction_id, authorization_state, body",
        statisticsColumns: "open_id, product_id", indexes: ["ALTER TABLE {table} ADD PRIMARY KEY (open_id, product_id)"])
    static let wechatContractParties = ProjectionTable(
        name: "wechat_contract_parties", columns: "open_id, product_id, subscription", statisticsColumns: "open_id, product_id, subscription",
        indexes: ["ALTER TABLE {table} ADD PRIMARY KEY (open_id, product_id, subscription)", "CREATE INDEX ON {table} (subscription)"])
}

extension WeChatQueries {
    /// The xpay contract state of `openId` for `productId` (`GET /v1/wechat/contracts`, the
    /// sign-params check), from the contract projection. While the projection is behind the facts
    /// (after an upgrade, before the catch-up reaches the head; or stopped on a failure) the state
    /// is folded from the customer's facts instead, so an answer never lags what was stored.
    public func contract(openId: String, productId: String) async throws(ProjectionError) -> WeChatContractState {
        do {
            return try await pool.withConnection { connection in
                try connection.transaction { connection in
                    try connection.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", name: "snapshot")
                    let found = try connection.query(
                        """
                        SELECT p.position >= coalesce(f.position, 0) AS current, c.body
                        FROM projection_checkpoints p
                        LEFT JOIN projection_checkpoints f ON f.projection = $3
                        LEFT JOIN projections.wechat_contracts c ON c.open_id = $1 AND c.product_id = $2
                        WHERE p.projection = $4
                        """,
                        [.text(openId), .text(productId), .text(FactStore.checkpoint), .text(ProjectionName.wechatContracts.rawValue)],
                        name: "wechat contract").first
                    if let found, try found.decode(Bool.self, "current") {
                        guard let body = try found.decode(String?.self, "body") else { return WeChatContractState(authorizationState: .unbindUser) }
                        do { return try JSONDecoder().decode(WeChatContractState.self, from: Data(body.utf8)) } catch {
                            throw ProjectionError.corrupt("a stored WeChat contract does not decode (\(error)); rebuild it: ledger rebuild --projection wechat_contracts")
                        }
                    }
                    return try Self.foldedContract(openId: openId, productId: productId, catalogPeriods: catalogPeriods, on: connection)
                }
            }
        } catch {
            throw ProjectionError(error)
        }
    }

    /// The fold of every subscription that ever named the customer (what the projection holds once
    /// it has caught up).
    static func foldedContract(openId: String, productId: String, catalogPeriods: [String: EpochMillis],
                               on connection: Connection) throws -> WeChatContractState {
        let keys = try connection.query(
            "SELECT subscription FROM projections.customer_subscriptions WHERE customer_id = $1 ORDER BY subscription",
            [.text(openId)], name: "subscriptions of customer").rows.compactMap { SubscriptionKey(text: try $0.decode(String.self, "subscription")) }
        let (attached, candidates) = try FactStore.facts(of: keys, on: connection)
        return WeChatContractState.of(openId: openId, productId: productId, facts: keys.flatMap { attached[$0] ?? [] } + candidates,
                                      catalogPeriods: catalogPeriods)
    }
}
