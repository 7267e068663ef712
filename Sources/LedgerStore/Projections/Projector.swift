import Foundation
import LedgerCore
import Postgres

/// Refolds subscription streams and replaces their rows in the projection tables. The one place
/// that writes projection rows for the live hook, the catch-up worker and a rebuild's catch-up,
/// so all three write exactly what a rebuild writes.
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

    /// Streams the ledger keeps for events that concern no subscription (`StreamNames`); their
    /// events yield no facts, so there is nothing to refold.
    static func isSubscriptionStream(_ stream: String) -> Bool {
        !(stream.hasPrefix("apple:") || stream.hasPrefix("ledger:"))
    }

    /// Replaces the rows of `streams` in the tables of `projections` with a fold of their events
    /// (only events at or before `upTo`, when given). Streams without facts end up with no rows.
    func refold(
        streams: [String], projections: Set<ProjectionName>, upTo: Int64? = nil, next: Bool = false,
        on connection: Connection
    ) throws {
        let streams = Array(Set(streams.filter(Self.isSubscriptionStream))).sorted()
        if streams.isEmpty || projections.isEmpty { return }
        let facts = try FactReader.facts(streams: streams, on: connection, upTo: upTo)
        let ids = PostgresValue.array(streams.map { .text($0) }, of: .text)
        for table in projections.flatMap(\.tables) {
            try connection.query("DELETE FROM \(table.qualified(next: next)) WHERE stream_id = ANY($1)", [ids], name: "clear \(table.rawValue) rows")
        }
        let now = clock()
        var buffers = CopyBuffers()
        for stream in streams {
            guard let streamFacts = facts[stream] else { continue }
            buffers.add(StreamRows(streamId: stream, facts: streamFacts, catalog: catalog, now: now), for: projections)
        }
        try buffers.flush(on: connection, next: next)
    }
}

/// The live projections: joins the append transaction (DESIGN §Projections), so a 200 means the
/// event's effect on the tables is committed with it. It advances a projection only when that
/// projection's checkpoint is exactly at the batch's first position − 1 and it is running;
/// otherwise the catch-up worker owns the gap and will apply these events in order.
public struct LiveProjectionHook: AppendHook {
    public let name = "projections"
    public let projector: Projector

    public init(projector: Projector) { self.projector = projector }

    public func didAppend(_ events: [RecordedEvent], in connection: Connection) throws {
        guard let first = events.first?.position, let last = events.last?.position else { return }
        // Locks the checkpoint rows: a worker holding one makes this wait for its commit, and
        // then the WHERE is evaluated again on the row it committed.
        let advanced = try connection.query(
            """
            UPDATE projection_checkpoints SET position = $2, updated_at = now()
            WHERE projection = ANY($3) AND position = $1 AND status = 'running'
            RETURNING projection
            """,
            [.int64(first - 1), .int64(last), .array(ProjectionName.allCases.map { .text($0.rawValue) }, of: .text)],
            name: "advance live checkpoints")
        var projections = Set<ProjectionName>()
        for row in advanced.rows {
            if let name = ProjectionName(rawValue: try row.decode(String.self, "projection")) { projections.insert(name) }
        }
        try projector.refold(streams: events.map(\.event.streamId), projections: projections, on: connection)
    }
}
