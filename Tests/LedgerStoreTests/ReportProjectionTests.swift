import Foundation
import LedgerCore
import LedgerTesting
import Postgres
import XCTest
@testable import LedgerStore

/// The reporting projection (Migrations/0020, `ReportsProjection`): at its checkpoint its tables
/// hold exactly the fold of the facts up to it — every report, interval, filter and drill-down
/// reads the same bytes from the tables as from the fold — and so do a catch-up from 0 in one
/// pass and a blue/green rebuild with appends racing it.
final class ReportProjectionTests: XCTestCase {
    var database: ProjectionScratchDatabase!
    var store: Store!

    override func setUpWithError() throws {
        database = try ProjectionScratchDatabase()
        store = Store(.init(databaseURL: database.service, poolSize: 4, catalog: ProjectionFixture.catalog))
    }

    override func tearDown() {
        store?.close()
        database?.drop()
    }

    /// Apple lifecycles in both environments (some transactions without a price) and WeChat ones,
    /// in delivery order.
    static func population(seed: UInt64) throws -> [NewEvent] {
        var apple: [SimulatedNotification] = []
        for (environment, customers) in [("Production", 24), ("Sandbox", 8)] {
            var generator = LifecycleGenerator(customers: customers, days: 400, start: ProjectionFixture.start, seed: seed &+ UInt64(customers),
                                               environment: environment)
            generator.noPriceRate = 0.05
            apple += generator.notificationsInDeliveryOrder()
        }
        let wechat = WeChatSimulation(subscribers: 10, days: 400, start: ProjectionFixture.start, seed: seed)
        var events = try apple.map { (at: $0.deliveredAt, event: try $0.recordedEvent(position: 0, recordedAt: 0).event) }
        events += try wechat.pushesInDeliveryOrder().map { (at: $0.deliveredAt, event: try $0.event()) }
        var ordered = events.enumerated().sorted { ($0.element.at, $0.offset) < ($1.element.at, $1.offset) }.map(\.element.event)
        // Ties and unties (which change no figure, so a range of only them refolds nothing) on some
        // subscriptions, and on one the ledger has no other fact of: it has no contribution.
        let tied = Array(Set(ordered.filter { $0.source == .apple && $0.environment == "Production" }.map(\.streamId)).sorted().prefix(4))
        for (i, stream) in (tied + ["7999999999999999"]).enumerated() {
            for (j, customer) in ["tied-\(i)", nil, "tied-again-\(i)"].enumerated() {
                ordered.insert(tie(stream: stream, customer: customer), at: min(ordered.count, ordered.count / 2 + 40 * i + 7 * j))
            }
        }
        return ordered
    }

    static func tie(stream: String, customer: String?) -> NewEvent {
        let now = ProjectionFixture.start
        var body: [String: JSONValue] = ["environment": "Production", "originalTransactionId": .string(stream),
                                         "requestedBy": ["role": "app"], "requestedAt": .integer(now)]
        body[customer == nil ? "formerCustomerId" : "customerId"] = .string(customer ?? "tied-before")
        let data = JSONValue.object(body).canonicalJSON()
        return NewEvent(streamId: StreamId.subscription(stream).text, dedupeKey: DedupeKey.customerTie(), source: .ledger,
                        type: customer == nil ? LedgerEventType.customerUntied : LedgerEventType.customerTied, environment: "Production",
                        signedAt: now, payload: data, raw: data)
    }

    func reportsWorker(batchSize: Int) -> ProjectionWorker {
        ProjectionWorker(pool: store.pool, projector: store.projector, batchSize: batchSize, projections: [.reports])
    }

    static let filters: [ReportFilter] = [
        ReportFilter(), ReportFilter(environment: "Sandbox"), ReportFilter(source: .wechat), ReportFilter(source: .apple, currency: "USD"),
        ReportFilter(environment: "Production", product: "com.example.monthly"), ReportFilter(currency: ReportDimensions.noPrice),
    ]

    /// Every report × interval × filter, each metric's drill-down at one period: the tables' answer
    /// (the projection at `position`) equals the fold's at the same position, byte for byte.
    /// Returns the CSVs, to compare with later readings.
    @discardableResult
    func assertTablesEqualTheFold(at position: Int64, everyQuery: Bool = true, file: StaticString = #filePath, line: UInt = #line) async throws -> [String] {
        var csvs: [String] = []
        let fold = try await store.reports.rollup(asOfPosition: position)
        XCTAssertEqual(fold.position, position, file: file, line: line)
        for name in ReportName.allCases {
            for interval in everyQuery ? ReportInterval.allCases : [.day] {
                for filter in everyQuery ? Self.filters : [ReportFilter()] {
                    let build: @Sendable (EpochMillis?) -> ReportQuery = { latest in
                        let to = ReportDay(containing: latest ?? 0)
                        return ReportQuery(name: name, from: to.adding(days: -420), to: to, interval: interval, filter: filter)
                    }
                    let q = build(fold.latestSignedAt)
                    // Drill-downs of every metric without a filter and for one source (each is a query of its own).
                    let drill = filter == ReportFilter() || filter == ReportFilter(source: .wechat)
                    let points: [ReportPoint?] = [nil] + (drill ? name.metrics.map { ReportPoint(period: interval.start(of: q.to.adding(days: -200)), metric: $0) } : [])
                    for point in points {
                        let projected = try await store.reports.read(asOfPosition: nil, point: point, build)
                        let folded = fold.reading(build, point: point)
                        let label = "\(name) \(interval) \(filter) \(point.map { "\($0.metric) \($0.period)" } ?? "")"
                        XCTAssertTrue(projected.fromProjection, label, file: file, line: line)
                        XCTAssertEqual(projected.position, position, label, file: file, line: line)
                        XCTAssertEqual(projected.chainHash, folded.chainHash, label, file: file, line: line)
                        XCTAssertEqual(projected.table.csv, folded.table.csv, label, file: file, line: line)
                        XCTAssertEqual(projected.table, folded.table, label, file: file, line: line)
                        XCTAssertEqual(projected.members, folded.members, label, file: file, line: line)
                        if point == nil { csvs.append(projected.table.csv) }
                    }
                }
            }
        }
        // And the tables whole: every cell, cohort and contribution.
        let stored = try storedRollup()
        XCTAssertEqual(stored.rollup.cells, fold.rollup.cells, "daily rollups", file: file, line: line)
        XCTAssertEqual(stored.rollup.cohorts, fold.rollup.cohorts, "cohorts", file: file, line: line)
        XCTAssertEqual(stored.contributions, fold.contributions, "contributions", file: file, line: line)
        return csvs
    }

    /// The projection's tables read back whole, without the service's code paths.
    func storedRollup() throws -> (rollup: ReportRollup, contributions: [SubscriptionKey: SubscriptionContribution]) {
        let c = try Connection(conninfo: database.admin)
        var dims: [Int32: ReportDimensions] = [:]
        for row in try c.query("SELECT * FROM projections.report_dimensions").rows {
            dims[try row.decode(Int32.self, "id")] = ReportDimensions(
                environment: try row.decode(String.self, "environment"), source: ReportSource(rawValue: try row.decode(String.self, "source"))!,
                product: try row.decode(String.self, "product"), currency: try row.decode(String.self, "currency"))
        }
        var rollup = ReportRollup()
        for row in try c.query("SELECT * FROM projections.report_daily").rows {
            var v = ReportValues()
            for m in ReportMetric.allCases { v[m] = try row.decode(Int64.self, m.rawValue) }
            XCTAssertFalse(v.isZero, "an all-zero day is deleted")
            rollup.cells[ReportCell(day: ReportDay(index: try row.decode(Int64.self, "day")), dimensions: dims[try row.decode(Int32.self, "dimensions")]!)] = v
        }
        for row in try c.query("SELECT * FROM projections.report_cohorts").rows {
            rollup.cohorts[CohortKey(cohort: ReportDay(index: try row.decode(Int64.self, "cohort")), dimensions: dims[try row.decode(Int32.self, "dimensions")]!,
                                     monthsLater: try row.decode(Int.self, "months_later"))] =
                CohortCount(members: try row.decode(Int64.self, "members"), retained: try row.decode(Int64.self, "retained"))
        }
        var contributions: [SubscriptionKey: SubscriptionContribution] = [:]
        for row in try c.query("SELECT subscription, body FROM projections.report_subscriptions").rows {
            contributions[SubscriptionKey(text: try row.decode(String.self, "subscription"))!] = try ReportRows.decode(try row.decode(Data.self, "body"))
        }
        return (rollup, contributions)
    }

    /// The four tables as text rows (dimension ids are shared by every generation, so rows compare).
    func dump() throws -> [String: [String]] {
        let c = try Connection(conninfo: database.admin)
        var out: [String: [String]] = [:]
        for t in ["report_subscriptions", "report_members", "report_daily", "report_cohorts"] {
            out[t] = try c.query("SELECT x::text AS r FROM projections.\(t) x ORDER BY x::text COLLATE \"C\"").rows.map { try $0.decode(String.self, "r") }
        }
        return out
    }

    func checkpoint() throws -> Int64 {
        try database.adminQuery("SELECT position FROM projection_checkpoints WHERE projection = 'reports'").first!.decode(Int64.self, "position")
    }

    func testTheTablesAreTheFoldAtEachPositionAfterACatchUpFromZeroAndAfterARebuild() async throws {
        let events = try Self.population(seed: 0x2023)
        let chunks = [events.count / 3, 2 * events.count / 3, events.count]
        var start = 0
        var earlier: [(position: Int64, csvs: [String])] = []
        for end in chunks {
            try await ProjectionFixture.append(Array(events[start..<end]), to: store.events, chunk: 9)
            start = end
            let head = try await store.events.headPosition()
            XCTAssertLessThan(try checkpoint(), head, "no live hook: the worker applies committed ranges")
            // Small batches: a subscription is refolded many times, each time replacing what it added.
            _ = try await reportsWorker(batchSize: 7).catchUp()
            XCTAssertEqual(try checkpoint(), head)
            earlier.append((head, try await assertTablesEqualTheFold(at: head, everyQuery: end == events.count)))
        }
        let head = earlier.last!.position
        let incremental = try dump()
        XCTAssertGreaterThan(incremental["report_daily"]?.count ?? 0, 300)
        XCTAssertGreaterThan(incremental["report_members"]?.count ?? 0, 100)

        // An earlier position is folded, and answers what the tables answered then.
        let first = earlier[0]
        let old = try await store.reports.read(asOfPosition: first.position) { latest in
            let to = ReportDay(containing: latest ?? 0)
            return ReportQuery(name: .subscriptions, from: to.adding(days: -420), to: to, interval: .day)
        }
        XCTAssertFalse(old.fromProjection)
        XCTAssertEqual(old.position, first.position)
        XCTAssertEqual(old.table.csv, first.csvs[0])

        // Caught up from 0 in one pass (one big gap): the same rows.
        try database.adminScript("""
            TRUNCATE projections.report_subscriptions, projections.report_members, projections.report_daily, projections.report_cohorts;
            UPDATE projection_checkpoints SET position = 0 WHERE projection = 'reports';
            """)
        let stale = try await store.reports.read(asOfPosition: nil) { _ in ReportQuery(name: .subscriptions, from: ReportDay(index: 0), to: ReportDay(index: 0)) }
        XCTAssertEqual(stale.position, 0, "the answer names the projection's position")
        _ = try await reportsWorker(batchSize: 100_000).catchUp()
        XCTAssertEqual(try dump(), incremental, "catch-up after a gap")
        let caughtUpCSVs = try await assertTablesEqualTheFold(at: head, everyQuery: false)

        // Rebuilt blue/green: the same rows, then the same answers.
        let report = try await store.rebuilder().run(projections: [.reports])
        XCTAssertEqual(report.projections, [.reports])
        XCTAssertEqual(report.swapHead, head)
        XCTAssertEqual(try dump(), incremental, "rebuild")
        let rebuiltCSVs = try await assertTablesEqualTheFold(at: head, everyQuery: false)
        XCTAssertEqual(rebuiltCSVs, caughtUpCSVs, "the same bytes after the rebuild")

        // A rebuild while appends race it: what arrives between the bulk pass and the swap is folded
        // in the swap's catch-up.
        let more = try Self.population(seed: 0x2024)
        var rebuilder = store.rebuilder()
        let log = store.events
        rebuilder.beforeSwap = {
            let done = DispatchSemaphore(value: 0)
            Task {
                try? await ProjectionFixture.append(more, to: log, chunk: 11)
                done.signal()
            }
            done.wait()
        }
        let raced = try await rebuilder.run(projections: [.reports])
        let newHead = try await store.events.headPosition()
        XCTAssertEqual(raced.snapshotHead, head)
        XCTAssertEqual(raced.swapHead, newHead)
        XCTAssertGreaterThan(raced.caughtUpStreams, 0)
        XCTAssertEqual(try checkpoint(), newHead)
        try await assertTablesEqualTheFold(at: newHead)
    }

    /// A pass of the service's worker folds the range's facts onto the append's snapshots instead
    /// of reading each subscription's history: passes that end before a snapshot, at it and after
    /// it, facts another instance appended after this one's snapshot, WeChat subscriptions (never
    /// snapshotted) and ties, and after every pass the tables equal the fold; at the end, the same
    /// rows as a catch-up from zero that reads every history.
    func testPassesFoldedOntoTheAppendsSnapshotsLeaveTheTablesOfTheFold() async throws {
        var events = try Self.population(seed: 0x2025)
        // Some subscriptions' first notification arrives last: a pass whose only fact of them is
        // older than what the tables hold keeps their latest business time.
        for stream in Array(Set(events.filter { $0.source == .apple }.map(\.streamId)).sorted().prefix(6)) {
            let first = events.firstIndex { $0.source == .apple && $0.streamId == stream }!
            events.append(events.remove(at: first))
        }
        let worker = ProjectionWorker(pool: store.pool, projector: store.projector, batchSize: 7, projections: [.reports],
                                      registered: Projections.registered(projector: store.projector, snapshots: store.foldSnapshots))
        let other = Store(.init(databaseURL: database.service, poolSize: 2, catalog: ProjectionFixture.catalog))
        defer { other.close() }
        var start = 0
        var passes = 0
        while start < events.count {
            let end = min(events.count, start + 23)
            // Every third chunk through another instance: this one's snapshots lack its facts.
            try await ProjectionFixture.append(Array(events[start..<end]), to: (passes % 3 == 2 ? other : store).events, chunk: 9)
            start = end
            _ = try await worker.catchUp()
            passes += 1
            if passes % 40 == 0 || start == events.count {
                try await assertTablesEqualTheFold(at: try await store.events.headPosition(), everyQuery: false)
            }
        }
        let statistics = store.liveFoldStatistics
        XCTAssertGreaterThan(statistics.reportSnapshotFolds, 30, "passes fold onto the append's snapshots")
        XCTAssertGreaterThan(statistics.reportFullFolds, 0, "WeChat subscriptions, and passes behind a snapshot with facts after their end, read every fact")
        let folded = try dump()

        try database.adminScript("""
            TRUNCATE projections.report_subscriptions, projections.report_members, projections.report_daily, projections.report_cohorts;
            UPDATE projection_checkpoints SET position = 0 WHERE projection = 'reports';
            """)
        _ = try await reportsWorker(batchSize: 100_000).catchUp()
        XCTAssertEqual(try dump(), folded, "a catch-up reading every history leaves the same rows")
    }

    /// A pass lagging behind the append finds snapshots past its range's end. Such a snapshot is
    /// the fold at the pass's end only when the subscription has no fact after it: the tables
    /// after each pass are the fold at the checkpoint (never a later fact), and both kinds occur.
    func testAPassBehindTheAppendUsesOnlySnapshotsWithNothingAfterItsEnd() async throws {
        let events = try Self.population(seed: 0x2026)
        try await ProjectionFixture.append(events, to: store.events, chunk: 9)
        let head = try await store.events.headPosition()
        let worker = ProjectionWorker(pool: store.pool, projector: store.projector, batchSize: 25, projections: [.reports],
                                      registered: Projections.registered(projector: store.projector, snapshots: store.foldSnapshots))
        let before = store.liveFoldStatistics
        var passes = 0
        while try checkpoint() < head {
            _ = try await worker.runOnce()
            passes += 1
            if passes % 5 == 0 { try await assertTablesEqualTheFold(at: try checkpoint(), everyQuery: false) }
        }
        try await assertTablesEqualTheFold(at: head, everyQuery: false)
        let statistics = store.liveFoldStatistics
        XCTAssertGreaterThan(statistics.reportSnapshotFolds - before.reportSnapshotFolds, 10,
                             "subscriptions with nothing after the pass fold onto the snapshot ahead of it")
        XCTAssertGreaterThan(statistics.reportFullFolds - before.reportFullFolds, 10,
                             "subscriptions with facts after the pass's end are read up to it")
    }

    /// A pass folds onto the append's snapshots as they stood when it began (`Projection.forPass`,
    /// taken before it reads how far it may go): appends made while it runs move the snapshots of
    /// the subscriptions they touch past the pass's end, and a pass peeking them then would read
    /// those subscriptions' whole histories. The tables are still the fold at the pass's end.
    func testAPassFoldsOntoTheSnapshotsAsTheyStoodWhenItBegan() async throws {
        let events = try Self.population(seed: 0x2027).filter { $0.source == .apple }
        let third = events.count / 3
        let (first, second, last) = (Array(events[..<third]), Array(events[third..<(2 * third)]), Array(events[(2 * third)...]))
        let overlap = Set(second.map(\.streamId)).intersection(last.map(\.streamId))
        XCTAssertGreaterThan(overlap.count, 5, "the appends during the pass touch subscriptions of its range")
        try await ProjectionFixture.append(first, to: store.events, chunk: 9)
        _ = try await reportsWorker(batchSize: 100_000).catchUp()
        try await ProjectionFixture.append(second, to: store.events, chunk: 9)
        let end = try await store.events.headPosition()
        let from = try checkpoint() + 1
        let lane = CatchUp.Lane.projection(.reports, of: ReportsProjection(catalogPeriods: store.projector.catalogPeriods,
                                                                            snapshots: store.foldSnapshots))
        try await store.pool.withConnection { connection in try lane.prepare(connection) }
        try await ProjectionFixture.append(last, to: store.events, chunk: 9)
        let moved = store.foldSnapshots.positions.filter { overlap.contains($0.key.originalTransactionId) && $0.value > end }
        XCTAssertGreaterThan(moved.count, 5, "snapshots of the range's subscriptions moved past its end")
        let before = store.liveFoldStatistics
        try await store.pool.withConnection { connection in
            try connection.transaction { connection in
                try connection.asProjector()
                try lane.apply(from...end, connection)
                try CatchUp.record(ProjectionName.reports.rawValue, position: end, failure: nil, failedAt: nil, on: connection)
            }
        }
        let statistics = store.liveFoldStatistics
        XCTAssertEqual(statistics.reportFullFolds - before.reportFullFolds, 0, "every subscription folds onto its pinned snapshot")
        XCTAssertGreaterThan(statistics.reportSnapshotFolds - before.reportSnapshotFolds, 10)
        try await assertTablesEqualTheFold(at: end, everyQuery: false)
    }

    func testAStoppedProjectionIsNotServedStaleAndAPositionBeyondTheLogIsRefused() async throws {
        try await ProjectionFixture.append(try Self.population(seed: 7).prefix(60).map { $0 }, to: store.events)
        let head = try await store.events.headPosition()
        _ = try await reportsWorker(batchSize: 1000).catchUp()
        try database.adminScript("UPDATE projection_checkpoints SET status = 'failed', position = 10 WHERE projection = 'reports'")
        let build: @Sendable (EpochMillis?) -> ReportQuery = { latest in
            let to = ReportDay(containing: latest ?? 0)
            return ReportQuery(name: .revenue, from: to.adding(days: -30), to: to)
        }
        let reading = try await store.reports.read(asOfPosition: nil, build)
        XCTAssertFalse(reading.fromProjection, "a stopped projection's tables are not served")
        XCTAssertEqual(reading.position, head, "folded at the latest derived position")
        do {
            _ = try await store.reports.read(asOfPosition: head + 1, build)
            XCTFail("a position beyond the log")
        } catch let error as ReportStoreError {
            XCTAssertEqual(error, .positionNotReached(asked: head + 1, available: head))
            XCTAssertTrue(error.description.contains("from 0 to \(head)"), error.description)
        }
    }

    func testTheDailyTableHasOneColumnPerMetric() throws {
        let columns = try database.adminQuery("""
            SELECT column_name::text AS c FROM information_schema.columns
            WHERE table_schema = 'projections' AND table_name = 'report_daily' ORDER BY ordinal_position
            """).rows.map { try $0.decode(String.self, "c") }
        XCTAssertEqual(columns, ["day", "dimensions"] + ReportMetric.allCases.map(\.rawValue))
    }

    /// A pass changes the rollups by the stored runs' difference with the refold's: the old rollup
    /// plus that difference must be the new one, for a history grown by more facts, for two
    /// unrelated subscriptions (other dimensions, other days) and for nothing on either side.
    func testTheDifferenceOfTwoContributionsRunsIsTheDifferenceOfTheirRollups() throws {
        let generator = LifecycleGenerator(customers: 16, days: 500, start: ProjectionFixture.start, seed: 43, environment: "Production")
        var facts: [Fact] = []
        for (i, n) in generator.lifecycles().flatMap(\.notifications).enumerated() { facts += try n.facts(position: Int64(i + 1), recordedAt: n.deliveredAt) }
        let whole = SubscriptionProjection(facts: facts).subscriptions.mapValues(SubscriptionRollup.contribution(of:))
        let early = SubscriptionProjection(facts: facts.prefix(facts.count / 2)).subscriptions.mapValues(SubscriptionRollup.contribution(of:))
        let keys = whole.keys.sorted()
        var pairs: [(SubscriptionContribution, SubscriptionContribution)] = keys.map { (early[$0] ?? SubscriptionContribution(), whole[$0]!) }
        pairs += zip(keys, keys.dropFirst()).map { (whole[$0.0]!, whole[$0.1]!) }
        pairs += [(SubscriptionContribution(), whole[keys[0]]!), (whole[keys[0]]!, SubscriptionContribution())]
        var changed = 0
        for (old, new) in pairs {
            var delta = ReportRollup()
            ReportRows.addDifference(from: ReportRows.runs(of: old), to: ReportRows.runs(of: new), into: &delta)
            ReportProjection.addDifference(from: old.cohorts, to: new.cohorts, into: &delta)
            var rollup = ReportRollup()
            rollup.add(old)
            for (cell, v) in delta.cells {
                for metric in ReportMetric.allCases { rollup.add(metric, v[metric], on: cell.day, cell.dimensions) }
            }
            for (k, v) in delta.cohorts { rollup.add(k, v) }
            var expected = ReportRollup()
            expected.add(new)
            XCTAssertEqual(rollup, expected)
            // Only the days whose figures differ are in the difference.
            let (a, b) = (old.cells, new.cells)
            XCTAssertEqual(Set(delta.cells.keys), Set(a.keys).union(b.keys).filter { a[$0] != b[$0] })
            if old != new { changed += 1 }
            var none = ReportRollup()
            ReportRows.addDifference(from: ReportRows.runs(of: new), to: ReportRows.runs(of: new), into: &none)
            XCTAssertEqual(none, ReportRollup())
        }
        XCTAssertGreaterThan(changed, keys.count)
    }

    func testAContributionRoundTripsThroughItsStoredForm() throws {
        let generator = LifecycleGenerator(customers: 12, days: 500, start: ProjectionFixture.start, seed: 41, environment: "Production")
        var facts: [Fact] = []
        for (i, n) in generator.lifecycles().flatMap(\.notifications).enumerated() { facts += try n.facts(position: Int64(i + 1), recordedAt: n.deliveredAt) }
        let contributions = SubscriptionProjection(facts: facts).subscriptions.mapValues(SubscriptionRollup.contribution(of:))
        XCTAssertEqual(contributions.count, 12)
        for (key, c) in contributions {
            let body = ReportRows.encode(c)
            XCTAssertEqual(try ReportRows.decode(body), c, key.text)
            // Every non-zero figure is in exactly one run, and a run's days are all non-zero.
            let runs = ReportRows.runs(of: c)
            var covered = 0
            for r in runs {
                XCTAssertFalse(r.values.contains(0))
                covered += r.values.count
            }
            XCTAssertEqual(covered, c.cells.values.reduce(0) { sum, v in sum + ReportMetric.allCases.filter { v[$0] != 0 }.count })
            // Damaged bodies are refused with the way out, never misread.
            for cut in [1, body.count / 2, body.count - 1] {
                XCTAssertThrowsError(try ReportRows.decode(body.prefix(cut))) { error in
                    XCTAssertTrue("\(error)".contains("ledger rebuild --projection reports"), "\(error)")
                }
            }
        }
        XCTAssertThrowsError(try ReportRows.decode(Data([9])))
        XCTAssertThrowsError(try ReportRows.decode(Data([1, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01])))
    }
}
