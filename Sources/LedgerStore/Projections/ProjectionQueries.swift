import Foundation
import LedgerCore
import Postgres

/// Reads for the service: each answer is one indexed query; statuses are re-evaluated at the
/// caller's `now` (`SubscriptionState.reevaluated(at:)`), because they change with time alone.
public struct ProjectionQueries: Sendable {
    public let pool: ConnectionPool

    public init(pool: ConnectionPool) { self.pool = pool }

    /// The subscription's state evaluated at `now`, or nil for an unknown originalTransactionId.
    public func subscription(_ originalTransactionId: String, now: EpochMillis) async throws(ProjectionError) -> SubscriptionState? {
        try await read { connection in
            try connection.query(
                "SELECT \(SubscriptionRow.columns) FROM projections.subscriptions s WHERE s.stream_id = $1",
                [.text(originalTransactionId)], name: "subscription")
                .first.map { try SubscriptionRow.decode($0).reevaluated(at: now) }
        }
    }

    /// The customer's entitlements in force at `now`, in `EntitlementGrant.ordered` order.
    public func entitlements(customerId: String, now: EpochMillis) async throws(ProjectionError) -> [EntitlementGrant] {
        try await read { connection in
            let rows = try connection.query(
                """
                SELECT e.entitlement, e.product_id AS grant_product_id, \(SubscriptionRow.columns)
                FROM projections.entitlements e JOIN projections.subscriptions s ON s.stream_id = e.stream_id
                WHERE e.customer_id = $1
                """, [.text(customerId)], name: "entitlements of customer")
            var grants: [EntitlementGrant] = []
            for row in rows.rows {
                let state = try SubscriptionRow.decode(row).reevaluated(at: now)
                guard state.status.isEntitled else { continue }
                grants.append(EntitlementGrant(
                    customerId: customerId, entitlement: try row.decode(String.self, "entitlement"),
                    productId: try row.decode(String.self, "grant_product_id"),
                    originalTransactionId: state.originalTransactionId, expiresDate: state.entitledUntil, status: state.status))
            }
            return grants.sorted(by: EntitlementGrant.ordered)
        }
    }

    /// The subscription's transactions ordered by purchaseDate, then transactionId (as `SubscriptionFold.transactions`).
    public func transactions(_ originalTransactionId: String) async throws(ProjectionError) -> [TransactionRecord] {
        try await read { connection in
            try connection.query(
                """
                SELECT \(TransactionRow.columns) FROM projections.transactions t WHERE t.stream_id = $1
                """, [.text(originalTransactionId)], name: "transactions of subscription")
                .rows.map(TransactionRow.decode)
                // Sorted here, not by ORDER BY: the database collation need not order ids as Swift does.
                .sorted { ($0.purchaseDate ?? .min, $0.transactionId) < ($1.purchaseDate ?? .min, $1.transactionId) }
        }
    }

    /// Every fact of a stream, for time travel (`SubscriptionProjection.asOfBusinessTime` /
    /// `asKnownAt`): folding them is the answer, there is no history table.
    public func facts(_ streamId: String) async throws(ProjectionError) -> [SubscriptionFact] {
        try await read { connection in try FactReader.facts(streams: [streamId], on: connection)[streamId] ?? [] }
    }

    /// Every stream whose facts ever named the customer (for time travel over a customer).
    public func streams(customerId: String) async throws(ProjectionError) -> [String] {
        try await read { connection in
            try connection.query(
                "SELECT stream_id FROM projections.customer_streams WHERE customer_id = $1 ORDER BY stream_id",
                [.text(customerId)], name: "streams of customer").rows.map { try $0.decode(String.self, "stream_id") }
        }
    }

    private func read<T: Sendable>(_ body: @escaping @Sendable (Connection) throws -> T) async throws(ProjectionError) -> T {
        do { return try await pool.withConnection(body) } catch { throw ProjectionError(error) }
    }
}

/// `projections.subscriptions` ⇄ `SubscriptionState`.
enum SubscriptionRow {
    static let columns = """
        s.stream_id, s.customer_id, s.status, s.evaluated_at, s.bundle_id, s.environment, s.product_id, \
        s.auto_renew_product_id, s.expires_date, s.grace_period_expires_date, s.is_in_billing_retry_period, \
        s.auto_renew_status, s.expiration_intent, s.price_increase_status, s.offer_type, s.offer_identifier, \
        s.app_account_token, s.latest_transaction_id, s.recent_subscription_start_date, s.renewal_date, \
        s.version_expires_date, s.version_signed_date, s.revocation_date
        """

    static func decode(_ row: Row) throws -> SubscriptionState {
        let statusText = try row.decode(String.self, "status")
        guard let status = SubscriptionStatus(rawValue: statusText) else {
            throw ProjectionError.corrupt("subscriptions.status is '\(statusText)'")
        }
        return SubscriptionState(
            originalTransactionId: try row.decode(String.self, "stream_id"),
            evaluatedAt: try row.decode(Int64.self, "evaluated_at"), status: status,
            bundleId: try row.decode(String?.self, "bundle_id"), environment: try row.decode(String?.self, "environment"),
            productId: try row.decode(String?.self, "product_id"),
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
            latestTransactionId: try row.decode(String?.self, "latest_transaction_id"),
            recentSubscriptionStartDate: try row.decode(Int64?.self, "recent_subscription_start_date"),
            renewalDate: try row.decode(Int64?.self, "renewal_date"),
            versionExpiresDate: try row.decode(Int64?.self, "version_expires_date"),
            versionSignedDate: try row.decode(Int64?.self, "version_signed_date"),
            revocationDate: try row.decode(Int64?.self, "revocation_date"))
    }
}

/// `projections.transactions` ⇄ `TransactionRecord`.
enum TransactionRow {
    static let columns = """
        t.stream_id, t.transaction_id, t.web_order_line_item_id, t.bundle_id, t.product_id, t.purchase_date, \
        t.expires_date, t.revocation_date, t.revocation_reason, t.revocation_type, t.revocation_percentage, \
        t.refund_signed_date, t.refund_reversed_signed_date, t.is_upgraded, t.price, t.currency, t.offer_type, \
        t.offer_identifier, t.app_account_token, t.environment, t.type, t.in_app_ownership_type, t.signed_date
        """

    static func decode(_ row: Row) throws -> TransactionRecord {
        TransactionRecord(
            transactionId: try row.decode(String.self, "transaction_id"),
            originalTransactionId: try row.decode(String.self, "stream_id"),
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
            signedDate: try row.decode(Int64.self, "signed_date"))
    }
}

extension ProjectionQueries {
    /// Every subscription in the projection (for audits comparing live tables with a rebuild).
    public func subscriptionIds() async throws(ProjectionError) -> [String] {
        do {
            return try await pool.withConnection { connection in
                try connection.query("SELECT stream_id FROM projections.subscriptions ORDER BY stream_id", name: "subscription ids")
                    .rows.map { try $0.decode(String.self, "stream_id") }
            }
        } catch {
            throw ProjectionError(error)
        }
    }
}
