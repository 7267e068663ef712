import Foundation

/// Where a subscription stands at one instant. Apple's `data.status` numbers in `appleStatus`.
public enum SubscriptionStatus: String, Sendable, Hashable, Codable, CaseIterable {
    case active
    /// Renewal failed, Apple retries, and the customer keeps access until gracePeriodExpiresDate.
    case gracePeriod = "grace_period"
    /// Renewal failed, Apple retries, no access.
    case billingRetry = "billing_retry"
    case expired
    /// The transaction in effect was refunded or revoked.
    case revoked
    /// A consumable or non-renewing one-time purchase: recorded, grants nothing lasting.
    case purchased

    /// Grace counts as entitled; billing retry without grace does not.
    public var isEntitled: Bool { self == .active || self == .gracePeriod }

    /// The App Store's number for this status (1 ACTIVE, 2 EXPIRED, 3 BILLING_RETRY,
    /// 4 BILLING_GRACE_PERIOD, 5 REVOKED).
    public var appleStatus: Int {
        switch self {
        case .active: 1
        case .expired: 2
        case .billingRetry: 3
        case .gracePeriod: 4
        case .revoked: 5
        // Apple has no status for one-time purchases; the ledger reports them as not active.
        case .purchased: 2
        }
    }
}

/// The renewal view of one subscription (one originalTransactionId) at `evaluatedAt`.
public struct SubscriptionState: Sendable, Hashable {
    public var originalTransactionId: String
    public var evaluatedAt: EpochMillis
    public var status: SubscriptionStatus
    public var bundleId: String?
    public var environment: String?
    /// The product in effect now.
    public var productId: String?
    /// Apple's product type of the transaction in effect (`ProductType`); nil for a WeChat
    /// contract no delivery has paid yet.
    public var productType: String?
    /// The product the next renewal switches to (a pending downgrade or crossgrade shows here only).
    public var autoRenewProductId: String?
    public var expiresDate: EpochMillis?
    public var gracePeriodExpiresDate: EpochMillis?
    public var isInBillingRetryPeriod: Bool
    public var autoRenewStatus: Int?
    public var expirationIntent: Int?
    public var priceIncreaseStatus: Int?
    /// The offer that applies at the next renewal (the current period's offer is on its transaction).
    public var offerType: Int?
    public var offerIdentifier: String?
    public var appAccountToken: String?
    /// Who the entitlements belong to: an explicit tie, else the appAccountToken, else the WeChat openid.
    public var customerId: String?
    public var customerSource: CustomerSource?
    /// When an explicit tie names someone else than the appAccountToken (or openid) does: that
    /// other customer, so the answer can say the tie overrode it.
    public var implicitCustomerId: String?
    /// The transaction in effect (the one the state's version came from).
    public var latestTransactionId: String?
    public var recentSubscriptionStartDate: EpochMillis?
    public var renewalDate: EpochMillis?
    /// The revocation in force on the transaction in effect (nil when none, or reversed): with
    /// the expiry, grace and retry fields it lets `reevaluated(at:)` recompute the status.
    public var revocationDate: EpochMillis?
    /// The earliest later time at which a known fact takes effect (an early-signed renewal's
    /// purchaseDate, a future revocation date): a stored state is only re-evaluated, not refolded,
    /// before it. Nil: nothing known changes it but time.
    public var validUntil: EpochMillis?
    /// When the period in effect began (the transaction in effect's purchaseDate; a WeChat
    /// period's placed start): a non-renewing purchase grants from it for the catalog's
    /// `durationDays` (`EntitlementGrant.grants`).
    public var purchaseDate: EpochMillis?
    /// The renewal info in effect's fields no fold reads that the answer shows (`AppleFields`
    /// renewal rows with a projection column; the others nil): renewalPrice, currency, ….
    public var renewalExtras: AppleExtras

    public init(
        originalTransactionId: String, evaluatedAt: EpochMillis, status: SubscriptionStatus,
        bundleId: String? = nil, environment: String? = nil, productId: String? = nil,
        productType: String? = nil, autoRenewProductId: String? = nil, expiresDate: EpochMillis? = nil,
        gracePeriodExpiresDate: EpochMillis? = nil, isInBillingRetryPeriod: Bool = false,
        autoRenewStatus: Int? = nil, expirationIntent: Int? = nil, priceIncreaseStatus: Int? = nil,
        offerType: Int? = nil, offerIdentifier: String? = nil, appAccountToken: String? = nil,
        customerId: String? = nil, customerSource: CustomerSource? = nil, implicitCustomerId: String? = nil,
        latestTransactionId: String? = nil,
        recentSubscriptionStartDate: EpochMillis? = nil, renewalDate: EpochMillis? = nil,
        revocationDate: EpochMillis? = nil, validUntil: EpochMillis? = nil, purchaseDate: EpochMillis? = nil,
        renewalExtras: AppleExtras = AppleExtras()
    ) {
        self.originalTransactionId = originalTransactionId
        self.evaluatedAt = evaluatedAt
        self.status = status
        self.bundleId = bundleId
        self.environment = environment
        self.productId = productId
        self.productType = productType
        self.autoRenewProductId = autoRenewProductId
        self.expiresDate = expiresDate
        self.gracePeriodExpiresDate = gracePeriodExpiresDate
        self.isInBillingRetryPeriod = isInBillingRetryPeriod
        self.autoRenewStatus = autoRenewStatus
        self.expirationIntent = expirationIntent
        self.priceIncreaseStatus = priceIncreaseStatus
        self.offerType = offerType
        self.offerIdentifier = offerIdentifier
        self.appAccountToken = appAccountToken
        self.customerId = customerId
        self.customerSource = customerSource
        self.implicitCustomerId = implicitCustomerId
        self.latestTransactionId = latestTransactionId
        self.recentSubscriptionStartDate = recentSubscriptionStartDate
        self.renewalDate = renewalDate
        self.revocationDate = revocationDate
        self.validUntil = validUntil
        self.purchaseDate = purchaseDate
        self.renewalExtras = AppleFields.projected(renewalExtras, AppleFields.renewalExtras)
    }

    /// Until when access lasts if nothing else happens: the grace end in grace, else expiresDate.
    public var entitledUntil: EpochMillis? {
        status == .gracePeriod ? gracePeriodExpiresDate : expiresDate
    }
}

/// One transaction (one purchase or renewal period) with its per-transaction facts merged.
public struct TransactionRecord: Sendable, Hashable {
    public var transactionId: String
    public var originalTransactionId: String
    public var webOrderLineItemId: String?
    public var bundleId: String?
    public var productId: String?
    public var purchaseDate: EpochMillis?
    public var expiresDate: EpochMillis?
    /// The revocation in force (nil when never refunded, or when the refund was reversed).
    public var revocationDate: EpochMillis?
    public var revocationReason: Int?
    public var revocationType: String?
    public var revocationPercentage: Int?
    /// The latest signedDate of a REFUND about this transaction (evidence; kept after a reversal).
    public var refundSignedDate: EpochMillis?
    /// The latest signedDate of a REFUND_REVERSED about this transaction.
    public var refundReversedSignedDate: EpochMillis?
    /// Superseded by an upgrade (once said, it stays said).
    public var isUpgraded: Bool
    public var price: Int64?
    public var currency: String?
    public var offerType: Int?
    public var offerIdentifier: String?
    public var appAccountToken: String?
    public var environment: String?
    public var type: String?
    public var inAppOwnershipType: String?
    /// The signedDate of the transaction snapshot these fields came from.
    public var signedDate: EpochMillis
    /// The snapshot's fields no fold reads (`AppleFields.transactionExtras`): offerDiscountType, ….
    public var extras: AppleExtras

    public var isRevoked: Bool { revocationDate != nil }

    public init(
        transactionId: String, originalTransactionId: String, webOrderLineItemId: String? = nil,
        bundleId: String? = nil, productId: String? = nil, purchaseDate: EpochMillis? = nil,
        expiresDate: EpochMillis? = nil, revocationDate: EpochMillis? = nil, revocationReason: Int? = nil,
        revocationType: String? = nil, revocationPercentage: Int? = nil, refundSignedDate: EpochMillis? = nil,
        refundReversedSignedDate: EpochMillis? = nil, isUpgraded: Bool = false, price: Int64? = nil,
        currency: String? = nil, offerType: Int? = nil, offerIdentifier: String? = nil,
        appAccountToken: String? = nil, environment: String? = nil, type: String? = nil,
        inAppOwnershipType: String? = nil, signedDate: EpochMillis, extras: AppleExtras = AppleExtras()
    ) {
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
        self.webOrderLineItemId = webOrderLineItemId
        self.bundleId = bundleId
        self.productId = productId
        self.purchaseDate = purchaseDate
        self.expiresDate = expiresDate
        self.revocationDate = revocationDate
        self.revocationReason = revocationReason
        self.revocationType = revocationType
        self.revocationPercentage = revocationPercentage
        self.refundSignedDate = refundSignedDate
        self.refundReversedSignedDate = refundReversedSignedDate
        self.isUpgraded = isUpgraded
        self.price = price
        self.currency = currency
        self.offerType = offerType
        self.offerIdentifier = offerIdentifier
        self.appAccountToken = appAccountToken
        self.environment = environment
        self.type = type
        self.inAppOwnershipType = inAppOwnershipType
        self.signedDate = signedDate
        self.extras = AppleFields.projected(extras, AppleFields.transactionExtras)
    }
}
