import Foundation
import LedgerCore
import Postgres
import Synchronization
import XCTest
@testable import LedgerStore

/// Rebuild with atomic swap while appends continue, dry run after a catalog change, and the
/// rights of the service role.
final class ProjectionRebuildTests: XCTestCase {
    var database: ProjectionScratchDatabase!
    var db: Store!
    var pool: ConnectionPool!
    static let now = ProjectionFixture.start + 150 * ProjectionFixture.day
    let projector = Projector(catalog: ProjectionFixture.catalog, clock: { ProjectionRebuildTests.now })

    override func setUpWithError() throws {
        database = try ProjectionScratchDatabase()
        db = database.store(poolSize: 6)
        pool = db.pool
    }

    override func tearDown() {
        db?.close()
        database?.drop()
    }

    /// Index definitions of the projection tables without their names (which differ by generation).
    func indexShapes() throws -> [String] {
        try database.adminQuery("""
            SELECT regexp_replace(indexdef, 'INDEX \\S+ ON', 'INDEX ON') AS shape FROM pg_indexes
            WHERE schemaname = 'projections' ORDER BY 1
            """).rows.map { try $0.decode(String.self, "shape") }
    }

    func testRebuiltTablesEqualTheLiveOnesAfterConcurrentIngestion() async throws {
        let migrationIndexes = try indexShapes()
        // Sixteen of the subscription cuts, refund cases and WeChat contracts, three of the Apple
        // status check, eight of the reports (two of them on report_dimensions, which a rebuild
        // shares rather than replaces), three of the webhook events.
        XCTAssertEqual(migrationIndexes.count, 30)
        let store = EventStore(pool: pool, hooks: [LiveProjectionHook(projector: projector)])
        var events = try ProjectionFixture.events(customers: 40, seed: 99)
        events.append(ProjectionFixture.hostileEvent(stream: "9000000000003", customer: "tab\tcustomer"))
        let split = events.count / 3
        try await ProjectionFixture.append(Array(events[..<split]), to: store)
        // Wreck the live tables so that only a real rebuild can make them right again.
        _ = try database.adminQuery("DELETE FROM projections.transactions WHERE subscription IN (SELECT subscription FROM projections.transactions LIMIT 3)")
        _ = try database.adminQuery("UPDATE projections.subscriptions SET product_id = 'bogus'")

        // Appenders run through the whole rebuild; the last third arrives between the bulk pass
        // and the swap, so the swap's catch-up must fold it.
        let middle = Array(events[split..<(2 * split)])
        let late = Array(events[(2 * split)...])
        let appender = Task { try await ProjectionFixture.append(middle, to: store, chunk: 3) }
        var rebuilder = db.rebuilder(projector: projector)
        rebuilder.flushBytes = 4096  // many flushes, as with a large log
        rebuilder.beforeSwap = {
            let done = DispatchSemaphore(value: 0)
            Task {
                try? await ProjectionFixture.append(late, to: store, chunk: 5)
                done.signal()
            }
            done.wait()
        }
        let progress = Mutex<[Int]>([])
        let report = try await rebuilder.run { done, _ in progress.withLock { $0.append(done) } }
        try await appender.value

        let head = try await store.headPosition()
        XCTAssertLessThanOrEqual(report.swapHead, head)
        XCTAssertLessThan(report.snapshotHead, report.swapHead, "the late third was appended between the bulk pass and the swap")
        XCTAssertGreaterThan(report.caughtUpStreams, 0, "events after the snapshot must be folded at the swap")
        XCTAssertEqual(report.events, Int(report.snapshotHead))
        XCTAssertEqual(progress.withLock { $0.last }, report.facts)
        XCTAssertEqual(try database.checkpoints().filter { $0.key != "apple_status" && $0.key != "webhooks" },
                       ["subscriptions": head, "transactions": head, "entitlements": head, "facts.v\(FactDecoder.schemaVersion)": head])

        // Live after the swap = rebuilt; and both = the fold of every event.
        let rebuilt = try database.dumpTables()
        let oracle = try await ProjectionFixture.oracle(store)
        XCTAssertEqual(rebuilt["subscriptions"]?.count, oracle.subscriptions.count)
        let queries = ProjectionQueries(pool: pool, catalog: ProjectionFixture.catalog)
        let view = oracle.view(at: Self.now)
        for (key, fold) in oracle.subscriptions {
            let state = try await queries.subscription(key, now: Self.now)
            XCTAssertEqual(state, view.subscription(key), key.text)
            let transactions = try await queries.transactions(key)
            XCTAssertEqual(transactions, fold.transactions, key.text)
        }
        for state in view.states {
            guard let customer = state.customerId, let environment = state.environment else { continue }
            let grants = try await queries.entitlements(customerId: customer, environment: environment, now: Self.now)
            XCTAssertEqual(grants, view.entitlements(catalog: ProjectionFixture.catalog, customerId: customer, environment: environment))
        }

        XCTAssertEqual(try indexShapes(), migrationIndexes, "a rebuilt table must have the migration's keys and indexes")

        // A second rebuild with no traffic changes nothing, and the live hook keeps working on
        // the swapped-in tables.
        let again = try await db.rebuilder(projector: projector).run()
        XCTAssertEqual(again.caughtUpStreams, 0)
        XCTAssertEqual(try database.dumpTables(), rebuilt)
        try await ProjectionFixture.append([ProjectionFixture.hostileEvent(stream: "9000000000004", customer: "late")], to: store)
        let lateState = try await queries.subscription(ProjectionFixture.key("9000000000004", "Sandbox"), now: Self.now)
        XCTAssertEqual(lateState?.productId, "com.example.premium.monthly")
        XCTAssertEqual(try database.checkpoints()["subscriptions"], head + 1)
        let leftovers = try database.adminQuery("SELECT count(*)::bigint AS n FROM pg_tables WHERE schemaname = 'projections' AND (tablename LIKE '%\\_next' OR tablename LIKE '%\\_retired')")
        XCTAssertEqual(try leftovers.first?.decode(Int64.self, "n"), 0)
    }

    func testRebuildingOneProjectionLeavesTheOthersAlone() async throws {
        let store = EventStore(pool: pool, hooks: [LiveProjectionHook(projector: projector)])
        try await ProjectionFixture.append(try ProjectionFixture.events(customers: 5, seed: 5), to: store)
        _ = try database.adminQuery("UPDATE projections.subscriptions SET product_id = 'untouched'")
        _ = try database.adminQuery("DELETE FROM projections.entitlements")
        let before = try database.dumpTables()
        let report = try await db.rebuilder(projector: projector).run(projections: [.entitlements])
        XCTAssertEqual(report.projections, [.entitlements])
        let after = try database.dumpTables()
        XCTAssertEqual(after["subscriptions"], before["subscriptions"])
        XCTAssertEqual(after["transactions"], before["transactions"])
        XCTAssertFalse(after["entitlements"]?.isEmpty ?? true)
        XCTAssertNotEqual(after["entitlements"], before["entitlements"])
        XCTAssertThrowsError(try ProjectionName.parse("entitlement")) { error in
            XCTAssertTrue(String(describing: error).contains("subscriptions, transactions, entitlements"))
        }
    }

    func testDryRunReportsGainsAndLossesAfterACatalogChangeAndChangesNothing() async throws {
        let store = EventStore(pool: pool, hooks: [LiveProjectionHook(projector: projector)])
        try await ProjectionFixture.append(try ProjectionFixture.events(customers: 30, seed: 17), to: store)
        let before = try database.dumpTables()
        let checkpoints = try database.checkpoints()

        // Same catalog: no change at all.
        let same = try await db.rebuilder(projector: projector).dryRun()
        XCTAssertEqual(same.gains, [])
        XCTAssertEqual(same.losses, [])

        // Monthly no longer grants "basic" but grants "video"; premium yearly grants nothing.
        let changed = ProductCatalog(entitlementsByProduct: [
            "com.example.monthly": ["video"], "com.example.yearly": ["basic"],
            "com.example.premium.monthly": ["basic", "premium"],
        ])
        let report = try await db.rebuilder(projector: Projector(catalog: changed, clock: { Self.now })).dryRun()
        let oracle = try await ProjectionFixture.oracle(store).view(at: Self.now)
        let old = Set(oracle.entitlements(catalog: ProjectionFixture.catalog).map(EntitlementChange.init))
        let new = Set(oracle.entitlements(catalog: changed).map(EntitlementChange.init))
        XCTAssertEqual(report.gains, new.subtracting(old).sorted())
        XCTAssertEqual(report.losses, old.subtracting(new).sorted())
        XCTAssertFalse(report.gains.isEmpty, "the population must include monthly subscribers entitled now")
        XCTAssertTrue(report.gains.allSatisfy { $0.entitlement == "video" })
        XCTAssertTrue(report.losses.contains { $0.entitlement == "basic" && $0.productId == "com.example.monthly" })
        XCTAssertTrue(report.dryRun)
        XCTAssertEqual(try database.dumpTables(), before, "a dry run must not write")
        XCTAssertEqual(try database.checkpoints(), checkpoints)
    }

    func testTheServiceRoleRebuildsWithoutSuperuserAndCannotTouchEvents() async throws {
        let service = try database.connect(as: .service)
        let role = try service.query("SELECT rolsuper, rolcreaterole FROM pg_roles WHERE rolname = current_user")
        XCTAssertEqual(try role.first?.decode(Bool.self, "rolsuper"), false)
        let store = EventStore(pool: pool, hooks: [LiveProjectionHook(projector: projector)])
        try await ProjectionFixture.append(try ProjectionFixture.events(customers: 3, seed: 1), to: store)
        _ = try await db.rebuilder(projector: projector).run()
        let owners = try database.adminQuery("SELECT DISTINCT tableowner::text AS owner FROM pg_tables WHERE schemaname = 'projections'")
        XCTAssertEqual(try owners.rows.map { try $0.decode(String.self, "owner") }, ["ledger_projector"],
                       "every generation of tables belongs to the projector role")

        for statement in [
            "UPDATE events SET type = 'x'", "DELETE FROM events", "TRUNCATE events", "DROP TABLE events",
            "ALTER TABLE events DISABLE TRIGGER USER", "UPDATE event_head SET position = position + 1",
            "SELECT position FROM event_head FOR UPDATE", "CREATE TABLE public.sneaky (x int)",
            "ALTER TABLE projection_checkpoints DROP COLUMN status",
        ] {
            XCTAssertThrowsError(try service.query(statement), statement) { error in
                XCTAssertEqual((error as? PostgresError)?.sqlState.map { ["42501", "42P01"].contains($0) }, true, "\(statement): \(error)")
            }
        }
        // The same refusals under the projector role the rebuild switches to.
        try service.query("BEGIN")
        try service.query("SET LOCAL ROLE ledger_projector")
        XCTAssertThrowsError(try service.query("DELETE FROM events"))
        try service.query("ROLLBACK")
        try service.query("BEGIN")
        try service.query("SET LOCAL ROLE ledger_projector")
        XCTAssertThrowsError(try service.query("INSERT INTO events (position, stream_id, dedupe_key, source, type, payload, raw) VALUES (1, 's', 'd', 'apple', 't', '{}', '')"))
        try service.query("ROLLBACK")
    }

    func testPartitionsSplitOnHostileStreamIdsAndCoverEveryStreamOnce() async throws {
        let store = EventStore(pool: pool, hooks: [LiveProjectionHook(projector: projector)])
        let streams = ["it's", "$s$x", "back\\slash", "é✓", "a\tb", "'); DROP TABLE events; --", "zz", "0"]
        try await ProjectionFixture.append(streams.map { ProjectionFixture.hostileEvent(stream: $0, customer: "c-\($0)") }, to: store)
        try await ProjectionFixture.append(try ProjectionFixture.events(customers: 6, seed: 8), to: store)
        let live = try database.dumpTables()
        for partitions in [1, 3, 7] {
            var rebuilder = db.rebuilder(projector: projector)
            rebuilder.partitions = partitions
            let report = try await rebuilder.run()
            XCTAssertEqual(report.streams, 6 + streams.count, "partitions \(partitions)")
            let head = try await store.headPosition()
            XCTAssertEqual(report.events, Int(head))
            XCTAssertEqual(try database.dumpTables(), live, "partitions \(partitions)")
        }
        let state = try await ProjectionQueries(pool: pool, catalog: ProjectionFixture.catalog).subscription(ProjectionFixture.key("'); DROP TABLE events; --", "Sandbox"), now: Self.now)
        XCTAssertEqual(state?.customerId, "c-'); drop table events; --", "appAccountToken is compared lowercased")
    }

    func testConcurrentRebuildsAreRefused() async throws {
        let holder = try database.connect(as: .service)
        try holder.query("SELECT pg_advisory_lock($1)", [.int64(Rebuilder.advisoryLockKey)])
        do {
            _ = try await db.rebuilder(projector: projector).run()
            XCTFail("a second rebuild must be refused")
        } catch {
            XCTAssertEqual(error, .rebuildInProgress)
        }
    }
}
