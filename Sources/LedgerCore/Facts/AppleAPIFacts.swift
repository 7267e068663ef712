import Foundation

/// Apple's answers to the ledger's own requests, stored as events of source `apple` whose type
/// starts with `API/`. Apple signs App Store Server API answers at request time, so these events
/// are statements "as of when we asked"; their facts enter the folds like any notification's,
/// ordered by their own signedDate.
///
/// | type | one event per | stream | `raw` | `payload` |
/// |---|---|---|---|---|
/// | `API/subscription-status` | subscription (`lastTransactions` item) of a Get All Subscription Statuses answer | its originalTransactionId | Apple's whole answer, as received | `{"statusResponse": {environment, bundleId, appAppleId, data: [{subscriptionGroupIdentifier, lastTransactions: [{originalTransactionId, status, transactionInfo, renewalInfo}]}]}}` — the answer cut to that one item, each verified JWS decoded in place of its signed string |
/// | `API/transaction` | signed transaction of a Get Transaction History page | its originalTransactionId | the JWS text, as received | `{"historyTransaction": {environment, bundleId, appAppleId, transactionInfo}}` |
/// | `API/verify-receipt` | verifyReceipt answer (status 0) | the original_transaction_id owning the latest `latest_receipt_info` entry | Apple's whole answer, as received | `{"verifyReceiptResponse": <the answer without latest_receipt>}` |
///
/// Why per subscription and per transaction, not per answer: a subscription's events are read by
/// stream (`GET /v1/subscriptions/{id}/events`), and an answer can cover several subscriptions (a
/// statuses answer lists every group of the customer; a history page mixes them). It also makes
/// the dedupe per subscription: one subscription's change does not store the others again. A
/// verifyReceipt answer stays whole because it lists every purchase of the account (duplicating
/// its often large body per subscription would multiply it).
///
/// **Dedupe key** (`dedupeContent`): Apple signs at request time, so the JWS bytes and signedDate
/// differ on every call: the key hashes the decoded payload without them — `"api:<kind>:" +
/// hex(SHA-256(canonical JSON of the payload's namespace with every transactionInfo.signedDate and
/// renewalInfo.signedDate removed))`, for receipts without `receipt.request_date*`. An unchanged
/// answer is therefore not stored again. The builders (AppStore `AppleAPIAnswerEvents`) may
/// append `@<position>`: see there (an answer equal to one stored before the ledger learned
/// something else must be stored again).
///
/// Facts (origin `apple.api`, message = the event type):
///
/// | payload | fact | signedAt | effectiveAt |
/// |---|---|---|---|
/// | each `transactionInfo` | `transaction` (the snapshot) | its signedDate, else the event's | purchaseDate |
/// | each `transactionInfo` with a `revocationDate` | `revocation` of it | its signedDate, else the event's | revocationDate |
/// | each `transactionInfo` without one | `reversal` of it (`detail.basis`): not revoked as of signing, so earlier revocations no longer hold | its signedDate, else the event's | signedAt |
/// | each `renewalInfo` | `renewal` (the snapshot, absent fields cleared) | its signedDate, else the event's | signedAt |
/// | each statuses item's `status` (1–5) | `apple_status` (`detail.status`, `detail.source` = api) | its transaction's signedDate, else its renewal info's, else the event's | signedAt |
/// | receipt: each `latest_receipt_info` entry with `expires_date_ms` | `transaction` | the entry's own latest date (purchase, cancellation) | purchase_date_ms |
/// | receipt: each such entry with `cancellation_date_ms`, but upgraded ones (`is_upgraded`: the upgrade, not a refund) | `revocation` | cancellation_date_ms | cancellation_date_ms |
/// | receipt: the `pending_renewal_info` entry of each subscription | `renewal` | `receipt.request_date_ms` (Apple's answer time), else the subscription's latest date | signedAt |
///
/// Receipt entries without `expires_date_ms` are not auto-renewable subscriptions (a receipt
/// does not state the product type, and a non-consumable or consumable folded as a subscription
/// without expiry would read `expired`): they give no facts. Receipt transactions are dated by
/// their own dates, not the request time, because a receipt states less than a signed
/// transaction (no price, currency, offer): dated at the request it would replace a richer V2
/// snapshot of the same transaction. Its renewal state is dated at the request: that is what
/// heals a renewal state the ledger missed.
public enum AppleAPIEvents {
    public static let typePrefix = "API/"
    public static let subscriptionStatus = "API/subscription-status"
    public static let transaction = "API/transaction"
    public static let verifyReceipt = "API/verify-receipt"

    /// The payload member each type keeps its document under (its own namespace, like V1's
    /// `responseBodyV1`, so no API answer member can ever be read as a notification field).
    public static let statusResponseKey = "statusResponse"
    public static let historyTransactionKey = "historyTransaction"
    public static let verifyReceiptKey = "verifyReceiptResponse"

    public static func isAPI(_ event: NewEvent) -> Bool { event.source == .apple && event.type.hasPrefix(typePrefix) }

    /// The short name of a type inside dedupe keys (`api:status:…`).
    public static func keyKind(of type: String) -> String? {
        switch type {
        case subscriptionStatus: "status"
        case transaction: "tx"
        case verifyReceipt: "receipt"
        default: nil
        }
    }

    /// The bytes a dedupe key hashes: the canonical JSON of the payload's namespace without the
    /// members Apple changes on every call (signedDate of each decoded JWS; a receipt's request
    /// dates and `latest_receipt`). Nil when the payload lacks its type's namespace.
    public static func dedupeContent(type: String, payload: JSONValue) -> Data? {
        switch type {
        case subscriptionStatus:
            guard var b = payload[statusResponseKey]?.objectValue else { return nil }
            if let groups = b["data"]?.arrayValue {
                b["data"] = .array(groups.map { group in
                    guard var g = group.objectValue else { return group }
                    if let items = g["lastTransactions"]?.arrayValue { g["lastTransactions"] = .array(items.map(withoutSignedDates)) }
                    return .object(g)
                })
            }
            return JSONValue.object(b).canonicalJSON()
        case transaction:
            guard let body = payload[historyTransactionKey], body.objectValue != nil else { return nil }
            return withoutSignedDates(body).canonicalJSON()
        case verifyReceipt:
            guard var b = payload[verifyReceiptKey]?.objectValue else { return nil }
            b["latest_receipt"] = nil
            if let receipt = b["receipt"] {
                b["receipt"] = receipt.removing(["request_date", "request_date_ms", "request_date_pst"])
            }
            return JSONValue.object(b).canonicalJSON()
        default:
            return nil
        }
    }

    /// An item (or history entry) without the signedDate of its decoded transaction and renewal info.
    static func withoutSignedDates(_ item: JSONValue) -> JSONValue {
        guard var o = item.objectValue else { return item }
        for key in ["transactionInfo", "renewalInfo"] {
            if let v = o[key], v.objectValue != nil { o[key] = v.removing(["signedDate"]) }
        }
        return .object(o)
    }
}

/// The fact decoder of `AppleAPIEvents` (see its table).
enum AppleAPIFacts {
    static func facts(of event: NewEvent) throws(FactDecodingError) -> [Fact] {
        switch event.type {
        case AppleAPIEvents.subscriptionStatus: return try statusFacts(event)
        case AppleAPIEvents.transaction: return try historyFacts(event)
        case AppleAPIEvents.verifyReceipt: return try receiptFacts(event)
        default:
            throw FactDecodingError("\(event.type) is no App Store API answer type this ledger knows (\(AppleAPIEvents.subscriptionStatus), \(AppleAPIEvents.transaction), \(AppleAPIEvents.verifyReceipt))")
        }
    }

    // MARK: Get All Subscription Statuses

    /// The stored payload as a tree: the one the builder made (`NewEvent.parsed`), else parsed once.
    static func tree(_ event: NewEvent) throws(FactDecodingError) -> JSONValue {
        if case .value(let v)? = event.parsed { return v }
        do { return try JSONValue(json: event.payload) } catch {
            throw FactDecodingError("the payload is not JSON: \(error)")
        }
    }

    static func statusFacts(_ event: NewEvent) throws(FactDecodingError) -> [Fact] {
        let payload = try tree(event)
        guard let body = payload.child(AppleAPIEvents.statusResponseKey) else {
            throw FactDecodingError("the payload has no \(AppleAPIEvents.statusResponseKey) member")
        }
        var facts: [Fact] = []
        for group in body.children("data") ?? [] {
            for item in group.children("lastTransactions") ?? [] {
                let tx = item.child("transactionInfo"), renewal = item.child("renewalInfo")
                let environment = try environment(
                    tx?.text("environment") ?? renewal?.text("environment") ?? body.text("environment") ?? event.environment)
                var subject: (key: SubscriptionKey, transactionId: String?, signed: EpochMillis?)?
                if let tx {
                    if let stated = item.text("originalTransactionId"), let inTx = tx.text("originalTransactionId"), stated != inTx {
                        throw FactDecodingError("an item names originalTransactionId \(stated) but its transaction \(inTx)")
                    }
                    let own = try transactionFacts(tx, environment: environment, bundleId: body.text("bundleId"), event: event)
                    facts += own
                    if let first = own.first, let key = first.subscription { subject = (key, first.transactionId, first.signedAt) }
                }
                if let renewal {
                    guard let original = renewal.text("originalTransactionId") ?? item.text("originalTransactionId")
                        ?? tx?.text("originalTransactionId"), !original.isEmpty else {
                        throw FactDecodingError("a renewalInfo has no originalTransactionId")
                    }
                    let fields = AppleFields.renewal(from: renewal)
                    guard let signed = fields.signedDate ?? event.signedAt else {
                        throw FactDecodingError("a renewalInfo has no signedDate, so its facts cannot be ordered")
                    }
                    let key = SubscriptionKey(environment: environment, originalTransactionId: original)
                    if subject == nil { subject = (key, nil, signed) }
                    facts.append(Fact(
                        subscription: key, kind: .renewal, origin: .appleAPI, message: event.type, signedAt: signed,
                        customerId: fields.appAccountToken, renewal: fields))
                }
                if let status = item.integer("status"), AppleStatusFacts.documented.contains(status), let subject,
                   let signed = subject.signed ?? event.signedAt {
                    // "The status of the auto-renewable subscription" as Apple answers when asked
                    // (Get All Subscription Statuses, lastTransactionsItem.status): dated by the
                    // signed data Apple made for the answer.
                    facts.append(AppleStatusFacts.statement(
                        status, key: subject.key, transactionId: subject.transactionId, origin: .appleAPI,
                        message: event.type, signedAt: signed, source: .api))
                }
            }
        }
        return facts
    }

    // MARK: Get Transaction History

    static func historyFacts(_ event: NewEvent) throws(FactDecodingError) -> [Fact] {
        let payload = try tree(event)
        guard let body = payload.child(AppleAPIEvents.historyTransactionKey) else {
            throw FactDecodingError("the payload has no \(AppleAPIEvents.historyTransactionKey) member")
        }
        guard let tx = body.child("transactionInfo") else { throw FactDecodingError("the history entry has no transactionInfo") }
        let environment = try environment(tx.text("environment") ?? body.text("environment") ?? event.environment)
        return try transactionFacts(tx, environment: environment, bundleId: body.text("bundleId"), event: event)
    }

    /// The transaction snapshot and its revocation (with a revocationDate) or reversal (without);
    /// all dated by the transaction's own signedDate (the request time), so they outrank what the
    /// ledger knew before it asked.
    static func transactionFacts(
        _ tx: JSONValue, environment: String, bundleId: String?, event: NewEvent
    ) throws(FactDecodingError) -> [Fact] {
        guard var snapshot = AppleFields.transaction(from: tx) else { throw FactDecodingError("a transactionInfo has no transactionId") }
        let id = snapshot.transactionId
        guard let original = snapshot.originalTransactionId, !original.isEmpty else {
            throw FactDecodingError("transactionInfo \(id) has no originalTransactionId")
        }
        if snapshot.bundleId == nil { snapshot.bundleId = bundleId }
        if snapshot.environment == nil { snapshot.environment = environment }
        guard let signed = snapshot.signedDate ?? event.signedAt else {
            throw FactDecodingError("transactionInfo \(id) has no signedDate, so its facts cannot be ordered")
        }
        let key = SubscriptionKey(environment: environment, originalTransactionId: original)
        var facts = [Fact(
            subscription: key, kind: .transaction, origin: .appleAPI, message: event.type, signedAt: signed,
            effectiveAt: snapshot.purchaseDate ?? signed, transactionId: id,
            customerId: snapshot.appAccountToken, transaction: snapshot)]
        if let revoked = snapshot.revocationDate {
            facts.append(Fact(
                subscription: key, kind: .revocation, origin: .appleAPI, message: event.type, signedAt: signed,
                effectiveAt: revoked, transactionId: id, customerId: snapshot.appAccountToken, transaction: snapshot))
        } else {
            // Apple states the transaction as it is when it signs: no revocationDate means not
            // revoked now. As a reversal signed then, it undoes every earlier revocation, so a
            // lost REFUND_REVERSED is healed by the next answer (and a later refund still wins).
            facts.append(Fact(
                subscription: key, kind: .reversal, origin: .appleAPI, message: event.type, signedAt: signed,
                effectiveAt: signed, transactionId: id, customerId: snapshot.appAccountToken, transaction: snapshot,
                detail: Detail.json(["basis": .string("snapshot without revocationDate")])))
        }
        return facts
    }

    static func environment(_ raw: String?) throws(FactDecodingError) -> String {
        guard let environment = SubscriptionKey.environment(raw) else {
            throw FactDecodingError("environment \(raw.map { "\"\($0)\"" } ?? "(none)") is neither Production nor Sandbox")
        }
        return environment
    }

    // MARK: verifyReceipt

    static func receiptFacts(_ event: NewEvent) throws(FactDecodingError) -> [Fact] {
        let stored = try tree(event)
        guard let body = stored[AppleAPIEvents.verifyReceiptKey], body.objectValue != nil else {
            throw FactDecodingError("the payload has no \(AppleAPIEvents.verifyReceiptKey) member")
        }
        let environment = try environment(body.text("environment") ?? event.environment)
        let bundleId = body["receipt"]?.text("bundle_id")
        let requested = AppleV1Subscription.millis(body["receipt"]?.text("request_date_ms"))
        let entries = (body["latest_receipt_info"]?.arrayValue ?? []).filter {
            $0.objectValue != nil && AppleV1Subscription.millis($0.text("expires_date_ms")) != nil
        }
        let pending = (body["pending_renewal_info"]?.arrayValue ?? []).filter { $0.objectValue != nil }
        let originals = Set(entries.compactMap { $0.text("original_transaction_id") })
        var facts: [Fact] = []
        // Subscriptions in id order, each through the rule V1 uses (entries by purchase date, its
        // pending renewal entry), so array order never matters.
        for original in originals.sorted() {
            let mine = entries.filter { $0.text("original_transaction_id") == original }
            let theirPending = pending.filter { $0.text("original_transaction_id") == original }
            let subject: AppleV1Subscription
            do {
                subject = try AppleV1Subscription(body: .object(["unified_receipt": .object([
                    "latest_receipt_info": .array(mine), "pending_renewal_info": .array(theirPending),
                ])]))
            } catch { throw FactDecodingError("subscription \(original) of the receipt: \(error.description)") }
            let key = SubscriptionKey(environment: environment, originalTransactionId: original)
            var latest: TransactionFact?
            for e in subject.entries {
                guard let id = e.text("transaction_id") else { continue }
                let snapshot = AppleV1Facts.transaction(e, id: id, environment: environment, bundleId: bundleId)
                let cancelled = AppleV1Facts.millis(e.text("cancellation_date_ms"))
                let own = [snapshot.purchaseDate, cancelled].compactMap { $0 }.max() ?? subject.businessTime
                facts.append(Fact(
                    subscription: key, kind: .transaction, origin: .appleAPI, message: event.type, signedAt: own,
                    effectiveAt: snapshot.purchaseDate ?? own, transactionId: id, customerId: snapshot.appAccountToken,
                    transaction: snapshot))
                if let cancelled, !AppleV1Facts.isUpgradeCancellation(e) {
                    var revoked = snapshot
                    revoked.revocationDate = cancelled
                    revoked.revocationReason = e.text("cancellation_reason").flatMap { Int($0) }
                    facts.append(Fact(
                        subscription: key, kind: .revocation, origin: .appleAPI, message: event.type, signedAt: cancelled,
                        effectiveAt: cancelled, transactionId: id, customerId: revoked.appAccountToken, transaction: revoked))
                }
                latest = snapshot
            }
            if let p = subject.pending {
                let renewal = RenewalFact(
                    productId: latest?.productId ?? p.text("product_id"),
                    autoRenewProductId: p.text("auto_renew_product_id"),
                    autoRenewStatus: p.text("auto_renew_status").flatMap { Int($0) },
                    expirationIntent: p.text("expiration_intent").flatMap { Int($0) },
                    isInBillingRetryPeriod: p.text("is_in_billing_retry_period").map { $0 == "1" },
                    gracePeriodExpiresDate: AppleV1Facts.millis(p.text("grace_period_expires_date_ms")),
                    priceIncreaseStatus: p.text("price_consent_status").flatMap { Int($0) },
                    appAccountToken: latest?.appAccountToken, signedDate: requested ?? subject.businessTime)
                facts.append(Fact(
                    subscription: key, kind: .renewal, origin: .appleAPI, message: event.type,
                    signedAt: requested ?? subject.businessTime, customerId: renewal.appAccountToken, renewal: renewal))
            }
        }
        return facts
    }
}
