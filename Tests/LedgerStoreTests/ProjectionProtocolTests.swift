import Foundation
import LedgerCore
import LedgerTesting
import Postgres
import XCTest
@testable import LedgerStore

/// A projection registered only through the `Projection` protocol is kept live in the append
/// transaction, caught up by the worker's one pass after appends that skipped it, and rebuilt to
/// what it held live.
final class ProjectionProtocolTests: XCTestCase {
    /// Records every position it applies in `public.test_projection`, under the refund-cases
    /// checkpoint row (a test cannot add a `ProjectionName`).
    struct PositionsProjection: Projection {
        var names: [ProjectionName] { [.refundCases] }
        var isLive: Bool { true }

        func tables(of name: ProjectionName) -> [ProjectionTable] { [] }

        func apply(_ range: ClosedRange<Int64>, to names: Set<ProjectionName>, next: Bool, on connection: Connection) throws -> Int {
            try connection.query(
                "INSERT INTO public.test_projection (position) SELECT position FROM events WHERE position BETWEEN $1 AND $2",
                [.int64(range.lowerBound), .int64(range.upperBound)], name: "test apply")
            return range.count
        }

        func load(_ names: Set<ProjectionName>, into load: BulkLoad) throws -> BulkLoad.Counts {
            throw ProjectionError.refused("not used")
        }
    }

    func event(_ n: Int) -> NewEvent {
        let payload = Data(#"{"n":\#(n)}"#.utf8)
        return NewEvent(streamId: "ledger:test", dedupeKey: "e\(n)", source: .ledger, type: "test/e", environment: nil,
                        signedAt: 1, payload: payload, raw: payload)
    }

    func testARegisteredProjectionIsKeptLiveCaughtUpAfterAGapAndRebuiltToTheSameRows() async throws {
        let database = try ProjectionScratchDatabase()
        defer { database.drop() }
        try database.adminScript("""
            CREATE TABLE public.test_projection (position bigint PRIMARY KEY);
            GRANT SELECT, INSERT, DELETE ON public.test_projection TO ledger_service, ledger_projector;
            """)
        let db = database.store(poolSize: 4)
        let pool = db.pool
        defer { pool.close() }
        func rows() throws -> [Int64] {
            try database.adminQuery("SELECT position FROM public.test_projection ORDER BY position").rows.map { try $0.decode(Int64.self, "position") }
        }
        func checkpoint() throws -> Int64 {
            try database.adminQuery("SELECT position FROM projection_checkpoints WHERE projection = 'refund_cases'").first!.decode(Int64.self, "position")
        }
        // Live: in the append transaction.
        let live = EventStore(pool: pool, hooks: [LiveProjectionHook(PositionsProjection(), folder: SharedFold(catalogPeriods: [:]))])
        _ = try await live.append([event(1), event(2), event(3)])
        XCTAssertEqual(try rows(), [1, 2, 3])
        XCTAssertEqual(try checkpoint(), 3)
        // Appends without the hook leave a gap; the live hook then leaves it to the catch-up.
        _ = try await EventStore(pool: pool).append([event(4), event(5)])
        _ = try await live.append(event(6))
        XCTAssertEqual(try rows(), [1, 2, 3], "behind: the hook does not skip ahead")
        let projector = Projector(catalog: ProjectionFixture.catalog)
        let worker = ProjectionWorker(pool: pool, projector: projector, batchSize: 2, projections: [.refundCases],
                                      registered: [PositionsProjection()])
        let passes = try await worker.catchUp()
        XCTAssertEqual(try rows(), [1, 2, 3, 4, 5, 6])
        XCTAssertEqual(try checkpoint(), 6)
        XCTAssertTrue(passes.contains { $0.projection == .refundCases && $0.outcome == .advanced(from: 4, to: 5) }, "\(passes)")
        // Rebuilt from position 0 through the same `apply`: the rows it held live.
        let liveRows = try rows()
        try database.adminScript("DELETE FROM public.test_projection; UPDATE projection_checkpoints SET position = 0 WHERE projection = 'refund_cases';")
        _ = try await worker.catchUp()
        XCTAssertEqual(try rows(), liveRows)
        // A failing event stops the projection with the error recorded, never skipping it.
        try database.adminScript("DELETE FROM public.test_projection WHERE position = 6; UPDATE projection_checkpoints SET position = 4 WHERE projection = 'refund_cases';")
        let failed = try await worker.runOnce().first { $0.projection == .refundCases }
        guard case .failed(.eventFailed(_, let position, _))? = failed?.outcome else { return XCTFail("\(String(describing: failed))") }
        XCTAssertEqual(position, 5, "5 is already there: its insert fails")
        XCTAssertEqual(try checkpoint(), 4)
    }
}
