internal import COpenSSL
import Foundation

/// AES-256-CBC without OpenSSL's own padding: WeChat pads with PKCS#7 to 32 bytes, not to the
/// cipher's 16, so the caller pads and unpads.
public enum AES256CBC {
    public static func encrypt(key: [UInt8], iv: [UInt8], plaintext: [UInt8]) throws(CryptoError) -> [UInt8] {
        try run(encrypt: true, key: key, iv: iv, input: plaintext)
    }

    public static func decrypt(key: [UInt8], iv: [UInt8], ciphertext: [UInt8]) throws(CryptoError) -> [UInt8] {
        try run(encrypt: false, key: key, iv: iv, input: ciphertext)
    }

    private static func run(encrypt: Bool, key: [UInt8], iv: [UInt8], input: [UInt8]) throws(CryptoError) -> [UInt8] {
        guard key.count == 32 else { throw .invalidKeyLength(expected: 32, actual: key.count) }
        guard iv.count == 16 else { throw .invalidInputLength("IV must be 16 bytes, got \(iv.count)") }
        guard input.count % 16 == 0, !input.isEmpty else {
            throw .invalidInputLength("AES-CBC input must be a non-empty multiple of 16 bytes, got \(input.count)")
        }
        guard let ctx = EVP_CIPHER_CTX_new() else { throw CryptoError.fromQueue("EVP_CIPHER_CTX_new") }
        defer { EVP_CIPHER_CTX_free(ctx) }
        guard EVP_CipherInit_ex(ctx, EVP_aes_256_cbc(), nil, key, iv, encrypt ? 1 : 0) == 1 else {
            throw CryptoError.fromQueue("EVP_CipherInit_ex")
        }
        EVP_CIPHER_CTX_set_padding(ctx, 0)
        var out = [UInt8](repeating: 0, count: input.count + 32)
        var n: Int32 = 0
        var total = 0
        let ok = out.withUnsafeMutableBufferPointer { o -> Bool in
            guard EVP_CipherUpdate(ctx, o.baseAddress, &n, input, Int32(input.count)) == 1 else { return false }
            total = Int(n)
            guard EVP_CipherFinal_ex(ctx, o.baseAddress! + total, &n) == 1 else { return false }
            total += Int(n)
            return true
        }
        guard ok else { throw CryptoError.fromQueue(encrypt ? "AES encrypt" : "AES decrypt") }
        return Array(out.prefix(total))
    }
}
