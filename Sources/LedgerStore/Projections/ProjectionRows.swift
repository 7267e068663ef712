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
            // A non-renewing purchase's row names its catalog end (readers decide with
            // `EntitlementGrant.entitlement`, from the subscription row, at their own time).
            let until = EntitlementGrant.entitlement(of: state, catalog: catalog)?.until ?? state.entitledUntil
            grants = catalog.entitlements(for: product).map {
                EntitlementGrant(
                    customerId: customer, environment: fold.key.environment, entitlement: $0, productId: product,
                    originalTransactionId: fold.key.originalTransactionId, expiresDate: until, status: state.status)
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
                subscriptions.field(s.revocationDate); subscriptions.field(s.validUntil); subscriptions.field(s.purchaseDate)
                Projected.renewal.write(s.renewalExtras, to: &subscriptions)
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
                    transactions.field(t.pointee.inAppOwnershipType); transactions.field(t.pointee.signedDate)
                    Projected.transaction.write(t.pointee.extras, to: &transactions)
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
            default: break
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
    // The subscription cuts' tables (Migrations/0002, 0004 and later column additions; the Apple
    // fields' projection columns after the fixed ones, `Projected`). Statistics of every column of
    // the 28,000-row subscriptions table cost 0.2 s of CPU (26 columns, a sort per column) for
    // columns no query plan depends on, hence the short lists.
    static let subscriptions = ProjectionTable(
        name: "subscriptions",
        columns: "subscription, environment, original_transaction_id, customer_id, customer_source, implicit_customer_id, status, evaluated_at, bundle_id, product_id, product_type, auto_renew_product_id, expires_date, grace_period_expires_date, is_in_billing_retry_period, auto_renew_status, expiration_intent, price_increase_status, offer_type, offer_identifier, app_account_token, latest_transaction_id, recent_subscription_start_date, renewal_date, revocation_date, valid_until, purchase_date"
            + Projected.renewal.columnList,
        statisticsColumns: "subscription, product_id, status, expires_date, grace_period_expires_date",
        indexes: ["ALTER TABLE {table} ADD PRIMARY KEY (subscription)"])
    static let customerSubscriptions = ProjectionTable(
        name: "customer_subscriptions", columns: "customer_id, subscription", statisticsColumns: "customer_id, subscription",
        indexes: ["ALTER TABLE {table} ADD PRIMARY KEY (customer_id, subscription)", "CREATE INDEX ON {table} (subscription)"])
    static let transactions = ProjectionTable(
        name: "transactions",
        columns: "subscription, transaction_id, original_transaction_id, web_order_line_item_id, bundle_id, product_id, purchase_date, expires_date, revocation_date, revocation_reason, revocation_type, revocation_percentage, refund_signed_date, refund_reversed_signed_date, is_upgraded, price, currency, offer_type, offer_identifier, app_account_token, environment, type, in_app_ownership_type, signed_date"
            + Projected.transaction.columnList,
        statisticsColumns: "subscription",
        indexes: ["ALTER TABLE {table} ADD PRIMARY KEY (subscription, transaction_id)"])
    static let entitlements = ProjectionTable(
        name: "entitlements", columns: "customer_id, environment, entitlement, subscription, product_id, expires_date, status",
        statisticsColumns: "customer_id, environment, subscription",
        indexes: ["ALTER TABLE {table} ADD PRIMARY KEY (customer_id, environment, entitlement, subscription)",
                  "CREATE INDEX ON {table} (subscription)"])
}

/// The projection columns of the Apple fields an answer shows (`AppleFields` rows with a
/// `projection` column), in table order, after each table's fixed columns: the COPY writer, the
/// column lists and the row readers walk this, so a new field needs no code here.
struct ProjectedExtras<Snapshot> {
    let table: [AppleField<Snapshot>]
    /// (index in the extras, the field) of each shown field.
    let shown: [(index: Int, field: AppleField<Snapshot>)]

    init(_ table: [AppleField<Snapshot>]) {
        self.table = table
        shown = table.enumerated().compactMap { $0.element.projection == nil ? nil : ($0.offset, $0.element) }
    }


    /// `, col_a, col_b` (empty when none): appended to a table's fixed column list.
    var columnList: String { shown.map { ", " + $0.field.projection! }.joined() }

    /// The same with a table alias (`, t.col_a`).
    func qualified(_ alias: String) -> String { shown.map { ", \(alias)." + $0.field.projection! }.joined() }

    /// Writes the shown values; the last field of the row ends the line (none shown: the line ends here).
    func write(_ extras: AppleExtras, to out: inout [UInt8]) {
        if shown.isEmpty {
            // The previous field ended with a tab: the row ends there instead.
            out.removeLast()
            out.append(0x0A)
            return
        }
        for (n, (index, _)) in shown.enumerated() {
            let last = n == shown.count - 1
            switch extras[index] {
            case .text(let v)?: out.field(v, last: last)
            case .integer(let v)?: out.field(v, last: last)
            case .bool(let v)?: out.field(v, last: last)
            case nil: out.field(nil as String?, last: last)
            }
        }
    }

    /// The shown values of a row read by column name.
    func read(_ row: Row) throws -> AppleExtras {
        if shown.isEmpty { return AppleExtras() }
        var values = [AppleFieldValue?](repeating: nil, count: table.count)
        for (index, field) in shown {
            let name = field.projection!
            values[index] = switch field.type {
            case .text: try row.decode(String?.self, name).map(AppleFieldValue.text)
            case .integer, .millis: try row.decode(Int64?.self, name).map(AppleFieldValue.integer)
            case .bool: try row.decode(Bool?.self, name).map(AppleFieldValue.bool)
            }
        }
        return AppleExtras(values: values)
    }
}

/// The shown extras of the two tables.
enum Projected {
    static let transaction = ProjectedExtras(AppleFields.transactionExtras)
    static let renewal = ProjectedExtras(AppleFields.renewalExtras)
}
