import Foundation
import LedgerCore
internal import Postgres
import Synchronization

/// The SQL of reconciliation with Apple (Migrations/0007) and of the consumption items of the
/// outbox (Migrations/0011): run bookkeeping, the locks that let exactly one instance run each job, the subscriptions to ask
/// Apple about, and the reads that turn facts into work. Nothing here reads an event payload.
public struct ReconciliationStore: Sendable {
    let pool: ConnectionPool
    let connections: Connections

    init(pool: ConnectionPool, connections: Connections) {
        self.pool = pool
        self.connections = connections
    }

    // MARK: - Locks

    /// Jobs that must run on one instance at a time, across every instance on the database.
    public enum Job: String, Sendable, CaseIterable {
        /// A reconciliation run (periodic, admin or command line).
        case reconciliation

        /// The advisory lock key: "LEDG" in the high bytes, the job's number in the low ones, so
        /// it cannot collide with the small keys applications tend to pick.
        var lockKey: Int64 {
            switch self {
            case .reconciliation: 0x4C45_4447_0000_0701
            }
        }
    }

    /// Takes the job's session-level advisory lock on a connection of its own, or answers nil when
    /// another session (instance) holds it. The lock lasts until `release()` (or until the
    /// connection dies with the process, which PostgreSQL notices and releases it).
    public func tryLock(_ job: Job) async throws(StoreError) -> HeldLock? {
        let connections = self.connections
        do {
            return try await BlockingWork.run {
                let connection = try connections.open()
                let taken = try connection.query("SELECT pg_try_advisory_lock($1) AS taken", [.int64(job.lockKey)], name: "try job lock")
                    .first?.decode(Bool.self, "taken") ?? false
                guard taken else { return nil }
                return HeldLock(job: job, connection: connection)
            }
        } catch {
            throw StoreError(error)
        }
    }

    // MARK: - Runs

    /// One row of `reconciliation_runs`.
    public struct Run: Sendable, Equatable {
        public var runId: String
        public var trigger: String
        public var environments: [String]
        public var since: EpochMillis
        public var until: EpochMillis
        public var dryRun: Bool
        public var all: Bool
        public var requestedBy: JSONValue
        public var startedAt: EpochMillis
        public var finishedAt: EpochMillis?
        public var status: String
        public var summary: JSONValue?
        public var error: String?
        public var reportPosition: Int64?

        public init(runId: String, trigger: String, environments: [String], since: EpochMillis, until: EpochMillis, dryRun: Bool,
                    all: Bool, requestedBy: JSONValue, startedAt: EpochMillis) {
            self.runId = runId
            self.trigger = trigger
            self.environments = environments
            self.since = since
            self.until = until
            self.dryRun = dryRun
            self.all = all
            self.requestedBy = requestedBy
            self.startedAt = startedAt
            self.status = "running"
        }

        public var json: JSONValue {
            .object([
                "runId": .string(runId), "trigger": .string(trigger), "environments": .array(environments.map(JSONValue.string)),
                "window": .object(["since": .integer(since), "until": .integer(until)]), "dryRun": .bool(dryRun), "all": .bool(all),
                "requestedBy": requestedBy, "startedAt": .integer(startedAt), "finishedAt": .optional(finishedAt),
                "status": .string(status), "summary": summary ?? .null, "error": .optional(error),
                "reportPosition": .optional(reportPosition),
            ])
        }
    }

    static let runColumns = """
        run_id, trigger, array_to_string(environments, ',') AS environments, window_since, window_until, dry_run, all_known, requested_by, started_at, finished_at, \
        status, summary, error, report_position
        """

    public func recordStart(_ run: Run) async throws(StoreError) {
        try await execute(
            """
            INSERT INTO reconciliation_runs (run_id, trigger, environments, window_since, window_until, dry_run, all_known, requested_by, started_at, status)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'running')
            """,
            [.text(run.runId), .text(run.trigger), .array(run.environments.map { .text($0) }, of: .text), .int64(run.since),
             .int64(run.until), .bool(run.dryRun), .bool(run.all), .jsonb(run.requestedBy.canonicalJSON()), .int64(run.startedAt)],
            name: "reconciliation run start")
    }

    public func recordEnd(runId: String, succeeded: Bool, finishedAt: EpochMillis, summary: JSONValue?, error: String?,
                          reportPosition: Int64?) async throws(StoreError) {
        try await execute(
            """
            UPDATE reconciliation_runs SET status = $2, finished_at = $3, summary = $4, error = $5, report_position = $6
            WHERE run_id = $1
            """,
            [.text(runId), .text(succeeded ? "succeeded" : "failed"), .int64(finishedAt),
             summary.map { .jsonb($0.canonicalJSON()) } ?? .null, .optional(error), .optional(reportPosition)],
            name: "reconciliation run end")
    }

    public func run(id: String) async throws(StoreError) -> Run? {
        try await runs("SELECT \(Self.runColumns) FROM reconciliation_runs WHERE run_id = $1", [.text(id)]).first
    }

    /// The latest run started (by `trigger`, when given).
    public func latestRun(trigger: String? = nil) async throws(StoreError) -> Run? {
        if let trigger {
            return try await runs(
                "SELECT \(Self.runColumns) FROM reconciliation_runs WHERE trigger = $1 ORDER BY started_at DESC, run_id LIMIT 1",
                [.text(trigger)]).first
        }
        return try await runs("SELECT \(Self.runColumns) FROM reconciliation_runs ORDER BY started_at DESC, run_id LIMIT 1", []).first
    }

    /// The latest run that finished successfully and stored what it found (not a dry run).
    public func latestSucceededRun() async throws(StoreError) -> Run? {
        try await runs(
            """
            SELECT \(Self.runColumns) FROM reconciliation_runs WHERE status = 'succeeded' AND NOT dry_run
            ORDER BY finished_at DESC, run_id LIMIT 1
            """, []).first
    }

    private func runs(_ sql: String, _ parameters: [PostgresValue]) async throws(StoreError) -> [Run] {
        do {
            return try await pool.withConnection { connection in
                try connection.query(sql, parameters, name: "reconciliation runs").rows.map { row in
                    var run = Run(
                        runId: try row.decode(String.self, "run_id"), trigger: try row.decode(String.self, "trigger"),
                        environments: try row.decode(String.self, "environments").split(separator: ",").map(String.init),
                        since: try row.decode(Int64.self, "window_since"), until: try row.decode(Int64.self, "window_until"),
                        dryRun: try row.decode(Bool.self, "dry_run"), all: try row.decode(Bool.self, "all_known"),
                        requestedBy: try JSONValue(json: try row.decode(Data.self, "requested_by")),
                        startedAt: try row.decode(Int64.self, "started_at"))
                    run.finishedAt = try row.decode(Int64?.self, "finished_at")
                    run.status = try row.decode(String.self, "status")
                    run.summary = try row.decode(Data?.self, "summary").map { try JSONValue(json: $0) }
                    run.error = try row.decode(String?.self, "error")
                    run.reportPosition = try row.decode(Int64?.self, "report_position")
                    return run
                }
            }
        } catch {
            throw StoreError(error)
        }
    }

    // MARK: - What to ask Apple about

    /// The originalTransactionIds of `environment` the ledger knows for `bundleId` that may be
    /// auto-renewable subscriptions (product type unknown or auto-renewable), ordered; with
    /// `expiredSince`, only those not expired before it (no expiry, or one at or after it).
    public func knownSubscriptions(environment: String, bundleId: String, expiredSince: EpochMillis?) async throws(StoreError) -> [String] {
        do {
            return try await pool.withConnection { connection in
                try connection.query(
                    """
                    SELECT original_transaction_id FROM projections.subscriptions
                    WHERE environment = $1 AND bundle_id = $2
                      AND (product_type IS NULL OR product_type = 'Auto-Renewable Subscription')
                      AND ($3::bigint IS NULL OR expires_date IS NULL OR expires_date >= $3
                           OR grace_period_expires_date >= $3)
                    ORDER BY original_transaction_id
                    """, [.text(environment), .text(bundleId), .optional(expiredSince)], name: "subscriptions to reconcile")
                    .rows.map { try $0.decode(String.self, "original_transaction_id") }
            }
        } catch {
            throw StoreError(error)
        }
    }

    /// Per stream, the position of its latest event that is not an App Store API answer (source
    /// apple, type `API/…`): what `AppleAPIAnswerEvents` keys answers after. Streams without such an
    /// event are absent.
    public func latestPositionsBesidesAPIAnswers(streams: [String]) async throws(StoreError) -> [String: Int64] {
        guard !streams.isEmpty else { return [:] }
        do {
            return try await pool.withConnection { connection in
                var out: [String: Int64] = [:]
                for row in try connection.query(
                    """
                    SELECT stream_id, max(position) AS position FROM events
                    WHERE stream_id = ANY($1) AND NOT (source = 'apple' AND type LIKE 'API/%')
                    GROUP BY stream_id
                    """, [.array(streams.map { .text($0) }, of: .text)], name: "latest non-answer positions").rows {
                    out[try row.decode(String.self, "stream_id")] = try row.decode(Int64.self, "position")
                }
                return out
            }
        } catch {
            throw StoreError(error)
        }
    }

    /// Which of `keys` (stream, dedupe key) are stored already: what a dry run would not store.
    public func stored(_ keys: [(stream: String, dedupeKey: String)]) async throws(StoreError) -> Set<String> {
        guard !keys.isEmpty else { return [] }
        do {
            return try await pool.withConnection { connection in
                Set(try connection.query(
                    """
                    SELECT e.stream_id || E'\\n' || e.dedupe_key AS k FROM events e
                    JOIN unnest($1::text[], $2::text[]) AS k(stream_id, dedupe_key)
                      ON e.stream_id = k.stream_id AND e.dedupe_key = k.dedupe_key
                    """, [.array(keys.map { .text($0.stream) }, of: .text), .array(keys.map { .text($0.dedupeKey) }, of: .text)],
                    name: "stored keys").rows.map { try $0.decode(String.self, "k") })
            }
        } catch {
            throw StoreError(error)
        }
    }

    /// The newest drift report stored (`reconcile/report` in `ledger:reconciliation`).
    public func latestReport() async throws(StoreError) -> RecordedEvent? {
        do {
            return try await pool.withConnection { connection in
                try connection.query(
                    """
                    SELECT \(EventStore.columns) FROM events WHERE stream_id = $1 AND type = $2 ORDER BY position DESC LIMIT 1
                    """, [.text(StreamId.ledgerReconciliation.text), .text(LedgerEventType.reconciliationReport)],
                    name: "latest drift report").rows.map(EventStore.decode).first
            }
        } catch {
            throw StoreError(error)
        }
    }

    // MARK: - Consent

    /// Every consent fact of `customerId` (`ConsentRecord.consented` picks the one in force).
    public func consentFacts(customerId: String) async throws(StoreError) -> [Fact] {
        do {
            return try await pool.withConnection { connection in
                try connection.query(
                    """
                    SELECT \(FactRows.columns) FROM public.facts
                    WHERE schema_version = $1 AND kind = 'consent' AND customer_id = $2 ORDER BY position
                    """, [.int64(Int64(FactStore.version)), .text(customerId)], name: "consent of customer")
                    .facts()
            }
        } catch {
            throw StoreError(error)
        }
    }

    // MARK: - Consumption outbox

    /// A consumption request waiting for (or given) an answer: an `apple.consumption` item of the
    /// outbox (`ConsumptionOutbox`, Migrations/0011) read as the responder needs it.
    public struct OutboxItem: Sendable, Equatable {
        public var requestPosition: Int64
        public var subscription: SubscriptionKey
        public var transactionId: String
        public var requestedAt: EpochMillis
        public var deadline: EpochMillis
        public var status: String
        public var attempts: Int
        public var nextAttemptAt: EpochMillis
        public var lastError: String?
        public var answerPosition: Int64?
        /// The outbox's item, to record attempts with (`Store.outbox.record`).
        public var item: LedgerStore.OutboxItem

        public init?(_ item: LedgerStore.OutboxItem) {
            guard let key = item.payload.text("subscription").flatMap(SubscriptionKey.init(text:)),
                  let tx = item.payload.text("transactionId"), let requestedAt = item.payload.int64("requestedAt"),
                  let deadline = item.payload.int64("deadline") else { return nil }
            self.item = item
            requestPosition = item.causePosition
            subscription = key
            transactionId = tx
            self.requestedAt = requestedAt
            self.deadline = deadline
            status = item.status.rawValue
            attempts = item.attempts
            nextAttemptAt = item.nextAttemptAt
            lastError = item.lastError
            answerPosition = item.answerPosition
        }
    }

    /// Takes up every CONSUMPTION_REQUEST (an `apple.v2` `consumption_request` fact) signed at or
    /// after `since` that the outbox does not hold: the append transaction already enqueues each
    /// request recorded within `ConsumptionOutbox.lookback` of its signing, so this is for
    /// operators answering older ones (a history import). Returns how many were added.
    @discardableResult
    public func enqueueConsumptionRequests(signedSince since: EpochMillis, now: EpochMillis) async throws(StoreError) -> Int {
        do {
            return try await pool.withConnection { connection in
                let facts = try connection.query(
                    """
                    SELECT \(FactRows.columns) FROM public.facts f
                    WHERE f.schema_version = $1 AND f.kind = 'consumption_request' AND f.origin = 'apple.v2'
                      AND f.signed_at >= $2 AND f.subscription IS NOT NULL AND f.transaction_id IS NOT NULL
                      AND NOT EXISTS (SELECT 1 FROM outbox_items o WHERE o.consumer = $3 AND o.cause_position = f.position)
                    ORDER BY f.position
                    """, [.int64(Int64(FactStore.version)), .int64(since), .text(ConsumptionOutbox.name)],
                    name: "consumption requests not in the outbox").facts()
                // The same drafts the append derives, but aged from now (they are taken up now).
                let drafts = facts.compactMap { f -> OutboxItemDraft? in
                    guard let key = f.subscription, let tx = f.transactionId else { return nil }
                    return ConsumptionOutbox.draft(position: f.position, subscription: key.text, transactionId: tx,
                                                   requestedAt: f.signedAt, recordedAt: now)
                }
                try OutboxDerivation.insert(drafts, consumer: ConsumptionOutbox.consumer, on: connection)
                return drafts.count
            }
        } catch {
            throw StoreError(error)
        }
    }

    /// Every consumption item (tests, operators), by request position.
    public func consumptionOutbox() async throws(StoreError) -> [OutboxItem] {
        do {
            return try await pool.withConnection { connection in
                try connection.query(
                    "SELECT \(Outbox.columns) FROM outbox_items WHERE consumer = $1 ORDER BY cause_position, id",
                    [.text(ConsumptionOutbox.name)], name: "consumption outbox").rows.compactMap { OutboxItem(try Outbox.decode($0)) }
            }
        } catch {
            throw StoreError(error)
        }
    }

    /// The `consumption_request` fact stored at `position` (nil when there is none).
    public func consumptionRequestFact(position: Int64) async throws(StoreError) -> Fact? {
        do {
            return try await pool.withConnection { connection in
                try connection.query(
                    """
                    SELECT \(FactRows.columns) FROM public.facts
                    WHERE schema_version = $1 AND position = $2 AND kind = 'consumption_request' ORDER BY ordinal LIMIT 1
                    """, [.int64(Int64(FactStore.version)), .int64(position)], name: "consumption request fact")
                    .facts().first
            }
        } catch {
            throw StoreError(error)
        }
    }

    private func execute(_ sql: String, _ parameters: [PostgresValue], name: String) async throws(StoreError) {
        do {
            _ = try await pool.withConnection { connection in
                try connection.query(sql, parameters, name: name)
                return 0
            }
        } catch {
            throw StoreError(error)
        }
    }
}

/// A job's advisory lock, held on its own connection until `release()`.
public final class HeldLock: Sendable {
    public let job: ReconciliationStore.Job
    /// Closed with this object when a holder forgets `release()`: that releases the lock too.
    private let connection: Mutex<Connection?>

    init(job: ReconciliationStore.Job, connection: Connection) {
        self.job = job
        self.connection = Mutex(connection)
    }

    /// Releases the lock (off the cooperative pool: libpq blocks). Closing the connection would
    /// release it too, so a lock can never outlive its holder.
    public func release() async {
        guard let held = take() else { return }
        let key = job.lockKey
        _ = try? await BlockingWork.run {
            _ = try? held.query("SELECT pg_advisory_unlock($1)", [.int64(key)], name: "release job lock")
            return 0
        }
    }

    private func take() -> Connection? {
        connection.withLock { held in
            defer { held = nil }
            return held
        }
    }
}
