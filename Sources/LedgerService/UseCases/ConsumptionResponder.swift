import AppStore
import LedgerMetrics
import Foundation
import LedgerCore
import LedgerStore

/// Use case: answering Apple's CONSUMPTION_REQUEST notifications from the ledger's facts, within
/// Apple's 12-hour window, through a durable outbox.
///
/// The requests are items of the kernel's outbox (consumer `apple.consumption`, `ConsumptionOutbox`,
/// Migrations/0011), written by the transaction that stores the notification, so a request stored
/// while no sender ran — the service was down, or stopped between storing the notification and
/// answering it — is answered by the next sender on any instance. Each item is leased to one
/// instance (FOR UPDATE SKIP LOCKED). Failed attempts are `outbox/attempt-failed` events. For each due request:
///
/// - no API credentials → `consumption/not-sent` reason `no_credentials`;
/// - Apple's window passed → `not-sent` `window_expired` (with the last error);
/// - the ledger does not know the transaction → `not-sent` `unknown_transaction`;
/// - the transaction is FAMILY_SHARED → `not-sent` `family_shared` (Apple refuses those:
///   FamilyTransactionNotSupportedError), instead of 12 hours of retries;
/// - no customer, or the customer's latest consent (`POST /v1/customers/{id}/consent`) is not
///   yes → `not-sent` `no_customer` / `no_consent`;
/// - otherwise the `ConsumptionAssessment` of the facts is sent (Send Consumption Information v2):
///   202 → `consumption/sent` with the request, Apple's answer and the basis of each field; an
///   answer retrying cannot change → `consumption/refused`; a temporary failure → retried later
///   (backoff, `Retry-After`) until the window closes.
///
/// Each request gets exactly one answer event (dedupe key `consumption:<request position>`),
/// whose fact joins the transaction's refund case. A sender that dies after Apple accepted but
/// before the event is stored makes the next one send again: Apple's PUT is idempotent.
public final class ConsumptionResponder: Sendable {
    let store: Store
    /// One client per environment; empty when the API is not configured.
    let clients: AppStoreServerAPIClients
    let assessment: ConsumptionAssessment
    let metrics: MetricsRegistry
    let log: Log
    let clock: @Sendable () -> EpochMillis

    init(store: Store, clients: AppStoreServerAPIClients, assessment: ConsumptionAssessment, metrics: MetricsRegistry, log: Log,
         clock: @escaping @Sendable () -> EpochMillis = Clock.nowMillis) {
        self.store = store
        self.clients = clients
        self.assessment = assessment
        self.metrics = metrics
        self.log = log
        self.clock = clock
        metrics.describe("ledger_consumption_answers_total", type: .counter,
                         help: "Answers to Apple's consumption requests by outcome (sent, refused, not_sent) and reason")
    }

    /// What one pass did.
    public struct PassResult: Sendable, Equatable {
        /// Answer events stored (sent, refused or not sent).
        public var answered = 0
        /// Attempts that failed for a reason that may pass (retried later).
        public var retrying = 0
    }

    /// One pass: answer every due request. The requests are in the outbox from the transaction
    /// that stored them (`ConsumptionOutbox`); claiming leases each to one instance (FOR UPDATE
    /// SKIP LOCKED), so senders on several instances never answer one twice. Cheap when there is
    /// nothing to do (one small query).
    @discardableResult
    public func pass() async throws(StoreError) -> PassResult {
        var result = PassResult()
        while !Task.isCancelled {
            let claimed = try await store.outbox.claim(ConsumptionOutbox.consumer, limit: 50, now: clock())
            if claimed.isEmpty { break }
            for outboxItem in claimed {
                if Task.isCancelled { break }
                guard let item = ReconciliationStore.OutboxItem(outboxItem) else {
                    try await store.outbox.record(outboxItem, .gaveUp(error: "the item's payload names no subscription, transactionId, requestedAt and deadline"),
                                                  now: clock())
                    continue
                }
                switch try await answer(item) {
                case .answered: result.answered += 1
                case .retrying: result.retrying += 1
                }
            }
        }
        return result
    }

    enum Step { case answered, retrying }

    func answer(_ item: ReconciliationStore.OutboxItem) async throws(StoreError) -> Step {
        let now = clock()
        let key = item.subscription
        func notSent(_ reason: ConsumptionAnswerRecord.Reason, _ message: String) async throws(StoreError) -> Step {
            try await record(item, outcome: .notSent, reason: reason, message: message, request: nil, answer: nil, basis: nil, attempted: false)
            return .answered
        }
        guard clients.has(environment: key.environment) else {
            return try await notSent(.noCredentials, "the App Store Server API is not configured (LEDGER_APPLE_API_ISSUER_ID, LEDGER_APPLE_API_KEY_ID, LEDGER_APPLE_API_PRIVATE_KEY): nothing can be sent")
        }
        if now >= item.deadline {
            return try await notSent(.windowExpired, "Apple's 12-hour window closed at \(item.deadline)" + (item.lastError.map { "; last attempt: \($0)" } ?? ""))
        }
        let facts: [Fact]
        do { facts = try await store.projections.facts(of: [key]) } catch { throw StoreError.unavailable("\(error)") }
        guard let fold = SubscriptionProjection(facts: facts).subscriptions[key], fold.transaction(item.transactionId) != nil else {
            return try await notSent(.unknownTransaction, "the ledger holds no transaction \(item.transactionId) of \(key.text)")
        }
        if fold.transaction(item.transactionId)?.inAppOwnershipType == "FAMILY_SHARED" {
            return try await notSent(.familyShared, "transaction \(item.transactionId) is FAMILY_SHARED (a family member's): Apple accepts consumption information only for the purchaser's transactions (FamilyTransactionNotSupportedError)")
        }
        guard let customer = fold.state(at: now)?.customerId ?? fold.state(at: item.requestedAt)?.customerId else {
            return try await notSent(.noCustomer, "the purchase names no customer (no appAccountToken and no tie), so no consent can be on record")
        }
        let consents = try await store.reconciliation.consentFacts(customerId: customer)
        guard ConsentRecord.consented(consents, asOf: now) else {
            return try await notSent(.noConsent, consents.isEmpty ? "customer \(customer) has not consented (POST /v1/customers/{id}/consent)"
                                                                  : "customer \(customer) withdrew consent")
        }
        let information: ConsumptionInformation
        do { information = try assessment.information(transactionId: item.transactionId, fold: fold, now: now) } catch {
            return try await notSent(.unknownTransaction, "the ledger holds no transaction \(item.transactionId) of \(key.text)")
        }
        let request = ConsumptionRequest(information)
        let productType = fold.transaction(item.transactionId)?.type
        // The client of the transaction's app: Apple's token names one app (`bid`).
        guard let client = clients.client(environment: key.environment, bundleId: fold.transaction(item.transactionId)?.bundleId) else {
            return try await notSent(.noCredentials, "no App Store Server API client for \(key.environment)")
        }
        do {
            try await client.sendConsumptionInformation(transactionId: item.transactionId, request, productType: productType)
        } catch {
            if error.isRetryable || error.handling == .notReady {
                let wait = Self.backoff(attempts: item.attempts + 1, error: error, now: now)
                if now + wait >= item.deadline {
                    try await record(item, outcome: .notSent, reason: .windowExpired,
                                     message: "Apple's 12-hour window closes at \(item.deadline) before the next attempt could be made; last attempt: \(error.message)",
                                     request: information.requestJSON, answer: Self.answer(error), basis: information.basis, attempted: true)
                    return .answered
                }
                try await store.outbox.record(item.item, .retry(error: error.message, at: now + wait), now: now)
                log.warn("consumption information not sent yet; will retry", ["transactionId": item.transactionId, "error": error.message])
                return .retrying
            }
            try await record(item, outcome: .refused, reason: nil, message: error.message, request: information.requestJSON,
                             answer: Self.answer(error), basis: information.basis, attempted: true)
            return .answered
        }
        try await record(item, outcome: .sent, reason: nil, message: nil, request: information.requestJSON,
                         answer: .object(["httpStatus": .integer(202)]), basis: information.basis, attempted: true)
        return .answered
    }

    /// Until the next attempt: Apple's Retry-After when it gave one, else 30 s doubling to 30 min.
    static func backoff(attempts: Int, error: AppStoreServerAPIError, now: EpochMillis) -> EpochMillis {
        if case .rateLimited(_, let retryAt?) = error, retryAt > now { return retryAt - now }
        return min(30_000 << min(attempts - 1, 6), 1_800_000)
    }

    static func answer(_ error: AppStoreServerAPIError) -> JSONValue {
        var o: [String: JSONValue] = ["error": .string(error.message)]
        if let s = error.httpStatus { o["httpStatus"] = .integer(Int64(s)) }
        if let c = error.errorCode { o["errorCode"] = .integer(Int64(c)) }
        if case .apple(_, _, _, let text?) = error { o["errorMessage"] = .string(text) }
        return .object(o)
    }

    private func record(
        _ item: ReconciliationStore.OutboxItem, outcome: ConsumptionAnswerRecord.Outcome, reason: ConsumptionAnswerRecord.Reason?,
        message: String?, request: JSONValue?, answer: JSONValue?, basis: JSONValue?, attempted: Bool
    ) async throws(StoreError) {
        let now = clock()
        let payload = ConsumptionAnswerRecord.payload(
            key: item.subscription, transactionId: item.transactionId, requestPosition: item.requestPosition,
            requestSignedAt: item.requestedAt, outcome: outcome, reason: reason, message: message, request: request, answer: answer,
            basis: basis, attempts: item.attempts + (attempted ? 1 : 0)).canonicalJSON()
        let stored = try await store.events.append(NewEvent(
            streamId: StreamId.subscription(item.subscription.originalTransactionId).text,
            dedupeKey: DedupeKey.consumptionAnswer(requestPosition: item.requestPosition), source: .ledger,
            type: outcome.eventType, environment: item.subscription.environment, signedAt: now, payload: payload, raw: payload))
        // The answer event settles the item in its own append transaction; a duplicate (answered
        // before) settles it here.
        try await store.outbox.record(item.item, .answered(position: stored.position), now: now)
        metrics.increment("ledger_consumption_answers_total", ["outcome": outcome.rawValue, "reason": reason?.rawValue ?? ""])
        log.info("consumption request answered", [
            "transactionId": item.transactionId, "outcome": outcome.rawValue, "reason": reason?.rawValue ?? "-", "position": stored.position,
        ])
    }
}
