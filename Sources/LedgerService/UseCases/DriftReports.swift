import Foundation
import LedgerCore
import LedgerMetrics
import LedgerStore

/// Use case: reading what reconciliation found — the last stored drift report (a `reconcile/report`
/// event, so every instance answers the same) and the runs (`reconciliation_runs`). Needs no API
/// credentials: an auditor reads reports wherever they were made. The payload's JSON shape is
/// `DriftReport`'s (LedgerCore).
public struct DriftReports: Sendable {
    let store: Store

    public struct View: Sendable {
        /// The report as stored (nil when no run stored one).
        public var report: JSONValue?
        public var reportPosition: Int64?
        public var reportRecordedAt: EpochMillis?
        /// The latest run (the given run, for `run(id:)`), whatever its outcome.
        public var run: ReconciliationStore.Run?
    }

    /// The last stored drift report and the latest run.
    public func latest() async throws(StoreError) -> View {
        let event = try await store.reconciliation.latestReport()
        let run = try await store.reconciliation.latestRun()
        return View(report: event.flatMap { try? JSONValue(json: $0.event.payload) }, reportPosition: event?.position,
                    reportRecordedAt: event?.recordedAt, run: run)
    }

    /// One run and the report it stored, if any; nil for an unknown id.
    public func run(id: String) async throws(StoreError) -> View? {
        guard let run = try await store.reconciliation.run(id: id) else { return nil }
        var view = View(report: nil, reportPosition: nil, reportRecordedAt: nil, run: run)
        if let position = run.reportPosition, let event = try await store.events.events(positions: [position]).first {
            view.report = try? JSONValue(json: event.event.payload)
            view.reportPosition = position
            view.reportRecordedAt = event.recordedAt
        }
        return view
    }

    /// Apple's word beside the ledger's (issue 20 item 2): the statements the ledger disagrees
    /// with now (newest first), the counts, and the mass-extension summaries with a shortfall.
    public struct AppleChecks: Sendable {
        public var counts: ReconciliationStore.AppleStatusCounts
        public var disagreements: [AppleStatusCheck]
        public var extensions: [ExtensionSummaryCheck]
        /// The status projection's progress (a statement is checked once the worker reaches it).
        public var checkedUpTo: Int64?

        public var json: JSONValue {
            .object([
                "checked": .integer(Int64(counts.checked)), "disagreeing": .integer(Int64(counts.disagreeing)),
                "disagreedOnArrival": .integer(Int64(counts.onArrival.values.reduce(0, +))),
                "checkedUpToPosition": .optional(checkedUpTo),
                "disagreements": .array(disagreements.map(\.json)),
                "renewalExtensions": .array(extensions.map(\.json)),
                "renewalExtensionShortfalls": .array(extensions.filter { $0.shortfall > 0 }.map(\.json)),
            ])
        }
    }

    public func appleChecks(limit: Int = 200) async throws(StoreError) -> AppleChecks {
        let counts = try await store.reconciliation.appleStatusCounts()
        let disagreements = try await store.reconciliation.appleStatusDisagreements(limit: limit)
        let extensions = try await store.reconciliation.extensionSummaryChecks()
        let checkpoint = try? await store.projectionStatuses().first { $0.name == "apple_status" }?.position
        return AppleChecks(counts: counts, disagreements: disagreements, extensions: extensions, checkedUpTo: checkpoint)
    }

    /// `ledger_apple_status_disagreements_total` (statements the ledger disagreed with when they
    /// arrived, by environment and source) and `ledger_apple_status_disagreeing` (now).
    func registerMetrics(_ metrics: MetricsRegistry) {
        metrics.collect([
            (name: "ledger_apple_status_disagreements_total", type: .counter,
             help: "Apple status statements (V2 data.status, Get All Subscription Statuses status) the ledger's fold disagreed with when they arrived, by environment and source"),
            (name: "ledger_apple_status_disagreeing", type: .gauge,
             help: "Apple status statements the ledger's fold disagrees with now (GET /v1/admin/drift lists them)"),
        ]) { [store] in
            guard let counts = try? await store.reconciliation.appleStatusCounts() else { return nil }
            var total: [MetricsRegistry.Sample] = []
            for environment in ["Production", "Sandbox"] {
                for source in ["notification", "api"] {
                    total.append((labels: ["environment": environment, "source": source],
                                  value: Double(counts.onArrival[.init(environment: environment, source: source)] ?? 0)))
                }
            }
            return ["ledger_apple_status_disagreements_total": total,
                    "ledger_apple_status_disagreeing": [(labels: [:], value: Double(counts.disagreeing))]]
        }
    }

    /// Where a run without `since` starts: where the last successful run ended (less the overlap),
    /// else a day before `now`.
    func defaultSince(now: EpochMillis) async throws(StoreError) -> EpochMillis {
        let last = try await store.reconciliation.latestSucceededRun()
        return last.map { $0.until - AppleReconciliation.overlap } ?? now - 86_400_000
    }
}
