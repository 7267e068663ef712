import Foundation

/// Facts of a legacy V1 notification (`responseBodyV1`, unsigned, checked by the shared secret).
///
/// The stored payload keeps the (redacted) body under its own key, `responseBodyV1`, so nothing in
/// a V1 body can ever be read as a V2 field (a V1 body carrying a top-level `transactionInfo` is
/// just an unknown V1 member). Events stored before that namespace existed have the body at the
/// top level; both are read the same way, and only through this decoder.
///
/// Which subscription, its latest transaction and the business time: `AppleV1Subscription`, the
/// rule ingestion also uses for the event's stream, dedupe key and `signedAt`.
///
/// | body | fact | signedAt | effectiveAt |
/// |---|---|---|---|
/// | the subscription's latest entry | `transaction` | business time | its purchase_date_ms |
/// | each of its entries with `cancellation_date_ms`, but upgraded ones (`is_upgraded`) | `revocation` of that entry | business time | cancellation_date_ms |
/// | its `pending_renewal_info` entry + top-level `auto_renew_*` | `renewal` | business time | business time |
///
/// Facts come in the order of `AppleV1Subscription.entries` (never the array order Apple sent).
enum AppleV1Facts {
    static func isV1(_ event: NewEvent) -> Bool { event.source == .apple && event.type.hasPrefix("V1/") }

    static func facts(of event: NewEvent) throws(FactDecodingError) -> [Fact] {
        let stored: JSONValue
        do { stored = try JSONDecoder().decode(JSONValue.self, from: event.payload) } catch {
            throw FactDecodingError("the payload is not JSON: \(error)")
        }
        let body = stored[AppleV1Subscription.payloadKey] ?? stored
        guard body.objectValue != nil else { throw FactDecodingError("the V1 body is not a JSON object") }
        let type = body.text("notification_type") ?? String(event.type.dropFirst(3))
        guard let environment = SubscriptionKey.environment(body.text("environment") ?? event.environment) else {
            throw FactDecodingError("environment is neither PROD/Production nor Sandbox")
        }
        let subject: AppleV1Subscription
        do { subject = try AppleV1Subscription(body: body) } catch { throw FactDecodingError(error.description) }
        let original = subject.originalTransactionId
        let current = subject.latest
        let txId = subject.latestTransactionId
        let pending = subject.pending
        let business = subject.businessTime
        let autoRenewProduct = body.text("auto_renew_product_id")

        let key = SubscriptionKey(environment: environment, originalTransactionId: original)
        let message = "V1/" + type
        var facts: [Fact] = []
        let snapshot = transaction(current, id: txId, environment: environment, bundleId: body.text("bid"))
        facts.append(Fact(
            subscription: key, kind: .transaction, origin: .appleV1, message: message, signedAt: business,
            effectiveAt: snapshot.purchaseDate ?? business, transactionId: txId, customerId: snapshot.appAccountToken,
            transaction: snapshot))
        for e in subject.entries {
            guard let id = e.text("transaction_id"), let cancelled = millis(e.text("cancellation_date_ms")) else { continue }
            if Self.isUpgradeCancellation(e) { continue }
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

    static func millis(_ s: String?) -> EpochMillis? { AppleV1Subscription.millis(s) }

    /// Apple: `cancellation_date_ms` is "the time Apple customer support canceled a transaction,
    /// or the time an auto-renewable subscription plan was upgraded" (responseBody.Latest_receipt_info),
    /// and `is_upgraded` "indicates that the system canceled a subscription because the user
    /// upgraded". An upgraded entry's cancellation is the upgrade, not a refund: no revocation
    /// (the upgrade itself is folded from `is_upgraded`).
    static func isUpgradeCancellation(_ e: JSONValue) -> Bool { e.text("is_upgraded") == "true" }

    static func transaction(_ e: JSONValue, id: String, environment: String, bundleId: String?) -> TransactionFact {
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
}

/// The subscription a legacy V1 notification concerns, chosen by the one rule that ingestion
/// (the event's stream, dedupe key and `signedAt`) and the fact decoder (`AppleV1Facts`) share,
/// so both always name the same subscription. A pure function of the body; Apple does not
/// promise the order of its arrays, so nothing here depends on it.
///
/// A V1 body describes the whole account (`unified_receipt.latest_receipt_info` holds the latest
/// transactions of every subscription group), while the notification itself is about one group:
/// the one of the top-level `auto_renew_product_id`. The rule:
///
/// 1. Candidates, the first non-empty of: the `original_transaction_id`s of the
///    `pending_renewal_info` entries whose `auto_renew_product_id` is that product (a pending
///    crossgrade or downgrade names a product not bought yet); those of the `latest_receipt_info`
///    entries of that product; every `original_transaction_id` in `latest_receipt_info`. Only
///    ids that have at least one `latest_receipt_info` entry are candidates.
/// 2. The subscription is the candidate owning the latest entry.
/// 3. "Latest" orders entries by `purchase_date_ms`, then `transaction_id` (as a number), then the entry's
///    canonical JSON (so even two entries alike in both are ordered by content, not position).
/// 4. Its `pending_renewal_info` entry: the one with its `original_transaction_id`, preferring
///    one whose `auto_renew_product_id` is the notification's, then by canonical JSON.
/// 5. Business time: the greatest of its entries' `purchase_date_ms` and
///    `cancellation_date_ms` and the top-level `auto_renew_status_change_date_ms`.
///
/// Values are read as text (`JSONValue.text`); a date is a decimal string of positive
/// milliseconds, anything else counts as absent.
public struct AppleV1Subscription: Sendable, Equatable {
    /// The member of a stored V1 payload that holds the (redacted) body: `{"responseBodyV1": …}`.
    public static let payloadKey = "responseBodyV1"

    public let originalTransactionId: String
    /// Its `latest_receipt_info` entries, oldest first by the order of rule 3.
    public let entries: [JSONValue]
    /// The last of `entries`: the subscription's latest transaction.
    public var latest: JSONValue { entries[entries.count - 1] }
    /// `latest`'s `transaction_id` (never empty).
    public let latestTransactionId: String
    /// Its `pending_renewal_info` entry, if the body has one.
    public let pending: JSONValue?
    /// The greatest date the body states for this subscription (rule 5).
    public let businessTime: EpochMillis

    /// Why a body names no subscription the ledger can file.
    public enum Problem: Error, Sendable, Equatable, CustomStringConvertible {
        /// `unified_receipt.latest_receipt_info` is absent, empty or holds no object.
        case noEntries
        /// No `latest_receipt_info` entry names an `original_transaction_id`.
        case noOriginalTransactionId
        /// The subscription's latest entry has no `transaction_id`.
        case noTransactionId(originalTransactionId: String)
        /// The body states no purchase, cancellation or auto-renew change date for it.
        case noDate(originalTransactionId: String)

        public var description: String {
            switch self {
            case .noEntries: "unified_receipt.latest_receipt_info holds no entry"
            case .noOriginalTransactionId: "no latest_receipt_info entry names an original_transaction_id"
            case .noTransactionId(let id): "the latest latest_receipt_info entry of subscription \(id) has no transaction_id"
            case .noDate(let id): "the body states no purchase_date_ms, cancellation_date_ms or auto_renew_status_change_date_ms for subscription \(id)"
            }
        }
    }

    /// `body` is the V1 body itself (not the stored `{"responseBodyV1": …}` wrapper).
    public init(body: JSONValue) throws(Problem) {
        let receipt = body["unified_receipt"] ?? .null
        let all = (receipt["latest_receipt_info"]?.arrayValue ?? []).filter { $0.objectValue != nil }
        let pendingAll = (receipt["pending_renewal_info"]?.arrayValue ?? []).filter { $0.objectValue != nil }
        guard !all.isEmpty else { throw .noEntries }
        var byOriginal: [String: [JSONValue]] = [:]
        for e in all {
            if let id = e.text("original_transaction_id") { byOriginal[id, default: []].append(e) }
        }
        guard !byOriginal.isEmpty else { throw .noOriginalTransactionId }

        let product = body.text("auto_renew_product_id")
        var candidates: Set<String> = []
        if let product {
            candidates = Set(pendingAll.filter { $0.text("auto_renew_product_id") == product }
                .compactMap { $0.text("original_transaction_id") }).filter { byOriginal[$0] != nil }
            if candidates.isEmpty {
                candidates = Set(all.filter { $0.text("product_id") == product }.compactMap { $0.text("original_transaction_id") })
            }
        }
        if candidates.isEmpty { candidates = Set(byOriginal.keys) }
        // Each candidate's entries sorted; the candidate whose last entry is latest wins.
        var best: (id: String, entries: [JSONValue])?
        for id in candidates {
            let sorted = byOriginal[id, default: []].sorted(by: Self.precedes)
            guard let last = sorted.last else { continue }
            if let b = best, !Self.precedes(b.entries[b.entries.count - 1], last) { continue }
            best = (id, sorted)
        }
        guard let (original, entries) = best else { throw .noOriginalTransactionId }
        guard let latestId = entries[entries.count - 1].text("transaction_id") else {
            throw .noTransactionId(originalTransactionId: original)
        }
        let pendings = pendingAll.filter { $0.text("original_transaction_id") == original }
        let pending = pendings.max { a, b in
            let (aMatch, bMatch) = (a.text("auto_renew_product_id") == product, b.text("auto_renew_product_id") == product)
            if aMatch != bMatch { return bMatch }
            return Self.canonical(a) < Self.canonical(b)
        }
        var business = Self.millis(body.text("auto_renew_status_change_date_ms")) ?? .min
        for e in entries {
            for f in ["purchase_date_ms", "cancellation_date_ms"] {
                if let v = Self.millis(e.text(f)) { business = max(business, v) }
            }
        }
        guard business != .min else { throw .noDate(originalTransactionId: original) }
        self.originalTransactionId = original
        self.entries = entries
        self.latestTransactionId = latestId
        self.pending = pending
        self.businessTime = business
    }

    /// V1 times are decimal strings of milliseconds; nil for anything else, zero or negative.
    public static func millis(_ s: String?) -> EpochMillis? {
        guard let s, let v = Int64(s), v > 0 else { return nil }
        return v
    }

    /// Rule 3: purchase_date_ms (absent first), then transaction_id (`TransactionIdOrder`), then canonical JSON.
    static func precedes(_ a: JSONValue, _ b: JSONValue) -> Bool {
        let (pa, pb) = (millis(a.text("purchase_date_ms")) ?? .min, millis(b.text("purchase_date_ms")) ?? .min)
        if pa != pb { return pa < pb }
        let (ta, tb) = (a.text("transaction_id") ?? "", b.text("transaction_id") ?? "")
        if ta != tb { return TransactionIdOrder.precedes(ta, tb) }
        return canonical(a) < canonical(b)
    }

    private static func canonical(_ v: JSONValue) -> String { String(decoding: v.canonicalJSON(), as: UTF8.self) }
}
