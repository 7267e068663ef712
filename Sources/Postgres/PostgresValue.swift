import Foundation

/// A PostgreSQL type as the protocol names it (its OID). Only the types the wrapper can encode or
/// decode in binary are listed; anything else can be cast to `text` in the SQL.
public struct PostgresType: Sendable, Hashable, CustomStringConvertible {
    public let oid: UInt32
    public init(oid: UInt32) { self.oid = oid }

    public static let unknown = PostgresType(oid: 0)
    public static let bool = PostgresType(oid: 16)
    public static let bytea = PostgresType(oid: 17)
    public static let name = PostgresType(oid: 19)
    public static let int8 = PostgresType(oid: 20)
    public static let int2 = PostgresType(oid: 21)
    public static let int4 = PostgresType(oid: 23)
    public static let text = PostgresType(oid: 25)
    public static let oidType = PostgresType(oid: 26)
    public static let json = PostgresType(oid: 114)
    public static let float4 = PostgresType(oid: 700)
    public static let float8 = PostgresType(oid: 701)
    public static let bpchar = PostgresType(oid: 1042)
    public static let varchar = PostgresType(oid: 1043)
    public static let timestamp = PostgresType(oid: 1114)
    public static let timestamptz = PostgresType(oid: 1184)
    public static let uuid = PostgresType(oid: 2950)
    public static let jsonb = PostgresType(oid: 3802)

    /// The array type whose elements are `self`, for the element types this wrapper sends in arrays.
    var arrayType: PostgresType? {
        switch oid {
        case 16: return PostgresType(oid: 1000)
        case 17: return PostgresType(oid: 1001)
        case 20: return PostgresType(oid: 1016)
        case 23: return PostgresType(oid: 1007)
        case 25: return PostgresType(oid: 1009)
        case 701: return PostgresType(oid: 1022)
        case 1184: return PostgresType(oid: 1185)
        case 3802: return PostgresType(oid: 3807)
        default: return nil
        }
    }

    public var description: String {
        switch oid {
        case 16: return "bool"
        case 17: return "bytea"
        case 19: return "name"
        case 20: return "bigint"
        case 21: return "smallint"
        case 23: return "integer"
        case 25: return "text"
        case 26: return "oid"
        case 114: return "json"
        case 700: return "real"
        case 701: return "double precision"
        case 1042: return "character"
        case 1043: return "varchar"
        case 1114: return "timestamp"
        case 1184: return "timestamptz"
        case 2950: return "uuid"
        case 3802: return "jsonb"
        default: return "type oid \(oid)"
        }
    }
}

/// A statement parameter. Values travel separately from the SQL text (never spliced into it), in
/// PostgreSQL's binary format so bytes such as `bytea` arrive exactly as given.
public enum PostgresValue: Sendable, Equatable {
    case null
    case bool(Bool)
    case int32(Int32)
    case int64(Int64)
    case double(Double)
    case text(String)
    case bytea(Data)
    /// UTF-8 JSON text; the server validates it and refuses invalid JSON with SQLSTATE 22P02.
    case jsonb(Data)
    /// Milliseconds since the Unix epoch.
    case timestamptz(millis: Int64)
    /// A one-dimensional array; elements must be `.null` or of `elementType`.
    indirect case array([PostgresValue], of: PostgresType)

    public static func timestamptz(_ date: Date) -> PostgresValue {
        .timestamptz(millis: Int64((date.timeIntervalSince1970 * 1000).rounded(.down)))
    }

    public static func optional(_ value: String?) -> PostgresValue { value.map { .text($0) } ?? .null }
    public static func optional(_ value: Int64?) -> PostgresValue { value.map { .int64($0) } ?? .null }

    /// The type OID sent with the parameter; `.null` lets the server infer it from context.
    var type: PostgresType {
        switch self {
        case .null: return .unknown
        case .bool: return .bool
        case .int32: return .int4
        case .int64: return .int8
        case .double: return .float8
        case .text: return .text
        case .bytea: return .bytea
        case .jsonb: return .jsonb
        case .timestamptz: return .timestamptz
        case .array(_, let element): return element.arrayType ?? .unknown
        }
    }

    /// Appends the binary wire form (without length prefix) to `out`.
    func encode(into out: inout [UInt8]) throws(PostgresError) {
        switch self {
        case .null:
            break
        case .bool(let v): out.append(v ? 1 : 0)
        case .int32(let v): out.appendBigEndian(UInt32(bitPattern: v))
        case .int64(let v): out.appendBigEndian(UInt64(bitPattern: v))
        case .double(let v): out.appendBigEndian(v.bitPattern)
        case .text(let s):
            if s.utf8.contains(0) {
                throw PostgresError(.invalidArgument, "text parameters cannot contain NUL (0x00); PostgreSQL text cannot store it, send the value as bytea")
            }
            var text = s
            text.withUTF8 { out.append(contentsOf: $0) }
        case .bytea(let d): d.withUnsafeBytes { out.append(contentsOf: $0) }
        case .jsonb(let d):
            out.append(1)  // jsonb binary format version
            d.withUnsafeBytes { out.append(contentsOf: $0) }
        case .timestamptz(let millis):
            let (micros, overflow) = (millis &- PostgresEpoch.unixMillis).multipliedReportingOverflow(by: 1000)
            if overflow { throw PostgresError(.invalidArgument, "timestamp \(millis) ms is outside PostgreSQL's range") }
            out.appendBigEndian(UInt64(bitPattern: micros))
        case .array(let elements, let elementType):
            guard elementType.arrayType != nil else {
                throw PostgresError(.invalidArgument, "arrays of \(elementType) are not supported; use bool, bytea, bigint, integer, text, double precision, timestamptz or jsonb")
            }
            let hasNull = elements.contains(.null)
            out.appendBigEndian(UInt32(1))  // dimensions
            out.appendBigEndian(UInt32(hasNull ? 1 : 0))
            out.appendBigEndian(elementType.oid)
            out.appendBigEndian(UInt32(elements.count))
            out.appendBigEndian(UInt32(1))  // lower bound
            for element in elements {
                if element == .null {
                    out.appendBigEndian(UInt32(bitPattern: -1))
                    continue
                }
                guard element.type == elementType else {
                    throw PostgresError(.invalidArgument, "array of \(elementType) holds a \(element.type) element")
                }
                let lengthAt = out.count
                out.appendBigEndian(UInt32(0))
                try element.encode(into: &out)
                let length = UInt32(out.count - lengthAt - 4)
                out[lengthAt] = UInt8(length >> 24)
                out[lengthAt + 1] = UInt8((length >> 16) & 0xff)
                out[lengthAt + 2] = UInt8((length >> 8) & 0xff)
                out[lengthAt + 3] = UInt8(length & 0xff)
            }
        }
    }
}

extension PostgresValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral, ExpressibleByNilLiteral {
    public init(stringLiteral value: String) { self = .text(value) }
    public init(integerLiteral value: Int64) { self = .int64(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(nilLiteral: ()) { self = .null }
}

/// PostgreSQL counts timestamps in microseconds from 2000-01-01 00:00 UTC.
enum PostgresEpoch {
    static let unixMillis: Int64 = 946_684_800_000
}

extension Array where Element == UInt8 {
    @inline(__always)
    mutating func appendBigEndian<T: FixedWidthInteger>(_ value: T) {
        var big = value.bigEndian
        Swift.withUnsafeBytes(of: &big) { append(contentsOf: $0) }
    }
}
