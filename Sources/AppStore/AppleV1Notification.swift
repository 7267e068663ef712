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
    /// other byte unchanged).
    ///
    /// Event shape: stream = `original_transaction_id` of the `unified_receipt.latest_receipt_info`
    /// entry with the largest `expires_date_ms` (Apple does not promise the array's order);
    /// type = `V1/<notification_type>`; environment `PROD` → `Production`; signedAt = that entry's
    /// `purchase_date_ms` (V1 carries no signing time); expiresAt = its `expires_date_ms`.
    /// `payload` adds `selectedReceiptInfo` (that entry) and `autoRenewStatus` (a JSON boolean
    /// parsed from V1's `"true"`/`"false"` string) to the redacted body.
    ///
    /// Dedupe key (reference/apple.md §3.3; retries of one notification differ in `latest_receipt`
    /// and request timestamps, so the raw body cannot be hashed): `"v1:" + hex(SHA-256(F))`, where F
    /// is the concatenation, for each field below in this order, of `name=<byte length>:<value>\n`
    /// (absent fields have the empty value):
    ///   environment (normalised), bid, notification_type,
    ///   of the selected entry: transaction_id, original_transaction_id, web_order_line_item_id,
    ///     expires_date_ms, cancellation_date_ms,
    ///   auto_renew_status, auto_renew_status_change_date_ms, auto_renew_product_id,
    ///   of the `pending_renewal_info` entry with the same original_transaction_id:
    ///     is_in_billing_retry_period, grace_period_expires_date_ms, expiration_intent, price_consent_status.
    /// `password`, `latest_receipt`, `*_pst` and request/creation dates are deliberately excluded.
    public func ingestV1(body: Data, sharedSecret: String?) throws(AppleVerificationError) -> NewEvent {
        guard let sharedSecret, !sharedSecret.isEmpty else { throw .sharedSecretNotConfigured }
        var object = try JSONGuard.object(body, what: "V1 notification body")
        guard let password = object["password"] as? String else { throw .badSharedSecret }
        guard ConstantTime.equals(Array(password.utf8), Array(sharedSecret.utf8)) else { throw .badSharedSecret }
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
        let environment = rawEnv == "PROD" ? "Production" : rawEnv
        guard let bid = try Fields.string(object, "bid") else { throw .missingField("bid") }
        guard acceptance.bundleIds.contains(bid) else { throw .appMismatch("bid \"\(bid)\" is not an accepted app") }
        guard acceptance.environments.contains(environment) else {
            throw .environmentMismatch("environment \"\(rawEnv)\" (\(environment)) is not accepted here")
        }

        guard let receipt = object["unified_receipt"] as? [String: Any] else { throw .missingField("unified_receipt") }
        guard let infos = receipt["latest_receipt_info"] as? [[String: Any]], !infos.isEmpty else {
            throw .missingField("unified_receipt.latest_receipt_info (a non-empty array)")
        }
        let selected = try Self.latest(infos)
        guard let otid = try Fields.string(selected, "original_transaction_id"), !otid.isEmpty else {
            throw .missingField("latest_receipt_info[].original_transaction_id")
        }
        try Identifier.check(otid, "latest_receipt_info[].original_transaction_id")
        let autoRenew: Bool?
        switch try Fields.string(object, "auto_renew_status") {
        case nil: autoRenew = nil
        case "true": autoRenew = true
        case "false": autoRenew = false
        case let other?: throw .malformed("auto_renew_status must be \"true\" or \"false\", got \"\(other)\"")
        }
        let pending = (receipt["pending_renewal_info"] as? [[String: Any]])?.first {
            ($0["original_transaction_id"] as? String) == otid
        } ?? [:]

        var fields: [(String, String?)] = [
            ("environment", environment), ("bid", bid), ("notification_type", type),
        ]
        for f in ["transaction_id", "original_transaction_id", "web_order_line_item_id", "expires_date_ms", "cancellation_date_ms"] {
            fields.append((f, selected[f] as? String))
        }
        for f in ["auto_renew_status", "auto_renew_status_change_date_ms", "auto_renew_product_id"] {
            fields.append((f, object[f] as? String))
        }
        for f in ["is_in_billing_retry_period", "grace_period_expires_date_ms", "expiration_intent", "price_consent_status"] {
            fields.append(("pending." + f, pending[f] as? String))
        }
        var keyMaterial = [UInt8]()
        for (name, value) in fields {
            let v = Array((value ?? "").utf8)
            keyMaterial += Array("\(name)=\(v.count):".utf8) + v + [UInt8(ascii: "\n")]
        }
        let dedupeKey = "v1:" + Hex.encode(Digest.sha256(keyMaterial))

        object["password"] = V1Redaction.placeholder
        object["selectedReceiptInfo"] = selected
        if let autoRenew { object["autoRenewStatus"] = autoRenew }
        let payload: Data
        do { payload = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]) } catch {
            throw .malformed("V1 body could not be re-encoded as JSON")
        }
        // A last byte-level check (a secret of digits could be spelled by a number).
        if V1Redaction.contains([UInt8](payload), Array(sharedSecret.utf8)) {
            throw .malformed("the body carries the shared secret outside its top-level password member; it is refused so that the secret is never stored")
        }
        return NewEvent(
            streamId: otid, dedupeKey: dedupeKey, source: .apple, type: "V1/\(type)",
            environment: environment,
            signedAt: Int64(selected["purchase_date_ms"] as? String ?? ""),
            expiresAt: Int64(selected["expires_date_ms"] as? String ?? ""),
            payload: payload, raw: V1Redaction.redact(body: body, secret: sharedSecret))
    }

    /// The entry with the largest expires_date_ms; ties broken by purchase_date_ms, then
    /// transaction_id, so the choice never depends on array order.
    static func latest(_ infos: [[String: Any]]) throws(AppleVerificationError) -> [String: Any] {
        func key(_ e: [String: Any]) throws(AppleVerificationError) -> (Int64, Int64, String) {
            func ms(_ f: String) throws(AppleVerificationError) -> Int64 {
                guard let v = e[f] else { return Int64.min }
                guard let s = v as? String, let i = Int64(s) else { throw .malformed("latest_receipt_info[].\(f) must be a decimal string") }
                // signedAt / expiresAt come from these: a time PostgreSQL cannot store would fail
                // the append after acceptance (found by the fuzz tests).
                guard JSONValue.storableMillis.contains(i) else {
                    throw .malformed("latest_receipt_info[].\(f) \(i) is outside any storable date")
                }
                return i
            }
            return (try ms("expires_date_ms"), try ms("purchase_date_ms"), e["transaction_id"] as? String ?? "")
        }
        var best = infos[0]
        var bestKey = try key(best)
        for e in infos.dropFirst() {
            let k = try key(e)
            if k > bestKey { best = e; bestKey = k }
        }
        return best
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
