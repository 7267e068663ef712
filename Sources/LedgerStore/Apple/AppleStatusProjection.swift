import Foundation
import LedgerCore
internal import Postgres

/// The Apple status check (`projections.apple_status_checks`, Migrations/0017): one row per
/// `apple_status` fact, Apple's status beside the ledger's (`AppleStatusCheck`). Kept by the
/// catch-up worker only (checkpoint `apple_status`), never in the append transaction: a check
/// folds the subscription once per statement, which the 200 of a notification must not wait for.
/// A subscription is checked again whenever a fact of it arrives (a late fact signed earlier can
/// change a verdict), and rebuilt from position 0 by `ledger rebuild --projection apple_status`.
enum AppleStatusProjection {
    static let name = ProjectionName.appleStatus

    static func table(next: Bool) -> String { next ? "projections.apple_status_checks_next" : "projections.apple_status_checks" }

    static let columns = """
        subscription, position, ordinal, environment, original_transaction_id, customer_id, source, message, signed_at, \
        recorded_at, apple_status, ledger_status, agrees, arrival_ledger_status, arrival_agrees, transaction_id
        """

    /// Checks again the subscriptions the facts at `range` touch that hold a statement.
    /// `snapshots`: the append's fold snapshots, which answer a new statement's check without
    /// reading the subscription's history when they can (`checkFromSnapshots`).
    /// `own`: the folds this projection's passes left at their ranges' ends (`checkFromSnapshots`).
    static func apply(_ range: ClosedRange<Int64>, next: Bool = false, snapshots: FoldSnapshots.Pinned? = nil, own: FoldSnapshots? = nil,
                      on connection: Connection) throws {
        var touched: [SubscriptionKey] = []
        var stated: [SubscriptionKey] = []
        // A subscription with a statement in the range holds one: only the others are looked up.
        for row in try connection.query(
            """
            SELECT subscription, bool_or(kind = 'apple_status') AS stated FROM public.facts
            WHERE schema_version = $1 AND position BETWEEN $2 AND $3 AND subscription IS NOT NULL AND origin IN ('apple.v2', 'apple.api', 'apple.v1')
            GROUP BY subscription
            """, [.int64(Int64(FactStore.version)), .int64(range.lowerBound), .int64(range.upperBound)], name: "apple subscriptions of positions").rows {
            guard let key = SubscriptionKey(text: try row.decode(String.self, "subscription")) else { continue }
            if try row.decode(Bool.self, "stated") { stated.append(key) } else { touched.append(key) }
        }
        if !touched.isEmpty {
            stated += try connection.query(
                """
                SELECT k.sub AS subscription FROM unnest($2::text[]) AS k(sub)
                WHERE EXISTS (
                    SELECT 1 FROM public.facts
                    WHERE schema_version = $1 AND subscription = k.sub AND kind = 'apple_status' AND position <= $3 OFFSET 0)
                """, [.int64(Int64(FactStore.version)), .array(touched.map { .text($0.text) }, of: .text), .int64(range.upperBound)],
                name: "subscriptions with apple statements")
                .rows.compactMap { SubscriptionKey(text: try $0.decode(String.self, "subscription")) }
        }
        guard !stated.isEmpty else { return }
        var rest = stated
        if let snapshots, !next {
            rest = try checkFromSnapshots(stated, range: range, snapshots: snapshots, own: own, on: connection)
        }
        try recheck(rest.sorted(), range: range, next: next, on: connection)
    }

    /// Checks the new statements of each of `keys` from a fold of its history instead of the
    /// history, where that is the same answer; returns the keys it could not (they are read
    /// whole). The fold is the one this projection's last pass left (`own`, at or before the
    /// range's start) or else the append's snapshot: a pass that lags the appends finds the
    /// append's snapshot already past statements its range still brings, and then only its own
    /// fold answers them. The usual case — notifications that carry Apple's status, each signed
    /// after everything the subscription knew — qualifies when:
    /// - the fold, with the subscription's facts after it up to the range's end, is the fold of
    ///   every fact up to there (an append's snapshot past the range's end only when no fact lies
    ///   between: the reports' rule, ReportProjection.contributions);
    /// - each statement the range brings is answered on the fold up to it
    ///   (`AppleStatusCheck.checks(of:folding:from:through:)`);
    /// - no earlier statement's check can change: every fact the range brings is signed after the
    ///   latest earlier statement in the table (`AppleStatusCheck.mayChange`).
    /// Every fold folded to the range's end is kept in `own` for the next pass, answered or not. A
    /// kept fold shares its facts with the append's snapshot it started from (only its containers
    /// and the facts read since are its own); the histories `recheck` reads are not kept, which
    /// would hold a second copy of every fact of them (the service's peak RSS in `bench ingest`
    /// rose by 20 MB, 240 → 260, while they were).
    static func checkFromSnapshots(_ keys: [SubscriptionKey], range: ClosedRange<Int64>, snapshots: FoldSnapshots.Pinned,
                                   own: FoldSnapshots? = nil, on connection: Connection) throws -> [SubscriptionKey] {
        var entries = snapshots.peek(keys)
        for (key, kept) in own?.peek(keys) ?? [:] where kept.position < range.lowerBound {
            if let live = entries[key], live.position < range.lowerBound, live.position > kept.position { continue }
            entries[key] = kept
        }
        guard !entries.isEmpty else { return keys }
        let started = entries.keys.sorted()
        let newer = try FactStore.facts(
            after: Dictionary(uniqueKeysWithValues: started.map { key in
                (key, (after: min(entries[key]!.position, range.lowerBound - 1), through: max(entries[key]!.position, range.upperBound)))
            }), name: "apple facts after snapshots", on: connection)
        var earlier: [String: EpochMillis] = [:]
        for row in try connection.query(
            "SELECT subscription, max(signed_at) AS t FROM \(table(next: false)) WHERE subscription = ANY($1) AND position < $2 GROUP BY subscription",
            [.array(started.map { .text($0.text) }, of: .text), .int64(range.lowerBound)], name: "latest earlier apple statements").rows {
            earlier[try row.decode(String.self, "subscription")] = try row.decode(Int64.self, "t")
        }
        var rest = Set(keys)
        var checks: [AppleStatusCheck] = []
        var kept: [SubscriptionKey: FoldSnapshots.Entry] = [:]
        for key in started {
            let facts = newer[key] ?? []
            guard !facts.contains(where: { $0.position > range.upperBound || $0.origin == .wechat || $0.kind == .orderAlias }),
                  var entry = entries.removeValue(forKey: key) else { continue }
            let arrived = facts.filter { range.contains($0.position) }
            let statements = arrived.filter { $0.kind == .appleStatus }
            let from = entry.position
            let found = AppleStatusCheck.checks(of: statements, folding: &entry.fold, from: from, through: facts)
            entry.facts += facts.count { $0.position > from }
            entry.position = max(from, range.upperBound)
            entry.walks = nil
            kept[key] = entry
            guard let found, !(earlier[key.text].map { AppleStatusCheck.mayChange(statementSignedAt: $0, arrived: arrived) } ?? false)
            else { continue }
            rest.remove(key)
            checks += found
        }
        own?.store(kept, forget: [])
        snapshots.owner.countStatusChecks(snapshot: keys.count - rest.count, full: rest.count)
        try replace(checks, next: false, on: connection)
        return rest.sorted()
    }

    /// Checks the statements of `keys` the facts at `range` bring, and those of earlier statements
    /// those facts can change (`AppleStatusCheck.mayChange`: a fact signed by the statement's
    /// time); the table holds the checks as of the range's start (the checkpoint). Notifications
    /// arrive mostly in the order Apple signs them, so a pass checks the new statements alone
    /// instead of every statement of a subscription again (which grew with its history squared).
    static func recheck(_ keys: [SubscriptionKey], range: ClosedRange<Int64>, next: Bool, on connection: Connection) throws {
        guard !keys.isEmpty else { return }
        for chunk in stride(from: 0, to: keys.count, by: recheckChunk) {
            let slice = Array(keys[chunk..<min(chunk + recheckChunk, keys.count)])
            let (attached, _) = try FactStore.facts(of: slice, upTo: range.upperBound, on: connection)
            var checks: [AppleStatusCheck] = []
            for key in slice {
                let facts = attached[key] ?? []
                let arrived = facts.filter { range.contains($0.position) }
                let found = AppleStatusCheck.checks(key: key, facts: facts) { s in
                    range.contains(s.position) || AppleStatusCheck.mayChange(statementSignedAt: s.signedAt, arrived: arrived)
                }
                checks += found
            }
            try replace(checks, next: next, on: connection)
        }
    }

    /// Writes `checks` in place of the rows of the same statements.
    static func replace(_ checks: [AppleStatusCheck], next: Bool, on connection: Connection) throws {
        guard !checks.isEmpty else { return }
        try connection.query(
            """
            DELETE FROM \(table(next: next)) c USING unnest($1::text[], $2::bigint[], $3::integer[]) AS r(subscription, position, ordinal)
            WHERE c.subscription = r.subscription AND c.position = r.position AND c.ordinal = r.ordinal
            """, [.array(checks.map { .text($0.key.text) }, of: .text), .array(checks.map { .int64($0.position) }, of: .int8),
                  .array(checks.map { .int32(Int32(clamping: $0.ordinal)) }, of: .int4)], name: "clear changed apple status checks")
        try insert(checks, next: next, on: connection)
    }

    /// Subscriptions whose facts a recheck holds at once. A pass reads every fact of each (the
    /// statements' checks fold the whole history): at 500, a catch-up over 300 subscriptions of
    /// 100 events held 139 MB of libpq result and 49 MB of facts at `ledger serve`'s heap peak
    /// (heaptrack, `bench ingest --priors 100`); 64 is what the reports' refold holds.
    static let recheckChunk = 64

    static func insert(_ checks: [AppleStatusCheck], next: Bool, on connection: Connection) throws {
        guard !checks.isEmpty else { return }
        let data = rows(checks)
        try connection.copyIn("COPY \(table(next: next)) (\(columns)) FROM STDIN") { writer in try writer.write(data) }
    }

    /// `checks` as COPY text rows of `apple_status_checks` (`columns` order).
    static func rows(_ checks: [AppleStatusCheck]) -> [UInt8] {
        var out: [UInt8] = []
        for c in checks {
            out.field(c.key.text); out.field(c.position); out.field(c.ordinal); out.field(c.key.environment)
            out.field(c.key.originalTransactionId); out.field(c.customerId); out.field(c.source); out.field(c.message)
            out.field(c.signedAt); out.field(c.recordedAt); out.field(c.appleStatus); out.field(c.ledgerStatus?.rawValue)
            out.field(c.agrees); out.field(c.arrivalLedgerStatus?.rawValue); out.field(c.arrivalAgrees)
            out.field(c.transactionId, last: true)
        }
        return out
    }

    /// Every subscription with a statement up to `upTo` (the rebuild's bulk pass).
    static func allStated(upTo: Int64, on connection: Connection) throws -> [SubscriptionKey] {
        try connection.query(
            "SELECT DISTINCT subscription FROM public.facts WHERE schema_version = $1 AND kind = 'apple_status' AND position <= $2",
            [.int64(Int64(FactStore.version)), .int64(upTo)], name: "subscriptions with apple statements")
            .rows.compactMap { SubscriptionKey(text: try $0.decode(String.self, "subscription")) }.sorted()
    }

    // MARK: reading

    static func decode(_ row: Row) throws -> AppleStatusCheck {
        let key = SubscriptionKey(environment: try row.decode(String.self, "environment"),
                                  originalTransactionId: try row.decode(String.self, "original_transaction_id"))
        return AppleStatusCheck(
            key: key, position: try row.decode(Int64.self, "position"), ordinal: try row.decode(Int.self, "ordinal"),
            recordedAt: try row.decode(Int64.self, "recorded_at"), source: try row.decode(String.self, "source"),
            message: try row.decode(String?.self, "message"), signedAt: try row.decode(Int64.self, "signed_at"),
            transactionId: try row.decode(String?.self, "transaction_id"), appleStatus: try row.decode(Int.self, "apple_status"),
            ledgerStatus: try row.decode(String?.self, "ledger_status").flatMap(SubscriptionStatus.init(rawValue:)),
            arrivalLedgerStatus: try row.decode(String?.self, "arrival_ledger_status").flatMap(SubscriptionStatus.init(rawValue:)),
            customerId: try row.decode(String?.self, "customer_id"))
    }
}

/// The Apple status check as a registered projection (Projection.swift): kept by the catch-up
/// only (`isLive` false), rebuilt through the one rebuild path.
struct AppleStatusChecksProjection: FoldsOntoSnapshots {
    /// The append's fold snapshots of this process (nil: every check reads the facts).
    var snapshots: FoldSnapshots? = nil
    /// The snapshots as they stood when this pass began (`forPass`).
    var pinned: FoldSnapshots.Pinned? = nil
    /// The folds this projection's passes left at their ranges' ends: the next pass starts from
    /// one when the append's snapshot has already moved past statements its range brings.
    let own: FoldSnapshots?
    var names: [ProjectionName] { [.appleStatus] }
    var isLive: Bool { false }

    /// `own` holds half the append's capacity: its folds mostly share their facts with the
    /// append's snapshots they started from, and only subscriptions with statements in recent
    /// passes need one.
    init(snapshots: FoldSnapshots? = nil) {
        self.snapshots = snapshots
        own = snapshots.map { FoldSnapshots(capacity: $0.capacity / 2) }
    }

    func tables(of name: ProjectionName) -> [ProjectionTable] { name == .appleStatus ? [.appleStatusChecks] : [] }

    func apply(_ range: ClosedRange<Int64>, to names: Set<ProjectionName>, next: Bool, on connection: Connection) throws -> Int {
        try AppleStatusProjection.apply(range, next: next, snapshots: passSnapshots, own: own, on: connection)
        return 0
    }

    /// Every stated subscription checked from the facts up to the snapshot's head, 500 at a time.
    func load(_ names: Set<ProjectionName>, into load: BulkLoad) throws -> BulkLoad.Counts {
        let keys = try AppleStatusProjection.allStated(upTo: load.head, on: load.reader)
        load.progress(0, keys.count)
        var facts = 0
        for chunk in stride(from: 0, to: keys.count, by: 500) {
            let slice = Array(keys[chunk..<min(chunk + 500, keys.count)])
            let (attached, _) = try FactStore.facts(of: slice, upTo: load.head, on: load.reader)
            facts += attached.values.reduce(0) { $0 + $1.count }
            try load.send(AppleStatusProjection.rows(slice.flatMap { AppleStatusCheck.checks(key: $0, facts: attached[$0] ?? []) }),
                          to: .appleStatusChecks)
            load.progress(chunk + slice.count, keys.count)
        }
        return BulkLoad.Counts(facts: facts, units: keys.count)
    }
}

extension ProjectionTable {
    /// Migrations/0017.
    static let appleStatusChecks = ProjectionTable(
        name: "apple_status_checks", columns: AppleStatusProjection.columns,
        statisticsColumns: "subscription, recorded_at, environment, source, agrees, arrival_agrees",
        indexes: ["ALTER TABLE {table} ADD PRIMARY KEY (subscription, position, ordinal)",
                  "CREATE INDEX ON {table} (recorded_at) WHERE NOT agrees",
                  "CREATE INDEX ON {table} (environment, source) WHERE NOT arrival_agrees"])
}
