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

/// Rows in the text format of `COPY … FROM STDIN`, one buffer per table.
struct CopyBuffers {
    var data: [ProjectionTable: [UInt8]] = [:]
    var rows = 0

    var byteCount: Int { data.values.reduce(0) { $0 + $1.count } }

    mutating func add(_ rows: StreamRows, for projections: Set<ProjectionName>) {
        self.rows += 1
        if projections.contains(.subscriptions) {
            if let s = rows.subscription {
                var b = data[.subscriptions, default: []]
                b.field(rows.streamId); b.field(s.customerId); b.field(s.status.rawValue); b.field(s.evaluatedAt)
                b.field(s.bundleId); b.field(s.environment); b.field(s.productId); b.field(s.autoRenewProductId)
                b.field(s.expiresDate); b.field(s.gracePeriodExpiresDate); b.field(s.isInBillingRetryPeriod)
                b.field(s.autoRenewStatus); b.field(s.expirationIntent); b.field(s.priceIncreaseStatus)
                b.field(s.offerType); b.field(s.offerIdentifier); b.field(s.appAccountToken)
                b.field(s.latestTransactionId); b.field(s.recentSubscriptionStartDate); b.field(s.renewalDate)
                b.field(s.versionExpiresDate); b.field(s.versionSignedDate); b.field(s.revocationDate, last: true)
                data[.subscriptions] = b
            }
            var c = data[.customerStreams, default: []]
            for customer in rows.customers { c.field(customer); c.field(rows.streamId, last: true) }
            data[.customerStreams] = c
        }
        if projections.contains(.transactions) {
            var b = data[.transactions, default: []]
            for t in rows.transactions {
                b.field(rows.streamId); b.field(t.transactionId); b.field(t.webOrderLineItemId); b.field(t.bundleId)
                b.field(t.productId); b.field(t.purchaseDate); b.field(t.expiresDate); b.field(t.revocationDate)
                b.field(t.revocationReason); b.field(t.revocationType); b.field(t.revocationPercentage)
                b.field(t.refundSignedDate); b.field(t.refundReversedSignedDate); b.field(t.isUpgraded)
                b.field(t.price); b.field(t.currency); b.field(t.offerType); b.field(t.offerIdentifier)
                b.field(t.appAccountToken); b.field(t.environment); b.field(t.type); b.field(t.inAppOwnershipType)
                b.field(t.signedDate, last: true)
            }
            data[.transactions] = b
        }
        if projections.contains(.entitlements) {
            var b = data[.entitlements, default: []]
            for g in rows.grants {
                b.field(g.customerId); b.field(g.entitlement); b.field(rows.streamId); b.field(g.productId)
                b.field(g.expiresDate); b.field(g.status.rawValue, last: true)
            }
            data[.entitlements] = b
        }
    }

    /// Writes every buffer with one COPY per table and empties them.
    mutating func flush(on connection: Connection, next: Bool) throws {
        for table in ProjectionTable.allCases {
            guard let bytes = data[table], !bytes.isEmpty else { continue }
            try connection.copyIn("COPY \(table.qualified(next: next)) (\(table.columns)) FROM STDIN") { writer in
                try writer.write(bytes)
            }
            data[table]!.removeAll(keepingCapacity: true)
        }
        rows = 0
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
        append(contentsOf: String(value).utf8)
    }

    fileprivate mutating func field(_ value: Int?, last: Bool = false) {
        field(value.map(Int64.init), last: last)
    }

    fileprivate mutating func field(_ value: Bool, last: Bool = false) {
        append(value ? UInt8(ascii: "t") : UInt8(ascii: "f"))
        end(last)
    }
}
