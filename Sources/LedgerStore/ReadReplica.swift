import Foundation
import LedgerCore
internal import Postgres
import Synchronization

/// Where a read was answered from.
public enum ReadSource: String, Sendable, CaseIterable {
    case primary, replica
}

/// The read side of the store on one database: what app and auditor reads use. The primary's and
/// a streaming replica's have the same shape, so a use case reads through whichever `Store.read`
/// hands it.
public struct Reads: Sendable {
    public let source: ReadSource
    /// Subscription states, entitlements, facts.
    public let projections: ProjectionQueries
    /// Refund cases' facts and evidence events.
    public let refunds: RefundFactQueries
    /// Event reads (a replica's is never appended to).
    public let events: EventStore
}

/// What the replica has replayed, against the primary.
public struct ReplicaStatus: Sendable, Equatable {
    /// The last event position the replica has replayed (its `event_head`).
    public var replayedPosition: Int64
    /// The primary's head when checked.
    public var primaryPosition: Int64
    /// WAL bytes the replica is behind the primary.
    public var lagBytes: Int64
    /// Seconds behind: 0 when it has every event; else the time since its last replayed commit.
    public var lagSeconds: Double
    /// Monotonic time of the check (ContinuousClock), to age the status.
    var checkedAt: ContinuousClock.Instant

    /// Events the primary has that the replica has not replayed yet.
    public var eventsBehind: Int64 { max(0, primaryPosition - replayedPosition) }
}

/// A streaming replica (hot standby) serving reads, with the rule that decides each read:
///
/// - `read(atLeast: N)` (read-your-write: N is a position an append answered) goes to the replica
///   only when it has replayed N — the event head and the events, facts and live projection rows
///   of every position up to N commit in one transaction, so a replica at N shows all of them —
///   else to the primary.
/// - A read without a position goes to the replica unless it is more than `maxLag` behind.
/// - A read that fails on the replica (down, or cancelled by a recovery conflict) is retried once
///   on the primary: a replica problem never becomes the caller's error.
///
/// The status is cached for `statusTTL`; a position check that the cache cannot confirm asks the
/// replica's head directly (one indexed single-row read). Replay only moves forward, so a replica
/// seen at position N still has N when the read runs.
final class ReadReplica: Sendable {
    let pool: ConnectionPool
    let reads: Reads
    let maxLag: Duration
    let statusTTL: Duration
    private let cached = Mutex<ReplicaStatus?>(nil)
    /// Why the last status check failed (for the detailed /readyz), nil after a good one.
    let problem = Mutex<String?>(nil)
    private let served = Mutex<[ReadSource: Int]>([:])
    private let fallbacks = Atomic<Int>(0)

    init(conninfo: String, poolSize: Int, acquireTimeout: Duration, catalog: ProductCatalog, maxLag: Duration,
         statusTTL: Duration = .milliseconds(250)) {
        pool = ConnectionPool(conninfo: conninfo, maxConnections: poolSize, acquireTimeout: acquireTimeout)
        reads = Reads(source: .replica, projections: ProjectionQueries(pool: pool, catalog: catalog),
                      refunds: RefundFactQueries(pool: pool), events: EventStore(pool: pool))
        self.maxLag = maxLag
        self.statusTTL = statusTTL
    }

    /// The replica's status, from the cache when fresh; nil when it (or the primary) cannot be asked.
    func status(primary: ConnectionPool, maxAge: Duration? = nil) async -> ReplicaStatus? {
        if let s = cached.withLock({ $0 }), ContinuousClock.now - s.checkedAt < (maxAge ?? statusTTL) { return s }
        do {
            let replica = try await pool.withConnection { c in
                let row = try c.query(
                    """
                    SELECT (SELECT position FROM event_head) AS head, pg_last_wal_replay_lsn()::text AS lsn,
                           COALESCE(EXTRACT(EPOCH FROM (now() - pg_last_xact_replay_timestamp())), 0)::float8 AS since,
                           pg_is_in_recovery() AS standby
                    """, name: "replica status").first
                guard let row, try row.decode(Bool.self, "standby") else {
                    throw PostgresError(.invalidArgument, "LEDGER_READ_DATABASE_URL is not a standby (pg_is_in_recovery() is false): point it at a streaming replica")
                }
                return (head: try row.decode(Int64.self, "head"), lsn: try row.decode(String?.self, "lsn"),
                        since: try row.decode(Double.self, "since"))
            }
            let primaryState = try await primary.withConnection { c in
                let row = try c.query(
                    "SELECT (SELECT position FROM event_head) AS head, COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn), 0)::int8 AS lag",
                    [replica.lsn.map(PostgresValue.text) ?? .null], name: "primary wal position").first
                return (head: try row?.decode(Int64.self, "head") ?? 0, lag: try row?.decode(Int64.self, "lag") ?? 0)
            }
            let behind = primaryState.head > replica.head
            let status = ReplicaStatus(
                replayedPosition: replica.head, primaryPosition: primaryState.head, lagBytes: max(0, primaryState.lag),
                lagSeconds: behind ? max(0, replica.since) : 0, checkedAt: .now)
            cached.withLock { $0 = status }
            problem.withLock { $0 = nil }
            return status
        } catch {
            cached.withLock { $0 = nil }
            problem.withLock { $0 = "\(error)" }
            return nil
        }
    }

    /// Whether a read that must see position `minPosition` (or, nil, any read) may use the replica.
    func mayServe(atLeast minPosition: Int64?, primary: ConnectionPool) async -> Bool {
        guard let status = await status(primary: primary) else { return false }
        if let minPosition {
            if status.replayedPosition >= minPosition { return true }
            // The cache is behind by up to its TTL: ask the replica's head itself.
            guard let head = try? await pool.withConnection({ c in
                try c.query("SELECT position FROM event_head", name: "replica head").first?.decode(Int64.self, "position") ?? 0
            }) else { return false }
            if head >= minPosition {
                cached.withLock { s in if var fresh = s, head > fresh.replayedPosition { fresh.replayedPosition = head; s = fresh } }
                return true
            }
            return false
        }
        return status.lagSeconds <= Self.seconds(maxLag)
    }

    func count(_ source: ReadSource) { served.withLock { $0[source, default: 0] += 1 } }
    func countFallback() { fallbacks.add(1, ordering: .relaxed) }

    var servedCounts: [ReadSource: Int] { served.withLock { $0 } }
    var fallbackCount: Int { fallbacks.load(ordering: .relaxed) }

    static func seconds(_ d: Duration) -> Double {
        Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }
}

/// Reads served, by where, and the replica's state, for `/metrics`.
public struct ReadStatistics: Sendable, Equatable {
    public var served: [ReadSource: Int] = [:]
    /// Replica reads that failed and were answered by the primary instead.
    public var replicaFallbacks = 0
    public var replica: ReplicaStatus?
    public var replicaConfigured = false
}
