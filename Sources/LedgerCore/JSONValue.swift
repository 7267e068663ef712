import Foundation

/// The ledger's one JSON value type: every JSON document the ledger builds (answers, its own
/// events, evidence, canonical forms for hashing) is a `JSONValue` written by `canonicalJSON()`,
/// and decoded messages (a WeChat push in JSON or XML, stored payloads) are read through it too.
///
/// XML carries only text: a value parsed from XML is `.string` even where the JSON format has a
/// number, so every accessor here accepts both spellings (`int64("CreateTime")` reads `1714112445`
/// and `"1714112445"` alike).
public indirect enum JSONValue: Sendable, Equatable, Codable {
    case null
    case bool(Bool)
    case integer(Int64)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() { self = .null; return }
        if let b = try? c.decode(Bool.self) { self = .bool(b); return }
        if let i = try? c.decode(Int64.self) { self = .integer(i); return }
        if let d = try? c.decode(Double.self) { self = .number(d); return }
        if let s = try? c.decode(String.self) { self = .string(s); return }
        if let a = try? c.decode([JSONValue].self) { self = .array(a); return }
        self = .object(try c.decode([String: JSONValue].self))
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        switch self {
        case .null: try c.encodeNil()
        case .bool(let b): try c.encode(b)
        case .integer(let i): try c.encode(i)
        case .number(let d): try c.encode(d)
        case .string(let s): try c.encode(s)
        case .array(let a): try c.encode(a)
        case .object(let o): try c.encode(o)
        }
    }

    /// The member `key` of an object, nil for anything else.
    public subscript(key: String) -> JSONValue? {
        if case .object(let o) = self { return o[key] }
        return nil
    }

    public var objectValue: [String: JSONValue]? {
        if case .object(let o) = self { return o }
        return nil
    }

    public var arrayValue: [JSONValue]? {
        if case .array(let a) = self { return a }
        return nil
    }

    /// Text of a string or integer value; nil for objects, arrays, null and empty strings.
    public var text: String? {
        switch self {
        case .string(let s): return s.isEmpty ? nil : s
        case .integer(let i): return String(i)
        case .bool(let b): return b ? "true" : "false"
        case .number(let d) where d.isFinite && d == d.rounded() && abs(d) < 9.2e18: return String(Int64(d))
        default: return nil
        }
    }

    /// An integer from a JSON number or from decimal text (XML, or the all-string refund inquiry).
    public var int64: Int64? {
        switch self {
        case .integer(let i): return i
        case .number(let d) where d.isFinite && d == d.rounded() && abs(d) < 9.2e18: return Int64(d)
        case .string(let s): return Int64(s.trimmingCharacters(in: .whitespacesAndNewlines))
        default: return nil
        }
    }

    public func text(_ key: String) -> String? { self[key]?.text }
    public func int64(_ key: String) -> Int64? { self[key]?.int64 }

    /// Compact JSON with keys sorted by code point and slashes unescaped: the same tree always
    /// gives the same bytes, which is what dedupe hashes and stored evidence need. Byte for byte
    /// what `JSONEncoder` with `.sortedKeys, .withoutEscapingSlashes` writes (stored dedupe keys
    /// hash it; a test pins the equivalence), written directly on bytes: JSONEncoder costs a
    /// container per value, and JSONSerialization's sorted keys compare with ICU on Linux.
    public func canonicalJSON() -> Data {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        write(to: &out)
        return Data(out)
    }

    /// `canonicalJSON()` appended to `out`.
    public func write(to out: inout [UInt8]) {
        switch self {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let b): out.append(contentsOf: (b ? "true" : "false").utf8)
        case .integer(let i): Self.writeInteger(i, to: &out)
        case .number(let d):
            guard d.isFinite else { out.append(contentsOf: "null".utf8); return }
            var text = d.description
            if text.hasSuffix(".0") { text.removeLast(2) }
            out.append(contentsOf: text.utf8)
        case .string(let s): Self.writeString(s, to: &out)
        case .array(let a):
            out.append(UInt8(ascii: "["))
            for (i, v) in a.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                v.write(to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let o):
            out.append(UInt8(ascii: "{"))
            // Code-point order is UTF-8 byte order. The members are sorted as pairs (no second
            // lookup per key) with a byte comparison (the generic UTF8View one was a tenth of a
            // read's answer time).
            let members = o.sorted { Self.utf8Precedes($0.key, $1.key) }
            for (i, member) in members.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                Self.writeString(member.key, to: &out)
                out.append(UInt8(ascii: ":"))
                member.value.write(to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    private static let hex = Array("0123456789abcdef".utf8)

    /// `a` before `b` in UTF-8 byte (= code point) order.
    public static func utf8Precedes(_ a: String, _ b: String) -> Bool {
        var a = a, b = b
        return a.withUTF8 { x in
            b.withUTF8 { y in
                let n = Swift.min(x.count, y.count)
                if n > 0, let xp = x.baseAddress, let yp = y.baseAddress {
                    let c = memcmp(xp, yp, n)
                    if c != 0 { return c < 0 }
                }
                return x.count < y.count
            }
        }
    }

    /// Decimal digits, as `String(i)` writes them, without the intermediate String.
    public static func writeInteger(_ i: Int64, to out: inout [UInt8]) {
        if i == 0 { out.append(UInt8(ascii: "0")); return }
        var magnitude = i.magnitude
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes: Int64's 20 digits fit
        var count = 0
        withUnsafeMutableBytes(of: &digits) { buffer in
            while magnitude > 0 {
                buffer[23 - count] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
                count += 1
            }
            if i < 0 { out.append(UInt8(ascii: "-")) }
            out.append(contentsOf: UnsafeRawBufferPointer(rebasing: buffer[(24 - count)...]))
        }
    }

    public static func writeString(_ s: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        var s = s
        s.withUTF8 { bytes in
            // Most strings need no escape: copy them whole.
            if !bytes.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
                out.append(contentsOf: bytes)
                return
            }
            for b in bytes {
                switch b {
                case UInt8(ascii: "\""): out.append(contentsOf: [0x5C, 0x22])
                case UInt8(ascii: "\\"): out.append(contentsOf: [0x5C, 0x5C])
                case 0x08: out.append(contentsOf: [0x5C, UInt8(ascii: "b")])
                case 0x09: out.append(contentsOf: [0x5C, UInt8(ascii: "t")])
                case 0x0A: out.append(contentsOf: [0x5C, UInt8(ascii: "n")])
                case 0x0C: out.append(contentsOf: [0x5C, UInt8(ascii: "f")])
                case 0x0D: out.append(contentsOf: [0x5C, UInt8(ascii: "r")])
                case 0..<0x20:
                    out.append(contentsOf: [0x5C, UInt8(ascii: "u"), 0x30, 0x30, hex[Int(b >> 4)], hex[Int(b & 0x0F)]])
                default: out.append(b)
                }
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// Parses JSON text (a document of any type).
    public init(json: Data) throws {
        self = try JSONDecoder().decode(JSONValue.self, from: json)
    }

    /// `.string`, or `.null` for nil.
    public static func optional(_ s: String?) -> JSONValue { s.map(JSONValue.string) ?? .null }
    /// `.integer`, or `.null` for nil.
    public static func optional(_ i: Int64?) -> JSONValue { i.map(JSONValue.integer) ?? .null }
    public static func optional(_ i: Int?) -> JSONValue { i.map { .integer(Int64($0)) } ?? .null }
    public static func optional(_ b: Bool?) -> JSONValue { b.map(JSONValue.bool) ?? .null }

    /// The tree without the given top-level members (e.g. the retry counter before hashing).
    public func removing(_ keys: Set<String>) -> JSONValue {
        guard case .object(let o) = self else { return self }
        return .object(o.filter { !keys.contains($0.key) })
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral {
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .integer(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
    public init(nilLiteral: ()) { self = .null }
}
