import Foundation
import LedgerCore
import LedgerTesting
import XCTest
@testable import LedgerStore

/// The store as a lifecycle service (postgres-nio's `PostgresClient` shape): `run()` owns the
/// catch-up worker; `shutdown()` or cancelling `run()`'s task stops it, lets queued appends commit,
/// refuses new ones (retry later) and closes the pools.
final class StoreLifecycleTests: XCTestCase {
    var database: TestDatabase!

    override func setUpWithError() throws { database = try TestDatabase.create(prefix: "store_lifecycle") }
    override func tearDownWithError() throws { try database?.drop() }

    func event(_ n: Int) -> NewEvent {
        let payload = Data(#"{"n":\#(n)}"#.utf8)
        return NewEvent(streamId: "ledger:test", dedupeKey: "e\(n)", source: .ledger, type: "test/e", environment: nil,
                        signedAt: 1, payload: payload, raw: payload)
    }

    func checkpoints() throws -> [Int64] {
        try database.query("SELECT position FROM projection_checkpoints WHERE status <> 'retired' ORDER BY projection").rows
            .map { try $0.decode(Int64.self, "position") }
    }

    func testRunCatchesUpAndShutdownDrainsAndEndsIt() async throws {
        // Without live projections only the worker `run()` owns can bring the checkpoints to the head.
        let store = database.store(liveProjections: false) { $0.catchUpInterval = .milliseconds(100) }
        let running = Task { try await store.run() }
        let outcomes = try await store.events.append((1...5).map(event))
        let head = outcomes.last!.position
        var caughtUp = false
        for _ in 0..<100 where !caughtUp {
            try await Task.sleep(for: .milliseconds(50))
            caughtUp = try checkpoints().allSatisfy { $0 == head }
        }
        let positions = try checkpoints()
        XCTAssertTrue(caughtUp, "run() keeps the projections caught up: \(positions)")

        // (Appends queued when it starts are committed and answered: EventStore.finish, tested with the writer.)
        await store.shutdown()
        try await running.value
        do {
            _ = try await store.events.append(event(7))
            XCTFail("a store that shut down refuses appends")
        } catch {
            XCTAssertTrue(error.isUnavailable, "\(error)")
        }
    }

    func testCancellingRunShutsTheStoreDown() async throws {
        let store = database.store()
        let running = Task { try await store.run() }
        _ = try await store.events.append(event(1))
        running.cancel()
        try await running.value
        do {
            _ = try await store.events.append(event(2))
            XCTFail("a cancelled store refuses appends")
        } catch {
            XCTAssertTrue(error.isUnavailable, "\(error)")
        }
        let stored = try database.query("SELECT count(*)::bigint AS n FROM events").first?.decode(Int64.self, "n")
        XCTAssertEqual(stored, 1)
    }
}
