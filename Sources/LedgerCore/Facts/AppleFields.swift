import Foundation

/// **The one list of Apple's fields** (issue 19 item 3): every member of a signed transaction
/// (`JWSTransactionDecodedPayload`) and renewal info (`JWSRenewalInfoDecodedPayload`) the ledger
/// keeps, with its type, its column in `public.facts`, the name the ledger's answers use, and —
/// when an answer shows it — its column in the projection table (`projections.transactions` for
/// transactions, `projections.subscriptions` for the renewal info in effect).
///
/// The V2 notification decoder, the App Store API decoder, the fact rows (COPY writer and reader),
/// the projection rows and the API representations all walk these tables, so **adding a field**
/// is three edits (ARCHITECTURE.md "How to add a field"):
/// 1. a row here (`AppleField(name:type:column:apiName:projection:)`, no `core` closure: the
///    value is kept in the snapshot's `extras`);
/// 2. a migration adding its `public.facts` column (and its projection column, when shown);
/// 3. `docs/openapi.yaml`.
///
/// Rows with a `core` closure are the fields the folds read: they live in typed properties of
/// `TransactionFact` / `RenewalFact` and their fact columns are `FactColumn` cases (the row reader
/// of a rebuild reads them without a table walk). A test checks the two agree.
///
/// The payload is decoded once: the verifier's parsed tree (JSONSerialization's objects, or the
/// `JSONValue` an API answer was built as) travels with the `NewEvent` (`ParsedPayload`) and the
/// decoder reads these fields from it; only a stored event (rederive) is parsed again, once.
public enum AppleFieldType: String, Sendable, Hashable {
    /// A JSON string.
    case text
    /// A JSON integer (a fractional or boolean value reads as absent).
    case integer
    /// Epoch milliseconds: an integer, or a fractional number (Xcode signs those) rounded.
    case millis
    /// A JSON `true` / `false`.
    case bool
}

/// One kept value. Kept as Apple sent it (no enum), so a value Apple adds later is kept too.
public enum AppleFieldValue: Sendable, Hashable, CustomStringConvertible {
    case text(String)
    case integer(Int64)
    case bool(Bool)

    public var text: String? { if case .text(let s) = self { s } else { nil } }
    public var integer: Int64? { if case .integer(let i) = self { i } else { nil } }
    public var int: Int? { integer.flatMap { Int(exactly: $0) } }
    public var bool: Bool? { if case .bool(let b) = self { b } else { nil } }

    public var json: JSONValue {
        switch self {
        case .text(let s): .string(s)
        case .integer(let i): .integer(i)
        case .bool(let b): .bool(b)
        }
    }

    public var description: String {
        switch self {
        case .text(let s): s
        case .integer(let i): String(i)
        case .bool(let b): b ? "true" : "false"
        }
    }
}

/// One row of a field table.
public struct AppleField<Snapshot>: Sendable {
    /// Apple's member name in the signed payload.
    public let name: String
    public let type: AppleFieldType
    /// Its column in `public.facts`.
    public let column: String
    /// Its name in the ledger's answers (Apple's, unless two tables would clash in one answer).
    public let apiName: String
    /// Its column in the projection table an answer reads, nil when no answer shows it.
    public let projection: String?
    /// Sets the typed property the folds read; nil: the value lives in `extras`.
    let core: (@Sendable (inout Snapshot, AppleFieldValue?) -> Void)?

    public init(name: String, type: AppleFieldType, column: String, apiName: String? = nil, projection: String? = nil) {
        self.name = name
        self.type = type
        self.column = column
        self.apiName = apiName ?? name
        self.projection = projection
        self.core = nil
    }

    init(core name: String, _ type: AppleFieldType, column: String, _ set: @escaping @Sendable (inout Snapshot, AppleFieldValue?) -> Void) {
        self.name = name
        self.type = type
        self.column = column
        self.apiName = name
        self.projection = nil
        self.core = set
    }

    public var isCore: Bool { core != nil }
}

/// The values of a snapshot's non-core fields, in the order of its table's non-core rows.
/// Empty when Apple stated none of them (no allocation for the common old payload).
public struct AppleExtras: Sendable, Hashable, CustomStringConvertible {
    public private(set) var values: [AppleFieldValue?]

    public init() { values = [] }

    public init(values: [AppleFieldValue?]) {
        self.values = values.contains { $0 != nil } ? values : []
    }

    public subscript(index: Int) -> AppleFieldValue? {
        index < values.count ? values[index] : nil
    }

    mutating func set(_ index: Int, _ value: AppleFieldValue?, count: Int) {
        if value == nil && index >= values.count { return }
        if values.count < count { values += [AppleFieldValue?](repeating: nil, count: count - values.count) }
        values[index] = value
        if !values.contains(where: { $0 != nil }) { values = [] }
    }

    public var isEmpty: Bool { values.isEmpty }
    public var description: String { values.map { $0?.description ?? "-" }.joined(separator: ",") }
}

/// The tables (see `AppleFieldType` for what they are for).
public enum AppleFields {
    /// JWSTransactionDecodedPayload (reference/apple.md §2.5).
    public static let transaction: [AppleField<TransactionFact>] = [
        .init(core: "transactionId", .text, column: "transaction_id") { s, v in s.transactionId = v?.text ?? "" },
        .init(core: "originalTransactionId", .text, column: "tx_original_transaction_id") { s, v in s.originalTransactionId = v?.text },
        .init(core: "webOrderLineItemId", .text, column: "web_order_line_item_id") { s, v in s.webOrderLineItemId = v?.text },
        .init(core: "bundleId", .text, column: "bundle_id") { s, v in s.bundleId = v?.text },
        .init(core: "productId", .text, column: "product_id") { s, v in s.productId = v?.text },
        .init(core: "type", .text, column: "product_type") { s, v in s.type = v?.text },
        .init(core: "purchaseDate", .millis, column: "purchase_date") { s, v in s.purchaseDate = v?.integer },
        .init(core: "expiresDate", .millis, column: "expires_date") { s, v in s.expiresDate = v?.integer },
        .init(core: "signedDate", .millis, column: "tx_signed_date") { s, v in s.signedDate = v?.integer },
        .init(core: "revocationDate", .millis, column: "revocation_date") { s, v in s.revocationDate = v?.integer },
        .init(core: "revocationReason", .integer, column: "revocation_reason") { s, v in s.revocationReason = v?.int },
        .init(core: "revocationType", .text, column: "revocation_type") { s, v in s.revocationType = v?.text },
        .init(core: "revocationPercentage", .integer, column: "revocation_percentage") { s, v in s.revocationPercentage = v?.int },
        .init(core: "isUpgraded", .bool, column: "is_upgraded") { s, v in s.isUpgraded = v?.bool ?? false },
        .init(core: "price", .integer, column: "price") { s, v in s.price = v?.integer },
        .init(core: "currency", .text, column: "currency") { s, v in s.currency = v?.text },
        .init(core: "offerType", .integer, column: "offer_type") { s, v in s.offerType = v?.int },
        .init(core: "offerIdentifier", .text, column: "offer_identifier") { s, v in s.offerIdentifier = v?.text },
        .init(core: "appAccountToken", .text, column: "app_account_token") { s, v in
            s.appAccountToken = CustomerId.normalised(appAccountToken: v?.text)
        },
        .init(core: "environment", .text, column: "environment") { s, v in s.environment = v?.text },
        .init(core: "inAppOwnershipType", .text, column: "in_app_ownership_type") { s, v in s.inAppOwnershipType = v?.text },
        // Fields no fold reads: one row each (issue 19 item 3), nothing else in Swift.
        AppleField(name: "offerDiscountType", type: .text, column: "offer_discount_type", projection: "offer_discount_type"),
        AppleField(name: "appTransactionId", type: .text, column: "app_transaction_id", projection: "app_transaction_id"),
    ]

    /// JWSRenewalInfoDecodedPayload (reference/apple.md §2.6).
    public static let renewal: [AppleField<RenewalFact>] = [
        .init(core: "productId", .text, column: "r_product_id") { s, v in s.productId = v?.text },
        .init(core: "autoRenewProductId", .text, column: "auto_renew_product_id") { s, v in s.autoRenewProductId = v?.text },
        .init(core: "autoRenewStatus", .integer, column: "auto_renew_status") { s, v in s.autoRenewStatus = v?.int },
        .init(core: "expirationIntent", .integer, column: "expiration_intent") { s, v in s.expirationIntent = v?.int },
        .init(core: "isInBillingRetryPeriod", .bool, column: "is_in_billing_retry_period") { s, v in s.isInBillingRetryPeriod = v?.bool },
        .init(core: "gracePeriodExpiresDate", .millis, column: "grace_period_expires_date") { s, v in s.gracePeriodExpiresDate = v?.integer },
        .init(core: "priceIncreaseStatus", .integer, column: "price_increase_status") { s, v in s.priceIncreaseStatus = v?.int },
        .init(core: "offerType", .integer, column: "r_offer_type") { s, v in s.offerType = v?.int },
        .init(core: "offerIdentifier", .text, column: "r_offer_identifier") { s, v in s.offerIdentifier = v?.text },
        .init(core: "recentSubscriptionStartDate", .millis, column: "recent_subscription_start_date") { s, v in
            s.recentSubscriptionStartDate = v?.integer
        },
        .init(core: "renewalDate", .millis, column: "renewal_date") { s, v in s.renewalDate = v?.integer },
        .init(core: "appAccountToken", .text, column: "r_app_account_token") { s, v in
            s.appAccountToken = CustomerId.normalised(appAccountToken: v?.text)
        },
        .init(core: "signedDate", .millis, column: "r_signed_date") { s, v in s.signedDate = v?.integer },
        // The subscription answer shows the renewal info in effect beside the transaction's own
        // fields, so the renewal's price and currency are named for what they are there.
        AppleField(name: "renewalPrice", type: .integer, column: "renewal_price", projection: "renewal_price"),
        AppleField(name: "currency", type: .text, column: "r_currency", apiName: "renewalCurrency", projection: "renewal_currency"),
        AppleField(name: "offerDiscountType", type: .text, column: "r_offer_discount_type", apiName: "renewalOfferDiscountType",
                   projection: "renewal_offer_discount_type"),
        AppleField(name: "appTransactionId", type: .text, column: "r_app_transaction_id", apiName: "renewalAppTransactionId"),
    ]

    /// The non-core rows, in table order: the order of `extras` and of the extra fact columns.
    public static let transactionExtras = transaction.filter { !$0.isCore }
    public static let renewalExtras = renewal.filter { !$0.isCore }

    /// The snapshot a signed transaction states; nil without a transactionId (it could be merged
    /// with nothing).
    public static func transaction(from object: some FieldTree) -> TransactionFact? {
        guard case .text(let id)? = object.value("transactionId", as: .text), !id.isEmpty else { return nil }
        var snapshot = TransactionFact(transactionId: id)
        snapshot.extras = read(transaction, into: &snapshot, from: object)
        return snapshot
    }

    /// The snapshot a signed renewal info states (absent fields are cleared, never inherited).
    public static func renewal(from object: some FieldTree) -> RenewalFact {
        var snapshot = RenewalFact()
        snapshot.extras = read(renewal, into: &snapshot, from: object)
        return snapshot
    }

    /// Walks a table: core rows set their typed property, the others' values are returned (extras).
    static func read<S>(_ table: [AppleField<S>], into snapshot: inout S, from object: some FieldTree) -> AppleExtras {
        var extras: [AppleFieldValue?] = []
        for field in table {
            let value = object.value(field.name, as: field.type)
            if let set = field.core { set(&snapshot, value) } else { extras.append(value) }
        }
        return AppleExtras(values: extras)
    }

    /// `extras` with the values of rows no answer shows (no projection column) cleared: what a
    /// projection row keeps, so a state read back from the table equals the fold's.
    public static func projected<S>(_ extras: AppleExtras, _ table: [AppleField<S>]) -> AppleExtras {
        if extras.isEmpty || table.allSatisfy({ $0.projection != nil }) { return extras }
        return AppleExtras(values: table.indices.map { table[$0].projection == nil ? nil : extras[$0] })
    }

    /// The API members of a snapshot's extras (`apiName: value`, only those stated).
    public static func json<S>(_ extras: AppleExtras, of table: [AppleField<S>]) -> [String: JSONValue] {
        var out: [String: JSONValue] = [:]
        for (i, field) in table.enumerated() { if let v = extras[i] { out[field.apiName] = v.json } }
        return out
    }
}

extension TransactionFact {
    /// A non-core field by Apple's name (`offerDiscountType`, `appTransactionId`, …).
    public func extra(_ name: String) -> AppleFieldValue? {
        AppleFields.transactionExtras.firstIndex { $0.name == name }.flatMap { extras[$0] }
    }
}

extension RenewalFact {
    /// A non-core field by Apple's name (`renewalPrice`, `currency`, …).
    public func extra(_ name: String) -> AppleFieldValue? {
        AppleFields.renewalExtras.firstIndex { $0.name == name }.flatMap { extras[$0] }
    }
}

// MARK: - Reading parsed JSON

/// One parsed JSON object as a decoder reads it, whichever parser made it: JSONSerialization's
/// tree (what the V2 verifier parsed, `FoundationObject`) or a `JSONValue` (what the App Store API
/// answers are built as). A value of another type than asked for reads as absent, so a field
/// Apple changes the type of is dropped instead of making a verified message unreadable.
public protocol FieldTree {
    func value(_ name: String, as type: AppleFieldType) -> AppleFieldValue?
    /// A member that is itself an object.
    func child(_ name: String) -> Self?
    /// A member that is an array of objects (other elements skipped).
    func children(_ name: String) -> [Self]?
    /// A member that is an array of strings (other elements skipped; empty when absent).
    func texts(_ name: String) -> [String]
}

extension FieldTree {
    public func text(_ name: String) -> String? { value(name, as: .text)?.text }
    public func integer(_ name: String) -> Int64? { value(name, as: .integer)?.integer }
    public func millis(_ name: String) -> EpochMillis? { value(name, as: .millis)?.integer }
    public func bool(_ name: String) -> Bool? { value(name, as: .bool)?.bool }
}

extension JSONValue: FieldTree {
    public func value(_ name: String, as type: AppleFieldType) -> AppleFieldValue? {
        guard let v = self[name] else { return nil }
        switch (type, v) {
        case (.text, .string(let s)): return .text(s)
        case (.integer, .integer(let i)), (.millis, .integer(let i)): return .integer(i)
        case (.integer, .number(let d)):
            return d.isFinite && d == d.rounded() && abs(d) < 9.2e18 ? .integer(Int64(d)) : nil
        case (.millis, .number(let d)):
            return d.isFinite && abs(d) < 9.2e18 ? .integer(Int64(d.rounded())) : nil
        case (.bool, .bool(let b)): return .bool(b)
        default: return nil
        }
    }

    public func child(_ name: String) -> JSONValue? {
        guard let v = self[name], v.objectValue != nil else { return nil }
        return v
    }

    public func children(_ name: String) -> [JSONValue]? {
        self[name]?.arrayValue.map { $0.filter { $0.objectValue != nil } }
    }

    public func texts(_ name: String) -> [String] {
        (self[name]?.arrayValue ?? []).compactMap { if case .string(let s) = $0 { s } else { nil } }
    }
}

/// JSONSerialization's object, read as `FieldTree`.
public struct FoundationObject: FieldTree, @unchecked Sendable {
    // @unchecked: JSONSerialization's values (NSString/String, NSNumber, NSNull, arrays and
    // dictionaries of them) are never mutated once parsed; only `let` access is offered.
    public let members: [String: Any]

    public init(_ members: [String: Any]) { self.members = members }

    /// Parses one JSON object; nil when the bytes are not one.
    public init?(json: Data) {
        guard let any = try? JSONSerialization.jsonObject(with: json, options: []), let o = any as? [String: Any] else { return nil }
        members = o
    }

    public func value(_ name: String, as type: AppleFieldType) -> AppleFieldValue? {
        guard let v = members[name] else { return nil }
        switch type {
        case .text: return (v as? String).map(AppleFieldValue.text)
        case .integer: return FoundationJSON.int64(v).map(AppleFieldValue.integer)
        case .millis: return FoundationJSON.millis(v).map(AppleFieldValue.integer)
        case .bool:
            guard let n = v as? NSNumber, FoundationJSON.isBoolean(n) else { return nil }
            return .bool(n.boolValue)
        }
    }

    public func child(_ name: String) -> FoundationObject? {
        (members[name] as? [String: Any]).map(FoundationObject.init)
    }

    public func children(_ name: String) -> [FoundationObject]? {
        (members[name] as? [Any]).map { $0.compactMap { ($0 as? [String: Any]).map(FoundationObject.init) } }
    }

    public func texts(_ name: String) -> [String] {
        (members[name] as? [Any] ?? []).compactMap { $0 as? String }
    }
}

/// Reading numbers out of JSONSerialization results (shared with AppStore's verifier).
public enum FoundationJSON {
    /// Whether a JSONSerialization number is a JSON `true`/`false`. Not `value is Bool`: on Linux
    /// every NSNumber holding 0 or 1 casts to Bool, so a JSON `0` or `1` would read as a boolean.
    /// Booleans are the only NSNumbers of Objective-C type `c` JSONSerialization makes, on Linux
    /// and Darwin.
    public static func isBoolean(_ n: NSNumber) -> Bool {
        n.objCType.pointee == CChar(UInt8(ascii: "c"))
    }

    /// A millisecond timestamp: integer, or fractional (Xcode) rounded to the nearest ms; nil when
    /// not a number or beyond ±9.2e18.
    public static func millis(_ v: Any?) -> Int64? {
        guard let n = v as? NSNumber, !isBoolean(n) else { return nil }
        let d = n.doubleValue
        guard d.isFinite, abs(d) < 9.2e18 else { return nil }
        // Integers keep full precision (doubles lose it above 2^53); fractions round to nearest.
        return d.rounded() == d ? n.int64Value : Int64(d.rounded())
    }

    /// An integral number; nil for fractions, booleans and anything else.
    public static func int64(_ v: Any?) -> Int64? {
        guard let n = v as? NSNumber, !isBoolean(n) else { return nil }
        let d = n.doubleValue
        guard d.isFinite, d == d.rounded(), abs(d) < 9.2e18 else { return nil }
        return n.int64Value
    }
}
