import Foundation
import LedgerCore
internal import Postgres

/// Reads for the service: each answer is one indexed query; statuses are re-evaluated at the
/// caller's `now` (`SubscriptionState.reevaluated(at:)`), because they change with time alone. A
/// stored state whose `validUntil` has passed (a fact already known takes effect after the fold,
/// e.g. a renewal signed before its period) is folded again from its facts instead, so the table
/// never answers differently from the fold.
public struct ProjectionQueries: Sendable {
    let pool: ConnectionPool
    public let catalog: ProductCatalog
    let catalogPeriods: [String: EpochMillis]

    init(pool: ConnectionPool, catalog: ProductCatalog = .productIds) {
        self.pool = pool
        self.catalog = catalog
        self.catalogPeriods = catalog.periods
    }

    /// The subscription's state evaluated at `now`, or nil for an unknown subscription.
    public func subscription(_ key: SubscriptionKey, now: EpochMillis) async throws(ProjectionError) -> SubscriptionState? {
        try await read { connection in
            // Prepared: the hottest read; parsing and planning it each time was most of the
            // database's work per answer.
            guard let row = try connection.queryPrepared(
                "SELECT \(SubscriptionRow.columns) FROM projections.subscriptions s WHERE s.subscription = $1",
                [.text(key.text)], name: "subscription").first else {
                // No row: nothing of it had begun when it was last folded (a first purchase dated
                // after the server's clock then). Folded now, so it shows by itself once its time
                // comes, without waiting for another event (issue 20 rule 4); an unknown id costs
                // one indexed facts lookup.
                return try Projector.folds(of: [key], catalogPeriods: catalogPeriods, on: connection).first?.state(at: now)
            }
            let stored = try SubscriptionRow.decode(row)
            if stored.needsRefold(at: now) {
                return try Projector.folds(of: [key], catalogPeriods: catalogPeriods, on: connection).first?.state(at: now)
            }
            return stored.reevaluated(at: now)
        }
    }

    /// The customer's entitlements in force at `now` (one environment), in `EntitlementGrant.ordered` order.
    public func entitlements(customerId: String, environment: String, now: EpochMillis) async throws(ProjectionError) -> [EntitlementGrant] {
        try await customerAnswer(customerId: customerId, environment: environment, now: now).grants
    }

    /// What the entitlements route answers: the grants and the consent rescissions, in one round
    /// trip in the usual case. The round trips, not the queries (each a few µs), were most of the
    /// database's work per answer: three of them made this read half as fast as a subscription's.
    /// The grants' query also says whether the customer has a subscription without a row and
    /// whether anyone rescinded consent; only then is either read.
    public func customerAnswer(customerId: String, environment: String, now: EpochMillis) async throws(ProjectionError)
        -> (grants: [EntitlementGrant], consentRescinded: [ConsentRescission]) {
        try await read { connection in
            let rows = try connection.queryPrepared(
                """
                SELECT g.*,
                  EXISTS (SELECT 1 \(Self.notBegun)) AS any_not_begun,
                  EXISTS (SELECT 1 FROM public.facts WHERE \(Self.rescindedBy(version: "$3", now: "$4"))) AS any_rescinded
                FROM (VALUES (1)) AS one(x)
                LEFT JOIN LATERAL (
                  SELECT e.entitlement, e.product_id AS grant_product_id, \(SubscriptionRow.columns)
                  FROM projections.entitlements e JOIN projections.subscriptions s ON s.subscription = e.subscription
                  WHERE e.customer_id = $1 AND e.environment = $2) g ON true
                """, [.text(customerId), .text(environment), .int64(Int64(FactStore.version)), .int64(now)], name: "entitlements of customer")
            var grants: [EntitlementGrant] = []
            var stale = Set<SubscriptionKey>()
            var anyNotBegun = false, anyRescinded = false
            for row in rows.rows {
                anyNotBegun = try row.decode(Bool.self, "any_not_begun")
                anyRescinded = try row.decode(Bool.self, "any_rescinded")
                // The one row of a customer without grants.
                guard let entitlement = try row.decode(String?.self, "entitlement") else { continue }
                let stored = try SubscriptionRow.decode(row)
                if stored.needsRefold(at: now) {
                    stale.insert(SubscriptionKey(environment: environment, originalTransactionId: stored.originalTransactionId))
                    continue
                }
                let state = stored.reevaluated(at: now)
                guard let (status, until) = EntitlementGrant.entitlement(of: state, catalog: catalog) else { continue }
                grants.append(EntitlementGrant(
                    customerId: customerId, environment: environment, entitlement: entitlement,
                    productId: try row.decode(String.self, "grant_product_id"),
                    originalTransactionId: state.originalTransactionId, expiresDate: until, status: status))
            }
            // Subscriptions of the customer without a row (nothing had begun when last folded)
            // are folded at `now` like stale ones.
            if anyNotBegun {
                for row in try connection.queryPrepared(
                    "SELECT cs.subscription \(Self.notBegun)", [.text(customerId)], name: "not yet begun subscriptions of customer").rows {
                    if let key = SubscriptionKey(text: try row.decode(String.self, "subscription")), key.environment == environment {
                        stale.insert(key)
                    }
                }
            }
            if !stale.isEmpty {
                for fold in try Projector.folds(of: stale, catalogPeriods: catalogPeriods, on: connection) {
                    guard let state = fold.state(at: now), state.customerId == customerId else { continue }
                    grants += EntitlementGrant.grants(of: state, catalog: catalog)
                }
            }
            let rescinded = anyRescinded ? try Self.consentRescissions(customerId: customerId, environment: environment, now: now, on: connection) : []
            return (grants.sorted(by: EntitlementGrant.ordered), rescinded)
        }
    }

    /// The customer's (`$1`) subscriptions without a row: nothing of them had begun when last folded.
    static let notBegun = """
        FROM projections.customer_subscriptions cs
        WHERE cs.customer_id = $1 AND NOT EXISTS (SELECT 1 FROM projections.subscriptions s WHERE s.subscription = cs.subscription)
        """

    /// The RESCIND_CONSENT facts (of fact schema `version`) signed by `now`.
    static func rescindedBy(version: String, now: String) -> String {
        "schema_version = \(version) AND kind = 'consent_rescinded' AND signed_at <= \(now)"
    }

    /// Apple RESCIND_CONSENT statements in force at `now` for the customer's purchases in
    /// `environment` (`ConsentRescission`); the customer's appTransactionIds are read only when
    /// someone rescinded.
    static func consentRescissions(customerId: String, environment: String, now: EpochMillis, on connection: Connection) throws -> [ConsentRescission] {
        let rescinded = try connection.queryPrepared(
            "SELECT \(FactRows.columns) FROM public.facts WHERE \(rescindedBy(version: "$1", now: "$2"))",
            [.int64(Int64(FactStore.version)), .int64(now)], name: "consent rescissions")
            .facts()
        if rescinded.isEmpty { return [] }
        let ids = try connection.query(
            """
            SELECT DISTINCT t.app_transaction_id FROM projections.transactions t
            JOIN projections.customer_subscriptions cs ON cs.subscription = t.subscription
            WHERE cs.customer_id = $1 AND t.environment = $2 AND t.app_transaction_id IS NOT NULL
            """, [.text(customerId), .text(environment)], name: "app transactions of customer")
            .rows.map { try $0.decode(String.self, "app_transaction_id") }
        return ConsentRescission.inForce(rescinded, appTransactionIds: Set(ids), environment: environment, at: now)
    }

    /// The `consent_rescinded` facts (RESCIND_CONSENT), for time travel.
    public func consentRescissionFacts() async throws(ProjectionError) -> [Fact] {
        try await read { connection in
            try connection.query(
                "SELECT \(FactRows.columns) FROM public.facts WHERE schema_version = $1 AND kind = 'consent_rescinded' ORDER BY position",
                [.int64(Int64(FactStore.version))], name: "consent rescission facts")
                .facts()
        }
    }

    /// The subscription's transactions ordered by purchaseDate, then transactionId (as `SubscriptionFold.transactions`).
    public func transactions(_ key: SubscriptionKey) async throws(ProjectionError) -> [TransactionRecord] {
        try await read { connection in
            try connection.query(
                "SELECT \(TransactionRow.columns) FROM projections.transactions t WHERE t.subscription = $1",
                [.text(key.text)], name: "transactions of subscription")
                .rows.map(TransactionRow.decode)
                // Sorted here, not by ORDER BY: the database collation need not order ids as Swift does.
                .sorted { a, b in
                    let (pa, pb) = (a.purchaseDate ?? .min, b.purchaseDate ?? .min)
                    return pa != pb ? pa < pb : TransactionIdOrder.precedes(a.transactionId, b.transactionId)
                }
        }
    }

    /// The subscription's latest tie or untie by recording time (the one in force), and when the
    /// latest `limit` of those recorded at or after `since` were recorded, newest first — read from
    /// its tie facts alone (Migrations/0025).
    public func ties(of key: SubscriptionKey, since: EpochMillis, limit: Int) async throws(ProjectionError) -> (latest: Fact?, recent: [EpochMillis]) {
        try await read { connection in
            let latest = try connection.query(
                """
                SELECT \(FactRows.columns) FROM public.facts
                WHERE schema_version = $1 AND subscription = $2 AND kind = 'customer_tie'
                ORDER BY recorded_at DESC, position DESC LIMIT 1
                """, [.int64(Int64(FactStore.version)), .text(key.text)], name: "latest tie of subscription")
                .facts().first
            let recent = try connection.query(
                """
                SELECT recorded_at FROM public.facts
                WHERE schema_version = $1 AND subscription = $2 AND kind = 'customer_tie' AND recorded_at >= $3
                ORDER BY recorded_at DESC, position DESC LIMIT $4
                """, [.int64(Int64(FactStore.version)), .text(key.text), .int64(since), .int64(Int64(limit))],
                name: "recent ties of subscription")
                .rows.map { try $0.decode(Int64.self, "recorded_at") }
            return (latest, recent)
        }
    }

    /// Every fact of the subscriptions, with the order facts that may join them, for time travel
    /// (`SubscriptionProjection.view(at:recordedBy:facts:)`): folding them is the answer, there is
    /// no history table.
    public func facts(of keys: [SubscriptionKey]) async throws(ProjectionError) -> [Fact] {
        try await read { connection in
            let (attached, candidates) = try FactStore.facts(of: keys, on: connection, prepared: true)
            return keys.flatMap { attached[$0] ?? [] } + candidates
        }
    }

    /// The facts of the events at `positions` (timelines, evidence), in position and ordinal order.
    public func facts(positions: [Int64]) async throws(ProjectionError) -> [Fact] {
        try await read { connection in try FactStore.facts(positions: positions, on: connection) }
    }

    /// Every subscription whose facts ever named the customer (for time travel over a customer).
    public func subscriptions(customerId: String) async throws(ProjectionError) -> [SubscriptionKey] {
        try await read { connection in
            try connection.query(
                "SELECT subscription FROM projections.customer_subscriptions WHERE customer_id = $1 ORDER BY subscription",
                [.text(customerId)], name: "subscriptions of customer").rows.compactMap {
                    SubscriptionKey(text: try $0.decode(String.self, "subscription"))
                }
        }
    }

    /// The catalogs services recorded (`config/catalog` facts), oldest first.
    public func recordedCatalogs() async throws(ProjectionError) -> [Fact] {
        try await read { connection in
            try connection.query(
                "SELECT \(FactRows.columns) FROM public.facts WHERE schema_version = $1 AND kind = 'catalog' ORDER BY position",
                [.int64(Int64(FactStore.version))], name: "recorded catalogs").facts()
        }
    }

    /// Every subscription in the projection (for audits comparing live tables with a rebuild).
    public func subscriptionKeys() async throws(ProjectionError) -> [SubscriptionKey] {
        try await read { connection in
            try connection.query("SELECT subscription FROM projections.subscriptions ORDER BY subscription", name: "subscription keys")
                .rows.compactMap { SubscriptionKey(text: try $0.decode(String.self, "subscription")) }
        }
    }

    /// Products of entitled subscriptions that `catalog` does not list (`ledger_unmapped_products`).
    public func unmappedProducts(now: EpochMillis) async throws(ProjectionError) -> [String] {
        if catalog.grantsProductIds { return [] }
        let listed = Array(catalog.products.keys)
        return try await read { connection in
            try connection.query(
                """
                SELECT DISTINCT product_id FROM projections.subscriptions
                WHERE product_id IS NOT NULL AND NOT (product_id = ANY($1))
                  AND status IN ('active', 'grace_period') AND (expires_date IS NULL OR expires_date > $2 OR grace_period_expires_date > $2)
                ORDER BY product_id
                """, [.array(listed.map { .text($0) }, of: .text), .int64(now)], name: "unmapped products")
                .rows.map { try $0.decode(String.self, "product_id") }
        }
    }

    private func read<T: Sendable>(_ body: @escaping @Sendable (Connection) throws -> T) async throws(ProjectionError) -> T {
        do { return try await pool.withConnection(body) } catch { throw ProjectionError(error) }
    }
}

/// `projections.subscriptions` ⇄ `SubscriptionState`.
enum SubscriptionRow {
    static let columns = """
        s.subscription, s.environment, s.original_transaction_id, s.customer_id, s.customer_source, \
        s.implicit_customer_id, s.status, s.evaluated_at, s.bundle_id, s.product_id, s.product_type, \
        s.auto_renew_product_id, s.expires_date, s.grace_period_expires_date, s.is_in_billing_retry_period, \
        s.auto_renew_status, s.expiration_intent, s.price_increase_status, s.offer_type, s.offer_identifier, \
        s.app_account_token, s.latest_transaction_id, s.recent_subscription_start_date, s.renewal_date, \
        s.revocation_date, s.valid_until, s.purchase_date
        """ + Projected.renewal.qualified("s")

    static func decode(_ row: Row) throws -> SubscriptionState {
        let statusText = try row.decode(String.self, "status")
        guard let status = SubscriptionStatus(rawValue: statusText) else {
            throw ProjectionError.corrupt("subscriptions.status is '\(statusText)'")
        }
        return SubscriptionState(
            originalTransactionId: try row.decode(String.self, "original_transaction_id"),
            evaluatedAt: try row.decode(Int64.self, "evaluated_at"), status: status,
            bundleId: try row.decode(String?.self, "bundle_id"), environment: try row.decode(String.self, "environment"),
            productId: try row.decode(String?.self, "product_id"), productType: try row.decode(String?.self, "product_type"),
            autoRenewProductId: try row.decode(String?.self, "auto_renew_product_id"),
            expiresDate: try row.decode(Int64?.self, "expires_date"),
            gracePeriodExpiresDate: try row.decode(Int64?.self, "grace_period_expires_date"),
            isInBillingRetryPeriod: try row.decode(Bool.self, "is_in_billing_retry_period"),
            autoRenewStatus: try row.decode(Int?.self, "auto_renew_status"),
            expirationIntent: try row.decode(Int?.self, "expiration_intent"),
            priceIncreaseStatus: try row.decode(Int?.self, "price_increase_status"),
            offerType: try row.decode(Int?.self, "offer_type"), offerIdentifier: try row.decode(String?.self, "offer_identifier"),
            appAccountToken: try row.decode(String?.self, "app_account_token"),
            customerId: try row.decode(String?.self, "customer_id"),
            customerSource: try row.decode(String?.self, "customer_source").flatMap(CustomerSource.init(rawValue:)),
            implicitCustomerId: try row.decode(String?.self, "implicit_customer_id"),
            latestTransactionId: try row.decode(String?.self, "latest_transaction_id"),
            recentSubscriptionStartDate: try row.decode(Int64?.self, "recent_subscription_start_date"),
            renewalDate: try row.decode(Int64?.self, "renewal_date"),
            revocationDate: try row.decode(Int64?.self, "revocation_date"),
            validUntil: try row.decode(Int64?.self, "valid_until"),
            purchaseDate: try row.decode(Int64?.self, "purchase_date"),
            renewalExtras: try Projected.renewal.read(row))
    }
}

/// `projections.transactions` ⇄ `TransactionRecord`.
enum TransactionRow {
    static let columns = """
        t.subscription, t.transaction_id, t.original_transaction_id, t.web_order_line_item_id, t.bundle_id, t.product_id, \
        t.purchase_date, t.expires_date, t.revocation_date, t.revocation_reason, t.revocation_type, t.revocation_percentage, \
        t.refund_signed_date, t.refund_reversed_signed_date, t.is_upgraded, t.price, t.currency, t.offer_type, \
        t.offer_identifier, t.app_account_token, t.environment, t.type, t.in_app_ownership_type, t.signed_date
        """ + Projected.transaction.qualified("t")

    static func decode(_ row: Row) throws -> TransactionRecord {
        TransactionRecord(
            transactionId: try row.decode(String.self, "transaction_id"),
            originalTransactionId: try row.decode(String.self, "original_transaction_id"),
            webOrderLineItemId: try row.decode(String?.self, "web_order_line_item_id"),
            bundleId: try row.decode(String?.self, "bundle_id"), productId: try row.decode(String?.self, "product_id"),
            purchaseDate: try row.decode(Int64?.self, "purchase_date"), expiresDate: try row.decode(Int64?.self, "expires_date"),
            revocationDate: try row.decode(Int64?.self, "revocation_date"),
            revocationReason: try row.decode(Int?.self, "revocation_reason"),
            revocationType: try row.decode(String?.self, "revocation_type"),
            revocationPercentage: try row.decode(Int?.self, "revocation_percentage"),
            refundSignedDate: try row.decode(Int64?.self, "refund_signed_date"),
            refundReversedSignedDate: try row.decode(Int64?.self, "refund_reversed_signed_date"),
            isUpgraded: try row.decode(Bool.self, "is_upgraded"), price: try row.decode(Int64?.self, "price"),
            currency: try row.decode(String?.self, "currency"), offerType: try row.decode(Int?.self, "offer_type"),
            offerIdentifier: try row.decode(String?.self, "offer_identifier"),
            appAccountToken: try row.decode(String?.self, "app_account_token"),
            environment: try row.decode(String?.self, "environment"), type: try row.decode(String?.self, "type"),
            inAppOwnershipType: try row.decode(String?.self, "in_app_ownership_type"),
            signedDate: try row.decode(Int64.self, "signed_date"), extras: try Projected.transaction.read(row))
    }
}
