import Foundation

/// Hands the same String out again when a column's bytes repeat from one row to the next.
///
/// A read of many rows of one subscription repeats its stream, subscription, product, bundle,
/// currency, customer and message row after row. Decoded afresh, each would be an allocation of
/// its own that lives as long as the value read, and a fold snapshot holds hundreds of thousands
/// of facts. Remembered per column, a repeat costs a compare and shares one String. Used by a
/// result's rows (`Row.string(at:repeating:)`) and by the rebuild's COPY reader. Not thread-safe:
/// one per read.
public final class RepeatedText {
    /// Values longer than this are not remembered (none of the repeated columns comes near).
    public static let slot = 128

    public let columns: Int
    private let bytes: UnsafeMutablePointer<UInt8>
    /// Length of each column's remembered bytes; -1 when nothing is remembered.
    private let counts: UnsafeMutablePointer<Int>
    private let values: UnsafeMutablePointer<String>

    public init(columns: Int) {
        self.columns = columns
        bytes = .allocate(capacity: columns * Self.slot)
        counts = .allocate(capacity: columns)
        counts.initialize(repeating: -1, count: columns)
        values = .allocate(capacity: columns)
        values.initialize(repeating: "", count: columns)
    }

    deinit {
        bytes.deallocate()
        counts.deallocate()
        values.deinitialize(count: columns)
        values.deallocate()
    }

    /// Column `column`'s text from `raw` (as sent; `decode` turns it into the String): the String
    /// handed out last for this column when `raw` is the same bytes.
    @inline(__always)
    public func string(_ column: Int, _ raw: UnsafeRawBufferPointer, decode: (UnsafeRawBufferPointer) -> String) -> String {
        guard column >= 0, column < columns, raw.count <= Self.slot else { return decode(raw) }
        let remembered = bytes + column * Self.slot
        if counts[column] == raw.count && (raw.isEmpty || memcmp(remembered, raw.baseAddress!, raw.count) == 0) {
            return values[column]
        }
        let value = decode(raw)
        if !raw.isEmpty { remembered.update(from: raw.baseAddress!.assumingMemoryBound(to: UInt8.self), count: raw.count) }
        counts[column] = raw.count
        values[column] = value
        return value
    }
}

extension Row {
    /// A text column (nil for NULL), the same String as the previous row's when the bytes repeat.
    /// Other types decode as `decode(String?.self, at:)` does.
    public func string(at column: Int, repeating text: RepeatedText) throws(PostgresError) -> String? {
        guard let cell = try cell(at: column) else { return nil }
        guard cell.type.isPlainText else { return try decode(String.self, at: column) }
        return text.string(column, cell.bytes) { String(decoding: $0, as: UTF8.self) }
    }
}
