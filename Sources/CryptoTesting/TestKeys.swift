internal import COpenSSL
import Crypto
import Foundation

// Creating and exporting keys is what a test authority does, never the service: the product only
// signs with a key an operator hands over (`ECPrivateKey(pem:)`), so these live beside minting.

extension ECPrivateKey {
    /// A fresh random key on `curve`.
    public static func generate(curve: ECCurve) throws(CryptoError) -> ECPrivateKey {
        guard let ctx = EVP_PKEY_CTX_new_from_name(nil, "EC", nil) else { throw .fromQueue("EVP_PKEY_CTX_new_from_name") }
        defer { EVP_PKEY_CTX_free(ctx) }
        guard EVP_PKEY_keygen_init(ctx) == 1, EVP_PKEY_CTX_set_group_name(ctx, curve.rawValue) == 1 else {
            throw .fromQueue("EC keygen init")
        }
        var key: OpaquePointer? = nil
        guard EVP_PKEY_generate(ctx, &key) == 1, let key else { throw .fromQueue("EVP_PKEY_generate") }
        return ECPrivateKey(owning: key)
    }

    /// PKCS#8 PEM ("PRIVATE KEY"), unencrypted: only for test authorities written to disk.
    public func pkcs8PEM() throws(CryptoError) -> String {
        guard let bio = BIO_new(BIO_s_mem()) else { throw .fromQueue("BIO_new") }
        defer { BIO_free(bio) }
        guard PEM_write_bio_PKCS8PrivateKey(bio, pkey, nil, nil, 0, nil, nil) == 1 else {
            throw .fromQueue("PEM_write_bio_PKCS8PrivateKey")
        }
        return String(decoding: BIOBytes.drain(bio), as: UTF8.self)
    }
}

extension ECPublicKey {
    /// The SubjectPublicKeyInfo DER, e.g. to use as an (insecure) HMAC secret in hostile tests.
    public var subjectPublicKeyInfoDER: [UInt8] {
        var out: UnsafeMutablePointer<UInt8>? = nil
        let n = i2d_PUBKEY(pkey, &out)
        guard n > 0, let p = out else { return [] }
        defer { CRYPTO_free(p, #file, #line) }
        return Array(UnsafeBufferPointer(start: p, count: Int(n)))
    }
}
