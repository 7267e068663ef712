import Foundation
import LedgerCore
import LedgerStore

/// When a question is asked about. Bitemporal: `at` is the business time the answer is about
/// (every known fact, each in effect from its own time), `recordedBy` what the ledger knew (only
/// events recorded by then). Neither: now, as known now. `recordedBy` alone: the state at that
/// moment as known then.
struct Moment: Sendable, Equatable {
    var at: EpochMillis
    var recordedBy: EpochMillis?
    var isNow: Bool
    /// Read-your-write: the answer must include the event at this position (one an append
    /// answered), so a replica that has not replayed it yet does not answer.
    var minPosition: Int64?

    static func now() -> Moment { Moment(at: Clock.nowMillis(), recordedBy: nil, isNow: true) }

    init(at: EpochMillis, recordedBy: EpochMillis?, isNow: Bool) {
        self.at = at
        self.recordedBy = recordedBy
        self.isNow = isNow
    }

    /// From the two optional query parameters.
    init(at: EpochMillis?, recordedAt: EpochMillis?) {
        switch (at, recordedAt) {
        case (nil, nil): self = .now()
        case (let t?, nil): self.init(at: t, recordedBy: nil, isNow: false)
        case (nil, let r?): self.init(at: r, recordedBy: r, isNow: false)
        case (let t?, let r?): self.init(at: t, recordedBy: r, isNow: false)
        }
    }
}

/// The service's wall clock in the API's unit.
enum Clock {
    static func nowMillis() -> EpochMillis { EpochMillis((Date().timeIntervalSince1970 * 1000).rounded(.down)) }
}

/// A stored event with the facts the ledger derived from it: the timeline's unit of evidence.
struct EvidencedEvent: Sendable {
    var event: RecordedEvent
    var facts: [Fact]
}

/// Use case: the questions app backends and auditors ask. "Now" answers come from the projection
/// tables (one indexed read, status re-evaluated at the time asked); `?at=` and `?recordedAt=`
/// fold the subscription's stored facts instead — time travel without history tables.
struct SubscriptionQueries: Sendable {
    let store: Store
    /// The catalog this instance runs with (what "now" answers use).
    let catalog: ProductCatalog

    /// The subscription `key` at `moment`; nil when it is not known (then).
    func subscription(_ key: SubscriptionKey, at moment: Moment) async throws -> SubscriptionState? {
        try await store.read(atLeast: moment.minPosition) { reads in
            if moment.isNow { return try await reads.projections.subscription(key, now: moment.at) }
            let facts = try await reads.projections.facts(of: [key])
            // The catalog's periods place WeChat deliveries without PaidTime (as in the projections).
            let catalog = try await catalog(recordedBy: moment.recordedBy, reads: reads)
            return SubscriptionProjection.view(at: moment.at, recordedBy: moment.recordedBy, facts: facts, catalogPeriods: catalog.periods)
                .subscription(key)
        }
    }

    /// What the entitlements route answers: the grants `customer` holds in `environment` at
    /// `moment`, and Apple's RESCIND_CONSENT statements in force then for the customer's purchases
    /// (recorded, shown beside the grants; the app decides). Now: the projection's one round trip
    /// in the usual case. Another moment: the customer's facts read once and folded as of it, under
    /// the catalog in force then (as recorded by the time the question is about).
    func customerAnswer(customer: String, environment: String, at moment: Moment) async throws
        -> (grants: [EntitlementGrant], consentRescinded: [ConsentRescission]) {
        try await store.read(atLeast: moment.minPosition) { reads in
            if moment.isNow {
                return try await reads.projections.customerAnswer(customerId: customer, environment: environment, now: moment.at)
            }
            let keys = try await reads.projections.subscriptions(customerId: customer).filter { $0.environment == environment }
            let facts = try await reads.projections.facts(of: keys)
            let catalog = try await catalog(recordedBy: moment.recordedBy, reads: reads)
            let grants = SubscriptionProjection.view(at: moment.at, recordedBy: moment.recordedBy, facts: facts, catalogPeriods: catalog.periods)
                .entitlements(catalog: catalog, customerId: customer, environment: environment)
            let rescinded = try await reads.projections.consentRescissionFacts()
            if rescinded.isEmpty { return (grants, []) }
            let known = moment.recordedBy.map { recorded in facts.filter { $0.recordedAt <= recorded } } ?? facts
            return (grants, ConsentRescission.inForce(rescinded, appTransactionIds: ConsentRescission.appTransactionIds(in: known),
                                                      environment: environment, at: moment.at, recordedBy: moment.recordedBy))
        }
    }

    /// One page of `events(of:)`: up to `limit` events after position `after` (the subscription's
    /// stream and the order streams linked to it, in position order), and where the next page
    /// starts (nil on the last). A page may hold fewer than `limit` events of `key` when the other
    /// environment's events share the stream; `next` still moves past them.
    func eventsPage(of key: SubscriptionKey, after: Int64, limit: Int, minPosition: Int64? = nil) async throws -> (events: [EvidencedEvent], next: Int64?) {
        try await store.read(atLeast: minPosition) { reads in
            let own = try await reads.projections.facts(of: [key])
            let linked = Set(own.filter { $0.origin == .ledger && $0.kind == .orderAlias && $0.subscription == key }
                .compactMap(\.transactionId).map { StreamId.wechatOrder($0).text })
            let page = try await reads.events.read(streams: [StreamId.subscription(key.originalTransactionId).text] + linked.sorted(),
                                                   after: after, limit: limit + 1)
            let shown = Array(page.prefix(limit))
            let next = page.count > limit ? shown.last?.position : nil
            let byPosition = Dictionary(grouping: try await reads.projections.facts(positions: shown.map(\.position)), by: \.position)
            return (Self.belonging(to: key, shown, byPosition), next)
        }
    }

    /// Every event of the subscription's stream that belongs to `key`'s environment (both
    /// environments share Apple's id; each event names its environment), with the facts the ledger
    /// derived from it. Empty when none is stored.
    func events(of key: SubscriptionKey, minPosition: Int64? = nil) async throws -> [EvidencedEvent] {
        try await store.read(atLeast: minPosition) { reads in try await events(of: key, reads: reads) }
    }

    private func events(of key: SubscriptionKey, reads: Reads) async throws -> [EvidencedEvent] {
        var events = try await reads.events.read(stream: StreamId.subscription(key.originalTransactionId).text)
        var facts = try await reads.projections.facts(positions: events.map(\.position))
        // WeChat refunds and inquiries live in their order's stream, tied to the subscription by a
        // link event (its `order_alias` fact, from the ledger): their events are this timeline's too.
        let linked = Set(facts.filter { $0.origin == .ledger && $0.kind == .orderAlias && $0.subscription == key }
            .compactMap(\.transactionId).map { StreamId.wechatOrder($0).text })
        if !linked.isEmpty {
            let more = try await reads.events.read(streams: linked.sorted())
            facts += try await reads.projections.facts(positions: more.map(\.position))
            events = (events + more).sorted { $0.position < $1.position }
        }
        return Self.belonging(to: key, events, Dictionary(grouping: facts, by: \.position))
    }

    /// An event belongs to the asked environment when one of its facts does, or (no facts) when
    /// its own environment column says so.
    static func belonging(to key: SubscriptionKey, _ events: [RecordedEvent], _ byPosition: [Int64: [Fact]]) -> [EvidencedEvent] {
        events.filter { e in
            if let fs = byPosition[e.position], fs.contains(where: { $0.subscription != nil }) {
                return fs.contains { $0.subscription == key }
            }
            return (SubscriptionKey.environment(e.event.environment) ?? key.environment) == key.environment
        }.map { EvidencedEvent(event: $0, facts: byPosition[$0.position] ?? []) }
    }

    /// The catalog in force when the ledger knew only what was recorded by `recorded`: the last
    /// one a service recorded by then (the current one when none was, or for "now").
    func catalog(recordedBy recorded: EpochMillis?, reads: Reads) async throws(ProjectionError) -> ProductCatalog {
        guard let recorded else { return catalog }
        let recordedCatalogs = try await reads.projections.recordedCatalogs().filter { $0.recordedAt <= recorded }
        guard let last = recordedCatalogs.last else { return catalog }
        return CatalogRecord.catalog(of: last) ?? catalog
    }
}
