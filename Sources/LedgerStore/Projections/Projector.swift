import Foundation
import LedgerCore
internal import Postgres

/// Refolds subscriptions from their facts and replaces their rows in the projection tables. The
/// one place that writes projection rows for the live hook, the catch-up worker and a rebuild's
/// catch-up, so all three write exactly what a rebuild writes.
public struct Projector: Sendable {
    public let catalog: ProductCatalog
    /// `catalog.periods`, computed once: every fold this projector builds gets it.
    public let catalogPeriods: [String: EpochMillis]
    /// The evaluation time of the fold-time status (tests fix it; the service uses the clock).
    public let clock: @Sendable () -> EpochMillis
    /// How long an expiry at a renewal boundary waits for what supersedes it before its webhook
    /// events are derived (`WebhookDerivation.expirySettle`).
    public let webhookExpirySettle: EpochMillis

    public init(catalog: ProductCatalog, webhookExpirySettle: EpochMillis = WebhookDerivation.defaultExpirySettle,
                clock: @escaping @Sendable () -> EpochMillis) {
        self.catalog = catalog
        self.catalogPeriods = catalog.periods
        self.webhookExpirySettle = webhookExpirySettle
        self.clock = clock
    }

    public init(catalog: ProductCatalog, webhookExpirySettle: EpochMillis = WebhookDerivation.defaultExpirySettle,
                clock: LedgerClock = .system) {
        self.init(catalog: catalog, webhookExpirySettle: webhookExpirySettle, clock: { clock.now() })
    }

    /// The folds of `keys` from their stored facts (up to `upTo`), with the order facts that join them.
    static func folds(of keys: Set<SubscriptionKey>, upTo: Int64? = nil, catalogPeriods: [String: EpochMillis],
                      on connection: Connection) throws -> [SubscriptionFold] {
        let sorted = keys.sorted()
        let (attached, candidates) = try FactStore.facts(of: sorted, upTo: upTo, on: connection)
        return sorted.compactMap { key in
            guard let facts = attached[key] else { return nil }
            let fold = SubscriptionFold(key: key, facts: facts, catalogPeriods: catalogPeriods)
            return candidates.isEmpty ? fold : SubscriptionProjection.attach(candidates, to: fold)
        }
    }

    /// Replaces the rows of `keys` in the tables of `projections` with a fold of their facts
    /// (only facts at or before `upTo`, when given). Subscriptions without facts end with no rows.
    func refold(
        subscriptions keys: Set<SubscriptionKey>, projections: Set<ProjectionName>, upTo: Int64? = nil, next: Bool = false,
        on connection: Connection
    ) throws {
        if keys.isEmpty || projections.isEmpty { return }
        let folds = try Self.folds(of: keys, upTo: upTo, catalogPeriods: catalogPeriods, on: connection)
        let ids = PostgresValue.array(keys.sorted().map { .text($0.text) }, of: .text)
        for table in SubscriptionCutsProjection.tables(projections) {
            try connection.query("DELETE FROM \(table.qualified(next: next)) WHERE subscription = ANY($1)", [ids],
                                 name: "clear \(table.rawValue) rows")
        }
        let now = clock()
        var buffers = CopyBuffers()
        for fold in folds where !fold.isEmpty {
            buffers.add(SubscriptionRows(fold: fold, catalog: catalog, now: now), for: projections)
        }
        try buffers.flush(on: connection, next: next)
    }
}
