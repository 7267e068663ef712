import Foundation

/// The one JSON representation of a subscription state: the query API answers it
/// (`GET /v1/subscriptions/{id}`) and every webhook carries it as `data.state`, so an app backend
/// parses one shape whichever way it learned the state. Apple's camelCase names and millisecond
/// timestamps; absent values are JSON null, so every documented key is always present.
extension SubscriptionState {
    public var representation: JSONValue {
        [
            "originalTransactionId": .string(originalTransactionId),
            "status": .string(status.rawValue),
            "asOf": .integer(evaluatedAt),
            "bundleId": .optional(bundleId),
            "environment": .optional(environment),
            "productId": .optional(productId),
            "productType": .optional(productType),
            "autoRenewProductId": .optional(autoRenewProductId),
            "expiresDate": .optional(expiresDate),
            "gracePeriodExpiresDate": .optional(gracePeriodExpiresDate),
            "isInBillingRetryPeriod": .bool(isInBillingRetryPeriod),
            "autoRenewStatus": .optional(autoRenewStatus),
            "expirationIntent": .optional(expirationIntent),
            "priceIncreaseStatus": .optional(priceIncreaseStatus),
            "offerType": .optional(offerType),
            "offerIdentifier": .optional(offerIdentifier),
            "appAccountToken": .optional(appAccountToken),
            "customer": customerRepresentation,
            "latestTransactionId": .optional(latestTransactionId),
            "recentSubscriptionStartDate": .optional(recentSubscriptionStartDate),
            "renewalDate": .optional(renewalDate),
            "revocationDate": .optional(revocationDate),
        ]
    }

    /// Who the subscription belongs to and why: `source` is `tie` (an explicit
    /// `POST /v1/customers/{id}/subscriptions`), `appAccountToken` or `openid`; `overrides` names
    /// the customer the token (or openid) would have given when a tie says otherwise.
    public var customerRepresentation: JSONValue {
        guard let id = customerId else { return .null }
        var o: [String: JSONValue] = ["id": .string(id), "source": .optional(customerSource?.rawValue)]
        if let other = implicitCustomerId {
            o["overrides"] = .string(other)
            o["note"] = .string("tied explicitly to \(id); the subscription's \(appAccountToken != nil ? "appAccountToken" : "openid") names \(other)")
        }
        return .object(o)
    }
}
