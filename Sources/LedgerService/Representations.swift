import Foundation
import LedgerCore

/// The JSON the query API answers with: Apple's camelCase names and millisecond timestamps.
/// Absent values are JSON null, so every documented key is always present.
enum Representation {
    static func value(_ v: Any?) -> Any { v ?? NSNull() }

    static func subscription(_ s: SubscriptionState, source: String?) -> [String: Any] {
        [
            "originalTransactionId": s.originalTransactionId,
            "source": value(source),
            "status": s.status.rawValue,
            "asOf": s.evaluatedAt,
            "bundleId": value(s.bundleId),
            "environment": value(s.environment),
            "productId": value(s.productId),
            "autoRenewProductId": value(s.autoRenewProductId),
            "expiresDate": value(s.expiresDate),
            "gracePeriodExpiresDate": value(s.gracePeriodExpiresDate),
            "isInBillingRetryPeriod": s.isInBillingRetryPeriod,
            "autoRenewStatus": value(s.autoRenewStatus),
            "expirationIntent": value(s.expirationIntent),
            "priceIncreaseStatus": value(s.priceIncreaseStatus),
            "offerType": value(s.offerType),
            "offerIdentifier": value(s.offerIdentifier),
            "appAccountToken": value(s.appAccountToken),
            "latestTransactionId": value(s.latestTransactionId),
            "recentSubscriptionStartDate": value(s.recentSubscriptionStartDate),
            "renewalDate": value(s.renewalDate),
        ]
    }

    static func entitlement(_ g: EntitlementGrant) -> [String: Any] {
        [
            "entitlement": g.entitlement,
            "productId": g.productId,
            "originalTransactionId": g.originalTransactionId,
            "expiresDate": value(g.expiresDate),
            "status": g.status.rawValue,
        ]
    }

    /// One stored event with its evidence. `raw` is the exact bytes: as text when they are UTF-8
    /// (every Apple and WeChat body is), else base64 — `rawEncoding` says which.
    static func event(_ e: RecordedEvent) -> [String: Any] {
        let payload = (try? JSONSerialization.jsonObject(with: e.event.payload, options: [.fragmentsAllowed])) ?? NSNull()
        var raw: String
        var encoding = "utf8"
        if let text = String(data: e.event.raw, encoding: .utf8) {
            raw = text
        } else {
            raw = e.event.raw.base64EncodedString()
            encoding = "base64"
        }
        return [
            "position": e.position,
            "recordedAt": e.recordedAt,
            "source": e.event.source.rawValue,
            "type": e.event.type,
            "environment": value(e.event.environment),
            "signedDate": value(e.event.signedAt),
            "expiresDate": value(e.event.expiresAt),
            "dedupeKey": e.event.dedupeKey,
            "payload": payload,
            "raw": raw,
            "rawEncoding": encoding,
        ]
    }
}
