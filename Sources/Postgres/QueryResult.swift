internal import CLibPQ
import Foundation

/// The rows of one statement, decoded on demand from PostgreSQL's binary format. Owns the libpq
/// result and frees it when the last reference goes; use it on the thread that ran the query.
public final class QueryResult {
    let result: OpaquePointer
    let statement: String
    /// Rows the statement touched (`INSERT`, `UPDATE`, …) or returned.
    public let affectedRows: Int
    public let count: Int
    public let columnNames: [String]
    let columnTypes: [PostgresType]

    init(result: OpaquePointer, statement: String) {
        self.result = result
        self.statement = statement
        count = Int(PQntuples(result))
        let fields = Int(PQnfields(result))
        columnNames = (0..<fields).map { String(cString: PQfname(result, Int32($0))) }
        columnTypes = (0..<fields).map { PostgresType(oid: PQftype(result, Int32($0))) }
        affectedRows = Int(String(cString: PQcmdTuples(result))) ?? 0
    }

    deinit { PQclear(result) }

    public var rows: Rows { Rows(result: self) }

    /// The first row, or nil when there is none.
    public var first: Row? { count > 0 ? Row(result: self, index: 0) : nil }

    func columnIndex(_ name: String) throws(PostgresError) -> Int {
        if let index = columnNames.firstIndex(of: name) { return index }
        throw PostgresError(.decoding, "no column named \(name) in the result (columns: \(columnNames.joined(separator: ", ")))", statement: statement, column: name)
    }

    public struct Rows: RandomAccessCollection {
        let result: QueryResult
        public var startIndex: Int { 0 }
        public var endIndex: Int { result.count }
        public subscript(position: Int) -> Row { Row(result: result, index: position) }
    }
}

/// One row of a `QueryResult`.
public struct Row {
    let result: QueryResult
    public let index: Int

    /// Decodes the named column; ask for an Optional when the column may be NULL.
    public func decode<T: PostgresDecodable>(_ type: T.Type = T.self, _ column: String) throws(PostgresError) -> T {
        try decode(type, at: result.columnIndex(column))
    }

    public func decode<T: PostgresDecodable>(_ type: T.Type = T.self, at column: Int) throws(PostgresError) -> T {
        guard let cell = try cell(at: column) else { return try T.decodeNull(column: result.columnNames[column]) }
        do {
            return try T.decode(cell)
        } catch var error {
            error.statement = error.statement ?? result.statement
            throw error
        }
    }

    /// The value at `column` as it came off the wire; nil for NULL.
    func cell(at column: Int) throws(PostgresError) -> PostgresCell? {
        guard column >= 0, column < result.columnNames.count else {
            throw PostgresError(.decoding, "column index \(column) is out of range (the result has \(result.columnNames.count) columns)", statement: result.statement)
        }
        let res = result.result
        if PQgetisnull(res, Int32(index), Int32(column)) == 1 { return nil }
        guard let pointer = PQgetvalue(res, Int32(index), Int32(column)) else { return nil }
        let bytes = UnsafeRawBufferPointer(start: UnsafeRawPointer(pointer), count: Int(PQgetlength(res, Int32(index), Int32(column))))
        return PostgresCell(bytes: bytes, type: result.columnTypes[column], column: result.columnNames[column])
    }
}

/// A non-NULL value as it came off the wire: binary bytes plus the column's type.
public struct PostgresCell {
    public let bytes: UnsafeRawBufferPointer
    public let type: PostgresType
    public let column: String

    func mismatch(_ swiftType: String) -> PostgresError {
        PostgresError(.decoding, "column \(column) is \(type), which does not decode as \(swiftType); change the Swift type or cast the column in the SQL", column: column)
    }

    func integer<T: FixedWidthInteger>(_: T.Type) -> T {
        var value: T = 0
        for byte in bytes { value = (value << 8) | T(truncatingIfNeeded: byte) }
        return value
    }

    func utf8String() -> String { String(decoding: bytes, as: UTF8.self) }
}

extension PostgresType {
    /// Types whose binary value is their UTF-8 text as it is.
    var isPlainText: Bool { self == .text || self == .varchar || self == .bpchar || self == .name || self == .json || self == .unknown }
}

/// A Swift type that can be read from a binary-format PostgreSQL value.
public protocol PostgresDecodable {
    static func decode(_ cell: PostgresCell) throws(PostgresError) -> Self
    /// What a SQL NULL becomes: an error for plain types, nil for Optionals.
    static func decodeNull(column: String) throws(PostgresError) -> Self
}

extension PostgresDecodable {
    public static func decodeNull(column: String) throws(PostgresError) -> Self {
        throw PostgresError(.decoding, "column \(column) is NULL but \(Self.self) was requested; decode it as \(Self.self)? instead", column: column)
    }
}

extension Optional: PostgresDecodable where Wrapped: PostgresDecodable {
    public static func decode(_ cell: PostgresCell) throws(PostgresError) -> Wrapped? { try Wrapped.decode(cell) }
    public static func decodeNull(column: String) throws(PostgresError) -> Wrapped? { nil }
}

extension Int64: PostgresDecodable {
    /// Integers of any width; a timestamptz decodes as milliseconds since the Unix epoch, the unit
    /// the ledger uses for every time.
    public static func decode(_ cell: PostgresCell) throws(PostgresError) -> Int64 {
        switch (cell.type, cell.bytes.count) {
        case (.int8, 8): return cell.integer(Int64.self)
        case (.int4, 4), (.oidType, 4): return Int64(cell.integer(Int32.self))
        case (.int2, 2): return Int64(cell.integer(Int16.self))
        case (.timestamptz, 8), (.timestamp, 8):
            let micros = cell.integer(Int64.self)
            if micros == .max || micros == .min {
                throw PostgresError(.decoding, "column \(cell.column) is an infinite timestamp, which has no epoch value", column: cell.column)
            }
            let millis = micros >= 0 ? micros / 1000 : (micros - 999) / 1000
            return millis + PostgresEpoch.unixMillis
        default: throw cell.mismatch("Int64")
        }
    }
}

extension Int: PostgresDecodable {
    public static func decode(_ cell: PostgresCell) throws(PostgresError) -> Int { Int(try Int64.decode(cell)) }
}

extension Int32: PostgresDecodable {
    public static func decode(_ cell: PostgresCell) throws(PostgresError) -> Int32 {
        switch (cell.type, cell.bytes.count) {
        case (.int4, 4): return cell.integer(Int32.self)
        case (.int2, 2): return Int32(cell.integer(Int16.self))
        default: throw cell.mismatch("Int32")
        }
    }
}

extension Bool: PostgresDecodable {
    public static func decode(_ cell: PostgresCell) throws(PostgresError) -> Bool {
        guard cell.type == .bool, cell.bytes.count == 1 else { throw cell.mismatch("Bool") }
        return cell.bytes[0] != 0
    }
}

extension Double: PostgresDecodable {
    public static func decode(_ cell: PostgresCell) throws(PostgresError) -> Double {
        switch (cell.type, cell.bytes.count) {
        case (.float8, 8): return Double(bitPattern: cell.integer(UInt64.self))
        case (.float4, 4): return Double(Float(bitPattern: cell.integer(UInt32.self)))
        default: throw cell.mismatch("Double")
        }
    }
}

extension String: PostgresDecodable {
    /// Text-like columns, json/jsonb as their JSON text, and uuid in its canonical form.
    public static func decode(_ cell: PostgresCell) throws(PostgresError) -> String {
        switch cell.type {
        case _ where cell.type.isPlainText:
            return cell.utf8String()
        case .jsonb:
            guard cell.bytes.first == 1 else { throw cell.mismatch("String (unknown jsonb version)") }
            return String(decoding: UnsafeRawBufferPointer(rebasing: cell.bytes.dropFirst()), as: UTF8.self)
        case .uuid where cell.bytes.count == 16:
            let hex = cell.bytes.map { String($0, radix: 16).leftPadded(to: 2) }
            return [hex[0..<4], hex[4..<6], hex[6..<8], hex[8..<10], hex[10..<16]].map { $0.joined() }.joined(separator: "-")
        default:
            throw cell.mismatch("String")
        }
    }
}

extension Data: PostgresDecodable {
    /// bytea exactly as stored; json/jsonb as UTF-8 JSON text; text as its UTF-8 bytes.
    public static func decode(_ cell: PostgresCell) throws(PostgresError) -> Data {
        switch cell.type {
        case .bytea, .text, .varchar, .json:
            return Data(cell.bytes)
        case .jsonb:
            guard cell.bytes.first == 1 else { throw cell.mismatch("Data (unknown jsonb version)") }
            return Data(cell.bytes.dropFirst())
        default:
            throw cell.mismatch("Data")
        }
    }
}

extension Date: PostgresDecodable {
    public static func decode(_ cell: PostgresCell) throws(PostgresError) -> Date {
        guard cell.type == .timestamptz || cell.type == .timestamp else { throw cell.mismatch("Date") }
        guard cell.bytes.count == 8 else { throw cell.mismatch("Date") }
        let micros = cell.integer(Int64.self)
        if micros == .max { return .distantFuture }
        if micros == .min { return .distantPast }
        return Date(timeIntervalSince1970: Double(micros) / 1_000_000 + Double(PostgresEpoch.unixMillis) / 1000)
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
