import Foundation

/// How the HTTP layer should answer a refused notification, without knowing why it was refused.
public enum RefusalKind: String, Sendable {
    /// 400: the bytes are not a well-formed notification.
    case malformed
    /// 401: the signature, certificate chain or shared secret does not authenticate the sender.
    case unauthenticated
    /// 422: authentic and well-formed, but not for this deployment (app, environment, config).
    case notAccepted

    public var httpStatus: Int {
        switch self {
        case .malformed: return 400
        case .unauthenticated: return 401
        case .notAccepted: return 422
        }
    }
}

/// Every reason an Apple notification or signed value is refused. Messages say what to fix and
/// never contain secrets (the V1 shared secret is never echoed, nor the JWS itself).
public enum AppleVerificationError: Error, Equatable, CustomStringConvertible {
    case malformed(String)
    case jsonTooDeep(what: String, limit: Int)
    case missingField(String)
    case unsupportedAlgorithm(String)
    case invalidChainLength(Int)
    case invalidCertificate(String)
    case untrustedChain(String)
    case missingAppleOID(certificate: String, oid: String)
    case certificateNotValidAtSigningTime(String)
    case badSignature
    case appMismatch(String)
    case environmentMismatch(String)
    case nestedMismatch(field: String, detail: String)
    /// A nested JWS whose payload is not the type its slot holds (a renewal info in
    /// `signedTransactionInfo`, a transaction without a transactionId, …).
    case wrongNestedType(slot: String, expected: String, problem: String)
    /// An originalTransactionId that is not 1–20 ASCII digits; `field` names where it was read.
    case invalidOriginalTransactionId(field: String)
    case sharedSecretNotConfigured
    case badSharedSecret

    /// Stable snake_case identifier for the JSON error body and metrics.
    public var code: String {
        switch self {
        case .malformed: return "malformed"
        case .jsonTooDeep: return "json_too_deep"
        case .missingField: return "missing_field"
        case .unsupportedAlgorithm: return "unsupported_algorithm"
        case .invalidChainLength: return "invalid_chain_length"
        case .invalidCertificate: return "invalid_certificate"
        case .untrustedChain: return "untrusted_chain"
        case .missingAppleOID: return "missing_apple_oid"
        case .certificateNotValidAtSigningTime: return "certificate_not_valid_at_signing_time"
        case .badSignature: return "bad_signature"
        case .appMismatch: return "app_mismatch"
        case .environmentMismatch: return "environment_mismatch"
        case .nestedMismatch: return "nested_mismatch"
        case .wrongNestedType: return "wrong_nested_type"
        case .invalidOriginalTransactionId: return "invalid_original_transaction_id"
        case .sharedSecretNotConfigured: return "shared_secret_not_configured"
        case .badSharedSecret: return "bad_shared_secret"
        }
    }

    public var kind: RefusalKind {
        switch self {
        // A nested value of the wrong type is signed by Apple but was never sent in that slot:
        // Apple does not put pieces of different messages together, so it is an assembled forgery
        // (or corrupt), not authentic data this deployment declines.
        case .malformed, .jsonTooDeep, .missingField, .wrongNestedType, .invalidOriginalTransactionId:
            return .malformed
        case .unsupportedAlgorithm, .invalidChainLength, .invalidCertificate, .untrustedChain, .missingAppleOID,
             .certificateNotValidAtSigningTime, .badSignature, .badSharedSecret:
            return .unauthenticated
        // Nested values carry Apple's own signature and the outer signature covers them, so a
        // disagreement is not forgery by the sender: it is authentic data this ledger will not file.
        case .appMismatch, .environmentMismatch, .nestedMismatch, .sharedSecretNotConfigured:
            return .notAccepted
        }
    }

    public var message: String {
        switch self {
        case .malformed(let why):
            return "\(why). Send the body exactly as Apple posted it (V2: JSON {\"signedPayload\": \"<compact JWS>\"})."
        case .jsonTooDeep(let what, let limit):
            return "\(what) nests JSON deeper than \(limit) levels; no Apple document does, so it is refused unparsed."
        case .missingField(let f):
            return "required field \(f) is missing or has the wrong type."
        case .unsupportedAlgorithm(let alg):
            return "JWS alg \"\(alg)\" is refused; Apple signs with ES256 only."
        case .invalidChainLength(let n):
            return "JWS x5c has \(n) certificates; Apple sends exactly 3 (leaf, intermediate, root). Xcode/StoreKit-testing data is not Apple-signed and is not accepted."
        case .invalidCertificate(let why):
            return "a certificate in x5c could not be parsed: \(why)."
        case .untrustedChain(let why):
            return "the x5c chain does not lead to a configured trusted root (\(why)). Check LEDGER_APPLE_ROOT_CERTS; the default is Apple Root CA - G3."
        case .missingAppleOID(let cert, let oid):
            return "certificate \(cert) lacks Apple's marker extension \(oid); it is not an App Store signing chain."
        case .certificateNotValidAtSigningTime(let why):
            return "the signing chain was not valid at the payload's signedDate (\(why))."
        case .badSignature:
            return "the ES256 signature does not verify with the leaf certificate's key; the payload was altered or signed by someone else."
        case .appMismatch(let why):
            return "\(why). Add the app to LEDGER_APPLE_BUNDLE_IDS / LEDGER_APPLE_APP_APPLE_IDS if it is yours."
        case .environmentMismatch(let why):
            return "\(why). Add it to LEDGER_APPLE_ENVIRONMENTS if this deployment should accept it."
        case .nestedMismatch(let field, let detail):
            return "nested signed data disagrees with the notification on \(field) (\(detail)); refusing to file it."
        case .wrongNestedType(let slot, let expected, let problem):
            return "\(slot) must hold \(expected), but its signed payload \(problem). Apple never puts one message's signed data in another's slot; nothing was stored."
        case .invalidOriginalTransactionId(let field):
            return "\(field) must be an originalTransactionId of 1 to 20 ASCII digits, as Apple issues them; nothing was stored."
        case .sharedSecretNotConfigured:
            return "V1 notifications are refused because no shared secret is configured; set LEDGER_APPLE_SHARED_SECRET to the app-specific shared secret from App Store Connect."
        case .badSharedSecret:
            return "the V1 password does not match the configured shared secret (LEDGER_APPLE_SHARED_SECRET)."
        }
    }

    public var description: String { "\(code): \(message)" }
}
