import Foundation
import LedgerCore
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

    /// Where a run without `since` starts: where the last successful run ended (less the overlap),
    /// else a day before `now`.
    func defaultSince(now: EpochMillis) async throws(StoreError) -> EpochMillis {
        let last = try await store.reconciliation.latestSucceededRun()
        return last.map { $0.until - AppleReconciliation.overlap } ?? now - 86_400_000
    }
}
