import Foundation
import LedgerCore
import LedgerTesting
import Postgres
import XCTest
@testable import LedgerStore

/// The Apple status checks (`apple_status_checks`) are kept from the delta: a pass checks the
/// statements its range brings and only the earlier statements a fact of the range can change
/// (one signed by the statement's time). Delivered out of signing order, in small catch-up
/// ranges, the table must still hold exactly what a check of every statement from all facts
/// (a rebuild) holds.
final class AppleStatusProjectionTests: XCTestCase {
    func dump(_ database: ProjectionScratchDatabase) throws -> [String] {
        try database.adminQuery("SELECT x::text AS r FROM projections.apple_status_checks x ORDER BY x::text COLLATE \"C\"")
            .rows.map { try $0.decode(String.self, "r") }
    }

    func testChecksKeptFromTheDeltaOutOfOrderEqualAFullCheck() async throws {
        try await checkKeptFromTheDelta(snapshots: false)
    }

    /// The service's worker checks new statements on a fold — the append's snapshot or the one
    /// its own last pass left — when that is the same answer (LiveFold.swift;
    /// `AppleStatusProjection.checkFromSnapshots`): passes right after each append, passes lagging
    /// behind it (the append's snapshots past their range's end or start), facts
    /// appended by another instance (this one's snapshots lack them) and late facts signed before
    /// statements already checked. The table must still be a full check's, and both ways occur.
    func testChecksOnTheAppendsSnapshotsEqualAFullCheck() async throws {
        try await checkKeptFromTheDelta(snapshots: true)
    }

    private func checkKeptFromTheDelta(snapshots: Bool) async throws {
        let database = try ProjectionScratchDatabase()
        defer { database.drop() }
        let store = Store(.init(databaseURL: database.service, poolSize: 4, catalog: ProjectionFixture.catalog))
        defer { store.close() }
        let other = Store(.init(databaseURL: database.service, poolSize: 2, catalog: ProjectionFixture.catalog))
        defer { other.close() }
        var generator = LifecycleGenerator(customers: 12, days: 300, start: ProjectionFixture.start, seed: 0xA5)
        generator.noPriceRate = 0
        var notifications = generator.notificationsInDeliveryOrder()
        // Out of signing order: every fifth notification arrives after all the others, so its
        // facts land behind statements signed after them and must change those checks.
        let late = notifications.enumerated().filter { $0.offset % 5 == 2 }.map(\.element)
        notifications = notifications.enumerated().filter { $0.offset % 5 != 2 }.map(\.element) + late.reversed()
        let events = try notifications.map { try $0.recordedEvent(position: 0, recordedAt: 0).event }
        let worker = snapshots
            ? ProjectionWorker(pool: store.pool, projector: store.projector, batchSize: 3, projections: [.appleStatus],
                               registered: Projections.registered(projector: store.projector, snapshots: store.foldSnapshots))
            : ProjectionWorker(pool: store.pool, projector: store.projector, batchSize: 3, projections: [.appleStatus])
        var chunks = 0
        // With snapshots, as the service runs: a pass after each append batch; every fifth chunk
        // through another instance, and every fourth pass only after the next chunk, so it runs
        // behind the append.
        let size = snapshots ? 7 : 40
        for start in stride(from: 0, to: events.count, by: size) {
            try await ProjectionFixture.append(Array(events[start..<min(start + size, events.count)]),
                                               to: (snapshots && chunks % 5 == 3 ? other : store).events, chunk: 7)
            chunks += 1
            if !snapshots || chunks % 4 != 1 { _ = try await worker.catchUp() }
        }
        _ = try await worker.catchUp()
        let incremental = try dump(database)
        XCTAssertGreaterThan(incremental.count, events.count / 2, "most notifications state Apple's status")
        let disagreeing = try database.adminQuery("SELECT count(*) AS n FROM projections.apple_status_checks WHERE NOT agrees").first!.decode(Int64.self, "n")
        let arrivalDisagreeing = try database.adminQuery("SELECT count(*) AS n FROM projections.apple_status_checks WHERE NOT arrival_agrees").first!.decode(Int64.self, "n")
        XCTAssertGreaterThan(arrivalDisagreeing, disagreeing, "late facts made statements disagree on arrival that agree now: the order matters to this test")
        let statistics = store.liveFoldStatistics
        if snapshots {
            // Lagging passes start from the folds the projection left at its last range's end (52 of
            // 111 without them, 71 with them).
            XCTAssertGreaterThan(statistics.statusSnapshotChecks, events.count / 2, "in-order statements are checked on a fold, lagging passes too")
            XCTAssertGreaterThan(statistics.statusFullChecks, 10, "late facts, other instances' facts and lagging passes read the facts")
        } else {
            XCTAssertEqual(statistics.statusSnapshotChecks, 0)
        }

        let report = try await store.rebuilder().run(projections: [.appleStatus])
        XCTAssertEqual(report.projections, [.appleStatus])
        XCTAssertEqual(try dump(database), incremental, "the checks kept from the delta are a full check's")
    }
}
