internal import COpenSSL
import Foundation

/// The elliptic curves the ledger deals with: Apple signs with P-256 leaves under P-384 CAs.
public enum ECCurve: String, Sendable {
    case p256 = "P-256"
    case p384 = "P-384"

    var bits: Int32 { self == .p256 ? 256 : 384 }
}

/// An EC public key (from a certificate or generated). Immutable once made, so it is shared across
/// threads; OpenSSL's EVP_PKEY is safe for concurrent verifies.
public final class ECPublicKey: @unchecked Sendable {
    /// `package`: CryptoTesting mints certificates for these keys.
    package let pkey: OpaquePointer
    /// The curve, or nil when the key is not an EC key on a curve the ledger knows. Read once:
    /// verifying checks it every time.
    public let curve: ECCurve?

    /// Takes ownership of one reference to `pkey`.
    init(owning pkey: OpaquePointer) {
        self.pkey = pkey
        self.curve = Self.curve(of: pkey)
    }
    deinit { EVP_PKEY_free(pkey) }

    private static func curve(of pkey: OpaquePointer) -> ECCurve? {
        guard EVP_PKEY_get_base_id(pkey) == EVP_PKEY_EC else { return nil }
        var name = [CChar](repeating: 0, count: 64)
        var len = 0
        guard EVP_PKEY_get_utf8_string_param(pkey, OSSL_PKEY_PARAM_GROUP_NAME, &name, name.count, &len) == 1 else {
            return nil
        }
        switch String(decoding: name.prefix(len).map { UInt8(bitPattern: $0) }, as: UTF8.self) {
        case "prime256v1", "P-256": return .p256
        case "secp384r1", "P-384": return .p384
        default: return nil
        }
    }

    /// ES256 (JOSE): `signature` is the raw 64-byte r‖s, not DER. Only a P-256 key verifies ES256;
    /// any other key, length or encoding answers false rather than throwing, because to the caller
    /// every such case means the same thing: the signature does not hold.
    public func verifyES256<M: ContiguousBytes>(signature: [UInt8], message: M) -> Bool {
        guard signature.count == 64, curve == .p256 else { return false }
        guard let der = ECDSASignature.der(fromRaw: signature) else { return false }
        guard let ctx = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestVerifyInit(ctx, nil, FetchedDigest.sha256, nil, pkey) == 1 else {
            ERR_clear_error()
            return false
        }
        let ok = message.withUnsafeBytes { m in
            der.withUnsafeBufferPointer { d in
                EVP_DigestVerify(ctx, d.baseAddress, d.count, m.baseAddress?.assumingMemoryBound(to: UInt8.self), m.count)
            }
        }
        if ok != 1 { ERR_clear_error() }
        return ok == 1
    }
}

/// An EC private key the operator hands over (a .p8): signs ES256, e.g. the bearer tokens of the
/// App Store Server API. Generating keys and exporting them, like minting certificates, is only
/// for test PKIs and lives in CryptoTesting.
public final class ECPrivateKey: @unchecked Sendable {
    /// `package`: CryptoTesting generates keys and signs certificates with them.
    package let pkey: OpaquePointer

    package init(owning pkey: OpaquePointer) { self.pkey = pkey }
    deinit { EVP_PKEY_free(pkey) }

    /// Reads "EC PRIVATE KEY" (SEC1) or "PRIVATE KEY" (PKCS#8, e.g. a .p8) PEM; leading text is skipped.
    public convenience init(pem: [UInt8]) throws(CryptoError) {
        let key: OpaquePointer? = pem.withUnsafeBytes { p in
            guard let bio = BIO_new_mem_buf(p.baseAddress, Int32(p.count)) else { return nil }
            defer { BIO_free(bio) }
            return PEM_read_bio_PrivateKey(bio, nil, nil, nil)
        }
        guard let key else { throw .fromQueue("reading a PEM private key (expected EC PRIVATE KEY or PKCS#8)") }
        guard EVP_PKEY_get_base_id(key) == EVP_PKEY_EC else {
            EVP_PKEY_free(key)
            throw .invalidInputLength("the PEM private key is not an EC key")
        }
        self.init(owning: key)
    }

    public var publicKey: ECPublicKey {
        EVP_PKEY_up_ref(pkey)
        return ECPublicKey(owning: pkey)
    }

    public var curve: ECCurve? { publicKey.curve }

    /// ES256 over `message`; returns raw r‖s (64 bytes) as JOSE wants it.
    public func signES256<M: ContiguousBytes>(_ message: M) throws(CryptoError) -> [UInt8] {
        guard curve == .p256 else { throw .invalidInputLength("ES256 needs a P-256 key") }
        guard let ctx = EVP_MD_CTX_new() else { throw .fromQueue("EVP_MD_CTX_new") }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestSignInit(ctx, nil, EVP_sha256(), nil, pkey) == 1 else { throw .fromQueue("EVP_DigestSignInit") }
        var der = [UInt8](repeating: 0, count: 80)
        var len = der.count
        let ok = message.withUnsafeBytes { m in
            EVP_DigestSign(ctx, &der, &len, m.baseAddress?.assumingMemoryBound(to: UInt8.self), m.count)
        }
        guard ok == 1 else { throw .fromQueue("EVP_DigestSign") }
        guard let raw = ECDSASignature.raw(fromDER: Array(der.prefix(len)), width: 32) else {
            throw .fromQueue("decoding the ECDSA signature")
        }
        return raw
    }
}

/// JOSE carries ECDSA signatures as fixed-width r‖s; OpenSSL speaks DER ECDSA-Sig-Value.
enum ECDSASignature {
    static func der(fromRaw raw: [UInt8]) -> [UInt8]? {
        let half = raw.count / 2
        guard let sig = ECDSA_SIG_new() else { return nil }
        defer { ECDSA_SIG_free(sig) }
        let r = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress, Int32(half), nil) }
        let s = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress! + half, Int32(half), nil) }
        guard let r, let s else { BN_free(r); BN_free(s); return nil }
        guard ECDSA_SIG_set0(sig, r, s) == 1 else { BN_free(r); BN_free(s); return nil }
        var out: UnsafeMutablePointer<UInt8>? = nil
        let n = i2d_ECDSA_SIG(sig, &out)
        guard n > 0, let p = out else { return nil }
        defer { CRYPTO_free(p, #file, #line) }
        return Array(UnsafeBufferPointer(start: p, count: Int(n)))
    }

    static func raw(fromDER der: [UInt8], width: Int) -> [UInt8]? {
        let sig: OpaquePointer? = der.withUnsafeBufferPointer { b in
            var p: UnsafePointer<UInt8>? = b.baseAddress
            return d2i_ECDSA_SIG(nil, &p, b.count)
        }
        guard let sig else { return nil }
        defer { ECDSA_SIG_free(sig) }
        guard let r = ECDSA_SIG_get0_r(sig), let s = ECDSA_SIG_get0_s(sig) else { return nil }
        var out = [UInt8](repeating: 0, count: width * 2)
        let ok = out.withUnsafeMutableBufferPointer { o in
            BN_bn2binpad(r, o.baseAddress, Int32(width)) == width
                && BN_bn2binpad(s, o.baseAddress! + width, Int32(width)) == width
        }
        return ok ? out : nil
    }
}

/// OpenSSL 3 re-fetches the implementation behind `EVP_sha256()` on every init (a locked
/// provider lookup); fetching once keeps the per-JWS cost close to the bare ECDSA verify.
enum FetchedDigest {
    nonisolated(unsafe) static let sha256: OpaquePointer? = EVP_MD_fetch(nil, "SHA256", nil)
}

/// `package`: CryptoTesting exports test keys as PEM.
package enum BIOBytes {
    package static func drain(_ bio: OpaquePointer) -> [UInt8] {
        var out = [UInt8]()
        var buf = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = BIO_read(bio, &buf, Int32(buf.count))
            if n <= 0 { break }
            out.append(contentsOf: buf.prefix(Int(n)))
        }
        return out
    }
}
