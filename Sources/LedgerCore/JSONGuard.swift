import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Guards JSON parsing: Foundation's parsers recurse per nesting level, so a 10,000-deep `[[[[…`
/// can exhaust the stack. This scan runs on the raw bytes first, in one pass, and refuses input
/// nested deeper than any document the ledger reads needs. The one guard of every JSON input:
/// Apple's notifications and answers (AppStore), WeChat's JSON pushes (WeChatPay) and the bodies
/// of app and admin requests (LedgerService). It also refuses what PostgreSQL cannot store and
/// what two JSON readers would read differently (both found by the fuzz tests): the escape `\u0000`
/// (Foundation decodes it to a NUL character; jsonb and text columns refuse it, so the append
/// would fail after the notification was accepted), and an object with the same member name twice
/// (Foundation keeps one value, PostgreSQL's jsonb the last: the raw evidence would say something
/// else than what the ledger acted on).
public enum JSONGuard {
    /// Apple's deepest documents (advancedCommerceInfo items → refunds) nest about 6 levels.
    public static let maxDepth = 32

    public enum Finding: Sendable, Equatable {
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

    public static func depthWithinLimit<C: Collection>(_ bytes: C, limit: Int = maxDepth) -> Bool where C.Element == UInt8 {
        scan(bytes, limit: limit) != .tooDeep
    }

    public static func scan<C: Collection>(_ bytes: C, limit: Int = maxDepth) -> Finding where C.Element == UInt8 {
        if let r = bytes.withContiguousStorageIfAvailable({ scan($0, limit: limit) }) { return r }
        return Array(bytes).withUnsafeBufferPointer { scan($0, limit: limit) }
    }

    /// Numeric byte values, pointer indexing and memchr inside strings: this runs over every byte of
    /// every body, header and payload, and in a debug build the per-byte loop it replaced cost
    /// more than everything but the signature (found profiling the fuzz tests).
    public static func scan(_ bytes: UnsafeBufferPointer<UInt8>, limit: Int) -> Finding {
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

    /// Object members of a parsed document (Foundation's `Any` tree).
    public static func memberCount(_ value: Any) -> Int {
        if let o = value as? [String: Any] { return o.values.reduce(o.count) { $0 + memberCount($1) } }
        if let a = value as? [Any] { return a.reduce(0) { $0 + memberCount($1) } }
        return 0
    }


    /// Object members of a parsed `JSONValue`.
    public static func memberCount(_ value: JSONValue) -> Int {
        switch value {
        case .object(let o): return o.values.reduce(o.count) { $0 + memberCount($1) }
        case .array(let a): return a.reduce(0) { $0 + memberCount($1) }
        default: return 0
        }
    }

    /// Why `what` is refused, for a finding other than `.ok`, phrased for whoever sent it.
    public static func refusal(_ finding: Finding, what: String, limit: Int = maxDepth) -> String? {
        switch finding {
        case .tooDeep: "\(what) is nested more than \(limit) levels deep"
        case .nulEscape: "\(what) contains the escape \\u0000 (NUL), which cannot be stored"
        case .trailingComma: "\(what) has a comma before a closing bracket, which JSON does not allow"
        case .hugeNumber: "\(what) has a number with more than 1000 digits or an exponent beyond ±1000, which cannot be stored"
        case .ok: nil
        }
    }

    /// The same member name twice in an object: JSON readers disagree on which value counts.
    public static func duplicateMemberRefusal(what: String) -> String {
        "\(what) has an object with the same member name twice, which JSON readers resolve differently"
    }
}
