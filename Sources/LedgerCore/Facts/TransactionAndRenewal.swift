import Foundation

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
    /// The fields no fold reads (`AppleFields.transactionExtras`, in that order).
    public var extras = AppleExtras()

    public init(
        transactionId: String, originalTransactionId: String? = nil, webOrderLineItemId: String? = nil,
        bundleId: String? = nil, productId: String? = nil, purchaseDate: EpochMillis? = nil,
        expiresDate: EpochMillis? = nil, signedDate: EpochMillis? = nil, revocationDate: EpochMillis? = nil,
        revocationReason: Int? = nil, revocationType: String? = nil, revocationPercentage: Int? = nil,
        isUpgraded: Bool = false, price: Int64? = nil, currency: String? = nil, offerType: Int? = nil,
        offerIdentifier: String? = nil, appAccountToken: String? = nil, environment: String? = nil,
        type: String? = nil, inAppOwnershipType: String? = nil, extras: AppleExtras = AppleExtras()
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
        self.extras = extras
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
    /// The fields no fold reads (`AppleFields.renewalExtras`, in that order).
    public var extras = AppleExtras()

    public init(
        productId: String? = nil, autoRenewProductId: String? = nil, autoRenewStatus: Int? = nil,
        expirationIntent: Int? = nil, isInBillingRetryPeriod: Bool? = nil,
        gracePeriodExpiresDate: EpochMillis? = nil, priceIncreaseStatus: Int? = nil, offerType: Int? = nil,
        offerIdentifier: String? = nil, recentSubscriptionStartDate: EpochMillis? = nil,
        renewalDate: EpochMillis? = nil, appAccountToken: String? = nil, signedDate: EpochMillis? = nil,
        extras: AppleExtras = AppleExtras()
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
        self.extras = extras
    }
}
