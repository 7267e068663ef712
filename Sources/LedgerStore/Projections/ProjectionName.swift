import LedgerCore
internal import Postgres

/// The projections the ledger keeps, one checkpoint row each. All three are cut from the same
/// fold of a subscription's facts; they are separate so that one can be rebuilt alone (after a
/// catalog change only `entitlements` needs it) and so that one failing stops only itself.
public enum ProjectionName: String, Sendable, Hashable, CaseIterable, Codable, Comparable {
    /// The renewal view (one row per subscription) and the customer → subscriptions index.
    case subscriptions
    /// One row per transaction.
    case transactions
    /// Grants per customer, through the product catalog.
    case entitlements
    /// Refund cases (`RefundCaseFold`): not cut from subscription folds; `RefundCasesProjection`
    /// (Projection.swift) applies them, the same runner keeps them.
    case refundCases = "refund_cases"
    /// WeChat contract states (`WeChatContractState`), one per openid and product:
    /// `WeChatContractsProjection` (WeChat/WeChatContractProjection.swift).
    case wechatContracts = "wechat_contracts"
    /// The reports' daily rollups (`ReportsProjection`, Reports/ReportProjection.swift).
    case reports
    /// Apple's stated status beside the ledger's (`AppleStatusChecksProjection`, issue 20 item 2):
    /// not cut from subscription folds; kept by the catch-up worker.
    case appleStatus = "apple_status"
    /// Outbound webhook events derived from the facts (`WebhookEventsProjection`,
    /// Webhooks/WebhookEventsProjection.swift): live; it enqueues their deliveries in the outbox.
    case webhooks

    /// The projections cut from one fold of a subscription's facts (`Projector`).
    public static let subscriptionCuts: [ProjectionName] = [.subscriptions, .transactions, .entitlements]

    public static func < (a: ProjectionName, b: ProjectionName) -> Bool { a.rawValue < b.rawValue }

    /// Parses an operator's `--projection` value; the error lists the valid names.
    public static func parse(_ text: String) throws(ProjectionError) -> ProjectionName {
        guard let name = ProjectionName(rawValue: text) else { throw .unknownProjection(text) }
        return name
    }
}

/// Why a projection could not be read, written, rebuilt or advanced; each message says what to
/// do about it.
public enum ProjectionError: Error, Sendable, Equatable, CustomStringConvertible {
    case unknownProjection(String)
    /// The events after the checkpoint do not start right after it: something removed or never
    /// wrote a position. The projection stops rather than skip.
    case gap(projection: ProjectionName, checkpoint: Int64, found: Int64)
    /// An event could not be applied; the projection stopped before it.
    case eventFailed(projection: ProjectionName, position: Int64, message: String)
    /// The facts of schema version `version` met a gap in the log: they stopped instead of skipping.
    case factsGap(version: Int, checkpoint: Int64, found: Int64)
    /// The facts of an event could not be derived or stored; the facts stopped before it (and
    /// every projection with them).
    case factsFailed(version: Int, position: Int64, message: String)
    case rebuildInProgress
    /// A stored row does not read back (the schema and this build disagree).
    case corrupt(String)
    /// The database is unreachable or the connection broke: retry later (HTTP 503).
    case database(String)
    /// The database refused the statement itself (bad input, a constraint): retrying will not help.
    case refused(String)

    public var description: String {
        switch self {
        case .unknownProjection(let name):
            return "unknown projection '\(name)'; use one of: \(ProjectionName.allCases.map(\.rawValue).joined(separator: ", "))"
        case .gap(let projection, let checkpoint, let found):
            return "projection \(projection.rawValue) is at position \(checkpoint) but the next event is at \(found): positions must be gapless; the projection stopped instead of skipping. Check the event log's integrity (SELECT position FROM events WHERE position > \(checkpoint) ORDER BY position LIMIT 5)"
        case .eventFailed(let projection, let position, let message):
            return "projection \(projection.rawValue) stopped at the event at position \(position): \(message). Fix the cause (code or data), then run `ledger project --once`; the event is retried, never skipped"
        case .factsGap(let version, let checkpoint, let found):
            return "the facts v\(version) are at position \(checkpoint) but the next event is at \(found): positions must be gapless; the derivation stopped instead of skipping. Check the event log's integrity (SELECT position FROM events WHERE position > \(checkpoint) ORDER BY position LIMIT 5)"
        case .factsFailed(let version, let position, let message):
            return "the facts v\(version) stopped at the event at position \(position): \(message). Fix the cause (code or data), then run `ledger project --once`; the event is retried, never skipped"
        case .rebuildInProgress:
            return "another rebuild is running on this database; wait for it to finish (or for its session to end) and retry"
        case .corrupt(let why):
            return "a projection row cannot be read: \(why). Check that every migration is applied, then rebuild (`ledger rebuild`)"
        case .database(let why):
            return "the projection store failed: \(why)"
        case .refused(let why):
            return "the database refused the projection query: \(why)"
        }
    }

    init(_ error: any Error) {
        if let own = error as? ProjectionError { self = own; return }
        if let postgres = error as? PostgresError, postgres.kind == .decoding { self = .corrupt(postgres.description); return }
        if let postgres = error as? PostgresError {
            self = postgres.isUnavailable ? .database(postgres.description) : .refused(postgres.description)
            return
        }
        if let store = error as? StoreError {
            self = store.isUnavailable ? .database(store.description) : .refused(store.description)
            return
        }
        self = .database(String(describing: error))
    }
}
