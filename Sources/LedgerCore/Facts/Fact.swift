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
public struct Fact: Sendable, Hashable {
    /// Where the fact came from: its event's position, the fact's index among that event's facts,
    /// when the event was recorded and its stream. Not content: two events stating the same thing
    /// give equal facts for every fold.
    public var position: Int64
    public var ordinal: Int
    public var recordedAt: EpochMillis
    public var streamId: String

    /// The subscription the fact is about; nil when the source does not say (a WeChat refund names
    /// only an order: it joins its subscription through the order's ids).
    public var subscription: SubscriptionKey?
    public var kind: FactKind
    public var origin: FactOrigin
    /// The message that stated it: `notificationType[/subtype]`, `V1/<notification_type>`, the
    /// WeChat event name, or the ledger's event type.
    public var message: String?
    public var signedAt: EpochMillis
    public var effectiveAt: EpochMillis
    /// The transaction (Apple) or order (WeChat) the fact is about.
    public var transactionId: String?
    /// Another id of the same WeChat order (WeChatPayInfo.MchOrderNo / TransactionId, WxOrderId).
    public var orderAlias: String?
    /// Normalised customer id: a lowercase appAccountToken, a WeChat openid, or a tie's customer.
    public var customerId: String?
    public var transaction: TransactionFact? {
        get { transactionBox?.value }
        set { transactionBox = newValue.map(FactBox.init) }
    }
    public var renewal: RenewalFact? {
        get { renewalBox?.value }
        set { renewalBox = newValue.map(FactBox.init) }
    }
    /// Evidence fields that no subscription fold reads, as canonical JSON (an object): refund
    /// inquiry fields, decisions, reasons. Read with `details`.
    public var detail: String?

    private var transactionBox: FactBox<TransactionFact>?
    private var renewalBox: FactBox<RenewalFact>?

    public init(
        position: Int64 = 0, ordinal: Int = 0, recordedAt: EpochMillis = 0, streamId: String = "",
        subscription: SubscriptionKey?, kind: FactKind, origin: FactOrigin, message: String? = nil,
        signedAt: EpochMillis, effectiveAt: EpochMillis? = nil, transactionId: String? = nil,
        orderAlias: String? = nil, customerId: String? = nil, transaction: TransactionFact? = nil,
        renewal: RenewalFact? = nil, detail: String? = nil
    ) {
        self.position = position
        self.ordinal = ordinal
        self.recordedAt = recordedAt
        self.streamId = streamId
        self.subscription = subscription
        self.kind = kind
        self.origin = origin
        self.message = message
        self.signedAt = signedAt
        self.effectiveAt = effectiveAt ?? signedAt
        self.transactionId = transactionId
        self.orderAlias = orderAlias
        self.customerId = customerId
        self.transactionBox = transaction.map(FactBox.init)
        self.renewalBox = renewal.map(FactBox.init)
        self.detail = detail
    }

    /// `detail` as a JSON object (empty when absent).
    public var details: [String: JSONValue] {
        guard let detail, let v = try? JSONDecoder().decode(JSONValue.self, from: Data(detail.utf8)),
              let o = v.objectValue else { return [:] }
        return o
    }

    /// The same fact with its place in the log set (decoders leave it empty; the store fills it).
    public func placed(position: Int64, ordinal: Int, recordedAt: EpochMillis, streamId: String) -> Fact {
        var f = self
        f.position = position
        f.ordinal = ordinal
        f.recordedAt = recordedAt
        f.streamId = streamId
        return f
    }

    /// The fact without its place: equal for two events that state the same thing.
    public var content: Fact { placed(position: 0, ordinal: 0, recordedAt: 0, streamId: "") }

    /// A total order on content only (never position, recordedAt or stream), so which of two
    /// equally-ranked facts wins can never depend on arrival.
    public func contentPrecedes(_ other: Fact) -> Bool {
        let a = content, b = other.content
        if a == b { return false }
        return a.contentKey < b.contentKey
    }

    private var contentKey: String {
        var parts = [subscription?.text ?? "", kind.rawValue, origin.rawValue, message ?? "", String(signedAt),
                     String(effectiveAt), transactionId ?? "", orderAlias ?? "", customerId ?? "", detail ?? ""]
        parts.append(transaction.map { String(describing: $0) } ?? "-")
        parts.append(renewal.map { String(describing: $0) } ?? "-")
        return parts.joined(separator: "\u{1F}")
    }
}

/// An immutable, shared value: copying a fact copies a reference, not the value.
final class FactBox<Value: Hashable & Sendable>: Hashable, Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
    static func == (a: FactBox, b: FactBox) -> Bool { a === b || a.value == b.value }
    func hash(into hasher: inout Hasher) { hasher.combine(value) }
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
