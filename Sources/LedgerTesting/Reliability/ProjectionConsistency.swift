import Foundation
import LedgerCore
import LedgerStore
import Postgres

/// After a crash: do the projection tables say what a rebuild from the event log says?
///
/// The live projections (kept in the append transaction) are read exactly as the faults left them,
/// BEFORE any catch-up pass runs: a catch-up would heal the very gap this check exists to expose
/// (an append answered 200 whose effect never reached a live table, a live checkpoint left behind
/// the head). Their checkpoints must be at the head; their tables are snapshotted first.
///
/// The trailing projections (reports, the Apple status checks: kept only by the catch-up worker)
/// are compared once they reached the head — by the running service's own worker when one runs
/// (waited for, bounded), else by one catch-up pass, which then finds nothing to do for the live
/// lanes (they are at the head).
///
/// Then every projection is rebuilt from position 0 (the one rebuild path) and EVERY table of
/// schema `projections` is compared row for row with what it held before (issue 25 item 6), plus
/// every subscription's state re-evaluated at one fixed instant. Two columns are not answers and
/// are left out of the row comparison: `subscriptions.evaluated_at` (when a row was last folded)
/// and `subscriptions.status` (the status as of that fold; the re-evaluated state is compared
/// instead, so a subscription that expired between the two reads is not a false difference).
public enum ProjectionConsistency {
    /// Columns that record when a row was folded rather than what it says.
    static let volatileColumns: [String: [String]] = ["subscriptions": ["evaluated_at", "status"]]

    /// Returns nil when the live tables equal a fresh rebuild, otherwise what differs.
    /// `trailingWait`: how long to wait for a running service's worker to bring the trailing
    /// projections to the head before running a catch-up pass for them.
    public static func compareWithRebuild(conninfo: String, catalog: ProductCatalog = .productIds,
                                          trailingWait: Duration = .seconds(30)) async throws -> String? {
        let connection = try Connection(conninfo: conninfo)
        var findings: [String] = []

        // 1. The live projections, as the faults left them.
        let head = try headPosition(connection)
        let checkpoints = try checkpointPositions(connection)
        let live = ProjectionName.allCases.filter(\.isLive)
        let trailing = ProjectionName.allCases.filter { !$0.isLive }
        for name in live where checkpoints[name.rawValue] != head {
            findings.append("live projection \(name.rawValue) at \(checkpoints[name.rawValue].map(String.init) ?? "no checkpoint") of head \(head) before any catch-up")
        }
        // Every other table (the trailing projections' and the reports' shared dimensions) is
        // read once those reached the head.
        let liveTables = Set(live.flatMap(\.tableNames))
        let before = try tables(connection, only: liveTables)
        let store = Store(.init(databaseURL: conninfo, poolSize: 2, catalog: catalog))
        defer { store.close() }
        let now = LedgerClock.system.now()
        let statesBefore = try await states(store, now: now)

        // 2. The trailing projections at the head: the service's worker, else one pass.
        // A worker that is running moves them; one that is not (the service stopped) would be
        // waited for in vain: stop waiting once they stood still for two seconds.
        let deadline = ContinuousClock.now + trailingWait
        var last = try checkpointPositions(connection), stillSince = ContinuousClock.now
        while try trailing.contains(where: { try checkpointPositions(connection)[$0.rawValue] != headPosition(connection) }),
              ContinuousClock.now < deadline, ContinuousClock.now - stillSince < .seconds(2) {
            try await Task.sleep(for: .milliseconds(200))
            let now = try checkpointPositions(connection)
            if now != last { last = now; stillSince = ContinuousClock.now }
        }
        if try trailing.contains(where: { try checkpointPositions(connection)[$0.rawValue] != headPosition(connection) }) {
            _ = try await store.worker.catchUp()
        }
        var snapshot = before
        for (table, rows) in try tables(connection, only: Set(try tableNames(connection)).subtracting(liveTables)) { snapshot[table] = rows }
        if try headPosition(connection) != head {
            findings.append("the head moved from \(head) to \(try headPosition(connection)) during the check: something still appends")
        }

        // 3. A rebuild of everything, then every table and every state compared.
        _ = try await store.rebuilder().run(projections: Set(ProjectionName.allCases))
        let after = try tables(connection)
        let statesAfter = try await states(store, now: now)

        for table in Set(snapshot.keys).union(after.keys).sorted() {
            let a = snapshot[table] ?? [], b = after[table] ?? []
            if a == b { continue }
            let onlyLive = Set(a).subtracting(b), onlyRebuilt = Set(b).subtracting(a)
            findings.append("projections.\(table): \(a.count) rows live, \(b.count) rebuilt; only live \(onlyLive.count) e.g. \(onlyLive.sorted().first.map { String($0.prefix(300)) } ?? "-"); only rebuilt \(onlyRebuilt.count) e.g. \(onlyRebuilt.sorted().first.map { String($0.prefix(300)) } ?? "-")")
        }
        if statesBefore != statesAfter {
            let differing = Set(statesBefore.keys).union(statesAfter.keys).filter { statesBefore[$0] != statesAfter[$0] }.sorted()
            findings.append("\(differing.count) subscription states at \(now) differ, e.g. \(differing.prefix(3)): live \(differing.first.flatMap { statesBefore[$0] } ?? "none") / rebuilt \(differing.first.flatMap { statesAfter[$0] } ?? "none")")
        }
        return findings.isEmpty ? nil : findings.joined(separator: "; ")
    }

    static func headPosition(_ c: Connection) throws -> Int64 {
        try c.query("SELECT position FROM event_head", name: "consistency: head").first!.decode(Int64.self, "position")
    }

    static func checkpointPositions(_ c: Connection) throws -> [String: Int64] {
        var out: [String: Int64] = [:]
        for row in try c.query("SELECT projection, position FROM projection_checkpoints", name: "consistency: checkpoints").rows {
            out[try row.decode(String.self, "projection")] = try row.decode(Int64.self, "position")
        }
        return out
    }

    static func tableNames(_ c: Connection) throws -> [String] {
        try c.query("""
            SELECT tablename FROM pg_tables WHERE schemaname = 'projections'
               AND tablename NOT LIKE '%\\_next' AND tablename NOT LIKE '%\\_retired' AND tablename NOT LIKE '%\\_old'
             ORDER BY tablename
            """, name: "consistency: projection tables").rows.map { try $0.decode(String.self, "tablename") }
    }

    /// Every table of schema `projections` (or those in `only`) as its rows' JSON, sorted.
    static func tables(_ c: Connection, only: Set<String>? = nil) throws -> [String: [String]] {
        var out: [String: [String]] = [:]
        for table in try tableNames(c) where only?.contains(table) ?? true {
            let minus = (volatileColumns[table] ?? []).map { " - '\($0)'" }.joined()
            out[table] = try c.query("SELECT (to_jsonb(x)\(minus))::text AS j FROM projections.\(table) x", name: "consistency: rows")
                .rows.map { try $0.decode(String.self, "j") }.sorted()
        }
        return out
    }

    /// Every subscription's state re-evaluated at `now` (what a read answers).
    static func states(_ store: Store, now: EpochMillis) async throws -> [String: String] {
        var out: [String: String] = [:]
        let queries = store.projections
        for key in try await queries.subscriptionKeys() {
            out[key.text] = String(describing: try await queries.subscription(key, now: now))
        }
        return out
    }
}
