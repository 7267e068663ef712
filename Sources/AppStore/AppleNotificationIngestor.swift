import Crypto
import Foundation
import LedgerCore

/// Which Apple notifications this deployment files: its apps and environments.
public struct AppleAcceptance: Sendable, Equatable {
    public let bundleIds: Set<String>
    /// Required when Production is accepted: Apple's libraries refuse to build a Production
    /// verifier without it, because bundle ids alone are not unique across developer accounts'
    /// history (a transferred app keeps its bundle id).
    public let appAppleIds: Set<Int64>
    /// `Production`, `Sandbox` (Apple's spelling).
    public let environments: Set<String>

    public init(bundleIds: Set<String>, appAppleIds: Set<Int64>, environments: Set<String>) throws(AppleConfigurationError) {
        guard !bundleIds.isEmpty else { throw .noBundleIds }
        guard !environments.isEmpty else { throw .noEnvironments }
        if environments.contains("Production"), appAppleIds.isEmpty { throw .productionWithoutAppAppleId }
        self.bundleIds = bundleIds
        self.appAppleIds = appAppleIds
        self.environments = environments
    }
}

/// Turns the bodies Apple posts into ledger events: verifies every signature (V2) or the shared
/// secret (V1), checks the notification is for an accepted app and environment, and builds the
/// `NewEvent` (stream, dedupe key, business times, decoded payload, exact raw bytes). Pure and
/// synchronous — no I/O — so the HTTP handler calls it on its own thread and appends the result.
public final class AppleNotificationIngestor: Sendable {
    public let verifier: SignedDataVerifier
    public let acceptance: AppleAcceptance

    public init(verifier: SignedDataVerifier, acceptance: AppleAcceptance) {
        self.verifier = verifier
        self.acceptance = acceptance
    }

    /// V2: `{"signedPayload": "<JWS>"}`. Unknown top-level keys are ignored (the raw body keeps them).
    public func ingestV2(body: Data) throws(AppleVerificationError) -> NewEvent {
        let envelope = try JSONGuard.object(body, what: "request body")
        guard let signed = envelope["signedPayload"] as? String else { throw .missingField("signedPayload (a string)") }
        let decoded = try decodeV2(signedPayload: signed)
        try accept(decoded.identity)
        return try decoded.event(raw: body)
    }

    /// What a V2 body becomes: an event the ledger reads, or an authentic notification it cannot
    /// read, kept as evidence (`apple:unreadable`, type `unreadable`, keyed by the SHA-256 of the
    /// exact body, so Apple's retries of it are stored once).
    public enum Intake {
        case readable(NewEvent)
        case unreadable(NewEvent, reason: AppleVerificationError)
    }

    /// `ingestV2` for the webhook: once the outer signature and chain hold, the notification is
    /// Apple's, and one the ledger cannot read (an unknown or missing section, no notificationUUID,
    /// a field of the wrong type or length, a nested value not of its slot's type, a payload that
    /// is not JSON) is kept as evidence rather than refused — Apple stops retrying after a 4xx, so
    /// a refusal would lose it. What is refused stays refused: anything unauthenticated, and what
    /// the acceptance policy declines as far as it can be read (a foreign bundleId, environment or
    /// Production appAppleId); nested values that disagree are still `nested_mismatch`.
    public func intakeV2(body: Data) throws(AppleVerificationError) -> Intake {
        let envelope = try JSONGuard.object(body, what: "request body")
        guard let signed = envelope["signedPayload"] as? String else { throw .missingField("signedPayload (a string)") }
        let outer: VerifiedSignedData
        switch try verifier.open(bytes: Array(signed.utf8), kind: .notification) {
        case .unreadable(let why): return .unreadable(Self.evidence(raw: body, outer: nil, why), reason: why)
        case .readable(let verified): outer = verified
        }
        do throws(AppleVerificationError) {
            let decoded = try decodeV2(verifiedOuter: outer)
            try accept(decoded.identity)
            return .readable(try decoded.event(raw: body))
        } catch {
            guard error.kind == .malformed else { throw error }
            try acceptWhatCanBeRead(outer.object)
            return .unreadable(Self.evidence(raw: body, outer: outer.object, error), reason: error)
        }
    }

    /// The acceptance policy applied to whatever sections of an unreadable notification state
    /// who it is for: evidence of another developer's app is not this ledger's to keep.
    func acceptWhatCanBeRead(_ outer: [String: Any]) throws(AppleVerificationError) {
        for name in ["data", "summary", "externalPurchaseToken", "appData"] {
            guard let section = outer[name] as? [String: Any] else { continue }
            if let bundleId = section["bundleId"] as? String, !acceptance.bundleIds.contains(bundleId) {
                throw .appMismatch("bundleId \"\(StorableText.clean(bundleId, limit: 200))\" is not an accepted app")
            }
            let environment = section["environment"] as? String
            if let environment, !acceptance.environments.contains(environment) {
                throw .environmentMismatch("environment \"\(StorableText.clean(environment, limit: 64))\" is not accepted here")
            }
            if environment == "Production", let appId = JSONNumbers.int64(section["appAppleId"]), !acceptance.appAppleIds.contains(appId) {
                throw .appMismatch("appAppleId \(appId) is not an accepted app")
            }
        }
    }

    /// The evidence event of an authentic notification that cannot be read: the exact body in
    /// `raw`; the payload says why and what could be read (`UnreadableEvidence`).
    static func evidence(raw: Data, outer: [String: Any]?, _ why: AppleVerificationError) -> NewEvent {
        var readable: [String: String] = [:]
        for key in ["notificationUUID", "notificationType", "subtype"] {
            if let value = outer?[key] as? String { readable[key] = value }
        }
        return NewEvent(
            streamId: StreamId.appleUnreadable.text, dedupeKey: "sha256:" + Hex.encode(Digest.sha256(raw)),
            source: .apple, type: UnreadableEvidence.type, signedAt: JSONNumbers.millis(outer?["signedDate"]),
            payload: UnreadableEvidence.payload(code: why.code, reason: why.message, readable: readable), raw: raw)
    }

    /// A verified, decoded V2 notification before the acceptance policy is applied.
    struct DecodedV2 {
        var outer: [String: Any]
        var identity: Identity
        var transaction: [String: Any]?
        var renewal: [String: Any]?
        var appTransaction: [String: Any]?
        /// The same documents as the JSON text that was signed (and parsed into the objects above).
        var json = SignedTexts()

        struct SignedTexts {
            var outer: [UInt8] = []
            var transaction: [UInt8]?
            var renewal: [UInt8]?
            var appTransaction: [UInt8]?
        }

        /// The merged payload: Apple's JSON as signed, with each verified nested JWS replaced by
        /// its decoded object (`transactionInfo`, `renewalInfo`, `appTransactionInfo`). The signed
        /// strings themselves stay in `raw`, the evidence; keeping a second copy in the jsonb
        /// would double what every append writes and every rebuild scans.
        var mergedPayload: [String: Any] {
            var p = outer
            if var section = p[identity.section] as? [String: Any] {
                if transaction != nil, section["signedTransactionInfo"] != nil { section["signedTransactionInfo"] = NSNull() }
                if renewal != nil, section["signedRenewalInfo"] != nil { section["signedRenewalInfo"] = NSNull() }
                if appTransaction != nil, section["signedAppTransactionInfo"] != nil { section["signedAppTransactionInfo"] = NSNull() }
                p[identity.section] = section
            }
            if let transaction { p["transactionInfo"] = transaction }
            if let renewal { p["renewalInfo"] = renewal }
            if let appTransaction { p["appTransactionInfo"] = appTransaction }
            return p
        }

        func event(raw: Data) throws(AppleVerificationError) -> NewEvent {
            guard let uuid = outer["notificationUUID"] as? String, !uuid.isEmpty else {
                throw .missingField("notificationUUID")
            }
            guard let type = outer["notificationType"] as? String, !type.isEmpty else { throw .missingField("notificationType") }
            let subtype = try Fields.string(outer, "subtype")
            let stream = try streamId(type: type)
            try Identifier.check(stream, "the stream id (originalTransactionId, requestIdentifier, externalPurchaseId or bundleId)")
            try Identifier.check(uuid, "notificationUUID")
            let payload = try payloadJSON()
            return NewEvent(
                streamId: stream, dedupeKey: uuid, source: .apple,
                type: subtype.map { "\(type)/\($0)" } ?? type,
                environment: identity.environment,
                signedAt: JSONNumbers.millis(outer["signedDate"]),
                expiresAt: JSONNumbers.millis(transaction?["expiresDate"]),
                // The tree the verifier parsed goes with the event: the fact decoder reads it
                // instead of parsing the payload a second time (issue 19 item 3).
                payload: payload, raw: raw, parsed: .foundation(FoundationObject(mergedPayload)))
        }

        /// `mergedPayload` as JSON text, spliced from the signed texts: the notification's members
        /// as Apple signed them, then `"transactionInfo":…` etc. Re-encoding the parsed objects with
        /// JSONSerialization cost ~1.7 ms per notification on Linux (10× the three ES256 verifies;
        /// measured under the fuzz tests), and key order and whitespace do not matter to jsonb. The
        /// texts already passed `JSONGuard.object` (one object, no NUL escape, no repeated member).
        /// Falls back to re-encoding when the splice would repeat a member name or the text is not
        /// plain UTF-8 JSON starting with `{`.
        func payloadJSON() throws(AppleVerificationError) -> Data {
            let nested: [(String, [UInt8]?)] = [
                ("transactionInfo", json.transaction), ("renewalInfo", json.renewal), ("appTransactionInfo", json.appTransaction),
            ]
            if let spliced = Self.splice(Self.withoutSignedCopies(json.outer, of: signedNested), nested),
               !nested.contains(where: { $0.1 != nil && outer[$0.0] != nil }) {
                return spliced
            }
            do { return try JSONSerialization.data(withJSONObject: mergedPayload, options: [.sortedKeys, .withoutEscapingSlashes]) } catch {
                throw .malformed("decoded payload could not be re-encoded as JSON")
            }
        }

        /// The nested JWS texts that were verified and are stored decoded beside the notification.
        var signedNested: [String] {
            guard let section = outer[identity.section] as? [String: Any] else { return [] }
            var out: [String] = []
            if transaction != nil, let s = section["signedTransactionInfo"] as? String { out.append(s) }
            if renewal != nil, let s = section["signedRenewalInfo"] as? String { out.append(s) }
            if appTransaction != nil, let s = section["signedAppTransactionInfo"] as? String { out.append(s) }
            return out
        }

        /// The signed text with each verified nested JWS string replaced by `null`: the JWS stay in
        /// `raw` (the evidence) and appear decoded in the payload, so the jsonb does not carry a
        /// second copy of ~2/3 of every body. A JWS not found verbatim (escaped) is left in place.
        static func withoutSignedCopies(_ object: [UInt8], of jws: [String]) -> [UInt8] {
            var out = object
            for token in jws {
                let needle = [UInt8(ascii: "\"")] + Array(token.utf8) + [UInt8(ascii: "\"")]
                guard let range = Data(out).range(of: Data(needle)) else { continue }
                out.replaceSubrange(range, with: Array("null".utf8))
            }
            return out
        }

        static func splice(_ object: [UInt8], _ members: [(String, [UInt8]?)]) -> Data? {
            let whitespace: Set<UInt8> = [0x20, 0x09, 0x0A, 0x0D]
            var end = object.count
            while end > 0, whitespace.contains(object[end - 1]) { end -= 1 }
            guard end >= 2, object[end - 1] == UInt8(ascii: "}"), object.first == UInt8(ascii: "{") else { return nil }
            // JSONSerialization also reads UTF-16/32, whose ASCII carries NUL bytes; jsonb does not.
            guard !ByteScan.contains(0, in: object) else { return nil }
            var out = Data(object[..<(end - 1)])
            var inner = end - 2
            while inner > 0, whitespace.contains(object[inner]) { inner -= 1 }
            var empty = object[inner] == UInt8(ascii: "{")
            for case let (name, text?) in members {
                guard !ByteScan.contains(0, in: text) else { return nil }
                if !empty { out.append(UInt8(ascii: ",")) }
                out.append(contentsOf: Array("\"\(name)\":".utf8))
                out.append(contentsOf: text)
                empty = false
            }
            out.append(UInt8(ascii: "}"))
            return out
        }

        /// reference: StreamId documents the provisional streams.
        private func streamId(type: String) throws(AppleVerificationError) -> String {
            if type == "TEST" { return StreamId.appleTest.text }
            switch identity.section {
            case "summary":
                guard let id = try Fields.string(identity.object, "requestIdentifier"), !id.isEmpty else {
                    throw .missingField("summary.requestIdentifier")
                }
                return StreamId.appleSummary(requestIdentifier: id).text
            case "externalPurchaseToken":
                guard let id = try Fields.string(identity.object, "externalPurchaseId"), !id.isEmpty else {
                    throw .missingField("externalPurchaseToken.externalPurchaseId")
                }
                return StreamId.appleExternalPurchase(id: id).text
            default:
                if let otid = try transaction.flatMap({ t throws(AppleVerificationError) in try Fields.string(t, "originalTransactionId") }), !otid.isEmpty { return otid }
                if let otid = try renewal.flatMap({ r throws(AppleVerificationError) in try Fields.string(r, "originalTransactionId") }), !otid.isEmpty { return otid }
                return StreamId.appleApp(bundleId: identity.bundleId).text
            }
        }
    }

    /// Who and where a notification is for, from whichever section it carries.
    struct Identity {
        var section: String
        var object: [String: Any]
        var bundleId: String
        var appAppleId: Int64?
        /// nil only when Apple's payload lacks it; `accept` refuses that after the app check.
        var environment: String?
    }

    /// Verifies the outer JWS and every nested JWS, checks that each nested payload is the type
    /// of its slot (`NestedType`) and that they agree; no acceptance policy.
    func decodeV2(signedPayload: String) throws(AppleVerificationError) -> DecodedV2 {
        try decodeV2(verifiedOuter: verifier.verify(signedPayload, kind: .notification))
    }

    func decodeV2(verifiedOuter: VerifiedSignedData) throws(AppleVerificationError) -> DecodedV2 {
        let outer = verifiedOuter.object
        let identity = try Self.identity(of: outer)
        var decoded = DecodedV2(outer: outer, identity: identity)
        decoded.json.outer = verifiedOuter.payloadJSON
        let section = identity.object
        if let s = try Fields.string(section, "signedTransactionInfo") {
            let verified = try verifier.verify(s, kind: .transaction)
            let tx = verified.object
            try NestedType.transaction.check(tx, slot: "\(identity.section).signedTransactionInfo")
            decoded.json.transaction = verified.payloadJSON
            try Self.agree("bundleId", try Fields.string(tx, "bundleId"), identity.bundleId)
            try Self.agree("environment", try Fields.string(tx, "environment"), identity.environment ?? "")
            decoded.transaction = tx
        }
        if let s = try Fields.string(section, "signedRenewalInfo") {
            let verified = try verifier.verify(s, kind: .renewalInfo)
            let ri = verified.object
            try NestedType.renewalInfo.check(ri, slot: "\(identity.section).signedRenewalInfo")
            decoded.json.renewal = verified.payloadJSON
            try Self.agree("environment", try Fields.string(ri, "environment"), identity.environment ?? "")
            if let tx = decoded.transaction, let txOT = try Fields.string(tx, "originalTransactionId") {
                try Self.agree("originalTransactionId", try Fields.string(ri, "originalTransactionId"), txOT)
            }
            decoded.renewal = ri
        }
        if let s = try Fields.string(section, "signedAppTransactionInfo") {
            let verified = try verifier.verify(s, kind: .appTransaction)
            let at = verified.object
            try NestedType.appTransaction.check(at, slot: "\(identity.section).signedAppTransactionInfo")
            decoded.json.appTransaction = verified.payloadJSON
            try Self.agree("bundleId", try Fields.string(at, "bundleId"), identity.bundleId)
            try Self.agree("environment", try Fields.string(at, "receiptType"), identity.environment ?? "")
            if let mine = identity.appAppleId, let theirs = try Fields.int64(at, "appAppleId"), mine != theirs {
                throw .nestedMismatch(field: "appAppleId", detail: "nested \(theirs), notification \(mine)")
            }
            decoded.appTransaction = at
        }
        return decoded
    }

    /// What each nested JWS slot must hold (reference/apple.md §2.5, §2.6; the fields every
    /// payload of Apple's libraries' model files carries). Apple never sends pieces of different
    /// messages in the wrong slots, so a payload that is not its slot's type was assembled by
    /// someone else from Apple-signed parts (a renewal info in `signedTransactionInfo` would file
    /// a "transaction" without a purchase): refused with `wrong_nested_type`, nothing stored.
    ///
    /// Only the members that make the type are required; any other member, known or new, and any
    /// notification type pass, so a consistent message the ledger does not fully understand is
    /// still stored.
    ///
    /// | slot | required | must be absent |
    /// |---|---|---|
    /// | `signedTransactionInfo` | transactionId, originalTransactionId (1–20 digits), productId, purchaseDate (ms), bundleId, environment | — |
    /// | `signedRenewalInfo` | originalTransactionId (1–20 digits), autoRenewProductId, environment | transactionId |
    /// | `signedAppTransactionInfo` | bundleId, receiptType | transactionId |
    enum NestedType {
        case transaction, renewalInfo, appTransaction

        var name: String {
            switch self {
            case .transaction: "a signed transaction (JWSTransaction)"
            case .renewalInfo: "a signed renewal info (JWSRenewalInfo)"
            case .appTransaction: "a signed app transaction (AppTransaction)"
            }
        }

        var requiredText: [String] {
            switch self {
            case .transaction: ["transactionId", "originalTransactionId", "productId", "bundleId", "environment"]
            case .renewalInfo: ["originalTransactionId", "autoRenewProductId", "environment"]
            case .appTransaction: ["bundleId", "receiptType"]
            }
        }

        func check(_ payload: [String: Any], slot: String) throws(AppleVerificationError) {
            func refuse(_ problem: String) -> AppleVerificationError { .wrongNestedType(slot: slot, expected: name, problem: problem) }
            for field in requiredText {
                guard let value = payload[field], !(value is NSNull) else { throw refuse("has no \(field)") }
                guard let text = value as? String, !text.isEmpty else { throw refuse("has a \(field) that is not a non-empty string") }
                if field == "originalTransactionId", !OriginalTransactionId.isValid(text) {
                    throw .invalidOriginalTransactionId(field: "\(slot).originalTransactionId")
                }
                try Identifier.check(text, "\(slot).\(field)", limit: Identifier.keyBytes)
            }
            // Keys of the projection tables (`Identifier.keyBytes`).
            if let token = payload["appAccountToken"] as? String { try Identifier.check(token, "\(slot).appAccountToken", limit: Identifier.keyBytes) }
            if self == .transaction {
                guard payload["purchaseDate"] != nil, !(payload["purchaseDate"] is NSNull) else { throw refuse("has no purchaseDate") }
                guard JSONNumbers.millis(payload["purchaseDate"]) != nil else {
                    throw refuse("has a purchaseDate that is not a storable millisecond timestamp")
                }
            }
            if self != .transaction, let tid = payload["transactionId"], !(tid is NSNull) {
                throw refuse("has a transactionId, which only a transaction carries")
            }
        }
    }

    /// A nested value that states a field must state the notification's value.
    private static func agree(_ field: String, _ nested: String?, _ outer: String) throws(AppleVerificationError) {
        if let nested, nested != outer {
            throw .nestedMismatch(field: field, detail: "nested \"\(nested)\", notification \"\(outer)\"")
        }
    }

    static func identity(of outer: [String: Any]) throws(AppleVerificationError) -> Identity {
        let sections = ["data", "summary", "externalPurchaseToken", "appData"].filter { outer[$0] != nil && !(outer[$0] is NSNull) }
        guard sections.count == 1, let name = sections.first else {
            throw .malformed(sections.isEmpty
                ? "the notification has none of data, summary, externalPurchaseToken, appData"
                : "the notification has more than one of data, summary, externalPurchaseToken, appData: \(sections.joined(separator: ", "))")
        }
        guard let obj = outer[name] as? [String: Any] else { throw .malformed("\(name) is not a JSON object") }
        guard let bundleId = try Fields.string(obj, "bundleId") else { throw .missingField("\(name).bundleId") }
        let appAppleId = try Fields.int64(obj, "appAppleId")
        let environment: String?
        if name == "externalPurchaseToken" {
            // Apple sends no environment here; sandbox tokens are marked by their id (reference §1.1).
            guard let id = try Fields.string(obj, "externalPurchaseId") else { throw .missingField("externalPurchaseToken.externalPurchaseId") }
            environment = id.hasPrefix("SANDBOX") ? "Sandbox" : "Production"
        } else {
            environment = try Fields.string(obj, "environment")
        }
        return Identity(section: name, object: obj, bundleId: bundleId, appAppleId: appAppleId, environment: environment)
    }

    func accept(_ id: Identity) throws(AppleVerificationError) {
        guard acceptance.bundleIds.contains(id.bundleId) else {
            throw .appMismatch("bundleId \"\(id.bundleId)\" is not an accepted app")
        }
        guard let environment = id.environment else { throw .missingField("\(id.section).environment") }
        guard acceptance.environments.contains(environment) else {
            throw .environmentMismatch("environment \"\(environment)\" is not accepted here")
        }
        if environment == "Production" {
            guard let appId = id.appAppleId else { throw .appMismatch("a Production notification without appAppleId cannot be attributed") }
            guard acceptance.appAppleIds.contains(appId) else { throw .appMismatch("appAppleId \(appId) is not an accepted app") }
        }
    }
}

/// Stream ids and dedupe keys are stored in columns that hold at most 1024 bytes (Migrations/0001);
/// a longer one made the append fail after acceptance (found by the fuzz tests, whose accepted
/// events are appended to a real database). Apple's identifiers are tens of bytes.
///
/// Values that become keys of the projection tables (transaction ids, product ids — the default
/// catalog names entitlements after them —, customer ids) are held to `keyBytes`: a composite
/// btree entry must stay under PostgreSQL's ~2.7 kB limit, and a value past it was stored and
/// then made every later projection update fail (found with a 4 kB V1 transaction_id).
enum Identifier {
    static let maxBytes = 1024
    static let keyBytes = 512

    static func check(_ value: String, _ what: String, limit: Int = maxBytes) throws(AppleVerificationError) {
        guard value.utf8.count <= limit else {
            throw .malformed("\(what) is \(value.utf8.count) bytes; the ledger stores identifiers of at most \(limit) bytes")
        }
    }
}

/// Typed reads from JSONSerialization objects: absent is nil, the wrong type is malformed.
enum Fields {
    static func string(_ o: [String: Any], _ key: String) throws(AppleVerificationError) -> String? {
        guard let v = o[key], !(v is NSNull) else { return nil }
        guard let s = v as? String else { throw .malformed("field \(key) must be a string") }
        return s
    }

    static func int64(_ o: [String: Any], _ key: String) throws(AppleVerificationError) -> Int64? {
        guard let v = o[key], !(v is NSNull) else { return nil }
        guard let i = JSONNumbers.int64(v) else { throw .malformed("field \(key) must be an integer") }
        return i
    }
}
