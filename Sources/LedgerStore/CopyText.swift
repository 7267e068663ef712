import Foundation
internal import Postgres

/// Reads rows of `COPY … TO STDOUT` in text format in place: fields are tab-separated, `\N` is
/// NULL, and backslash escapes appear only in text that holds tabs, newlines or backslashes.
///
/// Made for the rebuild's scan of every fact, where parsing rows was the largest client cost: one
/// reader is reused for every row (`split` finds the tabs eight bytes at a time; no per-row
/// allocation), and a repeated text value costs a compare instead of an allocation
/// (`RepeatedText`). Its storage is reached through `let` pointers: no exclusivity or uniqueness
/// checks on the hot path. Not thread-safe: one reader per scan.
final class CopyRowReader {
    let capacity: Int
    private let starts: UnsafeMutablePointer<Int>
    private let ends: UnsafeMutablePointer<Int>
    private let text: RepeatedText
    private var base: UnsafeRawPointer?
    /// Fields of the current row (more than `capacity` are counted, not kept).
    private(set) var count = 0

    /// `columns`: the number of fields a row should have.
    init(columns: Int) {
        capacity = columns
        starts = .allocate(capacity: columns)
        ends = .allocate(capacity: columns)
        text = RepeatedText(columns: columns)
    }

    deinit {
        starts.deallocate()
        ends.deallocate()
    }

    /// Splits one row (a trailing newline is ignored) and returns its field count. The bytes must
    /// stay valid until the next `split`.
    @discardableResult
    func split(_ bytes: UnsafeRawBufferPointer) -> Int {
        count = 0
        guard let base = bytes.baseAddress else { return 0 }
        self.base = base
        var end = bytes.count
        if end > 0 && base.load(fromByteOffset: end - 1, as: UInt8.self) == 0x0A { end -= 1 }
        var fieldStart = 0
        var fields = 0
        // Locals, so the loop keeps them in registers (stores through the pointers could alias
        // the object's fields otherwise).
        let capacity = capacity, starts = starts, ends = ends
        @inline(__always) func tab(at i: Int) {
            if fields < capacity { starts[fields] = fieldStart; ends[fields] = i }
            fields &+= 1
            fieldStart = i &+ 1
        }
        // Eight bytes at a time: a byte of `x ^ 0x09…` is zero exactly where `x` has a tab; the
        // expression below sets the top bit of exactly those bytes (no false positives).
        var i = 0
        let low7: UInt64 = 0x7F7F_7F7F_7F7F_7F7F
        while i &+ 8 <= end {
            let y = UInt64(littleEndian: base.loadUnaligned(fromByteOffset: i, as: UInt64.self)) ^ 0x0909_0909_0909_0909
            var mask = ~(((y & low7) &+ low7) | y | low7)
            while mask != 0 {
                tab(at: i &+ mask.trailingZeroBitCount &>> 3)
                mask &= mask &- 1
            }
            i &+= 8
        }
        while i < end {
            if base.load(fromByteOffset: i, as: UInt8.self) == 0x09 { tab(at: i) }
            i &+= 1
        }
        tab(at: end)
        count = fields
        return fields
    }

    /// Field `i` exactly as sent (still COPY-escaped), nil for NULL.
    @inline(__always)
    func field(_ i: Int) -> UnsafeRawBufferPointer? {
        guard i < count, i < capacity, let base else { return nil }
        let s = starts[i], e = ends[i]
        if e - s == 2 && base.load(fromByteOffset: s, as: UInt8.self) == 0x5C && base.load(fromByteOffset: s + 1, as: UInt8.self) == 0x4E {
            return nil
        }
        return UnsafeRawBufferPointer(start: base + s, count: e - s)
    }

    /// Field `i` exactly as sent (still COPY-escaped), nil for NULL.
    func rawBytes(_ i: Int) -> [UInt8]? { field(i).map { Array($0) } }

    /// Whether field `i` holds exactly `bytes` as sent (still COPY-escaped; false for NULL).
    func equals(_ i: Int, _ other: [UInt8]) -> Bool {
        guard let f = field(i), f.count == other.count else { return false }
        if f.isEmpty { return true }
        return other.withUnsafeBytes { memcmp($0.baseAddress!, f.baseAddress!, f.count) == 0 }
    }

    /// Text field `i` (unescaped), nil for NULL. The same bytes as this column's previous value
    /// give the same String back.
    func string(_ i: Int) -> String? {
        guard let f = field(i) else { return nil }
        return text.string(i, f, decode: Self.unescaped)
    }

    static func unescaped(_ slice: UnsafeRawBufferPointer) -> String {
        guard let base = slice.baseAddress, !slice.isEmpty else { return "" }
        if memchr(base, 0x5C, slice.count) == nil { return String(decoding: slice, as: UTF8.self) }
        var out: [UInt8] = []
        out.reserveCapacity(slice.count)
        var k = slice.startIndex
        while k < slice.endIndex {
            let b = slice[k]
            if b == 0x5C, k + 1 < slice.endIndex {
                switch slice[k + 1] {
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "v"): out.append(0x0B)
                case let n: out.append(n)
                }
                k += 2
            } else {
                out.append(b)
                k += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// A decimal integer column (bigint, smallint, integer); nil for NULL or anything else.
    func integer(_ i: Int) -> Int64? {
        guard let f = field(i), !f.isEmpty else { return nil }
        let p = f.baseAddress!.assumingMemoryBound(to: UInt8.self)
        let negative = p[0] == UInt8(ascii: "-")
        var k = negative ? 1 : 0
        let n = f.count
        if k == n { return nil }
        // Up to 18 digits cannot overflow: no checks per digit (times are 13 digits).
        guard n - k <= 18 else { return Self.checkedInteger(f) }
        var value: Int64 = 0
        while k < n {
            let d = p[k] &- 0x30
            guard d < 10 else { return nil }
            value = value &* 10 &+ Int64(d)
            k += 1
        }
        return negative ? -value : value
    }

    private static func checkedInteger(_ f: UnsafeRawBufferPointer) -> Int64? {
        var k = 0
        var negative = false
        if f[0] == UInt8(ascii: "-") { negative = true; k = 1 }
        if k == f.count { return nil }
        var value: Int64 = 0
        while k < f.count {
            let d = f[k] &- 0x30
            guard d < 10 else { return nil }
            let (m, o1) = value.multipliedReportingOverflow(by: 10)
            let (a, o2) = m.addingReportingOverflow(Int64(d))
            if o1 || o2 { return nil }
            value = a
            k += 1
        }
        return negative ? -value : value
    }

    /// A boolean column (`t` / `f`).
    func bool(_ i: Int) -> Bool? {
        guard let f = field(i), f.count == 1 else { return nil }
        if f[0] == UInt8(ascii: "t") { return true }
        if f[0] == UInt8(ascii: "f") { return false }
        return nil
    }
}

/// Writing COPY text fields: `\N` for NULL, backslash, tab, newline and carriage return escaped.
/// Every projection row a rebuild writes goes through these (millions of fields), so each writes
/// its bytes with one append where it can.
extension [UInt8] {
    @inline(__always)
    mutating func endField(_ last: Bool) { append(last ? 0x0A : 0x09) }

    @inline(__always)
    mutating func appendNull() {
        append(0x5C)
        append(0x4E)
    }

    mutating func field(_ value: String?, last: Bool = false) {
        defer { endField(last) }
        guard let value else { appendNull(); return }
        let whole = value.utf8.withContiguousStorageIfAvailable { bytes -> Bool in
            // Almost no value needs escaping: copy it whole unless it holds one of the four bytes
            // (tested as "≤ 0x0D or a backslash": the rare other control bytes take the slow path,
            // which copies them unchanged).
            for byte in bytes where byte <= 0x0D || byte == 0x5C { return false }
            append(contentsOf: bytes)
            return true
        }
        if whole == true { return }
        for byte in value.utf8 {
            switch byte {
            case 0x5C: append(0x5C); append(0x5C)
            case 0x09: append(0x5C); append(UInt8(ascii: "t"))
            case 0x0A: append(0x5C); append(UInt8(ascii: "n"))
            case 0x0D: append(0x5C); append(UInt8(ascii: "r"))
            default: append(byte)
            }
        }
    }

    mutating func field(_ value: Int64?, last: Bool = false) {
        defer { endField(last) }
        guard let value else { appendNull(); return }
        // Digits written backwards into a stack buffer, then appended at once.
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)
        Swift.withUnsafeMutableBytes(of: &digits) { buffer in
            var magnitude = value.magnitude
            var i = buffer.count
            repeat {
                i -= 1
                buffer[i] = UInt8(truncatingIfNeeded: magnitude % 10) &+ 0x30
                magnitude /= 10
            } while magnitude > 0
            if value < 0 {
                i -= 1
                buffer[i] = UInt8(ascii: "-")
            }
            append(contentsOf: UnsafeRawBufferPointer(rebasing: buffer[i...]))
        }
    }

    mutating func field(_ value: Int?, last: Bool = false) {
        field(value.map(Int64.init), last: last)
    }

    /// A bytea in COPY text: the hex format `\x…`, its backslash doubled by COPY's own escaping.
    mutating func field(bytea value: Data, last: Bool = false) {
        append(0x5C)
        append(0x5C)
        append(UInt8(ascii: "x"))
        for byte in value {
            append(Self.hexDigits[Int(byte >> 4)])
            append(Self.hexDigits[Int(byte & 0x0F)])
        }
        endField(last)
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    mutating func field(_ value: Bool?, last: Bool = false) {
        defer { endField(last) }
        guard let value else { appendNull(); return }
        append(value ? UInt8(ascii: "t") : UInt8(ascii: "f"))
    }
}
