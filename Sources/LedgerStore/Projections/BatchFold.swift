import Foundation
import LedgerCore
internal import Postgres
import Synchronization

/// One append batch as the append hooks see it: its new events, their facts (recorded in this
/// transaction when `facts` is not empty), and the batch's one fold of the subscriptions it
/// touches, computed by the first live projection that asks and shared by every other.
///
/// Every live projection used to read and refold each touched subscription from all of its facts
/// on its own, so a notification cost (live projections) × (length of the history). Now the
/// subscription cuts write their rows and the webhook events derive from the same
/// `BatchFold` — one read of the facts after each subscription's snapshot, one fold.
final class AppendedBatch {
    let events: [RecordedEvent]
    let facts: [Fact]
    /// Run after the append transaction committed, once, whichever hooks asked for the fold.
    private(set) var afterCommit: [AfterCommit] = []
    private var folded: BatchFold?

    init(events: [RecordedEvent], facts: [Fact]) {
        self.events = events
        self.facts = facts
    }

    var first: Int64? { events.first?.position }
    var last: Int64? { events.last?.position }

    /// The batch's fold (`SharedFold.fold`), computed on the first call. Only reads: a hook whose
    /// savepoint fails after asking leaves the fold as valid for the next hook.
    func fold(with folder: SharedFold, on connection: Connection) throws -> BatchFold {
        if let folded { return folded }
        guard let first, let last else { return BatchFold(first: 0, last: 0) }
        let (fold, remember) = try folder.fold(facts, first: first, last: last, on: connection)
        folded = fold
        afterCommit.append(remember)
        return fold
    }
}

/// A subscription's change in one batch: its fold after the batch, and what the live projections
/// need of before: the transactions the batch names as they were, and the change points (the
/// batch's positions that bring facts of it).
struct SubscriptionChange {
    /// The fold of every fact of the subscription up to the batch's last position.
    var after: SubscriptionFold
    /// The transactions the batch's facts name (snapshots, revocations, reversals) — in a fold
    /// without WeChat facts only their rows can change (`SubscriptionFold.record`) — as they were
    /// before the batch (absent: not known then).
    var touched: Set<String>
    var before: [String: TransactionRecord]
    /// Each position of the batch with facts of this subscription, in order: when it was recorded
    /// and the fold up to it (nil for the last: `after`).
    var points: [ChangePoint]
    /// Where the webhook derivation stopped on the fold before the batch, its walks that facts
    /// folded since (another writer's) can change already forgotten; nil: walk from the beginning.
    var walks: WebhookWalkLog?
}

struct ChangePoint {
    var position: Int64
    var recordedAt: EpochMillis
    var fold: SubscriptionFold?
    /// The earliest business time the position's facts act from (`SubscriptionFold.earliestEffect`;
    /// nil: none acts).
    var effect: EpochMillis?
}

/// Where the webhook derivation's walks of this batch stopped, per subscription: handed back by
/// the webhook projection once its events are written, remembered with the batch's snapshots.
final class WalkLogs: Sendable {
    private let logs = Mutex<[SubscriptionKey: WebhookWalkLog]>([:])
    func set(_ new: [SubscriptionKey: WebhookWalkLog]) { logs.withLock { $0 = new } }
    var all: [SubscriptionKey: WebhookWalkLog] { logs.withLock { $0 } }
}

/// The fold of an append batch: every subscription it touches, either folded from its snapshot
/// (`changes`) or left to the full path because order facts without a subscription may join its
/// fold (WeChat, order aliases: `SubscriptionProjection.attach`), which reads all its facts.
struct BatchFold {
    let first: Int64
    let last: Int64
    var changes: [SubscriptionKey: SubscriptionChange] = [:]
    var full: Set<SubscriptionKey> = []
    /// Set by the webhook projection after it stored the batch's events (nothing when it did not).
    let walks = WalkLogs()

    var keys: Set<SubscriptionKey> { full.union(changes.keys) }
}

/// The shared fold step of the append: the per-subscription snapshots (`FoldSnapshots`) and the
/// catalog every fold places WeChat periods with. One per store, handed to every live hook.
struct SharedFold: Sendable {
    static func earlier(_ a: EpochMillis?, _ b: EpochMillis?) -> EpochMillis? {
        guard let a else { return b }
        guard let b else { return a }
        return min(a, b)
    }

    let snapshots: FoldSnapshots
    let catalogPeriods: [String: EpochMillis]

    init(snapshots: FoldSnapshots = FoldSnapshots(), catalogPeriods: [String: EpochMillis]) {
        self.snapshots = snapshots
        self.catalogPeriods = catalogPeriods
    }

    /// Folds the batch `first…last` (its `facts` recorded in this transaction) onto each touched
    /// subscription's snapshot, reading only the facts after it (all of them without one). Returns
    /// the fold and what to remember once the transaction commits.
    func fold(_ facts: [Fact], first: Int64, last: Int64, on connection: Connection) throws -> (BatchFold, AfterCommit) {
        var out = BatchFold(first: first, last: last)
        let keys = try FactStore.subscriptions(touchedBy: facts, on: connection)
        if keys.isEmpty { return (out, {}) }
        let sorted = keys.sorted()
        var cached = snapshots.peek(sorted)
        // Every fact after each subscription's snapshot: usually just this batch's, which are
        // already in the table (recorded earlier in this transaction). One index probe per
        // subscription (FactStore's note on keyed batch reads).
        let newer = try FactStore.facts(after: Dictionary(uniqueKeysWithValues: sorted.map { ($0, (after: cached[$0]?.position ?? 0, through: nil)) }),
                                        name: "facts after snapshots", on: connection)

        var remember: [SubscriptionKey: FoldSnapshots.Entry] = [:]
        var hits = 0
        for key in sorted {
            let facts = newer[key] ?? []
            if facts.contains(where: { $0.origin == .wechat || $0.kind == .orderAlias }) {
                out.full.insert(key)
                continue
            }
            let snapshotFacts = cached[key]?.facts
            if snapshotFacts != nil { hits += 1 }
            // Moved out of `cached`: the fold below is then shared only with the snapshot left in
            // place, and its first change copies it once.
            var entry = cached.removeValue(forKey: key)
            var walks = entry.flatMap { e in e.walks?.position == e.position ? e.walks : nil }
            var fold = entry?.fold ?? SubscriptionFold(key: key)
            entry = nil
            fold.catalogPeriods = catalogPeriods
            // Facts before the batch (another writer's, or the catch-up's) join the snapshot first.
            let before = facts.prefix { $0.position < first }
            for fact in before {
                if let effect = fold.earliestEffect(of: fact) { walks?.forget(from: effect) }
                fold.apply(fact)
            }
            let batch = facts.dropFirst(before.count)
            var touched = Set<String>()
            for fact in batch {
                switch fact.kind {
                case .transaction:
                    if let id = fact.transaction?.transactionId { touched.insert(id) }
                case .revocation, .reversal:
                    if let id = fact.transactionId { touched.insert(id) }
                    if let id = fact.orderAlias { touched.insert(id) }
                default:
                    break
                }
            }
            var previous: [String: TransactionRecord] = [:]
            for id in touched { previous[id] = fold.transaction(id) }
            var points: [ChangePoint] = []
            for fact in batch {
                if let open = points.last, open.position != fact.position {
                    // A later position of the same subscription in this batch: keep the fold up to
                    // the one before (a copy, only in this rare case).
                    points[points.count - 1].fold = fold
                }
                let effect = fold.earliestEffect(of: fact)
                fold.apply(fact)
                if points.last?.position == fact.position {
                    points[points.count - 1].recordedAt = max(points[points.count - 1].recordedAt, fact.recordedAt)
                    points[points.count - 1].effect = Self.earlier(points[points.count - 1].effect, effect)
                } else {
                    points.append(ChangePoint(position: fact.position, recordedAt: fact.recordedAt, fold: nil, effect: effect))
                }
            }
            out.changes[key] = SubscriptionChange(after: fold, touched: touched, before: previous, points: points,
                                                  walks: walks)
            remember[key] = FoldSnapshots.Entry(fold: fold, position: last, facts: (snapshotFacts ?? 0) + facts.count)
        }
        snapshots.count(hits: hits, misses: remember.count - hits, unsnapshotted: out.full.count)
        return (out, { [snapshots, remember, full = out.full, logs = out.walks] in
            var entries = remember
            for (key, log) in logs.all where log.position == last { entries[key]?.walks = log }
            snapshots.store(entries, forget: full)
        })
    }
}
