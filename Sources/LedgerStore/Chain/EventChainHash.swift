import Crypto
import Foundation

/// The hash chain over the event log (Migrations/0009_audit_chain.sql, docs/hash-chain.md),
/// implemented a second time, independently of the SQL that writes it, so `ledger verify` checks
/// the database's arithmetic instead of trusting it:
///
///     hash(n) = SHA-256( hash(n-1)                       32 bytes; 32 zero bytes before position 1
///                      ‖ position                        int64, big-endian
///                      ‖ len ‖ stream_id                 len: uint32 big-endian byte count of the UTF-8
///                      ‖ len ‖ dedupe_key
///                      ‖ len ‖ type
///                      ‖ len ‖ source
///                      ‖ recorded_at                     int64 big-endian, microseconds since 1970-01-01 UTC
///                      ‖ SHA-256(raw) )                  32 bytes
public enum EventChainHash {
    /// What stands before position 1.
    public static let genesis = [UInt8](repeating: 0, count: 32)

    /// The fields of one event the chain covers.
    public struct Fields: Sendable, Equatable {
        public var position: Int64
        public var streamId: String
        public var dedupeKey: String
        public var type: String
        public var source: String
        /// `recorded_at` in microseconds since 1970 (PostgreSQL's own resolution).
        public var recordedAtMicros: Int64
        public var rawSHA256: [UInt8]

        public init(position: Int64, streamId: String, dedupeKey: String, type: String, source: String,
                    recordedAtMicros: Int64, raw: Data) {
            self.init(position: position, streamId: streamId, dedupeKey: dedupeKey, type: type, source: source,
                      recordedAtMicros: recordedAtMicros, rawSHA256: Digest.sha256(raw))
        }

        public init(position: Int64, streamId: String, dedupeKey: String, type: String, source: String,
                    recordedAtMicros: Int64, rawSHA256: [UInt8]) {
            self.position = position
            self.streamId = streamId
            self.dedupeKey = dedupeKey
            self.type = type
            self.source = source
            self.recordedAtMicros = recordedAtMicros
            self.rawSHA256 = rawSHA256
        }
    }

    /// The bytes hashed for `fields` after `previous` (exposed so a test can pin the layout).
    public static func message(previous: [UInt8], _ f: Fields) -> [UInt8] {
        var out = previous
        out.reserveCapacity(previous.count + 8 + 16 + f.streamId.utf8.count + f.dedupeKey.utf8.count
                            + f.type.utf8.count + f.source.utf8.count + 8 + 32)
        append(UInt64(bitPattern: f.position), bytes: 8, to: &out)
        for text in [f.streamId, f.dedupeKey, f.type, f.source] {
            append(UInt64(text.utf8.count), bytes: 4, to: &out)
            out.append(contentsOf: text.utf8)
        }
        append(UInt64(bitPattern: f.recordedAtMicros), bytes: 8, to: &out)
        out.append(contentsOf: f.rawSHA256)
        return out
    }

    public static func hash(previous: [UInt8], _ fields: Fields) -> [UInt8] {
        Digest.sha256(message(previous: previous, fields))
    }

    private static func append(_ value: UInt64, bytes: Int, to out: inout [UInt8]) {
        for shift in stride(from: (bytes - 1) * 8, through: 0, by: -8) {
            out.append(UInt8(truncatingIfNeeded: value >> UInt64(shift)))
        }
    }
}

/// A position of the log and the chain's hash there: what an operator keeps elsewhere
/// (`ledger verify --anchor`) to prove later that the log still extends it.
public struct ChainAnchor: Sendable, Equatable, Hashable, CustomStringConvertible {
    public var position: Int64
    public var hash: [UInt8]

    public init(position: Int64, hash: [UInt8]) {
        self.position = position
        self.hash = hash
    }

    public var hex: String { Hex.encode(hash) }

    /// `<position> <hex hash>`, the line `ledger verify --anchor` prints.
    public var description: String { "\(position) \(hex)" }

    /// Parses `<position> <64 hex digits>`; nil for anything else.
    public init?(line: some StringProtocol) {
        let parts = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
        guard parts.count == 2, let position = Int64(parts[0]), position >= 0,
              parts[1].utf8.count == 64, let bytes = Self.bytes(hex: parts[1]) else { return nil }
        self.init(position: position, hash: bytes)
    }

    static func bytes(hex: some StringProtocol) -> [UInt8]? {
        var out: [UInt8] = []
        var high: UInt8?
        for c in hex.utf8 {
            let v: UInt8
            switch c {
            case 0x30...0x39: v = c - 0x30
            case 0x61...0x66: v = c - 0x61 + 10
            case 0x41...0x46: v = c - 0x41 + 10
            default: return nil
            }
            if let h = high { out.append(h << 4 | v); high = nil } else { high = v }
        }
        return high == nil ? out : nil
    }
}
