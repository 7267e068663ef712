import Foundation
import LedgerMetrics
import LedgerCore
import LedgerStore

/// What a sender is told after its notification was stored: new or already known, and where.
struct NotificationReceipt: Sendable, Equatable {
    var position: Int64
    var duplicate: Bool

    init(_ outcome: AppendOutcome) {
        position = outcome.position
        duplicate = outcome.duplicate
    }

    var status: String { duplicate ? "duplicate" : "stored" }
}

/// Where verified notifications enter the log, shared by the Apple and WeChat use cases: appends
/// (group commit; the first event's outcome is the notification's), counts each outcome in
/// `ledger_notifications_total` and logs what the operator must see. Errors are rethrown as the
/// store gave them (they render themselves: 503 for "retry later", 500 for a ledger defect).
struct NotificationIntake: Sendable {
    let events: EventStore
    let metrics: MetricsRegistry
    let log: Log

    func append(_ batch: [NewEvent], source: String) async throws(StoreError) -> [AppendOutcome] {
        do {
            let outcomes = try await events.append(batch)
            count(source: source, outcome: outcomes[0].duplicate ? "duplicate" : "stored")
            return outcomes
        } catch {
            if error.isUnavailable {
                count(source: source, outcome: "database_unavailable")
                log.error("database unavailable; answered 503 so the sender retries", ["source": source, "error": "\(error)"])
            } else {
                count(source: source, outcome: "storage_rejected")
                log.error("the database refused a verified event", ["source": source, "error": "\(error)"])
            }
            throw error
        }
    }

    func count(source: String, outcome: String) {
        metrics.increment("ledger_notifications_total", ["source": source, "outcome": outcome])
    }
}
