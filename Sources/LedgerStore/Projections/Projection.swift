import Foundation
import LedgerCore
internal import Postgres

/// A projection the runner keeps: it names its checkpoint rows and tables, says how it joins
/// the append transaction, and applies a range of committed facts. `ProjectionWorker` (the one
/// catch-up loop: the checkpoint row locked FOR UPDATE SKIP LOCKED, the gap check, a failing
/// event stopping the projection with the error recorded) drives every registered projection
/// through `apply`; `Store` joins each `liveHook` to the append transaction.
///
/// How to add a projection (a slice's, in LedgerStore/<Slice>/):
/// 1. Its tables in a migration (schema `projections`, owned by `ledger_projector`), and a
///    `projection_checkpoints` row for its name (position 0, status 'running').
/// 2. A case in `ProjectionName` (its checkpoint row and `--projection` name).
/// 3. A type conforming to `Projection`: `apply(range, to:on:)` refolds what the facts at those
///    positions touch (read facts, never payloads: FactPathTests), `liveHook` when it should be
///    kept in the append transaction (advance your checkpoint only when it is exactly before
///    the batch, as `RefundCaseHook` does; otherwise leave the gap to the catch-up).
/// 4. Add it to `Projections.registered` below — the one list Store, the worker and the
///    rebuild read. Rebuild: `Rebuilder.run(projections:)` calls `rebuild`: bulk-load your
///    `<table>_next` tables inside `Rebuilder.withRebuildLock`, then hand them to
///    `Rebuilder.catchUpAndSwap` (RebuildSwap.swift: the tail catch-up, checkpoints and the
///    swap under the event-head lock, once for every projection) with how to fold a range.
protocol Projection: Sendable {
    /// The checkpoint rows it owns (the subscription cuts, folded together, own three).
    var names: [ProjectionName] { get }
    /// Its part of the append transaction; nil: kept by the catch-up only.
    var liveHook: (any AppendHook)? { get }
    /// Applies the facts at `range` (gapless, after the checkpoint of `name`, up to the facts
    /// checkpoint) to `name`'s tables, as known at the range's end.
    func apply(_ range: ClosedRange<Int64>, to name: ProjectionName, on connection: Connection) throws
    /// Rebuilds `names` (a subset of `self.names`) blue/green.
    func rebuild(_ names: Set<ProjectionName>, with rebuilder: Rebuilder, progress: @escaping @Sendable (Int, Int) -> Void) throws -> RebuildReport
}

enum Projections {
    /// Every projection the ledger keeps, in the order the worker passes them.
    static func registered(projector: Projector, snapshots: FoldSnapshots = FoldSnapshots()) -> [any Projection] {
        [SubscriptionCutsProjection(projector: projector, snapshots: snapshots), RefundCasesProjection(), ReportsProjection(),
         AppleStatusChecksProjection()]
    }
}

/// Subscriptions, transactions and entitlements: three cuts of one fold of a subscription's
/// facts (`Projector`), live in the append transaction (`LiveProjectionHook`).
struct SubscriptionCutsProjection: Projection {
    let projector: Projector
    let snapshots: FoldSnapshots

    var names: [ProjectionName] { ProjectionName.subscriptionCuts }
    var liveHook: (any AppendHook)? { LiveProjectionHook(projector: projector, snapshots: snapshots) }

    func apply(_ range: ClosedRange<Int64>, to name: ProjectionName, on connection: Connection) throws {
        let keys = try FactStore.subscriptions(touchedByPositions: range, on: connection)
        try projector.refold(subscriptions: keys, projections: [name], upTo: range.upperBound, on: connection)
    }

    func rebuild(_ names: Set<ProjectionName>, with rebuilder: Rebuilder, progress: @escaping @Sendable (Int, Int) -> Void) throws -> RebuildReport {
        try rebuilder.rebuild(projections: names, progress: progress)
    }
}

/// Refund cases (`RefundCaseFold`), live in the append transaction (`RefundCaseHook`).
struct RefundCasesProjection: Projection {
    var names: [ProjectionName] { [.refundCases] }
    var liveHook: (any AppendHook)? { RefundCaseHook() }

    func apply(_ range: ClosedRange<Int64>, to name: ProjectionName, on connection: Connection) throws {
        try RefundCaseProjection.apply(range, on: connection)
    }

    func rebuild(_ names: Set<ProjectionName>, with rebuilder: Rebuilder, progress: @escaping @Sendable (Int, Int) -> Void) throws -> RebuildReport {
        try rebuilder.rebuildRefundCases(progress: progress)
    }
}
