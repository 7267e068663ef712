import Foundation
import LedgerCore
internal import Postgres

/// The reports' projection (Migrations/0020): each subscription's `SubscriptionContribution` and
/// their sum, the daily rollups and cohorts, kept by the projection runner.
///
/// Not live in the append transaction: a contribution walks a subscription's whole history day by
/// day, too much to add to every append. The catch-up worker applies each committed range after
/// the commit (checkpoint row locked, gap check, a failing event stops it with the error recorded),
/// and the reports name the position they were read at (`ReportQueries`).
struct ReportsProjection: Projection {
    var names: [ProjectionName] { [.reports] }
    var liveHook: (any AppendHook)? { nil }

    func apply(_ range: ClosedRange<Int64>, to name: ProjectionName, on connection: Connection) throws {
        try ReportProjection.apply(range, on: connection)
    }

    func rebuild(_ names: Set<ProjectionName>, with rebuilder: Rebuilder, progress: @escaping @Sendable (Int, Int) -> Void) throws -> RebuildReport {
        try rebuilder.rebuildReports(progress: progress)
    }
}

enum ReportProjection {
    static let name = ProjectionName.reports
    static let dimensionsTable = "projections.report_dimensions"

    /// The tables a rebuild replaces (`report_dimensions` is shared: an id always names the same values).
    struct Tables {
        let subscriptions: String
        let members: String
        let daily: String
        let cohorts: String

        init(next: Bool) {
            let suffix = next ? ProjectionTable.nextSuffix : ""
            subscriptions = "projections.report_subscriptions" + suffix
            members = "projections.report_members" + suffix
            daily = "projections.report_daily" + suffix
            cohorts = "projections.report_cohorts" + suffix
        }

        var all: [String] { [subscriptions, members, daily, cohorts] }
    }

    /// The columns of `report_daily` after (day, dimensions): one per metric, named as the metric.
    static let metricColumns = ReportMetric.allCases.map(\.rawValue)

    /// One subscription folded at a position: what it adds to the reports.
    struct Folded {
        var key: SubscriptionKey
        /// The latest business time its facts state (the reports' default end is the maximum).
        var latest: EpochMillis
        var contribution: SubscriptionContribution
    }

    // MARK: applying committed facts (the worker's pass and the rebuild's catch-up)

    /// Refolds the subscriptions the facts at `range` touch, as known at the range's end.
    static func apply(_ range: ClosedRange<Int64>, next: Bool = false, on connection: Connection) throws {
        let keys = try FactStore.subscriptions(touchedByPositions: range, on: connection)
        try refold(keys, upTo: range.upperBound, next: next, on: connection)
    }

    /// The contributions of `keys` folded from their facts up to `upTo` (with the order facts that
    /// join them, as the subscription projections fold); keys without facts are left out.
    static func contributions(of keys: Set<SubscriptionKey>, upTo: Int64, on connection: Connection) throws -> [Folded] {
        let sorted = keys.sorted()
        let (attached, candidates) = try FactStore.facts(of: sorted, upTo: upTo, on: connection)
        return sorted.compactMap { key in
            guard let facts = attached[key], let latest = facts.lazy.map(\.signedAt).max() else { return nil }
            let fold = SubscriptionFold(key: key, facts: facts)
            return folded(key, latest: latest, candidates.isEmpty ? fold : SubscriptionProjection.attach(candidates, to: fold))
        }
    }

    static func folded(_ key: SubscriptionKey, latest: EpochMillis, _ fold: SubscriptionFold) -> Folded {
        Folded(key: key, latest: latest, contribution: SubscriptionRollup.contribution(of: fold))
    }

    /// Replaces the contributions of `keys` with their folds up to `upTo`: subtracts what each
    /// added before (its stored body) from the rollups and adds the new contribution.
    static func refold(_ keys: Set<SubscriptionKey>, upTo: Int64, next: Bool, on connection: Connection) throws {
        guard !keys.isEmpty else { return }
        let tables = Tables(next: next)
        let folded = try contributions(of: keys, upTo: upTo, on: connection)
        let ids = PostgresValue.array(keys.sorted().map { .text($0.text) }, of: .text)
        var delta = ReportRollup()
        for row in try connection.query("DELETE FROM \(tables.subscriptions) WHERE subscription = ANY($1) RETURNING body", [ids],
                                        name: "clear report contributions").rows {
            delta.subtract(try ReportRows.decode(try row.decode(Data.self, "body")))
        }
        try connection.query("DELETE FROM \(tables.members) WHERE subscription = ANY($1)", [ids], name: "clear report members")
        for f in folded { delta.add(f.contribution) }
        try insert(folded, into: tables, on: connection)
        try add(delta, to: tables, on: connection)
    }

    // MARK: writing

    /// Stores each subscription's contribution and its drill-down runs (a rebuild's bulk load too).
    static func insert(_ folded: [Folded], into tables: Tables, on connection: Connection) throws {
        guard !folded.isEmpty else { return }
        var bodies: [PostgresValue] = [], latest: [PostgresValue] = [], keys: [PostgresValue] = []
        var runs: [(String, ReportRows.Run)] = []
        for f in folded {
            keys.append(.text(f.key.text))
            latest.append(.int64(f.latest))
            bodies.append(.bytea(ReportRows.encode(f.contribution)))
            for run in ReportRows.runs(of: f.contribution) { runs.append((f.key.text, run)) }
        }
        try connection.query(
            """
            INSERT INTO \(tables.subscriptions) (subscription, latest_signed_at, body)
            SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[])
            """, [.array(keys, of: .text), .array(latest, of: .int8), .array(bodies, of: .bytea)], name: "insert report contributions")
        guard !runs.isEmpty else { return }
        let ids = try dimensionIds(Set(runs.map(\.1.dimensions)), on: connection)
        try connection.query(
            """
            INSERT INTO \(tables.members) (subscription, metric, dimensions, first_day, last_day)
            SELECT * FROM unnest($1::text[], $2::text[], $3::integer[], $4::integer[], $5::integer[])
            """,
            [.array(runs.map { .text($0.0) }, of: .text), .array(runs.map { .text($0.1.metric.rawValue) }, of: .text),
             .array(runs.map { .int32(ids[$0.1.dimensions]!) }, of: .int4), .array(try runs.map { .int32(try day($0.1.first)) }, of: .int4),
             .array(try runs.map { .int32(try day($0.1.last)) }, of: .int4)],
            name: "insert report members")
    }

    /// Adds `delta` to the daily rollups and cohorts; a row whose figures all become zero is
    /// deleted (the fold keeps no such cell, and a per-currency report lists the currencies of the
    /// cells in its range).
    static func add(_ delta: ReportRollup, to tables: Tables, on connection: Connection) throws {
        let ids = try dimensionIds(Set(delta.cells.keys.map(\.dimensions)).union(delta.cohorts.keys.map(\.dimensions)), on: connection)
        if !delta.cells.isEmpty {
            let cells = delta.cells.sorted { $0.key < $1.key }
            let days = PostgresValue.array(try cells.map { .int32(try day($0.key.day)) }, of: .int4)
            let dims = PostgresValue.array(cells.map { .int32(ids[$0.key.dimensions]!) }, of: .int4)
            var parameters = [days, dims]
            for metric in ReportMetric.allCases { parameters.append(.array(cells.map { .int64($0.value[metric]) }, of: .int8)) }
            let columns = metricColumns
            try connection.query(
                """
                INSERT INTO \(tables.daily) AS d (day, dimensions, \(columns.joined(separator: ", ")))
                SELECT * FROM unnest($1::integer[], $2::integer[], \(columns.indices.map { "$\($0 + 3)::bigint[]" }.joined(separator: ", ")))
                ON CONFLICT (day, dimensions) DO UPDATE SET \(columns.map { "\($0) = d.\($0) + EXCLUDED.\($0)" }.joined(separator: ", "))
                """, parameters, name: "add to report days")
            try connection.query(
                """
                DELETE FROM \(tables.daily) WHERE (day, dimensions) IN (SELECT * FROM unnest($1::integer[], $2::integer[]))
                  AND \(columns.map { "\($0) = 0" }.joined(separator: " AND "))
                """, [days, dims], name: "drop empty report days")
        }
        if !delta.cohorts.isEmpty {
            let cohorts = delta.cohorts.sorted { $0.key < $1.key }
            let days = PostgresValue.array(try cohorts.map { .int32(try day($0.key.cohort)) }, of: .int4)
            let dims = PostgresValue.array(cohorts.map { .int32(ids[$0.key.dimensions]!) }, of: .int4)
            let months = PostgresValue.array(cohorts.map { .int32(Int32(clamping: $0.key.monthsLater)) }, of: .int4)
            try connection.query(
                """
                INSERT INTO \(tables.cohorts) AS c (cohort, dimensions, months_later, members, retained)
                SELECT * FROM unnest($1::integer[], $2::integer[], $3::integer[], $4::bigint[], $5::bigint[])
                ON CONFLICT (cohort, dimensions, months_later) DO UPDATE SET members = c.members + EXCLUDED.members, retained = c.retained + EXCLUDED.retained
                """,
                [days, dims, months, .array(cohorts.map { .int64($0.value.members) }, of: .int8),
                 .array(cohorts.map { .int64($0.value.retained) }, of: .int8)], name: "add to report cohorts")
            try connection.query(
                """
                DELETE FROM \(tables.cohorts) WHERE (cohort, dimensions, months_later) IN
                  (SELECT * FROM unnest($1::integer[], $2::integer[], $3::integer[])) AND members = 0 AND retained = 0
                """, [days, dims, months], name: "drop empty report cohorts")
        }
    }

    /// A day as the tables' integer column. Days beyond ±5.8 million years cannot come from a time
    /// Apple or WeChat signs; the projection stops with this error rather than store a wrong day.
    static func day(_ d: ReportDay) throws -> Int32 {
        guard let v = Int32(exactly: d.index) else {
            throw ProjectionError.refused("day \(d.index) (days since 1970) is outside the reports' range; a fact states a time no store signs — find it with `ledger verify` and report it")
        }
        return v
    }

    /// The ids of `dims` in `report_dimensions`, adding the new ones.
    static func dimensionIds(_ dims: Set<ReportDimensions>, on connection: Connection) throws -> [ReportDimensions: Int32] {
        guard !dims.isEmpty else { return [:] }
        let sorted = dims.sorted()
        let parameters: [PostgresValue] = [
            .array(sorted.map { .text($0.environment) }, of: .text), .array(sorted.map { .text($0.source.rawValue) }, of: .text),
            .array(sorted.map { .text($0.product) }, of: .text), .array(sorted.map { .text($0.currency) }, of: .text),
        ]
        var ids: [ReportDimensions: Int32] = [:]
        func read(_ result: QueryResult) throws {
            for row in result.rows {
                guard let source = ReportSource(rawValue: try row.decode(String.self, "source")) else { continue }
                let d = ReportDimensions(environment: try row.decode(String.self, "environment"), source: source,
                                         product: try row.decode(String.self, "product"), currency: try row.decode(String.self, "currency"))
                ids[d] = try row.decode(Int32.self, "id")
            }
        }
        // The SELECT does not see the CTE's rows (one snapshot): both halves together name every one.
        try read(try connection.query(
            """
            WITH wanted AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS w(environment, source, product, currency)),
            added AS (INSERT INTO \(dimensionsTable) (environment, source, product, currency) SELECT * FROM wanted
                      ON CONFLICT DO NOTHING RETURNING id, environment, source, product, currency)
            SELECT * FROM added
            UNION ALL
            SELECT d.id, d.environment, d.source, d.product, d.currency FROM \(dimensionsTable) d JOIN wanted w USING (environment, source, product, currency)
            """, parameters, name: "report dimension ids"))
        if ids.count < dims.count {
            // Another transaction added one between this statement's snapshot and its insert: read again.
            try read(try connection.query(
                """
                SELECT d.id, d.environment, d.source, d.product, d.currency FROM \(dimensionsTable) d
                JOIN unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS w(environment, source, product, currency)
                USING (environment, source, product, currency)
                """, parameters, name: "report dimension ids again"))
        }
        guard ids.count == dims.count else {
            throw ProjectionError.corrupt("report_dimensions lacks \(dims.count - ids.count) of the dimensions just added")
        }
        return ids
    }
}

extension Rebuilder {
    /// Rebuilds the reports blue/green: every subscription folded in one snapshot into fresh
    /// `_next` tables, then the shared tail (`catchUpAndSwap`) with `ReportProjection.refold`.
    func rebuildReports(progress: @escaping @Sendable (Int, Int) -> Void) throws -> RebuildReport {
        let started = ContinuousClock.now
        let writer = try Connection.unbounded(conninfo: conninfo)
        return try withRebuildLock(on: writer) { try rebuildReportsLocked(started: started, writer: writer, progress: progress) }
    }

    private func rebuildReportsLocked(
        started: ContinuousClock.Instant, writer: Connection, progress: @escaping @Sendable (Int, Int) -> Void
    ) throws -> RebuildReport {
        try deriveMissingFacts(on: writer)
        let live = ReportProjection.Tables(next: false), next = ReportProjection.Tables(next: true)
        let swapTables = zip(live.all, next.all).map { Rebuilder.SwapTable(live: $0, next: $1) }
        try writer.transaction { writer in
            try writer.query("SET LOCAL ROLE ledger_projector", name: "projector role")
            for table in swapTables {
                try writer.query("DROP TABLE IF EXISTS \(table.next)", name: "drop stale report table")
                try writer.query("DROP TABLE IF EXISTS \(table.retired)", name: "drop retired report table")
                try writer.query("CREATE TABLE \(table.next) (LIKE \(table.live) INCLUDING ALL)", name: "create next report table")
            }
        }

        // The bulk fold, in one snapshot; contributions are written in chunks as they come.
        var rollup = ReportRollup()
        var pending: [ReportProjection.Folded] = []
        func flush() throws {
            guard !pending.isEmpty else { return }
            try writer.transaction { writer in
                try writer.query("SET LOCAL ROLE ledger_projector", name: "projector role")
                try ReportProjection.insert(pending, into: next, on: writer)
            }
            pending.removeAll(keepingCapacity: true)
        }
        let (head, factRows, streams) = try streamFacts(progress: { done, total in progress(done, total) }) { key, facts, orderFacts in
            guard let latest = facts.lazy.map(\.signedAt).max() else { return }
            let folded = ReportProjection.folded(key, latest: latest, orderFacts.attach(to: SubscriptionFold(key: key, facts: facts)))
            rollup.add(folded.contribution)
            pending.append(folded)
            if pending.count >= 1_000 { try flush() }
        }
        try flush()
        try writer.transaction { writer in
            try writer.query("SET LOCAL ROLE ledger_projector", name: "projector role")
            try ReportProjection.add(rollup, to: next, on: writer)
            for table in [next.subscriptions, next.members] { try writer.query("ANALYZE \(table)", name: "analyze next report table") }
        }
        let bulkDone = ContinuousClock.now

        let swap = try catchUpAndSwap([ReportProjection.name], tables: swapTables, from: head, on: writer) { after, upTo, writer in
            let keys = try Self.subscriptions(after: after, upTo: upTo, on: writer)
            try ReportProjection.refold(keys, upTo: upTo, next: true, on: writer)
            return keys.count
        }
        let seconds = max(started.duration(to: .now).seconds, 1e-9)
        var report = RebuildReport(
            projections: [.reports], dryRun: false, snapshotHead: head, swapHead: swap.swapHead, events: Int(head),
            streams: streams, caughtUpStreams: swap.caughtUp, seconds: seconds, eventsPerSecond: Double(head) / seconds,
            peakRSSBytes: Self.peakRSS(), gains: [], losses: [], evaluatedAt: projector.clock())
        report.facts = factRows
        report.bulkSeconds = started.duration(to: bulkDone).seconds
        report.indexSeconds = bulkDone.duration(to: swap.caughtUpAt).seconds
        report.swapSeconds = swap.swapStart.duration(to: .now).seconds
        return report
    }
}
