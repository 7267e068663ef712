import Foundation
import LedgerCore
import Postgres

/// What one subscription stream contributes to the projection tables, from one fold.
struct StreamRows {
    var streamId: String
    var subscription: SubscriptionState?
    var transactions: [TransactionRecord]
    var grants: [EntitlementGrant]
    var customers: [String]

    /// Folds a stream's facts. Facts naming another originalTransactionId than the stream are
    /// left out (the fold ignores them): streams are keyed by originalTransactionId by design.
    init(streamId: String, facts: [SubscriptionFact], catalog: ProductCatalog, now: EpochMillis) {
        self.streamId = streamId
        let fold = SubscriptionFold(originalTransactionId: streamId, facts: facts)
        let state = fold.state(at: now)
        subscription = state
        transactions = fold.transactions
        // Every grant the current product carries, entitled now or not: readers re-evaluate the
        // status at their own time, so the table is right for any evaluation time, not only for
        // times after this fold (and a rebuild on a host with a skewed clock changes nothing).
        if let state, let customer = state.customerId, let product = state.productId {
            grants = catalog.entitlements(for: product).map {
                EntitlementGrant(
                    customerId: customer, entitlement: $0, productId: product, originalTransactionId: streamId,
                    expiresDate: state.entitledUntil, status: state.status)
            }
        } else {
            grants = []
        }
        var seen = Set<String>()
        for fact in facts where fact.originalTransactionId == streamId {
            for id in [fact.transaction?.appAccountToken, fact.renewal?.appAccountToken, fact.openId] {
                if let id, !id.isEmpty { seen.insert(id) }
            }
        }
        if let id = state?.customerId { seen.insert(id) }
        customers = seen.sorted()
    }
}

/// Rows in the text format of `COPY … FROM STDIN`, one buffer per table. Separate stored
/// buffers (not a dictionary of them), so appending never copies a buffer.
struct CopyBuffers {
    var subscriptions: [UInt8] = []
    var customerStreams: [UInt8] = []
    var transactions: [UInt8] = []
    var entitlements: [UInt8] = []

    var byteCount: Int { subscriptions.count + customerStreams.count + transactions.count + entitlements.count }

    mutating func add(_ rows: StreamRows, for projections: Set<ProjectionName>) {
        if projections.contains(.subscriptions) {
            if let s = rows.subscription {
                subscriptions.field(rows.streamId); subscriptions.field(s.customerId); subscriptions.field(s.status.rawValue)
                subscriptions.field(s.evaluatedAt); subscriptions.field(s.bundleId); subscriptions.field(s.environment)
                subscriptions.field(s.productId); subscriptions.field(s.autoRenewProductId); subscriptions.field(s.expiresDate)
                subscriptions.field(s.gracePeriodExpiresDate); subscriptions.field(s.isInBillingRetryPeriod)
                subscriptions.field(s.autoRenewStatus); subscriptions.field(s.expirationIntent)
                subscriptions.field(s.priceIncreaseStatus); subscriptions.field(s.offerType); subscriptions.field(s.offerIdentifier)
                subscriptions.field(s.appAccountToken); subscriptions.field(s.latestTransactionId)
                subscriptions.field(s.recentSubscriptionStartDate); subscriptions.field(s.renewalDate)
                subscriptions.field(s.versionExpiresDate); subscriptions.field(s.versionSignedDate)
                subscriptions.field(s.revocationDate, last: true)
            }
            for customer in rows.customers { customerStreams.field(customer); customerStreams.field(rows.streamId, last: true) }
        }
        if projections.contains(.transactions) {
            for t in rows.transactions {
                transactions.field(rows.streamId); transactions.field(t.transactionId); transactions.field(t.webOrderLineItemId)
                transactions.field(t.bundleId); transactions.field(t.productId); transactions.field(t.purchaseDate)
                transactions.field(t.expiresDate); transactions.field(t.revocationDate); transactions.field(t.revocationReason)
                transactions.field(t.revocationType); transactions.field(t.revocationPercentage)
                transactions.field(t.refundSignedDate); transactions.field(t.refundReversedSignedDate)
                transactions.field(t.isUpgraded); transactions.field(t.price); transactions.field(t.currency)
                transactions.field(t.offerType); transactions.field(t.offerIdentifier); transactions.field(t.appAccountToken)
                transactions.field(t.environment); transactions.field(t.type); transactions.field(t.inAppOwnershipType)
                transactions.field(t.signedDate, last: true)
            }
        }
        if projections.contains(.entitlements) {
            for g in rows.grants {
                entitlements.field(g.customerId); entitlements.field(g.entitlement); entitlements.field(rows.streamId)
                entitlements.field(g.productId); entitlements.field(g.expiresDate); entitlements.field(g.status.rawValue, last: true)
            }
        }
    }

    /// Writes every buffer with one COPY per table and empties them.
    mutating func flush(on connection: Connection, next: Bool) throws {
        try flush(&subscriptions, .subscriptions, on: connection, next: next)
        try flush(&customerStreams, .customerStreams, on: connection, next: next)
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
    /// Column order of the COPY rows `CopyBuffers` writes.
    var columns: String {
        switch self {
        case .subscriptions:
            "stream_id, customer_id, status, evaluated_at, bundle_id, environment, product_id, auto_renew_product_id, expires_date, grace_period_expires_date, is_in_billing_retry_period, auto_renew_status, expiration_intent, price_increase_status, offer_type, offer_identifier, app_account_token, latest_transaction_id, recent_subscription_start_date, renewal_date, version_expires_date, version_signed_date, revocation_date"
        case .customerStreams:
            "customer_id, stream_id"
        case .transactions:
            "stream_id, transaction_id, web_order_line_item_id, bundle_id, product_id, purchase_date, expires_date, revocation_date, revocation_reason, revocation_type, revocation_percentage, refund_signed_date, refund_reversed_signed_date, is_upgraded, price, currency, offer_type, offer_identifier, app_account_token, environment, type, in_app_ownership_type, signed_date"
        case .entitlements:
            "customer_id, entitlement, stream_id, product_id, expires_date, status"
        }
    }
}

extension [UInt8] {
    fileprivate mutating func end(_ last: Bool) { append(last ? 0x0A : 0x09) }

    fileprivate mutating func field(_ value: String?, last: Bool = false) {
        defer { end(last) }
        guard let value else { append(0x5C); append(0x4E); return }
        for byte in value.utf8 {
            switch byte {
            case 0x5C: append(0x5C); append(0x5C)
            case 0x09: append(0x5C); append(UInt8(ascii: "t"))
            case 0x0A: append(0x5C); append(UInt8(ascii: "n"))
            case 0x0D: append(0x5C); append(UInt8(ascii: "r"))
            default: append(byte)
            }
        }
    }

    fileprivate mutating func field(_ value: Int64?, last: Bool = false) {
        defer { end(last) }
        guard let value else { append(0x5C); append(0x4E); return }
        if value < 0 { append(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        let first = count
        repeat {
            append(UInt8(truncatingIfNeeded: magnitude % 10) + 0x30)
            magnitude /= 10
        } while magnitude > 0
        self[first...].reverse()
    }

    fileprivate mutating func field(_ value: Int?, last: Bool = false) {
        field(value.map(Int64.init), last: last)
    }

    fileprivate mutating func field(_ value: Bool, last: Bool = false) {
        append(value ? UInt8(ascii: "t") : UInt8(ascii: "f"))
        end(last)
    }
}
