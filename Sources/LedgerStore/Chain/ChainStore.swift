import Foundation
import LedgerCore
internal import Postgres

/// One stored event with what the chain needs to be checked: the exact recorded time and the
/// chain row stored for it (nil when the row is missing, which is itself a break).
public struct ChainedEvent: Sendable {
    public var event: RecordedEvent
    /// `recorded_at` in microseconds (the event's `recordedAt` is rounded to ms).
    public var recordedAtMicros: Int64
    public var storedHash: [UInt8]?

    public var fields: EventChainHash.Fields {
        EventChainHash.Fields(position: event.position, streamId: event.event.streamId, dedupeKey: event.event.dedupeKey,
                              type: event.event.type, source: event.event.source.rawValue,
                              recordedAtMicros: recordedAtMicros, raw: event.event.raw)
    }
}

/// Reads of the hash chain (`event_chain`, Migrations/0009): the head for `/metrics` and
/// exports, hashes at positions for anchors, and the walk `ledger verify` makes.
public struct ChainStore: Sendable {
    let pool: ConnectionPool

    /// The last position and its hash (position 0 and 32 zero bytes for an empty log). Read in one
    /// statement, so the two belong together.
    public func head() async throws(StoreError) -> ChainAnchor {
        try await read { connection in try Self.head(on: connection) }
    }

    static func head(on connection: Connection) throws -> ChainAnchor {
        let row = try connection.query(
            "SELECT h.position, c.hash FROM event_head h LEFT JOIN event_chain c ON c.position = h.position",
            name: "chain head").first
        let position = try row?.decode(Int64.self, "position") ?? 0
        if position == 0 { return ChainAnchor(position: 0, hash: EventChainHash.genesis) }
        guard let hash = try row?.decode(Data?.self, "hash") else {
            throw StoreError.corrupt("the hash chain has no link for the head position \(position); run `ledger verify`")
        }
        return ChainAnchor(position: position, hash: [UInt8](hash))
    }

    /// The stored hash at `position` (the genesis value at 0); nil when there is no such link.
    public func anchor(at position: Int64) async throws(StoreError) -> ChainAnchor? {
        try await read { connection in try Self.anchor(at: position, on: connection) }
    }

    static func anchor(at position: Int64, on connection: Connection) throws -> ChainAnchor? {
        if position == 0 { return ChainAnchor(position: 0, hash: EventChainHash.genesis) }
        let row = try connection.query("SELECT hash FROM event_chain WHERE position = $1", [.int64(position)],
                                       name: "chain link").first
        return try row.map { ChainAnchor(position: position, hash: [UInt8](try $0.decode(Data.self, "hash"))) }
    }

    /// Up to `limit` events after `position` with their stored chain rows, in position order
    /// (raw included: the walk re-verifies it). Gaps are not filled: the caller checks them.
    public func events(after position: Int64, limit: Int) async throws(StoreError) -> [ChainedEvent] {
        guard limit > 0 else { throw .invalidEvent("limit must be positive, got \(limit)") }
        return try await read { connection in
            try connection.query(
                """
                SELECT \(EventStore.columns.split(separator: ",").map { "e." + $0.trimmingCharacters(in: .whitespaces) }.joined(separator: ", ")),
                       (extract(epoch FROM e.recorded_at) * 1000000)::bigint AS recorded_us, c.hash
                FROM events e LEFT JOIN event_chain c ON c.position = e.position
                WHERE e.position > $1 ORDER BY e.position LIMIT $2
                """, [.int64(position), .int64(Int64(limit))], name: "chain walk")
                .rows.map { row in
                    ChainedEvent(event: try EventStore.decode(row), recordedAtMicros: try row.decode(Int64.self, "recorded_us"),
                                 storedHash: try row.decode(Data?.self, "hash").map { [UInt8]($0) })
                }
        }
    }

    /// Chain rows whose position has no event (only a tampered database has any).
    public func orphanLinks(after position: Int64) async throws(StoreError) -> [Int64] {
        try await read { connection in
            try connection.query(
                """
                SELECT c.position FROM event_chain c
                WHERE c.position > $1 AND NOT EXISTS (SELECT 1 FROM events e WHERE e.position = c.position)
                ORDER BY c.position LIMIT 100
                """, [.int64(position)], name: "orphan chain links").rows.map { try $0.decode(Int64.self, "position") }
        }
    }

    /// For each of `positions`: whether the stored link equals the hash PostgreSQL computes from
    /// the event and the stored link before it (the timeline's per-event chain mark; `ledger
    /// verify` recomputes in Swift instead). Missing positions are absent.
    public func linkHolds(positions: [Int64]) async throws(StoreError) -> [Int64: Bool] {
        guard !positions.isEmpty else { return [:] }
        return try await read { connection in
            var out: [Int64: Bool] = [:]
            for row in try connection.query(
                """
                SELECT e.position,
                       c.hash IS NOT NULL AND c.hash = public.event_chain_hash(
                           CASE WHEN e.position = 1 THEN '\\x0000000000000000000000000000000000000000000000000000000000000000'::bytea ELSE p.hash END,
                           e.position, e.stream_id, e.dedupe_key, e.type, e.source, e.recorded_at, e.raw) AS holds
                FROM events e
                LEFT JOIN event_chain c ON c.position = e.position
                LEFT JOIN event_chain p ON p.position = e.position - 1
                WHERE e.position = ANY($1)
                """, [.array(positions.map { .int64($0) }, of: .int8)], name: "chain links hold").rows {
                out[try row.decode(Int64.self, "position")] = (try row.decode(Bool?.self, "holds")) ?? false
            }
            return out
        }
    }

    private func read<T: Sendable>(_ body: @escaping @Sendable (Connection) throws -> T) async throws(StoreError) -> T {
        do { return try await pool.withConnection(body) } catch { throw StoreError(error) }
    }
}
