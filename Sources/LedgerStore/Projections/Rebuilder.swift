import Foundation
import LedgerCore
internal import Postgres
import Synchronization

/// One entitlement a dry run says a customer would gain or lose.
public struct EntitlementChange: Sendable, Hashable, Codable, Comparable {
    public var customerId: String
    public var entitlement: String
    public var productId: String
    public var originalTransactionId: String
    public var environment: String

    public init(customerId: String, entitlement: String, productId: String, originalTransactionId: String,
                environment: String = SubscriptionKey.production) {
        self.customerId = customerId
        self.entitlement = entitlement
        self.productId = productId
        self.originalTransactionId = originalTransactionId
        self.environment = environment
    }

    init(_ grant: EntitlementGrant) {
        self.init(customerId: grant.customerId, entitlement: grant.entitlement, productId: grant.productId,
                  originalTransactionId: grant.originalTransactionId, environment: grant.environment)
    }

    public static func < (a: EntitlementChange, b: EntitlementChange) -> Bool {
        (a.customerId, a.environment, a.entitlement, a.originalTransactionId, a.productId)
            < (b.customerId, b.environment, b.entitlement, b.originalTransactionId, b.productId)
    }
}

/// What a rebuild (or dry run) did: what the service records as the admin action's event and
/// what `ledger rebuild` prints.
public struct RebuildReport: Sendable, Equatable, Codable, CustomStringConvertible {
    public var projections: [ProjectionName]
    public var dryRun: Bool
    /// The head of the snapshot the bulk pass read.
    public var snapshotHead: Int64
    /// The head at the swap (appends are blocked from here to the commit).
    public var swapHead: Int64
    /// Events the bulk pass covered (the snapshot's head: every event up to it was folded).
    public var events: Int
    /// Fact rows the bulk pass read (an event has zero or more facts).
    public var facts: Int = 0
    /// Subscription streams folded by the bulk pass.
    public var streams: Int
    /// Streams refolded under the swap's lock because events reached them after the last
    /// catch-up (streams touched after the snapshot are refolded once before, without the lock).
    public var caughtUpStreams: Int
    public var seconds: Double
    /// Where the time went: the bulk read+fold+COPY (until the last partition has read and
    /// folded its range), then the table writers' rest (their last rows, keys, indexes and
    /// statistics) and the catch-up before the lock, then the swap (appends wait during the swap
    /// only) and dropping the retired tables.
    public var bulkSeconds: Double = 0
    public var indexSeconds: Double = 0
    public var swapSeconds: Double = 0
    public var eventsPerSecond: Double
    /// Peak resident set size of this process (VmHWM), when the platform reports it.
    public var peakRSSBytes: Int?
    /// Dry run only: entitlements the current catalog would grant that the stored table lacks,
    /// and stored ones it would no longer grant, both evaluated at `evaluatedAt`.
    public var gains: [EntitlementChange]
    public var losses: [EntitlementChange]
    public var evaluatedAt: EpochMillis

    public var description: String {
        var text = String(
            format: "%@%@: %d events, %d streams in %.2f s (%.0f events/s), peak RSS %@",
            dryRun ? "dry run of " : "rebuilt ", projections.map(\.rawValue).joined(separator: ", "), events, streams,
            seconds, eventsPerSecond, peakRSSBytes.map { String(format: "%.1f MB", Double($0) / 1_048_576) } ?? "n/a")
        if !dryRun {
            text += "; snapshot at \(snapshotHead), swapped at \(swapHead) (\(caughtUpStreams) streams caught up)"
            text += String(format: "; bulk %.2f s, indexes %.2f s, swap %.3f s", bulkSeconds, indexSeconds, swapSeconds)
        }
        return text
    }
}

extension RebuildReport {
    /// Two rebuilds of one request as one report (the subscription cuts, then refund cases).
    static func combined(_ a: RebuildReport?, _ b: RebuildReport) -> RebuildReport {
        guard var a else { return b }
        a.projections = (a.projections + b.projections).sorted()
        a.streams += b.streams
        a.seconds += b.seconds
        a.swapHead = max(a.swapHead, b.swapHead)
        a.facts += b.facts
        a.bulkSeconds += b.bulkSeconds
        a.swapSeconds += b.swapSeconds
        a.eventsPerSecond = Double(a.events) / max(a.seconds, 1e-9)
        a.peakRSSBytes = [a.peakRSSBytes, b.peakRSSBytes].compactMap { $0 }.max()
        return a
    }
}

/// Rebuilds projections from position 0 while ingestion continues (DESIGN §Projections,
/// reference/eventstores.md §9.6). One path for every projection (`rebuild(_:_:progress:)`):
///
/// 0. Take the rebuild lock; derive any facts still missing (the runner's facts lane), so the
///    facts reach the head.
/// 1. In a REPEATABLE READ snapshot (exported, so more readers can import it), note H = the facts
///    checkpoint. One writer per declared table (`TableWriter`) creates `projections.<table>_next`
///    and streams every row into it with one `COPY … FREEZE`, then adds the table's keys and
///    indexes and analyzes it, all tables at once, while the projection's `load` reads the facts
///    up to H (never an event's payload or `raw`), folds them and hands COPY text to the writers.
///    The subscription cuts stream every fact with `COPY (SELECT …) TO STDOUT`, split into
///    `partitions` ranges of subscriptions, each with its reader and fold on a thread of its own.
/// 2. `catchUpAndSwap` (RebuildSwap.swift): refold what facts after H touched through the
///    projection's `apply(…, next: true)`, first without blocking appends, then under the
///    event-head lock, and in that transaction rename the fresh tables into place and set the
///    checkpoints. Readers see the old tables or the new ones, never a mix, and nothing appended
///    is missed: positions are gapless and commit-ordered.
///
/// Works as the service role: the tables belong to `ledger_projector`, of which it is a member
/// (Migrations/0002_projections.sql).
public struct Rebuilder: Sendable {
    let connections: Connections
    public let projector: Projector
    /// Buffered COPY bytes of one table before a partition hands them to the table's writer.
    /// Memory in flight is about 4 tables × (partitions + a queue of 4 + the writer's chunk and
    /// libpq's copy of it) chunks: 256 KB keeps that under 10 MB (4 MB chunks held 60 MB at
    /// 1M events: peak RSS 40 MB instead of 100).
    public var flushBytes = 256 << 10
    /// Bulk-pass partitions, each a reader and a fold of its own over a range of streams, all in
    /// one exported snapshot, feeding one writer per table: PostgreSQL's extraction runs on one
    /// core per reader.
    public var partitions = max(1, min(4, ProcessInfo.processInfo.activeProcessorCount))
    /// Called between the bulk pass and the swap (tests append here to exercise the catch-up).
    var beforeSwap: (@Sendable () -> Void)?
    /// Outbox items of the facts it derives on the way (step 0).
    var outbox = OutboxDerivation(consumers: OutboxConsumer.registered)

    init(connections: Connections, projector: Projector) {
        self.connections = connections
        self.projector = projector
    }

    static let oldSuffix = "_retired"

    /// Derives every missing fact first: projections are folded from facts only.
    func deriveMissingFacts(on connection: Connection) throws {
        try CatchUp.untilIdle(.facts(outbox: outbox), batchSize: 5_000, on: connection)
    }

    static let advisoryLockKey: Int64 = 0x6C65_6467_7262_6C64  // "ledgrbld"

    /// Rebuilds `projections` (the subscription cuts by default), each registered projection the
    /// names it owns, one after another. `progress(done, total)` counts fact rows.
    public func run(
        projections: Set<ProjectionName> = Set(ProjectionName.subscriptionCuts),
        progress: @escaping @Sendable (Int, Int) -> Void = { _, _ in }
    ) async throws(ProjectionError) -> RebuildReport {
        var report: RebuildReport?
        for projection in Projections.registered(projector: projector) {
            let mine = projections.intersection(projection.names)
            guard !mine.isEmpty else { continue }
            let part = try await Self.offThread { try self.rebuild(projection, mine, progress: progress) }
            report = RebuildReport.combined(report, part)
        }
        guard let report else { throw ProjectionError.refused("nothing to rebuild: name at least one projection") }
        return report
    }

    /// Folds everything under the current catalog and compares the entitlements with the stored
    /// ones at the same instant; changes nothing.
    public func dryRun(progress: @escaping @Sendable (Int, Int) -> Void = { _, _ in }) async throws(ProjectionError) -> RebuildReport {
        try await Self.offThread { try self.diff(progress: progress) }
    }

    static func offThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws(ProjectionError) -> T {
        do { return try await BlockingWork.run(body) } catch { throw ProjectionError(error) }
    }

    // MARK: rebuild

    /// Rebuilds `names` of `projection` blue/green (see the type's comment): the one rebuild path.
    func rebuild(_ projection: any Projection, _ names: Set<ProjectionName>, progress: @escaping @Sendable (Int, Int) -> Void) throws -> RebuildReport {
        let started = ContinuousClock.now
        let sorted = names.sorted()
        let tables = sorted.flatMap { projection.tables(of: $0) }
        let writer = try connections.unbounded()
        return try withRebuildLock(on: writer) {
            try deriveMissingFacts(on: writer)
            try Self.dropRetired(tables.map(\.swapTable), on: writer)

            // One snapshot for the whole bulk pass: exported here, imported by further readers.
            let exporter = try connections.unbounded()
            let (head, snapshot) = try Self.openSnapshot(on: exporter)
            let load = BulkLoad(head: head, snapshot: snapshot, reader: exporter, rebuilder: self,
                                writers: tables.map { TableWriter(table: $0, connections: connections) }, progress: progress)
            let bulkEnd = Mutex(ContinuousClock.now)
            // The load and one writer per table run at once: the writers create their tables and
            // take rows as the load folds them.
            let results = Self.inParallel(1 + load.writers.count) { index -> Result<BulkLoad.Counts, any Error> in
                if index > 0 { return Result { try load.writers[index - 1].run(); return BulkLoad.Counts() } }
                let result = Result { try projection.load(names, into: load) }
                if case .failure(let error) = result { load.fail(error) }
                bulkEnd.withLock { $0 = ContinuousClock.now }
                for writer in load.writers { writer.queue.close() }
                return result
            }
            _ = try? exporter.query("COMMIT", name: "end snapshot")
            // The error that started a failure, not the aborts it caused elsewhere.
            if let first = results.lazy.compactMap({ result -> (any Error)? in
                if case .failure(let error) = result, !(error is ChunkQueue.Aborted) { return error }
                return nil
            }).first {
                throw first
            }
            let counts = try results[0].get()
            for result in results.dropFirst() { _ = try result.get() }
            progress(counts.facts, counts.facts)
            let bulkDone = bulkEnd.withLock { $0 }

            let swap = try catchUpAndSwap(sorted, tables: tables.map(\.swapTable), from: head, on: writer) { after, upTo, writer in
                try projection.apply((after + 1)...upTo, to: names, next: true, on: writer)
            }
            let seconds = max(started.duration(to: .now).seconds, 1e-9)
            var report = RebuildReport(
                projections: sorted, dryRun: false, snapshotHead: head, swapHead: swap.swapHead, events: Int(head),
                streams: counts.units, caughtUpStreams: swap.caughtUp, seconds: seconds, eventsPerSecond: Double(head) / seconds,
                peakRSSBytes: Self.peakRSS(), gains: [], losses: [], evaluatedAt: projector.clock())
            report.facts = counts.facts
            report.bulkSeconds = started.duration(to: bulkDone).seconds
            report.indexSeconds = bulkDone.duration(to: swap.caughtUpAt).seconds
            report.swapSeconds = swap.swapStart.duration(to: .now).seconds
            return report
        }
    }

    /// The subscription cuts' bulk pass: every fact with a subscription streamed with COPY in
    /// `partitions` ranges of subscriptions (each a reader importing the snapshot and a fold on a
    /// thread of its own), one subscription folded at a time (memory stays bounded by the largest
    /// subscription, plus the few WeChat order facts that have no subscription yet, held to join
    /// theirs), its rows handed to the tables' writers.
    func loadSubscriptionCuts(_ projections: Set<ProjectionName>, into load: BulkLoad) throws -> BulkLoad.Counts {
        let (bounds, totalFacts) = try Self.partitionBounds(on: load.reader, head: load.head, partitions: partitions)
        let orderFacts = try Self.orderFacts(upTo: load.head, on: load.reader)
        let now = projector.clock()
        let done = Mutex(0)
        let progress = load.progress
        let reportRows: @Sendable (Int) -> Void = { rows in
            let total = done.withLock { $0 += rows; return $0 }
            progress(total, totalFacts)
        }
        let chunkBytes = flushBytes
        let writers = load.writers
        let results = Self.inParallel(bounds.count) { index -> Result<(Int, Int), any Error> in
            let result = Result { () throws -> (Int, Int) in
                var buffers = CopyBuffers()
                let scan = try streamFacts(snapshot: load.snapshot, range: bounds[index], head: load.head, progress: reportRows) { key, facts in
                    let fold = orderFacts.attach(to: SubscriptionFold(key: key, facts: facts, catalogPeriods: projector.catalogPeriods))
                    buffers.add(SubscriptionRows(fold: fold, catalog: projector.catalog, now: now), for: projections)
                    try buffers.send(to: writers, atLeast: chunkBytes)
                }
                try buffers.send(to: writers, atLeast: 1)
                return scan
            }
            // Stops the other partitions and makes every writer roll back.
            if case .failure(let error) = result { load.fail(error) }
            return result
        }
        var counts = BulkLoad.Counts()
        for result in results {
            let (rows, folded) = try result.get()
            counts.facts += rows
            counts.units += folded
        }
        return counts
    }

    // MARK: dry run

    func diff(progress: @escaping (Int, Int) -> Void) throws -> RebuildReport {
        let started = ContinuousClock.now
        let now = projector.clock()
        let connection = try connections.unbounded()
        try deriveMissingFacts(on: connection)
        var stored: [String: Set<EntitlementChange>] = [:]
        let rows = try connection.query(
            """
            SELECT e.customer_id AS grant_customer_id, e.entitlement, e.product_id AS grant_product_id, \(SubscriptionRow.columns)
            FROM projections.entitlements e JOIN projections.subscriptions s ON s.subscription = e.subscription
            """, name: "stored entitlements")
        for row in rows.rows {
            let state = try SubscriptionRow.decode(row).reevaluated(at: now)
            guard EntitlementGrant.entitlement(of: state, catalog: projector.catalog) != nil else { continue }
            let key = try row.decode(String.self, "subscription")
            stored[key, default: []].insert(EntitlementChange(
                customerId: try row.decode(String.self, "grant_customer_id"), entitlement: try row.decode(String.self, "entitlement"),
                productId: try row.decode(String.self, "grant_product_id"), originalTransactionId: state.originalTransactionId,
                environment: state.environment ?? SubscriptionKey.production))
        }
        var gains: [EntitlementChange] = []
        var losses: [EntitlementChange] = []
        let (head, factRows, streams) = try streamFacts(progress: progress) { key, facts, orderFacts in
            let fold = orderFacts.attach(to: SubscriptionFold(key: key, facts: facts, catalogPeriods: projector.catalogPeriods))
            let grants = Set((fold.state(at: now).map { EntitlementGrant.grants(of: $0, catalog: projector.catalog) } ?? []).map(EntitlementChange.init))
            let before = stored.removeValue(forKey: key.text) ?? []
            gains += grants.subtracting(before)
            losses += before.subtracting(grants)
        }
        for rest in stored.values { losses += rest }
        let seconds = max(started.duration(to: .now).seconds, 1e-9)
        var report = RebuildReport(
            projections: [.entitlements], dryRun: true, snapshotHead: head, swapHead: head, events: Int(head), streams: streams,
            caughtUpStreams: 0, seconds: seconds, eventsPerSecond: Double(head) / seconds, peakRSSBytes: Self.peakRSS(),
            gains: gains.sorted(), losses: losses.sorted(), evaluatedAt: now)
        report.facts = factRows
        return report
    }

    // MARK: the bulk read

    /// A half-open range of subscription keys (nil: unbounded) that one partition reads.
    typealias StreamRange = (from: String?, to: String?)

    /// Begins a REPEATABLE READ snapshot on `connection` (left open: other readers import it).
    /// The head is the facts checkpoint in that snapshot: what is folded is exactly what is derived.
    static func openSnapshot(on connection: Connection) throws -> (head: Int64, snapshot: String) {
        try connection.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", name: "snapshot")
        let head = try FactStore.derivedUpTo(on: connection)
        let snapshot = try connection.query("SELECT pg_export_snapshot() AS id", name: "export snapshot").first?.decode(String.self, "id") ?? ""
        return (head, snapshot)
    }

    /// Splits the subscriptions with facts up to `head` into `partitions` ranges of about equal
    /// fact counts (read in the snapshot `connection` holds); and the fact count.
    static func partitionBounds(on connection: Connection, head: Int64, partitions: Int) throws -> ([StreamRange], Int) {
        var cuts: [String] = []
        let total = try connection.query(
            "SELECT count(*) AS n FROM public.facts WHERE schema_version = $1 AND subscription IS NOT NULL AND position <= $2",
            [.int64(Int64(FactStore.version)), .int64(head)], name: "facts count").first?.decode(Int64.self, "n") ?? 0
        if partitions > 1 && head > 0 {
            for k in 1..<partitions where total > 0 {
                let row = try connection.query(
                    """
                    SELECT subscription FROM public.facts WHERE schema_version = $1 AND subscription IS NOT NULL
                    ORDER BY subscription OFFSET $2 LIMIT 1
                    """,
                    [.int64(Int64(FactStore.version)), .int64(total * Int64(k) / Int64(partitions))], name: "partition bound").first
                if let cut = try row?.decode(String.self, "subscription"), cut != cuts.last { cuts.append(cut) }
            }
        }
        var ranges: [StreamRange] = []
        var from: String?
        for cut in cuts {
            ranges.append((from, cut))
            from = cut
        }
        ranges.append((from, nil))
        return (ranges, Int(total))
    }

    /// Runs `body(0..<count)` concurrently and returns the results in order.
    static func inParallel<T: Sendable>(_ count: Int, _ body: @escaping @Sendable (Int) -> T) -> [T] {
        BlockingWork.inParallel(count, body)
    }

    /// Streams every fact with a subscription in `range` up to `head` in the exported snapshot (or,
    /// without one, in a snapshot of its own), grouped by subscription, calling `subscription` once
    /// per subscription with its facts. Returns (fact rows read, subscriptions).
    func streamFacts(
        snapshot: String?, range: StreamRange, head: Int64, progress: (Int) -> Void,
        _ subscription: (SubscriptionKey, [Fact]) throws -> Void
    ) throws -> (Int, Int) {
        let reader = try connections.unbounded()
        return try reader.transaction { reader -> (Int, Int) in
            try reader.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", name: "snapshot")
            if let snapshot {
                // Identifiers from pg_export_snapshot are hex and dashes; the statement takes no parameter.
                guard snapshot.allSatisfy({ $0.isHexDigit || $0 == "-" }) else {
                    throw ProjectionError.corrupt("unexpected snapshot id \(snapshot)")
                }
                try reader.query("SET TRANSACTION SNAPSHOT '\(snapshot)'", name: "import snapshot")
            }
            var current: SubscriptionKey?
            var currentBytes: [UInt8] = []
            let columns = FactRows.columnCount
            let text = CopyRowReader(columns: columns)
            let subscriptionColumn = FactColumn.subscription.rawValue
            var facts: [Fact] = []
            var rows = 0
            var reported = 0
            var subscriptions = 0
            func emit() throws {
                if let current, !facts.isEmpty {
                    subscriptions += 1
                    try subscription(current, facts)
                }
                facts.removeAll(keepingCapacity: true)
            }
            try reader.copyOut(Self.bulkQuery(head: head, range: range)) { data in
                try data.withUnsafeBytes { bytes in
                    let count = text.split(bytes)
                    guard count == columns else {
                        throw ProjectionError.corrupt("a COPY row has \(count) fields, expected \(columns)")
                    }
                    // Rows come grouped by subscription: compare bytes, parse the key once per group.
                    if current == nil || !text.equals(subscriptionColumn, currentBytes) {
                        try emit()
                        let raw = text.string(subscriptionColumn) ?? ""
                        guard let key = SubscriptionKey(text: raw) else {
                            throw ProjectionError.corrupt("fact subscription '\(raw)' is not <environment>:<id>")
                        }
                        current = key
                        // Compared as sent: a key holding a tab or backslash arrives escaped.
                        currentBytes = text.rawBytes(subscriptionColumn) ?? []
                    }
                    facts.append(try FactRows.fact(text, knownSubscription: current))
                }
                rows += 1
                if rows & 0x3FFF == 0 {
                    progress(rows - reported)
                    reported = rows
                }
            }
            try emit()
            progress(rows - reported)
            return (rows, subscriptions)
        }
    }

    /// The whole log in one snapshot of its own: (head, fact rows, subscriptions).
    func streamFacts(
        progress: @escaping (Int, Int) -> Void, _ subscription: (SubscriptionKey, [Fact], OrderFacts) throws -> Void
    ) throws -> (Int64, Int, Int) {
        let exporter = try connections.unbounded()
        let (head, snapshot) = try Self.openSnapshot(on: exporter)
        let (_, totalFacts) = try Self.partitionBounds(on: exporter, head: head, partitions: 1)
        defer { _ = try? exporter.query("COMMIT", name: "end snapshot") }
        let orderFacts = try Self.orderFacts(upTo: head, on: exporter)
        var done = 0
        let (rows, subscriptions) = try streamFacts(snapshot: snapshot, range: (nil, nil), head: head, progress: { rows in
            done += rows
            progress(done, totalFacts)
        }) { key, facts in try subscription(key, facts, orderFacts) }
        return (head, rows, subscriptions)
    }

    /// The facts without a subscription that can change a fold (WeChat refunds and order aliases)
    /// up to `head`, read once in the rebuild's snapshot and joined to each subscription as it is
    /// folded. Inquiries, answers and ordinary purchases change no fold and are left out: a shop
    /// selling items through xpay may hold millions of purchases.
    static func orderFacts(upTo head: Int64, on connection: Connection) throws -> OrderFacts {
        let rows = try connection.query(
            """
            SELECT \(FactRows.columns) FROM public.facts
            WHERE schema_version = $1 AND subscription IS NULL AND origin IN ('wechat', 'ledger') AND position <= $2
              AND transaction_id IS NOT NULL AND kind NOT IN ('purchase', 'refund_inquiry', 'refund_answer')
            ORDER BY position, ordinal
            """, [.int64(Int64(FactStore.version)), .int64(head)], name: "order facts")
        return OrderFacts(try rows.facts())
    }

    /// The rebuild's read of one partition.
    static func bulkQuery(head: Int64, range: StreamRange) -> String {
        var conditions = ["schema_version = \(FactStore.version)", "subscription IS NOT NULL", "position <= \(head)"]
        if let from = range.from { conditions.append("subscription >= \(literal(from))") }
        if let to = range.to { conditions.append("subscription < \(literal(to))") }
        return "COPY (SELECT \(FactRows.columns) FROM public.facts WHERE \(conditions.joined(separator: " AND ")) ORDER BY subscription, position, ordinal) TO STDOUT"
    }

    /// The rebuild's read, whole (the benchmark copies it out without folding to compare).
    public static func bulkQuery(head: Int64) -> String { bulkQuery(head: head, range: (nil, nil)) }

    /// A text value as SQL (COPY takes no parameters): an escape string literal with every
    /// backslash and quote doubled, so nothing in the value can end the literal or change the
    /// statement (and the meaning does not depend on standard_conforming_strings). A plain
    /// literal, not an expression: the planner uses it as a bound of the index scan. An
    /// expression (`convert_from(decode(…))` before) was only a filter, so each partition walked
    /// the whole index and heap and two partitions cost PostgreSQL twice the reading of one.
    static func literal(_ value: String) -> String {
        var out = "E'"
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\\": out += "\\\\"
            case "'": out += "''"
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "'"
    }

    /// VmHWM of /proc/self/status, in bytes.
    public static func peakRSS() -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix("VmHWM:") {
            let digits = line.split(separator: " ").compactMap { Int($0) }
            return digits.first.map { $0 * 1024 }
        }
        return nil
    }
}

extension Duration {
    var seconds: Double { EpochTime.seconds(self) }
}

/// Facts without a subscription, indexed by the order ids they name, joined to a subscription's
/// fold through its orders (`SubscriptionProjection.attach`).
struct OrderFacts: Sendable {
    let byId: [String: [Fact]]

    init(_ facts: [Fact]) {
        var index: [String: [Fact]] = [:]
        for f in facts {
            for id in Set([f.transactionId, f.orderAlias].compactMap({ $0 })) { index[id, default: []].append(f) }
        }
        byId = index
    }

    func attach(to fold: SubscriptionFold) -> SubscriptionFold {
        if byId.isEmpty { return fold }
        var seen = Set<String>()
        var frontier = Array(fold.orderIds)
        var found: [Int64: [Int: Fact]] = [:]
        while let id = frontier.popLast() {
            guard seen.insert(id).inserted else { continue }
            for f in byId[id] ?? [] {
                found[f.position, default: [:]][f.ordinal] = f
                for other in [f.transactionId, f.orderAlias].compactMap({ $0 }) where !seen.contains(other) { frontier.append(other) }
            }
        }
        if found.isEmpty { return fold }
        let candidates = found.keys.sorted().flatMap { p in found[p]!.keys.sorted().map { found[p]![$0]! } }
        return SubscriptionProjection.attach(candidates, to: fold)
    }
}

/// What a projection's bulk pass works with (`Projection.load`): the facts head H of the
/// rebuild's snapshot, that snapshot (exported: a connection of your own can import it with
/// `SET TRANSACTION SNAPSHOT` to read in parallel, as the subscription cuts' partitions do), the
/// exporting connection to read in it, and the writers of the declared tables.
final class BulkLoad: Sendable {
    /// What a bulk pass read and wrote, for the report.
    struct Counts: Sendable, Equatable {
        /// Fact rows read.
        var facts = 0
        /// What it folded: subscriptions, cases, contracts.
        var units = 0
    }

    let head: Int64
    let snapshot: String
    /// In the snapshot (REPEATABLE READ, read only); used by the load's thread only.
    let reader: Connection
    let rebuilder: Rebuilder
    let writers: [TableWriter]
    /// (fact rows done, total): the rebuild's progress.
    let progress: @Sendable (Int, Int) -> Void

    init(head: Int64, snapshot: String, reader: Connection, rebuilder: Rebuilder, writers: [TableWriter],
         progress: @escaping @Sendable (Int, Int) -> Void) {
        self.head = head
        self.snapshot = snapshot
        self.reader = reader
        self.rebuilder = rebuilder
        self.writers = writers
        self.progress = progress
    }

    /// Hands rows of `table` in COPY text (`[UInt8].field`, CopyText.swift) to its writer; waits
    /// while the writer's queue is full, so memory stays bounded.
    func send(_ rows: [UInt8], to table: ProjectionTable) throws {
        guard !rows.isEmpty else { return }
        guard let writer = writers.first(where: { $0.table == table }) else {
            throw ProjectionError.refused("the rebuild has no writer for projections.\(table.name): declare it in the projection's tables")
        }
        try writer.queue.push(rows)
    }

    /// Stops every writer (they roll back) and every other sender.
    func fail(_ error: any Error) {
        for writer in writers { writer.queue.fail(error) }
    }
}

/// Loads one fresh table (`projections.<table>_next`) in a transaction of its own, fed by every
/// partition through `queue`: creates the table, streams all rows into it with ONE
/// `COPY … WITH (FREEZE)`, then adds its keys and indexes and analyzes it, and commits.
///
/// Why one writer per table instead of one per partition: a table created in the loading
/// transaction can take COPY FREEZE (rows written frozen and all-visible, so neither the index
/// builds, ANALYZE nor the first readers after the swap stop to set hint bits on every row),
/// and each table's keys, indexes and statistics are built as soon as its rows are in, in
/// parallel with the other tables', instead of one after another after the bulk pass.
final class TableWriter: Sendable {
    let table: ProjectionTable
    let connections: Connections
    let queue = ChunkQueue(capacity: 4)

    init(table: ProjectionTable, connections: Connections) {
        self.table = table
        self.connections = connections
    }

    func run() throws {
        do {
            let connection = try connections.unbounded()
            try connection.transaction { connection in
                try connection.query("SET LOCAL ROLE ledger_projector", name: "projector role")
                try connection.query("DROP TABLE IF EXISTS \(table.qualified(next: true))", name: "drop stale next table")
                try connection.query(
                    "CREATE TABLE \(table.qualified(next: true)) (LIKE \(table.qualified()) INCLUDING DEFAULTS INCLUDING CONSTRAINTS)",
                    name: "create next table")
                try connection.copyIn("COPY \(table.qualified(next: true)) (\(table.columns)) FROM STDIN WITH (FREEZE)") { writer in
                    while var chunk = try queue.pop() {
                        try writer.write(chunk)
                        chunk.removeAll(keepingCapacity: true)  // the only reference now: no copy
                        queue.recycle(chunk)
                    }
                }
                for statement in table.indexStatements(next: true) { try connection.query(statement, name: "index next table") }
                try connection.query("ANALYZE \(table.qualified(next: true)) (\(table.statisticsColumns))", name: "analyze next table")
            }
        } catch {
            queue.fail(error)
            throw error
        }
    }
}

/// A bounded hand-off of COPY text chunks from the partitions to one table's writer: a full
/// queue makes the partitions wait (memory stays bounded), a failure on either side stops both.
final class ChunkQueue: @unchecked Sendable {
    /// Thrown on one side because the other side failed (the original error is reported).
    struct Aborted: Error, CustomStringConvertible {
        var cause: String
        var description: String { "rebuild aborted: \(cause)" }
    }

    private let condition = NSCondition()
    private let capacity: Int
    // Guarded by `condition`.
    private var chunks: [[UInt8]] = []
    private var head = 0
    /// Written chunks, emptied, for the partitions to fill again (see `spare`).
    private var spares: [[UInt8]] = []
    private var closed = false
    private var failure: Aborted?

    init(capacity: Int) { self.capacity = capacity }

    /// Hands `chunk` to the writer; waits while the queue is full.
    func push(_ chunk: [UInt8]) throws {
        condition.lock()
        defer { condition.unlock() }
        while failure == nil && chunks.count - head >= capacity { condition.wait() }
        if let failure { throw failure }
        chunks.append(chunk)
        condition.broadcast()
    }

    /// The next chunk; nil once the queue is closed and drained.
    func pop() throws -> [UInt8]? {
        condition.lock()
        defer { condition.unlock() }
        while failure == nil && head == chunks.count && !closed { condition.wait() }
        if let failure { throw failure }
        guard head < chunks.count else { return nil }
        let chunk = chunks[head]
        chunks[head] = []
        head += 1
        if head == chunks.count { chunks.removeAll(keepingCapacity: true); head = 0 }
        condition.broadcast()
        return chunk
    }

    /// A written (emptied) chunk's storage, to be handed out again by `spare`.
    func recycle(_ chunk: [UInt8]) {
        condition.lock()
        if spares.count < capacity { spares.append(chunk) }
        condition.unlock()
    }

    /// An empty buffer with the capacity of a written chunk when one is spare: a fresh buffer of
    /// this size is a new mapping from malloc that faults in page by page as it fills.
    func spare() -> [UInt8] {
        condition.lock()
        defer { condition.unlock() }
        return spares.popLast() ?? []
    }

    /// No more chunks will come.
    func close() {
        condition.lock()
        closed = true
        condition.broadcast()
        condition.unlock()
    }

    /// Stops both sides: pending and later pushes and pops throw.
    func fail(_ error: any Error) {
        condition.lock()
        if failure == nil { failure = error as? Aborted ?? Aborted(cause: String(describing: error)) }
        condition.broadcast()
        condition.unlock()
    }
}
