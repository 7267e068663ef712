/// A small, fast, seedable PRNG (Steele, Lea & Flood's SplitMix64): the same seed gives the
/// same sequence on every platform and toolchain, so a failing generated case can be replayed
/// from the seed a test prints. Not for anything secret.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    public private(set) var state: UInt64

    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        return Self.mix(state)
    }

    /// The SplitMix64 finaliser; also used to derive independent sub-seeds.
    public static func mix(_ value: UInt64) -> UInt64 {
        var z = value
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// Uniform in `range` (both ends included).
    public mutating func int(in range: ClosedRange<Int64>) -> Int64 {
        let span = UInt64(bitPattern: range.upperBound &- range.lowerBound) &+ 1
        if span == 0 { return Int64(bitPattern: next()) }
        return range.lowerBound &+ Int64(bitPattern: next() % span)
    }

    /// True with probability `p`.
    public mutating func chance(_ p: Double) -> Bool {
        Double(next() >> 11) * 0x1.0p-53 < p
    }

    public mutating func pick<T>(_ items: [T]) -> T {
        items[Int(next() % UInt64(items.count))]
    }

    /// A random UUID-shaped string (version 4 layout), deterministic from the sequence.
    public mutating func uuid() -> String {
        let a = next(), b = next()
        let hex = Self.hex(a, 16) + Self.hex(b, 16)
        let c = Array(hex)
        return String(c[0..<8]) + "-" + String(c[8..<12]) + "-4" + String(c[13..<16]) + "-a"
            + String(c[17..<20]) + "-" + String(c[20..<32])
    }

    private static func hex(_ v: UInt64, _ width: Int) -> String {
        let s = String(v, radix: 16)
        return String(repeating: "0", count: max(0, width - s.count)) + s
    }
}
