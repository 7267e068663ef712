import Foundation
import LedgerCore
import Synchronization
internal import Postgres

/// The daily rollups as of one log position, folded from the facts: what reproduces a report at
/// any position (the position, the hash chain's value there and the fact schema version; the
/// service adds the catalog digest).
public struct ReportSnapshot: Sendable {
    public var position: Int64
    public var chainHash: [UInt8]
    public var factSchemaVersion: Int
    public var rollup: ReportRollup
    /// Every subscription's contribution at the position: what a point of a chart drills down to.
    public var contributions: [SubscriptionKey: SubscriptionContribution]
    /// The latest business time any fact up to the position states (signedAt): the default end
    /// of a report's range, a function of the position like everything else in the snapshot.
    public var latestSignedAt: EpochMillis?

    /// The report `query` asks for, and the subscriptions behind `point` when one is asked.
    public func reading(_ query: (EpochMillis?) throws -> ReportQuery, point: ReportPoint?) rethrows -> ReportReading {
        let q = try query(latestSignedAt)
        return ReportReading(
            position: position, chainHash: chainHash, factSchemaVersion: factSchemaVersion, table: rollup.table(q),
            members: point.map { q.members(of: contributions, period: $0.period, metric: $0.metric) }, fromProjection: false)
    }
}

/// One point of a chart: the period (its first day) and the metric.
public struct ReportPoint: Sendable, Hashable {
    public var period: ReportDay
    public var metric: ReportMetric

    public init(period: ReportDay, metric: ReportMetric) {
        self.period = period
        self.metric = metric
    }
}

/// A report's figures with where they were computed from. The same bytes whichever way they were
/// read (`fromProjection` says which, for tests and operators only).
public struct ReportReading: Sendable {
    public var position: Int64
    public var chainHash: [UInt8]
    public var factSchemaVersion: Int
    public var table: ReportTable
    /// The subscriptions behind the asked point, ordered by key (nil when no point was asked).
    public var members: [SubscriptionKey]?
    /// Read from the reporting projection's tables; false: folded from the facts at the position.
    public var fromProjection: Bool
}

/// Why a report cannot be computed as asked.
public enum ReportStoreError: Error, Sendable, Equatable, CustomStringConvertible {
    case positionNotReached(asked: Int64, available: Int64)

    public var description: String {
        switch self {
        case .positionNotReached(let asked, let available):
            "asOfPosition=\(asked) is beyond the log the ledger has derived (position \(available)); ask for a position from 0 to \(available)"
        }
    }
}

/// Reports of the facts. The current figures are read from the reporting projection
/// (`ReportsProjection`) at its checkpoint: indexed reads of the daily rollups, cohorts and
/// drill-down runs. A report at an older position (`asOfPosition`), or while the projection is
/// stopped, is folded from the facts up to that position (`rollup(asOfPosition:)`, the one fold
/// path), and the last few positions' folds are kept in memory (sound: facts at a position never
/// change for one fact schema version). Both give the same bytes: the projection's tables at its
/// checkpoint are the fold of the facts up to it (ReportProjectionTests).
public struct ReportQueries: Sendable {
    let pool: ConnectionPool
    /// A fold of every fact is a long read (LongReads.swift: limited, timed out, cancelled with its request).
    let longReads: LongReads
    /// The catalog's periods (`SubscriptionFold.catalogPeriods`), as every fold of the ledger has them.
    var catalogPeriods: [String: EpochMillis] = [:]
    let cache = Cache()

    final class Cache: Sendable {
        let entries = Mutex<[(Int64, ReportSnapshot)]>([])
        static let size = 4

        func get(_ position: Int64) -> ReportSnapshot? {
            entries.withLock { list in list.first { $0.0 == position }?.1 }
        }

        func put(_ s: ReportSnapshot) {
            entries.withLock { list in
                list.removeAll { $0.0 == s.position }
                list.insert((s.position, s), at: 0)
                if list.count > Self.size { list.removeLast(list.count - Self.size) }
            }
        }
    }

    /// The report `query` builds (given the latest business time the facts state at the position)
    /// at `asOfPosition` (nil: the projection's position, or the latest derived one while the
    /// projection is stopped), with the subscriptions behind `point` when one is asked.
    public func read(asOfPosition: Int64?, point: ReportPoint? = nil,
                     _ query: @escaping @Sendable (EpochMillis?) throws -> ReportQuery) async throws -> ReportReading {
        let plan = try await pool.withConnection { connection in
            try self.fromProjection(asked: asOfPosition, point: point, query, on: connection)
        }
        switch plan {
        case .read(let reading): return reading
        case .fold(let position): return try await rollup(asOfPosition: position).reading(query, point: point)
        }
    }

    enum Plan: Sendable {
        case read(ReportReading)
        case fold(Int64)
    }

    /// Reads the tables when the asked position is the projection's, in one snapshot (checkpoint
    /// and tables agree); otherwise says which position to fold.
    private func fromProjection(asked: Int64?, point: ReportPoint?, _ query: (EpochMillis?) throws -> ReportQuery,
                                on connection: Connection) throws -> Plan {
        try connection.transaction { connection -> Plan in
            try connection.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", name: "snapshot")
            let derived = try FactStore.derivedUpTo(on: connection)
            let checkpoint = try connection.query(
                "SELECT position, status FROM projection_checkpoints WHERE projection = $1", [.text(ReportProjection.name.rawValue)],
                name: "reports checkpoint").first
            let running = try checkpoint?.decode(String.self, "status") == "running"
            let projected = try checkpoint?.decode(Int64.self, "position")
            let position = asked ?? (running ? projected ?? derived : derived)
            guard position >= 0, position <= derived else { throw ReportStoreError.positionNotReached(asked: position, available: derived) }
            guard running, position == projected else { return .fold(position) }
            return .read(try Self.projected(at: position, point: point, query, on: connection))
        }
    }

    /// The report from the projection's tables (their checkpoint is `position`).
    static func projected(at position: Int64, point: ReportPoint?, _ build: (EpochMillis?) throws -> ReportQuery,
                          on connection: Connection) throws -> ReportReading {
        let latest = try connection.query("SELECT max(latest_signed_at) AS latest FROM projections.report_subscriptions",
                                          name: "reports latest").first?.decode(Int64?.self, "latest")
        let query = try build(latest)
        let f = query.filter
        let filters: [PostgresValue] = [.optional(f.environment), .optional(f.source?.rawValue), .optional(f.product), .optional(f.currency)]
        let matches = "($1::text IS NULL OR d.environment = $1) AND ($2::text IS NULL OR d.source = $2) AND ($3::text IS NULL OR d.product = $3) AND ($4::text IS NULL OR d.currency = $4)"
        var rollup = ReportRollup()
        if query.name == .retention {
            for row in try connection.query(
                """
                SELECT c.cohort, c.months_later, c.members, c.retained, d.environment, d.source, d.product, d.currency
                FROM projections.report_cohorts c JOIN projections.report_dimensions d ON d.id = c.dimensions
                WHERE \(matches) AND c.cohort BETWEEN $5 AND $6
                """, filters + [.int64(query.from.monthStart.index), .int64(query.to.index)], name: "report cohorts").rows {
                let key = CohortKey(cohort: ReportDay(index: try row.decode(Int64.self, "cohort")), dimensions: try dimensions(row),
                                    monthsLater: try row.decode(Int.self, "months_later"))
                rollup.cohorts[key] = CohortCount(members: try row.decode(Int64.self, "members"), retained: try row.decode(Int64.self, "retained"))
            }
        } else {
            let metrics = query.name.metrics
            // Summed over the dimensions the filter leaves open: the table then needs one row per day
            // and currency (money reports) or per day, not one per product and source.
            let currency = query.name.perCurrency ? "d.currency" : "''"
            for row in try connection.query(
                """
                SELECT r.day, \(currency) AS currency, \(metrics.map { "sum(r.\($0.rawValue))::bigint AS \($0.rawValue)" }.joined(separator: ", "))
                FROM projections.report_daily r JOIN projections.report_dimensions d ON d.id = r.dimensions
                WHERE \(matches) AND r.day BETWEEN $5 AND $6
                GROUP BY 1, 2
                """, filters + [.int64(query.from.index), .int64(query.to.index)], name: "report days").rows {
                var values = ReportValues()
                for m in metrics { values[m] = try row.decode(Int64.self, m.rawValue) }
                let dims = ReportDimensions(environment: "", source: .apple, product: "", currency: try row.decode(String.self, "currency"))
                rollup.cells[ReportCell(day: ReportDay(index: try row.decode(Int64.self, "day")), dimensions: dims)] = values
            }
        }
        // The rows were filtered and summed above: the table is the unfiltered one of these cells.
        var unfiltered = query
        unfiltered.filter = ReportFilter()
        var table = rollup.table(unfiltered)
        table.query = query
        var members: [SubscriptionKey]?
        if let point {
            let (start, last) = query.span(of: point.period)
            // A level counts on the period's last day only; a flow on any of its days.
            let from = point.metric.isLevel ? last : start
            members = try connection.query(
                """
                SELECT DISTINCT m.subscription FROM projections.report_members m JOIN projections.report_dimensions d ON d.id = m.dimensions
                WHERE \(matches) AND m.metric = $5 AND m.first_day <= $6 AND m.last_day >= $7
                """, filters + [.text(point.metric.rawValue), .int64(last.index), .int64(from.index)], name: "report members")
                .rows.compactMap { SubscriptionKey(text: try $0.decode(String.self, "subscription")) }.sorted()
        }
        let chain = try ChainStore.anchor(at: position, on: connection)
        return ReportReading(position: position, chainHash: chain?.hash ?? [], factSchemaVersion: FactStore.version, table: table,
                             members: members, fromProjection: true)
    }

    static func dimensions(_ row: Row) throws -> ReportDimensions {
        let source = try row.decode(String.self, "source")
        guard let s = ReportSource(rawValue: source) else { throw ProjectionError.corrupt("report_dimensions names source '\(source)'") }
        return ReportDimensions(environment: try row.decode(String.self, "environment"), source: s,
                                product: try row.decode(String.self, "product"), currency: try row.decode(String.self, "currency"))
    }

    /// The rollups at `asOfPosition` (nil: the latest position facts were derived for), folded from
    /// the facts: the one path for a position the projection is not at.
    public func rollup(asOfPosition: Int64? = nil) async throws -> ReportSnapshot {
        try await longReads.run { connection in try self.computed(at: asOfPosition, on: connection) }
    }

    private func computed(at asked: Int64?, on connection: Connection) throws -> ReportSnapshot {
        try connection.transaction { connection in
            try connection.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", name: "snapshot")
            let derived = try FactStore.derivedUpTo(on: connection)
            let position = asked ?? derived
            guard position >= 0, position <= derived else {
                throw ReportStoreError.positionNotReached(asked: position, available: derived)
            }
            if let hit = cache.get(position) { return hit }
            let rows = try connection.query(
                "SELECT \(FactRows.columns) FROM public.facts WHERE schema_version = $1 AND position <= $2 ORDER BY position, ordinal",
                [.int64(Int64(FactStore.version)), .int64(position)], name: "report facts up to")
            var projection = SubscriptionProjection(catalogPeriods: catalogPeriods)
            var latest: EpochMillis?
            // As the projection: a subscription of ties alone has no contribution.
            var reported: Set<SubscriptionKey> = []
            for fact in try rows.facts() {
                if let key = fact.subscription, let t = ReportProjection.reportedTime(fact) {
                    reported.insert(key)
                    if latest.map({ t > $0 }) ?? true { latest = t }
                }
                projection.apply(fact)
            }
            let contributions = projection.subscriptions.filter { reported.contains($0.key) }.mapValues(SubscriptionRollup.contribution(of:))
            let chain = try ChainStore.anchor(at: position, on: connection)
            let snapshot = ReportSnapshot(position: position, chainHash: chain?.hash ?? [], factSchemaVersion: FactStore.version,
                                          rollup: ReportRollup(contributions: contributions), contributions: contributions,
                                          latestSignedAt: latest)
            cache.put(snapshot)
            return snapshot
        }
    }
}
