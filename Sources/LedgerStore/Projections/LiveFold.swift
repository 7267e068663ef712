import Foundation
import LedgerCore
internal import Postgres
import Synchronization

/// The live hook's per-subscription fold snapshots: the fold of every fact of a subscription up
/// to a committed position, and the transaction rows that fold wrote. A renewal lands in a stream
/// of tens or hundreds of events; refolding the whole stream on each append (reading every fact,
/// deleting and re-copying every transaction row) made an append's cost grow with the stream.
/// With a snapshot the append reads only the facts after it and writes only the rows that changed.
///
/// Why this is exactly the full fold:
/// - `SubscriptionFold` is an accumulator whose answer does not depend on the order facts are
///   applied in, so `snapshot.apply(newer facts)` is the fold of all facts.
/// - Facts are append-only and complete in position order (a batch's facts are recorded only when
///   the facts checkpoint is right before it), and the hook runs under the head lock, so "facts of
///   K after position P" read in the append transaction is every fact of K the snapshot lacks —
///   whoever wrote them (another instance, the catch-up).
/// - Snapshots are stored only after the append transaction committed (`AfterCommit`).
/// - A running projection at checkpoint C holds the rows of the fold of the facts ≤ C (live ==
///   rebuild), so the transaction rows in the table are those of the fold of the facts before the
///   batch. Without WeChat facts a transaction's row depends only on its own snapshots,
///   revocations and reversals, so only the transactions the batch's facts name can change: their
///   rows before and after are compared, and only changed ones are rewritten. The rows that depend
///   on the evaluation time (subscription state, grants) and the small ones (customers) are
///   rewritten whole as before.
/// - Subscriptions whose fold can take in order facts without a subscription (WeChat, order
///   aliases: `SubscriptionProjection.attach`) are not snapshotted: they take the full path.
/// `Store.liveFoldStatistics`, for `/metrics` and the ingest benchmark.
public struct LiveFoldStatistics: Sendable, Equatable {
    public var hits: Int
    public var misses: Int
    public var fullRefolds: Int
    public var snapshots: Int
    public var facts: Int
    /// Subscriptions the reports' catch-up folded onto a live snapshot / read from all their facts.
    public var reportSnapshotFolds: Int = 0
    public var reportFullFolds: Int = 0
    /// Subscriptions whose new Apple statement the status checks' catch-up checked on a live
    /// snapshot / from all their facts.
    public var statusSnapshotChecks: Int = 0
    public var statusFullChecks: Int = 0
}

final class FoldSnapshots: Sendable {
    struct Entry: Sendable {
        var fold: SubscriptionFold
        /// Every fact of the subscription at or before this position is in `fold`.
        var position: Int64
        /// Facts folded: the entry's weight against `capacity`.
        var facts: Int
        /// Where the webhook derivation's walks over this fold stopped, when the events they
        /// derived were stored with this fold's rows (`WebhookWalkLog.position` == `position`).
        var walks: WebhookWalkLog?
        var lastUse: UInt64 = 0
    }

    struct Counters: Sendable, Equatable {
        /// Subscriptions refolded from a snapshot / from all their facts.
        var hits = 0
        var misses = 0
        /// Subscriptions that took the full path (order facts may join their fold).
        var unsnapshotted = 0
        var entries = 0
        var facts = 0
        /// Subscriptions the reports' catch-up folded onto a snapshot / read whole.
        var peeked = 0
        var peekMissed = 0
        /// Subscriptions whose new Apple statement was checked on a snapshot / from all their facts.
        var statusFromSnapshot = 0
        var statusRead = 0
    }

    private struct State: ~Copyable {
        var entries: [SubscriptionKey: Entry] = [:]
        var facts = 0
        var clock: UInt64 = 0
        var counters = Counters()
    }

    /// Facts held at most: past it, the least recently used are dropped down to three quarters of
    /// it. A fact held costs about 0.75 KB with its share of the fold (its transaction and renewal
    /// are stored inline whether present or not), so the default bounds the snapshots near 110 MB.
    /// With 400,000 `ledger serve` peaked at 455 MB during `ledger-dev bench ingest`, with 150,000
    /// at 280–295 MB, the same hit rate and rate: its streams of 100 prior events hold 88,000.
    /// Appends cycling through more than it holds find none: with `--priors 100 --notifications
    /// 8000` (800 streams, about 160,000 facts) the hit rate was 0 and every append read its
    /// subscription's whole history.
    let capacity: Int
    private let state = Mutex(State())

    init(capacity: Int = 150_000) { self.capacity = capacity }

    var counters: Counters {
        state.withLock { s in
            var c = s.counters
            c.entries = s.entries.count
            c.facts = s.facts
            return c
        }
    }

    /// Copies of the snapshots of `keys`, left in place. The append folds its batch onto its copy
    /// (its first change copies the fold's dictionaries and arrays, which hold references to the
    /// facts, not the facts) and `store`s the new one after its commit; a batch that fails leaves
    /// the old one, which is still the fold up to its position. Left in place, a snapshot also
    /// serves the catch-up's passes (reports, Apple status checks) while an append holds its
    /// copy: those passes lag the append by a batch or so, and a snapshot taken out for the
    /// append's duration made most of them read the subscription's whole history instead.
    func peek(_ keys: [SubscriptionKey]) -> [SubscriptionKey: Entry] {
        state.withLock { s in
            var found: [SubscriptionKey: Entry] = [:]
            for key in keys {
                guard let entry = s.entries[key] else { continue }
                found[key] = entry
            }
            return found
        }
    }

    /// The snapshots as they stand now, for one catch-up pass: taken before the pass reads how far
    /// it may go, every one is at or before that bound (a snapshot is stored after its batch
    /// committed). Peeking the live table key by key instead, a pass over a long range found many
    /// of its subscriptions' snapshots already moved past the range by appends made while it ran,
    /// and read those subscriptions' whole histories. Costs a reference to the table: the next
    /// `store` copies it once while the pass holds it.
    func pin() -> Pinned {
        Pinned(entries: state.withLock { $0.entries }, owner: self)
    }

    struct Pinned: Sendable {
        fileprivate let entries: [SubscriptionKey: Entry]
        /// Where the passes count what they folded from snapshots.
        let owner: FoldSnapshots

        func peek(_ keys: [SubscriptionKey]) -> [SubscriptionKey: Entry] {
            var found: [SubscriptionKey: Entry] = [:]
            for key in keys { if let entry = entries[key] { found[key] = entry } }
            return found
        }
    }

    func countReportFolds(snapshot: Int, full: Int) {
        state.withLock {
            $0.counters.peeked += snapshot
            $0.counters.peekMissed += full
        }
    }

    func countStatusChecks(snapshot: Int, full: Int) {
        state.withLock {
            $0.counters.statusFromSnapshot += snapshot
            $0.counters.statusRead += full
        }
    }

    /// Tests: the positions of the snapshots held.
    var positions: [SubscriptionKey: Int64] { state.withLock { $0.entries.mapValues(\.position) } }

    func count(hits: Int, misses: Int, unsnapshotted: Int) {
        state.withLock {
            $0.counters.hits += hits
            $0.counters.misses += misses
            $0.counters.unsnapshotted += unsnapshotted
        }
    }

    /// After the commit that wrote these folds' rows.
    func store(_ entries: [SubscriptionKey: Entry], forget: Set<SubscriptionKey>) {
        state.withLock { s in
            s.clock += 1
            for key in forget { if let old = s.entries.removeValue(forKey: key) { s.facts -= old.facts } }
            for (key, var entry) in entries {
                entry.lastUse = s.clock
                if let old = s.entries.updateValue(entry, forKey: key) { s.facts -= old.facts }
                s.facts += entry.facts
            }
            guard s.facts > capacity else { return }
            let byAge = s.entries.sorted { $0.value.lastUse < $1.value.lastUse }
            for (key, entry) in byAge where s.facts > capacity / 4 * 3 {
                s.entries.removeValue(forKey: key)
                s.facts -= entry.facts
            }
        }
    }

    /// Tests: drop everything (the next appends refold from all facts).
    func removeAll() {
        state.withLock { s in
            s.entries.removeAll()
            s.facts = 0
        }
    }
}

extension Projector {
    /// The live hook's refold of the subscriptions of the batch's fold (`BatchFold`, the facts of
    /// this batch recorded in this transaction): from each subscription's change, writing only the
    /// transaction rows that changed; the full `refold` for subscriptions order facts may join.
    func refoldLive(_ batch: BatchFold, projections: Set<ProjectionName>, on connection: Connection) throws {
        if projections.isEmpty { return }
        var changedTransactions: [SubscriptionKey: [TransactionRecord]] = [:]
        var gone: [(SubscriptionKey, String)] = []
        let incremental = batch.changes.keys.sorted()
        if projections.contains(.transactions) {
            for key in incremental {
                let change = batch.changes[key]!
                var changed: [TransactionRecord] = []
                for id in change.touched.sorted() {
                    let was = change.before[id], now = change.after.transaction(id)
                    guard was != now else { continue }
                    if was != nil { gone.append((key, id)) }
                    if let now { changed.append(now) }
                }
                changedTransactions[key] = changed
            }
        }
        if !incremental.isEmpty {
            let ids = PostgresValue.array(incremental.map { .text($0.text) }, of: .text)
            for table in SubscriptionCutsProjection.tables(projections) where table != .transactions {
                try connection.query("DELETE FROM \(table.qualified()) WHERE subscription = ANY($1)", [ids],
                                     name: "clear \(table.rawValue) rows")
            }
            if !gone.isEmpty {
                try connection.query(
                    """
                    DELETE FROM projections.transactions t USING unnest($1::text[], $2::text[]) AS g(sub, id)
                    WHERE t.subscription = g.sub AND t.transaction_id = g.id
                    """,
                    [.array(gone.map { .text($0.0.text) }, of: .text), .array(gone.map { .text($0.1) }, of: .text)],
                    name: "clear changed transaction rows")
            }
            let now = clock()
            var buffers = CopyBuffers()
            for key in incremental {
                let fold = batch.changes[key]!.after
                guard !fold.isEmpty else { continue }
                buffers.add(SubscriptionRows(fold: fold, catalog: catalog, now: now, transactions: changedTransactions[key] ?? []),
                            for: projections)
            }
            try buffers.flush(on: connection, next: false)
        }
        if !batch.full.isEmpty { try refold(subscriptions: batch.full, projections: projections, on: connection) }
    }
}
