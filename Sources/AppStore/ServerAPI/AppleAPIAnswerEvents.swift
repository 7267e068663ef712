import Crypto
import Foundation
import LedgerCore

/// Turns Apple's answers to the ledger's own requests into the `NewEvent`s to append — pure and
/// synchronous, like `AppleNotificationIngestor`: every signed item is verified with the
/// `SignedDataVerifier` (chain at its own signedDate, Apple's OIDs, ES256), must be the type of
/// its slot, must agree with the answer's bundleId / environment / originalTransactionId, and must
/// be for an accepted app and environment. Event types, payload shapes and what facts they give:
/// `AppleAPIEvents` (LedgerCore).
///
/// **Dedupe keys.** `"api:<status|tx|receipt>:" + hex(SHA-256(AppleAPIEvents.dedupeContent))`:
/// the decoded content without the dates Apple changes on every call, so asking again about an
/// unchanged subscription stores nothing. That alone would also refuse an answer equal to one
/// stored before the ledger learned something else (A → B → A: the customer turned auto-renew
/// off, the ledger heard it, turned it on again and that notification was lost — Apple's answer
/// equals the first one, and the ledger would keep saying "off"). So each builder takes `after`:
/// per stream, the position of its latest event that is **not** an API answer (nil/absent when
/// none). The key then ends in `@<position>`, and an answer is stored again exactly when the
/// ledger recorded something else about the subscription since. A re-run with nothing new in
/// between still stores nothing.
public struct AppleAPIAnswerEvents: Sendable {
    public let verifier: SignedDataVerifier
    public let acceptance: AppleAcceptance

    public init(verifier: SignedDataVerifier, acceptance: AppleAcceptance) {
        self.verifier = verifier
        self.acceptance = acceptance
    }

    // MARK: Get All Subscription Statuses

    /// One `API/subscription-status` event per `lastTransactions` item, stream = its
    /// originalTransactionId, raw = the whole answer; in the answer's order.
    public func subscriptionStatusEvents(_ answer: StatusResponse, after: [String: Int64] = [:]) throws(AppleVerificationError) -> [NewEvent] {
        let root = try Self.tree(answer.body, what: "Get All Subscription Statuses answer")
        guard var envelope = root.objectValue else { throw .malformed("the statuses answer is not a JSON object") }
        let identity = try identity(bundleId: root.text("bundleId"), environment: root.text("environment"),
                                    appAppleId: root["appAppleId"]?.int64, what: "the statuses answer")
        let dataValue = envelope.removeValue(forKey: "data")
        guard let groups = dataValue.map({ $0.arrayValue }) ?? [] else { throw .malformed("data is not an array") }
        var events: [NewEvent] = []
        for (g, groupValue) in groups.enumerated() {
            guard var group = groupValue.objectValue else { throw .malformed("data[\(g)] is not an object") }
            let itemsValue = group.removeValue(forKey: "lastTransactions")
            guard let items = itemsValue.map({ $0.arrayValue }) ?? [] else { throw .malformed("data[\(g)].lastTransactions is not an array") }
            for (i, itemValue) in items.enumerated() {
                let slot = "data[\(g)].lastTransactions[\(i)]"
                guard var item = itemValue.objectValue else { throw .malformed("\(slot) is not an object") }
                var original = item["originalTransactionId"]?.text
                var signedAt: Int64?
                var expiresAt: Int64?
                if let jws = item.removeValue(forKey: "signedTransactionInfo") {
                    let tx = try verifiedTransaction(jws, slot: "\(slot).signedTransactionInfo", identity: identity)
                    if let original, original != tx.text("originalTransactionId") {
                        throw .nestedMismatch(field: "originalTransactionId", detail: "\(slot) names \(original), its transaction \(tx.text("originalTransactionId") ?? "none")")
                    }
                    original = tx.text("originalTransactionId")
                    signedAt = tx["signedDate"]?.int64
                    expiresAt = tx["expiresDate"]?.int64
                    item["transactionInfo"] = tx
                }
                if let jws = item.removeValue(forKey: "signedRenewalInfo") {
                    let renewal = try verifiedRenewal(jws, slot: "\(slot).signedRenewalInfo", identity: identity)
                    if let original, original != renewal.text("originalTransactionId") {
                        throw .nestedMismatch(field: "originalTransactionId", detail: "\(slot): transaction \(original), renewal info \(renewal.text("originalTransactionId") ?? "none")")
                    }
                    original = original ?? renewal.text("originalTransactionId")
                    signedAt = signedAt ?? renewal["signedDate"]?.int64
                    item["renewalInfo"] = renewal
                }
                guard let original, OriginalTransactionId.isValid(original) else {
                    throw .invalidOriginalTransactionId(field: "\(slot).originalTransactionId")
                }
                group["lastTransactions"] = .array([.object(item)])
                envelope["data"] = .array([.object(group)])
                let payload = JSONValue.object([AppleAPIEvents.statusResponseKey: .object(envelope)])
                events.append(try event(
                    type: AppleAPIEvents.subscriptionStatus, stream: original, payload: payload, raw: answer.body,
                    environment: identity.environment, signedAt: signedAt, expiresAt: expiresAt, after: after[original]))
            }
        }
        return events
    }

    // MARK: Get Transaction History

    /// One `API/transaction` event per signed transaction of the page, stream = its
    /// originalTransactionId, raw = the JWS text exactly as in Apple's answer (a compact JWS
    /// that `ledger verify-payload` re-verifies); in the page's order.
    public func transactionHistoryEvents(_ page: HistoryResponse, after: [String: Int64] = [:]) throws(AppleVerificationError) -> [NewEvent] {
        let identity = try identity(bundleId: page.bundleId, environment: page.environment, appAppleId: page.appAppleId,
                                    what: "the transaction history page")
        var events: [NewEvent] = []
        for (i, jws) in page.signedTransactions.enumerated() {
            let tx = try verifiedTransaction(.string(jws), slot: "signedTransactions[\(i)]", identity: identity)
            guard let original = tx.text("originalTransactionId") else { throw .missingField("signedTransactions[\(i)].originalTransactionId") }
            var body: [String: JSONValue] = ["transactionInfo": tx]
            if let e = page.environment { body["environment"] = .string(e) }
            if let b = page.bundleId { body["bundleId"] = .string(b) }
            if let a = page.appAppleId { body["appAppleId"] = .integer(a) }
            events.append(try event(
                type: AppleAPIEvents.transaction, stream: original,
                payload: .object([AppleAPIEvents.historyTransactionKey: .object(body)]), raw: Data(jws.utf8),
                environment: identity.environment, signedAt: tx["signedDate"]?.int64, expiresAt: tx["expiresDate"]?.int64,
                after: after[original]))
        }
        return events
    }

    // MARK: verifyReceipt

    /// One `API/verify-receipt` event for a status-0 answer; stream = the original_transaction_id
    /// owning the latest auto-renewable `latest_receipt_info` entry; raw = the whole answer;
    /// payload without `latest_receipt` (the receipt blob stays in raw). verifyReceipt answers
    /// carry no signature: their authenticity is the TLS connection to Apple's host.
    public func verifyReceiptEvent(_ answer: VerifyReceiptAnswer, after: [String: Int64] = [:]) throws(AppleVerificationError) -> NewEvent {
        let root = try Self.tree(answer.body, what: "verifyReceipt answer")
        guard var body = root.objectValue else { throw .malformed("the verifyReceipt answer is not a JSON object") }
        guard root.int64("status") == 0 else { throw .malformed("only a status-0 verifyReceipt answer is a statement to store") }
        let stated = root.text("environment")
        if let stated, SubscriptionKey.environment(stated) != answer.environment.rawValue {
            throw .nestedMismatch(field: "environment", detail: "the answer says \(stated), it came from \(answer.environment.rawValue)")
        }
        let environment = answer.environment.rawValue
        guard let bundleId = root["receipt"]?.text("bundle_id") else { throw .missingField("receipt.bundle_id") }
        guard acceptance.bundleIds.contains(bundleId) else { throw .appMismatch("bundle_id \"\(bundleId)\" is not an accepted app") }
        guard acceptance.environments.contains(environment) else {
            throw .environmentMismatch("environment \"\(environment)\" is not accepted here")
        }
        // The receipt's app_item_id is the appAppleId (0 in Sandbox).
        if environment == SubscriptionKey.production, let item = root["receipt"]?.int64("app_item_id"), item != 0,
           !acceptance.appAppleIds.contains(item) {
            throw .appMismatch("app_item_id \(item) is not an accepted app")
        }
        let entries = (root["latest_receipt_info"]?.arrayValue ?? []).filter {
            $0.objectValue != nil && AppleV1Subscription.millis($0.text("expires_date_ms")) != nil
        }
        let subject: AppleV1Subscription
        do { subject = try AppleV1Subscription(body: .object(["unified_receipt": .object(["latest_receipt_info": .array(entries)])])) } catch {
            throw .missingField("latest_receipt_info with an auto-renewable subscription (\(error.description))")
        }
        guard OriginalTransactionId.isValid(subject.originalTransactionId) else {
            throw .invalidOriginalTransactionId(field: "latest_receipt_info[].original_transaction_id")
        }
        for e in entries {
            if let id = e.text("original_transaction_id"), !OriginalTransactionId.isValid(id) {
                throw .invalidOriginalTransactionId(field: "latest_receipt_info[].original_transaction_id")
            }
            for field in ["transaction_id", "product_id", "app_account_token"] {
                if let v = e.text(field) { try Identifier.check(v, "latest_receipt_info[].\(field)", limit: Identifier.keyBytes) }
            }
        }
        body["latest_receipt"] = nil
        return try event(
            type: AppleAPIEvents.verifyReceipt, stream: subject.originalTransactionId,
            payload: .object([AppleAPIEvents.verifyReceiptKey: .object(body)]), raw: answer.body, environment: environment,
            signedAt: AppleV1Subscription.millis(root["receipt"]?.text("request_date_ms")),
            expiresAt: AppleV1Subscription.millis(subject.latest.text("expires_date_ms")), after: after[subject.originalTransactionId])
    }

    // MARK: keys

    /// The dedupe key of a stored (or about to be stored) API answer event; nil when `payload`
    /// is not that type's payload. `after`: see the type's documentation.
    public static func dedupeKey(type: String, payload: JSONValue, after: Int64? = nil) -> String? {
        guard let kind = AppleAPIEvents.keyKind(of: type),
              let content = AppleAPIEvents.dedupeContent(type: type, payload: payload) else { return nil }
        let hex = Digest.sha256([UInt8](content)).map { String(format: "%02x", $0) }.joined()
        return "api:\(kind):\(hex)" + (after.map { "@\($0)" } ?? "")
    }

    // MARK: - Plumbing

    struct Identity {
        var bundleId: String
        var environment: String
    }

    /// The answer's app and environment, checked against the acceptance policy.
    func identity(bundleId: String?, environment rawEnvironment: String?, appAppleId: Int64?, what: String) throws(AppleVerificationError) -> Identity {
        guard let bundleId, !bundleId.isEmpty else { throw .missingField("bundleId of \(what)") }
        guard acceptance.bundleIds.contains(bundleId) else { throw .appMismatch("bundleId \"\(bundleId)\" is not an accepted app") }
        guard let rawEnvironment else { throw .missingField("environment of \(what)") }
        guard let environment = SubscriptionKey.environment(rawEnvironment), acceptance.environments.contains(environment) else {
            throw .environmentMismatch("environment \"\(rawEnvironment)\" is not accepted here")
        }
        if environment == SubscriptionKey.production, let appAppleId, !acceptance.appAppleIds.contains(appAppleId) {
            throw .appMismatch("appAppleId \(appAppleId) is not an accepted app")
        }
        return Identity(bundleId: bundleId, environment: environment)
    }

    func verifiedTransaction(_ value: JSONValue, slot: String, identity: Identity) throws(AppleVerificationError) -> JSONValue {
        guard case .string(let jws) = value else { throw .malformed("\(slot) is not a string") }
        let verified = try verifier.verify(jws, kind: .transaction)
        try AppleNotificationIngestor.NestedType.transaction.check(verified.object, slot: slot)
        let tree = try Self.tree(verified.payloadJSON, what: slot)
        try agree("bundleId", tree.text("bundleId"), identity.bundleId, slot)
        try agree("environment", tree.text("environment").flatMap(SubscriptionKey.environment) ?? tree.text("environment"), identity.environment, slot)
        return tree
    }

    func verifiedRenewal(_ value: JSONValue, slot: String, identity: Identity) throws(AppleVerificationError) -> JSONValue {
        guard case .string(let jws) = value else { throw .malformed("\(slot) is not a string") }
        let verified = try verifier.verify(jws, kind: .renewalInfo)
        try AppleNotificationIngestor.NestedType.renewalInfo.check(verified.object, slot: slot)
        let tree = try Self.tree(verified.payloadJSON, what: slot)
        try agree("environment", tree.text("environment").flatMap(SubscriptionKey.environment) ?? tree.text("environment"), identity.environment, slot)
        return tree
    }

    func agree(_ field: String, _ nested: String?, _ answer: String, _ slot: String) throws(AppleVerificationError) {
        if let nested, nested != answer {
            throw .nestedMismatch(field: field, detail: "\(slot) says \"\(nested)\", the answer \"\(answer)\"")
        }
    }

    func event(
        type: String, stream: String, payload: JSONValue, raw: Data, environment: String,
        signedAt: Int64?, expiresAt: Int64?, after: Int64?
    ) throws(AppleVerificationError) -> NewEvent {
        try Identifier.check(stream, "the stream id (originalTransactionId)")
        guard let key = Self.dedupeKey(type: type, payload: payload, after: after) else {
            throw .malformed("the \(type) payload could not be keyed")
        }
        return NewEvent(
            streamId: stream, dedupeKey: key, source: .apple, type: type, environment: environment,
            signedAt: signedAt.flatMap { JSONNumbers.storableMillis.contains($0) ? $0 : nil },
            expiresAt: expiresAt.flatMap { JSONNumbers.storableMillis.contains($0) ? $0 : nil },
            payload: payload.canonicalJSON(), raw: raw, parsed: .value(payload))
    }

    /// Parses JSON through the same guard notifications pass (depth, NUL escapes, repeated
    /// members), then as a tree.
    static func tree<C: Collection>(_ bytes: C, what: String) throws(AppleVerificationError) -> JSONValue where C.Element == UInt8 {
        _ = try JSONGuard.object(bytes, what: what)
        do { return try JSONDecoder().decode(JSONValue.self, from: Data(bytes)) } catch {
            throw .malformed("\(what) is not JSON")
        }
    }
}
