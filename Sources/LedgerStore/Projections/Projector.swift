import Foundation
import LedgerCore
internal import Postgres

/// Refolds subscriptions from their facts and replaces their rows in the projection tables. The
/// one place that writes projection rows for the live hook, the catch-up worker and a rebuild's
/// catch-up, so all three write exactly what a rebuild writes.
public struct Projector: Sendable {
    public let catalog: ProductCatalog
    /// The evaluation time of the fold-time status (tests fix it; the service uses the clock).
    public let clock: @Sendable () -> EpochMillis

    public init(catalog: ProductCatalog, clock: @escaping @Sendable () -> EpochMillis = Projector.wallClock) {
        self.catalog = catalog
        self.clock = clock
    }

    public static let wallClock: @Sendable () -> EpochMillis = {
        EpochMillis((Date().timeIntervalSince1970 * 1000).rounded(.down))
    }

    /// The folds of `keys` from their stored facts (up to `upTo`), with the order facts that join them.
    static func folds(of keys: Set<SubscriptionKey>, upTo: Int64? = nil, on connection: Connection) throws -> [SubscriptionFold] {
        let sorted = keys.sorted()
        let (attached, candidates) = try FactStore.facts(of: sorted, upTo: upTo, on: connection)
        return sorted.compactMap { key in
            guard let facts = attached[key] else { return nil }
            let fold = SubscriptionFold(key: key, facts: facts)
            return candidates.isEmpty ? fold : SubscriptionProjection.attach(candidates, to: fold)
        }
    }

    /// Replaces the rows of `keys` in the tables of `projections` with a fold of their facts
    /// (only facts at or before `upTo`, when given). Subscriptions without facts end with no rows.
    func refold(
        subscriptions keys: Set<SubscriptionKey>, projections: Set<ProjectionName>, upTo: Int64? = nil, next: Bool = false,
        on connection: Connection
    ) throws {
        if keys.isEmpty || projections.isEmpty { return }
        let folds = try Self.folds(of: keys, upTo: upTo, on: connection)
        let ids = PostgresValue.array(keys.sorted().map { .text($0.text) }, of: .text)
        for table in projections.flatMap(\.tables) {
            try connection.query("DELETE FROM \(table.qualified(next: next)) WHERE subscription = ANY($1)", [ids],
                                 name: "clear \(table.rawValue) rows")
        }
        let now = clock()
        var buffers = CopyBuffers()
        for fold in folds where !fold.isEmpty {
            buffers.add(SubscriptionRows(fold: fold, catalog: catalog, now: now), for: projections)
        }
        try buffers.flush(on: connection, next: next)
    }
}

/// The live projections: joins the append transaction (DESIGN §Projections), so a 200 means the
/// event's effect on the tables is committed with it. It runs only when the batch's facts were
/// recorded in the same transaction, and advances a projection only when that projection's
/// checkpoint is exactly at the batch's first position − 1 and it is running; otherwise the
/// catch-up worker owns the gap and will apply these events in order.
struct LiveProjectionHook: AppendHook {
    let name = "projections"
    let projector: Projector
    let snapshots: FoldSnapshots

    init(projector: Projector, snapshots: FoldSnapshots = FoldSnapshots()) {
        self.projector = projector
        self.snapshots = snapshots
    }

    func didAppend(_ events: [RecordedEvent], facts: [Fact], in connection: Connection) throws -> AfterCommit? {
        guard let first = events.first?.position, let last = events.last?.position else { return nil }
        // Locks the checkpoint rows: a worker holding one makes this wait for its commit, and
        // then the WHERE is evaluated again on the row it committed.
        let advanced = try connection.query(
            """
            UPDATE projection_checkpoints SET position = $2, updated_at = now()
            WHERE projection = ANY($3) AND position = $1 AND status = 'running'
            RETURNING projection
            """,
            [.int64(first - 1), .int64(last), .array(ProjectionName.subscriptionCuts.map { .text($0.rawValue) }, of: .text)],
            name: "advance live checkpoints")
        var projections = Set<ProjectionName>()
        for row in advanced.rows {
            if let name = ProjectionName(rawValue: try row.decode(String.self, "projection")) { projections.insert(name) }
        }
        if projections.isEmpty { return nil }
        let keys = try FactStore.subscriptions(touchedBy: facts, on: connection)
        return try projector.refoldLive(subscriptions: keys, projections: projections, first: first, last: last,
                                        snapshots: snapshots, on: connection)
    }
}
