/// Crypto owns every call into OpenSSL the product makes: digests, HMAC, random bytes, AES-CBC,
/// and (for Apple's signed data) ECDSA verification and X.509. No OpenSSL type appears in its
/// public API. Signing and certificate minting exist only for test PKIs and live in the
/// test-support target CryptoTesting (the one other importer of COpenSSL), which reaches the
/// handles below through `package` members: nothing the shipped `ledger` links can mint a root.
internal import COpenSSL
import Foundation

public enum CryptoError: Error, Equatable, CustomStringConvertible {
    /// OpenSSL refused an operation; `detail` is its error queue, for the operator.
    case openssl(operation: String, detail: String)
    case invalidKeyLength(expected: Int, actual: Int)
    case invalidInputLength(String)

    public var description: String {
        switch self {
        case .openssl(let op, let detail): return "OpenSSL \(op) failed: \(detail)"
        case .invalidKeyLength(let e, let a): return "key must be \(e) bytes, got \(a)"
        case .invalidInputLength(let why): return why
        }
    }

    package static func fromQueue(_ operation: String) -> CryptoError {
        var parts: [String] = []
        while case let code = ERR_get_error(), code != 0 {
            var buf = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &buf, buf.count)
            parts.append(String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        return .openssl(operation: operation, detail: parts.isEmpty ? "no detail" : parts.joined(separator: "; "))
    }
}

public enum Digest {
    public static func sha256<D: ContiguousBytes>(_ data: D) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: Int(SHA256_DIGEST_LENGTH))
        data.withUnsafeBytes { p in _ = SHA256(p.baseAddress?.assumingMemoryBound(to: UInt8.self), p.count, &out) }
        return out
    }

    public static func sha1<D: ContiguousBytes>(_ data: D) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: Int(SHA_DIGEST_LENGTH))
        data.withUnsafeBytes { p in _ = SHA1(p.baseAddress?.assumingMemoryBound(to: UInt8.self), p.count, &out) }
        return out
    }

    public static func hmacSHA256<K: ContiguousBytes, D: ContiguousBytes>(key: K, _ data: D) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var len: UInt32 = 0
        key.withUnsafeBytes { k in
            data.withUnsafeBytes { d in
                _ = HMAC(EVP_sha256(), k.baseAddress, Int32(k.count),
                         d.baseAddress?.assumingMemoryBound(to: UInt8.self), d.count, &out, &len)
            }
        }
        return Array(out.prefix(Int(len)))
    }
}

public enum Hex {
    public static func encode<S: Sequence>(_ bytes: S) -> String where S.Element == UInt8 {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        for b in bytes { out.append(digits[Int(b >> 4)]); out.append(digits[Int(b & 0xF)]) }
        return String(decoding: out, as: UTF8.self)
    }
}

public enum SecureRandom {
    public static func bytes(_ count: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        if count > 0 { precondition(RAND_bytes(&out, Int32(count)) == 1, "RAND_bytes failed") }
        return out
    }
}

/// Compares secrets without leaking, through timing, where they first differ.
public enum ConstantTime {
    public static func equals<A: ContiguousBytes, B: ContiguousBytes>(_ a: A, _ b: B) -> Bool {
        a.withUnsafeBytes { pa in
            b.withUnsafeBytes { pb in
                guard pa.count == pb.count else { return false }
                if pa.count == 0 { return true }
                return CRYPTO_memcmp(pa.baseAddress, pb.baseAddress, pa.count) == 0
            }
        }
    }

    public static func equals(_ a: String, _ b: String) -> Bool {
        equals(Array(a.utf8), Array(b.utf8))
    }
}
