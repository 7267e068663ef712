import Foundation
internal import Postgres

/// The part of a blue/green rebuild every projection shares, once: the rebuild lock, then the
/// tail after the bulk load — catch up the `_next` tables without blocking appends, then under
/// the event-head lock fold what arrived since, set the checkpoints and swap the tables by
/// renaming. A projection supplies only its tables and how to fold a range of facts into `_next`.
extension Rebuilder {
    /// One `_next` table of a rebuild and the live table it replaces (schema-qualified names).
    struct SwapTable {
        let live: String
        let next: String
        /// The live table's name without its schema (what RENAME TO takes).
        var bare: String { String(live.dropFirst("projections.".count)) }
        var retired: String { live + Rebuilder.oldSuffix }
    }

    struct SwapResult {
        var swapHead: Int64
        /// What the locked catch-up folded (streams or cases, as the projection counts).
        var caughtUp: Int
        var caughtUpAt: ContinuousClock.Instant
        var swapStart: ContinuousClock.Instant
    }

    /// Runs `body` holding the session advisory lock that makes rebuilds exclusive.
    /// Closing the connection releases the session lock even when unlocking fails.
    func withRebuildLock<T>(on writer: Connection, _ body: () throws -> T) throws -> T {
        guard try writer.query("SELECT pg_try_advisory_lock($1) AS locked", [.int64(Self.advisoryLockKey)], name: "rebuild lock")
            .first?.decode(Bool.self, "locked") == true else { throw ProjectionError.rebuildInProgress }
        defer { _ = try? writer.query("SELECT pg_advisory_unlock($1)", [.int64(Self.advisoryLockKey)], name: "rebuild unlock") }
        return try body()
    }

    /// Catches `tables` up from the bulk load's `head` and swaps them in for `names`.
    /// `catchUp(after, upTo, connection)` folds the facts in `(after, upTo]` into the `_next`
    /// tables (as projector) and returns how much it refolded.
    func catchUpAndSwap(
        _ names: [ProjectionName], tables: [SwapTable], from head: Int64, on writer: Connection,
        catchUp: (Int64, Int64, Connection) throws -> Int
    ) throws -> SwapResult {
        // Without blocking appends first, so the locked swap only has to fold what arrived
        // during this pass: after a long rebuild under heavy ingestion that can be a lot.
        let nearHead = try writer.transaction { writer -> Int64 in
            try writer.query("SET LOCAL ROLE ledger_projector", name: "projector role")
            let nearHead = try FactStore.derivedUpTo(on: writer)
            if nearHead > head { _ = try catchUp(head, nearHead, writer) }
            return nearHead
        }
        let caughtUpAt = ContinuousClock.now
        beforeSwap?()
        let swapStart = ContinuousClock.now
        let (swapHead, late) = try writer.transaction { writer -> (Int64, Int) in
            try writer.query("SET LOCAL ROLE ledger_projector", name: "projector role")
            let eventHead = try writer.query("SELECT projections.lock_event_head() AS head", name: "lock event head")
                .first?.decode(Int64.self, "head") ?? 0
            // Appends record their facts in their own transaction, so under the head lock the facts
            // are at the head unless the catch-up is behind: then the worker carries on from there.
            let swapHead = min(eventHead, try FactStore.derivedUpTo(on: writer))
            let late = swapHead > nearHead ? try catchUp(nearHead, swapHead, writer) : 0
            try writer.query(
                """
                UPDATE projection_checkpoints
                SET position = $1, status = 'running', last_error = NULL, failed_position = NULL, updated_at = now()
                WHERE projection = ANY($2)
                """,
                [.int64(swapHead), .array(names.map { .text($0.rawValue) }, of: .text)], name: "checkpoints to head")
            // Renames only: dropping a large table here would keep appends waiting longer.
            for table in tables {
                try writer.query("ALTER TABLE \(table.live) RENAME TO \(table.bare)\(Self.oldSuffix)", name: "retire live table")
                try writer.query("ALTER TABLE \(table.next) RENAME TO \(table.bare)", name: "swap table")
            }
            return (swapHead, late)
        }
        try Self.dropRetired(tables, on: writer)
        return SwapResult(swapHead: swapHead, caughtUp: late, caughtUpAt: caughtUpAt, swapStart: swapStart)
    }

    /// Drops the tables a swap retired (also those a crash left between swap and drop).
    static func dropRetired(_ tables: [SwapTable], on connection: Connection) throws {
        try connection.transaction { connection in
            try connection.query("SET LOCAL ROLE ledger_projector", name: "projector role")
            for table in tables {
                try connection.query("DROP TABLE IF EXISTS \(table.retired)", name: "drop retired table")
            }
        }
    }
}

extension ProjectionTable {
    var swapTable: Rebuilder.SwapTable { .init(live: qualified(), next: qualified(next: true)) }
}
