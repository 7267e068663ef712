import Foundation

/// What the ledger tells Apple about a purchase a customer asked to have refunded (Apple's v2
/// `ConsumptionRequest`, reference/appstore-server-api.md §3.5), built from the ledger's facts
/// alone — pure, so the same facts always give the same answer and the answer's `basis` says how
/// each field was derived.
///
/// | field | derived from |
/// |---|---|
/// | `customerConsented` | true: built only when the app recorded the customer's consent |
/// | `deliveryStatus` | `DELIVERED` when the catalog grants the product at least one entitlement and (anything but a consumable) the subscription was entitled when the transaction's period began; else `UNDELIVERED_OTHER` |
/// | `consumptionPercentage` | never for auto-renewable subscriptions (Apple derives it from the time used); time used ÷ the period for non-renewing subscriptions; 0 when not delivered; absent otherwise (the ledger cannot know how much of a consumable was used) |
/// | `refundPreference` | `RefundPreferencePolicy` on delivery and the time used (also computed for auto-renewables, where it is not sent as a percentage) |
/// | `sampleContentProvided` | `SampleContentRule`: by default true when a free trial (introductory offer at price 0) of the subscription began no later than the transaction |
public struct ConsumptionInformation: Sendable, Equatable {
    public enum DeliveryStatus: String, Sendable, CaseIterable {
        case delivered = "DELIVERED"
        case undeliveredQualityIssue = "UNDELIVERED_QUALITY_ISSUE"
        case undeliveredWrongItem = "UNDELIVERED_WRONG_ITEM"
        case undeliveredServerOutage = "UNDELIVERED_SERVER_OUTAGE"
        case undeliveredOther = "UNDELIVERED_OTHER"
    }

    public var customerConsented: Bool
    public var deliveryStatus: DeliveryStatus
    public var sampleContentProvided: Bool
    /// Milliunits 0…100000.
    public var consumptionPercentage: Int?
    public var refundPreference: RefundPreferencePolicy.Preference?
    /// How each field was derived (stored with what was sent).
    public var basis: JSONValue

    public init(customerConsented: Bool, deliveryStatus: DeliveryStatus, sampleContentProvided: Bool, consumptionPercentage: Int?,
                refundPreference: RefundPreferencePolicy.Preference?, basis: JSONValue) {
        self.customerConsented = customerConsented
        self.deliveryStatus = deliveryStatus
        self.sampleContentProvided = sampleContentProvided
        self.consumptionPercentage = consumptionPercentage
        self.refundPreference = refundPreference
        self.basis = basis
    }

    /// The request body Apple documents (`ConsumptionRequest`), canonical.
    public var requestJSON: JSONValue {
        var o: [String: JSONValue] = [
            "customerConsented": .bool(customerConsented), "deliveryStatus": .string(deliveryStatus.rawValue),
            "sampleContentProvided": .bool(sampleContentProvided),
        ]
        if let consumptionPercentage { o["consumptionPercentage"] = .integer(Int64(consumptionPercentage)) }
        if let refundPreference { o["refundPreference"] = .string(refundPreference.rawValue) }
        return .object(o)
    }
}

/// How `sampleContentProvided` is decided.
public enum SampleContentRule: Sendable, Equatable {
    /// True when the subscription began with a free trial no later than the transaction.
    case freeTrial
    /// Always this value (e.g. the app shows a preview before every purchase).
    case always(Bool)

    /// `trial`, `true` or `false`.
    public init?(text: String) {
        switch text.trimmingCharacters(in: .whitespaces).lowercased() {
        case "trial", "free-trial", "freetrial": self = .freeTrial
        case "true", "1", "yes": self = .always(true)
        case "false", "0", "no": self = .always(false)
        default: return nil
        }
    }

    public var text: String {
        switch self {
        case .freeTrial: "trial"
        case .always(let b): b ? "true" : "false"
        }
    }
}

/// Builds `ConsumptionInformation` for one transaction of one subscription.
public struct ConsumptionAssessment: Sendable {
    public var catalog: ProductCatalog
    public var policy: RefundPreferencePolicy
    public var sampleContent: SampleContentRule

    public init(catalog: ProductCatalog, policy: RefundPreferencePolicy = .none, sampleContent: SampleContentRule = .freeTrial) {
        self.catalog = catalog
        self.policy = policy
        self.sampleContent = sampleContent
    }

    public enum Refusal: Error, Equatable {
        /// The fold holds no transaction with that id.
        case unknownTransaction(String)
    }

    /// The information for `transactionId` as the facts folded into `fold` state it at `now`.
    /// Call only with the customer's consent (`customerConsented` is true).
    public func information(transactionId: String, fold: SubscriptionFold, now: EpochMillis) throws(Refusal) -> ConsumptionInformation {
        guard let tx = fold.transaction(transactionId) else { throw .unknownTransaction(transactionId) }
        let productType = tx.type ?? fold.state(at: now)?.productType
        let productId = tx.productId ?? fold.state(at: now)?.productId
        let granted = productId.map(catalog.entitlements(for:)) ?? []
        let start = tx.purchaseDate ?? tx.signedDate

        // Delivery: the catalog grants something, and the customer held it when the period began.
        let delivered: Bool
        let deliveryRule: String
        if granted.isEmpty {
            delivered = false
            deliveryRule = "the catalog grants product \(productId ?? "(unknown)") no entitlement"
        } else if productType == ProductType.consumable {
            delivered = true
            deliveryRule = "consumable whose product grants \(granted.joined(separator: ", "))"
        } else if let state = fold.state(at: start), state.status.isEntitled || state.status == .purchased {
            delivered = true
            deliveryRule = "entitled (\(state.status.rawValue)) to \(granted.joined(separator: ", ")) when the period began"
        } else {
            delivered = false
            deliveryRule = "not entitled when the period began at \(start)"
        }

        // Time used: of the period [purchase, expiry), up to now or the revocation.
        var used: Int?
        if let expires = tx.expiresDate, expires > start {
            let end = min(now, tx.revocationDate ?? now, expires)
            let share = Double(max(0, end - start)) / Double(expires - start)
            used = Int((share * 100_000).rounded(.down))
        }

        let isAutoRenewable = productType == ProductType.autoRenewable || (productType == nil && tx.expiresDate != nil)
        var percentage: Int?
        var percentageRule: String
        if isAutoRenewable {
            percentageRule = "not sent for auto-renewable subscriptions (Apple derives it from the time used)"
        } else if !delivered {
            percentage = 0
            percentageRule = "0: not delivered"
        } else if let used {
            percentage = used
            percentageRule = "time used ÷ the period"
        } else {
            percentageRule = "unknown to the ledger (no period)"
        }

        var (preference, preferenceRule) = policy.decide(delivered: delivered, usedMilliunits: used)
        if preference == .grantProrated, !isAutoRenewable, !(1...99_999).contains(percentage ?? 0) {
            // Apple refuses GRANT_PRORATED without a share strictly between 0 and 100 %.
            preferenceRule += "; dropped: GRANT_PRORATED needs a consumption share strictly between 0 and 100%"
            preference = nil
        }

        let sample: Bool
        let sampleRule: String
        switch sampleContent {
        case .always(let b):
            sample = b
            sampleRule = "configured \(b)"
        case .freeTrial:
            let trial = fold.transactions.first { t in
                (t.purchaseDate ?? .max) <= start && t.offerType == 1 && (t.price ?? -1) == 0
            }
            sample = trial != nil
            sampleRule = trial.map { "free trial \($0.transactionId)" } ?? "no free trial before the transaction"
        }

        var basis: [String: JSONValue] = [
            "transactionId": .string(transactionId), "productId": .optional(productId), "productType": .optional(productType),
            "entitlements": .array(granted.map(JSONValue.string)), "delivery": .string(deliveryRule),
            "consumptionPercentage": .string(percentageRule), "refundPreference": .string(preferenceRule),
            "sampleContentProvided": .string(sampleRule), "evaluatedAt": .integer(now),
            "periodStart": .integer(start), "periodEnd": .optional(tx.expiresDate),
        ]
        if let used { basis["usedMilliunits"] = .integer(Int64(used)) }
        return ConsumptionInformation(
            customerConsented: true, deliveryStatus: delivered ? .delivered : .undeliveredOther, sampleContentProvided: sample,
            consumptionPercentage: percentage, refundPreference: preference, basis: .object(basis))
    }
}
