import Foundation
import LedgerCore
import LedgerTesting
import Postgres
import XCTest
@testable import LedgerStore

/// The webhooks projection through the one runner: live in the append transaction, caught up by
/// the worker after appends that skipped it, and rebuilt — the same events (ids, positions,
/// bodies) every way; one outbox item per event for an enabled endpoint, none for a disabled one,
/// and a rebuild enqueues nothing.
final class WebhookEventsProjectionTests: XCTestCase {
    let projector = Projector(catalog: ProjectionFixture.catalog, clock: { ProjectionFixture.start + 400 * ProjectionFixture.day })

    func rows(_ database: ProjectionScratchDatabase) throws -> [String] {
        try database.adminQuery("SELECT id || ' ' || position || ' ' || type || ' ' || body AS row FROM projections.webhook_events ORDER BY id")
            .rows.map { try $0.decode(String.self, "row") }
    }

    func items(_ database: ProjectionScratchDatabase) throws -> [String] {
        try database.adminQuery("SELECT id FROM outbox_items WHERE consumer = 'webhooks' ORDER BY id").rows.map { try $0.decode(String.self, "id") }
    }

    func endpoints(_ database: ProjectionScratchDatabase) throws {
        try database.adminScript("""
            INSERT INTO webhooks.endpoints (name, url, enabled, origin, secret, secret_fingerprint, last_position, updated_at)
            VALUES ('on', 'https://a.example/h', true, 'admin', 'whsec_x', 'f', 0, 0),
                   ('off', 'https://b.example/h', false, 'admin', 'whsec_y', 'g', 0, 0);
            """)
    }

    func testLiveCatchUpAndRebuildDeriveTheSameEventsAndEnqueueOnce() async throws {
        let events = try ProjectionFixture.events(customers: 12, seed: 21)

        let live = try ProjectionScratchDatabase()
        defer { live.drop() }
        try endpoints(live)
        let liveStore = live.store(poolSize: 4)
        defer { liveStore.close() }
        try await ProjectionFixture.append(events, to: EventStore(pool: liveStore.pool, hooks: [LiveProjectionHook(WebhookEventsProjection(projector: projector), folder: SharedFold(catalogPeriods: projector.catalogPeriods))]))
        let derived = try rows(live)
        XCTAssertGreaterThan(derived.count, 24, "a year of a dozen customers derives events")
        let types = Set(derived.map { $0.split(separator: " ")[2] })
        XCTAssertTrue(types.isSuperset(of: ["subscription.started", "subscription.renewed", "entitlement.granted"]), "\(types)")
        XCTAssertEqual(try items(live).count, derived.count, "one item per event for the enabled endpoint, none for the disabled one")
        XCTAssertTrue(try items(live).allSatisfy { $0.hasPrefix("on/") })

        // Appended without the hook, then caught up by the worker's pass.
        let caught = try ProjectionScratchDatabase()
        defer { caught.drop() }
        try endpoints(caught)
        let caughtStore = caught.store(poolSize: 4)
        defer { caughtStore.close() }
        try await ProjectionFixture.append(events, to: EventStore(pool: caughtStore.pool))
        XCTAssertEqual(try rows(caught), [])
        _ = try await ProjectionWorker(pool: caughtStore.pool, projector: projector, batchSize: 7).catchUp()
        XCTAssertEqual(try rows(caught), derived, "the catch-up derives what the live path did")
        XCTAssertEqual(try items(caught), try items(live))

        // A rebuild recomputes the same rows and enqueues nothing new.
        let before = try items(live)
        _ = try await liveStore.rebuilder(projector: projector).run(projections: [.webhooks])
        XCTAssertEqual(try rows(live), derived, "a rebuild derives the same ids, positions and bodies")
        XCTAssertEqual(try items(live), before)
    }
}
