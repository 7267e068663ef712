import Foundation
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

/// Guards JSON parsing: Foundation's parsers recurse per nesting level, so a 10,000-deep `[[[[…`
/// can exhaust the stack. This scan runs on the raw bytes first, in one pass, and refuses input
/// nested deeper than any Apple document needs. It also refuses what PostgreSQL cannot store and
/// what two JSON readers would read differently (both found by the fuzz tests): the escape `\u0000`
/// (Foundation decodes it to a NUL character; jsonb and text columns refuse it, so the append
/// would fail after the notification was accepted), and an object with the same member name twice
/// (Foundation keeps one value, PostgreSQL's jsonb the last: the raw evidence would say something
/// else than what the ledger acted on).
enum JSONGuard {
    /// Apple's deepest documents (advancedCommerceInfo items → refunds) nest about 6 levels.
    static let maxDepth = 32

    enum Finding: Equatable {
        case tooDeep
        case nulEscape
        /// A comma before `}` or `]` (Foundation's reader takes it, PostgreSQL's does not).
        case trailingComma
        /// A number with more than 1000 digits or an exponent beyond ±1000: no Apple value is one,
        /// and PostgreSQL's numeric overflows past 1e131071 or 16383 decimals.
        case hugeNumber
        /// Well-formed as far as the scan can tell; `members` counts `:` outside strings, which is
        /// the number of object members of a valid document.
        case ok(members: Int)
    }

    static func depthWithinLimit<C: Collection>(_ bytes: C, limit: Int = maxDepth) -> Bool where C.Element == UInt8 {
        scan(bytes, limit: limit) != .tooDeep
    }

    static func scan<C: Collection>(_ bytes: C, limit: Int = maxDepth) -> Finding where C.Element == UInt8 {
        if let r = bytes.withContiguousStorageIfAvailable({ scan($0, limit: limit) }) { return r }
        return Array(bytes).withUnsafeBufferPointer { scan($0, limit: limit) }
    }

    /// Numeric byte values, pointer indexing and memchr inside strings: this runs over every byte of
    /// every body, header and payload, and in a debug build the per-byte loop it replaced cost
    /// more than everything but the signature (found profiling the fuzz tests).
    static func scan(_ bytes: UnsafeBufferPointer<UInt8>, limit: Int) -> Finding {
        guard let p = bytes.baseAddress else { return .ok(members: 0) }
        let quote: UInt8 = 0x22, backslash: UInt8 = 0x5C
        let n = bytes.count
        var depth = 0
        var members = 0
        var i = 0
        var lastSignificant: UInt8 = 0
        while i < n {
            let b = p[i]
            i += 1
            if b == 0x20 || b == 0x0A || b == 0x0D || b == 0x09 { continue }
            defer { lastSignificant = b }
            if (b == 0x7D || b == 0x5D), lastSignificant == 0x2C { return .trailingComma } // `,}` `,]`
            if b == 0x2D || (b >= 0x30 && b <= 0x39) { // a number: - or a digit
                var digits = 0, exponent = 0, inExponent = false
                var k = i - 1
                while k < n {
                    let c = p[k]
                    if c >= 0x30 && c <= 0x39 {
                        if inExponent {
                            if exponent <= 100_000 { exponent = exponent * 10 + Int(c - 0x30) }
                        } else {
                            digits += 1
                        }
                    } else if c == 0x65 || c == 0x45 { // e E
                        inExponent = true
                    } else if c != 0x2E && c != 0x2B && c != 0x2D { // . + -
                        break
                    }
                    k += 1
                }
                if digits > 1000 || exponent > 1000 { return .hugeNumber }
                i = k
                continue
            }
            if b == quote {
                // A string ends at the first quote preceded by an even number of backslashes.
                var end = -1
                var from = i
                while from < n, let hit = memchr(p + from, Int32(quote), n - from) {
                    let q = p.distance(to: UnsafePointer(hit.assumingMemoryBound(to: UInt8.self)))
                    var slashes = 0
                    while q - slashes - 1 >= i, p[q - slashes - 1] == backslash { slashes += 1 }
                    if slashes % 2 == 0 { end = q; break }
                    from = q + 1
                }
                if end < 0 { return .ok(members: members) }  // unterminated: the parser refuses it
                var e = i
                while e < end, let hit = memchr(p + e, Int32(backslash), end - e) {
                    let k = p.distance(to: UnsafePointer(hit.assumingMemoryBound(to: UInt8.self)))
                    if k + 5 < end, p[k + 1] == 0x75, p[k + 2] == 0x30, p[k + 3] == 0x30, p[k + 4] == 0x30, p[k + 5] == 0x30 {
                        return .nulEscape
                    }
                    e = k + 2
                }
                i = end + 1
            } else if b == 0x7B || b == 0x5B { // { [
                depth += 1
                if depth > limit { return .tooDeep }
            } else if b == 0x7D || b == 0x5D { // } ]
                depth -= 1
            } else if b == 0x3A { // :
                members += 1
            }
        }
        return .ok(members: members)
    }

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

    static func memberCount(_ value: Any) -> Int {
        if let o = value as? [String: Any] { return o.values.reduce(o.count) { $0 + memberCount($1) } }
        if let a = value as? [Any] { return a.reduce(0) { $0 + memberCount($1) } }
        return 0
    }
}
