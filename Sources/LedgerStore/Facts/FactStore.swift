import Foundation
import LedgerCore
internal import Postgres

/// The SQL of `public.facts`: recording the facts `FactDecoder` derived, deriving what is
/// missing, and reading a subscription's facts (with the order facts that join it).
///
/// The facts of schema version v advance like a projection with checkpoint `facts.v<v>`: the
/// append transaction records a batch's facts when the checkpoint is right before the batch (the
/// usual case), else the runner's catch-up (`CatchUp.Lane.facts`, through `derive`) derives them from the stored events in position
/// order. Every projection reads facts only up to that checkpoint, so no reader ever folds an
/// event whose facts are missing.
///
/// Keyed batch reads (the facts, events, webhook events or report rows of several subscriptions)
/// are written as one index probe per key: `unnest` of the keys `CROSS JOIN LATERAL` a subquery
/// ending in `OFFSET 0`, which PostgreSQL cannot flatten into an ordinary join. Written as a join
/// or `= ANY`, the plan follows the table statistics, and in a log that grows faster than
/// autovacuum analyses it (a new installation, an import, a burst) PostgreSQL chose a hash join
/// over a sequential scan, or a scan of every fact up to a position, on every batch: the append
/// and the catch-up then cost more with each event stored. A probe per key costs the same whatever
/// the statistics say.
enum FactStore {
    static var version: Int { FactDecoder.schemaVersion }
    static var checkpoint: String { "facts.v\(version)" }

    /// Creates the checkpoint row of this build's version (at 0) if it does not exist. The catch-up
    /// calls it before every pass: `ON CONFLICT` alone would find the row locked by an append in
    /// flight (which advances it) and wait for that append to commit, so the row is looked for
    /// first, which never waits.
    static func ensureCheckpoint(on connection: Connection) throws {
        try connection.query(
            """
            INSERT INTO projection_checkpoints (projection, position, status)
            SELECT $1, 0, 'running' WHERE NOT EXISTS (SELECT 1 FROM projection_checkpoints WHERE projection = $1)
            ON CONFLICT (projection) DO NOTHING
            """,
            [.text(checkpoint)], name: "facts checkpoint")
    }

    /// The position up to which this build's facts are complete (0 when none).
    static func derivedUpTo(on connection: Connection) throws -> Int64 {
        try connection.query("SELECT position FROM projection_checkpoints WHERE projection = $1", [.text(checkpoint)],
                             name: "facts position").first?.decode(Int64.self, "position") ?? 0
    }

    /// In the append transaction: records the facts of the new events `first…last` when the facts
    /// checkpoint is right before them; returns false (recording nothing) otherwise — the catch-up
    /// derives them later from the same events with the same decoder.
    static func recordAppended(_ facts: [Fact], first: Int64, last: Int64, on connection: Connection) throws -> Bool {
        guard try !CatchUp.advanceLive([checkpoint], over: first...last, on: connection).isEmpty else { return false }
        try copy(facts, on: connection)
        return true
    }

    static func copy(_ facts: [Fact], on connection: Connection) throws {
        guard !facts.isEmpty else { return }
        var buffer: [UInt8] = []
        buffer.reserveCapacity(facts.count * 256)
        for f in facts { FactRows.append(f, version: version, to: &buffer) }
        try connection.copyIn("COPY public.facts (\(FactRows.columns)) FROM STDIN") { writer in try writer.write(buffer) }
    }

    /// Derives the facts of the events at `range` (the runner's facts lane, `CatchUp.Lane.facts`,
    /// which holds the checkpoint row and advances it) with the append's decoder, and the outbox
    /// items they cause. Reads the envelope and payload, never `raw`.
    static func derive(_ range: ClosedRange<Int64>, outbox: OutboxDerivation, on connection: Connection) throws {
        let events = try connection.query(
            """
            SELECT position, stream_id, dedupe_key, source, type, environment, signed_at, expires_at, payload,
                   ''::bytea AS raw, recorded_at
            FROM events WHERE position BETWEEN $1 AND $2 ORDER BY position
            """, [.int64(range.lowerBound), .int64(range.upperBound)], name: "events to derive").rows.map(EventStore.decode)
        let facts = events.flatMap(FactDecoder.facts(of:))
        try copy(facts, on: connection)
        // The outbox items these events cause, as the append would have written them.
        try outbox.apply(events, facts: facts, on: connection)
    }

    /// The facts at positions `range` (what a batch of the runner brings), in position and ordinal order.
    static func facts(in range: ClosedRange<Int64>, on connection: Connection) throws -> [Fact] {
        try connection.query(
            """
            SELECT \(FactRows.columns) FROM public.facts
            WHERE schema_version = $1 AND position >= $2 AND position <= $3 ORDER BY position, ordinal
            """, [.int64(Int64(version)), .int64(range.lowerBound), .int64(range.upperBound)], name: "facts in range")
            .facts()
    }

    /// Every fact of an event (timeline and evidence views), in ordinal order.
    static func facts(positions: [Int64], on connection: Connection) throws -> [Fact] {
        guard !positions.isEmpty else { return [] }
        return try connection.query(
            "SELECT \(FactRows.columns) FROM public.facts WHERE schema_version = $1 AND position = ANY($2) ORDER BY position, ordinal",
            [.int64(Int64(version)), .array(positions.map { .int64($0) }, of: .int8)], name: "facts of events")
            .facts()
    }

    /// Each subscription's own facts in `after+1 … through` (nil: to the end), by subscription in
    /// position order: what a fold snapshot at `after` lacks. One index probe per key.
    static func facts(after ranges: [SubscriptionKey: (after: Int64, through: Int64?)], name: String,
                      on connection: Connection) throws -> [SubscriptionKey: [Fact]] {
        guard !ranges.isEmpty else { return [:] }
        let keys = ranges.keys.sorted()
        let rows = try connection.query(
            """
            SELECT f.* FROM unnest($2::text[], $3::int8[], $4::int8[]) AS k(sub, after, through)
            CROSS JOIN LATERAL (
                SELECT \(FactRows.columns) FROM public.facts
                WHERE schema_version = $1 AND subscription = k.sub AND position > k.after AND position <= k.through OFFSET 0) f
            ORDER BY f.subscription, f.position, f.ordinal
            """,
            [.int64(Int64(version)), .array(keys.map { .text($0.text) }, of: .text),
             .array(keys.map { .int64(ranges[$0]!.after) }, of: .int8),
             .array(keys.map { .int64(ranges[$0]!.through ?? Int64.max) }, of: .int8)],
            name: name)
        var out: [SubscriptionKey: [Fact]] = [:]
        for fact in try rows.facts() {
            if let key = fact.subscription { out[key, default: []].append(fact) }
        }
        return out
    }

    /// The facts of `keys` (up to `upTo`), and the order facts without a subscription that may
    /// join them (refunds and inquiries naming one of their WeChat orders); fold both with
    /// `SubscriptionProjection.attach`.
    static func facts(
        of keys: [SubscriptionKey], upTo: Int64? = nil, on connection: Connection, prepared: Bool = false
    ) throws -> (attached: [SubscriptionKey: [Fact]], candidates: [Fact]) {
        if keys.isEmpty { return ([:], []) }
        let limit = upTo ?? .max
        // `prepared`: time-travel reads ask this per request; planning it each time was most of their database work.
        // One subscription (every `?at=` read) is asked with `= $2`, not `= ANY($2)`: PostgreSQL
        // plans a prepared `ANY` of an unknown array as costlier than each custom plan and so
        // never settles on the generic one, planning every call again.
        // Several are asked one index probe each (see the type's note on keyed batch reads).
        let single = keys.count == 1
        let sql = single ? """
            SELECT \(FactRows.columns) FROM public.facts
            WHERE schema_version = $1 AND subscription = $2 AND position <= $3
            ORDER BY subscription, position, ordinal
            """ : """
            SELECT f.* FROM unnest($2::text[]) AS k(sub)
            CROSS JOIN LATERAL (
                SELECT \(FactRows.columns) FROM public.facts
                WHERE schema_version = $1 AND subscription = k.sub AND position <= $3 OFFSET 0) f
            ORDER BY f.subscription, f.position, f.ordinal
            """
        // Each key once: a key named twice would be probed, and its facts answered, twice.
        let parameters: [PostgresValue] = [.int64(Int64(version)),
                                           single ? .text(keys[0].text) : .array(Set(keys).sorted().map { .text($0.text) }, of: .text), .int64(limit)]
        let rows = prepared ? try connection.queryPrepared(sql, parameters, name: "facts of subscriptions")
            : try connection.query(sql, parameters, name: "facts of subscriptions")
        var attached: [SubscriptionKey: [Fact]] = [:]
        var ids = Set<String>()
        for fact in try rows.facts() {
            guard let key = fact.subscription else { continue }
            attached[key, default: []].append(fact)
            if fact.origin == .wechat || fact.kind == .orderAlias {
                if let id = fact.transactionId { ids.insert(id) }
                if let id = fact.orderAlias { ids.insert(id) }
            }
        }
        let candidates = try unattached(naming: ids, upTo: limit, on: connection)
        return (attached, candidates)
    }

    /// Facts without a subscription naming any of `ids`, following the ids they bring in.
    static func unattached(naming start: Set<String>, upTo: Int64, on connection: Connection) throws -> [Fact] {
        var ids = start
        var frontier = Array(start)
        var found: [Int64: [Int: Fact]] = [:]
        var rounds = 0
        while !frontier.isEmpty && rounds < 8 {
            rounds += 1
            let rows = try connection.query(
                """
                SELECT \(FactRows.columns) FROM public.facts
                WHERE schema_version = $1 AND subscription IS NULL AND origin IN ('wechat', 'ledger') AND position <= $3
                  AND (transaction_id = ANY($2) OR order_alias = ANY($2))
                """, [.int64(Int64(version)), .array(frontier.map { .text($0) }, of: .text), .int64(upTo)],
                name: "order facts without subscription")
            frontier = []
            for fact in try rows.facts() {
                found[fact.position, default: [:]][fact.ordinal] = fact
                for id in [fact.transactionId, fact.orderAlias].compactMap({ $0 }) where ids.insert(id).inserted {
                    frontier.append(id)
                }
            }
        }
        return found.keys.sorted().flatMap { p in found[p]!.keys.sorted().map { found[p]![$0]! } }
    }

    /// The subscriptions `facts` concern: their own, and for facts without one, those whose
    /// orders they name (through aliases stated anywhere).
    static func subscriptions(touchedBy facts: [Fact], on connection: Connection) throws -> Set<SubscriptionKey> {
        var keys = Set(facts.compactMap(\.subscription))
        var ids = Set<String>()
        // Inquiries, answers and ordinary purchases change no subscription's fold (they state no
        // alias and no revocation): appending them refolds nothing.
        for f in facts where f.subscription == nil && ![.refundInquiry, .refundAnswer, .purchase, .unreadable].contains(f.kind) {
            if let id = f.transactionId { ids.insert(id) }
            if let id = f.orderAlias { ids.insert(id) }
        }
        var frontier = Array(ids)
        var rounds = 0
        while !frontier.isEmpty && rounds < 8 {
            rounds += 1
            let rows = try connection.query(
                """
                SELECT subscription, transaction_id, order_alias FROM public.facts
                WHERE schema_version = $1 AND origin IN ('wechat', 'ledger') AND (transaction_id = ANY($2) OR order_alias = ANY($2))
                UNION
                SELECT subscription, transaction_id, order_alias FROM public.facts
                WHERE schema_version = $1 AND order_alias = ANY($2)
                """, [.int64(Int64(version)), .array(frontier.map { .text($0) }, of: .text)], name: "subscriptions of orders")
            frontier = []
            for row in rows.rows {
                if let s = try row.decode(String?.self, "subscription"), let key = SubscriptionKey(text: s) { keys.insert(key) }
                for column in ["transaction_id", "order_alias"] {
                    if let id = try row.decode(String?.self, column), ids.insert(id).inserted { frontier.append(id) }
                }
            }
        }
        return keys
    }

    /// The subscriptions touched by the events `from…to` (worker batches).
    /// `ignoring`: facts of these kinds touch nothing (a projection none of them changes).
    static func subscriptions(touchedByPositions range: ClosedRange<Int64>, ignoring: Set<FactKind> = [],
                              on connection: Connection) throws -> Set<SubscriptionKey> {
        let rows = try connection.query(
            """
            SELECT \(FactRows.columns) FROM public.facts
            WHERE schema_version = $1 AND position BETWEEN $2 AND $3 AND (subscription IS NOT NULL OR transaction_id IS NOT NULL)
            """, [.int64(Int64(version)), .int64(range.lowerBound), .int64(range.upperBound)], name: "facts of positions")
        let facts = try rows.facts()
        return try subscriptions(touchedBy: ignoring.isEmpty ? facts : facts.filter { !ignoring.contains($0.kind) }, on: connection)
    }
}
