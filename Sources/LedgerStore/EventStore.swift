/// LedgerStore owns the ledger's SQL: the append-only event log (append, read a stream, read all),
/// the migrator, and the hooks through which live projections join the append transaction.
import Foundation
import LedgerCore
internal import Postgres
import Synchronization

/// Runs inside the append transaction, after the batch's new (non-duplicate) events and their
/// facts are inserted, with those events in position order and their facts. Live projections use
/// it so a 200 means their effect is durable. Each hook runs in its own SAVEPOINT: if it throws,
/// its writes are rolled back, the events still commit (they are verified evidence and must not
/// be lost), and the failure is reported through `EventStore`'s `onHookFailure` and metrics so the
/// projection can be stopped and caught up later from its checkpoint. Hooks do not run for a batch
/// whose facts the catch-up derives instead (the facts checkpoint was behind).
///
/// A hook may return an action to run once the transaction has committed (never after a
/// rollback): caches of what the tables hold (the live projection's fold snapshots) learn only
/// committed states that way.
protocol AppendHook: Sendable {
    var name: String { get }
    /// `batch.facts` is empty when the append could not record them (the catch-up derives them).
    func didAppend(_ batch: AppendedBatch, in connection: Connection) throws -> AfterCommit?
    /// False for a hook that reads only the events: it runs even when the catch-up derives the
    /// batch's facts instead (projections need the facts; the plaintext-nonce mark does not).
    var needsFacts: Bool { get }
    /// True when the events must not commit without the hook's writes: its failure fails the append
    /// (the callers are told, nothing is stored) instead of being reported and caught up later.
    var isEssential: Bool { get }
}

extension AppendHook {
    var needsFacts: Bool { true }
    var isEssential: Bool { false }
}

/// Run by the writer after the append transaction committed.
typealias AfterCommit = @Sendable () -> Void

/// The database pool's counters, for `/metrics`.
public struct ConnectionStatistics: Sendable, Equatable {
    public var maxConnections = 0
    public var open = 0
    public var idle = 0
    public var inUse = 0
    public var waiting = 0
    public var opened = 0
    public var discarded = 0
    public var timeouts = 0

    public init() {}

    init(_ s: PoolStatistics) {
        (maxConnections, open, idle, inUse, waiting) = (s.maxConnections, s.open, s.idle, s.inUse, s.waiting)
        (opened, discarded, timeouts) = (s.opened, s.discarded, s.timeouts)
    }
}

/// A hook that threw: its effects for these events were rolled back; the events were committed.
public struct HookFailure: Error, Sendable, Equatable, CustomStringConvertible {
    public var hook: String
    /// The positions the hook was given (first…last of the batch's new events).
    public var positions: ClosedRange<Int64>
    public var message: String

    public var description: String {
        "append hook \(hook) failed for positions \(positions.lowerBound)…\(positions.upperBound) (events were stored; the hook's writes were rolled back): \(message)"
    }
}

/// Counters for `/metrics`. Batch sizes are a histogram: `batchSizeCounts[i]` batches had at most
/// `batchSizeBounds[i]` events (and more than the previous bound); the last count is "more".
public struct EventStoreMetrics: Sendable, Equatable {
    public static let batchSizeBounds = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    /// New events committed.
    public var appended = 0
    /// Appends answered with an existing event.
    public var duplicates = 0
    /// Committed append transactions.
    public var batches = 0
    public var batchSizeCounts = [Int](repeating: 0, count: EventStoreMetrics.batchSizeBounds.count + 1)
    /// Events in committed batches (duplicates included): the histogram's sum.
    public var batchedEvents = 0
    /// Events the database refused (each caller got `.rejected`).
    public var rejected = 0
    /// Events answered `.unavailable`.
    public var unavailable = 0
    /// Failed batches retried in halves to isolate the event that failed them.
    public var splits = 0
    /// Hook failures by hook name.
    public var hookFailures: [String: Int] = [:]
    /// Append calls waiting for the writer right now.
    public var queued = 0
    public var pool = ConnectionStatistics()
}

/// The event log.
///
/// Appends are group-committed: concurrent `append` calls queue up; a single writer takes every
/// request waiting (up to `maxBatch` events), writes them with one `append_events()` call in one
/// transaction, commits, and only then resumes each caller with its outcome. One request's events
/// are all-or-nothing. If a batch fails for a reason of its own (invalid JSON, a constraint), the
/// batch is retried in halves until the offending request is alone, so one poisoned event fails
/// only its own caller.
///
/// Reading is gap-free by construction: positions are assigned under the head-row lock, which the
/// appending transaction holds until it commits, so no transaction can commit a position below
/// one already visible. `readAll(after:)` from a checkpoint therefore never skips a late commit.
public final class EventStore: Sendable {
    let pool: ConnectionPool
    /// Opens the writers' own sessions.
    let connections: Connections
    public let maxBatch: Int
    private let hooks: [any AppendHook]
    /// Outbox items the batch's facts cause (and `outbox/*` steps), written with the facts.
    private let outbox: OutboxDerivation
    private let onHookFailure: (@Sendable (HookFailure) -> Void)?
    /// The appends waiting for a writer, and the writers' threads.
    private let queue: AppendQueue
    private let counters = Mutex(EventStoreMetrics())
    /// Each writer's own connection, outside the pool: the group commit never queues behind
    /// reads, `/readyz` probes or exports for a pooled connection, so a flood of those cannot turn
    /// webhooks into 503s. Opened lazily on the writer's thread, replaced when it breaks.
    private let writerConnections: Mutex<[Connection?]>

    fileprivate struct Request: Sendable {
        let events: [NewEvent]
        /// Each event's facts (`FactDecoder`), derived on the caller's thread before it queues.
        let facts: [[Fact]]
        let complete: @Sendable (Result<[AppendOutcome], StoreError>) -> Void
    }

    init(
        pool: ConnectionPool, connections: Connections? = nil, hooks: [any AppendHook] = [], outbox: OutboxDerivation = .none, maxBatch: Int = 512, writers: Int = 1,
        linger: Duration = .microseconds(500),
        onHookFailure: (@Sendable (HookFailure) -> Void)? = nil
    ) {
        precondition(maxBatch > 0, "maxBatch must be positive")
        precondition(writers > 0, "at least one writer")
        self.writerConnections = Mutex(Array(repeating: nil, count: writers))
        queue = AppendQueue(writers: writers, maxBatch: maxBatch, linger: EpochTime.seconds(linger))
        self.pool = pool
        self.connections = connections ?? Connections(conninfo: pool.conninfo)
        self.hooks = hooks
        self.outbox = outbox
        self.maxBatch = maxBatch
        self.onHookFailure = onHookFailure
    }

    public var metrics: EventStoreMetrics {
        var snapshot = counters.withLock { $0 }
        snapshot.queued = queue.waiting
        snapshot.pool = ConnectionStatistics(pool.statistics)
        return snapshot
    }

    // MARK: append

    /// Appends one event; a duplicate (same stream and dedupe key) answers the stored event's
    /// position with `duplicate: true`. Returns only after the commit that holds the event.
    public func append(_ event: NewEvent) async throws(StoreError) -> AppendOutcome {
        try await append([event])[0]
    }

    /// Appends events all-or-nothing in one transaction; outcomes are in input order. A key
    /// repeated within `events` is stored once and answered as a duplicate the second time.
    public func append(_ events: [NewEvent]) async throws(StoreError) -> [AppendOutcome] {
        if events.isEmpty { return [] }
        for event in events { try Self.validate(event) }
        let facts = events.map(FactDecoder.facts(of:))
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<[AppendOutcome], StoreError>, Never>) in
            enqueue(Request(events: events, facts: facts, complete: { continuation.resume(returning: $0) }))
        }
        return try result.get()
    }

    /// What the database would also refuse, caught early with a clearer message.
    static func validate(_ event: NewEvent) throws(StoreError) {
        if event.streamId.isEmpty { throw .invalidEvent("streamId is empty; every event needs a stream (see StreamId)") }
        if event.dedupeKey.isEmpty { throw .invalidEvent("dedupeKey is empty; derive one deterministically from the message") }
        if event.type.isEmpty { throw .invalidEvent("type is empty") }
        for (field, value) in [("streamId", event.streamId), ("dedupeKey", event.dedupeKey), ("type", event.type), ("environment", event.environment ?? "")]
        where value.utf8.contains(0) {
            throw .invalidEvent("\(field) contains a NUL byte, which PostgreSQL text cannot store")
        }
    }

    private func enqueue(_ request: Request) {
        guard queue.admit(request, startWriter: { slot in self.startWriter(slot) }) else {
            request.complete(.failure(.unavailable("the ledger is shutting down; nothing was stored — retry")))
            return
        }
    }

    /// Graceful stop, last of the service's parts: refuses new appends (their callers are told to
    /// retry), lets every queued append commit and be answered, then closes the writers' connections.
    public func finish() async {
        await queue.close()
        writerConnections.withLock { connections in connections = connections.map { _ in nil } }
    }

    /// A writer on a dedicated thread, not a Swift task or a GCD queue: every libpq call blocks
    /// its thread, and the group commit waits for more appends between batches; on the
    /// cooperative pool (two threads on this machine's two cores) that would stall unrelated
    /// tasks. The thread sleeps on the queue's condition until appends arrive and ends after
    /// idling (`AppendQueue.idleExit`) or once the queue is closed and drained; the next append
    /// starts it again, on the connection it kept.
    private func startWriter(_ slot: Int) {
        let thread = Thread { [self] in
            while let batch = queue.next(slot) { write(batch, writer: slot) }
        }
        thread.name = "ledger.append\(slot)"
        thread.start()
    }

    /// Runs `body` on writer `writer`'s own connection, (re)connecting when there is none or it
    /// broke (a restarted server): the first batch after an outage pays the connect, none fails for it.
    private func withWriterConnection<T>(_ writer: Int, _ body: (Connection) throws -> T) throws -> T {
        let cached = writerConnections.withLock { $0[writer] }
        let connection: Connection
        if let cached, !cached.isBroken, cached.isAliveWhenIdle() {
            connection = cached
        } else {
            connection = try connections.open()
            writerConnections.withLock { $0[writer] = connection }
        }
        do {
            return try body(connection)
        } catch {
            if connection.isBroken { writerConnections.withLock { $0[writer] = nil } }
            throw error
        }
    }

    private func write(_ batch: [Request], writer: Int) {
        do {
            let (outcomes, reported, committed) = try withWriterConnection(writer) { connection in
                try connection.transaction { connection in try self.insert(batch, on: connection) }
            }
            for action in committed { action() }
            record(batch: batch, outcomes: outcomes, hookFailures: reported)
            for failure in reported { onHookFailure?(failure) }
            for (request, outcome) in zip(batch, outcomes) { request.complete(.success(outcome)) }
        } catch {
            let storeError = StoreError(error)
            if batch.count > 1 && !storeError.isUnavailable {
                // Something in this batch is unacceptable; find it without failing the rest.
                counters.withLock { $0.splits += 1 }
                let middle = batch.count / 2
                write(Array(batch[..<middle]), writer: writer)
                write(Array(batch[middle...]), writer: writer)
                return
            }
            let events = batch.reduce(0) { $0 + $1.events.count }
            counters.withLock {
                if storeError.isUnavailable { $0.unavailable += events } else { $0.rejected += events }
            }
            for request in batch { request.complete(.failure(storeError)) }
        }
    }

    private func insert(_ batch: [Request], on connection: Connection) throws -> ([[AppendOutcome]], [HookFailure], [AfterCommit]) {
        let events = batch.flatMap(\.events)
        let result = try connection.query(
            """
            SELECT ordinal, event_position, duplicate, event_recorded_at
            FROM append_events($1, $2, $3, $4, $5, $6, $7, $8, $9)
            """,
            [
                .array(events.map { .text($0.streamId) }, of: .text),
                .array(events.map { .text($0.dedupeKey) }, of: .text),
                .array(events.map { .text($0.source.rawValue) }, of: .text),
                .array(events.map { .text($0.type) }, of: .text),
                .array(events.map { .optional($0.environment) }, of: .text),
                .array(events.map { $0.signedAt.map { .timestamptz(millis: $0) } ?? .null }, of: .timestamptz),
                .array(events.map { $0.expiresAt.map { .timestamptz(millis: $0) } ?? .null }, of: .timestamptz),
                .array(events.map { .jsonb($0.payload) }, of: .jsonb),
                .array(events.map { .bytea($0.raw) }, of: .bytea),
            ],
            name: "append_events")
        guard result.count == events.count else {
            throw StoreError.corrupt("append_events answered \(result.count) rows for \(events.count) events")
        }
        // The events are in; their facts, outbox items and live projections are the projector's
        // to write (the service role inherits none of its rights: Migrations/0016).
        try connection.asProjector()
        var flat: [AppendOutcome] = []
        flat.reserveCapacity(events.count)
        for row in result.rows {
            flat.append(AppendOutcome(
                position: try row.decode(Int64.self, "event_position"),
                duplicate: try row.decode(Bool.self, "duplicate"),
                recordedAt: try row.decode(Int64.self, "event_recorded_at")))
        }

        var hookFailures: [HookFailure] = []
        var afterCommit: [AfterCommit] = []
        let eventFacts = batch.flatMap(\.facts)
        var fresh: [(RecordedEvent, [Fact])] = []
        for ((event, facts), outcome) in zip(zip(events, eventFacts), flat) where !outcome.duplicate {
            let recorded = RecordedEvent(position: outcome.position, recordedAt: outcome.recordedAt, event: event)
            fresh.append((recorded, facts.enumerated().map { i, f in
                f.placed(position: outcome.position, ordinal: i, recordedAt: outcome.recordedAt, streamId: event.streamId)
            }))
        }
        fresh.sort { $0.0.position < $1.0.position }
        if let first = fresh.first?.0, let last = fresh.last?.0 {
            let facts = fresh.flatMap(\.1)
            var recorded = false
            do {
                // In a savepoint: facts that cannot be stored must not cost the events (verified
                // evidence); the catch-up then stops on them with the error recorded.
                // The outbox's items are written with the facts they derive from: both commit
                // or neither (then the catch-up derives both), so an item exists iff its cause did.
                let outbox = self.outbox
                recorded = try connection.savepoint { connection in
                    guard try FactStore.recordAppended(facts, first: first.position, last: last.position, on: connection) else { return false }
                    try outbox.apply(fresh.map(\.0), facts: facts, on: connection)
                    return true
                }
            } catch {
                if connection.isBroken { throw error }
                hookFailures.append(HookFailure(hook: "facts", positions: first.position...last.position, message: String(describing: error)))
            }
            let appended = AppendedBatch(events: fresh.map(\.0), facts: recorded ? facts : [])
            defer { afterCommit += appended.afterCommit }
            for hook in hooks where recorded || !hook.needsFacts {
                do {
                    if let action = try connection.savepoint({ connection in try hook.didAppend(appended, in: connection) }) {
                        afterCommit.append(action)
                    }
                } catch {
                    // A broken connection cannot commit the events either; an essential hook's
                    // writes must commit with them: let the batch fail.
                    if connection.isBroken || hook.isEssential { throw error }
                    hookFailures.append(HookFailure(hook: hook.name, positions: first.position...last.position, message: String(describing: error)))
                }
            }
        }

        var outcomes: [[AppendOutcome]] = []
        var offset = 0
        for request in batch {
            outcomes.append(Array(flat[offset..<offset + request.events.count]))
            offset += request.events.count
        }
        return (outcomes, hookFailures, afterCommit)
    }

    private func record(batch: [Request], outcomes: [[AppendOutcome]], hookFailures: [HookFailure]) {
        let size = batch.reduce(0) { $0 + $1.events.count }
        let duplicates = outcomes.reduce(0) { $0 + $1.filter(\.duplicate).count }
        counters.withLock { metrics in
            metrics.batches += 1
            metrics.batchedEvents += size
            metrics.appended += size - duplicates
            metrics.duplicates += duplicates
            let bucket = EventStoreMetrics.batchSizeBounds.firstIndex { size <= $0 } ?? EventStoreMetrics.batchSizeBounds.count
            metrics.batchSizeCounts[bucket] += 1
            for failure in hookFailures { metrics.hookFailures[failure.hook, default: 0] += 1 }
        }
    }

    // MARK: read

    static let columns = "position, stream_id, dedupe_key, source, type, environment, signed_at, expires_at, payload, raw, recorded_at"

    /// Every event of one stream, in position order.
    public func read(stream: String) async throws(StoreError) -> [RecordedEvent] {
        try await select(
            "SELECT \(Self.columns) FROM events WHERE stream_id = $1 ORDER BY position",
            [.text(stream)], name: "read stream")
    }

    /// Up to `limit` events with position greater than `position`, in order, with no gaps: the
    /// next page starts after the last position returned.
    public func readAll(after position: Int64, limit: Int) async throws(StoreError) -> [RecordedEvent] {
        guard limit > 0 else { throw .invalidEvent("readAll limit must be positive, got \(limit)") }
        return try await select(
            "SELECT \(Self.columns) FROM events WHERE position > $1 ORDER BY position LIMIT $2",
            [.int64(position), .int64(Int64(limit))], name: "read all")
    }

    /// The last committed position (0 for an empty log).
    public func headPosition() async throws(StoreError) -> Int64 {
        do {
            return try await pool.withConnection { connection in
                try connection.query("SELECT position FROM event_head", name: "head position").first?.decode(Int64.self, "position") ?? 0
            }
        } catch {
            throw StoreError(error)
        }
    }

    func select(_ sql: String, _ parameters: [PostgresValue], name: String) async throws(StoreError) -> [RecordedEvent] {
        do {
            return try await pool.withConnection { connection in
                try connection.query(sql, parameters, name: name).rows.map(Self.decode)
            }
        } catch {
            throw StoreError(error)
        }
    }

    static func decode(_ row: Row) throws -> RecordedEvent {
        let sourceText = try row.decode(String.self, "source")
        guard let source = EventSource(rawValue: sourceText) else {
            throw StoreError.corrupt("event at position \((try? row.decode(Int64.self, "position")) ?? -1) has unknown source \(sourceText)")
        }
        return RecordedEvent(
            position: try row.decode(Int64.self, "position"),
            recordedAt: try row.decode(Int64.self, "recorded_at"),
            event: NewEvent(
                streamId: try row.decode(String.self, "stream_id"),
                dedupeKey: try row.decode(String.self, "dedupe_key"),
                source: source,
                type: try row.decode(String.self, "type"),
                environment: try row.decode(String?.self, "environment"),
                signedAt: try row.decode(Int64?.self, "signed_at"),
                expiresAt: try row.decode(Int64?.self, "expires_at"),
                payload: try row.decode(Data.self, "payload"),
                raw: try row.decode(Data.self, "raw")))
    }
}

/// The appends waiting for a writer, guarded by one condition variable that the writers sleep on:
/// an append wakes a sleeping writer (or starts one), and a writer lingering for more appends
/// before its next commit wakes as soon as they arrive, never polling.
private final class AppendQueue: @unchecked Sendable {
    /// A writer with nothing to do for this long ends its thread (a store nobody appends to
    /// holds no thread); the next append starts one again.
    static let idleExit: TimeInterval = 5

    private let condition = NSCondition()
    private let writers: Int
    private let maxBatch: Int
    private let linger: TimeInterval
    // Guarded by `condition`.
    private var requests: [EventStore.Request] = []
    /// Writer slots without a thread.
    private var freeSlots: [Int]
    /// Threads waiting for appends.
    private var sleeping = 0
    /// How many requests each slot's last batch took (the linger aims for as many again).
    private var lastBatch: [Int]
    /// Set by `close()`: new appends are refused (retry later) while queued ones complete.
    private var closed = false
    private var closers: [CheckedContinuation<Void, Never>] = []

    init(writers: Int, maxBatch: Int, linger: TimeInterval) {
        self.writers = writers
        self.maxBatch = maxBatch
        self.linger = linger
        freeSlots = Array((0..<writers).reversed())
        lastBatch = Array(repeating: 0, count: writers)
    }

    var waiting: Int {
        condition.lock()
        defer { condition.unlock() }
        return requests.count
    }

    /// Queues `request` and wakes (or starts, through `startWriter`) a writer; false once closed.
    func admit(_ request: EventStore.Request, startWriter: (Int) -> Void) -> Bool {
        condition.lock()
        if closed {
            condition.unlock()
            return false
        }
        requests.append(request)
        // Wakes a sleeping writer, and a lingering one (it takes the batch as soon as it is as
        // large as its last); starts a writer when none sleeps and a slot is free.
        condition.broadcast()
        let start = sleeping > 0 ? nil : freeSlots.popLast()
        condition.unlock()
        if let start { startWriter(start) }
        return true
    }

    /// The next batch for the writer in `slot`; nil when its thread should end (idle, or closed
    /// and drained).
    func next(_ slot: Int) -> [EventStore.Request]? {
        condition.lock()
        defer { condition.unlock() }
        while requests.isEmpty {
            if closed { return retire(slot) }
            sleeping += 1
            let woken = condition.wait(until: Date(timeIntervalSinceNow: Self.idleExit))
            sleeping -= 1
            if !woken && requests.isEmpty { return retire(slot) }
        }
        // The callers just answered usually append again at once; if fewer requests are waiting
        // than were just served, give them a moment to arrive so the next commit carries them too
        // (PostgreSQL's commit_delay idea, bounded by `linger`).
        if lastBatch[slot] > 1 && !closed {
            let deadline = Date(timeIntervalSinceNow: linger)
            while requests.count < lastBatch[slot] && !closed && condition.wait(until: deadline) {}
        }
        var taken: [EventStore.Request] = []
        var events = 0
        while let first = requests.first, taken.isEmpty || events + first.events.count <= maxBatch {
            taken.append(requests.removeFirst())
            events += first.events.count
        }
        lastBatch[slot] = taken.count
        return taken
    }

    /// Ends the writer in `slot` (called holding the lock); the last one out answers `close()`.
    private func retire(_ slot: Int) -> [EventStore.Request]? {
        freeSlots.append(slot)
        lastBatch[slot] = 0
        if freeSlots.count == writers && requests.isEmpty {
            for closer in closers { closer.resume() }
            closers = []
        }
        return nil
    }

    /// Refuses new appends and returns once every queued one was written and its writer ended.
    func close() async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            condition.lock()
            closed = true
            if freeSlots.count == writers && requests.isEmpty {
                condition.unlock()
                done.resume()
                return
            }
            closers.append(done)
            condition.broadcast()
            condition.unlock()
        }
    }
}
