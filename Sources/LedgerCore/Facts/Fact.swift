import Foundation

/// One subscription (or one-time purchase) as the ledger keys it: Apple's originalTransactionId
/// within one environment. A Sandbox purchase and a Production purchase are different
/// subscriptions even when they share an originalTransactionId (TestFlight and App Review use
/// Sandbox with real customers' appAccountTokens), so no Sandbox fact ever moves a Production state.
public struct SubscriptionKey: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// `Production` or `Sandbox` (Apple's spelling; V1's `PROD` and WeChat's `Env` 0/1 are mapped).
    public var environment: String
    public var originalTransactionId: String

    public init(environment: String, originalTransactionId: String) {
        self.environment = environment
        self.originalTransactionId = originalTransactionId
    }

    /// `<environment>:<originalTransactionId>`, the form stored in `facts.subscription` and the
    /// projection tables' `subscription` column.
    public var text: String { environment + ":" + originalTransactionId }
    public var description: String { text }

    /// Parses `text`; nil when there is no `:` or either side is empty.
    public init?(text: String) {
        guard let colon = text.firstIndex(of: ":") else { return nil }
        let env = String(text[..<colon]), id = String(text[text.index(after: colon)...])
        guard !env.isEmpty, !id.isEmpty else { return nil }
        self.init(environment: env, originalTransactionId: id)
    }

    public static func < (a: SubscriptionKey, b: SubscriptionKey) -> Bool { a.text < b.text }

    public static let production = "Production"
    public static let sandbox = "Sandbox"

    /// Apple's environment spellings mapped to the two the ledger keys by; nil for anything else.
    public static func environment(_ raw: String?) -> String? {
        switch raw {
        case "Production"?, "PROD"?: production
        case "Sandbox"?: sandbox
        default: nil
        }
    }
}

/// What a fact states. Each decoder (`FactDecoder`) emits these; each reader folds them.
public enum FactKind: String, Sendable, Hashable, CaseIterable, Codable {
    /// A signed snapshot of one transaction (Apple) or one paid order (WeChat delivery).
    /// Takes effect at its purchaseDate.
    case transaction
    /// A signed snapshot of the renewal state (Apple renewal info; WeChat contract signing,
    /// unsigning, or the renewal fields of a delivery). Takes effect when signed.
    case renewal
    /// A refund or revoke of one transaction/order (Apple REFUND, REVOKE, V1 cancellation, a
    /// successful WeChat refund). Takes effect at its revocationDate.
    case revocation
    /// Apple REFUND_REVERSED: reinstates what earlier revocations of the transaction took away.
    case reversal
    /// Apple REFUND_DECLINED (evidence for refund cases).
    case refundDeclined = "refund_declined"
    /// Apple CONSUMPTION_REQUEST (evidence; `detail.reason`).
    case consumptionRequest = "consumption_request"
    /// A WeChat iOS refund inquiry (evidence; `detail` has the asking's fields).
    case refundInquiry = "refund_inquiry"
    /// The ledger's answer to a refund inquiry (evidence; `detail` has decision, rule, evidence).
    case refundAnswer = "refund_answer"
    /// A WeChat refund that did not succeed (evidence).
    case refundFailed = "refund_failed"
    /// Two ids of one WeChat order (`transactionId` ~ `orderAlias`).
    case orderAlias = "order_alias"
    /// The ledger was told which customer a subscription belongs to (`customerId`), or that it
    /// belongs to nobody explicitly any more (`customerId` nil). Ordered by recording time.
    case customerTie = "customer_tie"
    /// The product catalog a service instance started with (`detail.digest`, `detail.catalog`).
    case catalog
    /// The app recorded whether a customer consents to the ledger sharing consumption data with
    /// Apple (`customerId`, `detail.consented`); the latest by recording time is in force.
    case consent
    /// The ledger's answer to an Apple CONSUMPTION_REQUEST: what it sent and Apple's answer, or why
    /// it sent nothing (`transactionId`, `detail`: outcome, reason, request, answer).
    case consumptionAnswer = "consumption_answer"
    /// A verified event the ledger could not interpret (`detail.reason`): kept, counted, never folded.
    case unreadable
    /// An ordinary WeChat purchase (a delivery without AppleSubscriptionInfo): the order, its
    /// amount and customer, for auditors. No subscription folds it.
    case purchase
    /// Apple's own word on the subscription's status when it signed: a V2 notification's
    /// `data.status` or a Get All Subscription Statuses item's `status` (`detail.status` 1–5,
    /// `detail.source` notification | api). No fold reads it: the Apple status check compares it
    /// with the fold (`AppleStatusCheck`).
    case appleStatus = "apple_status"
    /// Apple RESCIND_CONSENT: the customer of an app transaction withdrew consent
    /// (`detail.appTransactionId`). No subscription folds it; the entitlements answer shows it
    /// beside the grants of every subscription with that appTransactionId (the app decides).
    case consentRescinded = "consent_rescinded"
    /// Apple RENEWAL_EXTENSION/SUMMARY: a mass renewal-date extension finished (`detail`:
    /// requestIdentifier, productId, succeededCount, failedCount, storefrontCountryCodes). Checked
    /// against the RENEWAL_EXTENDED notifications received (`ExtensionSummaryCheck`).
    case extensionSummary = "extension_summary"
}

/// Which decoder a fact came from.
public enum FactOrigin: String, Sendable, Hashable, CaseIterable, Codable {
    case appleV2 = "apple.v2"
    case appleV1 = "apple.v1"
    /// App Store Server API answers (signed by Apple at request time).
    case appleAPI = "apple.api"
    case wechat
    case ledger
}

/// One thing a source stated, derived from one stored event by that source's decoder
/// (`FactDecoder`), exactly once: the live tables, the catch-up worker, a rebuild, time travel,
/// entitlements and refund cases all read these facts, never the payload.
///
/// Times are epoch milliseconds. `signedAt` orders facts of one kind (latest statement wins);
/// `effectiveAt` is the business time the fact takes effect (purchaseDate for a transaction,
/// revocationDate for a revocation, the signing time for renewal info and everything else).
///
/// Representation: every field lives in one immutable object shared by all copies, so copying a
/// fact retains one reference. Folds keep facts in several arrays and every loop over them copies
/// them; with the fields stored inline (a dozen strings, two boxed snapshots) each copy retained
/// and released every string, which was a fifth of a rebuild's client time. Setting a field
/// replaces the object (facts are built once and rarely changed).
public struct Fact: Sendable, Hashable {
    /// The stored fields (what the struct held inline before).
    struct Fields: Sendable, Hashable {
        var position: Int64
        var ordinal: Int
        var recordedAt: EpochMillis
        var streamId: String
        var subscription: SubscriptionKey?
        var kind: FactKind
        var origin: FactOrigin
        var message: String?
        var signedAt: EpochMillis
        var effectiveAt: EpochMillis
        var transactionId: String?
        var orderAlias: String?
        var customerId: String?
        var transaction: TransactionFact?
        var renewal: RenewalFact?
        var detail: String?

        /// Equal content: every field but the place in the log (position, ordinal, recordedAt, streamId).
        func sameContent(as o: Fields) -> Bool {
            subscription == o.subscription && kind == o.kind && origin == o.origin && message == o.message
                && signedAt == o.signedAt && effectiveAt == o.effectiveAt && transactionId == o.transactionId
                && orderAlias == o.orderAlias && customerId == o.customerId && detail == o.detail
                && transaction == o.transaction && renewal == o.renewal
        }
    }

    /// Immutable: readers need no exclusivity checks and the value is trivially Sendable.
    final class Storage: Sendable {
        let fields: Fields
        init(_ fields: Fields) { self.fields = fields }
    }

    fileprivate var storage: Storage

    private mutating func update(_ change: (inout Fields) -> Void) {
        var fields = storage.fields
        change(&fields)
        storage = Storage(fields)
    }

    /// Where the fact came from: its event's position, the fact's index among that event's facts,
    /// when the event was recorded and its stream. Not content: two events stating the same thing
    /// give equal facts for every fold.
    public var position: Int64 {
        get { storage.fields.position }
        set { update { $0.position = newValue } }
    }
    public var ordinal: Int {
        get { storage.fields.ordinal }
        set { update { $0.ordinal = newValue } }
    }
    public var recordedAt: EpochMillis {
        get { storage.fields.recordedAt }
        set { update { $0.recordedAt = newValue } }
    }
    public var streamId: String {
        _read { yield storage.fields.streamId }
        set { update { $0.streamId = newValue } }
    }

    /// The subscription the fact is about; nil when the source does not say (a WeChat refund names
    /// only an order: it joins its subscription through the order's ids).
    public var subscription: SubscriptionKey? {
        _read { yield storage.fields.subscription }
        set { update { $0.subscription = newValue } }
    }
    public var kind: FactKind {
        get { storage.fields.kind }
        set { update { $0.kind = newValue } }
    }
    public var origin: FactOrigin {
        get { storage.fields.origin }
        set { update { $0.origin = newValue } }
    }
    /// The message that stated it: `notificationType[/subtype]`, `V1/<notification_type>`, the
    /// WeChat event name, or the ledger's event type.
    public var message: String? {
        _read { yield storage.fields.message }
        set { update { $0.message = newValue } }
    }
    public var signedAt: EpochMillis {
        get { storage.fields.signedAt }
        set { update { $0.signedAt = newValue } }
    }
    public var effectiveAt: EpochMillis {
        get { storage.fields.effectiveAt }
        set { update { $0.effectiveAt = newValue } }
    }
    /// The transaction (Apple) or order (WeChat) the fact is about.
    public var transactionId: String? {
        _read { yield storage.fields.transactionId }
        set { update { $0.transactionId = newValue } }
    }
    /// Another id of the same WeChat order (WeChatPayInfo.MchOrderNo / TransactionId, WxOrderId).
    public var orderAlias: String? {
        _read { yield storage.fields.orderAlias }
        set { update { $0.orderAlias = newValue } }
    }
    /// Normalised customer id: a lowercase appAccountToken, a WeChat openid, or a tie's customer.
    public var customerId: String? {
        _read { yield storage.fields.customerId }
        set { update { $0.customerId = newValue } }
    }
    public var transaction: TransactionFact? {
        _read { yield storage.fields.transaction }
        set { update { $0.transaction = newValue } }
    }
    public var renewal: RenewalFact? {
        _read { yield storage.fields.renewal }
        set { update { $0.renewal = newValue } }
    }
    /// Evidence fields that no subscription fold reads, as canonical JSON (an object): refund
    /// inquiry fields, decisions, reasons. Read with `details`.
    public var detail: String? {
        _read { yield storage.fields.detail }
        set { update { $0.detail = newValue } }
    }

    public init(
        position: Int64 = 0, ordinal: Int = 0, recordedAt: EpochMillis = 0, streamId: String = "",
        subscription: SubscriptionKey?, kind: FactKind, origin: FactOrigin, message: String? = nil,
        signedAt: EpochMillis, effectiveAt: EpochMillis? = nil, transactionId: String? = nil,
        orderAlias: String? = nil, customerId: String? = nil, transaction: TransactionFact? = nil,
        renewal: RenewalFact? = nil, detail: String? = nil
    ) {
        storage = Storage(Fields(
            position: position, ordinal: ordinal, recordedAt: recordedAt, streamId: streamId, subscription: subscription,
            kind: kind, origin: origin, message: message, signedAt: signedAt, effectiveAt: effectiveAt ?? signedAt,
            transactionId: transactionId, orderAlias: orderAlias, customerId: customerId, transaction: transaction,
            renewal: renewal, detail: detail))
    }

    public static func == (a: Fact, b: Fact) -> Bool {
        a.storage === b.storage || a.storage.fields == b.storage.fields
    }

    public func hash(into hasher: inout Hasher) { storage.fields.hash(into: &hasher) }

    /// `detail` as a JSON object (empty when absent).
    public var details: [String: JSONValue] {
        guard let detail, let v = try? JSONDecoder().decode(JSONValue.self, from: Data(detail.utf8)),
              let o = v.objectValue else { return [:] }
        return o
    }

    /// The same fact with its place in the log set (decoders leave it empty; the store fills it).
    public func placed(position: Int64, ordinal: Int, recordedAt: EpochMillis, streamId: String) -> Fact {
        var f = self
        f.update {
            $0.position = position
            $0.ordinal = ordinal
            $0.recordedAt = recordedAt
            $0.streamId = streamId
        }
        return f
    }

    /// The fact without its place: equal for two events that state the same thing.
    public var content: Fact { placed(position: 0, ordinal: 0, recordedAt: 0, streamId: "") }

    /// A total order on content only (never position, recordedAt or stream), so which of two
    /// equally-ranked facts wins can never depend on arrival.
    public func contentPrecedes(_ other: Fact) -> Bool {
        // Compared in place: the same answer as comparing `content` copies, without building them.
        if storage === other.storage || storage.fields.sameContent(as: other.storage.fields) { return false }
        return contentKey < other.contentKey
    }

    private var contentKey: String {
        var parts = [subscription?.text ?? "", kind.rawValue, origin.rawValue, message ?? "", String(signedAt),
                     String(effectiveAt), transactionId ?? "", orderAlias ?? "", customerId ?? "", detail ?? ""]
        parts.append(transaction.map { String(describing: $0) } ?? "-")
        parts.append(renewal.map { String(describing: $0) } ?? "-")
        return parts.joined(separator: "\u{1F}")
    }
}

/// Printing a fact (test failures, `dump`) shows its fields, not the shared object that holds them.
extension Fact: CustomReflectable {
    public var customMirror: Mirror {
        let f = storage.fields
        return Mirror(self, children: [
            "position": f.position, "ordinal": f.ordinal, "recordedAt": f.recordedAt, "streamId": f.streamId,
            "subscription": f.subscription as Any, "kind": f.kind, "origin": f.origin, "message": f.message as Any,
            "signedAt": f.signedAt, "effectiveAt": f.effectiveAt, "transactionId": f.transactionId as Any,
            "orderAlias": f.orderAlias as Any, "customerId": f.customerId as Any, "transaction": f.transaction as Any,
            "renewal": f.renewal as Any, "detail": f.detail as Any,
        ], displayStyle: .struct)
    }
}

/// Customer ids compare case-insensitively where the source does not define case: Apple sends
/// appAccountToken in lowercase, while Swift's `UUID().uuidString` (what many apps store) is
/// uppercase. Normalised once, at fact time.
public enum CustomerId {
    /// An appAccountToken (always a UUID): lowercased; nil when empty.
    public static func normalised(appAccountToken token: String?) -> String? {
        guard let token else { return nil }
        let t = token.trimmingCharacters(in: .whitespaces)
        return t.isEmpty ? nil : t.lowercased()
    }

    /// Any customer id a caller names (a path parameter, a tie): a UUID is lowercased like an
    /// appAccountToken; anything else (a WeChat openid, the app's own ids) is case-sensitive and
    /// kept as given.
    public static func normalised(_ id: String) -> String {
        UUID(uuidString: id) != nil ? id.lowercased() : id
    }
}

/// Apple's originalTransactionId as the ledger accepts it: 1–20 ASCII digits (Apple issues
/// decimal ids; anything else could file an event under a ledger stream such as `ledger:admin`).
public enum OriginalTransactionId {
    public static func isValid(_ id: String) -> Bool {
        let bytes = id.utf8
        return (1...20).contains(bytes.count) && bytes.allSatisfy { $0 >= 0x30 && $0 <= 0x39 }
    }
}
