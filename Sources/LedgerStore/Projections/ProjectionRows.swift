import Foundation
import LedgerCore
internal import Postgres

/// What one subscription contributes to the projection tables, from one fold.
struct SubscriptionRows {
    var key: SubscriptionKey
    var subscription: SubscriptionState?
    var transactions: [TransactionRecord]
    var grants: [EntitlementGrant]
    var customers: [String]

    /// `transactions`: the rows to write for the fold's transactions (default: all of them).
    init(fold: SubscriptionFold, catalog: ProductCatalog, now: EpochMillis, transactions: [TransactionRecord]? = nil) {
        key = fold.key
        let state = fold.state(at: now)
        subscription = state
        self.transactions = transactions ?? fold.transactions
        // Every grant the current product carries, entitled now or not: readers re-evaluate the
        // status at their own time, so the table is right for any evaluation time, not only for
        // times after this fold (and a rebuild on a host with a skewed clock changes nothing).
        if let state, let customer = state.customerId, let product = state.productId {
            grants = catalog.entitlements(for: product).map {
                EntitlementGrant(
                    customerId: customer, environment: fold.key.environment, entitlement: $0, productId: product,
                    originalTransactionId: fold.key.originalTransactionId, expiresDate: state.entitledUntil, status: state.status)
            }
        } else {
            grants = []
        }
        var seen = fold.customersNamed
        if let id = state?.customerId { seen.insert(id) }
        customers = seen.sorted()
    }
}

/// Rows in the text format of `COPY … FROM STDIN`, one buffer per table. Separate stored
/// buffers (not a dictionary of them), so appending never copies a buffer.
struct CopyBuffers {
    var subscriptions: [UInt8] = []
    var customerSubscriptions: [UInt8] = []
    var transactions: [UInt8] = []
    var entitlements: [UInt8] = []

    var byteCount: Int { subscriptions.count + customerSubscriptions.count + transactions.count + entitlements.count }

    mutating func add(_ rows: SubscriptionRows, for projections: Set<ProjectionName>) {
        let key = rows.key.text
        if projections.contains(.subscriptions) {
            if let s = rows.subscription {
                subscriptions.field(key); subscriptions.field(rows.key.environment)
                subscriptions.field(rows.key.originalTransactionId); subscriptions.field(s.customerId)
                subscriptions.field(s.customerSource?.rawValue); subscriptions.field(s.implicitCustomerId)
                subscriptions.field(s.status.rawValue); subscriptions.field(s.evaluatedAt); subscriptions.field(s.bundleId)
                subscriptions.field(s.productId); subscriptions.field(s.productType); subscriptions.field(s.autoRenewProductId)
                subscriptions.field(s.expiresDate); subscriptions.field(s.gracePeriodExpiresDate)
                subscriptions.field(s.isInBillingRetryPeriod); subscriptions.field(s.autoRenewStatus)
                subscriptions.field(s.expirationIntent); subscriptions.field(s.priceIncreaseStatus); subscriptions.field(s.offerType)
                subscriptions.field(s.offerIdentifier); subscriptions.field(s.appAccountToken); subscriptions.field(s.latestTransactionId)
                subscriptions.field(s.recentSubscriptionStartDate); subscriptions.field(s.renewalDate)
                subscriptions.field(s.revocationDate); subscriptions.field(s.validUntil, last: true)
            }
            for customer in rows.customers { customerSubscriptions.field(customer); customerSubscriptions.field(key, last: true) }
        }
        if projections.contains(.transactions) {
            // Read in place: `for t in` would copy each record (a retain and release per string).
            rows.transactions.withUnsafeBufferPointer { records in
                for i in records.indices {
                    let t = UnsafePointer(records.baseAddress! + i)
                    transactions.field(key); transactions.field(t.pointee.transactionId)
                    transactions.field(t.pointee.originalTransactionId); transactions.field(t.pointee.webOrderLineItemId)
                    transactions.field(t.pointee.bundleId); transactions.field(t.pointee.productId)
                    transactions.field(t.pointee.purchaseDate); transactions.field(t.pointee.expiresDate)
                    transactions.field(t.pointee.revocationDate); transactions.field(t.pointee.revocationReason)
                    transactions.field(t.pointee.revocationType); transactions.field(t.pointee.revocationPercentage)
                    transactions.field(t.pointee.refundSignedDate); transactions.field(t.pointee.refundReversedSignedDate)
                    transactions.field(t.pointee.isUpgraded); transactions.field(t.pointee.price)
                    transactions.field(t.pointee.currency); transactions.field(t.pointee.offerType)
                    transactions.field(t.pointee.offerIdentifier); transactions.field(t.pointee.appAccountToken)
                    transactions.field(t.pointee.environment); transactions.field(t.pointee.type)
                    transactions.field(t.pointee.inAppOwnershipType); transactions.field(t.pointee.signedDate, last: true)
                }
            }
        }
        if projections.contains(.entitlements) {
            for g in rows.grants {
                entitlements.field(g.customerId); entitlements.field(g.environment); entitlements.field(g.entitlement)
                entitlements.field(key); entitlements.field(g.productId); entitlements.field(g.expiresDate)
                entitlements.field(g.status.rawValue, last: true)
            }
        }
    }

    /// Hands each table's buffer that holds at least `atLeast` bytes to that table's writer
    /// (the rebuild's bulk pass), starting a fresh buffer.
    mutating func send(to writers: [TableWriter], atLeast: Int) throws {
        for writer in writers {
            switch writer.table {
            case .subscriptions: try Self.send(&subscriptions, to: writer, atLeast: atLeast)
            case .customerSubscriptions: try Self.send(&customerSubscriptions, to: writer, atLeast: atLeast)
            case .transactions: try Self.send(&transactions, to: writer, atLeast: atLeast)
            case .entitlements: try Self.send(&entitlements, to: writer, atLeast: atLeast)
            }
        }
    }

    private static func send(_ bytes: inout [UInt8], to writer: TableWriter, atLeast: Int) throws {
        guard !bytes.isEmpty, bytes.count >= atLeast else { return }
        try writer.queue.push(bytes)
        // Room for the threshold and one more subscription's rows: the buffer never doubles.
        bytes = writer.queue.spare()
        bytes.reserveCapacity(atLeast + (64 << 10))
    }

    /// Writes every buffer with one COPY per table and empties them.
    mutating func flush(on connection: Connection, next: Bool) throws {
        try flush(&subscriptions, .subscriptions, on: connection, next: next)
        try flush(&customerSubscriptions, .customerSubscriptions, on: connection, next: next)
        try flush(&transactions, .transactions, on: connection, next: next)
        try flush(&entitlements, .entitlements, on: connection, next: next)
    }

    private func flush(_ bytes: inout [UInt8], _ table: ProjectionTable, on connection: Connection, next: Bool) throws {
        guard !bytes.isEmpty else { return }
        let data = bytes
        try connection.copyIn("COPY \(table.qualified(next: next)) (\(table.columns)) FROM STDIN") { writer in
            try writer.write(data)
        }
        bytes.removeAll(keepingCapacity: true)
    }
}

extension ProjectionTable {
    /// The columns the readers' queries filter, join or order on (ProjectionQueries, the refold's
    /// DELETE): a rebuild analyzes only these before the swap, so plans are right from the first
    /// query, and leaves the other columns to autovacuum (an ANALYZE of some columns does not
    /// reset the table's change counter, so autovacuum analyzes all of them soon after).
    /// Statistics of every column of the 28,000-row subscriptions table cost 0.2 s of CPU
    /// (26 columns, a sort per column) for columns no query plan depends on.
    var statisticsColumns: String {
        switch self {
        case .subscriptions: "subscription, product_id, status, expires_date, grace_period_expires_date"
        case .customerSubscriptions: "customer_id, subscription"
        case .transactions: "subscription"
        case .entitlements: "customer_id, environment, subscription"
        }
    }

    /// Column order of the COPY rows `CopyBuffers` writes.
    var columns: String {
        switch self {
        case .subscriptions:
            "subscription, environment, original_transaction_id, customer_id, customer_source, implicit_customer_id, status, evaluated_at, bundle_id, product_id, product_type, auto_renew_product_id, expires_date, grace_period_expires_date, is_in_billing_retry_period, auto_renew_status, expiration_intent, price_increase_status, offer_type, offer_identifier, app_account_token, latest_transaction_id, recent_subscription_start_date, renewal_date, revocation_date, valid_until"
        case .customerSubscriptions:
            "customer_id, subscription"
        case .transactions:
            "subscription, transaction_id, original_transaction_id, web_order_line_item_id, bundle_id, product_id, purchase_date, expires_date, revocation_date, revocation_reason, revocation_type, revocation_percentage, refund_signed_date, refund_reversed_signed_date, is_upgraded, price, currency, offer_type, offer_identifier, app_account_token, environment, type, in_app_ownership_type, signed_date"
        case .entitlements:
            "customer_id, environment, entitlement, subscription, product_id, expires_date, status"
        }
    }
}
