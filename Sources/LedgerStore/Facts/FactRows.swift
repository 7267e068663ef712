import Foundation
import LedgerCore
internal import Postgres

/// `public.facts` ⇄ `Fact`: the column order (Migrations/0004_facts.sql, then the columns of the
/// non-core Apple fields, `AppleFields`, in table order), the COPY lines the writers send, and the
/// one row reader every projection uses (binary query rows and COPY text rows alike, through
/// `FactFields`). A test checks the column list against the migrations.
enum FactColumn: Int, CaseIterable {
    case schemaVersion, position, ordinal, recordedAt, streamId, subscription, kind, origin, message, signedAt, effectiveAt
    case transactionId, orderAlias, customerId
    case hasTransaction, txOriginal, webOrderLineItemId, bundleId, productId, productType, purchaseDate, expiresDate,
         txSignedDate, revocationDate, revocationReason, revocationType, revocationPercentage, isUpgraded, price,
         currency, offerType, offerIdentifier, appAccountToken, environment, inAppOwnershipType
    case hasRenewal, rProductId, autoRenewProductId, autoRenewStatus, expirationIntent, isInBillingRetryPeriod,
         gracePeriodExpiresDate, priceIncreaseStatus, rOfferType, rOfferIdentifier, recentSubscriptionStartDate,
         renewalDate, rAppAccountToken, rSignedDate
    case detail

    var name: String {
        switch self {
        case .schemaVersion: "schema_version"
        case .position: "position"
        case .ordinal: "ordinal"
        case .recordedAt: "recorded_at"
        case .streamId: "stream_id"
        case .subscription: "subscription"
        case .kind: "kind"
        case .origin: "origin"
        case .message: "message"
        case .signedAt: "signed_at"
        case .effectiveAt: "effective_at"
        case .transactionId: "transaction_id"
        case .orderAlias: "order_alias"
        case .customerId: "customer_id"
        case .hasTransaction: "has_transaction"
        case .txOriginal: "tx_original_transaction_id"
        case .webOrderLineItemId: "web_order_line_item_id"
        case .bundleId: "bundle_id"
        case .productId: "product_id"
        case .productType: "product_type"
        case .purchaseDate: "purchase_date"
        case .expiresDate: "expires_date"
        case .txSignedDate: "tx_signed_date"
        case .revocationDate: "revocation_date"
        case .revocationReason: "revocation_reason"
        case .revocationType: "revocation_type"
        case .revocationPercentage: "revocation_percentage"
        case .isUpgraded: "is_upgraded"
        case .price: "price"
        case .currency: "currency"
        case .offerType: "offer_type"
        case .offerIdentifier: "offer_identifier"
        case .appAccountToken: "app_account_token"
        case .environment: "environment"
        case .inAppOwnershipType: "in_app_ownership_type"
        case .hasRenewal: "has_renewal"
        case .rProductId: "r_product_id"
        case .autoRenewProductId: "auto_renew_product_id"
        case .autoRenewStatus: "auto_renew_status"
        case .expirationIntent: "expiration_intent"
        case .isInBillingRetryPeriod: "is_in_billing_retry_period"
        case .gracePeriodExpiresDate: "grace_period_expires_date"
        case .priceIncreaseStatus: "price_increase_status"
        case .rOfferType: "r_offer_type"
        case .rOfferIdentifier: "r_offer_identifier"
        case .recentSubscriptionStartDate: "recent_subscription_start_date"
        case .renewalDate: "renewal_date"
        case .rAppAccountToken: "r_app_account_token"
        case .rSignedDate: "r_signed_date"
        case .detail: "detail"
        }
    }
}

enum FactRows {
    /// The columns of the Apple fields no fold reads (`AppleFields`): after the fixed ones.
    static let transactionExtras = AppleFields.transactionExtras
    static let renewalExtras = AppleFields.renewalExtras
    static let firstTransactionExtra = FactColumn.allCases.count
    static let firstRenewalExtra = firstTransactionExtra + transactionExtras.count
    /// Every column name, in the order of COPY lines and SELECT lists.
    static let columnNames = FactColumn.allCases.map(\.name) + transactionExtras.map(\.column) + renewalExtras.map(\.column)
    static var columnCount: Int { columnNames.count }
    /// Every column, in table order (for COPY and SELECT).
    static let columns = columnNames.joined(separator: ", ")

    /// One fact as a line of `COPY facts (columns) FROM STDIN` (text format).
    static func append(_ f: Fact, version: Int, to out: inout [UInt8]) {
        out.field(Int64(version)); out.field(f.position); out.field(Int64(f.ordinal)); out.field(f.recordedAt)
        out.field(f.streamId); out.field(f.subscription?.text); out.field(f.kind.rawValue); out.field(f.origin.rawValue)
        out.field(f.message); out.field(f.signedAt); out.field(f.effectiveAt)
        out.field(f.transactionId); out.field(f.orderAlias); out.field(f.customerId)
        let t = f.transaction
        out.field(t != nil)
        out.field(t?.originalTransactionId); out.field(t?.webOrderLineItemId); out.field(t?.bundleId); out.field(t?.productId)
        out.field(t?.type); out.field(t?.purchaseDate); out.field(t?.expiresDate); out.field(t?.signedDate)
        out.field(t?.revocationDate); out.field(t?.revocationReason); out.field(t?.revocationType)
        out.field(t?.revocationPercentage); out.field(t?.isUpgraded); out.field(t?.price); out.field(t?.currency)
        out.field(t?.offerType); out.field(t?.offerIdentifier); out.field(t?.appAccountToken); out.field(t?.environment)
        out.field(t?.inAppOwnershipType)
        let r = f.renewal
        out.field(r != nil)
        out.field(r?.productId); out.field(r?.autoRenewProductId); out.field(r?.autoRenewStatus); out.field(r?.expirationIntent)
        out.field(r?.isInBillingRetryPeriod); out.field(r?.gracePeriodExpiresDate); out.field(r?.priceIncreaseStatus)
        out.field(r?.offerType); out.field(r?.offerIdentifier); out.field(r?.recentSubscriptionStartDate)
        out.field(r?.renewalDate); out.field(r?.appAccountToken); out.field(r?.signedDate)
        out.field(f.detail)
        let count = transactionExtras.count + renewalExtras.count
        for i in 0..<count {
            let value = i < transactionExtras.count ? t?.extras[i] : r?.extras[i - transactionExtras.count]
            let last = i == count - 1
            switch value {
            case .text(let v)?: out.field(v, last: last)
            case .integer(let v)?: out.field(v, last: last)
            case .bool(let v)?: out.field(v, last: last)
            case nil: out.field(nil as String?, last: last)
            }
        }
    }

    /// The extras of a row: each column read as its field's type, starting at `first`.
    static func extras<S>(_ r: some FactFields, _ fields: [AppleField<S>], first: Int) -> AppleExtras {
        var values: [AppleFieldValue?] = []
        var any = false
        for (i, field) in fields.enumerated() {
            let value: AppleFieldValue? = switch field.type {
            case .text: r.string(at: first + i).map(AppleFieldValue.text)
            case .integer, .millis: r.integer(at: first + i).map(AppleFieldValue.integer)
            case .bool: r.bool(at: first + i).map(AppleFieldValue.bool)
            }
            if value != nil { any = true }
            values.append(value)
        }
        return any ? AppleExtras(values: values) : AppleExtras()
    }

    /// One stored fact. Throws `ProjectionError.corrupt` for a row this build cannot read.
    /// `knownSubscription`: the row's subscription when the caller has already parsed it.
    static func fact(_ r: some FactFields, knownSubscription: SubscriptionKey? = nil) throws -> Fact {
        guard let position = r.integer(.position), let recordedAt = r.integer(.recordedAt),
              let streamId = r.string(.streamId), let kindText = r.string(.kind), let originText = r.string(.origin),
              let signedAt = r.integer(.signedAt), let effectiveAt = r.integer(.effectiveAt) else {
            throw ProjectionError.corrupt("a facts row lacks one of position, recorded_at, stream_id, kind, origin, signed_at, effective_at")
        }
        guard let kind = Self.kind(kindText), let origin = Self.origin(originText) else {
            throw ProjectionError.corrupt("the fact at position \(position) has kind \(kindText) / origin \(originText), unknown to this build; derive facts for this build's schema version with `ledger rederive`")
        }
        var subscription: SubscriptionKey? = knownSubscription
        if knownSubscription == nil, let s = r.string(.subscription) {
            guard let key = r.subscription(s) else { throw ProjectionError.corrupt("fact subscription '\(s)' is not <environment>:<id>") }
            subscription = key
        }
        var transaction: TransactionFact?
        if r.bool(.hasTransaction) == true {
            transaction = TransactionFact(
                transactionId: r.string(.transactionId) ?? "", originalTransactionId: r.string(.txOriginal),
                webOrderLineItemId: r.string(.webOrderLineItemId), bundleId: r.string(.bundleId),
                productId: r.string(.productId), purchaseDate: r.integer(.purchaseDate), expiresDate: r.integer(.expiresDate),
                signedDate: r.integer(.txSignedDate), revocationDate: r.integer(.revocationDate),
                revocationReason: r.int(.revocationReason), revocationType: r.string(.revocationType),
                revocationPercentage: r.int(.revocationPercentage), isUpgraded: r.bool(.isUpgraded) ?? false,
                price: r.integer(.price), currency: r.string(.currency), offerType: r.int(.offerType),
                offerIdentifier: r.string(.offerIdentifier), appAccountToken: r.string(.appAccountToken),
                environment: r.string(.environment), type: r.string(.productType),
                inAppOwnershipType: r.string(.inAppOwnershipType),
                extras: extras(r, transactionExtras, first: firstTransactionExtra))
        }
        var renewal: RenewalFact?
        if r.bool(.hasRenewal) == true {
            renewal = RenewalFact(
                productId: r.string(.rProductId), autoRenewProductId: r.string(.autoRenewProductId),
                autoRenewStatus: r.int(.autoRenewStatus), expirationIntent: r.int(.expirationIntent),
                isInBillingRetryPeriod: r.bool(.isInBillingRetryPeriod),
                gracePeriodExpiresDate: r.integer(.gracePeriodExpiresDate),
                priceIncreaseStatus: r.int(.priceIncreaseStatus), offerType: r.int(.rOfferType),
                offerIdentifier: r.string(.rOfferIdentifier),
                recentSubscriptionStartDate: r.integer(.recentSubscriptionStartDate),
                renewalDate: r.integer(.renewalDate), appAccountToken: r.string(.rAppAccountToken),
                signedDate: r.integer(.rSignedDate), extras: extras(r, renewalExtras, first: firstRenewalExtra))
        }
        return Fact(
            position: position, ordinal: r.int(.ordinal) ?? 0, recordedAt: recordedAt, streamId: streamId,
            subscription: subscription, kind: kind, origin: origin, message: r.string(.message), signedAt: signedAt,
            effectiveAt: effectiveAt, transactionId: r.string(.transactionId), orderAlias: r.string(.orderAlias),
            customerId: r.string(.customerId), transaction: transaction, renewal: renewal, detail: r.string(.detail))
    }

    /// `FactKind(rawValue:)` with the two kinds almost every row has compared first (short
    /// strings compare in two words; the generated lookup was visible in a rebuild's profile).
    static func kind(_ text: String) -> FactKind? {
        switch text {
        case "transaction": .transaction
        case "renewal": .renewal
        default: FactKind(rawValue: text)
        }
    }

    static func origin(_ text: String) -> FactOrigin? {
        switch text {
        case "apple.v2": .appleV2
        case "wechat": .wechat
        default: FactOrigin(rawValue: text)
        }
    }
}

/// Field access shared by the two row formats (binary results of `query`, text rows of
/// `COPY … TO STDOUT`).
protocol FactFields {
    func string(at index: Int) -> String?
    /// A bigint/smallint column.
    func integer(at index: Int) -> Int64?
    func bool(at index: Int) -> Bool?
    /// The key of a `subscription` column's text.
    func subscription(_ text: String) -> SubscriptionKey?
}

extension FactFields {
    func subscription(_ text: String) -> SubscriptionKey? { SubscriptionKey(text: text) }
    func string(_ c: FactColumn) -> String? { string(at: c.rawValue) }
    func integer(_ c: FactColumn) -> Int64? { integer(at: c.rawValue) }
    func bool(_ c: FactColumn) -> Bool? { bool(at: c.rawValue) }
    func int(_ c: FactColumn) -> Int? { integer(c).map { Int(truncatingIfNeeded: $0) } }
}

/// What the rows of one result share while they are read: a subscription's facts repeat its
/// stream, subscription, product, bundle and customer row after row, and each fact kept (a fold
/// snapshot holds hundreds of thousands) would otherwise hold copies of its own.
final class FactReading {
    let text = RepeatedText(columns: FactRows.columnCount)
    private var last: (text: String, key: SubscriptionKey)?

    func subscription(_ text: String) -> SubscriptionKey? {
        if let last, last.text == text { return last.key }
        guard let key = SubscriptionKey(text: text) else { return nil }
        last = (text, key)
        return key
    }
}

/// A row of a binary query result whose columns are `FactRows.columns` in order, read with the
/// other rows of its result (`FactReading`).
struct FactQueryRow: FactFields {
    let row: Row
    let reading: FactReading
    func string(at index: Int) -> String? { try? row.string(at: index, repeating: reading.text) }
    func subscription(_ text: String) -> SubscriptionKey? { reading.subscription(text) }
    func integer(at index: Int) -> Int64? { try? row.decode(Int64?.self, at: index) }
    func bool(at index: Int) -> Bool? { try? row.decode(Bool?.self, at: index) }
}

/// A row of `COPY (SELECT <FactRows.columns> …) TO STDOUT` in text format, read in place by the
/// scan's reader (the row `split` last).
extension CopyRowReader: FactFields {
    func string(at index: Int) -> String? { string(index) }
    func integer(at index: Int) -> Int64? { integer(index) }
    func bool(at index: Int) -> Bool? { bool(index) }
}

extension QueryResult {
    /// The facts of a result whose columns are `FactRows.columns` in order, in row order.
    func facts() throws -> [Fact] {
        let reading = FactReading()
        return try rows.map { try FactRows.fact(FactQueryRow(row: $0, reading: reading)) }
    }
}
