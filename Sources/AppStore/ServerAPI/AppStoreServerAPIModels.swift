import Foundation
import LedgerCore

// Requests and answers of the App Store Server API endpoints the ledger calls
// (reference/appstore-server-api.md §3). Every answer keeps `body`, the exact bytes Apple sent:
// the ledger stores them as evidence. Fields Apple may add later are ignored by these types but
// kept in `body`.

/// Get Notification History request (§3.1). Dates are ms since the epoch.
public struct NotificationHistoryRequest: Sendable, Codable, Equatable {
    public var startDate: Int64
    public var endDate: Int64
    public var notificationType: String?
    /// Needs `notificationType`.
    public var notificationSubtype: String?
    /// Any transaction id of the customer; cannot be combined with `notificationType` (4000019).
    public var transactionId: String?
    /// Only notifications Apple could not deliver (including those still being retried).
    public var onlyFailures: Bool?

    public init(startDate: Int64, endDate: Int64, notificationType: String? = nil, notificationSubtype: String? = nil,
                transactionId: String? = nil, onlyFailures: Bool? = nil) {
        self.startDate = startDate
        self.endDate = endDate
        self.notificationType = notificationType
        self.notificationSubtype = notificationSubtype
        self.transactionId = transactionId
        self.onlyFailures = onlyFailures
    }

    /// The rules Apple would answer 400 for, checked before sending.
    func validate() throws(AppStoreServerAPIError) {
        guard endDate > startDate else {
            throw .invalidRequest("endDate (\(endDate)) must be later than startDate (\(startDate)) (Apple: 4000013)")
        }
        if notificationSubtype != nil, notificationType == nil {
            throw .invalidRequest("notificationSubtype needs notificationType")
        }
        if transactionId != nil, notificationType != nil {
            throw .invalidRequest("transactionId and notificationType cannot be combined (Apple: 4000019); drop one")
        }
    }
}

/// One attempt Apple made to deliver a notification.
public struct SendAttempt: Sendable, Codable, Equatable {
    public var attemptDate: Int64?
    /// SUCCESS, TIMED_OUT, TLS_ISSUE, … (kept as Apple's text).
    public var sendAttemptResult: String?

    public init(attemptDate: Int64? = nil, sendAttemptResult: String? = nil) {
        self.attemptDate = attemptDate
        self.sendAttemptResult = sendAttemptResult
    }
}

public struct NotificationHistoryItem: Sendable, Codable, Equatable {
    /// The original V2 notification JWS: ingest it as `{"signedPayload": …}` through the V2 path.
    public var signedPayload: String?
    public var sendAttempts: [SendAttempt]?

    public init(signedPayload: String? = nil, sendAttempts: [SendAttempt]? = nil) {
        self.signedPayload = signedPayload
        self.sendAttempts = sendAttempts
    }
}

public struct NotificationHistoryResponse: Sendable, Equatable {
    public var notificationHistory: [NotificationHistoryItem]
    public var hasMore: Bool
    public var paginationToken: String?
    public var body: Data
}

/// Get All Subscription Statuses (§3.2).
public struct StatusResponse: Sendable, Equatable {
    public var environment: String?
    public var bundleId: String?
    public var appAppleId: Int64?
    public var data: [SubscriptionGroupStatus]
    /// Apple's answer as received.
    public var body: Data
}

public struct SubscriptionGroupStatus: Sendable, Codable, Equatable {
    public var subscriptionGroupIdentifier: String?
    public var lastTransactions: [LastTransactionsItem]?

    public init(subscriptionGroupIdentifier: String? = nil, lastTransactions: [LastTransactionsItem]? = nil) {
        self.subscriptionGroupIdentifier = subscriptionGroupIdentifier
        self.lastTransactions = lastTransactions
    }
}

public struct LastTransactionsItem: Sendable, Codable, Equatable {
    public var originalTransactionId: String?
    /// 1 active, 2 expired, 3 billing retry, 4 grace period, 5 revoked.
    public var status: Int?
    public var signedTransactionInfo: String?
    public var signedRenewalInfo: String?

    public init(originalTransactionId: String? = nil, status: Int? = nil, signedTransactionInfo: String? = nil, signedRenewalInfo: String? = nil) {
        self.originalTransactionId = originalTransactionId
        self.status = status
        self.signedTransactionInfo = signedTransactionInfo
        self.signedRenewalInfo = signedRenewalInfo
    }
}

/// Filters of Get Transaction History v2 (§3.3); keep them the same while paging.
public struct TransactionHistoryQuery: Sendable, Equatable {
    public enum Sort: String, Sendable { case ascending = "ASCENDING", descending = "DESCENDING" }

    public var startDate: Int64?
    public var endDate: Int64?
    public var productIds: [String] = []
    /// AUTO_RENEWABLE, NON_RENEWABLE, CONSUMABLE, NON_CONSUMABLE.
    public var productTypes: [String] = []
    public var subscriptionGroupIdentifiers: [String] = []
    public var inAppOwnershipType: String?
    public var revoked: Bool?
    public var sort: Sort?

    public init() {}

    var queryItems: [(String, String)] {
        var q: [(String, String)] = []
        if let startDate { q.append(("startDate", String(startDate))) }
        if let endDate { q.append(("endDate", String(endDate))) }
        q += productIds.map { ("productId", $0) }
        q += productTypes.map { ("productType", $0) }
        if let sort { q.append(("sort", sort.rawValue)) }
        q += subscriptionGroupIdentifiers.map { ("subscriptionGroupIdentifier", $0) }
        if let inAppOwnershipType { q.append(("inAppOwnershipType", inAppOwnershipType)) }
        if let revoked { q.append(("revoked", revoked ? "true" : "false")) }
        return q
    }
}

public struct HistoryResponse: Sendable, Equatable {
    public var revision: String?
    public var hasMore: Bool
    public var bundleId: String?
    public var appAppleId: Int64?
    public var environment: String?
    public var signedTransactions: [String]
    public var body: Data
}

/// The v2 `ConsumptionRequest` of `PUT /inApps/v2/transactions/consumption/{transactionId}` (§3.5).
public struct ConsumptionRequest: Sendable, Codable, Equatable {
    public enum DeliveryStatus: String, Sendable, Codable, CaseIterable {
        case delivered = "DELIVERED"
        case undeliveredQualityIssue = "UNDELIVERED_QUALITY_ISSUE"
        case undeliveredWrongItem = "UNDELIVERED_WRONG_ITEM"
        case undeliveredServerOutage = "UNDELIVERED_SERVER_OUTAGE"
        case undeliveredOther = "UNDELIVERED_OTHER"
    }

    /// Advisory only: Apple decides.
    public enum RefundPreference: String, Sendable, Codable, CaseIterable {
        case decline = "DECLINE"
        case grantFull = "GRANT_FULL"
        case grantProrated = "GRANT_PRORATED"
    }

    /// Must be true: Apple refuses the request otherwise (4000035), and without consent nothing
    /// may be sent at all.
    public var customerConsented: Bool
    public var deliveryStatus: DeliveryStatus
    public var sampleContentProvided: Bool
    /// Milliunits 0…100000 (50000 = 50 %). Never for auto-renewable subscriptions (Apple derives
    /// the share from the time used); 0 unless delivered.
    public var consumptionPercentage: Int?
    public var refundPreference: RefundPreference?

    public init(customerConsented: Bool, deliveryStatus: DeliveryStatus, sampleContentProvided: Bool,
                consumptionPercentage: Int? = nil, refundPreference: RefundPreference? = nil) {
        self.customerConsented = customerConsented
        self.deliveryStatus = deliveryStatus
        self.sampleContentProvided = sampleContentProvided
        self.consumptionPercentage = consumptionPercentage
        self.refundPreference = refundPreference
    }

    /// The request the ledger built from its facts (`ConsumptionAssessment`).
    public init(_ information: ConsumptionInformation) {
        self.init(customerConsented: information.customerConsented,
                  deliveryStatus: DeliveryStatus(rawValue: information.deliveryStatus.rawValue) ?? .undeliveredOther,
                  sampleContentProvided: information.sampleContentProvided,
                  consumptionPercentage: information.consumptionPercentage,
                  refundPreference: information.refundPreference.flatMap { RefundPreference(rawValue: $0.rawValue) })
    }

    /// Apple's rules for the request (§3.5), checked before anything is sent. `productType` is the
    /// transaction's `type` (e.g. `Auto-Renewable Subscription`) when the caller knows it.
    public func validate(productType: String?) throws(AppStoreServerAPIError) {
        guard customerConsented else {
            throw .invalidRequest("customerConsented must be true (Apple: 4000035); without the customer's consent send nothing")
        }
        if refundPreference == .grantProrated, consumptionPercentage == nil, let productType, productType != "Auto-Renewable Subscription" {
            throw .invalidRequest("with refundPreference GRANT_PRORATED, a \(productType) needs a consumptionPercentage strictly between 0 and 100000")
        }
        guard let p = consumptionPercentage else { return }
        if productType == "Auto-Renewable Subscription" {
            throw .invalidRequest("consumptionPercentage must not be sent for an auto-renewable subscription (Apple derives it from the time used); leave it out")
        }
        guard (0...100_000).contains(p) else {
            throw .invalidRequest("consumptionPercentage is in milliunits 0…100000 (50000 = 50 %), not \(p)")
        }
        if deliveryStatus != .delivered, p != 0 {
            throw .invalidRequest("consumptionPercentage must be 0 when deliveryStatus is \(deliveryStatus.rawValue) (not delivered)")
        }
        if refundPreference == .grantProrated, !(1...99_999).contains(p) {
            throw .invalidRequest("with refundPreference GRANT_PRORATED, consumptionPercentage must be strictly between 0 and 100000, not \(p)")
        }
    }
}

/// Get Test Notification Status (§3.6).
public struct TestNotificationStatus: Sendable, Equatable {
    /// The TEST notification JWS Apple sent.
    public var signedPayload: String?
    public var sendAttempts: [SendAttempt]
    public var body: Data

    /// True when Apple's last attempt reached the webhook.
    public var delivered: Bool { sendAttempts.last?.sendAttemptResult == "SUCCESS" }
}

// MARK: wire shapes (decoding only)

struct NotificationHistoryWire: Decodable {
    var notificationHistory: [NotificationHistoryItem]?
    var hasMore: Bool?
    var paginationToken: String?
}

struct StatusWire: Decodable {
    var environment: String?
    var bundleId: String?
    var appAppleId: Int64?
    var data: [SubscriptionGroupStatus]?
}

struct HistoryWire: Decodable {
    var revision: String?
    var hasMore: Bool?
    var bundleId: String?
    var appAppleId: Int64?
    var environment: String?
    var signedTransactions: [String]?
}

struct TestNotificationTokenWire: Decodable {
    var testNotificationToken: String?
}

struct TestNotificationStatusWire: Decodable {
    var signedPayload: String?
    var sendAttempts: [SendAttempt]?
}

struct APIErrorWire: Decodable {
    var errorCode: Int?
    var errorMessage: String?
}
