import Foundation
import LedgerCore
internal import Postgres

/// Reads of the ledger-vs-Apple checks (issue 20 items 1–3): Apple's stated statuses beside the
/// ledger's (`projections.apple_status_checks`, kept by `AppleStatusProjection`), mass-extension
/// summaries against the RENEWAL_EXTENDED notifications received, and where the periodic backfill
/// got to (`reconciliation_progress`, Migrations/0017). Reads facts and projection rows, never
/// payloads.
extension ReconciliationStore {
    /// Counts of the status checks, for `/metrics` and the drift page.
    public struct AppleStatusCounts: Sendable, Equatable {
        /// Statements checked (every `apple_status` fact the projection has reached).
        public var checked: Int
        /// Statements the ledger disagrees with now.
        public var disagreeing: Int
        /// Statements the ledger disagreed with when they arrived, by environment and source
        /// (`ledger_apple_status_disagreements_total`: only ever grows as statements arrive).
        public var onArrival: [Key: Int]

        public struct Key: Sendable, Hashable {
            public var environment: String
            public var source: String
            public init(environment: String, source: String) {
                self.environment = environment
                self.source = source
            }
        }
    }

    public func appleStatusCounts() async throws(StoreError) -> AppleStatusCounts {
        do {
            return try await pool.withConnection { connection in
                let totals = try connection.query(
                    "SELECT count(*) AS checked, count(*) FILTER (WHERE NOT agrees) AS disagreeing FROM projections.apple_status_checks",
                    name: "apple status totals").first
                var onArrival: [AppleStatusCounts.Key: Int] = [:]
                for row in try connection.query(
                    """
                    SELECT environment, source, count(*) AS n FROM projections.apple_status_checks
                    WHERE NOT arrival_agrees GROUP BY environment, source
                    """, name: "apple status disagreements on arrival").rows {
                    onArrival[.init(environment: try row.decode(String.self, "environment"), source: try row.decode(String.self, "source"))] =
                        Int(try row.decode(Int64.self, "n"))
                }
                return AppleStatusCounts(checked: Int(try totals?.decode(Int64.self, "checked") ?? 0),
                                         disagreeing: Int(try totals?.decode(Int64.self, "disagreeing") ?? 0), onArrival: onArrival)
            }
        } catch {
            throw StoreError(error)
        }
    }

    /// The statements the ledger disagrees with now, newest first (`recordedSince`: only those
    /// recorded at or after it).
    public func appleStatusDisagreements(recordedSince: EpochMillis? = nil, limit: Int = 200) async throws(StoreError) -> [AppleStatusCheck] {
        do {
            return try await pool.withConnection { connection in
                try connection.query(
                    """
                    SELECT \(AppleStatusProjection.columns) FROM projections.apple_status_checks
                    WHERE NOT agrees AND recorded_at >= $1 ORDER BY recorded_at DESC, position DESC, ordinal DESC LIMIT $2
                    """, [.int64(recordedSince ?? .min), .int64(Int64(limit))], name: "apple status disagreements")
                    .rows.map(AppleStatusProjection.decode)
            }
        } catch {
            throw StoreError(error)
        }
    }

    /// The checks of one subscription (the auditor's subscription page), in log order.
    public func appleStatusChecks(of key: SubscriptionKey) async throws(StoreError) -> [AppleStatusCheck] {
        do {
            return try await pool.withConnection { connection in
                try connection.query(
                    "SELECT \(AppleStatusProjection.columns) FROM projections.apple_status_checks WHERE subscription = $1 ORDER BY position, ordinal",
                    [.text(key.text)], name: "apple status checks of subscription").rows.map(AppleStatusProjection.decode)
            }
        } catch {
            throw StoreError(error)
        }
    }

    /// Every mass-extension summary checked against the RENEWAL_EXTENDED notifications received
    /// (`ExtensionSummaryCheck`), oldest first.
    public func extensionSummaryChecks() async throws(StoreError) -> [ExtensionSummaryCheck] {
        do {
            return try await pool.withConnection { connection in
                let version = Int64(FactStore.version)
                let summaries = try connection.query(
                    "SELECT \(FactRows.columns) FROM public.facts WHERE schema_version = $1 AND kind = 'extension_summary' ORDER BY position",
                    [.int64(version)], name: "extension summaries").facts()
                guard !summaries.isEmpty else { return [] }
                // Only the products and times the summaries ask about (facts_renewal_extended).
                let products = Set(summaries.compactMap { $0.details["productId"]?.text })
                let from = (summaries.map(\.signedAt).min() ?? 0) - ExtensionSummaryCheck.window
                let to = summaries.map(\.signedAt).max() ?? 0
                let extended = try connection.query(
                    """
                    SELECT \(FactRows.columns) FROM public.facts
                    WHERE schema_version = $1 AND kind = 'transaction' AND message = 'RENEWAL_EXTENDED'
                      AND ($2::text[] IS NULL OR product_id = ANY($2)) AND signed_at > $3 AND signed_at <= $4
                    """,
                    [.int64(version), products.isEmpty || summaries.contains(where: { $0.details["productId"]?.text == nil }) ? .null
                        : .array(products.sorted().map { .text($0) }, of: .text), .int64(from), .int64(to)],
                    name: "renewal extended of summaries").facts()
                return ExtensionSummaryCheck.checks(summaries: summaries, extended: extended)
            }
        } catch {
            throw StoreError(error)
        }
    }

    /// The app (bundle id) of each subscription the projection knows.
    public func bundleIds(of keys: [SubscriptionKey]) async throws(StoreError) -> [SubscriptionKey: String] {
        guard !keys.isEmpty else { return [:] }
        do {
            return try await pool.withConnection { connection in
                var out: [SubscriptionKey: String] = [:]
                for row in try connection.query(
                    "SELECT subscription, bundle_id FROM projections.subscriptions WHERE subscription = ANY($1) AND bundle_id IS NOT NULL",
                    [.array(keys.map { .text($0.text) }, of: .text)], name: "bundle ids of subscriptions").rows {
                    if let key = SubscriptionKey(text: try row.decode(String.self, "subscription")) {
                        out[key] = try row.decode(String.self, "bundle_id")
                    }
                }
                return out
            }
        } catch {
            throw StoreError(error)
        }
    }

    // MARK: - Backfill progress

    /// How far the periodic backfill of `environment` / `bundleId` read Apple's history (ms), nil
    /// before the first page.
    public func backfillCursor(environment: String, bundleId: String) async throws(StoreError) -> EpochMillis? {
        do {
            return try await pool.withConnection { connection in
                try connection.query(
                    "SELECT cursor_ms FROM reconciliation_progress WHERE environment = $1 AND bundle_id = $2 AND stage = 'backfill'",
                    [.text(environment), .text(bundleId)], name: "backfill cursor").first?.decode(Int64.self, "cursor_ms")
            }
        } catch {
            throw StoreError(error)
        }
    }

    /// Saves the backfill's progress after a page; never moves it back.
    public func saveBackfillCursor(environment: String, bundleId: String, cursor: EpochMillis, now: EpochMillis) async throws(StoreError) {
        do {
            _ = try await pool.withConnection { connection in
                try connection.query(
                    """
                    INSERT INTO reconciliation_progress (environment, bundle_id, stage, cursor_ms, updated_at) VALUES ($1, $2, 'backfill', $3, $4)
                    ON CONFLICT (environment, bundle_id, stage)
                    DO UPDATE SET cursor_ms = greatest(reconciliation_progress.cursor_ms, EXCLUDED.cursor_ms), updated_at = EXCLUDED.updated_at
                    """, [.text(environment), .text(bundleId), .int64(cursor), .int64(now)], name: "save backfill cursor")
                return 0
            }
        } catch {
            throw StoreError(error)
        }
    }
}
