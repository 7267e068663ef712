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
        let database = try ProjectionScratchDatabase()
        defer { database.drop() }
        let store = Store(.init(databaseURL: database.service, poolSize: 4, catalog: ProjectionFixture.catalog))
        defer { store.close() }
        var generator = LifecycleGenerator(customers: 12, days: 300, start: ProjectionFixture.start, seed: 0xA5)
        generator.noPriceRate = 0
        var notifications = generator.notificationsInDeliveryOrder()
        // Out of signing order: every fifth notification arrives after all the others, so its
        // facts land behind statements signed after them and must change those checks.
        let late = notifications.enumerated().filter { $0.offset % 5 == 2 }.map(\.element)
        notifications = notifications.enumerated().filter { $0.offset % 5 != 2 }.map(\.element) + late.reversed()
        let events = try notifications.map { try $0.recordedEvent(position: 0, recordedAt: 0).event }
        let worker = ProjectionWorker(pool: store.pool, projector: store.projector, batchSize: 3, projections: [.appleStatus])
        for start in stride(from: 0, to: events.count, by: 40) {
            try await ProjectionFixture.append(Array(events[start..<min(start + 40, events.count)]), to: store.events, chunk: 7)
            _ = try await worker.catchUp()
        }
        let incremental = try dump(database)
        XCTAssertGreaterThan(incremental.count, events.count / 2, "most notifications state Apple's status")
        let disagreeing = try database.adminQuery("SELECT count(*) AS n FROM projections.apple_status_checks WHERE NOT agrees").first!.decode(Int64.self, "n")
        let arrivalDisagreeing = try database.adminQuery("SELECT count(*) AS n FROM projections.apple_status_checks WHERE NOT arrival_agrees").first!.decode(Int64.self, "n")
        XCTAssertGreaterThan(arrivalDisagreeing, disagreeing, "late facts made statements disagree on arrival that agree now: the order matters to this test")

        let report = try await store.rebuilder().run(projections: [.appleStatus])
        XCTAssertEqual(report.projections, [.appleStatus])
        XCTAssertEqual(try dump(database), incremental, "the checks kept from the delta are a full check's")
    }
}
