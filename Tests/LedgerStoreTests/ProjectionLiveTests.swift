import Foundation
import LedgerCore
import Postgres
import Synchronization
import XCTest
@testable import LedgerStore

/// Live projection tables (written by the append hook) against the pure fold of the same events.
final class ProjectionLiveTests: XCTestCase {
    var database: ProjectionScratchDatabase!
    var pool: ConnectionPool!

    override func setUpWithError() throws {
        database = try ProjectionScratchDatabase()
        pool = ConnectionPool(conninfo: database.service, maxConnections: 4)
    }

    override func tearDown() {
        pool?.close()
        database?.drop()
    }

    func testLiveTablesEqualTheFoldOfTheEventsAtEveryEvaluationTime() async throws {
        let clock = ProjectionFixture.start + 200 * ProjectionFixture.day
        let projector = Projector(catalog: ProjectionFixture.catalog, clock: { clock })
        let failures = HookFailures()
        let store = EventStore(pool: pool, hooks: [LiveProjectionHook(projector: projector)], onHookFailure: failures.record)
        var events = try ProjectionFixture.events(customers: 30, seed: 42)
        events.append(ProjectionFixture.hostileEvent(stream: "9000000000001", customer: "cust\twith\\odd\nchars"))
        events += [
            NewEvent(streamId: StreamNames.appleTest, dedupeKey: "test-1", source: .apple, type: "TEST",
                     payload: Data(#"{"notificationType":"TEST","data":{"bundleId":"com.example.app"}}"#.utf8), raw: Data("x".utf8)),
        ]
        try await ProjectionFixture.append(events, to: store)
        XCTAssertEqual(failures.all, [], "the live hook must not fail on generated or hostile events")

        let head = try await store.headPosition()
        let statuses = try await ProjectionStatusReader.statuses(pool)
        XCTAssertEqual(statuses.map(\.name), ["entitlements", "subscriptions", "transactions"])
        for status in statuses {
            XCTAssertEqual(status.position, head, "\(status.name) must be advanced in the append transaction")
            XCTAssertEqual(status.lag, 0)
            XCTAssertEqual(status.status, "running")
        }

        let oracle = try await ProjectionFixture.oracle(store)
        XCTAssertEqual(oracle.subscriptions.count, 31)
        let queries = ProjectionQueries(pool: pool)
        let times = [ProjectionFixture.start + 10 * ProjectionFixture.day, clock, clock + 45 * ProjectionFixture.day,
                     ProjectionFixture.start + 800 * ProjectionFixture.day]
        var statusesSeen = Set<SubscriptionStatus>()
        for time in times {
            let view = oracle.view(at: time)
            for stream in oracle.subscriptions.keys {
                let stored = try await queries.subscription(stream, now: time)
                XCTAssertEqual(stored, view.subscription(stream), "subscription \(stream) at \(time)")
                if let status = stored?.status { statusesSeen.insert(status) }
            }
            let customers = Set(oracle.subscriptions.values.compactMap { $0.state(at: clock)?.customerId })
            for customer in customers {
                let stored = try await queries.entitlements(customerId: customer, now: time)
                XCTAssertEqual(stored, view.entitlements(catalog: ProjectionFixture.catalog, customerId: customer), "entitlements of \(customer) at \(time)")
            }
        }
        XCTAssertTrue(statusesSeen.isSuperset(of: [.active, .expired]), "re-evaluation must move statuses with time: saw \(statusesSeen)")

        for (stream, fold) in oracle.subscriptions {
            let stored = try await queries.transactions(stream)
            XCTAssertEqual(stored, fold.transactions, "transactions of \(stream)")
            let facts = try await queries.facts(stream)
            let decoded = try await store.read(stream: stream).compactMap { try SubscriptionFact.decode($0) }
            XCTAssertEqual(facts, decoded, "facts extracted by SQL must equal the JSON-decoded facts for \(stream)")
        }
        // The rebuild's COPY path reads the same facts as the query path and the JSON decoder.
        var copied: [String: [SubscriptionFact]] = [:]
        let (snapshot, rows, streams) = try Rebuilder(conninfo: database.service, projector: projector)
            .streamFacts(progress: { _, _ in }) { stream, facts in copied[stream] = facts }
        XCTAssertEqual(snapshot, head)
        XCTAssertEqual(rows, Int(head))
        XCTAssertEqual(streams, oracle.subscriptions.count)
        for stream in oracle.subscriptions.keys {
            let decoded = try await store.read(stream: stream).compactMap { try SubscriptionFact.decode($0) }
            XCTAssertEqual(copied[stream], decoded, "COPY-extracted facts of \(stream)")
        }

        let hostile = try await queries.subscription("9000000000001", now: clock)
        XCTAssertEqual(hostile?.offerIdentifier, "tab\there")
        XCTAssertEqual(hostile?.versionSignedDate, 1_735_689_600_001, "fractional milliseconds round like AppleTime")
        let hostileStreams = try await queries.streams(customerId: "cust\twith\\odd\nchars")
        XCTAssertEqual(hostileStreams, ["9000000000001"])
        let testStream = try await queries.subscription(StreamNames.appleTest, now: clock)
        XCTAssertNil(testStream, "a TEST notification is about no subscription")
        let unknown = try await queries.subscription("no-such-subscription", now: clock)
        XCTAssertNil(unknown)
    }

    func testHookLeavesABehindProjectionToTheWorkerAndStoppedOnesAlone() async throws {
        let projector = Projector(catalog: ProjectionFixture.catalog, clock: { ProjectionFixture.start })
        let events = try ProjectionFixture.events(customers: 4, seed: 7)
        // Events stored before the projections joined (no hook): checkpoints stay at 0.
        let plain = EventStore(pool: pool)
        try await ProjectionFixture.append(Array(events.prefix(20)), to: plain)
        let live = EventStore(pool: pool, hooks: [LiveProjectionHook(projector: projector)])
        try await ProjectionFixture.append(Array(events.dropFirst(20)), to: live)
        XCTAssertEqual(try database.checkpoints(), ["subscriptions": 0, "transactions": 0, "entitlements": 0],
                       "the hook must not jump a checkpoint over events it did not apply")
        let rows = try database.dumpTables()
        XCTAssertEqual(rows["subscriptions"], [], "a projection that is behind is not written by the hook")

        let worker = ProjectionWorker(pool: pool, projector: projector, batchSize: 16)
        _ = try await worker.catchUp()
        let head = try await live.headPosition()
        XCTAssertEqual(try database.checkpoints(), ["subscriptions": head, "transactions": head, "entitlements": head])
        let oracle = try await ProjectionFixture.oracle(live)
        let queries = ProjectionQueries(pool: pool)
        for (stream, _) in oracle.subscriptions {
            let stored = try await queries.subscription(stream, now: ProjectionFixture.start)
            XCTAssertEqual(stored, oracle.view(at: ProjectionFixture.start).subscription(stream))
        }

        // A stopped projection is not advanced by the hook even when its position matches.
        _ = try database.adminQuery("UPDATE projection_checkpoints SET status = 'failed' WHERE projection = 'transactions'")
        try await ProjectionFixture.append([ProjectionFixture.hostileEvent(stream: "9000000000002", customer: "c2")], to: live)
        let after = try database.checkpoints()
        XCTAssertEqual(after["transactions"], head)
        XCTAssertEqual(after["subscriptions"], head + 1)
        let transactions = try await queries.transactions("9000000000002")
        XCTAssertEqual(transactions, [])
        let state = try await queries.subscription("9000000000002", now: ProjectionFixture.start)
        XCTAssertNotNil(state)
    }
}

final class HookFailures: Sendable {
    private let failures = Mutex<[HookFailure]>([])
    var all: [HookFailure] { failures.withLock { $0 } }
    func record(_ failure: HookFailure) { failures.withLock { $0.append(failure) } }
}
