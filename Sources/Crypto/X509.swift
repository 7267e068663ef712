internal import COpenSSL
import Foundation

/// A parsed X.509 certificate. Immutable after parsing, so instances are shared across threads
/// (OpenSSL locks its own lazily cached extension data).
public final class X509Certificate: @unchecked Sendable, Equatable, CustomStringConvertible {
    /// `package`: CryptoTesting mints certificates under these.
    package let x509: OpaquePointer
    /// The exact DER bytes, so a certificate can be compared, cached and re-emitted unchanged.
    public let der: [UInt8]

    package init(owning x509: OpaquePointer) {
        self.x509 = x509
        var out: UnsafeMutablePointer<UInt8>? = nil
        let n = i2d_X509(x509, &out)
        if n > 0, let p = out {
            der = Array(UnsafeBufferPointer(start: p, count: Int(n)))
            CRYPTO_free(p, #file, #line)
        } else {
            der = []
        }
    }

    deinit { X509_free(x509) }

    /// Parses exactly one DER certificate; trailing bytes are refused (they would be unsigned data
    /// riding along with a signed structure).
    public convenience init(der: [UInt8]) throws(CryptoError) {
        var consumed = 0
        let x: OpaquePointer? = der.withUnsafeBufferPointer { b in
            guard let base = b.baseAddress else { return nil }
            var p: UnsafePointer<UInt8>? = base
            let x = d2i_X509(nil, &p, b.count)
            if let p { consumed = p - base }
            return x
        }
        guard let x else { throw .fromQueue("parsing a DER certificate") }
        guard consumed == der.count else {
            X509_free(x)
            throw .invalidInputLength("DER certificate has \(der.count - consumed) trailing bytes")
        }
        self.init(owning: x)
    }

    /// Every certificate in a PEM text (text before, between and after the blocks is skipped).
    public static func parsePEM(_ pem: [UInt8]) throws(CryptoError) -> [X509Certificate] {
        var certs: [X509Certificate] = []
        pem.withUnsafeBytes { p in
            guard let bio = BIO_new_mem_buf(p.baseAddress, Int32(p.count)) else { return }
            defer { BIO_free(bio) }
            while let x = PEM_read_bio_X509(bio, nil, nil, nil) {
                certs.append(X509Certificate(owning: x))
            }
        }
        ERR_clear_error()  // the loop ends on a "no start line" error by design
        guard !certs.isEmpty else { throw .invalidInputLength("no PEM certificate block found") }
        return certs
    }

    /// A certificate file as operators hand it over: DER, or PEM with one or more certificates.
    public static func parseFile(bytes: [UInt8]) throws(CryptoError) -> [X509Certificate] {
        if bytes.first == 0x30 { return [try X509Certificate(der: bytes)] }
        return try parsePEM(bytes)
    }

    public static func == (a: X509Certificate, b: X509Certificate) -> Bool { a.der == b.der }

    public var subject: String { Self.oneLine(X509_get_subject_name(x509)) }
    public var issuer: String { Self.oneLine(X509_get_issuer_name(x509)) }
    public var description: String { subject }

    /// Seconds since the epoch.
    public var notBefore: Int64 { Self.epochSeconds(X509_get0_notBefore(x509)) }
    public var notAfter: Int64 { Self.epochSeconds(X509_get0_notAfter(x509)) }

    /// Whether an extension with this dotted OID is present (its value is not inspected).
    public func hasExtension(oid: String) -> Bool {
        guard let obj = OBJ_txt2obj(oid, 1) else { ERR_clear_error(); return false }
        defer { ASN1_OBJECT_free(obj) }
        return X509_get_ext_by_OBJ(x509, obj, -1) >= 0
    }

    public func publicKey() throws(CryptoError) -> ECPublicKey {
        guard let k = X509_get_pubkey(x509) else { throw .fromQueue("X509_get_pubkey") }
        guard EVP_PKEY_get_base_id(k) == EVP_PKEY_EC else {
            EVP_PKEY_free(k)
            throw .invalidInputLength("the certificate's key is not an EC key")
        }
        return ECPublicKey(owning: k)
    }

    public var pem: String {
        guard let bio = BIO_new(BIO_s_mem()) else { return "" }
        defer { BIO_free(bio) }
        PEM_write_bio_X509(bio, x509)
        return String(decoding: BIOBytes.drain(bio), as: UTF8.self)
    }

    static func oneLine(_ name: OpaquePointer?) -> String {
        guard let name else { return "" }
        var buf = [CChar](repeating: 0, count: 512)
        _ = X509_NAME_oneline(name, &buf, Int32(buf.count))
        return String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    static func epochSeconds(_ t: UnsafePointer<ASN1_TIME>?) -> Int64 {
        guard let t else { return 0 }
        var tm = tm()
        guard ASN1_TIME_to_tm(t, &tm) == 1 else { return 0 }
        return Int64(timegm(&tm))
    }
}

/// Why a certificate chain did not verify at the requested time.
public enum CertificateChainError: Error, Equatable, CustomStringConvertible {
    /// The chain does not lead to a configured trusted root (unknown issuer, self-signed, …).
    case untrusted(String)
    /// A certificate had expired at the validation time.
    case expired(subject: String)
    /// A certificate was not yet valid at the validation time.
    case notYetValid(subject: String)
    /// Any other X.509 failure (bad CA signature, constraints, strict-profile violation).
    case invalid(code: Int32, detail: String)

    public var description: String {
        switch self {
        case .untrusted(let d): return "certificate chain is not anchored in a trusted root: \(d)"
        case .expired(let s): return "certificate \(s) had expired at the validation time"
        case .notYetValid(let s): return "certificate \(s) was not yet valid at the validation time"
        case .invalid(let c, let d): return "certificate chain invalid (X509 error \(c)): \(d)"
        }
    }
}

/// The result of a successful chain verification: the window in which every certificate of the
/// built path (root included) is valid, so a cached verdict can be re-checked for another time.
public struct VerifiedChainWindow: Sendable, Equatable {
    public var notBefore: Int64
    public var notAfter: Int64
    /// The DER of each certificate of the path OpenSSL built, leaf first, trust anchor last: the
    /// caller asserts its shape (a valid path may skip a certificate the sender put in the chain).
    public var pathDER: [[UInt8]] = []
    public func contains(epochSeconds t: Int64) -> Bool { t >= notBefore && t <= notAfter }
}

/// RFC 5280 path validation with OpenSSL: `roots` are the only trust anchors, `intermediates`
/// are untrusted helpers, `X509_V_FLAG_X509_STRICT` is on and the time is fixed (no clock reads).
public enum X509ChainVerifier {
    /// `tolerateProfileGaps` accepts exactly the strict-profile findings that Apple's own published
    /// test PKI (library-test-chain and the chains in its mock JWS) has: missing authority/subject
    /// key identifiers, a non-critical CA basicConstraints, and a CA without keyUsage (hence also
    /// "pathlen without keyCertSign"). Signature, validity, CA:TRUE and path-length checks still
    /// apply, and Apple's real chain has none of these gaps, so production leaves this off.
    public static func verify(
        leaf: X509Certificate, intermediates: [X509Certificate], roots: [X509Certificate],
        atEpochSeconds time: Int64, tolerateProfileGaps: Bool = false
    ) throws(CertificateChainError) -> VerifiedChainWindow {
        guard let store = X509_STORE_new() else { throw .invalid(code: -1, detail: "X509_STORE_new failed") }
        defer { X509_STORE_free(store) }
        for r in roots { _ = X509_STORE_add_cert(store, r.x509) }
        ERR_clear_error()  // duplicate roots are reported on the queue; harmless
        guard let untrusted = OPENSSL_sk_new_null() else { throw .invalid(code: -1, detail: "stack alloc failed") }
        defer { OPENSSL_sk_free(untrusted) }  // does not free the certificates; they are ours
        for i in intermediates { OPENSSL_sk_push(untrusted, UnsafeRawPointer(i.x509)) }
        guard let ctx = X509_STORE_CTX_new() else { throw .invalid(code: -1, detail: "X509_STORE_CTX_new failed") }
        defer { X509_STORE_CTX_free(ctx) }
        guard X509_STORE_CTX_init(ctx, store, leaf.x509, untrusted) == 1 else {
            throw .invalid(code: -1, detail: "X509_STORE_CTX_init failed")
        }
        let param = X509_STORE_CTX_get0_param(ctx)
        X509_VERIFY_PARAM_set_flags(param, UInt(X509_V_FLAG_X509_STRICT))
        X509_VERIFY_PARAM_set_time(param, time_t(time))
        if tolerateProfileGaps { X509_STORE_CTX_set_verify_cb(ctx, tolerateProfileGapsCallback) }

        let ok = X509_verify_cert(ctx)
        defer { ERR_clear_error() }
        guard ok == 1 else {
            let code = X509_STORE_CTX_get_error(ctx)
            let depth = X509_STORE_CTX_get_error_depth(ctx)
            let detail = String(cString: X509_verify_cert_error_string(Int(code)))
            var subject = "at depth \(depth)"
            if let c = X509_STORE_CTX_get_current_cert(ctx) { subject = X509Certificate.oneLine(X509_get_subject_name(c)) }
            switch code {
            case X509_V_ERR_CERT_HAS_EXPIRED: throw .expired(subject: subject)
            case X509_V_ERR_CERT_NOT_YET_VALID: throw .notYetValid(subject: subject)
            case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT, X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY,
                 X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT, X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN,
                 X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
                throw .untrusted("\(detail) (\(subject))")
            default:
                throw .invalid(code: code, detail: "\(detail) (\(subject))")
            }
        }
        var window = VerifiedChainWindow(notBefore: Int64.min, notAfter: Int64.max)
        if let chain = X509_STORE_CTX_get0_chain(ctx) {
            for i in 0..<OPENSSL_sk_num(chain) {
                guard let c = OPENSSL_sk_value(chain, i) else { continue }
                let x = OpaquePointer(c)
                var out: UnsafeMutablePointer<UInt8>? = nil
                let n = i2d_X509(x, &out)
                if n > 0, let p = out {
                    window.pathDER.append(Array(UnsafeBufferPointer(start: p, count: Int(n))))
                    CRYPTO_free(p, #file, #line)
                } else {
                    window.pathDER.append([])
                }
                window.notBefore = max(window.notBefore, X509Certificate.epochSeconds(X509_get0_notBefore(x)))
                window.notAfter = min(window.notAfter, X509Certificate.epochSeconds(X509_get0_notAfter(x)))
            }
        }
        return window
    }
}

private func tolerateProfileGapsCallback(_ ok: Int32, _ ctx: OpaquePointer?) -> Int32 {
    if ok == 1 { return 1 }
    switch X509_STORE_CTX_get_error(ctx) {
    case X509_V_ERR_MISSING_AUTHORITY_KEY_IDENTIFIER, X509_V_ERR_MISSING_SUBJECT_KEY_IDENTIFIER,
         X509_V_ERR_CA_BCONS_NOT_CRITICAL, X509_V_ERR_CA_CERT_MISSING_KEY_USAGE,
         X509_V_ERR_PATHLEN_WITHOUT_KU_KEY_CERT_SIGN:
        return 1
    default:
        return 0
    }
}
