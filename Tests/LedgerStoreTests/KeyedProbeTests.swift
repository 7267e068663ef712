import LedgerCore
import Postgres
import XCTest

@testable import LedgerStore

/// Keyed batch reads are one index probe per key (FactStore's note): the append's dedupe and
/// answer, the fold's facts after the snapshots, the webhook ids after a time and the facts of
/// several subscriptions read their keys' rows and nothing else, even when the planner is told a
/// join over the whole table is the cheaper plan — as it is told by statistics taken while the
/// table was still small. Counted by PostgreSQL itself (`pg_stat_xact_user_tables`) in the
/// transaction that runs the read.
final class KeyedProbeTests: XCTestCase {
    /// Rows a transaction read from `table`: by sequential scans, and fetched through indexes.
    struct Reads: Equatable { var sequential: Int64; var fetched: Int64 }

    /// Runs `body` in a transaction whose planner avoids nested loops (the plan stale statistics
    /// lead to), and returns what it read from each of `tables` (schema-qualified).
    static func reads(_ tables: [String], on connection: Connection, _ body: () throws -> Void) throws -> [String: Reads] {
        try connection.query("BEGIN")
        defer { _ = try? connection.query("ROLLBACK") }
        try connection.query("SET LOCAL enable_nestloop = off")
        try connection.query("SET LOCAL enable_mergejoin = off")
        // The counters hold what this session read since it last reported to the statistics
        // system, earlier transactions included: the body's reads are the difference.
        func counters() throws -> [String: Reads] {
            var out: [String: Reads] = [:]
            for row in try connection.query(
                """
                SELECT schemaname || '.' || relname AS t, coalesce(seq_tup_read, 0) AS s, coalesce(idx_tup_fetch, 0) AS f
                FROM pg_stat_xact_user_tables WHERE schemaname || '.' || relname = ANY($1)
                """, [.array(tables.map { .text($0) }, of: .text)]).rows {
                out[try row.decode(String.self, "t")] = Reads(sequential: try row.decode(Int64.self, "s"), fetched: try row.decode(Int64.self, "f"))
            }
            return out
        }
        let before = try counters()
        try body()
        let after = try counters()
        return Dictionary(uniqueKeysWithValues: after.map { table, a in
            let b = before[table] ?? Reads(sequential: 0, fetched: 0)
            return (table, Reads(sequential: a.sequential - b.sequential, fetched: a.fetched - b.fetched))
        })
    }

    func testKeyedBatchReadsProbeTheirKeysWhateverJoinThePlannerPrefers() async throws {
        let database = try ProjectionScratchDatabase()
        defer { database.drop() }
        let db = database.store(poolSize: 4)
        defer { db.pool.close() }
        let projector = Projector(catalog: ProjectionFixture.catalog, clock: { ProjectionFixture.start + 150 * ProjectionFixture.day })
        let store = EventStore(pool: db.pool, hooks: [LiveProjectionHook(projector: projector)])
        try await ProjectionFixture.append(try ProjectionFixture.events(customers: 40, seed: 5), to: store)
        let connection = try database.connect()
        let totalEvents = try connection.query("SELECT count(*)::int8 AS n FROM events").first!.decode(Int64.self, "n")
        let totalFacts = try connection.query("SELECT count(*)::int8 AS n FROM public.facts").first!.decode(Int64.self, "n")
        XCTAssertGreaterThan(totalEvents, 200, "the log must be large enough for a whole-table read to show")

        // The append of five events already stored: the dedupe and the answer each look them up.
        let append = try Self.reads(["public.events"], on: connection) {
            let rows = try connection.query(
                """
                WITH e AS (SELECT * FROM events ORDER BY position DESC LIMIT 5)
                SELECT a.* FROM append_events(
                    (SELECT array_agg(stream_id ORDER BY position) FROM e), (SELECT array_agg(dedupe_key ORDER BY position) FROM e),
                    (SELECT array_agg(source ORDER BY position) FROM e), (SELECT array_agg(type ORDER BY position) FROM e),
                    (SELECT array_agg(environment ORDER BY position) FROM e), (SELECT array_agg(signed_at ORDER BY position) FROM e),
                    (SELECT array_agg(expires_at ORDER BY position) FROM e), (SELECT array_agg(payload ORDER BY position) FROM e),
                    (SELECT array_agg(raw ORDER BY position) FROM e)) a
                """).rows
            XCTAssertEqual(try rows.map { try $0.decode(Bool.self, "duplicate") }, Array(repeating: true, count: 5))
        }["public.events"]!
        XCTAssertEqual(append.sequential, 0, "the append read the log by a sequential scan: \(append)")
        // Each of the 9 array_agg subqueries reads the CTE's 5 rows once (5 fetched), then two probes per key.
        XCTAssertLessThanOrEqual(append.fetched, 5 + 2 * 5, "the append fetched \(append.fetched) of \(totalEvents) events for 5 keys")

        // Five subscriptions, each with its own history.
        let keys = try connection.query(
            "SELECT DISTINCT subscription FROM public.facts WHERE subscription IS NOT NULL ORDER BY subscription LIMIT 5")
            .rows.map { SubscriptionKey(text: try $0.decode(String.self, "subscription"))! }
        XCTAssertEqual(keys.count, 5)
        let theirFacts = try connection.query("SELECT count(*)::int8 AS n FROM public.facts WHERE subscription = ANY($1)",
                                               [.array(keys.map { .text($0.text) }, of: .text)]).first!.decode(Int64.self, "n")
        XCTAssertLessThan(theirFacts * 4, totalFacts, "the five must hold a small part of the facts")

        var read: [SubscriptionKey: [Fact]] = [:]
        let several = try Self.reads(["public.facts"], on: connection) {
            read = try FactStore.facts(of: keys, on: connection).attached
        }["public.facts"]!
        XCTAssertEqual(Int64(read.values.map(\.count).reduce(0, +)), theirFacts)
        XCTAssertEqual(several.sequential, 0, "\(several)")
        XCTAssertLessThanOrEqual(several.fetched, theirFacts, "read \(several.fetched) facts for \(theirFacts)")

        // The fold of a batch touching them reads, without snapshots, each one's facts once.
        let batch = keys.flatMap { read[$0]!.suffix(1) }
        let fold = try Self.reads(["public.facts"], on: connection) {
            let (folded, _) = try SharedFold(catalogPeriods: [:]).fold(
                batch, first: batch.map(\.position).min()!, last: batch.map(\.position).max()!, on: connection)
            XCTAssertEqual(folded.keys, Set(keys))
        }["public.facts"]!
        XCTAssertEqual(fold.sequential, 0, "\(fold)")
        XCTAssertLessThanOrEqual(fold.fetched, theirFacts, "the fold fetched \(fold.fetched) facts for \(theirFacts)")

        // Webhook events: 2,000 of other subscriptions, 3 of each of the five (one before the time asked).
        try database.adminScript("""
            SET ROLE ledger_projector;
            INSERT INTO projections.webhook_events (id, subscription, type, environment, customer_id, effective_at, position, sequence, body)
            SELECT 'evt_other_' || g, 'Production:other-' || (g % 400), 'subscription.renewed', 'Production', NULL, g, g, 0, '{}'
            FROM generate_series(1, 2000) g;
            INSERT INTO projections.webhook_events (id, subscription, type, environment, customer_id, effective_at, position, sequence, body)
            SELECT 'evt_' || s || '_' || g, s, 'subscription.renewed', 'Production', NULL, g * 100, g, 0, '{}'
            FROM unnest(ARRAY[\(keys.map { "'\($0.text)'" }.joined(separator: ","))]) s, generate_series(1, 3) g;
            RESET ROLE;
            """)
        var ids: [String: Set<String>] = [:]
        let webhooks = try Self.reads(["projections.webhook_events"], on: connection) {
            ids = try WebhookEventStore.ids(of: Dictionary(uniqueKeysWithValues: keys.map { ($0, EpochMillis(150)) }), next: false, on: connection)
        }["projections.webhook_events"]!
        XCTAssertEqual(ids, Dictionary(uniqueKeysWithValues: keys.map { ($0.text, Set(["evt_\($0.text)_2", "evt_\($0.text)_3"])) }))
        XCTAssertEqual(webhooks.sequential, 0, "\(webhooks)")
        XCTAssertLessThanOrEqual(webhooks.fetched, 10, "fetched \(webhooks.fetched) webhook events for 10")

        // One subscription holding the whole table (a customer tied and untied thousands of times
        // on a new ledger), with statistics that say so: asking after its latest time reads none.
        try database.adminScript("""
            SET ROLE ledger_projector;
            DELETE FROM projections.webhook_events;
            INSERT INTO projections.webhook_events (id, subscription, type, environment, customer_id, effective_at, position, sequence, body)
            SELECT 'evt_loop_' || g, '\(keys[0].text)', 'subscription.renewed', 'Production', NULL, 1000 + g, 3000 + g, 0, '{}'
            FROM generate_series(1, 8000) g;
            RESET ROLE;
            ANALYZE projections.webhook_events;
            """)
        var none: [String: Set<String>] = [:]
        let loop = try Self.reads(["projections.webhook_events"], on: connection) {
            none = try WebhookEventStore.ids(of: [keys[0]: 9_000], next: false, on: connection)
        }["projections.webhook_events"]!
        XCTAssertEqual(none, [:])
        XCTAssertEqual(loop.sequential, 0, "a subscription's many events were scanned to find none after its time: \(loop)")
    }
}
