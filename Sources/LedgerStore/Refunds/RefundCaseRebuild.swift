import Foundation
import LedgerCore
internal import Postgres

extension Rebuilder {
    /// Rebuilds `projections.refund_cases` from position 0 while ingestion continues, with the
    /// protocol of the subscription rebuild: fold everything up to the facts checkpoint H in one
    /// snapshot into fresh `_next` tables, catch up without the lock, then under the event-head
    /// lock refold what arrived since, swap the tables by renaming and set the checkpoint.
    func rebuildRefundCases(progress: @escaping @Sendable (Int, Int) -> Void) throws -> RebuildReport {
        let started = ContinuousClock.now
        let writer = try Connection.unbounded(conninfo: conninfo)
        guard try writer.query("SELECT pg_try_advisory_lock($1) AS locked", [.int64(Self.advisoryLockKey)], name: "rebuild lock")
            .first?.decode(Bool.self, "locked") == true else { throw ProjectionError.rebuildInProgress }
        defer { _ = try? writer.query("SELECT pg_advisory_unlock($1)", [.int64(Self.advisoryLockKey)], name: "rebuild unlock") }
        try deriveMissingFacts(on: writer)

        let live = RefundCaseProjection.tables(next: false), next = RefundCaseProjection.tables(next: true)
        let retired = (live.cases + Self.oldSuffix, live.orders + Self.oldSuffix)
        try writer.transaction { writer in
            try writer.query("SET LOCAL ROLE ledger_projector", name: "projector role")
            for table in [next.cases, next.orders, retired.0, retired.1] {
                try writer.query("DROP TABLE IF EXISTS \(table)", name: "drop stale refund case table")
            }
            try writer.query("CREATE TABLE \(next.cases) (LIKE \(live.cases) INCLUDING ALL)", name: "create next refund cases")
            try writer.query("CREATE TABLE \(next.orders) (LIKE \(live.orders) INCLUDING ALL)", name: "create next refund case orders")
        }

        // The bulk fold, in one snapshot.
        let (head, facts) = try writer.transaction { reader -> (Int64, [Fact]) in
            try reader.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", name: "snapshot")
            let head = try FactStore.derivedUpTo(on: reader)
            return (head, try RefundCaseFacts.all(upTo: head, on: reader))
        }
        progress(0, facts.count)
        let cases = RefundCaseFold.cases(from: facts)
        let components = OrderComponents(facts)
        try writer.transaction { writer in
            try writer.query("SET LOCAL ROLE ledger_projector", name: "projector role")
            var done = 0
            for chunk in stride(from: 0, to: cases.count, by: 2_000) {
                let slice = Array(cases[chunk..<min(chunk + 2_000, cases.count)])
                try RefundCaseProjection.insert(slice, orderIds: { components.ids(of: $0.orderId) }, next: true, on: writer)
                done += slice.count
                progress(facts.count * done / max(cases.count, 1), facts.count)
            }
            try writer.query("ANALYZE \(next.cases)", name: "analyze next refund cases")
        }

        // Catch up without blocking appends, then under the head lock.
        let nearHead = try writer.transaction { writer -> Int64 in
            try writer.query("SET LOCAL ROLE ledger_projector", name: "projector role")
            let nearHead = try FactStore.derivedUpTo(on: writer)
            if nearHead > head { try RefundCaseProjection.apply((head + 1)...nearHead, next: true, on: writer) }
            return nearHead
        }
        let bulkDone = ContinuousClock.now
        beforeSwap?()
        let swapStart = ContinuousClock.now
        let swapHead = try writer.transaction { writer -> Int64 in
            try writer.query("SET LOCAL ROLE ledger_projector", name: "projector role")
            let eventHead = try writer.query("SELECT projections.lock_event_head() AS head", name: "lock event head")
                .first?.decode(Int64.self, "head") ?? 0
            let swapHead = min(eventHead, try FactStore.derivedUpTo(on: writer))
            if swapHead > nearHead { try RefundCaseProjection.apply((nearHead + 1)...swapHead, next: true, on: writer) }
            try writer.query(
                """
                UPDATE projection_checkpoints
                SET position = $1, status = 'running', last_error = NULL, failed_position = NULL, updated_at = now()
                WHERE projection = $2
                """, [.int64(swapHead), .text(RefundCaseProjection.name.rawValue)], name: "refund cases checkpoint to head")
            for (from, to) in [(live.cases, next.cases), (live.orders, next.orders)] {
                let bare = { (qualified: String) in String(qualified.dropFirst("projections.".count)) }
                try writer.query("ALTER TABLE \(from) RENAME TO \(bare(from))\(Self.oldSuffix)", name: "retire live refund table")
                try writer.query("ALTER TABLE \(to) RENAME TO \(bare(from))", name: "swap refund table")
            }
            return swapHead
        }
        try writer.transaction { writer in
            try writer.query("SET LOCAL ROLE ledger_projector", name: "projector role")
            try writer.query("DROP TABLE IF EXISTS \(retired.0), \(retired.1)", name: "drop retired refund tables")
        }
        progress(facts.count, facts.count)
        let seconds = max(started.duration(to: .now).seconds, 1e-9)
        var report = RebuildReport(
            projections: [.refundCases], dryRun: false, snapshotHead: head, swapHead: swapHead, events: Int(head),
            streams: cases.count, caughtUpStreams: 0, seconds: seconds, eventsPerSecond: Double(head) / seconds,
            peakRSSBytes: Self.peakRSS(), gains: [], losses: [], evaluatedAt: projector.clock())
        report.facts = facts.count
        report.bulkSeconds = started.duration(to: bulkDone).seconds
        report.swapSeconds = swapStart.duration(to: .now).seconds
        return report
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

/// Which order ids name the same order: the ids each WeChat or ledger fact names together
/// (transactionId and orderAlias), joined transitively — what `RefundCaseFacts.orders` reaches
/// from any one of them.
struct OrderComponents {
    private var parent: [String: String] = [:]

    init(_ facts: [Fact]) {
        for f in facts where f.origin == .wechat || f.origin == .ledger {
            let ids = RefundFactQueries.orderIds(of: f)
            guard let first = ids.first else { continue }
            _ = find(first)
            for id in ids.dropFirst() { union(first, id) }
        }
        var members: [String: Set<String>] = [:]
        for id in parent.keys { members[find(id), default: []].insert(id) }
        groups = members
    }

    private var groups: [String: Set<String>] = [:]

    mutating func find(_ id: String) -> String {
        guard let p = parent[id] else { parent[id] = id; return id }
        if p == id { return id }
        let root = find(p)
        parent[id] = root
        return root
    }

    mutating func union(_ a: String, _ b: String) {
        let (ra, rb) = (find(a), find(b))
        if ra != rb { parent[max(ra, rb)] = min(ra, rb) }
    }

    func ids(of id: String) -> Set<String> {
        var root = id
        while let p = parent[root], p != root { root = p }
        return groups[root] ?? [id]
    }
}
