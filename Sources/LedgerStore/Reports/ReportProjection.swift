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
struct ReportsProjection: FoldsOntoSnapshots {
    /// The catalog's periods (`SubscriptionFold.catalogPeriods`), as every fold of the ledger has them.
    let catalogPeriods: [String: EpochMillis]
    /// The append's fold snapshots, when this process appends: a pass folds onto them instead of
    /// reading each touched subscription's whole history (nil: it always reads it).
    var snapshots: FoldSnapshots? = nil
    /// The snapshots as they stood when this pass began (`forPass`).
    var pinned: FoldSnapshots.Pinned? = nil
    var names: [ProjectionName] { [.reports] }
    /// A contribution walks a subscription's whole history day by day: kept by the catch-up, never
    /// in the append transaction.
    var isLive: Bool { false }

    func tables(of name: ProjectionName) -> [ProjectionTable] {
        name == .reports ? [.reportSubscriptions, .reportMembers, .reportDaily, .reportCohorts] : []
    }

    func apply(_ range: ClosedRange<Int64>, to names: Set<ProjectionName>, next: Bool, on connection: Connection) throws -> Int {
        try ReportProjection.apply(range, next: next, catalogPeriods: catalogPeriods, snapshots: next ? nil : passSnapshots, on: connection)
    }

    func load(_ names: Set<ProjectionName>, into load: BulkLoad) throws -> BulkLoad.Counts {
        try ReportProjection.load(into: load, catalogPeriods: catalogPeriods)
    }
}

extension ProjectionTable {
    // Migrations/0020. `report_dimensions` is not among them: a rebuild shares it (an id always
    // names the same four values), adding the dimensions it meets.
    static let reportSubscriptions = ProjectionTable(
        name: "report_subscriptions", columns: "subscription, latest_signed_at, body", statisticsColumns: "subscription, latest_signed_at",
        indexes: ["ALTER TABLE {table} ADD PRIMARY KEY (subscription)", "CREATE INDEX ON {table} (latest_signed_at)"])
    static let reportMembers = ProjectionTable(
        name: "report_members", columns: "subscription, metric, dimensions, first_day, last_day",
        statisticsColumns: "subscription, metric, dimensions, first_day, last_day",
        indexes: ["CREATE INDEX ON {table} (subscription)", "CREATE INDEX ON {table} (metric, first_day)"])
    static let reportDaily = ProjectionTable(
        name: "report_daily", columns: "day, dimensions, " + ReportProjection.metricColumns.joined(separator: ", "),
        statisticsColumns: "day, dimensions", indexes: ["ALTER TABLE {table} ADD PRIMARY KEY (day, dimensions)"])
    static let reportCohorts = ProjectionTable(
        name: "report_cohorts", columns: "cohort, dimensions, months_later, members, retained",
        statisticsColumns: "cohort, dimensions", indexes: ["ALTER TABLE {table} ADD PRIMARY KEY (cohort, dimensions, months_later)"])
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

    /// Refolds the subscriptions the facts at `range` touch, as known at the range's end; returns
    /// how many.
    @discardableResult
    static func apply(_ range: ClosedRange<Int64>, next: Bool = false, catalogPeriods: [String: EpochMillis],
                      snapshots: FoldSnapshots.Pinned? = nil, on connection: Connection) throws -> Int {
        // A tie names who holds a subscription, which no figure is split by: a subscription only
        // tied or untied in the range has the contribution it had.
        let keys = try FactStore.subscriptions(touchedByPositions: range, ignoring: [.customerTie], on: connection)
        try refold(keys, upTo: range.upperBound, next: next, catalogPeriods: catalogPeriods,
                   pass: snapshots.map { PassFolds(snapshots: $0, from: range.lowerBound) }, on: connection)
        return keys.count
    }

    /// What a pass may start its folds from instead of each subscription's whole history: the
    /// append's snapshots (each the fold of every fact up to its position; LiveFold.swift says why
    /// that is the full fold), and where the pass's range starts (the tables hold every
    /// contribution as of the position before).
    struct PassFolds {
        let snapshots: FoldSnapshots.Pinned
        let from: Int64
    }

    /// The contributions of `keys` folded from their facts up to `upTo` (with the order facts that
    /// join them, as the subscription projections fold); keys without facts are left out.
    ///
    /// With `pass`, a key with a snapshot at a position `s` ≤ `upTo` is folded on from it with its
    /// facts in `s+1 … upTo` only, and its latest business time is the larger of what the tables
    /// stored (`storedLatest`: every fact before the pass's range) and that of its facts from the
    /// range's start or `s+1`, whichever is earlier. A snapshot past `upTo` (the append moved on
    /// while this pass lagged) is the fold as of `upTo` exactly when the key has no fact in
    /// `upTo+1 … s`, which the same read finds out; with one there, the key is read whole. One
    /// whose facts bring order facts (WeChat, aliases) reads everything, as the append does. The
    /// snapshot is only read (a copy): the reports keep no folds of their own, which would double
    /// what the snapshots hold.
    static func contributions(of keys: Set<SubscriptionKey>, upTo: Int64, catalogPeriods: [String: EpochMillis],
                              pass: PassFolds? = nil, storedLatest: [String: EpochMillis] = [:],
                              on connection: Connection) throws -> [Folded] {
        var rest = keys
        var out: [Folded] = []
        if let pass {
            var entries = pass.snapshots.peek(keys.sorted())
            let started = entries.keys.sorted()
            // From the range's start (for the latest business time) or the snapshot, through the
            // snapshot when it is past `upTo` (a fact there rules it out).
            let newer = try FactStore.facts(
                after: Dictionary(uniqueKeysWithValues: started.map { key in
                    (key, (after: min(entries[key]!.position, pass.from - 1), through: max(entries[key]!.position, upTo)))
                }), name: "report facts after snapshots", on: connection)
            for key in started {
                let facts = newer[key] ?? []
                if facts.contains(where: { $0.origin == .wechat || $0.kind == .orderAlias || $0.position > upTo }) { continue }
                guard var entry = entries.removeValue(forKey: key) else { continue }
                rest.remove(key)
                entry.fold.catalogPeriods = catalogPeriods
                for fact in facts where fact.position > entry.position { entry.fold.apply(fact) }
                let latest = ([storedLatest[key.text]] + facts.map(Self.reportedTime)).compactMap { $0 }.max()
                if let latest { out.append(folded(key, latest: latest, entry.fold)) }
            }
            pass.snapshots.owner.countReportFolds(snapshot: keys.count - rest.count, full: rest.count)
        }
        let sorted = rest.sorted()
        let (attached, candidates) = try FactStore.facts(of: sorted, upTo: upTo, on: connection)
        for key in sorted {
            guard let facts = attached[key], let latest = facts.lazy.compactMap(Self.reportedTime).max() else { continue }
            let fold = SubscriptionFold(key: key, facts: facts, catalogPeriods: catalogPeriods)
            out.append(folded(key, latest: latest, candidates.isEmpty ? fold : SubscriptionProjection.attach(candidates, to: fold)))
        }
        return out
    }

    /// The business time a fact gives a report's default range end (`latest_signed_at`): its
    /// signing, except a tie's, which records who holds a subscription and changes no figure — so
    /// a subscription only tied is never refolded for reports (`ignoring: [.customerTie]`), and one with
    /// nothing but ties has no contribution.
    static func reportedTime(_ fact: Fact) -> EpochMillis? { fact.kind == .customerTie ? nil : fact.signedAt }

    static func folded(_ key: SubscriptionKey, latest: EpochMillis, _ fold: SubscriptionFold) -> Folded {
        Folded(key: key, latest: latest, contribution: SubscriptionRollup.contribution(of: fold))
    }

    /// Replaces the contributions of `keys` with their folds up to `upTo`: the rollups change by
    /// the difference between what each added before (its stored body) and its new contribution,
    /// on the days where they differ. Of the drill-down rows only those that changed are written:
    /// a renewal extends a run or two and adds a day's, while a long subscription has hundreds
    /// (deleting and re-inserting them all on every pass made the reports' cost grow with the
    /// history).
    static func refold(_ keys: Set<SubscriptionKey>, upTo: Int64, next: Bool, catalogPeriods: [String: EpochMillis],
                       pass: PassFolds? = nil, on connection: Connection) throws {
        guard !keys.isEmpty else { return }
        let tables = Tables(next: next)
        // A contribution holds a cell per day of the subscription's life: a pass over a thousand
        // long histories at once held hundreds of MB. Chunked, only the sum of the changes (one
        // cell per day and dimensions) grows with the pass.
        var delta = ReportRollup()
        let sorted = keys.sorted()
        for start in stride(from: 0, to: sorted.count, by: refoldChunk) {
            let chunk = Set(sorted[start..<min(start + refoldChunk, sorted.count)])
            try refold(chunk, upTo: upTo, tables: tables, catalogPeriods: catalogPeriods, pass: pass, into: &delta, on: connection)
        }
        try add(delta, to: tables, on: connection)
    }

    /// Subscriptions refolded together (their contributions are held at once).
    static let refoldChunk = 64

    private static func refold(_ keys: Set<SubscriptionKey>, upTo: Int64, tables: Tables, catalogPeriods: [String: EpochMillis],
                               pass: PassFolds?, into delta: inout ReportRollup, on connection: Connection) throws {
        let ids = PostgresValue.array(keys.sorted().map { .text($0.text) }, of: .text)
        var storedLatest: [String: EpochMillis] = [:]
        var storedRuns: [String: (runs: [ReportRows.Run], cohorts: [CohortKey: CohortCount])] = [:]
        for row in try connection.query(
            "DELETE FROM \(tables.subscriptions) WHERE subscription = ANY($1) RETURNING subscription, latest_signed_at, body", [ids],
            name: "clear report contributions").rows {
            let subscription = try row.decode(String.self, "subscription")
            storedRuns[subscription] = try ReportRows.decodeRuns(try row.decode(Data.self, "body"))
            storedLatest[subscription] = try row.decode(Int64.self, "latest_signed_at")
        }
        let folded = try contributions(of: keys, upTo: upTo, catalogPeriods: catalogPeriods, pass: pass,
                                       storedLatest: storedLatest, on: connection)
        // Each stored row with where it is: the rows a refold no longer yields are deleted by that
        // place. Matched by their five values instead, the DELETE was planned as a hash join over
        // the whole table (or a probe of the (metric, first_day) index, which names every
        // subscription that started that day): 35–117 ms a pass, a database core beside the append.
        // The pass holds the projection's checkpoint row, so no other writer moves these rows.
        var stored: [MemberRow: [String]] = [:]
        for row in try connection.query(
            """
            SELECT m.* FROM unnest($1::text[]) AS k(sub)
            CROSS JOIN LATERAL (
                SELECT ctid::text AS place, subscription, metric, dimensions, first_day, last_day
                FROM \(tables.members) WHERE subscription = k.sub OFFSET 0) m
            """,
            [ids], name: "report members of subscriptions").rows {
            stored[MemberRow(subscription: try row.decode(String.self, "subscription"), metric: try row.decode(String.self, "metric"),
                             dimensions: try row.decode(Int32.self, "dimensions"), first: try row.decode(Int32.self, "first_day"),
                             last: try row.decode(Int32.self, "last_day")), default: []].append(try row.decode(String.self, "place"))
        }
        // The rollups change by the days whose figures differ between each stored contribution and its refold.
        let runs = folded.map { ReportRows.runs(of: $0.contribution) }
        for (f, new) in zip(folded, runs) {
            let old = storedRuns.removeValue(forKey: f.key.text)
            ReportRows.addDifference(from: old?.runs ?? [], to: new, into: &delta)
            addDifference(from: old?.cohorts ?? [:], to: f.contribution.cohorts, into: &delta)
        }
        for old in storedRuns.values {
            ReportRows.addDifference(from: old.runs, to: [], into: &delta)
            addDifference(from: old.cohorts, to: [:], into: &delta)
        }
        let members = try insert(folded, runs: runs, into: tables, on: connection)
        try write(members: members, replacing: stored, into: tables, on: connection)
    }

    /// One drill-down row (`report_members`).
    struct MemberRow: Hashable {
        var subscription: String
        var metric: String
        var dimensions: Int32
        var first: Int32
        var last: Int32
    }

    // MARK: writing

    /// Adds to `delta` what replacing a subscription's cohort counts `old` by `new` changes.
    static func addDifference(from old: [CohortKey: CohortCount], to new: [CohortKey: CohortCount], into delta: inout ReportRollup) {
        guard old != new else { return }
        for (k, v) in old where new[k] != v { delta.add(k, CohortCount(members: 0 &- v.members, retained: 0 &- v.retained)) }
        for (k, v) in new where old[k] != v { delta.add(k, v) }
    }

    /// Stores each subscription's contribution (`runs`: each one's `ReportRows.runs(of:)`); returns
    /// their drill-down rows.
    static func insert(_ folded: [Folded], runs ofEach: [[ReportRows.Run]], into tables: Tables, on connection: Connection) throws -> Set<MemberRow> {
        guard !folded.isEmpty else { return [] }
        var bodies: [PostgresValue] = [], latest: [PostgresValue] = [], keys: [PostgresValue] = []
        var runs: [(String, ReportRows.Run)] = []
        for (f, own) in zip(folded, ofEach) {
            keys.append(.text(f.key.text))
            latest.append(.int64(f.latest))
            bodies.append(.bytea(ReportRows.encode(f.contribution, runs: own)))
            for run in own { runs.append((f.key.text, run)) }
        }
        try connection.query(
            """
            INSERT INTO \(tables.subscriptions) (subscription, latest_signed_at, body)
            SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[])
            """, [.array(keys, of: .text), .array(latest, of: .int8), .array(bodies, of: .bytea)], name: "insert report contributions")
        guard !runs.isEmpty else { return [] }
        let ids = try dimensionIds(Set(runs.map(\.1.dimensions)), on: connection)
        var members = Set<MemberRow>()
        for (subscription, run) in runs {
            members.insert(MemberRow(subscription: subscription, metric: run.metric.rawValue, dimensions: ids[run.dimensions]!,
                                     first: try day(run.first), last: try day(run.last)))
        }
        return members
    }

    /// Deletes the drill-down rows of `stored` (each with its places in the table) that `members`
    /// lacks and inserts those it adds.
    static func write(members: Set<MemberRow>, replacing stored: [MemberRow: [String]], into tables: Tables, on connection: Connection) throws {
        func columns(_ rows: [MemberRow]) -> [PostgresValue] {
            [.array(rows.map { .text($0.subscription) }, of: .text), .array(rows.map { .text($0.metric) }, of: .text),
             .array(rows.map { .int32($0.dimensions) }, of: .int4), .array(rows.map { .int32($0.first) }, of: .int4),
             .array(rows.map { .int32($0.last) }, of: .int4)]
        }
        let gone = stored.filter { !members.contains($0.key) }.flatMap(\.value)
        let added = Array(members.filter { stored[$0] == nil })
        if !gone.isEmpty {
            try connection.query("DELETE FROM \(tables.members) WHERE ctid = ANY($1::text[]::tid[])",
                                 [.array(gone.map { .text($0) }, of: .text)], name: "delete changed report members")
        }
        if !added.isEmpty {
            try connection.query(
                """
                INSERT INTO \(tables.members) (subscription, metric, dimensions, first_day, last_day)
                SELECT * FROM unnest($1::text[], $2::text[], $3::integer[], $4::integer[], $5::integer[])
                """, columns(added), name: "insert report members")
        }
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

extension ReportProjection {
    /// The rebuild's bulk pass (`Projection.load`): every subscription folded in the snapshot, its
    /// contribution and drill-down runs written as it comes, the daily rollups and cohorts (the
    /// sum of every contribution, cells that sum to zero left out as `add` deletes them) at the end.
    static func load(into load: BulkLoad, catalogPeriods: [String: EpochMillis]) throws -> BulkLoad.Counts {
        let (_, totalFacts) = try Rebuilder.partitionBounds(on: load.reader, head: load.head, partitions: 1)
        let orderFacts = try Rebuilder.orderFacts(upTo: load.head, on: load.reader)
        // Dimension ids are added on a session of their own and committed at once: the table is
        // shared by the live tables and the rebuilt ones, so an id a failed rebuild added is harmless.
        let dimensions = try load.rebuilder.connections.unbounded()
        var known: [ReportDimensions: Int32] = [:]
        func ids(_ wanted: Set<ReportDimensions>) throws -> [ReportDimensions: Int32] {
            let missing = wanted.subtracting(known.keys)
            if !missing.isEmpty {
                let added = try dimensions.transaction { connection in
                    try connection.asProjector()
                    return try dimensionIds(missing, on: connection)
                }
                known.merge(added) { old, _ in old }
            }
            return known
        }
        let chunk = load.rebuilder.flushBytes
        var rollup = ReportRollup()
        var subscriptionRows: [UInt8] = [], memberRows: [UInt8] = []
        func flush() throws {
            try load.send(subscriptionRows, to: .reportSubscriptions)
            try load.send(memberRows, to: .reportMembers)
            (subscriptionRows, memberRows) = ([], [])
        }
        var done = 0
        let (facts, units) = try load.rebuilder.streamFacts(
            snapshot: load.snapshot, range: (nil, nil), head: load.head,
            progress: { rows in done += rows; load.progress(done, totalFacts) }
        ) { key, facts in
            guard let latest = facts.lazy.compactMap(Self.reportedTime).max() else { return }
            let f = folded(key, latest: latest, orderFacts.attach(to: SubscriptionFold(key: key, facts: facts, catalogPeriods: catalogPeriods)))
            rollup.add(f.contribution)
            subscriptionRows.field(key.text)
            subscriptionRows.field(f.latest)
            let runs = ReportRows.runs(of: f.contribution)
            subscriptionRows.field(bytea: ReportRows.encode(f.contribution, runs: runs), last: true)
            if !runs.isEmpty {
                let ids = try ids(Set(runs.map(\.dimensions)))
                for run in runs {
                    memberRows.field(key.text)
                    memberRows.field(run.metric.rawValue)
                    memberRows.field(Int64(ids[run.dimensions]!))
                    memberRows.field(Int64(try day(run.first)))
                    memberRows.field(Int64(try day(run.last)), last: true)
                }
            }
            if subscriptionRows.count + memberRows.count >= chunk { try flush() }
        }
        try flush()

        let ids = try ids(Set(rollup.cells.keys.map(\.dimensions)).union(rollup.cohorts.keys.map(\.dimensions)))
        var daily: [UInt8] = []
        let metrics = ReportMetric.allCases
        for (cell, values) in rollup.cells.sorted(by: { $0.key < $1.key }) where !values.isZero {
            daily.field(Int64(try day(cell.day)))
            daily.field(Int64(ids[cell.dimensions]!))
            for (n, metric) in metrics.enumerated() { daily.field(values[metric], last: n == metrics.count - 1) }
            if daily.count >= chunk {
                try load.send(daily, to: .reportDaily)
                daily = []
            }
        }
        try load.send(daily, to: .reportDaily)
        var cohorts: [UInt8] = []
        for (key, count) in rollup.cohorts.sorted(by: { $0.key < $1.key }) where count.members != 0 || count.retained != 0 {
            cohorts.field(Int64(try day(key.cohort)))
            cohorts.field(Int64(ids[key.dimensions]!))
            cohorts.field(Int64(key.monthsLater))
            cohorts.field(count.members)
            cohorts.field(count.retained, last: true)
        }
        try load.send(cohorts, to: .reportCohorts)
        return BulkLoad.Counts(facts: facts, units: units)
    }
}
