import Foundation
import LedgerCore
import Synchronization
internal import Postgres

/// The daily rollups as of one log position, with what reproduces them: the position, the hash
/// chain's value there and the fact schema version (the service adds the catalog digest).
public struct ReportSnapshot: Sendable {
    public var position: Int64
    public var chainHash: [UInt8]
    public var factSchemaVersion: Int
    public var rollup: ReportRollup
    /// Every subscription's contribution at the position: what a point of a chart drills down to.
    public var contributions: [SubscriptionKey: SubscriptionContribution]
    /// The latest business time any fact up to the position states (signedAt): the default end
    /// of a report's range, a function of the position like everything else in the snapshot.
    public var latestSignedAt: EpochMillis?
}

/// Why a report cannot be computed as asked.
public enum ReportStoreError: Error, Sendable, Equatable, CustomStringConvertible {
    case positionNotReached(asked: Int64, available: Int64)

    public var description: String {
        switch self {
        case .positionNotReached(let asked, let available):
            "asOfPosition=\(asked) is beyond the log the ledger has derived (position \(available)); ask for a position from 0 to \(available)"
        }
    }
}

/// Reports of the facts: the one store function every report reads (`rollup(asOfPosition:)`).
///
/// The rollup is a pure fold of the facts up to a position (`ReportRollup(facts:)`), so two reads at
/// one position give the same figures, whichever way they were computed. Until the kernel's
/// projection runner keeps a reporting projection, the fold runs at request time and the last few
/// positions' rollups are kept in memory (sound: facts at a position never change for one fact
/// schema version).
public struct ReportQueries: Sendable {
    /// A fold of every fact is a long read (LongReads.swift: limited, timed out, cancelled with its request).
    let longReads: LongReads
    let cache = Cache()

    final class Cache: Sendable {
        let entries = Mutex<[(Int64, ReportSnapshot)]>([])
        static let size = 4

        func get(_ position: Int64) -> ReportSnapshot? {
            entries.withLock { list in list.first { $0.0 == position }?.1 }
        }

        func put(_ s: ReportSnapshot) {
            entries.withLock { list in
                list.removeAll { $0.0 == s.position }
                list.insert((s.position, s), at: 0)
                if list.count > Self.size { list.removeLast(list.count - Self.size) }
            }
        }
    }

    /// The rollups at `asOfPosition` (nil: the latest position facts were derived for).
    public func rollup(asOfPosition: Int64? = nil) async throws -> ReportSnapshot {
        try await longReads.run { connection in try self.computed(at: asOfPosition, on: connection) }
    }

    private func computed(at asked: Int64?, on connection: Connection) throws -> ReportSnapshot {
        try connection.transaction { connection in
            try connection.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", name: "snapshot")
            let derived = try FactStore.derivedUpTo(on: connection)
            let position = asked ?? derived
            guard position >= 0, position <= derived else {
                throw ReportStoreError.positionNotReached(asked: position, available: derived)
            }
            if let hit = cache.get(position) { return hit }
            let rows = try connection.query(
                "SELECT \(FactRows.columns) FROM public.facts WHERE schema_version = $1 AND position <= $2 ORDER BY position, ordinal",
                [.int64(Int64(FactStore.version)), .int64(position)], name: "report facts up to")
            var projection = SubscriptionProjection()
            var latest: EpochMillis?
            for row in rows.rows {
                let fact = try FactRows.fact(FactQueryRow(row: row))
                if fact.subscription != nil, latest.map({ fact.signedAt > $0 }) ?? true { latest = fact.signedAt }
                projection.apply(fact)
            }
            let contributions = projection.subscriptions.mapValues(SubscriptionRollup.contribution(of:))
            let chain = try ChainStore.anchor(at: position, on: connection)
            let snapshot = ReportSnapshot(position: position, chainHash: chain?.hash ?? [], factSchemaVersion: FactStore.version,
                                          rollup: ReportRollup(contributions: contributions), contributions: contributions,
                                          latestSignedAt: latest)
            cache.put(snapshot)
            return snapshot
        }
    }
}
