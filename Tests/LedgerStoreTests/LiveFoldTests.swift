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
    /// Peeks at the snapshots from inside the append transaction, after the live fold ran: what
    /// the catch-up's passes see while an append is in flight. Essential, so `fail` fails the append.
    final class SnapshotProbe: AppendHook, @unchecked Sendable {
        let snapshots: FoldSnapshots
        var fail = false
        var seen: [SubscriptionKey: FoldSnapshots.Entry] = [:]
        var name: String { "snapshot probe" }
        var isEssential: Bool { true }
        init(snapshots: FoldSnapshots) { self.snapshots = snapshots }
        struct Refused: Error {}
        func didAppend(_ batch: AppendedBatch, in connection: Connection) throws -> AfterCommit? {
            seen = snapshots.peek(Array(snapshots.positions.keys))
            if fail { throw Refused() }
            return nil
        }
    }

    /// An append folds its batch onto a copy of the subscription's snapshot: while it runs, the
    /// snapshot is still there at its position with the fold it had (the catch-up's passes, which
    /// lag the append, fold onto it instead of reading the whole history), and a batch that fails
    /// leaves it as it was.
    func testAnAppendFoldsOntoACopyAndLeavesTheSnapshotInPlace() async throws {
        let clock = ProjectionFixture.start + 500 * ProjectionFixture.day
        let projector = Projector(catalog: ProjectionFixture.catalog, clock: { clock })
        let snapshots = FoldSnapshots()
        let probe = SnapshotProbe(snapshots: snapshots)
        let store = EventStore(pool: pool, hooks: [LiveProjectionHook(projector: projector, snapshots: snapshots), probe])
        let events = try ProjectionFixture.events(customers: 1, days: 400, seed: 11)
        let stream = try XCTUnwrap(Dictionary(grouping: events, by: \.streamId).max { $0.value.count < $1.value.count }?.value)
        XCTAssertGreaterThan(stream.count, 6)
        for event in stream.dropLast(2) { _ = try await store.append([event]) }
        let before = snapshots.peek(Array(snapshots.positions.keys))
        let key = try XCTUnwrap(before.max { $0.value.position < $1.value.position }?.key)
        let held = try XCTUnwrap(before[key])

        _ = try await store.append([stream[stream.count - 2]])
        let during = try XCTUnwrap(probe.seen[key], "an append in flight leaves the snapshot in place")
        XCTAssertEqual(during.position, held.position)
        XCTAssertEqual(during.facts, held.facts)
        XCTAssertEqual(during.fold.transactions, held.fold.transactions, "the append's fold changed a copy, not the snapshot")
        let after = try XCTUnwrap(snapshots.peek([key])[key])
        XCTAssertGreaterThan(after.position, held.position, "the commit stores the new snapshot")
        XCTAssertGreaterThan(after.facts, held.facts)

        probe.fail = true
        do {
            _ = try await store.append([stream[stream.count - 1]])
            XCTFail("the essential probe fails the append")
        } catch {}
        let kept = try XCTUnwrap(snapshots.peek([key])[key], "a failed batch keeps the snapshot")
        XCTAssertEqual(kept.position, after.position)
        XCTAssertEqual(kept.fold.transactions, after.fold.transactions)
        probe.fail = false
        _ = try await store.append([stream[stream.count - 1]])
        let oracle = try await ProjectionFixture.oracle(store)
        XCTAssertEqual(try XCTUnwrap(snapshots.peek([key])[key]).fold.transactions, oracle.subscriptions[key]?.transactions)
    }
}

