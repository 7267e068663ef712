import Foundation
import LedgerCore
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Strict base64 decoding on bytes. JWS segments are unpadded base64url (RFC 7515 §2); `x5c`
/// entries are padded standard base64 (RFC 7515 §4.1.6). Anything else — a character from the
/// other alphabet, whitespace, a length no encoder produces, non-zero unused bits — is refused,
/// so one signed value has exactly one accepted spelling.
public enum Base64 {
    public enum Alphabet: Sendable { case url, standard }

    private static let urlTable: [UInt8] = table(plus: UInt8(ascii: "-"), slash: UInt8(ascii: "_"))
    private static let stdTable: [UInt8] = table(plus: UInt8(ascii: "+"), slash: UInt8(ascii: "/"))

    private static func table(plus: UInt8, slash: UInt8) -> [UInt8] {
        var t = [UInt8](repeating: 0xFF, count: 256)
        for (i, c) in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789".utf8.enumerated() { t[Int(c)] = UInt8(i) }
        t[Int(plus)] = 62
        t[Int(slash)] = 63
        return t
    }

    /// base64url without padding, as JWS uses it. Returns nil for any non-canonical input.
    public static func decodeURL<C: Collection>(_ input: C) -> [UInt8]? where C.Element == UInt8 {
        decode(input, alphabet: .url, padded: false)
    }

    /// Standard base64 with mandatory padding, as `x5c` uses it.
    public static func decodeStandard<C: Collection>(_ input: C) -> [UInt8]? where C.Element == UInt8 {
        decode(input, alphabet: .standard, padded: true)
    }

    static func decode<C: Collection>(_ input: C, alphabet: Alphabet, padded: Bool) -> [UInt8]? where C.Element == UInt8 {
        if let r = input.withContiguousStorageIfAvailable({ decode($0, alphabet: alphabet, padded: padded) }) { return r }
        return Array(input).withUnsafeBufferPointer { decode($0, alphabet: alphabet, padded: padded) }
    }

    /// The hot path of every JWS. The strictness rules are checked here (alphabet, padding only at
    /// the end, length, zero unused bits); the bulk decoding is Foundation's, which is compiled
    /// optimised: a Swift per-character loop ran ~45× slower in a debug build, where it dominated
    /// the verifier's cost under the fuzz tests.
    static func decode(_ input: UnsafeBufferPointer<UInt8>, alphabet: Alphabet, padded: Bool) -> [UInt8]? {
        var count = input.count
        if padded {
            guard count % 4 == 0 else { return nil }
            // Up to two '=' at the very end, nowhere else.
            if count > 0, input[count - 1] == UInt8(ascii: "=") { count -= 1 }
            if count > 0, input[count - 1] == UInt8(ascii: "="), input.count - count == 1 { count -= 1 }
        }
        guard count % 4 != 1 else { return nil }
        guard count > 0, let base = input.baseAddress else { return [] }
        // Characters Foundation's standard decoder would take but this spelling must not contain.
        let foreign: [UInt8] = alphabet == .url ? [UInt8(ascii: "+"), UInt8(ascii: "/"), UInt8(ascii: "=")] : [UInt8(ascii: "=")]
        for c in foreign where memchr(base, Int32(c), count) != nil { return nil }
        let table = alphabet == .url ? urlTable : stdTable
        // Unused low bits of the last character must be zero: one spelling per value.
        let rest = count % 4
        if rest != 0 {
            let last = table[Int(base[count - 1])]
            guard last != 0xFF, last & (rest == 2 ? 0x0F : 0x03) == 0 else { return nil }
        }
        var text = [UInt8](unsafeUninitializedCapacity: (count + 3) / 4 * 4) { out, initialized in
            out.baseAddress!.initialize(from: base, count: count)
            for k in count..<out.count { out[k] = UInt8(ascii: "=") }
            initialized = out.count
        }
        if alphabet == .url {
            text.withUnsafeMutableBufferPointer { b in
                let p = b.baseAddress!
                for (from, to) in [(UInt8(ascii: "-"), UInt8(ascii: "+")), (UInt8(ascii: "_"), UInt8(ascii: "/"))] {
                    var at = 0
                    while at < count, let hit = memchr(p + at, Int32(from), count - at) {
                        let r = hit.assumingMemoryBound(to: UInt8.self)
                        r.pointee = to
                        at = p.distance(to: r) + 1
                    }
                }
            }
        }
        // Foundation refuses any other byte (no option to ignore unknown characters is passed).
        guard let decoded = Data(base64Encoded: Data(text)) else { return nil }
        let expected = count / 4 * 3 + (rest == 0 ? 0 : rest - 1)
        guard decoded.count == expected else { return nil }
        return [UInt8](decoded)
    }

    public static func encodeURL<C: Collection>(_ bytes: C) -> String where C.Element == UInt8 {
        encode(bytes, alphabet: .url, padded: false)
    }

    public static func encodeStandard<C: Collection>(_ bytes: C) -> String where C.Element == UInt8 {
        encode(bytes, alphabet: .standard, padded: true)
    }

    static func encode<C: Collection>(_ bytes: C, alphabet: Alphabet, padded: Bool) -> String where C.Element == UInt8 {
        let chars = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789".utf8)
            + (alphabet == .url ? [UInt8(ascii: "-"), UInt8(ascii: "_")] : [UInt8(ascii: "+"), UInt8(ascii: "/")])
        var out = [UInt8]()
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var it = bytes.makeIterator()
        while let a = it.next() {
            let b = it.next(), c = it.next()
            let n = UInt32(a) << 16 | UInt32(b ?? 0) << 8 | UInt32(c ?? 0)
            out.append(chars[Int(n >> 18 & 63)])
            out.append(chars[Int(n >> 12 & 63)])
            if b != nil { out.append(chars[Int(n >> 6 & 63)]) } else if padded { out.append(UInt8(ascii: "=")) }
            if c != nil { out.append(chars[Int(n & 63)]) } else if padded { out.append(UInt8(ascii: "=")) }
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// The Apple side of `JSONGuard` (LedgerCore): its findings as `AppleVerificationError`s.
extension JSONGuard {
    /// Parses a JSON object after the scan; refuses anything that is not one JSON object.
    static func object<C: Collection>(_ bytes: C, what: String) throws(AppleVerificationError) -> [String: Any] where C.Element == UInt8 {
        let members: Int
        switch scan(bytes) {
        case .tooDeep: throw .jsonTooDeep(what: what, limit: maxDepth)
        case .nulEscape: throw .malformed("\(what) contains the escape \\u0000 (NUL), which no Apple document carries and PostgreSQL cannot store")
        case .trailingComma: throw .malformed("\(what) has a comma before a closing bracket, which JSON does not allow")
        case .hugeNumber: throw .malformed("\(what) has a number with more than 1000 digits or an exponent beyond ±1000, which no Apple document carries and PostgreSQL cannot store")
        case .ok(let m): members = m
        }
        let data = Data(bytes)
        guard let any = try? JSONSerialization.jsonObject(with: data, options: []), let obj = any as? [String: Any] else {
            throw .malformed("\(what) is not a JSON object")
        }
        guard memberCount(obj) == members else {
            throw .malformed("\(what) has an object with the same member name twice, which JSON readers resolve differently")
        }
        return obj
    }
}
