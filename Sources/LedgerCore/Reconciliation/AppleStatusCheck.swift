import Foundation

/// Apple's word as a cross-check (issue 20 item 2): every `apple_status` fact (a V2 notification's
/// `data.status`, a Get All Subscription Statuses item's `status`) compared with the ledger's own
/// status at that signedDate.
///
/// Rule: Apple states the status "as of the signedDate" (App Store Server Notifications,
/// `data.status`; App Store Server API, `lastTransactionsItem.status`). The ledger's side is the
/// fold of the facts **signed by then** — every fact whose signedAt ≤ the statement's, plus the
/// facts of the statement's own event (its transaction and renewal info are what Apple based it
/// on) — evaluated at that signedDate and mapped to Apple's numbers (`SubscriptionStatus.appleStatus`).
/// A fact signed later never changes the verdict; a fact signed earlier that arrives later (a lost
/// notification backfilled) does, so the check is made twice:
/// - **now**: with every such fact the ledger holds (`agrees`; what the drift page lists);
/// - **on arrival**: with only those recorded at or before the statement's event (`arrivalAgrees`:
///   what the ledger believed when Apple's word reached it; `ledger_apple_status_disagreements_total`
///   counts these, so the count never goes down as the ledger heals).
/// Both are pure functions of the facts (positions and signed times), so the projection that keeps
/// them is rebuildable and order-independent.
///
/// Example: a REFUND is lost; the next DID_CHANGE_RENEWAL_STATUS says `status` 5 and carries the
/// transaction with its revocationDate: the snapshot states the revocation (fact schema 5), so
/// the fold says `revoked` (5) too — they agree. Were the transaction omitted, the fold would say
/// `active` (1): a disagreement, listed with both statuses and the notification as evidence, and
/// the next reconciliation fetches the customer's transaction history.
public struct AppleStatusCheck: Sendable, Hashable {
    public var key: SubscriptionKey
    /// The statement's event and fact.
    public var position: Int64
    public var ordinal: Int
    public var recordedAt: EpochMillis
    public var source: String
    public var message: String?
    public var signedAt: EpochMillis
    public var transactionId: String?
    /// Apple's status: 1 active, 2 expired, 3 billing retry, 4 grace period, 5 revoked.
    public var appleStatus: Int
    /// The fold's status at `signedAt` from every fact signed by then (nil: nothing in effect).
    public var ledgerStatus: SubscriptionStatus?
    /// The same from the facts recorded by the statement's arrival.
    public var arrivalLedgerStatus: SubscriptionStatus?
    /// Who the subscription belongs to, per the fold now (for the reconciliation's history fetch).
    public var customerId: String?

    public init(key: SubscriptionKey, position: Int64, ordinal: Int, recordedAt: EpochMillis, source: String, message: String?,
                signedAt: EpochMillis, transactionId: String?, appleStatus: Int, ledgerStatus: SubscriptionStatus?,
                arrivalLedgerStatus: SubscriptionStatus?, customerId: String?) {
        self.key = key
        self.position = position
        self.ordinal = ordinal
        self.recordedAt = recordedAt
        self.source = source
        self.message = message
        self.signedAt = signedAt
        self.transactionId = transactionId
        self.appleStatus = appleStatus
        self.ledgerStatus = ledgerStatus
        self.arrivalLedgerStatus = arrivalLedgerStatus
        self.customerId = customerId
    }

    public var agrees: Bool { Self.agree(appleStatus, ledgerStatus) }
    public var arrivalAgrees: Bool { Self.agree(appleStatus, arrivalLedgerStatus) }

    static func agree(_ apple: Int, _ ledger: SubscriptionStatus?) -> Bool {
        guard let ledger else { return false }
        return ledger.appleStatus == apple
    }

    /// Apple's name for a status number.
    public static func name(of status: Int) -> String {
        switch status {
        case 1: "ACTIVE"
        case 2: "EXPIRED"
        case 3: "BILLING_RETRY"
        case 4: "BILLING_GRACE_PERIOD"
        case 5: "REVOKED"
        default: "UNKNOWN(\(status))"
        }
    }

    /// The checks of every `apple_status` fact of `key` among `facts` (all of the subscription's
    /// facts), in (position, ordinal) order.
    public static func checks(key: SubscriptionKey, facts: [Fact]) -> [AppleStatusCheck] {
        checks(key: key, facts: facts, of: { _ in true })
    }

    /// The checks of the `apple_status` facts of `key` that `statement` selects; each still folds
    /// every fact of the subscription signed by then (`facts`: all of them).
    public static func checks(key: SubscriptionKey, facts: [Fact], of statement: (Fact) -> Bool) -> [AppleStatusCheck] {
        let mine = facts.filter { $0.subscription == key }
        let statements = mine.filter { $0.kind == .appleStatus && statement($0) }.sorted { ($0.position, $0.ordinal) < ($1.position, $1.ordinal) }
        if statements.isEmpty { return [] }
        // Ordered by signedAt, so "signed by then" is a prefix (the statement's own event added).
        let bySigned = mine.filter { $0.kind != .appleStatus }.sorted { $0.signedAt < $1.signedAt }
        var out: [AppleStatusCheck] = []
        for s in statements where status(of: s) != nil {
            let t = s.signedAt
            var now = SubscriptionFold(key: key)
            var arrival = SubscriptionFold(key: key)
            for f in bySigned {
                if f.signedAt > t && f.position != s.position { continue }
                now.apply(f)
                if f.position <= s.position { arrival.apply(f) }
            }
            if let check = check(s, key: key, now: now.state(at: t), arrival: arrival.state(at: t)) { out.append(check) }
        }
        return out
    }

    /// The check of statement `s` from `fold` instead of the subscription's facts, when `fold`
    /// answers both of its questions: `fold` holds every fact of the subscription recorded up to
    /// `s` (its own event's included) and none recorded after it, and none of them is signed
    /// after `s`. Then "signed by then" and "recorded before it" are both every fact folded, and
    /// the answer equals `checks(key:facts:)`'s. `.readFacts` when `fold` does not answer them
    /// (a fact signed later, or a fold of another kind); `.checked(nil)` for a statement without
    /// a status.
    public static func check(_ s: Fact, foldOfEverythingUpTo fold: SubscriptionFold) -> FoldAnswer {
        guard s.kind == .appleStatus, s.subscription == fold.key, !fold.isWeChat,
              fold.latestSignedAt.map({ $0 <= s.signedAt }) ?? true else { return .readFacts }
        var plain = fold
        plain.catalogPeriods = [:]  // as `checks` folds: the catalog's periods are WeChat's
        let state = plain.state(at: s.signedAt)
        return .checked(check(s, key: fold.key, now: state, arrival: state))
    }

    /// The checks of `statements` folded forward from `fold` (every fact of the subscription up to
    /// `foldPosition`) through `facts`, instead of from the subscription's history; nil where
    /// that is not the same answer as `checks(key:facts:)`, and the facts must be read. Either way
    /// `fold` is left the fold of every fact through the last of `facts` (a catch-up keeps it for
    /// its next pass).
    /// - `facts`: every fact of the subscription recorded after `foldPosition`, and those after
    ///   the first statement, in (position, ordinal) order; nothing recorded after the last of them
    ///   is considered.
    /// - A statement at or before `foldPosition` is answered only when no fact lies between it
    ///   and `foldPosition` (then `fold` is the fold up to it).
    /// - Each statement is answered on the fold up to its own event when none of those facts is
    ///   signed after it (`check(_:foldOfEverythingUpTo:)`) and no later one is signed by then
    ///   (`mayChange`): then "signed by then" and "recorded by then" are the same facts.
    /// A pass over a range that brings several statements of one subscription (notifications
    /// arrive in bursts) answers each of them this way, in one walk.
    public static func checks(of statements: [Fact], folding fold: inout SubscriptionFold, from foldPosition: Int64,
                              through facts: [Fact]) -> [AppleStatusCheck]? {
        var next = 0
        var out: [AppleStatusCheck]? = []
        for s in statements.sorted(by: { ($0.position, $0.ordinal) < ($1.position, $1.ordinal) }) {
            if s.position <= foldPosition {
                guard !facts.contains(where: { $0.position > s.position && $0.position <= foldPosition }) else { out = nil; break }
            } else {
                while next < facts.count, facts[next].position <= s.position {
                    if facts[next].position > foldPosition { fold.apply(facts[next]) }
                    next += 1
                }
            }
            guard !mayChange(statementSignedAt: s.signedAt, arrived: facts.lazy.filter { $0.position > s.position }),
                  case .checked(let check) = Self.check(s, foldOfEverythingUpTo: fold) else { out = nil; break }
            if let check { out?.append(check) }
        }
        for fact in facts[next...] where fact.position > foldPosition { fold.apply(fact) }
        return out
    }

    public enum FoldAnswer: Sendable {
        case checked(AppleStatusCheck?)
        case readFacts
    }

    /// Apple's status in statement `s` (nil: it states none, and is not checked).
    static func status(of s: Fact) -> Int? { s.details["status"]?.int64.flatMap { Int(exactly: $0) } }

    /// The check of `s` given the ledger's state as of its signing: from every fact signed by then
    /// (`now`) and from those also recorded before it (`arrival`).
    static func check(_ s: Fact, key: SubscriptionKey, now: SubscriptionState?, arrival: SubscriptionState?) -> AppleStatusCheck? {
        guard let status = status(of: s) else { return nil }
        return AppleStatusCheck(
            key: key, position: s.position, ordinal: s.ordinal, recordedAt: s.recordedAt,
            source: s.details["source"]?.text ?? (s.origin == .appleAPI ? "api" : "notification"), message: s.message,
            signedAt: s.signedAt, transactionId: s.transactionId, appleStatus: status, ledgerStatus: now?.status,
            arrivalLedgerStatus: arrival?.status, customerId: now?.customerId)
    }

    /// Whether facts arriving after a statement can change its check: only a fact signed by the
    /// statement's time joins its fold (`checks`: the fold as of `signedAt`, and on arrival, the
    /// facts recorded before it). So when `arrived` (facts of the subscription recorded after the
    /// statement, its own event excepted) are all signed later, the check stands as it was.
    public static func mayChange(statementSignedAt t: EpochMillis, arrived: some Sequence<Fact>) -> Bool {
        arrived.contains { $0.kind != .appleStatus && $0.signedAt <= t }
    }

    /// As JSON for `GET /v1/admin/drift` and reports.
    public var json: JSONValue {
        .object([
            "environment": .string(key.environment), "originalTransactionId": .string(key.originalTransactionId),
            "customerId": .optional(customerId), "source": .string(source), "message": .optional(message),
            "signedDate": .integer(signedAt), "recordedAt": .integer(recordedAt),
            "appleStatus": .integer(Int64(appleStatus)), "appleStatusName": .string(Self.name(of: appleStatus)),
            "ledgerStatus": .optional(ledgerStatus?.rawValue),
            "ledgerAppleStatus": ledgerStatus.map { .integer(Int64($0.appleStatus)) } ?? .null,
            "agrees": .bool(agrees), "arrivalLedgerStatus": .optional(arrivalLedgerStatus?.rawValue),
            "agreedOnArrival": .bool(arrivalAgrees), "transactionId": .optional(transactionId),
            "evidence": .object(["position": .integer(position), "ordinal": .integer(Int64(ordinal))]),
        ])
    }
}

/// RENEWAL_EXTENSION/SUMMARY checked against the RENEWAL_EXTENDED notifications received (issue 20
/// item 1). Apple: "the App Store completed extending the renewal date for all eligible
/// subscribers" — `succeededCount` subscriptions, each announced by its own RENEWAL_EXTENDED
/// (App Store Server Notifications, notificationType RENEWAL_EXTENDED / RENEWAL_EXTENSION).
///
/// Rule: the RENEWAL_EXTENDED notifications of the summary's product and environment (distinct
/// subscriptions) signed after the previous summary of that product (else up to `window` before)
/// and by the summary's signedDate are the ones it counts; fewer than `succeededCount` is a
/// shortfall — notifications the ledger never received (a drift problem: reconciliation's backfill
/// asks Apple for them). Example: SUMMARY succeededCount 3 and two RENEWAL_EXTENDED received →
/// shortfall 1.
public struct ExtensionSummaryCheck: Sendable, Hashable {
    public var position: Int64
    public var signedAt: EpochMillis
    public var environment: String?
    public var requestIdentifier: String
    public var productId: String?
    public var succeededCount: Int64
    public var failedCount: Int64?
    /// Distinct subscriptions whose RENEWAL_EXTENDED the ledger holds in the window.
    public var received: Int
    public var windowStart: EpochMillis

    /// How far back a summary looks when no earlier summary of its product bounds it: Apple says
    /// a mass extension "may take hours, or even days" (Get Status of Subscription Renewal Date
    /// Extensions).
    public static let window: EpochMillis = 14 * 86_400_000

    public var shortfall: Int64 { max(0, succeededCount - Int64(received)) }

    /// `summaries`: `extension_summary` facts; `extended`: transaction facts with message
    /// RENEWAL_EXTENDED (any subscription). Checks in signedAt order.
    public static func checks(summaries: [Fact], extended: [Fact]) -> [ExtensionSummaryCheck] {
        let ordered = summaries.filter { $0.kind == .extensionSummary }
            .sorted { ($0.signedAt, $0.position) < ($1.signedAt, $1.position) }
        var out: [ExtensionSummaryCheck] = []
        for (i, s) in ordered.enumerated() {
            let d = s.details
            guard let request = d["requestIdentifier"]?.text else { continue }
            let product = d["productId"]?.text, environment = d["environment"]?.text
            let previous = ordered[..<i].last { $0.details["productId"]?.text == product && $0.details["environment"]?.text == environment }
            let start = previous?.signedAt ?? (s.signedAt - window)
            let received = Set(extended.filter { f in
                f.kind == .transaction && f.message == "RENEWAL_EXTENDED" && f.signedAt > start && f.signedAt <= s.signedAt
                    && (product == nil || f.transaction?.productId == product)
                    && (environment == nil || f.subscription?.environment == environment)
            }.compactMap(\.subscription)).count
            out.append(ExtensionSummaryCheck(
                position: s.position, signedAt: s.signedAt, environment: environment, requestIdentifier: request,
                productId: product, succeededCount: d["succeededCount"]?.int64 ?? 0, failedCount: d["failedCount"]?.int64,
                received: received, windowStart: start))
        }
        return out
    }

    public var json: JSONValue {
        .object([
            "requestIdentifier": .string(requestIdentifier), "productId": .optional(productId), "environment": .optional(environment),
            "signedDate": .integer(signedAt), "succeededCount": .integer(succeededCount), "failedCount": .optional(failedCount),
            "renewalExtendedReceived": .integer(Int64(received)), "shortfall": .integer(shortfall),
            "windowStart": .integer(windowStart), "evidence": .object(["position": .integer(position)]),
        ])
    }
}
