import Foundation
import LedgerCore
internal import Postgres

// MARK: - Declaring a consumer

/// One kind of outbox work: "do this once for every cause the log commits, retry on a schedule,
/// record every attempt and the answer". The kernel's one outbox (table `outbox_items`,
/// Migrations/0011) keeps the items; the consumer says which items a batch of committed events
/// causes and how to retry them.
///
/// How to add a consumer (a slice, e.g. outbound webhooks):
/// 1. Write `static let myConsumer = OutboxConsumer(name: "my.slice", ordered: …, schedule: …) { batch in … }`
///    in the slice's store folder. `derive` is pure: from the batch's events and facts it returns
///    `.enqueue` drafts (a stable `id` per cause, so deriving twice inserts once) and, when the
///    consumer records answers as its own event types, `.settle` for those events.
/// 2. Add it to `OutboxConsumer.registered` (below): the list `Store.Configuration.outboxConsumers`
///    defaults to. That is all the append path and the catch-up need.
/// 3. Work the items: `store.outbox.run(consumer:work:)` in a lifecycle service of the
///    ServiceGroup (one per consumer; any number of instances), or `claim` + `record` by hand.
///    `work` answers `.delivered`, `.failed` (retried on the schedule; `retryAfter` honoured) or
///    `.gaveUp`; the outbox appends the matching `outbox/*` event, which settles the row.
/// 4. Operators: `store.outbox.replay(…)` / `replayExhausted(…)`; `/metrics` shows
///    `ledger_outbox_items{consumer,status}` and the oldest pending item's age.
///
/// Guarantees: an item is written by the transaction that commits its cause's facts (the append,
/// or the catch-up that derives them after a failure), so it exists iff its cause committed. State
/// changes are ledger events applied to the row in the transaction that stores them, so the table
/// is a projection of the log. Volume: one event per attempt (a delivery that succeeds at once is
/// one event; the schedule bounds the rest), none while an item waits.
public struct OutboxConsumer: Sendable {
    /// Stable: stored with every item and event (`ledger:outbox:<name>` stream).
    public let name: String
    /// Per ordering key, one at a time in cause order: an item is not claimable while an earlier
    /// item of its key is pending (done or exhausted ones no longer hold it back).
    public var ordered: Bool
    public var schedule: RetrySchedule
    /// How long a claim keeps other instances off an item (the work must finish within it).
    public var leaseMillis: EpochMillis
    /// The items (and settlements) one committed batch causes. Must be deterministic: it runs
    /// again over the same events when the catch-up derives them.
    public let derive: @Sendable (OutboxBatch) -> [OutboxEffect]

    public init(name: String, ordered: Bool = false, schedule: RetrySchedule = .standard, leaseMillis: EpochMillis = 300_000,
                derive: @escaping @Sendable (OutboxBatch) -> [OutboxEffect]) {
        precondition(!name.isEmpty && !name.contains(":"), "an outbox consumer's name is non-empty and has no ':'")
        self.name = name
        self.ordered = ordered
        self.schedule = schedule
        self.leaseMillis = leaseMillis
        self.derive = derive
    }

    /// Every consumer the ledger runs; `Store.Configuration.outboxConsumers` defaults to it.
    public static var registered: [OutboxConsumer] { [ConsumptionOutbox.consumer, WebhookOutbox.consumer] }
}

/// A committed batch's new events (position order) and their facts.
public struct OutboxBatch: Sendable {
    public let events: [RecordedEvent]
    public let facts: [Fact]
}

/// What a batch does to the outbox.
public enum OutboxEffect: Sendable, Equatable {
    case enqueue(OutboxItemDraft)
    /// The consumer's own answer event at `position` settles item `id`.
    case settle(id: String, status: OutboxItemStatus, position: Int64, attempts: Int?, error: String?)
}

public struct OutboxItemDraft: Sendable, Equatable {
    public var id: String
    public var orderingKey: String
    public var payload: JSONValue
    public var causePosition: Int64
    /// When the cause was recorded (the item's age starts there).
    public var createdAt: EpochMillis
    /// Not attempted before this time (0: at once).
    public var notBefore: EpochMillis
    /// Orders the items of one key caused by the same position (an ordered consumer's claim takes
    /// a key's items by cause position, then this, then id): e.g. webhook events that took effect
    /// one after the other but were learned by one batch.
    public var sequence: Int

    public init(id: String, orderingKey: String, payload: JSONValue, causePosition: Int64, createdAt: EpochMillis, notBefore: EpochMillis = 0,
                sequence: Int = 0) {
        self.id = id
        self.sequence = sequence
        self.orderingKey = orderingKey
        self.payload = payload
        self.causePosition = causePosition
        self.createdAt = createdAt
        self.notBefore = notBefore
    }
}

public enum OutboxItemStatus: String, Sendable, Equatable, CaseIterable, Codable {
    case pending, done, exhausted
}

/// When to try again: `delays[i]` after failed attempt i+1; after the last delay's attempt fails
/// the item is exhausted. `jitter` spreads each delay by ±that fraction (0…1); a receiver's
/// `Retry-After` is honoured when it asks for longer, up to `retryAfterCap` or what is left of the
/// schedule (all the delays still to come), whichever is shorter — a receiver cannot park an item
/// for years.
public struct RetrySchedule: Sendable, Equatable {
    public var delays: [EpochMillis]
    public var jitter: Double

    public init(delays: [EpochMillis], jitter: Double = 0.1) {
        precondition(delays.allSatisfy { $0 >= 0 } && (0...1).contains(jitter), "delays are non-negative, jitter within 0…1")
        self.delays = delays
        self.jitter = jitter
    }

    /// 30 s, 2 min, 10 min, 1 h, 6 h, 24 h: seven attempts over about a day and a half.
    public static let standard = RetrySchedule(delays: [30_000, 120_000, 600_000, 3_600_000, 21_600_000, 86_400_000])

    public var maxAttempts: Int { delays.count + 1 }

    /// The longest wait a receiver's `Retry-After` can ask for: a day.
    public static let retryAfterCap: EpochMillis = 86_400_000

    /// The time of the next attempt after `attempt` (1-based) failed at `now`; nil: give up.
    /// `random` in 0…1 picks the jitter (tests fix it).
    public func nextAttempt(after attempt: Int, now: EpochMillis, retryAfter: EpochMillis? = nil, random: Double = .random(in: 0...1)) -> EpochMillis? {
        guard attempt >= 1, attempt <= delays.count else { return nil }
        let base = Double(delays[attempt - 1])
        let spread = base * jitter * (2 * min(max(random, 0), 1) - 1)
        let scheduled = now + max(EpochMillis((base + spread).rounded()), 0)
        guard let retryAfter else { return scheduled }
        let remaining = delays[(attempt - 1)...].reduce(0, +)
        return max(scheduled, min(retryAfter, now + min(Self.retryAfterCap, remaining)))
    }
}

// MARK: - Items and answers

public struct OutboxItem: Sendable, Equatable {
    public var consumer: String
    public var id: String
    public var orderingKey: String
    public var payload: JSONValue
    public var causePosition: Int64
    public var status: OutboxItemStatus
    /// Attempts made in the current generation.
    public var attempts: Int
    /// Replays so far (each starts a generation with its own attempts).
    public var generation: Int
    public var nextAttemptAt: EpochMillis
    public var lastError: String?
    /// The event that settled it (delivered, exhausted or the consumer's answer).
    public var answerPosition: Int64?
    public var createdAt: EpochMillis

    /// Its ordering key up to the first `|` (all of it without one): the share of delivery slots
    /// it counts against (`Outbox.run`'s `perPartition`). Webhooks key items `<endpoint>|…`, so a
    /// partition is an endpoint. The claim computes the same with `split_part(ordering_key, '|', 1)`.
    public var partition: String {
        orderingKey.firstIndex(of: "|").map { String(orderingKey[..<$0]) } ?? orderingKey
    }
}

/// What one attempt came to.
public enum OutboxAttemptResult: Sendable, Equatable {
    /// The receiver took it; `answer` is what it said (stored in the `outbox/delivered` event).
    case delivered(answer: JSONValue)
    /// It may pass: retried on the consumer's schedule (no later than the receiver's
    /// `retryAfter`, an absolute time), exhausted after the last attempt.
    case failed(error: String, retryAfter: EpochMillis? = nil)
    /// Retrying cannot help (or the consumer's own deadline passed): exhausted now.
    case gaveUp(error: String)
    /// Retry at exactly `at` (a consumer with its own schedule, e.g. Apple's consumption window).
    case retry(error: String, at: EpochMillis)
    /// The consumer stored its own answer event at `position` (its `derive` settles the item).
    case answered(position: Int64)
}

/// One consumer's queue, for `/metrics` and operators.
public struct OutboxStatus: Sendable, Equatable {
    public var consumer: String
    public var counts: [OutboxItemStatus: Int]
    /// How long the oldest pending item has waited since its cause was recorded (0: none).
    public var oldestPendingAgeMillis: EpochMillis
}

/// Why an outbox operation could not be done.
public enum OutboxError: Error, Sendable, Equatable, CustomStringConvertible {
    case unknownConsumer(String, known: [String])

    public var description: String {
        switch self {
        case .unknownConsumer(let name, let known):
            return "unknown outbox consumer '\(name)'; registered: \(known.joined(separator: ", ")) (add it to OutboxConsumer.registered)"
        }
    }
}

// MARK: - Derivation (inside the transaction that commits the facts)

/// Applies committed batches to `outbox_items`: the kernel's `outbox/*` events and every
/// consumer's effects. Runs in the append transaction (in the facts' savepoint, so the items
/// and the facts commit or roll back together) and in the facts catch-up.
struct OutboxDerivation: Sendable {
    let consumers: [OutboxConsumer]

    static let none = OutboxDerivation(consumers: [])

    func apply(_ events: [RecordedEvent], facts: [Fact], on connection: Connection) throws {
        guard !events.isEmpty else { return }
        for event in events where event.event.source == .ledger && Self.kernelTypes.contains(event.event.type) {
            try applyKernelEvent(event, on: connection)
        }
        guard !consumers.isEmpty else { return }
        let batch = OutboxBatch(events: events, facts: facts)
        for consumer in consumers {
            var drafts: [OutboxItemDraft] = []
            for effect in consumer.derive(batch) {
                switch effect {
                case .enqueue(let draft): drafts.append(draft)
                case .settle(let id, let status, let position, let attempts, let error):
                    try Self.update(consumer: consumer.name, id: id, status: status, attempts: attempts, generation: nil, nextAttemptAt: nil,
                                    error: error, answerPosition: position, position: position, on: connection)
                }
            }
            try Self.insert(drafts, consumer: consumer, on: connection)
        }
    }

    static let kernelTypes: Set<String> = [LedgerEventType.outboxAttemptFailed, LedgerEventType.outboxDelivered,
                                           LedgerEventType.outboxExhausted, LedgerEventType.outboxRequeued]

    private func applyKernelEvent(_ event: RecordedEvent, on connection: Connection) throws {
        guard let value = try? JSONDecoder().decode(JSONValue.self, from: event.event.payload),
              let consumer = value.text("consumer"), let item = value.text("item"),
              let generation = value.int64("generation") else {
            throw StoreError.corrupt("\(event.event.type) at position \(event.position) names no consumer, item and generation")
        }
        let attempt = value.int64("attempt").map(Int.init)
        let p = event.position
        switch event.event.type {
        case LedgerEventType.outboxAttemptFailed:
            try Self.update(consumer: consumer, id: item, status: .pending, attempts: attempt, generation: Int(generation),
                            nextAttemptAt: value.int64("nextAttemptAt") ?? 0, error: value.text("error"), answerPosition: nil, position: p, on: connection)
        case LedgerEventType.outboxDelivered:
            try Self.update(consumer: consumer, id: item, status: .done, attempts: attempt, generation: Int(generation),
                            nextAttemptAt: nil, error: nil, answerPosition: p, position: p, on: connection)
        case LedgerEventType.outboxExhausted:
            try Self.update(consumer: consumer, id: item, status: .exhausted, attempts: attempt, generation: Int(generation),
                            nextAttemptAt: nil, error: value.text("error"), answerPosition: p, position: p, on: connection)
        case LedgerEventType.outboxRequeued:
            try Self.update(consumer: consumer, id: item, status: .pending, attempts: 0, generation: Int(generation),
                            nextAttemptAt: value.int64("at") ?? 0, error: nil, answerPosition: nil, position: p, clearAnswer: true, on: connection)
        default:
            break
        }
    }

    /// Sets the row from one event; `last_position < position` makes applying it twice a no-op.
    static func update(consumer: String, id: String, status: OutboxItemStatus, attempts: Int?, generation: Int?, nextAttemptAt: EpochMillis?,
                       error: String?, answerPosition: Int64?, position: Int64, clearAnswer: Bool = false, on connection: Connection) throws {
        // Prepared: one per attempt recorded, and planning it cost as much as running it.
        try connection.queryPrepared(
            """
            UPDATE outbox_items SET status = $3, attempts = coalesce($4, attempts), generation = coalesce($5, generation),
                   next_attempt_at = coalesce($6, next_attempt_at), last_error = $7,
                   answer_position = CASE WHEN $10 THEN NULL ELSE coalesce($8, answer_position) END,
                   last_position = $9, lease_until = NULL
            WHERE consumer = $1 AND id = $2 AND last_position < $9
            """,
            [.text(consumer), .text(id), .text(status.rawValue), attempts.map { .int32(Int32(clamping: $0)) } ?? .null,
             generation.map { .int32(Int32(clamping: $0)) } ?? .null, .optional(nextAttemptAt), .optional(error.map { String($0.prefix(2000)) }),
             .optional(answerPosition), .int64(position), .bool(clearAnswer)],
            name: "outbox item step")
    }

    static func insert(_ drafts: [OutboxItemDraft], consumer: OutboxConsumer, on connection: Connection) throws {
        guard !drafts.isEmpty else { return }
        try connection.query(
            """
            INSERT INTO outbox_items (consumer, id, ordering_key, ordered, payload, cause_position, next_attempt_at, last_position, created_at,
                                      sequence)
            SELECT $1, d.id, d.key, $2, d.payload, d.cause, d.not_before, d.cause, d.created, d.sequence
            FROM unnest($3::text[], $4::text[], $5::jsonb[], $6::bigint[], $7::bigint[], $8::bigint[], $9::int4[])
                 AS d(id, key, payload, cause, not_before, created, sequence)
            ON CONFLICT (consumer, id) DO NOTHING
            """,
            [.text(consumer.name), .bool(consumer.ordered),
             .array(drafts.map { .text($0.id) }, of: .text), .array(drafts.map { .text($0.orderingKey) }, of: .text),
             .array(drafts.map { .jsonb($0.payload.canonicalJSON()) }, of: .jsonb),
             .array(drafts.map { .int64($0.causePosition) }, of: .int8), .array(drafts.map { .int64($0.notBefore) }, of: .int8),
             .array(drafts.map { .int64($0.createdAt) }, of: .int8),
             .array(drafts.map { .int32(Int32(clamping: $0.sequence)) }, of: .int4)],
            name: "outbox enqueue")
    }
}

// MARK: - Working the queue

/// The outbox's API (`Store.outbox`): claim due items, record attempts, replay, report.
public struct Outbox: Sendable {
    let pool: ConnectionPool
    let events: EventStore
    public let consumers: [OutboxConsumer]

    init(pool: ConnectionPool, events: EventStore, consumers: [OutboxConsumer]) {
        self.pool = pool
        self.events = events
        self.consumers = consumers
    }

    public func consumer(_ name: String) throws(OutboxError) -> OutboxConsumer {
        guard let consumer = consumers.first(where: { $0.name == name }) else {
            throw .unknownConsumer(name, known: consumers.map(\.name))
        }
        return consumer
    }

    static let columns = """
        consumer, id, ordering_key, payload, cause_position, status, attempts, generation, next_attempt_at, last_error, answer_position, created_at
        """

    /// Leases up to `limit` due items of `consumer` to the caller: another claimer skips them (FOR
    /// UPDATE SKIP LOCKED, then the lease) until their attempt is recorded or the consumer's lease
    /// runs out. Items of an ordered consumer wait for the earlier pending items of their key.
    /// Partitions (`OutboxItem.partition`) share the limit: each one with due items gets an equal
    /// part, oldest due first, and what one cannot use goes to the others, so one endpoint's
    /// backlog never starves another's first event; with fewer slots than partitions, those whose
    /// oldest due item has waited longest go first.
    /// `room`: how many items a partition may get at most (the caller's cap of attempts in flight
    /// less those it has). The items of a partition with no room are never read: one statement
    /// finds the partitions with due items (two index probes each, Migrations/0028), and each
    /// claim reads one partition in its own index order, so a claim's cost does not grow with the
    /// queue of a partition it skips.
    public func claim(_ consumer: OutboxConsumer, limit: Int, now: EpochMillis,
                      room: @escaping @Sendable (String) -> Int = { _ in .max }) async throws(StoreError) -> [OutboxItem] {
        let limit = max(limit, 1)
        do {
            return try await pool.withConnection { connection in
                var open = try Self.duePartitions(consumer.name, now: now, on: connection)
                var left = Dictionary(uniqueKeysWithValues: open.map { ($0, max(room($0), 0)) })
                open.removeAll { left[$0] == 0 }
                var claimed: [OutboxItem] = []
                while claimed.count < limit, !open.isEmpty {
                    let share = max((limit - claimed.count) / open.count, 1)
                    var more: [String] = []
                    for partition in open where claimed.count < limit {
                        let asked = min(share, limit - claimed.count, left[partition]!)
                        let got = try Self.claim(consumer, partition: partition, limit: asked, now: now, on: connection)
                        claimed += got
                        left[partition]! -= got.count
                        if got.count == asked, left[partition]! > 0 { more.append(partition) }
                    }
                    open = more
                }
                return claimed.sorted { ($0.nextAttemptAt, $0.causePosition, $0.id) < ($1.nextAttemptAt, $1.causePosition, $1.id) }
            }
        } catch {
            throw StoreError(error)
        }
    }

    /// The partitions of `consumer` with a due pending item, the one whose oldest due item has
    /// waited longest first (it goes first when there are fewer slots than partitions): a walk of
    /// the partition index (two probes per partition that has pending items), not of the items.
    /// Both statements of a claim are prepared once per connection: planning the walk cost more
    /// than running it.
    static func duePartitions(_ consumer: String, now: EpochMillis, on connection: Connection) throws -> [String] {
        try connection.queryPrepared(
            """
            WITH RECURSIVE partitions(p) AS (
                (SELECT split_part(ordering_key, '|', 1) FROM outbox_items
                 WHERE consumer = $1 AND status = 'pending' ORDER BY split_part(ordering_key, '|', 1) LIMIT 1)
                UNION ALL
                SELECT (SELECT split_part(n.ordering_key, '|', 1) FROM outbox_items n
                        WHERE n.consumer = $1 AND n.status = 'pending' AND split_part(n.ordering_key, '|', 1) > partitions.p
                        ORDER BY split_part(n.ordering_key, '|', 1) LIMIT 1)
                FROM partitions WHERE partitions.p IS NOT NULL
            )
            SELECT p FROM (
                SELECT p, (SELECT d.next_attempt_at FROM outbox_items d
                           WHERE d.consumer = $1 AND split_part(d.ordering_key, '|', 1) = partitions.p AND d.status = 'pending'
                             AND d.next_attempt_at <= $2
                           ORDER BY d.next_attempt_at LIMIT 1) AS oldest
                FROM partitions WHERE p IS NOT NULL
            ) due
            WHERE oldest IS NOT NULL
            ORDER BY oldest, p
            """, [.text(consumer), .int64(now)], name: "outbox due partitions").rows.map { try $0.decode(String.self, "p") }
    }

    /// Leases up to `limit` due items of one partition, in (next attempt, cause, sequence, id)
    /// order: the index's order, so the scan stops at its limit.
    static func claim(_ consumer: OutboxConsumer, partition: String, limit: Int, now: EpochMillis, on connection: Connection) throws -> [OutboxItem] {
        try connection.queryPrepared(
            """
            UPDATE outbox_items o SET lease_until = $3 + $4
            FROM (
                SELECT i.consumer, i.id FROM outbox_items i
                WHERE i.consumer = $1 AND split_part(i.ordering_key, '|', 1) = $5 AND i.status = 'pending' AND i.next_attempt_at <= $3
                  AND (i.lease_until IS NULL OR i.lease_until <= $3)
                  AND NOT (i.ordered AND EXISTS (
                      SELECT 1 FROM outbox_items e
                      WHERE e.consumer = i.consumer AND e.ordering_key = i.ordering_key AND e.ordered AND e.status = 'pending'
                        AND e.cause_position <= i.cause_position
                        AND (e.cause_position, e.sequence, e.id) < (i.cause_position, i.sequence, i.id)))
                ORDER BY i.next_attempt_at, i.cause_position, i.sequence, i.id
                LIMIT $2 FOR UPDATE SKIP LOCKED
            ) c
            WHERE o.consumer = c.consumer AND o.id = c.id
            RETURNING \(Self.columns.split(separator: ",").map { "o." + $0.trimmingCharacters(in: .whitespacesAndNewlines) }.joined(separator: ", "))
            """, [.text(consumer.name), .int64(Int64(limit)), .int64(now), .int64(consumer.leaseMillis), .text(partition)],
            name: "outbox claim").rows.map(Self.decode)
    }

    /// Records an attempt of a claimed item as a ledger event (which settles or reschedules the
    /// row in its append transaction) and returns where it was stored. An attempt recorded twice
    /// (same generation and number) is stored once.
    @discardableResult
    public func record(_ item: OutboxItem, _ result: OutboxAttemptResult, now: EpochMillis,
                       random: Double = .random(in: 0...1)) async throws(StoreError) -> AppendOutcome? {
        let consumer: OutboxConsumer
        do { consumer = try self.consumer(item.consumer) } catch { throw .invalidEvent(error.description) }
        let attempt = item.attempts + 1
        var body: [String: JSONValue] = [
            "consumer": .string(item.consumer), "item": .string(item.id), "generation": .integer(Int64(item.generation)),
            "attempt": .integer(Int64(attempt)),
        ]
        let type: String
        switch result {
        case .answered(let position):
            // The consumer's own event settles it; a duplicate answer (stored before) settles it here.
            try await settleFromAnswer(item, position: position)
            return nil
        case .delivered(let answer):
            type = LedgerEventType.outboxDelivered
            body["answer"] = answer
        case .gaveUp(let error):
            type = LedgerEventType.outboxExhausted
            body["error"] = .string(StorableText.clean(error, limit: 2000))
        case .retry(let error, let at):
            type = LedgerEventType.outboxAttemptFailed
            body["error"] = .string(StorableText.clean(error, limit: 2000))
            body["nextAttemptAt"] = .integer(at)
        case .failed(let error, let retryAfter):
            body["error"] = .string(StorableText.clean(error, limit: 2000))
            if let next = consumer.schedule.nextAttempt(after: attempt, now: now, retryAfter: retryAfter, random: random) {
                type = LedgerEventType.outboxAttemptFailed
                body["nextAttemptAt"] = .integer(next)
                if let retryAfter { body["retryAfter"] = .integer(retryAfter) }
            } else {
                type = LedgerEventType.outboxExhausted
            }
        }
        func append(_ body: [String: JSONValue]) async throws(StoreError) -> AppendOutcome {
            try await events.append(Self.attemptEvent(item, type: type, now: now, extra: body))
        }
        do {
            return try await append(body)
        } catch where !error.isUnavailable {
            // The record itself was refused (something in the answer the database cannot hold):
            // the attempt is recorded without its answer, so the schedule still advances and the
            // item is never re-sent for ever.
            body["answer"] = nil
            body["error"] = .string("the attempt's record was refused and is kept without its answer: "
                                    + StorableText.clean("\(error)", limit: 500))
            return try await append(body)
        }
    }

    /// Gives up at once every pending item of `partition` (a webhook endpoint) that no worker has
    /// in flight: one `outbox/exhausted` event each, saying why, appended `chunk` at a time so the
    /// head lock is never held for one huge batch. An item in flight settles by its own attempt;
    /// its worker then finds the same state (the caller changed it first). A racing worker's own
    /// give-up of the same attempt has the same dedupe key, so each attempt is recorded once.
    /// Returns the ids given up; `replay` requeues them.
    @discardableResult
    public func giveUpPending(_ consumer: String, partition: String, reason: String, now: EpochMillis,
                              chunk: Int = 500) async throws(StoreError) -> [String] {
        let items = try await select(
            """
            SELECT \(Self.columns) FROM outbox_items
            WHERE consumer = $1 AND status = 'pending' AND split_part(ordering_key, '|', 1) = $2
              AND (lease_until IS NULL OR lease_until <= $3)
            ORDER BY cause_position, id
            """, [.text(consumer), .text(partition), .int64(now)], name: "outbox pending of a partition")
        var given: [String] = []
        for start in stride(from: 0, to: items.count, by: max(chunk, 1)) {
            let batch = items[start..<min(start + max(chunk, 1), items.count)]
            let events = batch.map { item in
                Self.attemptEvent(item, type: LedgerEventType.outboxExhausted, now: now,
                                  extra: ["error": .string(StorableText.clean(reason, limit: 2000))])
            }
            _ = try await self.events.append(events)
            given += batch.map(\.id)
        }
        return given
    }

    /// The ledger event recording attempt `attempts + 1` of `item`.
    static func attemptEvent(_ item: OutboxItem, type: String, now: EpochMillis, extra: [String: JSONValue]) -> NewEvent {
        let attempt = item.attempts + 1
        var body: [String: JSONValue] = [
            "consumer": .string(item.consumer), "item": .string(item.id), "generation": .integer(Int64(item.generation)),
            "attempt": .integer(Int64(attempt)),
        ]
        body.merge(extra) { $1 }
        let payload = JSONValue.object(body).canonicalJSON()
        return NewEvent(
            streamId: StreamId.ledgerOutbox(consumer: item.consumer).text,
            dedupeKey: DedupeKey.outbox(consumer: item.consumer, item: item.id, generation: item.generation, step: "a\(attempt)"),
            source: .ledger, type: type, environment: nil, signedAt: now, payload: payload, raw: payload)
    }

    /// The consumer's answer event at `position` exists (stored now or before): mark the item done
    /// unless that event was applied already.
    func settleFromAnswer(_ item: OutboxItem, position: Int64) async throws(StoreError) {
        try await execute { connection in
            try OutboxDerivation.update(consumer: item.consumer, id: item.id, status: .done, attempts: nil, generation: nil, nextAttemptAt: nil,
                                        error: nil, answerPosition: position, position: position, on: connection)
        }
    }

    /// Enqueues items that no committed batch causes (an operator's request, e.g. a webhook `test`
    /// event): the same insert as the derivation's, so an id already queued is kept as it is.
    public func enqueue(_ drafts: [OutboxItemDraft], consumer name: String) async throws(StoreError) {
        let consumer: OutboxConsumer
        do { consumer = try self.consumer(name) } catch { throw .invalidEvent(error.description) }
        try await execute { connection in try OutboxDerivation.insert(drafts, consumer: consumer, on: connection) }
    }

    /// Requeues the settled items `ids` of `consumer` (done or exhausted; pending ones are already
    /// queued): each gets an `outbox/requeued` event and starts a new generation due at `now`.
    /// Returns the ids requeued.
    @discardableResult
    public func replay(_ consumer: String, ids: [String], requestedBy: String, now: EpochMillis) async throws(StoreError) -> [String] {
        let items = try await select(
            "SELECT \(Self.columns) FROM outbox_items WHERE consumer = $1 AND id = ANY($2) AND status <> 'pending' ORDER BY cause_position, id",
            [.text(consumer), .array(ids.map { .text($0) }, of: .text)], name: "outbox replay items")
        return try await requeue(items, requestedBy: requestedBy, now: now)
    }

    /// Requeues every exhausted item of `consumer`.
    @discardableResult
    public func replayExhausted(_ consumer: String, requestedBy: String, now: EpochMillis) async throws(StoreError) -> [String] {
        let items = try await select(
            "SELECT \(Self.columns) FROM outbox_items WHERE consumer = $1 AND status = 'exhausted' ORDER BY cause_position, id",
            [.text(consumer)], name: "outbox exhausted items")
        return try await requeue(items, requestedBy: requestedBy, now: now)
    }

    private func requeue(_ items: [OutboxItem], requestedBy: String, now: EpochMillis) async throws(StoreError) -> [String] {
        guard !items.isEmpty else { return [] }
        let events = items.map { item -> NewEvent in
            let generation = item.generation + 1
            let payload = JSONValue.object([
                "consumer": .string(item.consumer), "item": .string(item.id), "generation": .integer(Int64(generation)),
                "requestedBy": .string(requestedBy), "at": .integer(now),
            ]).canonicalJSON()
            return NewEvent(
                streamId: StreamId.ledgerOutbox(consumer: item.consumer).text,
                dedupeKey: DedupeKey.outbox(consumer: item.consumer, item: item.id, generation: generation, step: "requeued"),
                source: .ledger, type: LedgerEventType.outboxRequeued, environment: nil, signedAt: now, payload: payload, raw: payload)
        }
        _ = try await self.events.append(events)
        return items.map(\.id)
    }

    /// Items of `consumer` (with `status` when given), in cause order.
    public func items(_ consumer: String, status: OutboxItemStatus? = nil, limit: Int = 1000) async throws(StoreError) -> [OutboxItem] {
        try await select(
            "SELECT \(Self.columns) FROM outbox_items WHERE consumer = $1 AND ($2::text IS NULL OR status = $2) ORDER BY cause_position, id LIMIT $3",
            [.text(consumer), .optional(status?.rawValue), .int64(Int64(max(limit, 1)))], name: "outbox items")
    }

    /// One item, or nil.
    public func item(_ consumer: String, id: String) async throws(StoreError) -> OutboxItem? {
        try await select("SELECT \(Self.columns) FROM outbox_items WHERE consumer = $1 AND id = $2", [.text(consumer), .text(id)],
                         name: "outbox item").first
    }

    /// Counts by status and the oldest pending age of every registered consumer (and any other
    /// consumer with rows), in name order.
    public func statuses(now: EpochMillis) async throws(StoreError) -> [OutboxStatus] {
        let registered = consumers.map(\.name)
        let rows: [(String, String, Int, EpochMillis?)]
        do {
            rows = try await pool.withConnection { connection in
                try connection.query(
                    """
                    SELECT consumer, status, count(*) AS n, min(created_at) FILTER (WHERE status = 'pending') AS oldest
                    FROM outbox_items GROUP BY consumer, status
                    """, name: "outbox statuses").rows.map {
                    (try $0.decode(String.self, "consumer"), try $0.decode(String.self, "status"), Int(try $0.decode(Int64.self, "n")),
                     try $0.decode(Int64?.self, "oldest"))
                }
            }
        } catch {
            throw StoreError(error)
        }
        var byName: [String: OutboxStatus] = [:]
        for name in registered { byName[name] = OutboxStatus(consumer: name, counts: [:], oldestPendingAgeMillis: 0) }
        for (consumer, status, n, oldest) in rows {
            var s = byName[consumer] ?? OutboxStatus(consumer: consumer, counts: [:], oldestPendingAgeMillis: 0)
            if let status = OutboxItemStatus(rawValue: status) { s.counts[status] = n }
            if let oldest { s.oldestPendingAgeMillis = max(now - oldest, 0) }
            byName[consumer] = s
        }
        return byName.keys.sorted().map { byName[$0]! }
    }

    /// Works `consumer`'s queue until the calling task is cancelled: keeps up to `concurrency`
    /// attempts in flight as child tasks of this one, claiming more as they finish (no attempt
    /// waits for a slower one claimed with it), at most `perPartition` of them for one partition
    /// (`OutboxItem.partition`: a webhook endpoint), so a receiver that hangs until its timeout
    /// holds only its own share of the slots. With nothing due it looks again every
    /// `pollInterval`. Errors (database down) go to `onError` and the loop carries on after the
    /// poll interval.
    ///
    /// The loop is the one place that claims, so it does little per attempt:
    /// - A slot is the receiver's: it frees when `work` returns, and the attempt's record (an
    ///   append, which waits for the group commit behind the ingest's appends: ~40 ms under load,
    ///   four times the attempt) runs as a task of its own; records in flight together commit as
    ///   one batch. At most `unrecordedPerSlot` per slot wait to be recorded. Until its record
    ///   commits the item stays leased and pending, so an ordered key's next item waits for it,
    ///   and a crash before the record sends it again after the lease, as before.
    /// - Claims are at least `claimSpacing` apart while attempts run: each claim fills every slot
    ///   freed since the last. A claim per finished attempt (a walk of the partitions and an
    ///   update, ~5 ms under load, one item each) kept the loop busy for as long as the attempts
    ///   took.
    public func run(
        _ consumer: OutboxConsumer, concurrency: Int = 4, perPartition: Int? = nil, pollInterval: Duration = .seconds(1),
        clock: @escaping @Sendable () -> EpochMillis = { LedgerClock.system.now() },
        onError: @escaping @Sendable (StoreError) -> Void = { _ in },
        work: @escaping @Sendable (OutboxItem) async -> OutboxAttemptResult
    ) async {
        let slots = max(concurrency, 1)
        let cap = min(max(perPartition ?? slots, 1), slots)
        let unrecordedCap = slots * Self.unrecordedPerSlot
        /// A child's result: an attempt was made, its record committed (or failed), the claim
        /// spacing or the poll interval passed.
        enum Wake: Sendable { case sent(OutboxItem, OutboxAttemptResult), recorded, spaced, tick }
        await withTaskGroup(of: Wake.self) { group in
            var inFlight: [String: Int] = [:]
            var running = 0
            var recording = 0
            var ticking = false
            var spacing = false
            var lastClaim: ContinuousClock.Instant?
            while !Task.isCancelled {
                let free = min(slots - running, unrecordedCap - running - recording)
                let now = ContinuousClock.now
                if free > 0, running > 0, let lastClaim, now - lastClaim < Self.claimSpacing {
                    if !spacing {
                        spacing = true
                        group.addTask {
                            try? await Task.sleep(until: lastClaim + Self.claimSpacing, clock: .continuous)
                            return .spaced
                        }
                    }
                } else if free > 0 {
                    lastClaim = now
                    let room = inFlight.mapValues { cap - $0 }
                    var claimed: [OutboxItem] = []
                    do throws(StoreError) {
                        claimed = try await claim(consumer, limit: free, now: clock()) { room[$0] ?? cap }
                    } catch {
                        onError(error)
                    }
                    for item in claimed {
                        inFlight[item.partition, default: 0] += 1
                        running += 1
                        group.addTask { .sent(item, await work(item)) }
                    }
                }
                // Wait for an attempt or a record to finish, the spacing or the poll interval.
                if !ticking {
                    ticking = true
                    group.addTask {
                        try? await Task.sleep(for: pollInterval)
                        return .tick
                    }
                }
                guard let wake = await group.next() else { continue }
                switch wake {
                case .sent(let item, let result):
                    running -= 1
                    inFlight[item.partition, default: 1] -= 1
                    if inFlight[item.partition] == 0 { inFlight[item.partition] = nil }
                    recording += 1
                    group.addTask {
                        do { try await self.record(item, result, now: clock()) } catch { onError(StoreError(error)) }
                        return .recorded
                    }
                case .recorded:
                    recording -= 1
                case .spaced:
                    spacing = false
                case .tick:
                    ticking = false
                }
            }
            // Stopping: an attempt that returns from here on is still recorded, as when the
            // record ran in the attempt's own task (otherwise a delivered event would be sent
            // again once its lease ran out).
            group.cancelAll()
            while let wake = await group.next() {
                guard case .sent(let item, let result) = wake else { continue }
                do { try await record(item, result, now: clock()) } catch { onError(StoreError(error)) }
            }
        }
    }

    /// Attempts made but not yet recorded, per delivery slot, before the loop claims no more.
    static let unrecordedPerSlot = 4

    /// The least time between two claims while attempts run.
    static let claimSpacing: Duration = .milliseconds(10)

    private func select(_ sql: String, _ parameters: [PostgresValue], name: String) async throws(StoreError) -> [OutboxItem] {
        do {
            return try await pool.withConnection { connection in
                try connection.query(sql, parameters, name: name).rows.map(Self.decode)
            }
        } catch {
            throw StoreError(error)
        }
    }

    private func execute(_ body: @escaping @Sendable (Connection) throws -> Void) async throws(StoreError) {
        do {
            _ = try await pool.withConnection { connection in
                try body(connection)
                return 0
            }
        } catch {
            throw StoreError(error)
        }
    }

    static func decode(_ row: Row) throws -> OutboxItem {
        let statusText = try row.decode(String.self, "status")
        guard let status = OutboxItemStatus(rawValue: statusText) else {
            throw StoreError.corrupt("outbox item has unknown status \(statusText); check that Migrations/0011 is applied")
        }
        let payload = try row.decode(Data.self, "payload")
        return OutboxItem(
            consumer: try row.decode(String.self, "consumer"), id: try row.decode(String.self, "id"),
            orderingKey: try row.decode(String.self, "ordering_key"),
            payload: (try? JSONDecoder().decode(JSONValue.self, from: payload)) ?? .null,
            causePosition: try row.decode(Int64.self, "cause_position"),
            status: status,
            attempts: Int(try row.decode(Int32.self, "attempts")), generation: Int(try row.decode(Int32.self, "generation")),
            nextAttemptAt: try row.decode(Int64.self, "next_attempt_at"), lastError: try row.decode(String?.self, "last_error"),
            answerPosition: try row.decode(Int64?.self, "answer_position"), createdAt: try row.decode(Int64.self, "created_at"))
    }
}
