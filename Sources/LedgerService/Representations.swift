import Foundation
import LedgerCore

/// The JSON the query API answers with: Apple's camelCase names and millisecond timestamps.
/// Absent values are JSON null, so every documented key is always present.
enum Representation {
    static func value(_ v: Any?) -> Any { v ?? NSNull() }

    static func subscription(_ s: SubscriptionState) -> [String: Any] {
        [
            "originalTransactionId": s.originalTransactionId,
            "status": s.status.rawValue,
            "asOf": s.evaluatedAt,
            "bundleId": value(s.bundleId),
            "environment": value(s.environment),
            "productId": value(s.productId),
            "productType": value(s.productType),
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
            "customer": customer(s),
            "latestTransactionId": value(s.latestTransactionId),
            "recentSubscriptionStartDate": value(s.recentSubscriptionStartDate),
            "renewalDate": value(s.renewalDate),
            "revocationDate": value(s.revocationDate),
        ]
    }

    /// Who the subscription belongs to and why: `source` is `tie` (an explicit
    /// `POST /v1/customers/{id}/subscriptions`), `appAccountToken` or `openid`; `overrides` names
    /// the customer the token (or openid) would have given when a tie says otherwise.
    static func customer(_ s: SubscriptionState) -> Any {
        guard let id = s.customerId else { return NSNull() }
        var o: [String: Any] = ["id": id, "source": value(s.customerSource?.rawValue)]
        if let other = s.implicitCustomerId {
            o["overrides"] = other
            o["note"] = "tied explicitly to \(id); the subscription's \(s.appAccountToken != nil ? "appAccountToken" : "openid") names \(other)"
        }
        return o
    }

    static func entitlement(_ g: EntitlementGrant) -> [String: Any] {
        [
            "environment": g.environment,
            "entitlement": g.entitlement,
            "productId": g.productId,
            "originalTransactionId": g.originalTransactionId,
            "expiresDate": value(g.expiresDate),
            "status": g.status.rawValue,
        ]
    }

    /// One stored event with its evidence. `raw` is the exact bytes: as text when they are UTF-8
    /// (every Apple and WeChat body is), else base64 — `rawEncoding` says which.
    static func event(_ e: RecordedEvent, facts: [Fact]? = nil) -> [String: Any] {
        let payload = (try? JSONSerialization.jsonObject(with: e.event.payload, options: [.fragmentsAllowed])) ?? NSNull()
        var raw: String
        var encoding = "utf8"
        if let text = String(data: e.event.raw, encoding: .utf8) {
            raw = text
        } else {
            raw = e.event.raw.base64EncodedString()
            encoding = "base64"
        }
        var out: [String: Any] = [
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
        if let facts { out["facts"] = facts.map(fact) }
        return out
    }

    /// One derived fact, as the timeline shows what an event contributed.
    static func fact(_ f: Fact) -> [String: Any] {
        var o: [String: Any] = [
            "kind": f.kind.rawValue, "origin": f.origin.rawValue, "subscription": value(f.subscription?.text),
            "signedAt": f.signedAt, "effectiveAt": f.effectiveAt, "transactionId": value(f.transactionId),
            "orderAlias": value(f.orderAlias), "customerId": value(f.customerId),
        ]
        if let t = f.transaction {
            o["transaction"] = [
                "transactionId": t.transactionId, "productId": value(t.productId), "type": value(t.type),
                "purchaseDate": value(t.purchaseDate), "expiresDate": value(t.expiresDate),
                "revocationDate": value(t.revocationDate), "isUpgraded": t.isUpgraded, "price": value(t.price),
                "currency": value(t.currency),
            ] as [String: Any]
        }
        if let r = f.renewal {
            o["renewal"] = [
                "autoRenewProductId": value(r.autoRenewProductId), "autoRenewStatus": value(r.autoRenewStatus),
                "expirationIntent": value(r.expirationIntent), "isInBillingRetryPeriod": value(r.isInBillingRetryPeriod),
                "gracePeriodExpiresDate": value(r.gracePeriodExpiresDate), "renewalDate": value(r.renewalDate),
            ] as [String: Any]
        }
        if let d = f.detail, let parsed = try? JSONSerialization.jsonObject(with: Data(d.utf8)) { o["detail"] = parsed }
        return o
    }
}
