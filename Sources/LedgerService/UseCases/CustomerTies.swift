import Foundation
import LedgerCore
import LedgerStore

/// Who asked for an action the ledger records (ties, admin actions): the role and the first 12 hex
/// digits of the token's SHA-256 — enough to tell operators apart in the audit trail, useless to an
/// attacker — or, for the command line, the operating-system user and host.
struct Requester: Sendable, Equatable {
    var fields: [String: JSONValue]

    init(role: String, tokenFingerprint: String, remoteAddress: String?) {
        fields = ["role": .string(role), "fingerprint": .string(tokenFingerprint), "remoteAddress": .optional(remoteAddress)]
    }

    init(fields: [String: JSONValue]) { self.fields = fields }

    static var commandLine: Requester {
        Requester(fields: [
            "via": "cli", "user": .string(ProcessInfo.processInfo.environment["USER"] ?? NSUserName()),
            "host": .string(ProcessInfo.processInfo.hostName), "pid": .integer(Int64(getpid())),
        ])
    }

    var json: JSONValue { .object(fields) }
    var fingerprint: String { fields["fingerprint"]?.text ?? "-" }
}

/// What a tie or untie did.
struct TieReceipt: Sendable {
    var tied: Bool
    var customerId: String
    var key: SubscriptionKey
    var position: Int64
    /// The subscription as it stands after the change (nil when it is not known yet, or the read
    /// failed: the tie itself is committed either way).
    var subscription: SubscriptionState?
}

/// Use case: explicit ties between a customer and a subscription, for purchases without an
/// appAccountToken (or with one that names the wrong customer). Each tie and untie is an event of
/// the ledger's own (`customer/tied`, `customer/untied`, in the subscription's stream) naming who
/// asked; the folds order them by recording time and an explicit tie wins over the token.
struct CustomerTies: Sendable {
    let store: Store
    /// Ties and unties one subscription may take in 24 hours (`Limits.tiesPerSubscriptionPerDay`).
    var perDay = 100

    static let day: EpochMillis = 86_400_000

    /// A tie already in force is answered as it stands, with the position of the tie that made it,
    /// and records nothing: repeating a tie (a retry, a loop in an app) never grows the
    /// subscription's history, which every fold of it walks.
    func tie(_ customer: String, to key: SubscriptionKey, requestedBy: Requester) async throws -> TieReceipt {
        let (inForce, recent) = try await ties(of: key)
        if let inForce, inForce.customerId == customer {
            let state = try? await store.projections.subscription(key, now: Clock.nowMillis())
            return TieReceipt(tied: true, customerId: customer, key: key, position: inForce.position, subscription: state ?? nil)
        }
        try admit(recent, key: key)
        return try await record(Self.event(customerId: customer, key: key, tied: true, requestedBy: requestedBy), customer: customer, key: key)
    }

    /// Only the customer the subscription is tied to can be untied from it.
    func untie(_ customer: String, from key: SubscriptionKey, requestedBy: Requester) async throws -> TieReceipt {
        let (inForce, recent) = try await ties(of: key)
        guard inForce?.customerId == customer else {
            throw ServiceFailure(.notFound, "not_tied",
                                 "the \(key.environment) subscription \(key.originalTransactionId) is not tied to customer \(customer); nothing to untie")
        }
        try admit(recent, key: key)
        return try await record(Self.event(customerId: customer, key: key, tied: false, requestedBy: requestedBy), customer: customer, key: key)
    }

    private func ties(of key: SubscriptionKey) async throws -> (latest: Fact?, recent: [EpochMillis]) {
        try await store.projections.ties(of: key, since: Clock.nowMillis() - Self.day, limit: perDay)
    }

    /// The cap counts the subscription's ties of the last 24 hours, whoever asked: two callers racing
    /// past it at once may overshoot it by one each, never without bound.
    private func admit(_ recent: [EpochMillis], key: SubscriptionKey) throws {
        guard recent.count >= perDay else { return }
        let oldest = recent.min() ?? Clock.nowMillis()
        let wait = max(1, Int((oldest + Self.day - Clock.nowMillis() + 999) / 1000))
        throw ServiceFailure(.exhausted(retryAfterSeconds: wait), "too_many_ties",
                             "the \(key.environment) subscription \(key.originalTransactionId) was tied or untied \(recent.count) times in the last 24 hours, the most one subscription may take (LEDGER_TIES_PER_SUBSCRIPTION_PER_DAY = \(perDay)); nothing was recorded — retry in \(wait) s, or stop the loop that repeats it")
    }

    private func record(_ event: NewEvent, customer: String, key: SubscriptionKey) async throws -> TieReceipt {
        let outcome = try await store.events.append(event)
        let state = try? await store.projections.subscription(key, now: Clock.nowMillis())
        return TieReceipt(tied: event.type == LedgerEventType.customerTied, customerId: customer, key: key,
                          position: outcome.position, subscription: state ?? nil)
    }

    /// The event that ties (or unties) `customerId` and the subscription `key`.
    static func event(customerId: String, key: SubscriptionKey, tied: Bool, requestedBy: Requester) -> NewEvent {
        let now = Clock.nowMillis()
        var body: [String: JSONValue] = [
            "environment": .string(key.environment), "originalTransactionId": .string(key.originalTransactionId),
            "requestedBy": requestedBy.json, "requestedAt": .integer(now),
        ]
        body[tied ? "customerId" : "formerCustomerId"] = .string(customerId)
        let data = JSONValue.object(body).canonicalJSON()
        return NewEvent(
            streamId: StreamId.subscription(key.originalTransactionId).text, dedupeKey: DedupeKey.customerTie(), source: .ledger,
            type: tied ? LedgerEventType.customerTied : LedgerEventType.customerUntied, environment: key.environment,
            signedAt: now, payload: data, raw: data)
    }
}
