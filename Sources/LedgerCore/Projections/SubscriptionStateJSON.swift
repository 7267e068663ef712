import Foundation

/// The one JSON representation of a subscription state: the query API answers it
/// (`GET /v1/subscriptions/{id}`) and every webhook carries it as `data.state`, so an app backend
/// parses one shape whichever way it learned the state. Apple's camelCase names and millisecond
/// timestamps; absent values are JSON null, so every documented key is always present.
extension SubscriptionState {
    public var representation: JSONValue {
        var o: [String: JSONValue] = [
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
            "purchaseDate": .optional(purchaseDate),
        ]
        // The renewal info's fields an answer shows, by the table (`AppleFields`): a new one
        // appears here without code.
        for (name, value) in renewalExtraMembers { o[name] = value }
        return .object(o)
    }

    /// The renewal info's shown fields (`AppleFields` renewal rows with a projection column), each
    /// by its API name, JSON null when not stated.
    public var renewalExtraMembers: [(String, JSONValue)] {
        AppleFields.renewalExtras.enumerated().compactMap { i, field in
            field.projection == nil ? nil : (field.apiName, renewalExtras[i]?.json ?? .null)
        }
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
