import Foundation
import LedgerCore
internal import Postgres

/// Every id a WeChat order is known by, the subscriptions it belongs to, and the order streams
/// (`wechat:order:<id>`) holding events that name it — the one alias index routing, linking,
/// orphans and refund decisions use. The index is the facts' order columns (`transaction_id` ~
/// `order_alias` of WeChat and ledger facts: a delivery's OutTradeNo ~ WeChatPayInfo.MchOrderNo /
/// TransactionId, a refund's MchOrderId ~ WxOrderId, a `query_order` answer's ids, a link's order
/// ~ the order it matched), the same pairs the folds join orders by (`WeChatOrderLinks`,
/// `SubscriptionFold.orderIds`); every push that names two ids feeds it when its facts are recorded.
public struct WeChatOrderGroup: Sendable, Equatable {
    /// Every id of the order, sorted.
    public var ids: [String]
    /// The subscriptions the order belongs to (its deliveries', its links'), least first.
    public var subscriptions: [SubscriptionKey]
    /// For each subscription, an id of the order that subscription's own facts state (a delivery's
    /// OutTradeNo, else a link's order): what a new link names as `linked_via`.
    public var anchors: [SubscriptionKey: String]
    /// Order streams holding events that name the order.
    public var orderStreams: [String]
    /// Those of `orderStreams` a link event already ties to a subscription.
    public var linkedStreams: Set<String>
    /// Order streams holding an ordinary purchase (a delivery without AppleSubscriptionInfo): the
    /// order's own stream, never an orphan.
    public var purchaseStreams: Set<String>

    public var unlinkedStreams: [String] {
        orderStreams.filter { !linkedStreams.contains($0) && !purchaseStreams.contains($0) }
    }
}

/// An order stream no link ties to a subscription: its events (refunds, inquiries, answers) count
/// for nobody yet.
public struct WeChatOrphan: Sendable, Equatable {
    public var stream: String
    public var orderId: String
    public var firstRecordedAt: EpochMillis
    public var lastRecordedAt: EpochMillis
    public var events: Int
    /// The event types in the stream, sorted.
    public var types: [String]
    /// Every id the ledger knows for the order (the alias index), and the openid a refund named.
    public var knownIds: [String]
    public var openIds: [String]
}

/// Whether a plaintext push's nonce may be used (`wechat_claim_nonce`, Migrations/0008).
public enum NonceClaim: String, Sendable {
    /// First use (or the earlier holder never stored its event).
    case fresh
    /// The same body again: a re-push.
    case same
    /// Another body: a replayed query string.
    case reused
}

/// What a refund inquiry is decided on, read in one REPEATABLE READ transaction bounded by the
/// decision's budget (`WeChatQueries.refundDecisionInputs`).
public struct RefundDecisionInputs: Sendable {
    /// The answer already stored for this asking (a re-push of it), if any.
    public var storedAnswer: RecordedEvent?
    /// The order group.
    public var group: WeChatOrderGroup
    /// The facts naming the order's ids, every fact of the subscriptions it belongs to, and the
    /// order facts that join those subscriptions: what `RefundEvidence.facts` folds.
    public var known: [Fact]
    /// The customer (the delivery's openid, else the subscription's) and the facts of every
    /// subscription that names them, for their earlier refund cases.
    public var customer: String?
    public var customerFacts: [Fact]
    /// Hex SHA-256 of the raw bytes of the order's deliveries, by event position.
    public var rawSHA256: [Int64: String]
}

/// LedgerStore's WeChat reads and the plaintext nonce memory (`store.wechat`).
public struct WeChatQueries: Sendable {
    let pool: ConnectionPool
    /// The catalog's periods (`SubscriptionFold.catalogPeriods`) for the contracts it folds.
    var catalogPeriods: [String: EpochMillis] = [:]

    // MARK: the alias index

    /// The order group of `ids` (with everything the index ties to them).
    public func orderGroup(naming ids: [String]) async throws(StoreError) -> WeChatOrderGroup {
        let start = ids.filter { !$0.isEmpty }
        if start.isEmpty { return WeChatOrderGroup(ids: [], subscriptions: [], anchors: [:], orderStreams: [], linkedStreams: [], purchaseStreams: []) }
        return try await read { connection in try Self.orderGroup(naming: start, on: connection) }
    }

    static func orderGroup(naming start: [String], on connection: Connection) throws -> WeChatOrderGroup {
        let version = Int64(FactStore.version)
        // The closure over the alias pairs, in one statement: UNION drops ids already found, so it
        // ends when no new id appears (the chains are as long as the ids authentic pushes state).
        let idRows = try connection.query(
            """
            WITH RECURSIVE ids(id) AS (
                SELECT unnest($2::text[])
              UNION
                SELECT CASE WHEN f.transaction_id = ids.id THEN f.order_alias ELSE f.transaction_id END
                FROM ids JOIN public.facts f
                  ON f.schema_version = $1 AND f.origin IN ('wechat', 'ledger')
                 AND f.transaction_id IS NOT NULL AND f.order_alias IS NOT NULL
                 AND (f.transaction_id = ids.id OR f.order_alias = ids.id)
            )
            SELECT id FROM ids WHERE id <> ''
            """, [.int64(version), .array(start.map { .text($0) }, of: .text)],
            name: "wechat order closure")
        let ids = try idRows.rows.map { try $0.decode(String.self, "id") }.sorted()
        // Who the order belongs to: deliveries (OutTradeNo with a subscription) and links.
        let owners = try connection.query(
            """
            SELECT DISTINCT subscription, transaction_id, kind, origin FROM public.facts
            WHERE schema_version = $1 AND origin IN ('wechat', 'ledger') AND transaction_id = ANY($2)
              AND subscription IS NOT NULL AND kind IN ('transaction', 'order_alias')
            """, [.int64(version), .array(ids.map { .text($0) }, of: .text)], name: "wechat order owners")
        var subscriptions = Set<SubscriptionKey>()
        var anchors: [SubscriptionKey: (id: String, delivery: Bool)] = [:]
        for row in owners.rows {
            guard let key = SubscriptionKey(text: try row.decode(String.self, "subscription")) else { continue }
            let id = try row.decode(String.self, "transaction_id")
            subscriptions.insert(key)
            // A delivery's OutTradeNo is the best anchor, then the least id a fact states.
            let delivery = try row.decode(String.self, "kind") == "transaction"
            if let current = anchors[key], current.delivery && !delivery || current.delivery == delivery && current.id <= id { continue }
            anchors[key] = (id, delivery)
        }
        let streams = ids.map { StreamId.wechatOrder($0).text }
        let present = try connection.query(
            """
            SELECT stream_id, bool_or(type = $2 AND source = 'wechat') AS purchase
            FROM events WHERE stream_id = ANY($1) GROUP BY stream_id
            """, [.array(streams.map { .text($0) }, of: .text), .text(XPayEventName.goodsDeliver)], name: "wechat order streams")
        var orderStreams: [String] = []
        var purchases = Set<String>()
        for row in present.rows {
            let stream = try row.decode(String.self, "stream_id")
            orderStreams.append(stream)
            if try row.decode(Bool.self, "purchase") { purchases.insert(stream) }
        }
        var linked = Set<String>()
        if !orderStreams.isEmpty {
            let keys = orderStreams.map { DedupeKey.orderLink(StreamId($0)) }
            for row in try connection.query(
                "SELECT DISTINCT dedupe_key FROM events WHERE dedupe_key = ANY($1) AND source = 'ledger'",
                [.array(keys.map { .text($0) }, of: .text)], name: "wechat order links").rows {
                let key = try row.decode(String.self, "dedupe_key")
                if let stream = orderStreams.first(where: { DedupeKey.orderLink(StreamId($0)) == key }) { linked.insert(stream) }
            }
        }
        return WeChatOrderGroup(ids: ids, subscriptions: subscriptions.sorted(), anchors: anchors.mapValues(\.id),
                                orderStreams: orderStreams.sorted(), linkedStreams: linked, purchaseStreams: purchases)
    }

    // MARK: refund decisions

    /// Everything a refund inquiry is decided on, in one REPEATABLE READ READ ONLY transaction
    /// whose statements and lock waits end by `timeout` (the database aborts them: the caller's
    /// fallback answer is then not racing a read that keeps a connection busy).
    ///
    /// - Parameters:
    ///   - stream, answerKey: where this asking's answer would be stored (a stored one is returned).
    public func refundDecisionInputs(payOrderId: String, stream: String, answerKey: String,
                                     timeout: Duration) async throws(StoreError) -> RefundDecisionInputs {
        let millis = max(1, Int(timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000))
        return try await read { connection in
            try connection.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", name: "BEGIN")
            do {
                try connection.query("SELECT set_config('statement_timeout', $1, true), set_config('lock_timeout', $1, true)",
                                     [.text("\(millis)ms")], name: "decision timeouts")
                let inputs = try Self.decisionInputs(payOrderId: payOrderId, stream: stream, answerKey: answerKey, on: connection)
                try connection.query("COMMIT", name: "COMMIT")
                return inputs
            } catch {
                if !connection.isBroken { _ = try? connection.query("ROLLBACK", name: "ROLLBACK") }
                throw error
            }
        }
    }

    static func decisionInputs(payOrderId: String, stream: String, answerKey: String, on connection: Connection) throws -> RefundDecisionInputs {
        let version = Int64(FactStore.version)
        let stored = try connection.query(
            "SELECT \(EventStore.columns) FROM events WHERE stream_id = $1 AND dedupe_key = $2",
            [.text(stream), .text(answerKey)], name: "stored refund answer").rows.map(EventStore.decode).first
        let group = try orderGroup(naming: [payOrderId], on: connection)
        var found: [FactPlace: Fact] = [:]
        if !group.ids.isEmpty {
            for f in try connection.query(
                """
                SELECT \(FactRows.columns) FROM public.facts
                WHERE schema_version = $1 AND origin IN ('wechat', 'ledger') AND (transaction_id = ANY($2) OR order_alias = ANY($2))
                """, [.int64(version), .array(group.ids.map { .text($0) }, of: .text)], name: "facts of the order").facts() {
                found[FactPlace(f)] = f
            }
        }
        if !group.subscriptions.isEmpty {
            let (attached, candidates) = try FactStore.facts(of: group.subscriptions, on: connection)
            for f in attached.values.flatMap({ $0 }) + candidates { found[FactPlace(f)] = f }
        }
        let known = found.keys.sorted().map { found[$0]! }
        let idSet = Set(group.ids)
        let deliveries = known.filter { ($0.kind == .transaction || $0.kind == .purchase) && $0.origin == .wechat && idSet.contains($0.transactionId ?? "") }
        var hashes: [Int64: String] = [:]
        if !deliveries.isEmpty {
            for row in try connection.query(
                "SELECT position, encode(sha256(raw), 'hex') AS digest FROM events WHERE position = ANY($1)",
                [.array(deliveries.map { .int64($0.position) }, of: .int8)], name: "delivery raw digests").rows {
                hashes[try row.decode(Int64.self, "position")] = try row.decode(String.self, "digest")
            }
        }
        // The customer: the earliest delivery's openid, else the least openid of the subscriptions'
        // WeChat facts (as `RefundEvidence` picks it).
        let delivery = deliveries.min { ($0.position, $0.ordinal) < ($1.position, $1.ordinal) }
        let contract = known.filter { $0.origin == .wechat && ($0.kind == .transaction || $0.kind == .renewal) && $0.subscription != nil }
        let customer = delivery?.customerId ?? contract.compactMap(\.customerId).filter { !$0.isEmpty }.min()
        var customerFacts: [Fact] = []
        if let customer {
            let keys = try connection.query(
                "SELECT subscription FROM projections.customer_subscriptions WHERE customer_id = $1 ORDER BY subscription",
                [.text(customer)], name: "subscriptions of the customer").rows.compactMap {
                    SubscriptionKey(text: try $0.decode(String.self, "subscription"))
                }
            if !keys.isEmpty {
                let (attached, candidates) = try FactStore.facts(of: keys, on: connection)
                customerFacts = keys.flatMap { attached[$0] ?? [] } + candidates
            }
        }
        return RefundDecisionInputs(storedAnswer: stored, group: group, known: known, customer: customer,
                                    customerFacts: customerFacts, rawSHA256: hashes)
    }

    /// The answer stored under `answerKey` in `stream` (a concurrent asking's), if any.
    public func storedAnswer(stream: String, answerKey: String) async throws(StoreError) -> RecordedEvent? {
        try await stored(stream: stream, dedupeKey: answerKey)
    }

    /// The event stored under `dedupeKey` in `stream` (the copy a duplicate push was answered with).
    public func stored(stream: String, dedupeKey: String) async throws(StoreError) -> RecordedEvent? {
        try await read { connection in
            try connection.query("SELECT \(EventStore.columns) FROM events WHERE stream_id = $1 AND dedupe_key = $2",
                                 [.text(stream), .text(dedupeKey)], name: "stored event by key").rows.map(EventStore.decode).first
        }
    }

    // MARK: plaintext nonces

    /// Claims `nonce` for a body (see `NonceClaim`).
    public func claimNonce(_ nonce: String, timestamp: Int64, bodySHA256: String, windowSeconds: Int) async throws(StoreError) -> NonceClaim {
        try await read { connection in
            let text = try connection.query("SELECT wechat_claim_nonce($1, $2, $3, $4::integer) AS claim",
                                            [.text(nonce), .int64(timestamp), .text(bodySHA256), .int64(Int64(windowSeconds))],
                                            name: "claim nonce").first?.decode(String.self, "claim")
            guard let claim = text.flatMap(NonceClaim.init(rawValue:)) else {
                throw StoreError.corrupt("wechat_claim_nonce answered \(text ?? "nothing"); is Migrations/0008 applied?")
            }
            return claim
        }
    }

    /// Records that the push holding `nonce` is stored (so the nonce is never handed to another body).
    public func markNonceStored(_ nonce: String, bodySHA256: String, position: Int64) async throws(StoreError) {
        try await read { connection in
            _ = try connection.query("UPDATE wechat_push_nonces SET stored_position = $3 WHERE nonce = $1 AND body_sha256 = $2",
                                     [.text(nonce), .text(bodySHA256), .int64(position)], name: "nonce stored")
        }
    }

    // MARK: auditors and operators

    static let orphanQuery = """
        SELECT e.stream_id, min(e.recorded_at) AS first_recorded, max(e.recorded_at) AS last_recorded, count(*) AS events,
               string_agg(DISTINCT e.type, ',') AS types
        FROM events e
        WHERE e.stream_id LIKE 'wechat:order:%'
        GROUP BY e.stream_id
        HAVING min(e.recorded_at) < $1 AND NOT bool_or(e.type = '\(XPayEventName.goodsDeliver)' AND e.source = 'wechat')
           AND NOT EXISTS (SELECT 1 FROM events l WHERE l.dedupe_key = 'link:' || e.stream_id AND l.source = 'ledger')
        """

    /// Order streams no link ties to a subscription whose first event was recorded before
    /// `recordedBefore`, oldest first, with what the ledger knows of their order.
    public func orphans(recordedBefore: EpochMillis, limit: Int) async throws(StoreError) -> [WeChatOrphan] {
        try await read { connection in
            let rows = try connection.query(Self.orphanQuery + " ORDER BY first_recorded, e.stream_id LIMIT $2",
                                            [.timestamptz(millis: recordedBefore), .int64(Int64(limit))], name: "wechat orphans")
            var out: [WeChatOrphan] = []
            for row in rows.rows {
                let stream = try row.decode(String.self, "stream_id")
                guard case .wechatOrder(let order) = StreamId(stream).kind else { continue }
                let group = try Self.orderGroup(naming: [order], on: connection)
                let openIds = try connection.query(
                    """
                    SELECT DISTINCT customer_id FROM public.facts
                    WHERE schema_version = $1 AND stream_id = $2 AND customer_id IS NOT NULL ORDER BY customer_id
                    """, [.int64(Int64(FactStore.version)), .text(stream)], name: "orphan customers").rows.map {
                        try $0.decode(String.self, "customer_id")
                    }
                out.append(WeChatOrphan(
                    stream: stream, orderId: order, firstRecordedAt: try row.decode(Int64.self, "first_recorded"),
                    lastRecordedAt: try row.decode(Int64.self, "last_recorded"), events: Int(try row.decode(Int64.self, "events")),
                    types: (try row.decode(String?.self, "types") ?? "").split(separator: ",").map(String.init).sorted(),
                    knownIds: group.ids, openIds: openIds))
            }
            return out
        }
    }

    /// How many order streams are orphans by `recordedBefore` (for `/metrics`).
    public func orphanCount(recordedBefore: EpochMillis) async throws(StoreError) -> Int {
        try await read { connection in
            Int(try connection.query("SELECT count(*) AS n FROM (\(Self.orphanQuery)) o", [.timestamptz(millis: recordedBefore)],
                                     name: "wechat orphan count").first?.decode(Int64.self, "n") ?? 0)
        }
    }

    /// Authentic WeChat events the ledger could not interpret (`unreadable` facts), for `/metrics`.
    public func unreadableCount() async throws(StoreError) -> Int {
        try await read { connection in
            Int(try connection.query(
                "SELECT count(*) AS n FROM public.facts WHERE schema_version = $1 AND kind = 'unreadable' AND origin = 'wechat'",
                [.int64(Int64(FactStore.version))], name: "wechat unreadable count").first?.decode(Int64.self, "n") ?? 0)
        }
    }

    /// One order for auditors: its group, every fact naming its ids, and those facts' events.
    public func order(_ id: String) async throws(StoreError) -> (group: WeChatOrderGroup, facts: [Fact], events: [RecordedEvent]) {
        try await read { connection in
            let group = try Self.orderGroup(naming: [id], on: connection)
            let facts = try connection.query(
                """
                SELECT \(FactRows.columns) FROM public.facts
                WHERE schema_version = $1 AND origin IN ('wechat', 'ledger') AND (transaction_id = ANY($2) OR order_alias = ANY($2))
                ORDER BY position, ordinal
                """, [.int64(Int64(FactStore.version)), .array(group.ids.map { .text($0) }, of: .text)], name: "facts of an order")
                .facts()
            let positions = Array(Set(facts.map(\.position))).sorted()
            let events = positions.isEmpty ? [] : try connection.query(
                "SELECT \(EventStore.columns) FROM events WHERE position = ANY($1) ORDER BY position",
                [.array(positions.map { .int64($0) }, of: .int8)], name: "events of an order").rows.map(EventStore.decode)
            return (group, facts, events)
        }
    }

    /// Every (openid, product) the ledger's WeChat facts name with a subscription: what the
    /// contract reconciliation asks WeChat about.
    public func contractPairs() async throws(StoreError) -> [(openId: String, productId: String)] {
        try await read { connection in
            try connection.query(
                """
                SELECT DISTINCT customer_id, coalesce(r_product_id, product_id) AS product_id FROM public.facts
                WHERE schema_version = $1 AND origin = 'wechat' AND kind IN ('renewal', 'transaction')
                  AND subscription IS NOT NULL AND customer_id IS NOT NULL AND coalesce(r_product_id, product_id) IS NOT NULL
                ORDER BY 1, 2
                """, [.int64(Int64(FactStore.version))], name: "wechat contract pairs").rows.map {
                    (try $0.decode(String.self, "customer_id"), try $0.decode(String.self, "product_id"))
                }
        }
    }

    private func read<T: Sendable>(_ body: @escaping @Sendable (Connection) throws -> T) async throws(StoreError) -> T {
        do { return try await pool.withConnection(body) } catch { throw StoreError(error) }
    }
}
