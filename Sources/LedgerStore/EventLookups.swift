import Foundation
import LedgerCore
internal import Postgres

/// Reads across streams that the webhooks need while answering: the stream an order belongs to,
/// an event by its dedupe key, the events of given types (refund cases).
extension EventStore {
    /// Events stored under any of `dedupeKeys`, in position order.
    public func events(dedupeKeys: [String]) async throws(StoreError) -> [RecordedEvent] {
        guard !dedupeKeys.isEmpty else { return [] }
        return try await select(
            "SELECT \(Self.columns) FROM events WHERE dedupe_key = ANY($1) ORDER BY position",
            [.array(dedupeKeys.map { .text($0) }, of: .text)], name: "events by dedupe key")
    }

    /// Events of the given streams, in position order.
    public func read(streams: [String]) async throws(StoreError) -> [RecordedEvent] {
        guard !streams.isEmpty else { return [] }
        return try await select(
            "SELECT \(Self.columns) FROM events WHERE stream_id = ANY($1) ORDER BY position",
            [.array(streams.map { .text($0) }, of: .text)], name: "read streams")
    }

    /// Up to `limit` events of the given streams after position `after`, in position order: one
    /// page of a subscription's history (the next page starts after the last position returned).
    public func read(streams: [String], after: Int64, limit: Int) async throws(StoreError) -> [RecordedEvent] {
        guard !streams.isEmpty else { return [] }
        guard limit > 0 else { throw .invalidEvent("a page of events needs a positive limit, got \(limit)") }
        return try await select(
            "SELECT \(Self.columns) FROM events WHERE stream_id = ANY($1) AND position > $2 ORDER BY position LIMIT $3",
            [.array(streams.map { .text($0) }, of: .text), .int64(after), .int64(Int64(limit))], name: "read streams page")
    }

    /// Events whose type is one of `types` (or starts with one of `typePrefixes`), in position order.
    public func events(types: [String], typePrefixes: [String] = []) async throws(StoreError) -> [RecordedEvent] {
        try await select(
            """
            SELECT \(Self.columns) FROM events
            WHERE type = ANY($1) OR type LIKE ANY(SELECT replace(replace(p, '%', '\\%'), '_', '\\_') || '%' FROM unnest($2::text[]) p)
            ORDER BY position
            """,
            [.array(types.map { .text($0) }, of: .text), .array(typePrefixes.map { .text($0) }, of: .text)], name: "events by type")
    }
}
