import Foundation
import LedgerCore
import Postgres
import Synchronization
import XCTest
@testable import LedgerStore

/// Live projection tables (written by the append hook) against the pure fold of the same events.
final class ProjectionLiveTests: XCTestCase {
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

    /// Issue 20 rule 4, with injected clocks: the projector folds before the first purchase (no
    /// row: nothing had begun), and the readers ask at later "now"s. The subscription and the
    /// customer's entitlements appear by themselves once the purchaseDate comes, no event needed.
    func testASubscriptionFoldedBeforeItsFirstPurchaseShowsOnceItsTimeComes() async throws {
        let purchase: EpochMillis = 1_735_689_600_000  // the hostile event's purchaseDate
        let projector = Projector(catalog: ProjectionFixture.catalog, clock: { purchase - 60_000 })
        let store = EventStore(pool: pool, hooks: [LiveProjectionHook(projector: projector)])
        let customer = "future-customer"
        _ = try await store.append(ProjectionFixture.hostileEvent(stream: "9000000000077", customer: customer))
        let key = SubscriptionKey(environment: "Sandbox", originalTransactionId: "9000000000077")
        let queries = ProjectionQueries(pool: pool, catalog: ProjectionFixture.catalog)
        let early = try await queries.subscription(key, now: purchase - 1)
        XCTAssertNil(early, "nothing had begun")
        let none = try await queries.entitlements(customerId: customer, environment: "Sandbox", now: purchase - 1)
        XCTAssertEqual(none, [])
        let later = try await queries.subscription(key, now: purchase + 1_000)
        XCTAssertEqual(later?.status, .active)
        XCTAssertEqual(later?.productId, "com.example.premium.monthly")
        let grants = try await queries.entitlements(customerId: customer, environment: "Sandbox", now: purchase + 1_000)
        XCTAssertEqual(grants.map(\.entitlement), ["basic", "premium"])
        let production = try await queries.entitlements(customerId: customer, environment: "Production", now: purchase + 1_000)
        XCTAssertEqual(production, [], "another environment's subscription grants nothing here")
        let unknown = try await queries.subscription(ProjectionFixture.key("9000000000078"), now: purchase + 1_000)
        XCTAssertNil(unknown)
    }

    func testLiveTablesEqualTheFoldOfTheEventsAtEveryEvaluationTime() async throws {
        let clock = ProjectionFixture.start + 200 * ProjectionFixture.day
        let projector = Projector(catalog: ProjectionFixture.catalog, clock: { clock })
        let failures = HookFailures()
        let store = EventStore(pool: pool, hooks: [LiveProjectionHook(projector: projector)], onHookFailure: failures.record)
        var events = try ProjectionFixture.events(customers: 30, seed: 42)
        events.append(ProjectionFixture.hostileEvent(stream: "9000000000001", customer: "cust\twith\\odd\nchars"))
        events += [
            NewEvent(streamId: StreamId.appleTest.text, dedupeKey: "test-1", source: .apple, type: "TEST",
                     payload: Data(#"{"notificationType":"TEST","data":{"bundleId":"com.example.app"}}"#.utf8), raw: Data("x".utf8)),
        ]
        try await ProjectionFixture.append(events, to: store)
        XCTAssertEqual(failures.all, [], "the live hook must not fail on generated or hostile events")

        let head = try await store.headPosition()
        // Refund cases, WeChat contracts and webhook events have live hooks of their own; reports and the Apple
        // status check are kept by the worker only.
        let statuses = try await ProjectionStatusReader.statuses(pool).filter {
            !["refund_cases", "wechat_contracts", "reports", "apple_status", "webhooks"].contains($0.name)
        }
        XCTAssertEqual(statuses.map(\.name), ["entitlements", "facts.v\(FactDecoder.schemaVersion)", "subscriptions", "transactions"])
        for status in statuses {
            XCTAssertEqual(status.position, head, "\(status.name) must be advanced in the append transaction")
            XCTAssertEqual(status.lag, 0)
            XCTAssertEqual(status.status, "running")
        }

        let oracle = try await ProjectionFixture.oracle(store)
        XCTAssertEqual(oracle.subscriptions.count, 31)
        let queries = ProjectionQueries(pool: pool, catalog: ProjectionFixture.catalog)
        // Readers ask at their "now", never before the fold that wrote the row (the projector's clock).
        let times = [clock, clock + 45 * ProjectionFixture.day, ProjectionFixture.start + 800 * ProjectionFixture.day]
        var statusesSeen = Set<SubscriptionStatus>()
        for time in times {
            let view = oracle.view(at: time)
            for key in oracle.subscriptions.keys {
                let stored = try await queries.subscription(key, now: time)
                XCTAssertEqual(stored, view.subscription(key), "subscription \(key) at \(time)")
                if let status = stored?.status { statusesSeen.insert(status) }
            }
            let customers = Set(oracle.subscriptions.values.compactMap { $0.state(at: clock).map { ($0.customerId, $0.environment) } }
                .compactMap { c, e in c.map { "\($0)|\(e ?? "")" } })
            for entry in customers {
                let parts = entry.split(separator: "|", omittingEmptySubsequences: false).map(String.init)
                let stored = try await queries.entitlements(customerId: parts[0], environment: parts[1], now: time)
                XCTAssertEqual(stored, view.entitlements(catalog: ProjectionFixture.catalog, customerId: parts[0], environment: parts[1]),
                               "entitlements of \(entry) at \(time)")
            }
        }
        XCTAssertTrue(statusesSeen.isSuperset(of: [.active, .expired]), "re-evaluation must move statuses with time: saw \(statusesSeen)")

        let decodedFacts = try await ProjectionFixture.decodedFacts(store)
        let decodedByKey = Dictionary(grouping: decodedFacts.filter { $0.subscription != nil }, by: { $0.subscription! })
        for (key, fold) in oracle.subscriptions {
            let stored = try await queries.transactions(key)
            XCTAssertEqual(stored, fold.transactions, "transactions of \(key)")
            let facts = try await queries.facts(of: [key])
            XCTAssertEqual(facts, decodedByKey[key], "stored facts must equal the facts decoded again from the events for \(key)")
        }
        // The rebuild's COPY path reads the same facts as the query path and the decoder.
        var copied: [SubscriptionKey: [Fact]] = [:]
        let (snapshot, rows, subscriptions) = try db.rebuilder(projector: projector)
            .streamFacts(progress: { _, _ in }) { key, facts, _ in copied[key] = facts }
        XCTAssertEqual(snapshot, head)
        XCTAssertEqual(rows, decodedFacts.filter { $0.subscription != nil }.count)
        XCTAssertEqual(subscriptions, oracle.subscriptions.count)
        for key in oracle.subscriptions.keys {
            XCTAssertEqual(copied[key], decodedByKey[key], "COPY-read facts of \(key)")
        }

        let hostileKey = ProjectionFixture.key("9000000000001", "Sandbox")
        let hostile = try await queries.subscription(hostileKey, now: clock)
        XCTAssertEqual(hostile?.offerIdentifier, "tab\there")
        XCTAssertEqual(hostile?.expiresDate, 1_893_456_000_000)
        let hostileFacts = try await queries.facts(of: [hostileKey])
        XCTAssertEqual(hostileFacts.first { $0.kind == .transaction }?.effectiveAt, 1_735_689_600_000,
                       "fractional milliseconds round like AppleTime (purchaseDate …000.4)")
        XCTAssertEqual(hostileFacts.first { $0.kind == .renewal }?.signedAt, 1_735_689_600_001, "…000.6 rounds up")
        let hostileCustomers = try await queries.subscriptions(customerId: "cust\twith\\odd\nchars")
        XCTAssertEqual(hostileCustomers, [hostileKey])
        let production = try await queries.subscription(ProjectionFixture.key("9000000000001"), now: clock)
        XCTAssertNil(production, "a Sandbox purchase is not a Production subscription")
        let unknown = try await queries.subscription(ProjectionFixture.key("12345"), now: clock)
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
        XCTAssertEqual(try database.checkpoints().filter { !$0.key.hasPrefix("facts") },
                       ["subscriptions": 0, "transactions": 0, "entitlements": 0, "apple_status": 0, "webhooks": 0],
                       "the hook must not jump a checkpoint over events it did not apply")
        let rows = try database.dumpTables()
        XCTAssertEqual(rows["subscriptions"], [], "a projection that is behind is not written by the hook")

        let worker = ProjectionWorker(pool: pool, projector: projector, batchSize: 16)
        _ = try await worker.catchUp()
        let head = try await live.headPosition()
        XCTAssertEqual(try database.checkpoints(),
                       ["subscriptions": head, "transactions": head, "entitlements": head, "facts.v\(FactDecoder.schemaVersion)": head,
                        "apple_status": head, "webhooks": head])
        let oracle = try await ProjectionFixture.oracle(live)
        let queries = ProjectionQueries(pool: pool, catalog: ProjectionFixture.catalog)
        for (key, _) in oracle.subscriptions {
            let stored = try await queries.subscription(key, now: ProjectionFixture.start)
            XCTAssertEqual(stored, oracle.view(at: ProjectionFixture.start).subscription(key))
        }

        // A stopped projection is not advanced by the hook even when its position matches.
        _ = try database.adminQuery("UPDATE projection_checkpoints SET status = 'failed' WHERE projection = 'transactions'")
        try await ProjectionFixture.append([ProjectionFixture.hostileEvent(stream: "9000000000002", customer: "c2")], to: live)
        let after = try database.checkpoints()
        XCTAssertEqual(after["transactions"], head)
        XCTAssertEqual(after["subscriptions"], head + 1)
        let transactions = try await queries.transactions(ProjectionFixture.key("9000000000002", "Sandbox"))
        XCTAssertEqual(transactions, [])
        let state = try await queries.subscription(ProjectionFixture.key("9000000000002", "Sandbox"), now: ProjectionFixture.start)
        XCTAssertNotNil(state)
    }
}

final class HookFailures: Sendable {
    private let failures = Mutex<[HookFailure]>([])
    var all: [HookFailure] { failures.withLock { $0 } }
    func record(_ failure: HookFailure) { failures.withLock { $0.append(failure) } }
}
