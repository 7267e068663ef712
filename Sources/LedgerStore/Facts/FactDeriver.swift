import Foundation
import LedgerCore
internal import Postgres

/// `ledger rederive`: derives the facts of this build's schema version for every event that has
/// none yet, in position order, beside the facts of other versions (blue/green). Appends record
/// their facts themselves once the version has caught up to the head.
public struct FactDeriver: Sendable {
    let connections: Connections
    /// Outbox items of the facts it derives (the item of a cause exists once: re-deriving is a no-op).
    var outbox = OutboxDerivation(consumers: OutboxConsumer.registered)

    init(connections: Connections) { self.connections = connections }

    public struct Status: Sendable, Equatable, CustomStringConvertible {
        /// This build's fact schema version (`FactDecoder.schemaVersion`).
        public var version: Int
        public var derivedUpTo: Int64
        public var head: Int64
        /// Other versions present in the table, with the position each reached.
        public var otherVersions: [Int: Int64]

        public var isComplete: Bool { derivedUpTo >= head }

        public var description: String {
            var text = "facts v\(version): derived up to position \(derivedUpTo) of \(head)"
            if !otherVersions.isEmpty {
                text += "; other versions: " + otherVersions.keys.sorted().map { "v\($0) (up to \(otherVersions[$0]!))" }.joined(separator: ", ")
            }
            return text
        }
    }

    public func status() throws(ProjectionError) -> Status {
        do {
            let connection = try connections.unbounded()
            try FactStore.ensureCheckpoint(on: connection)
            let head = try connection.query("SELECT position FROM event_head", name: "head").first?.decode(Int64.self, "position") ?? 0
            var versions: [Int: Int64] = [:]
            for row in try connection.query(
                "SELECT projection, position FROM projection_checkpoints WHERE projection LIKE 'facts.v%' AND status <> 'retired'", name: "fact versions").rows {
                let name = try row.decode(String.self, "projection")
                if let v = Int(name.dropFirst("facts.v".count)) { versions[v] = try row.decode(Int64.self, "position") }
            }
            let mine = versions.removeValue(forKey: FactStore.version) ?? 0
            return Status(version: FactStore.version, derivedUpTo: mine, head: head, otherVersions: versions)
        } catch {
            throw ProjectionError(error)
        }
    }

    /// Derives until this version reaches the head; `progress(derivedUpTo, head)`.
    public func run(batch: Int = 2_000, progress: @escaping @Sendable (Int64, Int64) -> Void = { _, _ in }) async throws(ProjectionError) -> Status {
        try await Rebuilder.offThread {
            let connection = try connections.unbounded()
            try CatchUp.untilIdle(.facts(outbox: outbox), batchSize: batch, on: connection) { range in
                let head = (try? connection.query("SELECT position FROM event_head", name: "head").first?.decode(Int64.self, "position")) ?? 0
                progress(range.upperBound, head)
            }
            return try self.status()
        }
    }

    /// Deletes the facts of every other schema version and their checkpoints (after a switch-over,
    /// once no running instance reads them). Returns the fact rows deleted.
    public func dropOtherVersions() throws(ProjectionError) -> Int {
        do {
            let connection = try connections.unbounded()
            return try connection.transaction { connection -> Int in
                try connection.asProjector()
                let deleted = try connection.query(
                    "WITH d AS (DELETE FROM public.facts WHERE schema_version <> $1 RETURNING 1) SELECT count(*) AS n FROM d",
                    [.int64(Int64(FactStore.version))], name: "drop other fact versions").first?.decode(Int64.self, "n") ?? 0
                // Checkpoint rows are kept (their history is harmless) but marked retired: nothing
                // advances or reports them any more.
                try connection.query(
                    "UPDATE projection_checkpoints SET status = 'retired', updated_at = now() WHERE projection LIKE 'facts.v%' AND projection <> $1",
                    [.text(FactStore.checkpoint)], name: "retire other fact checkpoints")
                return Int(deleted)
            }
        } catch {
            throw ProjectionError(error)
        }
    }
}
