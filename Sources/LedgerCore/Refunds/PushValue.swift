import Foundation

/// A decoded WeChat push message (or any JSON value) kept as a tree, so that the same message in
/// the XML and the JSON push format reaches the domain through one type.
///
/// XML carries only text: a value parsed from XML is `.string` even where the JSON format has a
/// number, so every accessor here accepts both spellings (`int64("CreateTime")` reads `1714112445`
/// and `"1714112445"` alike).
public indirect enum PushValue: Sendable, Equatable, Codable {
    case null
    case bool(Bool)
    case integer(Int64)
    case number(Double)
    case string(String)
    case array([PushValue])
    case object([String: PushValue])

    public init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() { self = .null; return }
        if let b = try? c.decode(Bool.self) { self = .bool(b); return }
        if let i = try? c.decode(Int64.self) { self = .integer(i); return }
        if let d = try? c.decode(Double.self) { self = .number(d); return }
        if let s = try? c.decode(String.self) { self = .string(s); return }
        if let a = try? c.decode([PushValue].self) { self = .array(a); return }
        self = .object(try c.decode([String: PushValue].self))
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
    public subscript(key: String) -> PushValue? {
        if case .object(let o) = self { return o[key] }
        return nil
    }

    public var objectValue: [String: PushValue]? {
        if case .object(let o) = self { return o }
        return nil
    }

    public var arrayValue: [PushValue]? {
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

    /// Compact JSON with sorted keys and unescaped slashes: the same tree always gives the same
    /// bytes, which is what dedupe hashes and stored evidence need.
    public func canonicalJSON() -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Encoding a tree of plain values cannot fail (no non-finite doubles reach here from JSON
        // text); fall back to `null` rather than trap if one ever does.
        return (try? encoder.encode(self)) ?? Data("null".utf8)
    }

    /// The tree without the given top-level members (e.g. the retry counter before hashing).
    public func removing(_ keys: Set<String>) -> PushValue {
        guard case .object(let o) = self else { return self }
        return .object(o.filter { !keys.contains($0.key) })
    }
}
