import Foundation
import LedgerCore
import Postgres
import XCTest
@testable import LedgerStore

/// The catch-up worker: SKIP LOCKED coordination, stop-and-record on a failing event, resume
/// after the fix, and the contiguity assertion.
final class ProjectionWorkerTests: XCTestCase {
    var database: ProjectionScratchDatabase!
    var db: Store!
    var pool: ConnectionPool!
    let projector = Projector(catalog: ProjectionFixture.catalog, clock: { ProjectionFixture.start + 100 * ProjectionFixture.day })

    override func setUpWithError() throws {
        database = try ProjectionScratchDatabase()
        db = database.store(poolSize: 6)
        pool = db.pool
    }

    override func tearDown() {
        db?.close()
        database?.drop()
    }

    /// Appends without the hook, so only workers advance the checkpoints.
    func seed(customers: Int = 6, seed: UInt64 = 11) async throws -> (EventStore, Int64) {
        let store = EventStore(pool: pool)
        try await ProjectionFixture.append(try ProjectionFixture.events(customers: customers, seed: seed), to: store)
        return (store, try await store.headPosition())
    }

    /// A projection with a pass limit of its own takes that many events in one pass; the others
    /// keep the worker's batch size.
    func testAPassLimitWidensOnlyItsProjectionsPass() async throws {
        let (_, head) = try await seed()
        XCTAssertGreaterThan(head, 12)
        let worker = ProjectionWorker(pool: pool, projector: projector, batchSize: 5, passLimits: [.reports: 10_000])
        var widths: [ProjectionName: Int64] = [:]
        for pass in try await worker.runOnce() {
            guard let projection = pass.projection, case .advanced(let from, let to) = pass.outcome else { continue }
            widths[projection] = to - from + 1
        }
        XCTAssertEqual(widths[.reports], head, "the reports pass reaches the head at once")
        XCTAssertEqual(widths[.refundCases], 5, "the others take the batch size")
    }

    func testTwoWorkersNeverApplyTheSameEventTwice() async throws {
        let (store, head) = try await seed()
        let a = ProjectionWorker(pool: pool, projector: projector, batchSize: 5)
        let b = ProjectionWorker(pool: pool, projector: projector, batchSize: 5)
        async let passesA = a.catchUp()
        async let passesB = b.catchUp()
        let passes = try await passesA + passesB
        for projection in ProjectionName.allCases {
            let ranges = passes.filter { $0.projection == projection }.compactMap { pass -> ClosedRange<Int64>? in
                if case .advanced(let from, let to) = pass.outcome { return from...to }
                return nil
            }.sorted { $0.lowerBound < $1.lowerBound }
            var next: Int64 = 1
            for range in ranges {
                XCTAssertEqual(range.lowerBound, next, "\(projection): ranges must tile the log without overlap: \(ranges)")
                next = range.upperBound + 1
            }
            XCTAssertEqual(next, head + 1, "\(projection) must reach the head")
        }
        let oracle = try await ProjectionFixture.oracle(store)
        let queries = ProjectionQueries(pool: pool, catalog: ProjectionFixture.catalog)
        let now = ProjectionFixture.start + 100 * ProjectionFixture.day
        for stream in oracle.subscriptions.keys {
            let stored = try await queries.subscription(stream, now: now)
            XCTAssertEqual(stored, oracle.view(at: now).subscription(stream))
        }
    }

    func testAProjectionLockedByAnotherWorkerIsSkipped() async throws {
        let (_, head) = try await seed(customers: 2)
        let other = try database.connect(as: .service)
        try other.query("BEGIN")
        try other.query("SELECT 1 FROM projection_checkpoints WHERE projection = 'transactions' FOR UPDATE")
        let worker = ProjectionWorker(pool: pool, projector: projector, batchSize: 1000)
        let passes = try await worker.runOnce()
        XCTAssertEqual(passes.first { $0.projection == .transactions }?.outcome, .busy)
        XCTAssertEqual(passes.first { $0.projection == .subscriptions }?.outcome, .advanced(from: 1, to: head))
        try other.query("ROLLBACK")
        let again = try await worker.runOnce()
        XCTAssertEqual(again.first { $0.projection == .transactions }?.outcome, .advanced(from: 1, to: head))
        XCTAssertEqual(again.first { $0.projection == .subscriptions }?.outcome, .idle)
    }

    func testAFailingEventStopsItsProjectionWithTheErrorAndResumesAfterTheFix() async throws {
        let (store, head) = try await seed()
        // The "bug": writing one particular transaction fails.
        let all = try await store.readAll(after: 0, limit: 10_000)
        let victim = try XCTUnwrap(all.compactMap { FactDecoder.facts(of: $0).first { $0.kind == .transaction }?.transactionId }.dropFirst(7).first)
        let firstWithVictim = try XCTUnwrap(all.first { FactDecoder.facts(of: $0).contains { $0.kind == .transaction && $0.transactionId == victim } }?.position)
        try database.adminScript("""
            CREATE FUNCTION projections.refuse_victim() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.transaction_id = '\(victim)' THEN RAISE EXCEPTION 'simulated projection bug for %', NEW.transaction_id; END IF;
                RETURN NEW;
            END $$;
            CREATE TRIGGER refuse_victim BEFORE INSERT ON projections.transactions
                FOR EACH ROW EXECUTE FUNCTION projections.refuse_victim();
            """)
        let worker = ProjectionWorker(pool: pool, projector: projector, batchSize: 50)
        let passes = try await worker.catchUp()
        let failure = passes.last { $0.projection == .transactions }?.outcome
        guard case .failed(.eventFailed(.transactions, let position, let message)) = failure else {
            return XCTFail("transactions must stop at the failing event, got \(String(describing: failure))")
        }
        XCTAssertEqual(position, firstWithVictim)
        XCTAssertTrue(message.contains("simulated projection bug"), message)

        let statuses = try await ProjectionStatusReader.statuses(pool)
        let transactions = try XCTUnwrap(statuses.first { $0.name == "transactions" })
        XCTAssertEqual(transactions.status, "failed")
        XCTAssertEqual(transactions.position, firstWithVictim - 1, "every event before the failing one is applied, the failing one is not")
        XCTAssertEqual(transactions.failedPosition, firstWithVictim)
        XCTAssertEqual(transactions.lag, head - firstWithVictim + 1)
        XCTAssertTrue(transactions.lastError?.contains("simulated projection bug") == true)
        for other in statuses where other.name != "transactions" {
            XCTAssertEqual(other.position, head, "a failure stops only its own projection")
            XCTAssertEqual(other.status, "running")
        }

        // Retried, never skipped: another pass fails at the same place.
        let retry = try await worker.runOnce()
        guard case .failed(.eventFailed(_, let again, _)) = retry.first(where: { $0.projection == .transactions })?.outcome else {
            return XCTFail("the failing event must be retried and fail again")
        }
        XCTAssertEqual(again, firstWithVictim)
        XCTAssertEqual(try database.checkpoints()["transactions"], firstWithVictim - 1)

        // The fix: the projection resumes from where it stopped.
        _ = try database.adminQuery("DROP TRIGGER refuse_victim ON projections.transactions")
        _ = try await worker.catchUp()
        let resumed = try await ProjectionStatusReader.statuses(pool).first { $0.name == "transactions" }
        XCTAssertEqual(resumed?.position, head)
        XCTAssertEqual(resumed?.status, "running")
        XCTAssertNil(resumed?.lastError)
        XCTAssertNil(resumed?.failedPosition)
        let oracle = try await ProjectionFixture.oracle(store)
        let victimStream = try XCTUnwrap(oracle.subscriptions.first { $0.value.transaction(victim) != nil }?.key)
        let stored = try await ProjectionQueries(pool: pool, catalog: ProjectionFixture.catalog).transactions(victimStream)
        XCTAssertEqual(stored, oracle.subscriptions[victimStream]?.transactions)
    }

    func testAGapInPositionsStopsTheProjectionInsteadOfSkipping() async throws {
        let (_, head) = try await seed(customers: 2)
        XCTAssertGreaterThan(head, 6)
        // Only a superuser with triggers off can do this; it stands for a damaged log.
        try database.adminScript("""
            SET session_replication_role = replica;
            DELETE FROM events WHERE position = 5;
            """)
        let worker = ProjectionWorker(pool: pool, projector: projector, batchSize: 100)
        let passes = try await worker.runOnce()
        for projection in ProjectionName.allCases {
            XCTAssertEqual(passes.first { $0.projection == projection }?.outcome,
                           .failed(.gap(projection: projection, checkpoint: 4, found: 6)))
        }
        // The facts were recorded at append; the projections are what stops at the damaged log.
        let statuses = try await ProjectionStatusReader.statuses(pool).filter { !$0.name.hasPrefix("facts.") }
        XCTAssertEqual(statuses.count, ProjectionName.allCases.count)
        for status in statuses {
            XCTAssertEqual(status.position, 4)
            XCTAssertEqual(status.status, "failed")
            XCTAssertEqual(status.failedPosition, 6)
            XCTAssertTrue(status.lastError?.contains("gapless") == true, status.lastError ?? "")
        }
        // Still stopped on the next pass: the gap is never stepped over.
        let again = try await worker.runOnce()
        XCTAssertTrue(again.filter { $0.projection != nil }.allSatisfy { if case .failed(.gap) = $0.outcome { return true } else { return false } })
        XCTAssertEqual(try database.checkpoints().filter { !$0.key.hasPrefix("facts.") }, ["subscriptions": 4, "transactions": 4, "entitlements": 4, "apple_status": 4, "webhooks": 4])
    }

    /// The facts go through the same pass as the projections: an event whose facts cannot be
    /// stored stops the facts right before it (the events before it keep theirs), the projections
    /// stop at the facts, and fixing the cause resumes all of them.
    func testAnEventWhoseFactsFailStopsTheFactsAtItUntilFixed() async throws {
        let (store, head) = try await seed(customers: 2)
        XCTAssertGreaterThan(head, 6)
        try database.adminScript("""
            DELETE FROM facts;
            UPDATE projection_checkpoints SET position = 0 WHERE projection LIKE 'facts.v%';
            ALTER TABLE facts ADD CONSTRAINT test_refuse_position_5 CHECK (position <> 5);
            """)
        let worker = ProjectionWorker(pool: pool, projector: projector, batchSize: 100)
        for _ in 0..<2 {
            let passes = try await worker.runOnce()
            guard case .failed(.factsFailed(FactDecoder.schemaVersion, 5, let message))? = passes.first(where: { $0.projection == nil })?.outcome else {
                return XCTFail("\(passes)")
            }
            XCTAssertTrue(message.contains("test_refuse_position_5"), message)
            let facts = try await ProjectionStatusReader.statuses(pool).first { $0.name == "facts.v\(FactDecoder.schemaVersion)" }
            XCTAssertEqual(facts?.position, 4)
            XCTAssertEqual(facts?.status, "failed")
            XCTAssertEqual(facts?.failedPosition, 5)
            XCTAssertEqual(try database.checkpoints().filter { !$0.key.hasPrefix("facts.") }.values.max(), 4,
                           "no projection folds past the facts")
        }
        try database.adminScript("ALTER TABLE facts DROP CONSTRAINT test_refuse_position_5")
        _ = try await worker.catchUp()
        let statuses = try await ProjectionStatusReader.statuses(pool)
        XCTAssertTrue(statuses.allSatisfy { $0.position == head && $0.status == "running" && $0.failedPosition == nil }, "\(statuses)")
        let oracle = try await ProjectionFixture.oracle(store)
        let now = ProjectionFixture.start + 100 * ProjectionFixture.day
        for stream in oracle.subscriptions.keys {
            let stored = try await ProjectionQueries(pool: pool, catalog: ProjectionFixture.catalog).subscription(stream, now: now)
            XCTAssertEqual(stored, oracle.view(at: now).subscription(stream))
        }
    }

    func testRunWakesOnAppendNotifications() async throws {
        let store = EventStore(pool: pool)
        let worker = ProjectionWorker(pool: pool, projector: projector, batchSize: 100)
        let running = Task { await worker.run(pollInterval: .seconds(30)) }
        try await Task.sleep(for: .milliseconds(300))
        try await ProjectionFixture.append(try ProjectionFixture.events(customers: 1, seed: 3), to: store)
        let head = try await store.headPosition()
        var caughtUp = false
        for _ in 0..<50 where !caughtUp {
            try await Task.sleep(for: .milliseconds(100))
            caughtUp = try database.checkpoints().values.allSatisfy { $0 == head }
        }
        worker.stop()
        // Wake the waiting listener so run() returns promptly.
        _ = try database.adminQuery("NOTIFY ledger_events")
        await running.value
        XCTAssertTrue(caughtUp, "a NOTIFY must wake the worker long before its 30 s poll")
    }
}
