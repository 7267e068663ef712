import Foundation

// Decoded Apple payloads (App Store Server Notifications V2, JWSTransaction, JWSRenewalInfo).
// Every field is optional and every enum is kept as its raw value, so a field or value Apple adds
// later decodes instead of failing; the exact JSON is stored beside it anyway.
// Times are milliseconds; `AppleTime` tolerates the fractional milliseconds Xcode signs.

/// A millisecond timestamp that decodes from an integer or a fractional number (Xcode data).
public struct AppleTime: Sendable, Hashable, Codable, Comparable {
    public var millis: EpochMillis
    public init(_ millis: EpochMillis) { self.millis = millis }
    public init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if let i = try? c.decode(Int64.self) {
            millis = i
        } else {
            let d = try c.decode(Double.self)
            guard d.isFinite, abs(d) < 9.2e18 else {
                throw DecodingError.dataCorruptedError(in: c, debugDescription: "timestamp out of range: \(d)")
            }
            millis = Int64(d.rounded())
        }
    }
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(millis)
    }
    public static func < (a: AppleTime, b: AppleTime) -> Bool { a.millis < b.millis }
}

/// ResponseBodyV2DecodedPayload, with the nested JWS decoded in place (`transactionInfo`,
/// `renewalInfo`) once they have been verified.
public struct AppleNotification: Sendable, Equatable, Codable {
    public var notificationType: String?
    public var subtype: String?
    public var notificationUUID: String?
    public var version: String?
    public var signedDate: AppleTime?
    public var data: NotificationData?
    public var summary: NotificationSummary?
    public var externalPurchaseToken: ExternalPurchaseToken?
    public var appData: AppData?

    public init() {}

    /// Field by field: a value of an unexpected type (or out of range) reads as absent instead of
    /// making the whole verified message unreadable.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        notificationType = c.lenient(.notificationType)
        subtype = c.lenient(.subtype)
        notificationUUID = c.lenient(.notificationUUID)
        version = c.lenient(.version)
        signedDate = c.lenient(.signedDate)
        data = c.lenient(.data)
        summary = c.lenient(.summary)
        externalPurchaseToken = c.lenient(.externalPurchaseToken)
        appData = c.lenient(.appData)
    }

    public struct NotificationData: Sendable, Equatable, Codable {
        public var appAppleId: Int64?
        public var bundleId: String?
        public var bundleVersion: String?
        public var environment: String?
        public var signedTransactionInfo: String?
        public var signedRenewalInfo: String?
        public var status: Int?
        public var consumptionRequestReason: String?
        public init() {}

        /// Field by field: a value of an unexpected type (or out of range) reads as absent instead of
        /// making the whole verified message unreadable.
        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            appAppleId = c.lenient(.appAppleId)
            bundleId = c.lenient(.bundleId)
            bundleVersion = c.lenient(.bundleVersion)
            environment = c.lenient(.environment)
            signedTransactionInfo = c.lenient(.signedTransactionInfo)
            signedRenewalInfo = c.lenient(.signedRenewalInfo)
            status = c.lenient(.status)
            consumptionRequestReason = c.lenient(.consumptionRequestReason)
        }
    }

    public struct NotificationSummary: Sendable, Equatable, Codable {
        public var environment: String?
        public var appAppleId: Int64?
        public var bundleId: String?
        public var productId: String?
        public var requestIdentifier: String?
        public var storefrontCountryCodes: [String]?
        public var succeededCount: Int64?
        public var failedCount: Int64?
        public init() {}

        /// Field by field: a value of an unexpected type (or out of range) reads as absent instead of
        /// making the whole verified message unreadable.
        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            environment = c.lenient(.environment)
            appAppleId = c.lenient(.appAppleId)
            bundleId = c.lenient(.bundleId)
            productId = c.lenient(.productId)
            requestIdentifier = c.lenient(.requestIdentifier)
            storefrontCountryCodes = c.lenient(.storefrontCountryCodes)
            succeededCount = c.lenient(.succeededCount)
            failedCount = c.lenient(.failedCount)
        }
    }

    public struct ExternalPurchaseToken: Sendable, Equatable, Codable {
        public var externalPurchaseId: String?
        public var tokenCreationDate: AppleTime?
        public var appAppleId: Int64?
        public var bundleId: String?
        public init() {}

        /// Field by field: a value of an unexpected type (or out of range) reads as absent instead of
        /// making the whole verified message unreadable.
        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            externalPurchaseId = c.lenient(.externalPurchaseId)
            tokenCreationDate = c.lenient(.tokenCreationDate)
            appAppleId = c.lenient(.appAppleId)
            bundleId = c.lenient(.bundleId)
        }
    }

    public struct AppData: Sendable, Equatable, Codable {
        public var appAppleId: Int64?
        public var bundleId: String?
        public var environment: String?
        public var signedAppTransactionInfo: String?
        public init() {}

        /// Field by field: a value of an unexpected type (or out of range) reads as absent instead of
        /// making the whole verified message unreadable.
        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            appAppleId = c.lenient(.appAppleId)
            bundleId = c.lenient(.bundleId)
            environment = c.lenient(.environment)
            signedAppTransactionInfo = c.lenient(.signedAppTransactionInfo)
        }
    }
}

/// JWSTransactionDecodedPayload.
public struct AppleTransaction: Sendable, Equatable, Codable {
    public var transactionId: String?
    public var originalTransactionId: String?
    public var webOrderLineItemId: String?
    public var bundleId: String?
    public var productId: String?
    public var subscriptionGroupIdentifier: String?
    public var purchaseDate: AppleTime?
    public var originalPurchaseDate: AppleTime?
    public var expiresDate: AppleTime?
    public var quantity: Int?
    public var type: String?
    public var appAccountToken: String?
    public var inAppOwnershipType: String?
    public var signedDate: AppleTime?
    public var revocationReason: Int?
    public var revocationDate: AppleTime?
    public var revocationType: String?
    public var revocationPercentage: Int?
    public var isUpgraded: Bool?
    public var offerType: Int?
    public var offerIdentifier: String?
    public var offerPeriod: String?
    public var offerDiscountType: String?
    public var environment: String?
    public var storefront: String?
    public var storefrontId: String?
    public var transactionReason: String?
    public var price: Int64?
    public var currency: String?
    public var appTransactionId: String?
    public var billingPlanType: String?
    public init() {}

    /// Field by field: a value of an unexpected type (or out of range) reads as absent instead of
    /// making the whole verified message unreadable.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        transactionId = c.lenient(.transactionId)
        originalTransactionId = c.lenient(.originalTransactionId)
        webOrderLineItemId = c.lenient(.webOrderLineItemId)
        bundleId = c.lenient(.bundleId)
        productId = c.lenient(.productId)
        subscriptionGroupIdentifier = c.lenient(.subscriptionGroupIdentifier)
        purchaseDate = c.lenient(.purchaseDate)
        originalPurchaseDate = c.lenient(.originalPurchaseDate)
        expiresDate = c.lenient(.expiresDate)
        quantity = c.lenient(.quantity)
        type = c.lenient(.type)
        appAccountToken = c.lenient(.appAccountToken)
        inAppOwnershipType = c.lenient(.inAppOwnershipType)
        signedDate = c.lenient(.signedDate)
        revocationReason = c.lenient(.revocationReason)
        revocationDate = c.lenient(.revocationDate)
        revocationType = c.lenient(.revocationType)
        revocationPercentage = c.lenient(.revocationPercentage)
        isUpgraded = c.lenient(.isUpgraded)
        offerType = c.lenient(.offerType)
        offerIdentifier = c.lenient(.offerIdentifier)
        offerPeriod = c.lenient(.offerPeriod)
        offerDiscountType = c.lenient(.offerDiscountType)
        environment = c.lenient(.environment)
        storefront = c.lenient(.storefront)
        storefrontId = c.lenient(.storefrontId)
        transactionReason = c.lenient(.transactionReason)
        price = c.lenient(.price)
        currency = c.lenient(.currency)
        appTransactionId = c.lenient(.appTransactionId)
        billingPlanType = c.lenient(.billingPlanType)
    }
}

/// JWSRenewalInfoDecodedPayload.
public struct AppleRenewalInfo: Sendable, Equatable, Codable {
    public var originalTransactionId: String?
    public var productId: String?
    public var autoRenewProductId: String?
    public var autoRenewStatus: Int?
    public var expirationIntent: Int?
    public var isInBillingRetryPeriod: Bool?
    public var gracePeriodExpiresDate: AppleTime?
    public var priceIncreaseStatus: Int?
    public var offerType: Int?
    public var offerIdentifier: String?
    public var offerPeriod: String?
    public var offerDiscountType: String?
    public var signedDate: AppleTime?
    public var environment: String?
    public var recentSubscriptionStartDate: AppleTime?
    public var renewalDate: AppleTime?
    public var renewalPrice: Int64?
    public var currency: String?
    public var eligibleWinBackOfferIds: [String]?
    public var appAccountToken: String?
    public var appTransactionId: String?
    /// 2026 addition (Advanced Commerce / commitment plans): the billing plan after renewal.
    public var renewalBillingPlanType: String?
    public init() {}

    /// Field by field: a value of an unexpected type (or out of range) reads as absent instead of
    /// making the whole verified message unreadable.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        originalTransactionId = c.lenient(.originalTransactionId)
        productId = c.lenient(.productId)
        autoRenewProductId = c.lenient(.autoRenewProductId)
        autoRenewStatus = c.lenient(.autoRenewStatus)
        expirationIntent = c.lenient(.expirationIntent)
        isInBillingRetryPeriod = c.lenient(.isInBillingRetryPeriod)
        gracePeriodExpiresDate = c.lenient(.gracePeriodExpiresDate)
        priceIncreaseStatus = c.lenient(.priceIncreaseStatus)
        offerType = c.lenient(.offerType)
        offerIdentifier = c.lenient(.offerIdentifier)
        offerPeriod = c.lenient(.offerPeriod)
        offerDiscountType = c.lenient(.offerDiscountType)
        signedDate = c.lenient(.signedDate)
        environment = c.lenient(.environment)
        recentSubscriptionStartDate = c.lenient(.recentSubscriptionStartDate)
        renewalDate = c.lenient(.renewalDate)
        renewalPrice = c.lenient(.renewalPrice)
        currency = c.lenient(.currency)
        eligibleWinBackOfferIds = c.lenient(.eligibleWinBackOfferIds)
        appAccountToken = c.lenient(.appAccountToken)
        appTransactionId = c.lenient(.appTransactionId)
        renewalBillingPlanType = c.lenient(.renewalBillingPlanType)
    }
}

/// JWSAppTransactionDecodedPayload (nested in RESCIND_CONSENT's appData as signedAppTransactionInfo).
/// Its environment is `receiptType`, and its chain is checked at `receiptCreationDate`.
public struct AppleAppTransaction: Sendable, Equatable, Codable {
    public var receiptType: String?
    public var appAppleId: Int64?
    public var bundleId: String?
    public var applicationVersion: String?
    public var versionExternalIdentifier: Int64?
    public var receiptCreationDate: AppleTime?
    public var originalPurchaseDate: AppleTime?
    public var originalApplicationVersion: String?
    public var deviceVerification: String?
    public var deviceVerificationNonce: String?
    public var preorderDate: AppleTime?
    public var appTransactionId: String?
    public var originalPlatform: String?
    public var signedDate: AppleTime?
    public init() {}

    /// Field by field: a value of an unexpected type (or out of range) reads as absent instead of
    /// making the whole verified message unreadable.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        receiptType = c.lenient(.receiptType)
        appAppleId = c.lenient(.appAppleId)
        bundleId = c.lenient(.bundleId)
        applicationVersion = c.lenient(.applicationVersion)
        versionExternalIdentifier = c.lenient(.versionExternalIdentifier)
        receiptCreationDate = c.lenient(.receiptCreationDate)
        originalPurchaseDate = c.lenient(.originalPurchaseDate)
        originalApplicationVersion = c.lenient(.originalApplicationVersion)
        deviceVerification = c.lenient(.deviceVerification)
        deviceVerificationNonce = c.lenient(.deviceVerificationNonce)
        preorderDate = c.lenient(.preorderDate)
        appTransactionId = c.lenient(.appTransactionId)
        originalPlatform = c.lenient(.originalPlatform)
        signedDate = c.lenient(.signedDate)
    }
}

/// What the ledger stores as an Apple V2 event's `payload`: the verified, decoded notification
/// with its nested JWS decoded in place. Stored JSON keys: the notification's own keys, plus
/// `transactionInfo`, `renewalInfo` and `appTransactionInfo` (the decoded nested JWS, added beside
/// the signed strings, which stay where Apple put them). Unknown keys are kept in the stored JSON; this type reads the ones the ledger uses.
public struct AppleEventPayload: Sendable, Equatable, Codable {
    public var notificationType: String?
    public var subtype: String?
    public var notificationUUID: String?
    public var signedDate: AppleTime?
    public var data: AppleNotification.NotificationData?
    public var summary: AppleNotification.NotificationSummary?
    public var externalPurchaseToken: AppleNotification.ExternalPurchaseToken?
    public var appData: AppleNotification.AppData?
    public var transactionInfo: AppleTransaction?
    public var renewalInfo: AppleRenewalInfo?
    public var appTransactionInfo: AppleAppTransaction?
    public init() {}

    /// Field by field: a value of an unexpected type (or out of range) reads as absent instead of
    /// making the whole verified message unreadable.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        notificationType = c.lenient(.notificationType)
        subtype = c.lenient(.subtype)
        notificationUUID = c.lenient(.notificationUUID)
        signedDate = c.lenient(.signedDate)
        data = c.lenient(.data)
        summary = c.lenient(.summary)
        externalPurchaseToken = c.lenient(.externalPurchaseToken)
        appData = c.lenient(.appData)
        transactionInfo = c.lenient(.transactionInfo)
        renewalInfo = c.lenient(.renewalInfo)
        appTransactionInfo = c.lenient(.appTransactionInfo)
    }
}

extension KeyedDecodingContainer {
    /// The value at `key`, or nil when it is absent, null, or not decodable as `T`.
    func lenient<T: Decodable>(_ key: Key) -> T? {
        (try? decodeIfPresent(T.self, forKey: key)) ?? nil
    }
}
