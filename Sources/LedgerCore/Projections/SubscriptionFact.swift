import Foundation

/// What kind of source message a fact was normalised from. The folds read the normalised
/// fields, not the source, so a new source only needs a translation into `SubscriptionFact`;
/// the few source-specific rules (an Apple upgrade, an Apple refund reversal) are asked of the
/// fact through `isUpgrade` / `isRefundReversal`, never by switching on raw strings in the fold.
public enum FactSource: String, Sendable, Hashable, Codable, CaseIterable {
    /// An App Store Server Notification V2 (`notificationType`/`subtype` say which).
    case appleNotification = "apple"
    /// WeChat xpay `xpay_apple_subscribe_signing_result_notify`: the renewal contract exists.
    /// The WeChat kinds are built by `SubscriptionFact.decodeWeChat` and folded by `WeChatSubscriptionFold`.
    case wechatContractSigned = "wechat.contract_signed"
    /// WeChat xpay `xpay_goods_deliver_notify`: one paid period delivered (carries a transaction).
    case wechatPeriodDelivered = "wechat.period_delivered"
    /// WeChat xpay `xpay_apple_subscribe_unsigning_result_notify`: auto-renew turned off.
    case wechatContractTerminated = "wechat.contract_terminated"
    /// The outcome of a WeChat iOS refund (carries the transaction with its revocation fields).
    case wechatRefundOutcome = "wechat.refund_outcome"
}

/// The transaction facts of one signed transaction (Apple `JWSTransaction`), as the folds need them.
/// Times are epoch milliseconds.
public struct TransactionFact: Sendable, Hashable {
    public var transactionId: String
    public var originalTransactionId: String?
    public var webOrderLineItemId: String?
    public var bundleId: String?
    public var productId: String?
    public var purchaseDate: EpochMillis?
    public var expiresDate: EpochMillis?
    /// When Apple signed this transaction; per-transaction facts are merged by it.
    public var signedDate: EpochMillis?
    public var revocationDate: EpochMillis?
    public var revocationReason: Int?
    public var revocationType: String?
    /// Milli-percent (50000 = 50 %).
    public var revocationPercentage: Int?
    public var isUpgraded: Bool
    /// Milliunits of `currency` (10990 = 10.99).
    public var price: Int64?
    public var currency: String?
    public var offerType: Int?
    public var offerIdentifier: String?
    public var appAccountToken: String?
    public var environment: String?
    public var type: String?
    public var inAppOwnershipType: String?

    public init(
        transactionId: String, originalTransactionId: String? = nil, webOrderLineItemId: String? = nil,
        bundleId: String? = nil, productId: String? = nil, purchaseDate: EpochMillis? = nil,
        expiresDate: EpochMillis? = nil, signedDate: EpochMillis? = nil, revocationDate: EpochMillis? = nil,
        revocationReason: Int? = nil, revocationType: String? = nil, revocationPercentage: Int? = nil,
        isUpgraded: Bool = false, price: Int64? = nil, currency: String? = nil, offerType: Int? = nil,
        offerIdentifier: String? = nil, appAccountToken: String? = nil, environment: String? = nil,
        type: String? = nil, inAppOwnershipType: String? = nil
    ) {
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.webOrderLineItemId = webOrderLineItemId
        self.bundleId = bundleId
        self.productId = productId
        self.purchaseDate = purchaseDate
        self.expiresDate = expiresDate
        self.signedDate = signedDate
        self.revocationDate = revocationDate
        self.revocationReason = revocationReason
        self.revocationType = revocationType
        self.revocationPercentage = revocationPercentage
        self.isUpgraded = isUpgraded
        self.price = price
        self.currency = currency
        self.offerType = offerType
        self.offerIdentifier = offerIdentifier
        self.appAccountToken = appAccountToken
        self.environment = environment
        self.type = type
        self.inAppOwnershipType = inAppOwnershipType
    }

    /// Nil when the transaction has no id: without one it cannot be merged with anything.
    public init?(_ tx: AppleTransaction) {
        guard let id = tx.transactionId else { return nil }
        self.init(
            transactionId: id, originalTransactionId: tx.originalTransactionId,
            webOrderLineItemId: tx.webOrderLineItemId, bundleId: tx.bundleId, productId: tx.productId,
            purchaseDate: tx.purchaseDate?.millis, expiresDate: tx.expiresDate?.millis,
            signedDate: tx.signedDate?.millis, revocationDate: tx.revocationDate?.millis,
            revocationReason: tx.revocationReason, revocationType: tx.revocationType,
            revocationPercentage: tx.revocationPercentage, isUpgraded: tx.isUpgraded ?? false,
            price: tx.price, currency: tx.currency, offerType: tx.offerType,
            offerIdentifier: tx.offerIdentifier, appAccountToken: tx.appAccountToken,
            environment: tx.environment, type: tx.type, inAppOwnershipType: tx.inAppOwnershipType
        )
    }
}

/// The renewal facts of one signed renewal info (Apple `JWSRenewalInfo`).
public struct RenewalFact: Sendable, Hashable {
    public var productId: String?
    /// The product the subscription renews into; differs from `productId` after a downgrade
    /// or crossgrade until the next renewal.
    public var autoRenewProductId: String?
    /// 1 on, 0 off.
    public var autoRenewStatus: Int?
    /// 1 customer cancelled, 2 billing error, 3 no consent to a price increase, 4 product not
    /// available, 5 other.
    public var expirationIntent: Int?
    public var isInBillingRetryPeriod: Bool?
    public var gracePeriodExpiresDate: EpochMillis?
    /// 0 not responded, 1 consented (or notified when no consent is needed).
    public var priceIncreaseStatus: Int?
    /// The offer that applies at the next renewal.
    public var offerType: Int?
    public var offerIdentifier: String?
    public var recentSubscriptionStartDate: EpochMillis?
    public var renewalDate: EpochMillis?
    public var appAccountToken: String?
    public var signedDate: EpochMillis?

    public init(
        productId: String? = nil, autoRenewProductId: String? = nil, autoRenewStatus: Int? = nil,
        expirationIntent: Int? = nil, isInBillingRetryPeriod: Bool? = nil,
        gracePeriodExpiresDate: EpochMillis? = nil, priceIncreaseStatus: Int? = nil, offerType: Int? = nil,
        offerIdentifier: String? = nil, recentSubscriptionStartDate: EpochMillis? = nil,
        renewalDate: EpochMillis? = nil, appAccountToken: String? = nil, signedDate: EpochMillis? = nil
    ) {
        self.productId = productId
        self.autoRenewProductId = autoRenewProductId
        self.autoRenewStatus = autoRenewStatus
        self.expirationIntent = expirationIntent
        self.isInBillingRetryPeriod = isInBillingRetryPeriod
        self.gracePeriodExpiresDate = gracePeriodExpiresDate
        self.priceIncreaseStatus = priceIncreaseStatus
        self.offerType = offerType
        self.offerIdentifier = offerIdentifier
        self.recentSubscriptionStartDate = recentSubscriptionStartDate
        self.renewalDate = renewalDate
        self.appAccountToken = appAccountToken
        self.signedDate = signedDate
    }

    public init(_ r: AppleRenewalInfo) {
        self.init(
            productId: r.productId, autoRenewProductId: r.autoRenewProductId,
            autoRenewStatus: r.autoRenewStatus, expirationIntent: r.expirationIntent,
            isInBillingRetryPeriod: r.isInBillingRetryPeriod,
            gracePeriodExpiresDate: r.gracePeriodExpiresDate?.millis,
            priceIncreaseStatus: r.priceIncreaseStatus, offerType: r.offerType,
            offerIdentifier: r.offerIdentifier,
            recentSubscriptionStartDate: r.recentSubscriptionStartDate?.millis,
            renewalDate: r.renewalDate?.millis, appAccountToken: r.appAccountToken,
            signedDate: r.signedDate?.millis
        )
    }
}

/// One event, normalised to what the subscription folds read. Built from a `RecordedEvent`
/// (decoding its JSON payload) on the live path, or straight from columns that PostgreSQL
/// extracts from the jsonb on the rebuild path (the memberwise init), so the rebuild does not
/// pay for a JSON decode per event.
public struct SubscriptionFact: Sendable, Hashable {
    /// The event's global position; kept for tracing only: no fold result depends on it, so the
    /// same notification stored at a different position folds to the same state.
    public var position: Int64
    /// When the ledger recorded the event (ms); "as the ledger knew it at R" filters on it.
    public var recordedAt: EpochMillis
    public var source: FactSource
    /// The subscription this fact belongs to (Apple originalTransactionId; the event's stream).
    public var originalTransactionId: String
    public var notificationType: String?
    public var subtype: String?
    /// When the source signed the message (business time, ms): the second half of the version.
    public var signedDate: EpochMillis
    /// `data.status` as Apple stated it at `signedDate` (1 active … 5 revoked). Kept as evidence;
    /// the folds derive status from the signed fields so that it can be evaluated at any time.
    public var status: Int?
    /// `data.bundleId` / `data.environment`, used when the transaction does not say.
    public var bundleId: String?
    public var environment: String?
    /// The WeChat user the event names (customer id for WeChat purchases); nil for Apple.
    public var openId: String?
    public var transaction: TransactionFact? {
        get { transactionBox?.value }
        set { transactionBox = newValue.map(FactBox.init) }
    }
    public var renewal: RenewalFact? {
        get { renewalBox?.value }
        set { renewalBox = newValue.map(FactBox.init) }
    }
    // Boxed so that a fact is small: the folds copy facts into their slots on every event, and
    // copying two large inline structs each time was the rebuild's main cost.
    private var transactionBox: FactBox<TransactionFact>?
    private var renewalBox: FactBox<RenewalFact>?

    public init(
        position: Int64, recordedAt: EpochMillis, source: FactSource = .appleNotification,
        originalTransactionId: String, notificationType: String? = nil, subtype: String? = nil,
        signedDate: EpochMillis, status: Int? = nil, bundleId: String? = nil, environment: String? = nil,
        openId: String? = nil, transaction: TransactionFact? = nil, renewal: RenewalFact? = nil
    ) {
        self.position = position
        self.recordedAt = recordedAt
        self.source = source
        self.originalTransactionId = originalTransactionId
        self.notificationType = notificationType
        self.subtype = subtype
        self.signedDate = signedDate
        self.status = status
        self.bundleId = bundleId
        self.environment = environment
        self.openId = openId
        self.transactionBox = transaction.map(FactBox.init)
        self.renewalBox = renewal.map(FactBox.init)
    }

    /// Builds the fact of an Apple event payload. Nil when the payload is not about one
    /// subscription (TEST, RENEWAL_EXTENSION/SUMMARY, EXTERNAL_PURCHASE_TOKEN, RESCIND_CONSENT):
    /// those are stored but change no subscription.
    public init?(
        apple payload: AppleEventPayload, position: Int64, recordedAt: EpochMillis,
        streamId: String? = nil, fallbackSignedDate: EpochMillis? = nil
    ) throws(SubscriptionFactError) {
        let tx = payload.transactionInfo.flatMap(TransactionFact.init)
        let renewal = payload.renewalInfo.map(RenewalFact.init)
        if tx == nil && renewal == nil { return nil }
        guard let original = tx?.originalTransactionId ?? payload.renewalInfo?.originalTransactionId ?? streamId
        else { throw .missingOriginalTransactionId(position: position) }
        guard let signed = payload.signedDate?.millis ?? tx?.signedDate ?? renewal?.signedDate ?? fallbackSignedDate
        else { throw .missingSignedDate(position: position) }
        self.init(
            position: position, recordedAt: recordedAt, source: .appleNotification,
            originalTransactionId: original, notificationType: payload.notificationType,
            subtype: payload.subtype, signedDate: signed, status: payload.data?.status,
            bundleId: payload.data?.bundleId, environment: payload.data?.environment,
            transaction: tx, renewal: renewal
        )
    }

    /// Decodes a stored Apple or WeChat event (WeChat: see `WeChatFacts.swift`). Nil for events
    /// that change no subscription (ledger decisions, TEST, inquiries, …).
    public static func decode(
        _ event: RecordedEvent, decoder: JSONDecoder = JSONDecoder()
    ) throws(SubscriptionFactError) -> SubscriptionFact? {
        if event.event.source == .wechat { return try decodeWeChat(event, decoder: decoder) }
        guard event.event.source == .apple else { return nil }
        let payload: AppleEventPayload
        do {
            payload = try decoder.decode(AppleEventPayload.self, from: event.event.payload)
        } catch {
            throw .undecodablePayload(position: event.position, reason: String(describing: error))
        }
        return try SubscriptionFact(
            apple: payload, position: event.position, recordedAt: event.recordedAt,
            streamId: event.event.streamId, fallbackSignedDate: event.event.signedAt
        )
    }

    /// An immediate plan change: the transaction it carries replaces the one in effect at once.
    public var isUpgrade: Bool {
        subtype == "UPGRADE" && (notificationType == "DID_CHANGE_RENEWAL_PREF" || notificationType == "OFFER_REDEEMED")
    }

    /// Reinstates what an earlier refund revoked, whatever revocation fields the message carries.
    public var isRefundReversal: Bool {
        notificationType == "REFUND_REVERSED"
    }

    public var isRefund: Bool {
        notificationType == "REFUND" || source == .wechatRefundOutcome
    }

    /// A total order on content only (never position or recordedAt), used to break exact version
    /// ties so that which of two equally-versioned facts wins cannot depend on arrival order.
    func contentPrecedes(_ other: SubscriptionFact) -> Bool {
        // Duplicates (the common tie) differ at most in position and recordedAt: equal content.
        var a = self, b = other
        (a.position, a.recordedAt, b.position, b.recordedAt) = (0, 0, 0, 0)
        if a == b { return false }
        return contentKey < other.contentKey
    }

    private var contentKey: String {
        var parts: [String] = [source.rawValue, originalTransactionId, notificationType ?? "", subtype ?? "",
                               String(signedDate), status.map(String.init) ?? "", bundleId ?? "",
                               environment ?? "", openId ?? ""]
        if let t = transaction { parts.append(String(describing: t)) } else { parts.append("-") }
        if let r = renewal { parts.append(String(describing: r)) } else { parts.append("-") }
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

/// Why an event could not be turned into a fact; each case names the event so it can be found.
public enum SubscriptionFactError: Error, Equatable, CustomStringConvertible {
    case undecodablePayload(position: Int64, reason: String)
    case missingOriginalTransactionId(position: Int64)
    case missingSignedDate(position: Int64)

    public var description: String {
        switch self {
        case .undecodablePayload(let p, let reason):
            return "event at position \(p): its payload is not an Apple event payload (\(reason)); "
                + "check what the ingestion stored in events.payload for that position"
        case .missingOriginalTransactionId(let p):
            return "event at position \(p) names no originalTransactionId in its transaction or renewal info "
                + "and has no stream id; store it under its subscription's stream"
        case .missingSignedDate(let p):
            return "event at position \(p) has no signedDate anywhere (notification, transaction, renewal "
                + "info, signed_at); without one it cannot be ordered — re-ingest it from the raw evidence"
        }
    }
}
