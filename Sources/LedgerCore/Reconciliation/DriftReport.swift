import Foundation

/// What a subscription looked like to the ledger at one moment, as far as drift is concerned.
public struct SubscriptionSnapshot: Sendable, Equatable {
    public var status: SubscriptionStatus
    public var productId: String?
    public var expiresDate: EpochMillis?
    public var autoRenewStatus: Int?
    public var autoRenewProductId: String?
    public var customerId: String?
    /// The entitlements the state grants, sorted.
    public var entitlements: [String]

    public init(state: SubscriptionState, catalog: ProductCatalog) {
        status = state.status
        productId = state.productId
        expiresDate = state.expiresDate
        autoRenewStatus = state.autoRenewStatus
        autoRenewProductId = state.autoRenewProductId
        customerId = state.customerId
        entitlements = EntitlementGrant.grants(of: state, catalog: catalog).map(\.entitlement).sorted()
    }

    public var json: JSONValue {
        .object([
            "status": .string(status.rawValue), "productId": .optional(productId), "expiresDate": .optional(expiresDate),
            "autoRenewStatus": .optional(autoRenewStatus), "autoRenewProductId": .optional(autoRenewProductId),
            "customerId": .optional(customerId), "entitlements": .array(entitlements.map(JSONValue.string)),
        ])
    }
}

/// One subscription whose state reconciliation changed: what the ledger said before the run and
/// what it says after, both evaluated at the same time (the end of the run). `before` is nil for
/// a subscription the ledger did not know.
public struct DriftEntry: Sendable, Equatable {
    public var key: SubscriptionKey
    public var before: SubscriptionSnapshot?
    public var after: SubscriptionSnapshot?

    public init(key: SubscriptionKey, before: SubscriptionSnapshot?, after: SubscriptionSnapshot?) {
        self.key = key
        self.before = before
        self.after = after
    }

    /// The fields that differ, by name (`status`, `productId`, …).
    public var changed: [String] {
        guard let before, let after else { return ["subscription"] }
        var out: [String] = []
        if before.status != after.status { out.append("status") }
        if before.productId != after.productId { out.append("productId") }
        if before.expiresDate != after.expiresDate { out.append("expiresDate") }
        if before.autoRenewStatus != after.autoRenewStatus { out.append("autoRenewStatus") }
        if before.autoRenewProductId != after.autoRenewProductId { out.append("autoRenewProductId") }
        if before.customerId != after.customerId { out.append("customerId") }
        if before.entitlements != after.entitlements { out.append("entitlements") }
        return out
    }

    public var json: JSONValue {
        .object([
            "environment": .string(key.environment), "originalTransactionId": .string(key.originalTransactionId),
            "changed": .array(changed.map(JSONValue.string)),
            "before": before?.json ?? .null, "after": after?.json ?? .null,
        ])
    }

    /// Compares the states of the subscriptions `keys` in two folds at `at`: one entry per
    /// subscription whose snapshot differs, in key order.
    public static func entries(
        keys: some Sequence<SubscriptionKey>, before: ProjectionView, after: ProjectionView, catalog: ProductCatalog
    ) -> [DriftEntry] {
        Set(keys).sorted().compactMap { key in
            let b = before.subscription(key).map { SubscriptionSnapshot(state: $0, catalog: catalog) }
            let a = after.subscription(key).map { SubscriptionSnapshot(state: $0, catalog: catalog) }
            return b == a ? nil : DriftEntry(key: key, before: b, after: a)
        }
    }
}

/// The report of one reconciliation run, stored (unless a dry run) as a `reconcile/report` event in
/// stream `ledger:reconciliation` and served by `GET /v1/admin/drift`. Its JSON (`json`):
///
/// ```
/// {"runId", "trigger": "admin"|"periodic"|"cli", "requestedBy": {…}, "environments": ["Production"],
///  "window": {"since", "until"}, "all", "dryRun", "startedAt", "finishedAt",
///  "notifications": {"seen", "backfilled", "alreadyStored", "refused"},
///  "statuses": {"subscriptionsAsked", "answersStored", "answersUnchanged", "unknownToApple", "rateLimitedWaits"},
///  "transactions": {"subscriptionsAsked", "stored"},
///  "outcomes": {"<environment>[/<bundleId>]": "ok" | "failed"}, "backfilledUpTo": {"<environment>": ms}, "windowsClamped",
///  "apple": {"flaggedSubscriptions", "disagreements": [AppleStatusCheck.json …]},
///  "drift": [{"environment", "originalTransactionId", "changed": [...],
///             "before": {"status", "productId", "expiresDate", "autoRenewStatus", "autoRenewProductId",
///                        "customerId", "entitlements": [...]} | null,
///             "after": {… the same …} | null}],
///  "problems": [{"stage", "environment", "originalTransactionId"?, "message"}]}
/// ```
/// Times are epoch ms; `drift` lists every subscription whose state the run changed.
public struct DriftReport: Sendable, Equatable {
    public struct Counts: Sendable, Equatable {
        public var notificationsSeen = 0
        public var notificationsBackfilled = 0
        public var notificationsAlreadyStored = 0
        public var notificationsRefused = 0
        public var subscriptionsAsked = 0
        public var statusAnswersStored = 0
        public var statusAnswersUnchanged = 0
        public var unknownToApple = 0
        public var rateLimitedWaits = 0
        public var historySubscriptionsAsked = 0
        public var historyTransactionsStored = 0
        /// Environments whose window started before the history Apple keeps (clamped).
        public var windowsClamped = 0
        /// Subscriptions whose Apple statements the ledger disagreed with since the last run.
        public var appleFlagged = 0

        public init() {}

        /// Events the run stored (or, dry, would store).
        public var stored: Int { notificationsBackfilled + statusAnswersStored + historyTransactionsStored }
    }

    public struct Problem: Sendable, Equatable {
        public var stage: String
        public var environment: String
        public var originalTransactionId: String?
        public var message: String

        public init(stage: String, environment: String, originalTransactionId: String? = nil, message: String) {
            self.stage = stage
            self.environment = environment
            self.originalTransactionId = originalTransactionId
            self.message = message
        }
    }

    public var runId: String
    public var trigger: String
    public var requestedBy: JSONValue
    public var environments: [String]
    public var since: EpochMillis
    public var until: EpochMillis
    public var all: Bool
    public var dryRun: Bool
    public var startedAt: EpochMillis
    public var finishedAt: EpochMillis
    public var counts = Counts()
    public var drift: [DriftEntry] = []
    public var problems: [Problem] = []
    /// Per environment (or environment/app when several apps are configured): `ok` or `failed`
    /// (the problem says why). One failing does not stop the others.
    public var outcomes: [String: String] = [:]
    /// Where each environment's backfill read Apple's history up to (ms).
    public var backfilledUpTo: [String: EpochMillis] = [:]
    /// Apple's statements about the subscriptions the run touched or that Apple's word flagged,
    /// that the ledger's fold after the run disagrees with (the ledger compared with Apple).
    public var appleDisagreements: [AppleStatusCheck] = []

    public init(runId: String, trigger: String, requestedBy: JSONValue, environments: [String], since: EpochMillis,
                until: EpochMillis, all: Bool, dryRun: Bool, startedAt: EpochMillis) {
        self.runId = runId
        self.trigger = trigger
        self.requestedBy = requestedBy
        self.environments = environments
        self.since = since
        self.until = until
        self.all = all
        self.dryRun = dryRun
        self.startedAt = startedAt
        self.finishedAt = startedAt
    }

    public var json: JSONValue {
        let c = counts
        func n(_ i: Int) -> JSONValue { .integer(Int64(i)) }
        return .object([
            "runId": .string(runId), "trigger": .string(trigger), "requestedBy": requestedBy,
            "environments": .array(environments.map(JSONValue.string)),
            "window": .object(["since": .integer(since), "until": .integer(until)]),
            "all": .bool(all), "dryRun": .bool(dryRun), "startedAt": .integer(startedAt), "finishedAt": .integer(finishedAt),
            "notifications": .object(["seen": n(c.notificationsSeen), "backfilled": n(c.notificationsBackfilled),
                                      "alreadyStored": n(c.notificationsAlreadyStored), "refused": n(c.notificationsRefused)]),
            "statuses": .object(["subscriptionsAsked": n(c.subscriptionsAsked), "answersStored": n(c.statusAnswersStored),
                                 "answersUnchanged": n(c.statusAnswersUnchanged), "unknownToApple": n(c.unknownToApple),
                                 "rateLimitedWaits": n(c.rateLimitedWaits)]),
            "transactions": .object(["subscriptionsAsked": n(c.historySubscriptionsAsked), "stored": n(c.historyTransactionsStored)]),
            "outcomes": .object(outcomes.mapValues(JSONValue.string)),
            "backfilledUpTo": .object(backfilledUpTo.mapValues(JSONValue.integer)),
            "windowsClamped": n(c.windowsClamped),
            "apple": .object(["flaggedSubscriptions": n(c.appleFlagged),
                              "disagreements": .array(appleDisagreements.map(\.json))]),
            "drift": .array(drift.map(\.json)),
            "problems": .array(problems.map { p in
                .object(["stage": .string(p.stage), "environment": .string(p.environment),
                         "originalTransactionId": .optional(p.originalTransactionId), "message": .string(p.message)])
            }),
        ])
    }

    /// A human-readable report for the command line: counts, then one line per drifted subscription.
    public var text: String {
        let c = counts
        var lines = [
            "reconciliation \(runId)\(dryRun ? " (dry run: nothing stored)" : ""): \(environments.joined(separator: ", ")), window \(since)…\(until) ms",
            "notifications: \(c.notificationsSeen) in the window, \(c.notificationsBackfilled) backfilled, \(c.notificationsAlreadyStored) already stored, \(c.notificationsRefused) refused",
            "statuses: \(c.subscriptionsAsked) subscriptions asked, \(c.statusAnswersStored) answers stored, \(c.statusAnswersUnchanged) unchanged, \(c.unknownToApple) unknown to Apple, \(c.rateLimitedWaits) waits for rate limits",
            "transaction history: \(c.historySubscriptionsAsked) subscriptions asked, \(c.historyTransactionsStored) transactions stored",
            "drift: \(drift.count) subscription\(drift.count == 1 ? "" : "s") changed",
            "Apple's word: \(appleDisagreements.count) statement\(appleDisagreements.count == 1 ? "" : "s") the ledger disagrees with, \(c.appleFlagged) flagged since the last run",
        ]
        for (unit, outcome) in outcomes.sorted(by: { $0.key < $1.key }) where outcome != "ok" { lines.append("  \(unit): \(outcome)") }
        for a in appleDisagreements {
            lines.append("  \(a.key.environment) \(a.key.originalTransactionId): Apple \(AppleStatusCheck.name(of: a.appleStatus)) at \(a.signedAt), ledger \(a.ledgerStatus?.rawValue ?? "nothing") (event \(a.position))")
        }
        func describe(_ s: SubscriptionSnapshot?) -> String {
            guard let s else { return "(unknown)" }
            return "\(s.status.rawValue) \(s.productId ?? "-") expires \(s.expiresDate.map(String.init) ?? "-") autoRenew \(s.autoRenewStatus.map(String.init) ?? "-") entitlements [\(s.entitlements.joined(separator: ","))]"
        }
        for d in drift {
            lines.append("  \(d.key.environment) \(d.key.originalTransactionId): \(describe(d.before)) → \(describe(d.after))")
        }
        for p in problems {
            lines.append("  problem (\(p.stage), \(p.environment)\(p.originalTransactionId.map { " \($0)" } ?? "")): \(p.message)")
        }
        return lines.joined(separator: "\n")
    }
}
