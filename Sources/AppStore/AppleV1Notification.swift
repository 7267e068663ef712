import Crypto
import Foundation
import LedgerCore

extension AppleNotificationIngestor {
    /// Legacy V1 (`responseBodyV1`): plain, **unsigned** JSON whose only authenticity check is the
    /// `password` field, the app's shared secret. Refused outright while no secret is configured.
    ///
    /// Because V1 is unsigned, the password is no evidence of anything once checked; keeping it would
    /// only spread the secret into every backup and export. So both the stored `raw` and `payload`
    /// have the `password` value replaced by `"<redacted>"` (in `raw` byte-for-byte in place, every
    /// other byte unchanged), and a body carrying the secret anywhere else is refused.
    ///
    /// Which subscription: `AppleV1Subscription` (LedgerCore), the same rule the fact decoder uses —
    /// the subscription group of the top-level `auto_renew_product_id` (a pending crossgrade's
    /// product found through `pending_renewal_info`), its latest `latest_receipt_info` entry by
    /// `purchase_date_ms`; array order never matters.
    ///
    /// Event shape: stream = that subscription's `original_transaction_id`, which must be 1–20
    /// ASCII digits (else 400 `invalid_original_transaction_id`); type = `V1/<notification_type>`;
    /// environment `PROD` → `Production`, `Sandbox`; signedAt = the business time, the greatest
    /// date the body states for that subscription (its entries' `purchase_date_ms` and
    /// `cancellation_date_ms`, and `auto_renew_status_change_date_ms`; V1 carries no signing
    /// time); expiresAt = its latest entry's `expires_date_ms`. `payload` =
    /// `{"responseBodyV1": <the redacted body>}`: V1 members live in their own namespace, so a V1
    /// body carrying `transactionInfo` or `renewalInfo` keys can never be read as verified V2 data.
    ///
    /// Dedupe key (reference/apple.md §3.3; retries of one notification differ in `latest_receipt`
    /// and request timestamps, so the raw body cannot be hashed): `"v1:" + hex(SHA-256(F))`, where F
    /// is the concatenation, for each field below in this order, of `name=<byte length>:<value>\n`
    /// (absent fields have the empty value; names as written here):
    ///   environment (normalised: `Production` / `Sandbox`), bid, notification_type,
    ///   original_transaction_id (the subscription's),
    ///   of its latest entry: transaction_id, web_order_line_item_id, purchase_date_ms,
    ///     expires_date_ms, cancellation_date_ms,
    ///   for each of its entries that has a cancellation_date_ms, oldest first (the order of
    ///     `AppleV1Subscription.entries`): cancelled.transaction_id, cancelled.cancellation_date_ms,
    ///   auto_renew_status, auto_renew_status_change_date_ms, auto_renew_product_id,
    ///   of its `pending_renewal_info` entry: pending.auto_renew_product_id, pending.auto_renew_status,
    ///     pending.is_in_billing_retry_period, pending.grace_period_expires_date_ms,
    ///     pending.expiration_intent, pending.price_consent_status.
    /// So two notifications about different subscription groups of one account, or two renewals
    /// of one group, never share a key. `password`, `latest_receipt`, other subscriptions' entries,
    /// `*_pst` and request/creation dates are deliberately excluded.
    public func ingestV1(body: Data, sharedSecret: String?) throws(AppleVerificationError) -> NewEvent {
        guard let sharedSecret, !sharedSecret.isEmpty else { throw .sharedSecretNotConfigured }
        var object = try JSONGuard.object(body, what: "V1 notification body")
        guard let password = object["password"] as? String else { throw .badSharedSecret }
        // Compared as SHA-256 digests: equal lengths always, so neither the time taken nor an early
        // length check tells a guesser how long the secret is.
        guard ConstantTime.equals(Digest.sha256(Array(password.utf8)), Digest.sha256(Array(sharedSecret.utf8))) else {
            throw .badSharedSecret
        }
        // Only the top-level password is redacted; the secret anywhere else (a nested "password",
        // any other value or name, however escaped) would be stored in the payload, or force the
        // raw evidence down to a stub (found by the fuzz tests: a nested copy reached the payload).
        // Apple sends it nowhere else, so such a body is refused rather than stored.
        var rest = object
        rest["password"] = nil
        if V1Redaction.mentions(rest, secret: sharedSecret) {
            throw .malformed("the body carries the shared secret outside its top-level password member; it is refused so that the secret is never stored")
        }

        guard let type = try Fields.string(object, "notification_type"), !type.isEmpty else {
            throw .missingField("notification_type")
        }
        guard let rawEnv = try Fields.string(object, "environment") else { throw .missingField("environment") }
        guard let bid = try Fields.string(object, "bid") else { throw .missingField("bid") }
        guard acceptance.bundleIds.contains(bid) else { throw .appMismatch("bid \"\(bid)\" is not an accepted app") }
        guard let environment = SubscriptionKey.environment(rawEnv), acceptance.environments.contains(environment) else {
            throw .environmentMismatch("environment \"\(rawEnv)\" (\(SubscriptionKey.environment(rawEnv) ?? "neither PROD nor Sandbox")) is not accepted here")
        }
        try V1Shape.check(object)

        // The subscription, by the rule the fact decoder applies to the stored payload. The body
        // is read a second time as a tree for it; V1 traffic is small and one rule beats two.
        let tree: JSONValue
        do { tree = try JSONDecoder().decode(JSONValue.self, from: body) } catch {
            throw .malformed("V1 notification body could not be read as JSON")
        }
        let subject: AppleV1Subscription
        do { subject = try AppleV1Subscription(body: tree) } catch {
            switch error {
            case .noEntries: throw .missingField("unified_receipt.latest_receipt_info (a non-empty array of objects)")
            case .noOriginalTransactionId: throw .missingField("unified_receipt.latest_receipt_info[].original_transaction_id")
            case .noTransactionId: throw .missingField("unified_receipt.latest_receipt_info[].transaction_id of the subscription's latest entry")
            case .noDate: throw .missingField("a purchase_date_ms, cancellation_date_ms or auto_renew_status_change_date_ms for the subscription")
            }
        }
        let otid = subject.originalTransactionId
        guard OriginalTransactionId.isValid(otid) else {
            throw .invalidOriginalTransactionId(field: "unified_receipt.latest_receipt_info[].original_transaction_id (of the subscription of auto_renew_product_id)")
        }

        let dedupeKey = Self.v1DedupeKey(tree, subject: subject, environment: environment)
        let raw = V1Redaction.redact(body: body, secret: sharedSecret)
        let payload: Data
        if let spliced = Self.v1Payload(redactedRaw: raw) {
            payload = spliced
        } else {
            object["password"] = V1Redaction.placeholder
            do {
                payload = try JSONSerialization.data(withJSONObject: [AppleV1Subscription.payloadKey: object],
                                                     options: [.sortedKeys, .withoutEscapingSlashes])
            } catch {
                throw .malformed("V1 body could not be re-encoded as JSON")
            }
        }
        // A last byte-level check (a secret of digits could be spelled by a number).
        if V1Redaction.contains([UInt8](payload), Array(sharedSecret.utf8)) {
            throw .malformed("the body carries the shared secret outside its top-level password member; it is refused so that the secret is never stored")
        }
        return NewEvent(
            streamId: otid, dedupeKey: dedupeKey, source: .apple, type: "V1/\(type)",
            environment: environment,
            signedAt: subject.businessTime,
            expiresAt: AppleV1Subscription.millis(subject.latest.text("expires_date_ms")),
            payload: payload, raw: raw)
    }

    /// `{"responseBodyV1":<redacted raw>}`, spliced from the text rather than re-encoded: the
    /// body already passed `JSONGuard.object` (one object, no NUL escape, no repeated member) and
    /// only the password's value was replaced, and re-encoding with JSONSerialization cost ~1 ms,
    /// a third of a V1 ingestion (measured in a debug build). Nil — re-encode instead — unless
    /// the text is plain UTF-8 JSON starting with `{` (JSONSerialization also reads UTF-16/32,
    /// whose ASCII carries NUL bytes; jsonb does not).
    static func v1Payload(redactedRaw raw: Data) -> Data? {
        let bytes = [UInt8](raw)
        guard let first = bytes.first(where: { ![0x20, 0x09, 0x0A, 0x0D].contains($0) }), first == UInt8(ascii: "{"),
              !ByteScan.contains(0, in: bytes) else { return nil }
        return Data("{\"\(AppleV1Subscription.payloadKey)\":".utf8) + raw + Data("}".utf8)
    }

    /// The dedupe key documented on `ingestV1`.
    static func v1DedupeKey(_ body: JSONValue, subject: AppleV1Subscription, environment: String) -> String {
        var fields: [(String, String?)] = [
            ("environment", environment), ("bid", body.text("bid")), ("notification_type", body.text("notification_type")),
            ("original_transaction_id", subject.originalTransactionId),
        ]
        for f in ["transaction_id", "web_order_line_item_id", "purchase_date_ms", "expires_date_ms", "cancellation_date_ms"] {
            fields.append((f, subject.latest.text(f)))
        }
        for e in subject.entries where e.text("cancellation_date_ms") != nil {
            fields.append(("cancelled.transaction_id", e.text("transaction_id")))
            fields.append(("cancelled.cancellation_date_ms", e.text("cancellation_date_ms")))
        }
        for f in ["auto_renew_status", "auto_renew_status_change_date_ms", "auto_renew_product_id"] {
            fields.append((f, body.text(f)))
        }
        for f in ["auto_renew_product_id", "auto_renew_status", "is_in_billing_retry_period", "grace_period_expires_date_ms",
                  "expiration_intent", "price_consent_status"] {
            fields.append(("pending." + f, subject.pending?.text(f)))
        }
        var keyMaterial = [UInt8]()
        for (name, value) in fields {
            let v = Array((value ?? "").utf8)
            keyMaterial += Array("\(name)=\(v.count):".utf8) + v + [UInt8(ascii: "\n")]
        }
        return "v1:" + Hex.encode(Digest.sha256(keyMaterial))
    }
}

/// The types of the V1 members the ledger reads (the subscription rule, the dedupe key and the
/// fact decoder). Apple sends every one as a string; the decoder reads values leniently as text,
/// so a number where Apple sends a string would be read one way here and another there. Checking
/// them here keeps ingestion and the facts on exactly the same values. Strings are held to
/// `Identifier.keyBytes` (Apple's are tens of bytes).
enum V1Shape {
    /// More than Apple's 100 latest transactions, far fewer than an event's facts can number
    /// (each cancelled entry of the subscription is one fact; facts are numbered in a smallint).
    static let maxEntries = 1_000

    static let entryText = ["original_transaction_id", "transaction_id", "product_id", "web_order_line_item_id",
                            "cancellation_reason", "is_upgraded", "app_account_token", "in_app_ownership_type"]
    static let entryDates = ["purchase_date_ms", "expires_date_ms", "cancellation_date_ms"]
    static let pendingText = ["original_transaction_id", "auto_renew_product_id", "auto_renew_status", "expiration_intent",
                              "is_in_billing_retry_period", "price_consent_status"]
    static let pendingDates = ["grace_period_expires_date_ms"]
    static let topText = ["auto_renew_product_id", "expiration_intent"]
    static let topDates = ["auto_renew_status_change_date_ms"]

    static func check(_ object: [String: Any]) throws(AppleVerificationError) {
        switch try Fields.string(object, "auto_renew_status") {
        case nil, "true"?, "false"?: break
        case let other?: throw .malformed("auto_renew_status must be \"true\" or \"false\", got \"\(other.prefix(40))\"")
        }
        try strings(object, topText, dates: topDates, path: "")
        guard let receiptAny = object["unified_receipt"], !(receiptAny is NSNull) else { throw .missingField("unified_receipt") }
        guard let receipt = receiptAny as? [String: Any] else { throw .missingField("unified_receipt (an object)") }
        guard let infos = receipt["latest_receipt_info"] as? [[String: Any]], !infos.isEmpty else {
            throw .missingField("unified_receipt.latest_receipt_info (a non-empty array of objects)")
        }
        var pendings: [[String: Any]] = []
        if let p = receipt["pending_renewal_info"], !(p is NSNull) {
            guard let list = p as? [[String: Any]] else { throw .malformed("unified_receipt.pending_renewal_info must be an array of objects") }
            pendings = list
        }
        for (name, list) in [("latest_receipt_info", infos), ("pending_renewal_info", pendings)] where list.count > maxEntries {
            throw .malformed("unified_receipt.\(name) has \(list.count) entries; Apple sends at most 100 and the ledger accepts at most \(maxEntries)")
        }
        for e in infos { try strings(e, entryText, dates: entryDates, path: "unified_receipt.latest_receipt_info[].") }
        for e in pendings { try strings(e, pendingText, dates: pendingDates, path: "unified_receipt.pending_renewal_info[].") }
    }

    private static func strings(_ o: [String: Any], _ text: [String], dates: [String], path: String) throws(AppleVerificationError) {
        for f in text {
            guard let v = o[f], !(v is NSNull) else { continue }
            guard let s = v as? String else { throw .malformed("\(path)\(f) must be a string, as Apple sends it") }
            // Keys of the projection tables (`Identifier.keyBytes`): a 4 kB transaction_id was
            // stored and then made every projection update fail, so nothing after it was projected.
            try Identifier.check(s, "\(path)\(f)", limit: Identifier.keyBytes)
        }
        for f in dates {
            guard let v = o[f], !(v is NSNull) else { continue }
            guard let s = v as? String else { throw .malformed("\(path)\(f) must be a decimal string of milliseconds, as Apple sends it") }
            if s.isEmpty { continue }
            // Digits only (Int64 would also take "+5"); the value becomes signedAt / expiresAt,
            // so a time PostgreSQL cannot store would fail the append after acceptance (found by
            // the fuzz tests).
            guard s.utf8.count <= 19, s.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let ms = Int64(s) else {
                throw .malformed("\(path)\(f) must be a decimal string of milliseconds")
            }
            guard JSONNumbers.storableMillis.contains(ms) else { throw .malformed("\(path)\(f) \(ms) is outside any storable date") }
        }
    }
}

/// Removes the V1 shared secret from the stored body without re-encoding the rest.
enum V1Redaction {
    static let placeholder = "<redacted>"

    /// Replaces the value of every top-level `password` member with the placeholder. If the secret's
    /// bytes would still appear anywhere afterwards (e.g. an escaped spelling elsewhere), falls back to
    /// a re-encoded body with the member replaced: losing byte-exactness beats storing the secret.
    static func redact(body: Data, secret: String) -> Data {
        let bytes = [UInt8](body)
        var out = bytes
        for range in topLevelValueRanges(bytes, key: "password").reversed() {
            out.replaceSubrange(range, with: Array("\"\(placeholder)\"".utf8))
        }
        if !contains(out, Array(secret.utf8)) { return Data(out) }
        if var obj = (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] {
            obj["password"] = placeholder
            if let d = try? JSONSerialization.data(withJSONObject: obj, options: [.sortedKeys, .withoutEscapingSlashes]),
               !contains([UInt8](d), Array(secret.utf8)) {
                return d
            }
        }
        return Data("{\"password\":\"\(placeholder)\"}".utf8)
    }

    /// Whether any string value or member name in `value` contains `secret` (after JSON unescaping).
    static func mentions(_ value: Any, secret: String) -> Bool {
        if let s = value as? String { return s.contains(secret) }
        if let o = value as? [String: Any] { return o.contains { $0.key.contains(secret) || mentions($0.value, secret: secret) } }
        if let a = value as? [Any] { return a.contains { mentions($0, secret: secret) } }
        return false
    }

    static func contains(_ hay: [UInt8], _ needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, hay.count >= needle.count else { return false }
        let first = needle[0]
        var i = 0
        while i <= hay.count - needle.count {
            if hay[i] == first, Array(hay[i..<(i + needle.count)]) == needle { return true }
            i += 1
        }
        return false
    }

    /// Byte ranges of the values of top-level members named `key` in a (valid) JSON object.
    static func topLevelValueRanges(_ b: [UInt8], key: String) -> [Range<Int>] {
        var ranges: [Range<Int>] = []
        var i = 0
        func skipWS() { while i < b.count, [0x20, 0x09, 0x0A, 0x0D].contains(b[i]) { i += 1 } }
        func skipString() -> Range<Int> {
            let start = i
            i += 1
            while i < b.count, b[i] != UInt8(ascii: "\"") { i += b[i] == UInt8(ascii: "\\") ? 2 : 1 }
            i += 1
            return start..<min(i, b.count)
        }
        func skipValue() -> Range<Int> {
            let start = i
            if i < b.count, b[i] == UInt8(ascii: "\"") { return skipString() }
            var depth = 0
            while i < b.count {
                let c = b[i]
                if c == UInt8(ascii: "\"") { _ = skipString(); continue }
                if c == UInt8(ascii: "{") || c == UInt8(ascii: "[") { depth += 1 }
                if c == UInt8(ascii: "}") || c == UInt8(ascii: "]") {
                    if depth == 0 { break }
                    depth -= 1
                    if depth == 0 { i += 1; break }
                }
                if depth == 0, c == UInt8(ascii: ",") { break }
                i += 1
            }
            var end = i
            while end > start, [0x20, 0x09, 0x0A, 0x0D].contains(b[end - 1]) { end -= 1 }
            return start..<end
        }
        skipWS()
        guard i < b.count, b[i] == UInt8(ascii: "{") else { return [] }
        i += 1
        while i < b.count {
            skipWS()
            guard i < b.count, b[i] == UInt8(ascii: "\"") else { break }
            let keyRange = skipString()
            let keyToken = Array(b[keyRange])
            let name: String? = keyToken.contains(UInt8(ascii: "\\"))
                ? (try? JSONSerialization.jsonObject(with: Data(keyToken), options: .fragmentsAllowed)) as? String
                : String(decoding: keyToken.dropFirst().dropLast(), as: UTF8.self)
            skipWS()
            guard i < b.count, b[i] == UInt8(ascii: ":") else { break }
            i += 1
            skipWS()
            let valueRange = skipValue()
            if name == key { ranges.append(valueRange) }
            skipWS()
            guard i < b.count, b[i] == UInt8(ascii: ",") else { break }
            i += 1
        }
        return ranges
    }
}
