import Foundation

/// One row of `COPY … TO STDOUT` in text format, read in place: fields are tab-separated, `\N` is
/// NULL, and backslash escapes appear only in text that holds tabs, newlines or backslashes.
struct CopyText {
    let bytes: UnsafeRawBufferPointer
    /// Start and end offset of each field; start < 0 for NULL.
    var bounds: [(Int, Int)]

    init(bytes: UnsafeRawBufferPointer, reuse: [(Int, Int)]) {
        self.bytes = bytes
        var bounds = reuse
        bounds.removeAll(keepingCapacity: true)
        var end = bytes.count
        if end > 0 && bytes[end - 1] == 0x0A { end -= 1 }
        var start = 0
        // memchr finds the tabs: scanning byte by byte was the rebuild's largest client cost.
        if let base = bytes.baseAddress {
            while start <= end {
                let found = end > start ? memchr(base + start, 0x09, end - start) : nil
                let i = found.map { base.distance(to: UnsafeRawPointer($0)) } ?? end
                if i - start == 2 && bytes[start] == 0x5C && bytes[start + 1] == 0x4E {
                    bounds.append((-1, -1))
                } else {
                    bounds.append((start, i))
                }
                start = i + 1
            }
        }
        self.bounds = bounds
    }

    var count: Int { bounds.count }

    /// Field `i` exactly as sent (still COPY-escaped), nil for NULL.
    func rawBytes(_ i: Int) -> [UInt8]? { field(i).map { Array($0) } }

    /// Whether field `i` holds exactly `bytes` as sent (still COPY-escaped; false for NULL).
    func equals(_ i: Int, _ other: [UInt8]) -> Bool {
        guard let f = field(i), f.count == other.count else { return false }
        return other.withUnsafeBytes { memcmp($0.baseAddress!, f.baseAddress!, f.count) == 0 }
    }

    private func field(_ i: Int) -> UnsafeRawBufferPointer? {
        let (s, e) = bounds[i]
        return s < 0 ? nil : UnsafeRawBufferPointer(rebasing: bytes[s..<e])
    }

    func string(_ i: Int) -> String? {
        guard let slice = field(i) else { return nil }
        if !slice.contains(0x5C) { return String(decoding: slice, as: UTF8.self) }
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

    /// A decimal integer column (bigint, smallint, integer).
    func integer(_ i: Int) -> Int64? {
        guard let f = field(i), !f.isEmpty else { return nil }
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
extension [UInt8] {
    mutating func endField(_ last: Bool) { append(last ? 0x0A : 0x09) }

    mutating func field(_ value: String?, last: Bool = false) {
        defer { endField(last) }
        guard var value else { append(0x5C); append(0x4E); return }
        value.withUTF8 { bytes in
            // Almost no value needs escaping: copy it whole unless it holds one of the four bytes.
            if !bytes.contains(where: { $0 == 0x5C || $0 == 0x09 || $0 == 0x0A || $0 == 0x0D }) {
                append(contentsOf: bytes)
                return
            }
            for byte in bytes {
                switch byte {
                case 0x5C: append(0x5C); append(0x5C)
                case 0x09: append(0x5C); append(UInt8(ascii: "t"))
                case 0x0A: append(0x5C); append(UInt8(ascii: "n"))
                case 0x0D: append(0x5C); append(UInt8(ascii: "r"))
                default: append(byte)
                }
            }
        }
    }

    mutating func field(_ value: Int64?, last: Bool = false) {
        defer { endField(last) }
        guard let value else { append(0x5C); append(0x4E); return }
        if value < 0 { append(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        let first = count
        repeat {
            append(UInt8(truncatingIfNeeded: magnitude % 10) + 0x30)
            magnitude /= 10
        } while magnitude > 0
        self[first...].reverse()
    }

    mutating func field(_ value: Int?, last: Bool = false) {
        field(value.map(Int64.init), last: last)
    }

    mutating func field(_ value: Bool?, last: Bool = false) {
        defer { endField(last) }
        guard let value else { append(0x5C); append(0x4E); return }
        append(value ? UInt8(ascii: "t") : UInt8(ascii: "f"))
    }
}
