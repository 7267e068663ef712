import Crypto
import Foundation
import LedgerCore
internal import Postgres

/// The outbox consumer that delivers webhook events (`webhooks`). Its items are not derived from a
/// batch by `derive` — deriving an event needs the subscription's fold before and after, which
/// only a projection reads — but by `WebhookEventsProjection`, in the same transaction that stores
/// the event rows (the append's, the catch-up's or a rebuild's catch-up). Ordered per endpoint and
/// subscription (`ordering_key` = `<endpoint>|<subscription>`): a failing endpoint never holds up
/// another, a subscription's later event waits for its earlier one.
public enum WebhookOutbox {
    public static let name = "webhooks"

    /// Svix's schedule: at once, then 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h (eight attempts over
    /// about 28 hours), each delay spread by ±10 %; a receiver's `Retry-After` honoured when longer.
    public static let schedule = RetrySchedule(delays: [5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000])

    /// Registered in `OutboxConsumer.registered`. Tests hand `Store.Configuration.outboxConsumers`
    /// one with a compressed schedule (`consumer(schedule:)`).
    public static let consumer = consumer(schedule: schedule)

    public static func consumer(schedule: RetrySchedule, leaseMillis: EpochMillis = 120_000) -> OutboxConsumer {
        OutboxConsumer(name: name, ordered: true, schedule: schedule, leaseMillis: leaseMillis) { _ in [] }
    }

    /// `<endpoint>/<event id>`: one item per event and endpoint, the same on every derivation.
    public static func itemId(endpoint: String, event: String) -> String { endpoint + "/" + event }

    /// The endpoint and event an item id names.
    public static func parse(itemId: String) -> (endpoint: String, event: String)? {
        guard let slash = itemId.firstIndex(of: "/") else { return nil }
        return (String(itemId[..<slash]), String(itemId[itemId.index(after: slash)...]))
    }
}

/// The webhook events of the committed facts (`projections.webhook_events`, Migrations/0021), live
/// in the append transaction. For each batch, per subscription it touches: the events of the fold
/// of its facts up to each position the batch brings, minus those of the fold before
/// (`WebhookDerivation`, by identity), stamped with the first position that derives them; the
/// ledger's refund-case answers among the batch's facts (`refund_case.decided`). Each new row is
/// enqueued in the outbox for every enabled endpoint whose filters take it, in this transaction.
///
/// A rebuild (`load`) recomputes every row — the same ids, positions and sequences — into
/// `webhook_events_next` and enqueues nothing, so it never sends anything again; the swap's
/// catch-up of what arrived meanwhile enqueues like the live path, and the outbox's
/// `ON CONFLICT DO NOTHING` on `<endpoint>/<event id>` keeps one item when the live table's
/// projection enqueued it first.
struct WebhookEventsProjection: Projection {
    let projector: Projector

    var names: [ProjectionName] { [.webhooks] }
    var isLive: Bool { true }

    func tables(of name: ProjectionName) -> [ProjectionTable] { name == .webhooks ? [.webhookEvents] : [] }

    /// A batch without facts (the outbox's own `outbox/*` events, admin events) touches no
    /// subscription and answers no refund case: nothing to derive, no query made. Otherwise the
    /// events come from the batch's one fold (`BatchFold`): per change point of each subscription,
    /// the fold up to it — no read of the subscription's history, no refold of it. Subscriptions
    /// order facts may join take `derive` over all their facts, as the catch-up does.
    func applyLive(_ batch: AppendedBatch, folder: SharedFold, to names: Set<ProjectionName>, on connection: Connection) throws -> AfterCommit? {
        guard names.contains(.webhooks), !batch.facts.isEmpty, let first = batch.first, let last = batch.last else { return nil }
        let fold = try batch.fold(with: folder, on: connection)
        let clock = projector.clock()
        var derived: [SubscriptionKey: [WebhookEvent]] = [:]
        var logs: [SubscriptionKey: WebhookWalkLog] = [:]
        let keys = fold.keys.sorted()
        if !keys.isEmpty {
            // A resumed walk derives only events after where it resumes: only those stored after
            // that time can be among them (the whole history's ids for a walk from the beginning).
            var after: [SubscriptionKey: EpochMillis] = [:]
            for key in keys { after[key] = fold.changes[key].map { Self.resumesAfter($0, clock: clock) } ?? .min }
            let known = try WebhookEventStore.ids(of: after, next: false, on: connection)
            for (key, change) in fold.changes {
                var seen = known[key.text] ?? []
                var events: [WebhookEvent] = []
                // Each point resumes the walk where the last one that its facts cannot change
                // stopped: a batch costs its change points, not the subscription's history.
                var log = change.walks ?? WebhookWalkLog(position: first - 1)
                for point in change.points {
                    if let effect = point.effect { log.forget(from: effect) }
                    for event in derivation.events(of: point.fold ?? change.after, now: min(clock, point.recordedAt),
                                                   position: point.position, log: &log)
                    where seen.insert(event.id).inserted {
                        events.append(event)
                    }
                }
                log.position = last
                logs[key] = log
                derived[key] = events
            }
            let full = fold.full.sorted()
            if !full.isEmpty {
                let (attached, candidates) = try FactStore.facts(of: full, upTo: last, on: connection)
                for key in full {
                    derived[key] = Self.derive(key, facts: attached[key] ?? [], candidates: candidates, after: first - 1,
                                               known: known[key.text] ?? [], derivation: derivation,
                                               catalogPeriods: projector.catalogPeriods, clock: clock)
                }
            }
        }
        // In key order, as the catch-up derives them: a position's sequence is the same on every path.
        var events = keys.flatMap { derived[$0] ?? [] }
        events += try decisions(in: first...last, on: connection)
        let inserted = try WebhookEventStore.insert(events, next: false, on: connection)
        try WebhookEventStore.enqueue(inserted, now: clock, on: connection)
        // Only now: a walk is remembered only when the events it derived are written.
        fold.walks.set(logs)
        return nil
    }

    /// The earliest time a walk of `change`'s points can resume after (`.min`: one walks from the
    /// beginning): every point forgets at least the walks its own facts can change, and resumes from
    /// the latest standing walk by its clock — never earlier than forgetting for the batch's
    /// earliest effect and resuming by its earliest clock.
    static func resumesAfter(_ change: SubscriptionChange, clock: EpochMillis) -> EpochMillis {
        guard var probe = change.walks else { return .min }
        if let effect = change.points.compactMap(\.effect).min() { probe.forget(from: effect) }
        let now = change.points.map { min(clock, $0.recordedAt) }.min() ?? clock
        return probe.resume(upTo: now).at ?? .min
    }

    var derivation: WebhookDerivation {
        WebhookDerivation(catalog: projector.catalog, expirySettle: projector.webhookExpirySettle,
                          makeId: { StandardWebhooks.messageId(for: $0) })
    }

    func apply(_ range: ClosedRange<Int64>, to names: Set<ProjectionName>, next: Bool, on connection: Connection) throws -> Int {
        guard names.contains(.webhooks) else { return 0 }
        let keys = try FactStore.subscriptions(touchedByPositions: range, on: connection).sorted()
        let clock = projector.clock()
        var events: [WebhookEvent] = []
        if !keys.isEmpty {
            let (attached, candidates) = try FactStore.facts(of: keys, upTo: range.upperBound, on: connection)
            let known = try WebhookEventStore.ids(of: keys, next: next, on: connection)
            for key in keys {
                events += Self.derive(key, facts: attached[key] ?? [], candidates: candidates, after: range.lowerBound - 1,
                                      known: known[key.text] ?? [], derivation: derivation,
                                      catalogPeriods: projector.catalogPeriods, clock: clock)
            }
        }
        events += try decisions(in: range, on: connection)
        let inserted = try WebhookEventStore.insert(events, next: next, on: connection)
        try WebhookEventStore.enqueue(inserted, now: clock, on: connection)
        return keys.count
    }

    /// The ledger's refund-case answers at `range` (a WeChat inquiry answer, an Apple consumption
    /// answer), with the state of the subscription they name when they name one.
    func decisions(in range: ClosedRange<Int64>, on connection: Connection) throws -> [WebhookEvent] {
        let answers = try connection.query(
            """
            SELECT \(FactRows.columns) FROM public.facts
            WHERE schema_version = $1 AND position BETWEEN $2 AND $3 AND origin = 'ledger' AND kind IN ('refund_answer', 'consumption_answer')
            ORDER BY position, ordinal
            """, [.int64(Int64(FactStore.version)), .int64(range.lowerBound), .int64(range.upperBound)], name: "refund answers in range")
            .facts()
        return answers.flatMap { derivation.decisions(in: [$0], subscription: nil, state: nil) }
    }

    /// The events of `key` first derived at positions after `after`: per position of its facts,
    /// the events of the fold of its facts up to there, evaluated when that position was recorded
    /// (`recordedAt`, or `clock` when earlier: a test replaying a lifecycle as it happened), that
    /// are not `known` (stored before, or derived at an earlier position of this walk). Evaluating
    /// at the recording time makes the events a function of the log alone, so a rebuild walking
    /// every position derives the same ids at the same positions; an expiry that time alone
    /// brought is derived by the next fact of its subscription.
    static func derive(_ key: SubscriptionKey, facts: [Fact], candidates: [Fact], after: Int64, known: Set<String>,
                       derivation: WebhookDerivation, catalogPeriods: [String: EpochMillis], clock: EpochMillis) -> [WebhookEvent] {
        // The candidates (unattached order facts of the whole batch or chunk) that can ever join
        // this subscription: those the fold of all its facts attaches. An order id, once the
        // subscription names it, stays named, so a fold up to any position attaches a subset of
        // these. Filtering once keeps each position's attach from scanning the chunk's, and makes
        // the positions walked this subscription's own (not another's in the same chunk), so the
        // live path and a rebuild, which chunk differently, stamp events at the same positions.
        var joinable: [Fact] = []
        if !candidates.isEmpty, !facts.isEmpty {
            let all = SubscriptionFold(key: key, facts: facts, catalogPeriods: catalogPeriods)
            if !all.orderIds.isEmpty {
                let attached = SubscriptionProjection.attach(candidates, to: all)
                let ids = attached.orderIds
                joinable = candidates.filter { ids.contains($0.transactionId ?? "") || ids.contains($0.orderAlias ?? "") }
            }
        }
        func fold(upTo p: Int64) -> SubscriptionFold? {
            let own = facts.filter { $0.position <= p }
            guard !own.isEmpty else { return nil }
            let fold = SubscriptionFold(key: key, facts: own, catalogPeriods: catalogPeriods)
            let joining = joinable.filter { $0.position <= p }
            return joining.isEmpty ? fold : SubscriptionProjection.attach(joining, to: fold)
        }
        var recorded: [Int64: EpochMillis] = [:]
        for f in facts + joinable where f.position > after { recorded[f.position] = max(recorded[f.position] ?? 0, f.recordedAt) }
        var known = known
        var out: [WebhookEvent] = []
        for p in recorded.keys.sorted() {
            guard let f = fold(upTo: p) else { continue }
            for event in derivation.events(of: f, now: min(clock, recorded[p]!), position: p) where known.insert(event.id).inserted {
                out.append(event)
            }
        }
        return out
    }

    /// Every event as of `load.head`, 500 subscriptions at a time, with the positions the live
    /// path gave them (each subscription walked position by position from its first fact).
    func load(_ names: Set<ProjectionName>, into load: BulkLoad) throws -> BulkLoad.Counts {
        let keys = try load.reader.query(
            "SELECT DISTINCT subscription FROM public.facts WHERE schema_version = $1 AND subscription IS NOT NULL AND position <= $2",
            [.int64(Int64(FactStore.version)), .int64(load.head)], name: "subscriptions with facts")
            .rows.compactMap { SubscriptionKey(text: try $0.decode(String.self, "subscription")) }.sorted()
        load.progress(0, keys.count)
        let now = projector.clock()
        var facts = 0
        for chunk in stride(from: 0, to: keys.count, by: 500) {
            let slice = Array(keys[chunk..<min(chunk + 500, keys.count)])
            let (attached, candidates) = try FactStore.facts(of: slice, upTo: load.head, on: load.reader)
            facts += attached.values.reduce(0) { $0 + $1.count }
            var events: [WebhookEvent] = []
            for key in slice {
                events += Self.derive(key, facts: attached[key] ?? [], candidates: candidates, after: 0, known: [], derivation: derivation,
                                      catalogPeriods: projector.catalogPeriods, clock: now)
            }
            try load.send(WebhookEventStore.rows(WebhookEventStore.sequenced(events)), to: .webhookEvents)
            load.progress(chunk + slice.count, keys.count)
        }
        if load.head > 0 {
            try load.send(WebhookEventStore.rows(WebhookEventStore.sequenced(try decisions(in: 1...load.head, on: load.reader))),
                          to: .webhookEvents)
        }
        return BulkLoad.Counts(facts: facts, units: keys.count)
    }
}

extension ProjectionTable {
    /// Migrations/0021, 0026.
    static let webhookEvents = ProjectionTable(
        name: "webhook_events", columns: WebhookEventStore.columns, statisticsColumns: "id, subscription, position, sequence",
        indexes: ["ALTER TABLE {table} ADD PRIMARY KEY (id)", "CREATE INDEX ON {table} (position, sequence)",
                  "CREATE INDEX ON {table} (subscription, effective_at)"])
}

/// A stored webhook event and its deliveries, for the admin routes.
public struct WebhookEventRecord: Sendable, Equatable {
    public var id: String
    public var subscription: String?
    public var type: String
    public var environment: String
    public var customerId: String?
    public var effectiveAt: EpochMillis
    public var position: Int64
    public var sequence: Int
    public var body: String
}

/// One attempt to deliver an event to an endpoint (`webhooks.attempts`).
public struct WebhookAttempt: Sendable, Equatable {
    public var endpoint: String
    public var eventId: String
    public var generation: Int
    public var attempt: Int
    public var at: EpochMillis
    public var status: Int?
    public var latencyMillis: Int64
    public var delivered: Bool
    public var excerpt: String?

    public init(endpoint: String, eventId: String, generation: Int, attempt: Int, at: EpochMillis, status: Int?, latencyMillis: Int64,
                delivered: Bool, excerpt: String?) {
        self.endpoint = endpoint
        self.eventId = eventId
        self.generation = generation
        self.attempt = attempt
        self.at = at
        self.status = status
        self.latencyMillis = latencyMillis
        self.delivered = delivered
        self.excerpt = excerpt.map { String($0.prefix(WebhookEventStore.excerptLimit)) }
    }
}

/// Per endpoint, for `/metrics`.
public struct WebhookEndpointQueue: Sendable, Equatable {
    public var endpoint: String
    public var pending: Int
    public var delivered: Int
    public var exhausted: Int
    /// Since the oldest undelivered event was derived (0: none).
    public var oldestUndeliveredMillis: EpochMillis
}

/// The SQL of webhook events, their outbox items and attempts (the webhooks slice's store file).
public struct WebhookEventStore: Sendable {
    let pool: ConnectionPool

    init(pool: ConnectionPool) { self.pool = pool }

    static let columns = "id, subscription, type, environment, customer_id, effective_at, position, sequence, body"
    /// Answers are kept to this many characters.
    public static let excerptLimit = 512

    static func table(next: Bool) -> String { next ? "projections.webhook_events_next" : "projections.webhook_events" }

    /// Sequences events (their order within a position), keeping the order they were derived in.
    static func sequenced(_ events: [WebhookEvent]) -> [(WebhookEvent, Int)] {
        var counts: [Int64: Int] = [:]
        return events.map { e in
            let n = counts[e.position, default: 0]
            counts[e.position] = n + 1
            return (e, n)
        }
    }

    static func rows(_ events: [(WebhookEvent, Int)]) -> [UInt8] {
        var out: [UInt8] = []
        for (e, sequence) in events {
            out.field(e.id); out.field(e.originalTransactionId == nil ? nil : e.subscriptionText); out.field(e.type.rawValue)
            out.field(e.environment); out.field(e.customerId); out.field(e.effectiveAt); out.field(e.position); out.field(sequence)
            out.field(String(decoding: e.bodyBytes, as: UTF8.self), last: true)
        }
        return out
    }

    /// The ids of the events of each subscription effective after its time (Migrations/0026), one
    /// index probe per subscription (FactStore's note on keyed batch reads).
    ///
    /// The range is closed (`<= k.until`, the largest time) on purpose: PostgreSQL cannot see the
    /// times inside the arrays, and estimates an open `effective_at > k.after` at a third of the
    /// subscription's rows but a closed range of two unknowns at half a percent. With the open
    /// one, a subscription holding most of the table (one customer tied and untied thousands of
    /// times) got a sequential scan of every event, about 2 ms per append, to find none.
    static func ids(of keys: [SubscriptionKey: EpochMillis], next: Bool, on connection: Connection) throws -> [String: Set<String>] {
        let sorted = keys.keys.sorted()
        var out: [String: Set<String>] = [:]
        for row in try connection.query(
            """
            SELECT w.subscription, w.id FROM unnest($1::text[], $2::int8[], $3::int8[]) AS k(sub, after, until)
            CROSS JOIN LATERAL (
                SELECT subscription, id FROM \(table(next: next))
                WHERE subscription = k.sub AND effective_at > k.after AND effective_at <= k.until OFFSET 0) w
            """,
            [.array(sorted.map { .text($0.text) }, of: .text), .array(sorted.map { .int64(keys[$0]!) }, of: .int8),
             .array(sorted.map { _ in .int64(.max) }, of: .int8)],
            name: "stored webhook event ids after").rows {
            out[try row.decode(String.self, "subscription"), default: []].insert(try row.decode(String.self, "id"))
        }
        return out
    }

    static func ids(of keys: [SubscriptionKey], next: Bool, on connection: Connection) throws -> [String: Set<String>] {
        var out: [String: Set<String>] = [:]
        for row in try connection.query("SELECT subscription, id FROM \(table(next: next)) WHERE subscription = ANY($1)",
                                         [.array(keys.map { .text($0.text) }, of: .text)], name: "stored webhook event ids").rows {
            out[try row.decode(String.self, "subscription"), default: []].insert(try row.decode(String.self, "id"))
        }
        return out
    }

    /// Stores the events not stored yet; returns those it stored, with their sequence.
    static func insert(_ events: [WebhookEvent], next: Bool, on connection: Connection) throws -> [(WebhookEvent, Int)] {
        guard !events.isEmpty else { return [] }
        let all = sequenced(events)
        let stored = try connection.query(
            """
            INSERT INTO \(table(next: next)) (\(columns))
            SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[], $8::int4[], $9::text[])
            ON CONFLICT (id) DO NOTHING
            RETURNING id
            """,
            [.array(all.map { .text($0.0.id) }, of: .text),
             .array(all.map { $0.0.originalTransactionId == nil ? .null : .text($0.0.subscriptionText) }, of: .text),
             .array(all.map { .text($0.0.type.rawValue) }, of: .text), .array(all.map { .text($0.0.environment) }, of: .text),
             .array(all.map { .optional($0.0.customerId) }, of: .text), .array(all.map { .int64($0.0.effectiveAt) }, of: .int8),
             .array(all.map { .int64($0.0.position) }, of: .int8), .array(all.map { .int32(Int32(clamping: $0.1)) }, of: .int4),
             .array(all.map { .text(String(decoding: $0.0.bodyBytes, as: UTF8.self)) }, of: .text)],
            name: "webhook events insert").rows.map { try $0.decode(String.self, "id") }
        let ids = Set(stored)
        return all.filter { ids.contains($0.0.id) }
    }

    /// One outbox item per event and enabled endpoint whose filters take it.
    static func enqueue(_ events: [(WebhookEvent, Int)], now: EpochMillis, on connection: Connection) throws {
        guard !events.isEmpty else { return }
        let endpoints = try connection.query(
            """
            SELECT name, array_to_json(event_types)::text AS event_types, array_to_json(environments)::text AS environments
            FROM webhooks.endpoints WHERE enabled ORDER BY name
            """, name: "enabled webhook endpoints").rows.map {
            (try $0.decode(String.self, "name"), try WebhookEndpointStore.list(try $0.decode(String?.self, "event_types")),
             try WebhookEndpointStore.list(try $0.decode(String?.self, "environments")))
        }
        guard !endpoints.isEmpty else { return }
        var drafts: [OutboxItemDraft] = []
        for (event, sequence) in events {
            for (name, types, environments) in endpoints {
                if let types, !types.contains(event.type.rawValue) { continue }
                if let environments, !environments.contains(event.environment) { continue }
                drafts.append(draft(event, endpoint: name, sequence: sequence, now: now))
            }
        }
        try OutboxDerivation.insert(drafts, consumer: WebhookOutbox.consumer, on: connection)
    }

    /// The item delivering `event` to `endpoint`: the body as first derived travels with it, so
    /// every attempt and replay sends the same bytes.
    public static func draft(_ event: WebhookEvent, endpoint: String, sequence: Int, now: EpochMillis) -> OutboxItemDraft {
        OutboxItemDraft(
            id: WebhookOutbox.itemId(endpoint: endpoint, event: event.id),
            orderingKey: endpoint + "|" + (event.originalTransactionId == nil ? "event:" + event.id : event.subscriptionText),
            payload: ["endpoint": .string(endpoint), "event": .string(event.id), "type": .string(event.type.rawValue), "body": event.body],
            causePosition: event.position, createdAt: now, sequence: sequence)
    }

    // MARK: reads and attempts

    /// Events in (position, sequence) order after the cursor `after` (position, sequence), with
    /// `position` within `positions` when given.
    /// `newestFirst`: descending, `after` then meaning the cursor below which the page starts
    /// (the auditor's page lists the newest first with the API's cursor format).
    public func events(after: (Int64, Int)?, limit: Int, positions: ClosedRange<Int64>? = nil,
                       newestFirst: Bool = false) async throws(StoreError) -> [WebhookEventRecord] {
        try await rows(
            newestFirst ? """
            SELECT \(Self.columns) FROM projections.webhook_events
            WHERE ($1::bigint IS NULL OR (position, sequence) < ($1, $2)) AND ($3::bigint IS NULL OR position BETWEEN $3 AND $4)
            ORDER BY position DESC, sequence DESC LIMIT $5
            """ : """
            SELECT \(Self.columns) FROM projections.webhook_events
            WHERE ($1::bigint IS NULL OR (position, sequence) > ($1, $2)) AND ($3::bigint IS NULL OR position BETWEEN $3 AND $4)
            ORDER BY position, sequence LIMIT $5
            """,
            [.optional(after?.0), .int32(Int32(clamping: after?.1 ?? 0)), .optional(positions?.lowerBound), .optional(positions?.upperBound),
             .int64(Int64(max(limit, 1)))])
    }

    /// The stored events among `ids`.
    public func events(ids: [String]) async throws(StoreError) -> [WebhookEventRecord] {
        try await rows("SELECT \(Self.columns) FROM projections.webhook_events WHERE id = ANY($1) ORDER BY position, sequence",
                       [.array(ids.map { .text($0) }, of: .text)])
    }

    /// The outbox item ids of `consumer` delivering any of `events` (to any endpoint, or `endpoint`).
    public func itemIds(events: [String], endpoint: String?) async throws(StoreError) -> [String] {
        try await query(
            """
            SELECT id FROM outbox_items WHERE consumer = $1 AND split_part(id, '/', 2) = ANY($2)
              AND ($3::text IS NULL OR split_part(id, '/', 1) = $3)
            ORDER BY cause_position, sequence, id
            """, [.text(WebhookOutbox.name), .array(events.map { .text($0) }, of: .text), .optional(endpoint)]) {
            try $0.decode(String.self, "id")
        }
    }

    /// The outbox item ids caused by positions `range`.
    public func itemIds(positions range: ClosedRange<Int64>, endpoint: String?) async throws(StoreError) -> [String] {
        try await query(
            """
            SELECT id FROM outbox_items WHERE consumer = $1 AND cause_position BETWEEN $2 AND $3
              AND ($4::text IS NULL OR split_part(id, '/', 1) = $4)
            ORDER BY cause_position, sequence, id
            """, [.text(WebhookOutbox.name), .int64(range.lowerBound), .int64(range.upperBound), .optional(endpoint)]) {
            try $0.decode(String.self, "id")
        }
    }

    /// The outbox items delivering `events`, per event.
    public func items(events: [String]) async throws(StoreError) -> [OutboxItem] {
        try await query(
            "SELECT \(Outbox.columns) FROM outbox_items WHERE consumer = $1 AND split_part(id, '/', 2) = ANY($2) ORDER BY id",
            [.text(WebhookOutbox.name), .array(events.map { .text($0) }, of: .text)], Outbox.decode)
    }

    /// The attempts at delivering `events`, in time order.
    public func attempts(events: [String]) async throws(StoreError) -> [WebhookAttempt] {
        try await query(
            """
            SELECT endpoint, event_id, generation, attempt, at, status, latency_ms, outcome, excerpt FROM webhooks.attempts
            WHERE event_id = ANY($1) ORDER BY at, endpoint, generation, attempt
            """, [.array(events.map { .text($0) }, of: .text)]) { row in
            WebhookAttempt(
                endpoint: try row.decode(String.self, "endpoint"), eventId: try row.decode(String.self, "event_id"),
                generation: Int(try row.decode(Int32.self, "generation")), attempt: Int(try row.decode(Int32.self, "attempt")),
                at: try row.decode(Int64.self, "at"), status: try row.decode(Int32?.self, "status").map(Int.init),
                latencyMillis: try row.decode(Int64.self, "latency_ms"), delivered: try row.decode(String.self, "outcome") == "delivered",
                excerpt: try row.decode(String?.self, "excerpt"))
        }
    }

    /// Records an attempt (the same attempt recorded again — a crash before the outbox recorded
    /// it — keeps the latest).
    public func record(_ a: WebhookAttempt) async throws(StoreError) {
        _ = try await query(
            """
            INSERT INTO webhooks.attempts (endpoint, event_id, generation, attempt, at, status, latency_ms, outcome, excerpt)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
            ON CONFLICT (endpoint, event_id, generation, attempt) DO UPDATE SET
                at = EXCLUDED.at, status = EXCLUDED.status, latency_ms = EXCLUDED.latency_ms, outcome = EXCLUDED.outcome, excerpt = EXCLUDED.excerpt
            RETURNING 1 AS one
            """,
            [.text(a.endpoint), .text(a.eventId), .int32(Int32(clamping: a.generation)), .int32(Int32(clamping: a.attempt)), .int64(a.at),
             a.status.map { .int32(Int32(clamping: $0)) } ?? .null, .int64(a.latencyMillis), .text(a.delivered ? "delivered" : "failed"),
             .optional(a.excerpt)], prepared: true) { _ in 1 }
    }

    /// When `endpoint` last had a 2xx (nil: never), and its first attempt since then.
    public func health(endpoint: String) async throws(StoreError) -> (lastSuccess: EpochMillis?, firstFailureSince: EpochMillis?) {
        let rows = try await query(
            """
            WITH ok AS (SELECT max(at) AS at FROM webhooks.attempts WHERE endpoint = $1 AND outcome = 'delivered')
            SELECT (SELECT at FROM ok) AS last_success,
                   (SELECT min(a.at) FROM webhooks.attempts a, ok WHERE a.endpoint = $1 AND a.outcome = 'failed'
                      AND (ok.at IS NULL OR a.at > ok.at)) AS first_failure
            """, [.text(endpoint)]) { row in (try row.decode(Int64?.self, "last_success"), try row.decode(Int64?.self, "first_failure")) }
        return rows.first ?? (nil, nil)
    }

    /// Per endpoint: items by status and the oldest undelivered item's age.
    public func queues(now: EpochMillis) async throws(StoreError) -> [WebhookEndpointQueue] {
        try await query(
            """
            SELECT split_part(id, '/', 1) AS endpoint,
                   count(*) FILTER (WHERE status = 'pending') AS pending, count(*) FILTER (WHERE status = 'done') AS done,
                   count(*) FILTER (WHERE status = 'exhausted') AS exhausted,
                   min(created_at) FILTER (WHERE status = 'pending') AS oldest
            FROM outbox_items WHERE consumer = $1 GROUP BY 1 ORDER BY 1
            """, [.text(WebhookOutbox.name)]) { row in
            WebhookEndpointQueue(
                endpoint: try row.decode(String.self, "endpoint"), pending: Int(try row.decode(Int64.self, "pending")),
                delivered: Int(try row.decode(Int64.self, "done")), exhausted: Int(try row.decode(Int64.self, "exhausted")),
                oldestUndeliveredMillis: try row.decode(Int64?.self, "oldest").map { max(now - $0, 0) } ?? 0)
        }
    }

    private func rows(_ sql: String, _ parameters: [PostgresValue]) async throws(StoreError) -> [WebhookEventRecord] {
        try await query(sql, parameters) { row in
            WebhookEventRecord(
                id: try row.decode(String.self, "id"), subscription: try row.decode(String?.self, "subscription"),
                type: try row.decode(String.self, "type"), environment: try row.decode(String.self, "environment"),
                customerId: try row.decode(String?.self, "customer_id"), effectiveAt: try row.decode(Int64.self, "effective_at"),
                position: try row.decode(Int64.self, "position"), sequence: Int(try row.decode(Int32.self, "sequence")),
                body: try row.decode(String.self, "body"))
        }
    }

    /// `prepared`: for SQL fixed in the source that runs per delivery attempt.
    private func query<T: Sendable>(_ sql: String, _ parameters: [PostgresValue], prepared: Bool = false,
                                    _ map: @escaping @Sendable (Row) throws -> T) async throws(StoreError) -> [T] {
        do {
            return try await pool.withConnection { connection in
                try (prepared ? connection.queryPrepared(sql, parameters, name: "webhook events")
                     : connection.query(sql, parameters, name: "webhook events")).rows.map(map)
            }
        } catch {
            throw StoreError(error)
        }
    }
}

extension WebhookEvent {
    /// The subscription key's text (`<environment>:<originalTransactionId>`), as the facts store it.
    var subscriptionText: String {
        SubscriptionKey(environment: environment, originalTransactionId: originalTransactionId ?? "").text
    }
}
