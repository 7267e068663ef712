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
    /// Authentic notifications kept as unreadable evidence, per source (`LEDGER_UNREADABLE_PER_MINUTE`):
    /// a safety valve, since only Apple or a holder of the WeChat token can make them. Past it the sender is answered 503 with
    /// Retry-After and sends again later — nothing is refused for good.
    let unreadableBudget: RateLimiter

    init(events: EventStore, metrics: MetricsRegistry, log: Log, unreadableRule: RateLimiter.Rule) {
        self.events = events
        self.metrics = metrics
        self.log = log
        unreadableBudget = RateLimiter(unreadableRule, maxKeys: 16)
        metrics.describe("ledger_unreadable_notifications_total", type: .counter,
                         help: "Authentic notifications the ledger could not read, kept as evidence (apple:unreadable, wechat:unreadable:*), by source and reason code")
    }

    /// Stores an authentic notification the ledger cannot read as evidence (200 after the commit,
    /// like any other), counted and logged with why; a retry of the same bytes is a duplicate.
    func keepUnreadable(_ event: NewEvent, source: String, code: String, reason: String) async throws -> AppendOutcome {
        if let wait = unreadableBudget.spend(source) {
            count(source: source, outcome: "unreadable_deferred")
            log.warn("too many unreadable notifications; answered 503 so the sender retries later",
                     ["source": source, "code": code, "retry_after_seconds": String(wait)])
            throw ServiceFailure(.unavailable(retryAfterSeconds: wait), "unreadable_deferred",
                                 "this authentic notification cannot be read, and more of them arrived than the ledger keeps as evidence per minute; send it again after \(wait) s")
        }
        let outcome = try await append([event], source: source)[0]
        guard !outcome.duplicate else { return outcome }
        metrics.increment("ledger_unreadable_notifications_total", ["source": source, "code": code])
        log.warn("an authentic notification could not be read; stored as evidence", [
            "source": source, "code": code, "reason": StorableText.clean(reason, limit: 500),
            "position": String(outcome.position),
        ])
        return outcome
    }

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
