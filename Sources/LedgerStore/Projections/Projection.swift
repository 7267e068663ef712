import Foundation
import LedgerCore
internal import Postgres

/// A projection the runner keeps: it names its checkpoint rows, declares its tables, says how it
/// joins the append transaction, applies a range of committed facts and bulk-loads its tables for
/// a rebuild. One runner drives every registered projection:
/// - live: `LiveProjectionHook` joins each live projection to the append transaction: it advances
///   the projection's checkpoints that sit right before the batch (`CatchUp.advanceLive`, the one
///   place that does) and applies the batch to those;
/// - catch-up: `ProjectionWorker` (the checkpoint row locked FOR UPDATE SKIP LOCKED, the gap
///   check, a failing event stopping the projection with the error recorded) calls `apply`;
/// - rebuild: `Rebuilder.rebuild` (Rebuilder.swift) takes the rebuild lock, opens one snapshot,
///   runs one COPY … FREEZE writer per declared table into `<table>_next` while `load` feeds them,
///   adds the keys and indexes the tables declare, then `catchUpAndSwap` (RebuildSwap.swift)
///   folds what arrived since through `apply(…, next: true)` and swaps the tables in.
///
/// How to add a projection (a slice's, in LedgerStore/<Slice>/):
/// 1. Its tables in a migration (schema `projections`, owned by `ledger_projector`), and a
///    `projection_checkpoints` row for its name (position 0, status 'running').
/// 2. A case in `ProjectionName` (its checkpoint row and `--projection` name).
/// 3. A type conforming to `Projection`: its `ProjectionTable`s (columns in COPY order, the
///    migration's keys and indexes), `apply(range, to:next:on:)` refolds what the facts at those
///    positions touch (read facts, never payloads: FactPathTests), `load` writes every row as of
///    `load.head` through `load.send`; `isLive` when it should be current at the append's 200
///    (`applyLive` defaults to `apply` over the batch; override it to use the batch's facts in
///    memory). Never touch a checkpoint row: the runner does.
/// 4. Add it to `Projections.registered` below — the one list Store, the worker and the rebuild
///    read. Test: live == catch-up after a gap == rebuild (ProjectionProtocolTests).
protocol Projection: Sendable {
    /// The checkpoint rows it owns (the subscription cuts, folded together, own three).
    var names: [ProjectionName] { get }
    /// The tables (schema `projections`) that hold `name`: a rebuild fills `<table>_next` and
    /// renames it into place.
    func tables(of name: ProjectionName) -> [ProjectionTable]
    /// Its name in hook failures and logs.
    var name: String { get }
    /// Kept in the append transaction (true), or by the catch-up only.
    var isLive: Bool { get }
    /// In the append transaction, after the batch's facts were recorded: applies the batch to
    /// `names` (those of its checkpoints the runner advanced over it). A projection that needs
    /// subscriptions' folds takes the batch's one fold (`batch.fold(with: folder, on:)`), never
    /// refolds a history of its own. May return an action to run once the transaction committed.
    func applyLive(_ batch: AppendedBatch, folder: SharedFold, to names: Set<ProjectionName>, on connection: Connection) throws -> AfterCommit?
    /// Applies the facts at `range` (gapless, after the checkpoints of `names`, up to the facts
    /// checkpoint) to the tables of `names` (their `_next` tables when `next`), as known at the
    /// range's end. Returns how much it refolded (subscriptions, cases…), for rebuild reports.
    @discardableResult
    func apply(_ range: ClosedRange<Int64>, to names: Set<ProjectionName>, next: Bool, on connection: Connection) throws -> Int
    /// The rebuild's bulk pass: every row of the tables of `names` as of `load.head`, read in
    /// `load`'s snapshot and handed to the tables' writers with `load.send` (COPY text, `CopyText`).
    func load(_ names: Set<ProjectionName>, into load: BulkLoad) throws -> BulkLoad.Counts
    /// What one catch-up pass applies with, taken right before the pass reads how far it may go:
    /// the projection itself, or (one that folds onto the append's snapshots) a copy holding the
    /// snapshots as they stand then (`FoldSnapshots.pin`).
    func forPass() -> any Projection
}

extension Projection {
    var name: String { names.map(\.rawValue).joined(separator: "+") }

    func forPass() -> any Projection { self }

    /// The catch-up's `apply` over the batch: its facts are already in `public.facts` in this
    /// transaction.
    func applyLive(_ batch: AppendedBatch, folder: SharedFold, to names: Set<ProjectionName>, on connection: Connection) throws -> AfterCommit? {
        guard let first = batch.first, let last = batch.last else { return nil }
        try apply(first...last, to: names, next: false, on: connection)
        return nil
    }
}

/// A catch-up projection that folds onto the append's snapshots instead of reading histories
/// (the reports, the Apple status checks): each pass pins them as they stand when it begins.
protocol FoldsOntoSnapshots: Projection {
    /// The append's fold snapshots of this process (nil: every pass reads the facts).
    var snapshots: FoldSnapshots? { get }
    /// The snapshots as they stood when this pass began (`forPass`).
    var pinned: FoldSnapshots.Pinned? { get set }
}

extension FoldsOntoSnapshots {
    func forPass() -> any Projection {
        var pass = self
        pass.pinned = snapshots?.pin()
        return pass
    }

    /// What this pass folds onto: the snapshots pinned when it began, else (applied outside a
    /// lane's pass) as they stand now.
    var passSnapshots: FoldSnapshots.Pinned? { pinned ?? snapshots?.pin() }
}

/// The one live hook: joins a live projection to the append transaction (DESIGN §Projections),
/// so a 200 means the event's effect on its tables is committed with it. It runs only when the
/// batch's facts were recorded in the same transaction; it advances the projection's checkpoints
/// that are exactly at the batch's first position − 1 and running, and applies the batch to
/// those only: the others are behind or stopped, and the catch-up applies these events in order.
struct LiveProjectionHook: AppendHook {
    let projection: any Projection
    /// The store's one fold step, shared by all its live hooks.
    let folder: SharedFold
    var name: String { projection.name }

    init(_ projection: any Projection, folder: SharedFold) {
        self.projection = projection
        self.folder = folder
    }

    /// The subscription cuts' hook (tests build it alone).
    init(projector: Projector, snapshots: FoldSnapshots = FoldSnapshots()) {
        self.init(SubscriptionCutsProjection(projector: projector),
                  folder: SharedFold(snapshots: snapshots, catalogPeriods: projector.catalogPeriods))
    }

    func didAppend(_ batch: AppendedBatch, in connection: Connection) throws -> AfterCommit? {
        guard let first = batch.first, let last = batch.last else { return nil }
        let advanced = try CatchUp.advanceLive(projection.names.map(\.rawValue), over: first...last, on: connection)
        let names = Set(projection.names.filter { advanced.contains($0.rawValue) })
        if names.isEmpty { return nil }
        return try projection.applyLive(batch, folder: folder, to: names, on: connection)
    }
}

enum Projections {
    /// JSON of a projection row's `body` (refund cases, WeChat contracts): sorted keys, so one
    /// state is always stored as the same bytes, whichever path (live, catch-up, rebuild) wrote it.
    static let bodyEncoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return e
    }()

    /// Every projection the ledger keeps, in the order the worker passes them.
    /// `snapshots`: the append's fold snapshots, which the reports' and the Apple status checks'
    /// passes of this process fold onto.
    static func registered(projector: Projector, snapshots: FoldSnapshots? = nil) -> [any Projection] {
        [SubscriptionCutsProjection(projector: projector), RefundCasesProjection(),
         WeChatContractsProjection(catalogPeriods: projector.catalogPeriods),
         ReportsProjection(catalogPeriods: projector.catalogPeriods, snapshots: snapshots),
         AppleStatusChecksProjection(snapshots: snapshots), WebhookEventsProjection(projector: projector)]
    }
}

/// A table of schema `projections` that a projection declares. Live tables carry the bare name;
/// a rebuild fills `<name>_next` and renames it into place.
struct ProjectionTable: Sendable, Hashable {
    /// The name in schema `projections`.
    let name: String
    /// The columns of the COPY rows its projection writes, in order.
    let columns: String
    /// The columns the readers' queries filter, join or order on: a rebuild analyzes only these
    /// before the swap, so plans are right from the first query, and leaves the rest to
    /// autovacuum (an ANALYZE of some columns does not reset the table's change counter).
    let statisticsColumns: String
    /// The keys and indexes of its migration, `{table}` standing for the table: a rebuild adds
    /// them after the rows are loaded (one sort per index instead of a B-tree insert per row).
    /// Unnamed, so PostgreSQL picks names that never clash with the live table's. A test checks
    /// that a rebuilt table has the migration's (ProjectionRebuildTests).
    let indexes: [String]

    static let nextSuffix = "_next"

    var rawValue: String { name }

    func qualified(next: Bool = false) -> String {
        "projections." + name + (next ? Self.nextSuffix : "")
    }

    func indexStatements(next: Bool) -> [String] {
        indexes.map { $0.replacingOccurrences(of: "{table}", with: qualified(next: next)) }
    }
}

/// Subscriptions, transactions and entitlements: three cuts of one fold of a subscription's
/// facts (`Projector`), live in the append transaction, written there from the batch's fold
/// (BatchFold.swift, LiveFold.swift).
struct SubscriptionCutsProjection: Projection {
    let projector: Projector

    init(projector: Projector) {
        self.projector = projector
    }

    var names: [ProjectionName] { ProjectionName.subscriptionCuts }
    var name: String { "projections" }
    var isLive: Bool { true }

    func applyLive(_ batch: AppendedBatch, folder: SharedFold, to names: Set<ProjectionName>, on connection: Connection) throws -> AfterCommit? {
        try projector.refoldLive(try batch.fold(with: folder, on: connection), projections: names, on: connection)
        return nil
    }

    func tables(of name: ProjectionName) -> [ProjectionTable] { Self.tables(of: name) }

    static func tables(of name: ProjectionName) -> [ProjectionTable] {
        switch name {
        case .subscriptions: [.subscriptions, .customerSubscriptions]
        case .transactions: [.transactions]
        case .entitlements: [.entitlements]
        default: []
        }
    }

    /// The tables of `names`, in name order.
    static func tables(_ names: Set<ProjectionName>) -> [ProjectionTable] { names.sorted().flatMap(tables(of:)) }

    func apply(_ range: ClosedRange<Int64>, to names: Set<ProjectionName>, next: Bool, on connection: Connection) throws -> Int {
        let keys = try FactStore.subscriptions(touchedByPositions: range, on: connection)
        try projector.refold(subscriptions: keys, projections: names, upTo: range.upperBound, next: next, on: connection)
        return keys.count
    }

    func load(_ names: Set<ProjectionName>, into load: BulkLoad) throws -> BulkLoad.Counts {
        try load.rebuilder.loadSubscriptionCuts(names, into: load)
    }
}

/// Refund cases (`RefundCaseFold`), live in the append transaction: the cases the batch's facts
/// may change (`RefundCaseProjection.seeds`) are refolded.
struct RefundCasesProjection: Projection {
    var names: [ProjectionName] { [.refundCases] }
    var isLive: Bool { true }

    func applyLive(_ batch: AppendedBatch, folder: SharedFold, to names: Set<ProjectionName>, on connection: Connection) throws -> AfterCommit? {
        guard let last = batch.last else { return nil }
        let seeds = try RefundCaseProjection.seeds(from: batch.facts, on: connection)
        if !seeds.isEmpty { try RefundCaseProjection.refold(seeds, upTo: last, on: connection) }
        return nil
    }

    func tables(of name: ProjectionName) -> [ProjectionTable] {
        name == .refundCases ? [.refundCases, .refundCaseOrders] : []
    }

    func apply(_ range: ClosedRange<Int64>, to names: Set<ProjectionName>, next: Bool, on connection: Connection) throws -> Int {
        try RefundCaseProjection.apply(range, next: next, on: connection)
    }

    func load(_ names: Set<ProjectionName>, into load: BulkLoad) throws -> BulkLoad.Counts {
        try RefundCaseProjection.load(into: load)
    }
}

extension ProjectionName {
    /// Whether its projection is kept in the append transaction (`Projection.isLive`): its
    /// checkpoint is at the head whenever an append was answered, so a check of the live tables
    /// against a rebuild may run no catch-up first for it (ProjectionConsistency in LedgerTesting).
    /// The others trail the head, kept by the catch-up worker only.
    public var isLive: Bool {
        owner?.isLive ?? false
    }

    /// The tables of schema `projections` it declares (its `Projection.tables(of:)`).
    public var tableNames: [String] { owner?.tables(of: self).map(\.name) ?? [] }

    private var owner: (any Projection)? {
        Projections.registered(projector: Projector(catalog: .productIds)).first { $0.names.contains(self) }
    }
}
