import Foundation
import LedgerCore
import Postgres
import XCTest
@testable import LedgerStore

/// The live hook's incremental fold (a per-subscription snapshot plus the facts after it, writing
/// only changed transaction rows) against the full refold, through the real store path.
final class LiveFoldTests: XCTestCase {
    var database: ProjectionScratchDatabase!
    var db: Store!
    var pool: ConnectionPool!

    override func setUpWithError() throws {
        database = try ProjectionScratchDatabase()
        db = database.store(poolSize: 4)
        pool = db.pool
    }

    override func tearDown() {
        db?.close()
        database?.drop()
    }

    /// A deterministic shuffle (SplitMix64), so a failure reproduces from its seed.
    struct SeededRandom: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// Long streams (years of renewals, upgrades, refunds), delivered shuffled in batches of
    /// random size through two "instances" (two event stores, each with its own snapshots, so each
    /// also meets facts the other appended after its snapshot), with one instance's snapshots
    /// dropped halfway: the live tables must equal a full refold of every subscription, and the
    /// pure fold of the decoded events.
    func testIncrementalFoldEqualsTheFullFoldOverShuffledStreams() async throws {
        for seed: UInt64 in [7, 1234] {
            try await checkShuffled(seed: seed)
            pool.close()
            database.drop()
            try setUpWithError()
        }
    }

    func checkShuffled(seed: UInt64) async throws {
        let clock = ProjectionFixture.start + 500 * ProjectionFixture.day
        let projector = Projector(catalog: ProjectionFixture.catalog, clock: { clock })
        let failures = HookFailures()
        let mine = FoldSnapshots(), theirs = FoldSnapshots()
        let first = EventStore(pool: pool, hooks: [LiveProjectionHook(projector: projector, snapshots: mine)], onHookFailure: failures.record)
        let second = EventStore(pool: pool, hooks: [LiveProjectionHook(projector: projector, snapshots: theirs)], onHookFailure: failures.record)
        var random = SeededRandom(state: seed)
        var events = try ProjectionFixture.events(customers: 16, days: 1100, seed: seed)
        events.shuffle(using: &random)
        XCTAssertGreaterThan(events.count, 150)
        XCTAssertGreaterThanOrEqual(Dictionary(grouping: events, by: \.streamId).values.map(\.count).max() ?? 0, 10,
                                    "streams of many events are the point")
        var index = 0
        var batch = 0
        while index < events.count {
            let size = Int.random(in: 1...6, using: &random)
            let slice = Array(events[index..<min(index + size, events.count)])
            // Mostly one instance, sometimes the other: snapshots then lag behind the table.
            let store = Int.random(in: 0..<4, using: &random) == 0 ? second : first
            _ = try await store.append(slice)
            index += size
            batch += 1
            if batch == 40 { mine.removeAll() }
        }
        XCTAssertEqual(failures.all, [], "seed \(seed)")
        let counters = mine.counters
        XCTAssertGreaterThan(counters.hits, 0, "seed \(seed): the snapshot path must have run")
        XCTAssertGreaterThan(counters.misses, 0, "seed \(seed): the full-read path must have run")

        let live = try database.dumpTables()
        XCTAssertFalse(live["transactions", default: []].isEmpty)
        // The full refold of every subscription, as the worker and the old live hook write it.
        let oracle = try await ProjectionFixture.oracle(first)
        let keys = Set(oracle.subscriptions.keys)
        let connection = try database.connect(as: .service)
        try connection.transaction { connection in
            // The projections are the projector's to write (Migrations/0016), as in the append.
            try connection.query("SET LOCAL ROLE ledger_projector")
            try projector.refold(subscriptions: keys, projections: Set(ProjectionName.subscriptionCuts), on: connection)
        }
        XCTAssertEqual(live, try database.dumpTables(), "seed \(seed): incremental live tables must equal the full refold")
        let queries = ProjectionQueries(pool: pool, catalog: ProjectionFixture.catalog)
        for (key, fold) in oracle.subscriptions {
            let stored = try await queries.transactions(key)
            XCTAssertEqual(stored, fold.transactions, "seed \(seed): transactions of \(key)")
        }
    }
}
