import Foundation

/// A stream of the event log, built and recognised here only. A subscription's stream is Apple's
/// originalTransactionId (V2, V1, API answers and WeChat pushes that carry
/// AppleSubscriptionInfo); every other stream lives in a namespace (`apple:`, `wechat:`,
/// `ledger:`) that an originalTransactionId (1–20 digits) can never start with. The stored form is
/// `text`, which is what `NewEvent.streamId` holds.
public struct StreamId: Hashable, Comparable, Sendable, CustomStringConvertible {
    public let text: String

    public init(_ text: String) { self.text = text }

    public var description: String { text }

    public static func < (a: StreamId, b: StreamId) -> Bool { a.text < b.text }

    /// What a stream holds.
    public enum Kind: Equatable, Sendable {
        /// One subscription (or one-time purchase) by Apple's originalTransactionId.
        case subscription(originalTransactionId: String)
        /// Apple TEST notifications.
        case appleTest
        /// RENEWAL_EXTENSION/SUMMARY, by the request identifier.
        case appleSummary(requestIdentifier: String)
        /// EXTERNAL_PURCHASE_TOKEN notifications.
        case appleExternalPurchase(id: String)
        /// Apple notifications without a transaction of their own, by bundle id.
        case appleApp(bundleId: String)
        /// Authentic Apple notifications (the outer signature holds) the ledger could not read,
        /// kept as evidence under the digest of their exact bytes.
        case appleUnreadable
        /// WeChat events that name an order not (yet) linked to a subscription.
        case wechatOrder(orderId: String)
        /// Authentic WeChat pushes the ledger does not model, by event name.
        case wechatOther(name: String)
        /// Authentic xpay pushes the ledger could not fully interpret (a required field missing),
        /// kept as evidence, by event name.
        case wechatUnreadable(name: String)
        /// The ledger's administrative actions.
        case ledgerAdmin
        /// The configuration the ledger ran with (catalog digests).
        case ledgerConfig
        /// Customers' consent to sharing consumption data with Apple.
        case ledgerConsent
        /// Reconciliation with Apple: the drift reports.
        case ledgerReconciliation
        /// One outbox consumer's attempts and answers (`outbox/*` events).
        case ledgerOutbox(consumer: String)
        /// A namespaced stream this build does not know (written by a newer build).
        case unknown(namespace: String)
    }

    // Prefixes, each written once.
    private static let appleSummaryPrefix = "apple:summary:"
    private static let appleExternalPrefix = "apple:external-purchase:"
    private static let appleAppPrefix = "apple:app:"
    private static let wechatOrderPrefix = "wechat:order:"
    private static let wechatOtherPrefix = "wechat:other:"
    private static let wechatUnreadablePrefix = "wechat:unreadable:"
    private static let ledgerOutboxPrefix = "ledger:outbox:"
    private static let namespaces = ["apple:", "wechat:", "ledger:"]

    public static func subscription(_ originalTransactionId: String) -> StreamId { StreamId(originalTransactionId) }
    public static let appleTest = StreamId("apple:test")
    public static let appleUnreadable = StreamId("apple:unreadable")
    public static func appleSummary(requestIdentifier: String) -> StreamId { StreamId(appleSummaryPrefix + requestIdentifier) }
    public static func appleExternalPurchase(id: String) -> StreamId { StreamId(appleExternalPrefix + id) }
    public static func appleApp(bundleId: String) -> StreamId { StreamId(appleAppPrefix + bundleId) }
    /// A WeChat event whose order is not yet linked to a subscription (an early refund inquiry, an
    /// ordinary purchase's delivery).
    public static func wechatOrder(_ orderId: String) -> StreamId { StreamId(wechatOrderPrefix + orderId) }
    public static func wechatOther(event: String?, msgType: String?) -> StreamId {
        StreamId(wechatOtherPrefix + (event ?? msgType ?? "unknown"))
    }
    /// An authentic xpay push the ledger could not fully interpret (kept as evidence).
    public static func wechatUnreadable(event: String?) -> StreamId { StreamId(wechatUnreadablePrefix + (event ?? "unknown")) }
    public static let ledgerAdmin = StreamId("ledger:admin")
    public static let ledgerConfig = StreamId("ledger:config")
    public static let ledgerConsent = StreamId("ledger:consent")
    public static let ledgerReconciliation = StreamId("ledger:reconciliation")
    /// The attempts and answers of one outbox consumer (Sources/LedgerStore/Outbox).
    public static func ledgerOutbox(consumer: String) -> StreamId { StreamId(ledgerOutboxPrefix + consumer) }

    public var kind: Kind {
        func rest(_ prefix: String) -> String? { text.hasPrefix(prefix) ? String(text.dropFirst(prefix.count)) : nil }
        if self == .appleTest { return .appleTest }
        if self == .appleUnreadable { return .appleUnreadable }
        if self == .ledgerAdmin { return .ledgerAdmin }
        if self == .ledgerConfig { return .ledgerConfig }
        if self == .ledgerConsent { return .ledgerConsent }
        if self == .ledgerReconciliation { return .ledgerReconciliation }
        if let id = rest(Self.appleSummaryPrefix) { return .appleSummary(requestIdentifier: id) }
        if let id = rest(Self.appleExternalPrefix) { return .appleExternalPurchase(id: id) }
        if let id = rest(Self.appleAppPrefix) { return .appleApp(bundleId: id) }
        if let id = rest(Self.wechatOrderPrefix) { return .wechatOrder(orderId: id) }
        if let name = rest(Self.wechatOtherPrefix) { return .wechatOther(name: name) }
        if let name = rest(Self.wechatUnreadablePrefix) { return .wechatUnreadable(name: name) }
        if let consumer = rest(Self.ledgerOutboxPrefix) { return .ledgerOutbox(consumer: consumer) }
        if let namespace = Self.namespaces.first(where: text.hasPrefix) { return .unknown(namespace: namespace) }
        return .subscription(originalTransactionId: text)
    }

    /// Whether events of this stream belong to one subscription.
    public var isSubscription: Bool {
        if case .subscription = kind { return true }
        return false
    }
}

/// Dedupe keys the ledger builds itself (Apple's V2 notifications use notificationUUID; V1, API
/// answers and WeChat pushes document theirs beside their decoders). Two appends with the same
/// stream and key are one event.
public enum DedupeKey {
    /// A WeChat goods delivery: its OutTradeNo (xpay's own idempotency key).
    public static func wechatDelivery(_ orderId: String) -> String { "deliver:" + orderId }
    /// The link of a provisional order stream to a subscription: linking twice is one event.
    public static func orderLink(_ provisional: StreamId) -> String { "link:" + provisional.text }
    /// The ledger's answer to one asking of a refund inquiry (`pay_order_id`, `refund_time` in
    /// seconds): one answer per asking; a re-push of the asking gets the stored answer.
    public static func refundDecision(payOrderId: String, refundTime: Int64) -> String {
        "refund-decision:\(payOrderId):\(refundTime)"
    }
    /// The answer to an inquiry stored before answers were per asking (one per order).
    public static func refundDecision(payOrderId: String) -> String { "refund-decision:" + payOrderId }
    /// WeChat's answer to the ledger's `query_subscribe_contract` (or `query_order`) at `askedAt`.
    public static func wechatAPIAnswer(_ api: String, subject: String, askedAt: EpochMillis) -> String {
        "api:\(api):\(subject):\(askedAt)"
    }
    /// A customer tie or untie: each request is its own event.
    public static func customerTie(_ id: UUID = UUID()) -> String { "customer:" + id.uuidString.lowercased() }
    /// An admin action: each request is its own event.
    public static func adminAction(at requestedAt: EpochMillis, _ id: UUID = UUID()) -> String {
        "admin:\(requestedAt):" + id.uuidString.lowercased()
    }
    /// A catalog recorded after the one at `afterPosition`: two instances starting together record
    /// one transition, and going back to an earlier catalog is recorded again.
    public static func catalog(digest: String, afterPosition: Int64) -> String { "catalog:\(digest):after:\(afterPosition)" }
    /// A customer's consent (or its withdrawal): each request is its own event.
    public static func consent(_ id: UUID = UUID()) -> String { "consent:" + id.uuidString.lowercased() }
    /// The ledger's one answer to the CONSUMPTION_REQUEST stored at `requestPosition` (sent, refused
    /// or not sent): two senders racing store it once.
    public static func consumptionAnswer(requestPosition: Int64) -> String { "consumption:\(requestPosition)" }
    /// Attempt `attempt` of generation `generation` (replays start a new one) of an outbox item,
    /// or its requeue: an attempt recorded twice (two writers racing) is one event.
    public static func outbox(consumer: String, item: String, generation: Int, step: String) -> String {
        "outbox:\(consumer):\(item):g\(generation):\(step)"
    }
    /// The drift report of one reconciliation run.
    public static func reconciliationReport(runId: String) -> String { "reconcile-report:" + runId }
}
