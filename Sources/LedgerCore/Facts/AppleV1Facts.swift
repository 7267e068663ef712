import Foundation

/// Facts of a legacy V1 notification (`responseBodyV1`, unsigned, checked by the shared secret).
///
/// The stored payload keeps the (redacted) body under its own key, `responseBodyV1`, so nothing in
/// a V1 body can ever be read as a V2 field (a V1 body carrying a top-level `transactionInfo` is
/// just an unknown V1 member). Events stored before that namespace existed have the body at the
/// top level; both are read the same way, and only through this decoder.
///
/// Which subscription: the one of `auto_renew_product_id` — the `pending_renewal_info` entry whose
/// `auto_renew_product_id` it is (a pending crossgrade names a product not bought yet), else the
/// `latest_receipt_info` entry of that product; without `auto_renew_product_id`, the entry with the
/// greatest `purchase_date_ms`. Its latest transaction is its entry with the greatest
/// `purchase_date_ms` (ties: transaction_id).
///
/// Business time (`signedAt`, V1 carries no signing time): the greatest date the body states for
/// that subscription — its entries' purchase and cancellation dates and
/// `auto_renew_status_change_date_ms`.
///
/// Facts: the latest transaction (`transaction`); a `revocation` for each of the subscription's
/// entries with a `cancellation_date_ms` (effective then); the renewal state from its
/// `pending_renewal_info` entry and the top-level auto-renew fields (`renewal`).
enum AppleV1Facts {
    static func isV1(_ event: NewEvent) -> Bool { event.source == .apple && event.type.hasPrefix("V1/") }

    static func facts(of event: NewEvent) throws(FactDecodingError) -> [Fact] {
        let stored: PushValue
        do { stored = try JSONDecoder().decode(PushValue.self, from: event.payload) } catch {
            throw FactDecodingError("the payload is not JSON: \(error)")
        }
        let body = stored["responseBodyV1"] ?? stored
        guard body.objectValue != nil else { throw FactDecodingError("the V1 body is not a JSON object") }
        let type = body.text("notification_type") ?? String(event.type.dropFirst(3))
        guard let environment = SubscriptionKey.environment(body.text("environment") ?? event.environment) else {
            throw FactDecodingError("environment is neither PROD/Production nor Sandbox")
        }
        let receipt = body["unified_receipt"] ?? .null
        let entries = receipt["latest_receipt_info"]?.arrayValue?.compactMap(\.objectValue) ?? []
        let pendingAll = receipt["pending_renewal_info"]?.arrayValue?.compactMap(\.objectValue) ?? []
        guard !entries.isEmpty else { throw FactDecodingError("unified_receipt.latest_receipt_info is empty") }

        let autoRenewProduct = body.text("auto_renew_product_id")
        let original: String
        if let p = autoRenewProduct,
           let pending = pendingAll.first(where: { PushValue.object($0).text("auto_renew_product_id") == p }),
           let otid = PushValue.object(pending).text("original_transaction_id") {
            original = otid
        } else if let p = autoRenewProduct,
                  let entry = latest(entries.filter { PushValue.object($0).text("product_id") == p }),
                  let otid = entry.text("original_transaction_id") {
            original = otid
        } else if let entry = latest(entries), let otid = entry.text("original_transaction_id") {
            original = otid
        } else {
            throw FactDecodingError("no latest_receipt_info entry names an original_transaction_id")
        }
        let mine = entries.map(PushValue.object).filter { $0.text("original_transaction_id") == original }
        guard let current = latest(mine.compactMap(\.objectValue)), let txId = current.text("transaction_id") else {
            throw FactDecodingError("the subscription \(original) has no entry with a transaction_id")
        }
        let pending = pendingAll.map(PushValue.object).first { $0.text("original_transaction_id") == original }
        let changed = millis(body.text("auto_renew_status_change_date_ms"))
        var business = changed ?? .min
        for e in mine {
            for f in ["purchase_date_ms", "cancellation_date_ms"] {
                if let v = millis(e.text(f)) { business = max(business, v) }
            }
        }
        guard business != .min else { throw FactDecodingError("the body states no date for subscription \(original)") }

        let key = SubscriptionKey(environment: environment, originalTransactionId: original)
        let message = "V1/" + type
        var facts: [Fact] = []
        let snapshot = transaction(current, id: txId, environment: environment, bundleId: body.text("bid"))
        facts.append(Fact(
            subscription: key, kind: .transaction, origin: .appleV1, message: message, signedAt: business,
            effectiveAt: snapshot.purchaseDate ?? business, transactionId: txId, customerId: snapshot.appAccountToken,
            transaction: snapshot))
        for e in mine {
            guard let id = e.text("transaction_id"), let cancelled = millis(e.text("cancellation_date_ms")) else { continue }
            var revoked = transaction(e, id: id, environment: environment, bundleId: body.text("bid"))
            revoked.revocationDate = cancelled
            revoked.revocationReason = e.text("cancellation_reason").flatMap { Int($0) }
            facts.append(Fact(
                subscription: key, kind: .revocation, origin: .appleV1, message: message, signedAt: business,
                effectiveAt: cancelled, transactionId: id, customerId: revoked.appAccountToken, transaction: revoked))
        }
        let status: Int? = switch body.text("auto_renew_status") {
        case "true"?: 1
        case "false"?: 0
        default: pending?.text("auto_renew_status").flatMap { Int($0) }
        }
        let renewal = RenewalFact(
            productId: snapshot.productId,
            autoRenewProductId: pending?.text("auto_renew_product_id") ?? autoRenewProduct,
            autoRenewStatus: status,
            expirationIntent: (pending?.text("expiration_intent") ?? body.text("expiration_intent")).flatMap { Int($0) },
            isInBillingRetryPeriod: pending?.text("is_in_billing_retry_period").map { $0 == "1" },
            gracePeriodExpiresDate: millis(pending?.text("grace_period_expires_date_ms")),
            priceIncreaseStatus: pending?.text("price_consent_status").flatMap { Int($0) },
            appAccountToken: snapshot.appAccountToken, signedDate: business)
        facts.append(Fact(
            subscription: key, kind: .renewal, origin: .appleV1, message: message, signedAt: business,
            customerId: snapshot.appAccountToken, renewal: renewal))
        return facts
    }

    /// The entry with the greatest purchase_date_ms (ties: transaction_id), whatever the array order.
    static func latest(_ entries: [[String: PushValue]]) -> PushValue? {
        entries.map(PushValue.object).max { a, b in
            (millis(a.text("purchase_date_ms")) ?? .min, a.text("transaction_id") ?? "")
                < (millis(b.text("purchase_date_ms")) ?? .min, b.text("transaction_id") ?? "")
        }
    }

    static func transaction(_ e: PushValue, id: String, environment: String, bundleId: String?) -> TransactionFact {
        let expires = millis(e.text("expires_date_ms"))
        return TransactionFact(
            transactionId: id, originalTransactionId: e.text("original_transaction_id"),
            webOrderLineItemId: e.text("web_order_line_item_id"), bundleId: bundleId, productId: e.text("product_id"),
            purchaseDate: millis(e.text("purchase_date_ms")), expiresDate: expires,
            isUpgraded: e.text("is_upgraded") == "true",
            appAccountToken: CustomerId.normalised(appAccountToken: e.text("app_account_token")),
            environment: environment, type: expires == nil ? nil : "Auto-Renewable Subscription",
            inAppOwnershipType: e.text("in_app_ownership_type"))
    }

    /// V1 times are decimal strings of milliseconds.
    static func millis(_ s: String?) -> EpochMillis? {
        guard let s, let v = Int64(s), v > 0 else { return nil }
        return v
    }
}
